#!/usr/bin/python3
"""Hold `actmem estimate` to measured PyTorch activation memory, case by case (GitHub issue 4).

  /usr/bin/python3 validation/run_validation.py --actmem build/actmem [--filter SUBSTR]
  /usr/bin/python3 validation/run_validation.py --list
  /usr/bin/python3 validation/run_validation.py --measure-only [--filter SUBSTR] [--all-tensors]

Each case writes an HF-style config.json, measures the reference model (models.py) with
saved-tensor hooks (measure.py) and compares per_layer_bytes and total_bytes with the CLI's JSON
within TOLERANCE. Exit status 1 when any case fails (or the CLI is missing / errors).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import expected  # noqa: E402
import measure  # noqa: E402
import models  # noqa: E402
import llama4_model  # noqa: E402
import parallel_models  # noqa: E402

TOLERANCE = 0.01  # relative, on per-layer and on total bytes

torch.set_num_threads(2)

# ---------------------------------------------------------------------------------------------
# model shapes (odd on purpose: h = 320, V = 1003, heads not powers of two, GQA, d != h/a)

GPT2 = dict(family="gpt2", hidden=320, layers=3, heads=5, kv_heads=5, head_dim=64, ffn=1280, vocab=1003, max_positions=128)
GPT2_ODD = dict(GPT2, hidden=336, heads=7, kv_heads=7, head_dim=48, ffn=900, vocab=1013, layers=4)
LLAMA_MHA = dict(family="llama", hidden=320, layers=3, heads=5, kv_heads=5, head_dim=64, ffn=864, vocab=1003, eps=1e-6)
LLAMA_GQA = dict(LLAMA_MHA, heads=10, kv_heads=2, head_dim=32)
LLAMA_HD = dict(LLAMA_MHA, heads=6, kv_heads=2, head_dim=80, ffn=736)  # a*d = 480 != h
LLAMA_TIED = dict(LLAMA_GQA, tie_embeddings=True, layers=2)
QWEN2 = dict(LLAMA_MHA, family="qwen2", heads=10, kv_heads=2, head_dim=32, attention_bias=True, ffn=1000, vocab=1009)
MIXTRAL = dict(LLAMA_MHA, family="mixtral", heads=10, kv_heads=2, head_dim=32, ffn=224, experts=4, top_k=2)
MIXTRAL_TOP1 = dict(MIXTRAL, experts=3, top_k=1, ffn=288)
MIXTRAL_TOP3 = dict(MIXTRAL, experts=5, top_k=3, ffn=160, heads=6, head_dim=48)
# families whose HF modeling code saves other tensors than Llama's (2 layers: keeps the suite fast)
GEMMA = dict(family="gemma", hidden=320, layers=2, heads=5, kv_heads=1, head_dim=72, ffn=880, vocab=1009, eps=1e-6, tie_embeddings=True)
GEMMA2 = dict(GEMMA, family="gemma2", hidden=336, heads=6, kv_heads=2, head_dim=56, ffn=900, vocab=1013, query_pre_attn_scalar=64, attn_softcap=50.0, final_softcap=30.0)
QWEN3 = dict(LLAMA_MHA, family="qwen3", layers=2, heads=10, kv_heads=2, head_dim=40, vocab=1009)  # a*d = 400 != h
QWEN3_MHA = dict(QWEN3, heads=5, kv_heads=5, head_dim=48, ffn=736)
PHI3 = dict(LLAMA_MHA, family="phi3", layers=2, vocab=1009, ffn=900)
PHI3_GQA = dict(PHI3, heads=10, kv_heads=2, head_dim=32, rotary_pct=0.75)
QWEN3_MOE = dict(QWEN3, family="qwen3_moe", ffn=192, experts=4, top_k=2)
QWEN3_MOE_NONORM = dict(QWEN3_MOE, heads=6, kv_heads=6, head_dim=48, experts=5, top_k=3, ffn=160, norm_topk_prob=False)
# Qwen2-MoE: Qwen2 attention (qkv bias) + routed experts + a sigmoid-gated shared expert; dense
# layers by mlp_only_layers / decoder_sparse_step (3 layers: the middle one is sparse)
QWEN2_MOE = dict(QWEN2, family="qwen2_moe", layers=3, ffn=176, experts=4, top_k=2, dense_ffn=600, shared_ffn=400,
                 mlp_only_layers=(2,), norm_topk_prob=False)
QWEN2_MOE_STEP2 = dict(QWEN2_MOE, heads=5, kv_heads=5, head_dim=64, experts=5, top_k=3, ffn=144, shared_ffn=336,
                       mlp_only_layers=(), sparse_step=2, norm_topk_prob=True)
# DeepSeek-V3: MLA (q_lora_rank 96, kv_lora_rank 72, nope 32 + rope 16 = 48 != v 40), sigmoid-routed
# MoE (8 experts in 4 groups, 2 groups kept, top-3, 2 shared experts), first layer dense
DSV3 = dict(family="deepseek_v3", hidden=320, layers=3, heads=5, kv_heads=5, head_dim=48, ffn=112, vocab=1009,
            eps=1e-6, experts=8, top_k=3, dense_ffn=640, shared_ffn=224, first_dense=1, n_group=4, topk_group=2,
            routed_scaling=2.5, q_lora_rank=96, kv_lora_rank=72, qk_nope_dim=32, qk_rope_dim=16, v_head_dim=40)
# q_proj straight from h (q_lora_rank null), v head dim = q/k head dim (no flash padding), no
# top-k normalization, two dense layers (the middle one is dense), plain rope
DSV3_NOLORA = dict(DSV3, heads=6, kv_heads=6, head_dim=56, q_lora_rank=0, kv_lora_rank=80, qk_nope_dim=40,
                   v_head_dim=56, experts=6, n_group=3, topk_group=2, top_k=2, first_dense=2,
                   norm_topk_prob=False, rope_interleave=False, shared_ffn=112)
NEOX = dict(family="gpt_neox", hidden=320, layers=2, heads=5, kv_heads=5, head_dim=64, ffn=1280, vocab=1003, rotary_pct=0.25, attention_bias=True)
NEOX_SEQ = dict(NEOX, hidden=336, heads=7, kv_heads=7, head_dim=48, ffn=900, vocab=1013, rotary_pct=0.5, parallel_residual=False)
# GPTBigCode (StarCoder): fused c_attn, MQA (multi_query) or MHA, learned positions, gelu_pytorch_tanh
BIGCODE = dict(family="gpt_bigcode", hidden=320, layers=2, heads=5, kv_heads=1, head_dim=64, ffn=1280, vocab=1003,
               max_positions=128)
BIGCODE_MHA = dict(BIGCODE, hidden=336, heads=7, kv_heads=7, head_dim=48, ffn=900, vocab=1013, layers=3)
# Phi-1.5/2: one LayerNorm, parallel attention + MLP, biases, partial rotary, gelu_new, lm_head bias
PHI = dict(family="phi", hidden=320, layers=2, heads=5, kv_heads=5, head_dim=64, ffn=1280, vocab=1009,
           rotary_pct=0.5, attention_bias=True, o_bias=True, lm_head_bias=True)
PHI_GQA = dict(PHI, hidden=336, heads=6, kv_heads=2, head_dim=56, ffn=900, vocab=1013, rotary_pct=0.4)
# OLMo 2: post-norms only, q_norm / k_norm over the full projections, fp32 weight multiply in RMSNorm
OLMO2 = dict(LLAMA_MHA, family="olmo2", layers=2, vocab=1009)
OLMO2_GQA = dict(OLMO2, heads=10, kv_heads=2, head_dim=32, ffn=736)
# Falcon-7B-like (multi_query, parallel_attn, one LayerNorm) and the new decoder architecture
# (40B/180B: num_kv_heads groups, ln_attn + ln_mlp, or num_ln_in_parallel_attn = 1)
FALCON = dict(family="falcon", hidden=320, layers=2, heads=5, kv_heads=1, head_dim=64, ffn=1280, vocab=1003,
              tie_embeddings=True)
FALCON_NEW = dict(FALCON, hidden=384, heads=8, kv_heads=2, head_dim=48, ffn=1536, vocab=1009, new_arch=True)
FALCON_NEW_1LN = dict(FALCON_NEW, num_ln=1, layers=3)
# Gemma 3 text: sliding_window_pattern 2 over 4 layers (sliding, global, sliding, global): two of
# each, so the local and global RoPE tables are each saved by two layers (shared)
GEMMA3 = dict(family="gemma3_text", hidden=320, layers=4, heads=5, kv_heads=1, head_dim=72, ffn=880, vocab=1009,
              eps=1e-6, tie_embeddings=True, query_pre_attn_scalar=64, sliding_pattern=2, sliding_window=16)
GEMMA3_GQA = dict(GEMMA3, hidden=336, heads=6, kv_heads=2, head_dim=56, ffn=900, vocab=1013)
# Llama 4 text (llama4_model.py): 4 layers, MoE every 2nd (interleave_moe_layer_step 2: layers 1, 3)
# with 4 experts top-1 and a shared expert, dense layers of intermediate_size_mlp; layer 3 NoPE (every
# 4th), the RoPE layers chunked at 16 < s (eager: two (b, 1, s, s) masks), L2 q/k norm, temperature
# tuning (floor_scale 4: scales > 1 within s); the middle layer (2) is a dense RoPE layer
LLAMA4 = dict(family="llama4_text", hidden=320, layers=4, heads=10, kv_heads=2, head_dim=32, ffn=160, dense_ffn=448,
              vocab=1009, experts=4, top_k=1, sparse_step=2, attention_chunk=16, floor_scale=4.0)
# sdpa passes no mask only while s < attention_chunk_size (else CUDA leaves the flash kernel)
LLAMA4_SDPA = dict(LLAMA4, attention_chunk=64)
# every layer MoE, no_rope_layers [1, 0, 1]: the middle layer is a NoPE MoE layer; MHA (no repeat_kv);
# the config.json is the Llama4ForConditionalGeneration wrapper (text_config)
LLAMA4_NOPE = dict(LLAMA4, layers=3, heads=8, kv_heads=8, head_dim=40, sparse_step=1, no_rope_layers=(1, 0, 1),
                   wrapper=True)
# Maverick-like: no q/k norm, no temperature tuning, 2 of 5 experts
LLAMA4_PLAIN = dict(LLAMA4, experts=5, top_k=2, use_qk_norm=False, temperature_tuning=False)
# Encoders (post-LN, bidirectional, token types, no causal mask): BERT with the MLM head (tied
# decoder) or pooler + classifier; RoBERTa's position ids from input_ids (a (b, s) int64 tensor),
# P = 2 + s_max like roberta-base's 514, RobertaClassificationHead (no pooler)
BERT = dict(family="bert", hidden=320, layers=2, heads=5, kv_heads=5, head_dim=64, ffn=1280, vocab=1003,
            max_positions=128, eps=1e-12, head="mlm")
BERT_CLS = dict(BERT, hidden=336, heads=7, kv_heads=7, head_dim=48, ffn=900, vocab=1013, head="classifier", num_labels=3)
ROBERTA = dict(BERT, family="roberta", vocab=1009, max_positions=130, eps=1e-5, type_vocab=1)
ROBERTA_CLS = dict(ROBERTA, head="classifier", num_labels=4, layers=3)


# one tensor/sequence/context-parallel rank (parallel_models.py): heads, KV heads, FFN divisible by 4
GPT_TP = dict(GPT2, heads=8, kv_heads=8, head_dim=40, vocab=1004)
GPT_TP_ODDV = dict(GPT_TP, vocab=1003, layers=2)  # V/t rounded up
LLAMA_TP_GQA = dict(LLAMA_MHA, heads=12, kv_heads=4, head_dim=32, vocab=1004)
LLAMA_TP_MHA = dict(LLAMA_MHA, heads=8, kv_heads=8, head_dim=40, ffn=736, vocab=1012)
LLAMA_TP_KVREP = dict(LLAMA_MHA, heads=8, kv_heads=2, head_dim=48, vocab=1004)  # kv < t at tp 4


def case(name, model, fw, attn, rc, dtype, s, b, hd=0.0, ad=0.0, tp=1, sp=False, cp=1):
    par = parallel_models.ParallelConfig(tp, sp, cp) if (tp, sp, cp) != (1, False, 1) else None
    return dict(
        name=name,
        model=models.ModelConfig(**model),
        run=models.RunConfig(fw, attn, rc, dtype, seq_len=s, micro_batch=b, hidden_dropout=hd, attention_dropout=ad),
        par=par,
    )


def rank(name, model, attn, rc, dtype, s, b, hd=0.0, ad=0.0, tp=1, sp=False, cp=1):
    """A case of kind 'rank': one parallel rank of the megatron model, compared with
    `actmem estimate --framework megatron --tp T [--sp] --cp C`."""
    return case(name, model, "megatron", attn, rc, dtype, s, b, hd, ad, tp, sp, cp)


def case_nr(name, model, fw, attn, dtype, s, b, hd=0.0, ad=0.0):
    """Full recomputation with the non-reentrant checkpoint (use_reentrant=False)."""
    c = case(name, model, fw, attn, "full", dtype, s, b, hd, ad)
    c["run"].checkpoint = "non-reentrant"
    return c


def case_v(name, model, attn, rc, dtype, s, b, hd=0.0, ad=0.0, version="4.44"):
    """An hf case under another transformers version's code layout (--hf-version)."""
    c = case(name, model, "hf", attn, rc, dtype, s, b, hd, ad)
    c["run"].hf_version = version
    return c


def case_5(name, model, attn, rc, dtype, s, b, impl="grouped_mm", hd=0.0, ad=0.0):
    """An hf case under transformers 5 (--hf-version 5): fused 3-D experts run by `impl`
    (hf5_models.py), non-reentrant checkpointing (the 5.x gradient_checkpointing_enable default)."""
    c = case(name, model, "hf", attn, rc, dtype, s, b, hd, ad)
    c["run"].hf_version = "5"
    c["run"].experts_impl = impl
    if rc == "full":
        c["run"].checkpoint = "non-reentrant"
    return c


CASES = [
    # GPT-2, HF
    case("gpt2-hf-eager-none-bf16-drop", GPT2, "hf", "eager", "none", "bf16", 48, 3, 0.1, 0.1),
    case("gpt2-hf-eager-none-fp32-drop", GPT2, "hf", "eager", "none", "fp32", 37, 2, 0.1, 0.1),
    case("gpt2-hf-eager-none-bf16-nodrop", GPT2, "hf", "eager", "none", "bf16", 45, 3),
    case("gpt2-hf-eager-none-bf16-odd", GPT2_ODD, "hf", "eager", "none", "bf16", 29, 5, 0.1, 0.0),
    case("gpt2-hf-flash-none-bf16-drop", GPT2, "hf", "flash", "none", "bf16", 48, 3, 0.1, 0.1),
    case("gpt2-hf-sdpa-none-fp32", GPT2, "hf", "sdpa", "none", "fp32", 37, 3),
    case("gpt2-hf-eager-full-bf16-drop", GPT2, "hf", "eager", "full", "bf16", 48, 3, 0.1, 0.1),
    case("gpt2-hf-flash-full-fp32", GPT2_ODD, "hf", "flash", "full", "fp32", 33, 3, 0.1, 0.0),
    # full recomputation: the checkpoint keeps the positional causal mask (eager) and, non-reentrant,
    # everything passed in through its closure
    case("gpt2-hf-eager-full-fp32-odd", GPT2_ODD, "hf", "eager", "full", "fp32", 41, 2),
    case_nr("gpt2-hf-eager-full-bf16-nonreentrant", GPT2, "hf", "eager", "bf16", 40, 2, 0.1, 0.1),
    case_nr("gpt2-hf-sdpa-full-fp32-nonreentrant", GPT2_ODD, "hf", "sdpa", "fp32", 29, 3),
    # transformers 4.44: loss over the s-1 shifted rows, GPT-2 without the fp32 upcast
    case_v("gpt2-hf-eager-none-bf16-drop-hf444", GPT2, "eager", "none", "bf16", 48, 3, 0.1, 0.1),
    case_v("gpt2-hf-flash-full-fp32-hf444", GPT2_ODD, "flash", "full", "fp32", 33, 3),
    # GPT, Megatron
    case("gpt2-megatron-eager-none-bf16-korthikanti", GPT2, "megatron", "eager", "none", "bf16", 48, 3, 0.1, 0.1),
    case("gpt2-megatron-eager-none-fp32-drop", GPT2, "megatron", "eager", "none", "fp32", 37, 2, 0.1, 0.1),
    case("gpt2-megatron-eager-none-bf16-nodrop", GPT2_ODD, "megatron", "eager", "none", "bf16", 41, 3),
    case("gpt2-megatron-flash-none-bf16-drop", GPT2, "megatron", "flash", "none", "bf16", 48, 3, 0.1, 0.1),
    case("gpt2-megatron-eager-selective-bf16-drop", GPT2, "megatron", "eager", "selective", "bf16", 48, 3, 0.1, 0.1),
    case("gpt2-megatron-flash-selective-fp32", GPT2_ODD, "megatron", "flash", "selective", "fp32", 29, 3),
    case("gpt2-megatron-eager-full-bf16-drop", GPT2, "megatron", "eager", "full", "bf16", 48, 3, 0.1, 0.1),
    case("gpt2-megatron-sdpa-none-fp32-odd", GPT2_ODD, "megatron", "sdpa", "none", "fp32", 37, 3, 0.1, 0.0),
    # Llama, HF
    case("llama-hf-eager-none-bf16-mha", LLAMA_MHA, "hf", "eager", "none", "bf16", 48, 3),
    case("llama-hf-eager-none-bf16-gqa", LLAMA_GQA, "hf", "eager", "none", "bf16", 37, 3),
    case("llama-hf-eager-none-fp32-gqa", LLAMA_GQA, "hf", "eager", "none", "fp32", 37, 3),
    case("llama-hf-eager-none-bf16-gqa-attndrop", LLAMA_GQA, "hf", "eager", "none", "bf16", 41, 3, 0.0, 0.1),
    case("llama-hf-eager-none-bf16-headdim", LLAMA_HD, "hf", "eager", "none", "bf16", 33, 3),
    case("llama-hf-flash-none-bf16-gqa", LLAMA_GQA, "hf", "flash", "none", "bf16", 37, 3),
    case("llama-hf-flash-none-fp32-headdim", LLAMA_HD, "hf", "flash", "none", "fp32", 45, 3),
    case("llama-hf-sdpa-none-bf16-headdim", LLAMA_HD, "hf", "sdpa", "none", "bf16", 60, 2),
    case("llama-hf-flash-none-bf16-tied", LLAMA_TIED, "hf", "flash", "none", "bf16", 37, 3),
    case("llama-hf-eager-full-bf16-gqa", LLAMA_GQA, "hf", "eager", "full", "bf16", 37, 3),
    case_nr("llama-hf-eager-full-bf16-gqa-nonreentrant", LLAMA_GQA, "hf", "eager", "bf16", 44, 2),
    case_nr("llama-hf-flash-full-fp32-headdim-nonreentrant", LLAMA_HD, "hf", "flash", "fp32", 33, 3),
    case("llama-hf-sdpa-full-bf16-headdim", LLAMA_HD, "hf", "sdpa", "full", "bf16", 41, 2),
    case_v("llama-hf-flash-none-bf16-gqa-hf444", LLAMA_GQA, "flash", "none", "bf16", 37, 3),
    case_v("qwen2-hf-eager-full-bf16-hf444", QWEN2, "eager", "full", "bf16", 29, 2),
    case("llama-hf-flash-full-fp32-mha", LLAMA_MHA, "hf", "flash", "full", "fp32", 48, 3),
    # Llama, Megatron
    case("llama-megatron-eager-none-bf16-mha", LLAMA_MHA, "megatron", "eager", "none", "bf16", 48, 3),
    case("llama-megatron-eager-none-bf16-gqa", LLAMA_GQA, "megatron", "eager", "none", "bf16", 37, 3),
    case("llama-megatron-eager-none-bf16-gqa-drop", LLAMA_GQA, "megatron", "eager", "none", "bf16", 37, 3, 0.1, 0.1),
    case("llama-megatron-flash-none-bf16-gqa", LLAMA_GQA, "megatron", "flash", "none", "bf16", 37, 3),
    case("llama-megatron-flash-none-fp32-headdim", LLAMA_HD, "megatron", "flash", "none", "fp32", 45, 3),
    case("llama-megatron-flash-none-bf16-mha-drop", LLAMA_MHA, "megatron", "flash", "none", "bf16", 48, 3, 0.1, 0.1),
    case("llama-megatron-eager-selective-bf16-gqa", LLAMA_GQA, "megatron", "eager", "selective", "bf16", 37, 3),
    case("llama-megatron-eager-selective-bf16-mha", LLAMA_MHA, "megatron", "eager", "selective", "bf16", 48, 3),
    case("llama-megatron-flash-selective-bf16-headdim", LLAMA_HD, "megatron", "flash", "selective", "bf16", 33, 3),
    case("llama-megatron-eager-full-fp32-gqa", LLAMA_GQA, "megatron", "eager", "full", "fp32", 37, 3),
    case("llama-megatron-sdpa-full-bf16-gqa", LLAMA_GQA, "megatron", "sdpa", "full", "bf16", 60, 2),
    case("llama-megatron-flash-full-bf16-headdim", LLAMA_HD, "megatron", "flash", "full", "bf16", 45, 3),
    # Qwen2 (qkv bias)
    case("qwen2-hf-eager-none-bf16", QWEN2, "hf", "eager", "none", "bf16", 37, 3),
    case("qwen2-hf-flash-none-fp32", QWEN2, "hf", "flash", "none", "fp32", 37, 3),
    case("qwen2-hf-sdpa-full-bf16", QWEN2, "hf", "sdpa", "full", "bf16", 50, 3),
    case("qwen2-megatron-flash-none-bf16", QWEN2, "megatron", "flash", "none", "bf16", 37, 3),
    case("qwen2-megatron-eager-selective-fp32", QWEN2, "megatron", "eager", "selective", "fp32", 29, 3),
    # Mixtral (MoE, hf)
    case("mixtral-hf-eager-none-bf16", MIXTRAL, "hf", "eager", "none", "bf16", 37, 3),
    case("mixtral-hf-flash-none-bf16", MIXTRAL, "hf", "flash", "none", "bf16", 48, 3),
    case("mixtral-hf-flash-none-fp32-top1", MIXTRAL_TOP1, "hf", "flash", "none", "fp32", 41, 3),
    case("mixtral-hf-eager-none-fp32-top3", MIXTRAL_TOP3, "hf", "eager", "none", "fp32", 29, 3),
    case("mixtral-hf-sdpa-full-bf16", MIXTRAL, "hf", "sdpa", "full", "bf16", 37, 3),
    # One tensor / sequence / context parallel rank (megatron), kind "rank"
    rank("gpt2-megatron-tp2-eager-none-bf16-drop", GPT_TP, "eager", "none", "bf16", 37, 3, 0.1, 0.1, tp=2),
    rank("gpt2-megatron-tp2-sp-eager-none-bf16-drop", GPT_TP, "eager", "none", "bf16", 38, 3, 0.1, 0.1, tp=2, sp=True),
    rank("gpt2-megatron-tp4-eager-selective-bf16-drop", GPT_TP, "eager", "selective", "bf16", 37, 2, 0.1, 0.1, tp=4),
    rank("gpt2-megatron-tp4-sp-eager-selective-bf16-drop", GPT_TP, "eager", "selective", "bf16", 44, 3, 0.1, 0.1, tp=4, sp=True),
    rank("gpt2-megatron-tp4-sp-flash-none-fp32-drop", GPT_TP, "flash", "none", "fp32", 36, 3, 0.1, 0.0, tp=4, sp=True),
    rank("gpt2-megatron-tp2-sp-eager-full-bf16-drop", GPT_TP, "eager", "full", "bf16", 38, 3, 0.1, 0.1, tp=2, sp=True),
    rank("gpt2-megatron-tp4-eager-full-fp32", GPT_TP, "eager", "full", "fp32", 37, 2, tp=4),
    rank("gpt2-megatron-tp2-sp-flash-none-bf16-oddvocab", GPT_TP_ODDV, "flash", "none", "bf16", 38, 2, 0.1, 0.0, tp=2, sp=True),
    rank("llama-megatron-tp2-eager-none-bf16-gqa", LLAMA_TP_GQA, "eager", "none", "bf16", 37, 3, tp=2),
    rank("llama-megatron-tp2-sp-eager-none-bf16-gqa", LLAMA_TP_GQA, "eager", "none", "bf16", 38, 3, tp=2, sp=True),
    rank("llama-megatron-tp4-flash-none-bf16-gqa", LLAMA_TP_GQA, "flash", "none", "bf16", 37, 3, tp=4),
    rank("llama-megatron-tp4-sp-flash-none-bf16-gqa", LLAMA_TP_GQA, "flash", "none", "bf16", 44, 3, tp=4, sp=True),
    rank("llama-megatron-tp2-sp-eager-selective-bf16-gqa-drop", LLAMA_TP_GQA, "eager", "selective", "bf16", 38, 3, 0.1, 0.1, tp=2, sp=True),
    rank("llama-megatron-tp4-sp-flash-selective-fp32-gqa", LLAMA_TP_GQA, "flash", "selective", "fp32", 36, 2, tp=4, sp=True),
    rank("llama-megatron-tp4-sp-eager-full-bf16-gqa", LLAMA_TP_GQA, "eager", "full", "bf16", 36, 3, tp=4, sp=True),
    rank("llama-megatron-tp2-flash-full-bf16-gqa", LLAMA_TP_GQA, "flash", "full", "bf16", 37, 3, tp=2),
    rank("llama-megatron-tp2-eager-none-bf16-mha", LLAMA_TP_MHA, "eager", "none", "bf16", 37, 3, tp=2),
    rank("llama-megatron-tp4-eager-none-bf16-kvrep", LLAMA_TP_KVREP, "eager", "none", "bf16", 37, 3, tp=4),
    rank("llama-megatron-tp4-sp-flash-none-bf16-kvrep", LLAMA_TP_KVREP, "flash", "none", "bf16", 44, 2, 0.1, 0.0, tp=4, sp=True),
    rank("llama-megatron-cp2-flash-none-bf16-gqa", LLAMA_TP_GQA, "flash", "none", "bf16", 44, 3, cp=2),
    rank("llama-megatron-cp2-flash-selective-fp32-gqa", LLAMA_TP_GQA, "flash", "selective", "fp32", 36, 2, cp=2),
    rank("llama-megatron-cp2-tp2-sp-flash-none-bf16-gqa", LLAMA_TP_GQA, "flash", "none", "bf16", 44, 3, tp=2, sp=True, cp=2),
    rank("llama-megatron-cp2-tp2-flash-full-bf16-gqa", LLAMA_TP_GQA, "flash", "full", "bf16", 44, 3, tp=2, cp=2),
    rank("gpt2-megatron-cp2-flash-none-bf16-drop", GPT_TP, "flash", "none", "bf16", 48, 3, 0.1, 0.1, cp=2),
    rank("gpt2-megatron-cp4-tp2-sp-flash-none-fp32", GPT_TP, "flash", "none", "fp32", 48, 2, tp=2, sp=True, cp=4),
    # Gemma (fp32 (1 + w) RMSNorm, GeGLU tanh, sqrt(h) embedding scale, MQA, d != h/a, tied)
    case("gemma-hf-eager-none-bf16-mqa", GEMMA, "hf", "eager", "none", "bf16", 37, 3),
    case("gemma-hf-flash-none-fp32", GEMMA, "hf", "flash", "none", "fp32", 41, 2),
    case("gemma-hf-sdpa-full-bf16", GEMMA, "hf", "sdpa", "full", "bf16", 33, 3),
    # Gemma 2 (+ sandwich norms, attention and final logit softcapping, query_pre_attn_scalar)
    case("gemma2-hf-eager-none-bf16-softcap", GEMMA2, "hf", "eager", "none", "bf16", 45, 3),
    case("gemma2-hf-eager-none-fp32-softcap", GEMMA2, "hf", "eager", "none", "fp32", 29, 3),
    case("gemma2-hf-eager-none-bf16-attndrop", GEMMA2, "hf", "eager", "none", "bf16", 33, 2, 0.0, 0.1),
    case("gemma2-hf-flash-none-bf16", GEMMA2, "hf", "flash", "none", "bf16", 37, 3),
    # Qwen3 (q_norm / k_norm over head_dim before RoPE)
    case("qwen3-hf-eager-none-bf16-gqa", QWEN3, "hf", "eager", "none", "bf16", 37, 3),
    case("qwen3-hf-eager-none-fp32-mha", QWEN3_MHA, "hf", "eager", "none", "fp32", 29, 3),
    case("qwen3-hf-flash-none-fp32-gqa", QWEN3, "hf", "flash", "none", "fp32", 41, 2),
    case("qwen3-hf-sdpa-none-bf16-mha", QWEN3_MHA, "hf", "sdpa", "none", "bf16", 33, 3),
    # Qwen3-MoE (Qwen3 attention + the Mixtral-style expert loop; norm_topk_prob true and false)
    case("qwen3_moe-hf-eager-none-bf16", QWEN3_MOE, "hf", "eager", "none", "bf16", 37, 3),
    case("qwen3_moe-hf-flash-none-fp32-nonorm", QWEN3_MOE_NONORM, "hf", "flash", "none", "fp32", 33, 3),
    case("qwen3_moe-hf-eager-none-bf16-nonorm", QWEN3_MOE_NONORM, "hf", "eager", "none", "bf16", 29, 2),
    # Phi-3 (fused qkv_proj sliced into q | k | v, fused gate_up_proj, partial rotary)
    case("phi3-hf-eager-none-bf16-mha", PHI3, "hf", "eager", "none", "bf16", 37, 3),
    case("phi3-hf-flash-none-bf16-mha", PHI3, "hf", "flash", "none", "bf16", 41, 3),
    case("phi3-hf-eager-none-fp32-gqa-partial", PHI3_GQA, "hf", "eager", "none", "fp32", 33, 2),
    case("phi3-hf-sdpa-none-bf16-gqa-partial", PHI3_GQA, "hf", "sdpa", "none", "bf16", 45, 3),
    # resid_pdrop = embd_pdrop = 0.1: Phi3DecoderLayer drops its residual branches, Phi3Model never
    # drops the embeddings
    case("phi3-hf-eager-none-bf16-drop", PHI3, "hf", "eager", "none", "bf16", 33, 3, 0.1, 0.0),
    case("phi3-hf-eager-full-bf16-gqa-drop", PHI3_GQA, "hf", "eager", "full", "bf16", 29, 2, 0.1, 0.0),
    # GPT-NeoX (per-head interleaved query_key_value, partial rotary, parallel residual, LayerNorm)
    case("gpt_neox-hf-eager-none-bf16-drop", NEOX, "hf", "eager", "none", "bf16", 37, 3, 0.1, 0.1),
    case("gpt_neox-hf-flash-none-bf16", NEOX, "hf", "flash", "none", "bf16", 45, 3),
    case("gpt_neox-hf-eager-none-fp32-seqres", NEOX_SEQ, "hf", "eager", "none", "fp32", 29, 3),
    case("gpt_neox-hf-sdpa-none-fp32-seqres-drop", NEOX_SEQ, "hf", "sdpa", "none", "fp32", 33, 2, 0.1, 0.0),
    case("gpt_neox-hf-eager-full-bf16-drop", NEOX, "hf", "eager", "full", "bf16", 37, 3, 0.1, 0.1),
    # Qwen2-MoE (shared expert with sigmoid gate, dense layers by mlp_only_layers / decoder_sparse_step)
    case("qwen2_moe-hf-eager-none-bf16", QWEN2_MOE, "hf", "eager", "none", "bf16", 37, 3),
    case("qwen2_moe-hf-flash-none-fp32", QWEN2_MOE, "hf", "flash", "none", "fp32", 29, 2),
    case("qwen2_moe-hf-sdpa-none-bf16-step2-norm", QWEN2_MOE_STEP2, "hf", "sdpa", "none", "bf16", 33, 3),
    case("qwen2_moe-hf-eager-full-bf16-step2-norm", QWEN2_MOE_STEP2, "hf", "eager", "full", "bf16", 29, 3),
    # DeepSeek-V3 (MLA, sigmoid group-limited routing, fp32 combine, shared experts, dense first layers)
    case("deepseek_v3-hf-eager-none-bf16", DSV3, "hf", "eager", "none", "bf16", 37, 3),
    case("deepseek_v3-hf-eager-none-fp32", DSV3, "hf", "eager", "none", "fp32", 29, 2),
    case("deepseek_v3-hf-flash-none-bf16-padv", DSV3, "hf", "flash", "none", "bf16", 41, 3),
    case("deepseek_v3-hf-sdpa-none-bf16-nopad", DSV3, "hf", "sdpa", "none", "bf16", 33, 2),
    case("deepseek_v3-hf-flash-none-fp32-noqlora", DSV3_NOLORA, "hf", "flash", "none", "fp32", 33, 3),
    case("deepseek_v3-hf-eager-none-bf16-noqlora", DSV3_NOLORA, "hf", "eager", "none", "bf16", 29, 3),
    case("deepseek_v3-hf-sdpa-full-bf16", DSV3, "hf", "sdpa", "full", "bf16", 37, 2),
    # GPTBigCode (MQA k/v broadcast by matmul; MHA per-head [q | k | v]; resid/attn/embd dropouts)
    case("gpt_bigcode-hf-eager-none-bf16-mqa-drop", BIGCODE, "hf", "eager", "none", "bf16", 37, 3, 0.1, 0.1),
    case("gpt_bigcode-hf-eager-none-fp32-mqa", BIGCODE, "hf", "eager", "none", "fp32", 29, 2),
    case("gpt_bigcode-hf-flash-none-bf16-mqa", BIGCODE, "hf", "flash", "none", "bf16", 45, 3),
    case("gpt_bigcode-hf-sdpa-none-fp32-mha-drop", BIGCODE_MHA, "hf", "sdpa", "none", "fp32", 33, 2, 0.1, 0.0),
    case("gpt_bigcode-hf-eager-none-bf16-mha", BIGCODE_MHA, "hf", "eager", "none", "bf16", 41, 2),
    case("gpt_bigcode-hf-eager-full-bf16-mqa-drop", BIGCODE, "hf", "eager", "full", "bf16", 37, 3, 0.1, 0.1),
    case("gpt_bigcode-hf-sdpa-full-fp32-mha", BIGCODE_MHA, "hf", "sdpa", "full", "fp32", 29, 3),
    # Phi (one shared LayerNorm, parallel residual, partial rotary, biases, gelu_new)
    case("phi-hf-eager-none-bf16-drop", PHI, "hf", "eager", "none", "bf16", 37, 3, 0.1, 0.1),
    case("phi-hf-eager-none-fp32-gqa", PHI_GQA, "hf", "eager", "none", "fp32", 29, 2),
    case("phi-hf-flash-none-bf16", PHI, "hf", "flash", "none", "bf16", 45, 3),
    case("phi-hf-sdpa-none-bf16-gqa-drop", PHI_GQA, "hf", "sdpa", "none", "bf16", 33, 3, 0.1, 0.0),
    case("phi-hf-eager-full-bf16-drop", PHI, "hf", "eager", "full", "bf16", 37, 2, 0.1, 0.1),
    case("phi-hf-sdpa-full-fp32-gqa", PHI_GQA, "hf", "sdpa", "full", "fp32", 29, 3),
    # OLMo 2 (post-norms, full-width q/k norms, fp32 weight multiply)
    case("olmo2-hf-eager-none-bf16", OLMO2, "hf", "eager", "none", "bf16", 37, 3),
    case("olmo2-hf-eager-none-fp32-gqa", OLMO2_GQA, "hf", "eager", "none", "fp32", 29, 2),
    case("olmo2-hf-flash-none-bf16-gqa", OLMO2_GQA, "hf", "flash", "none", "bf16", 45, 3),
    case("olmo2-hf-sdpa-none-fp32", OLMO2, "hf", "sdpa", "none", "fp32", 33, 2),
    case("olmo2-hf-eager-full-bf16-gqa", OLMO2_GQA, "hf", "eager", "full", "bf16", 37, 2),
    case("olmo2-hf-sdpa-full-bf16", OLMO2, "hf", "sdpa", "full", "bf16", 41, 3),
    # Falcon (fused query_key_value, MQA broadcast / new-architecture KV copies, activation-dtype softmax)
    case("falcon-hf-eager-none-bf16-mqa-drop", FALCON, "hf", "eager", "none", "bf16", 37, 3, 0.1, 0.1),
    case("falcon-hf-eager-none-fp32-mqa", FALCON, "hf", "eager", "none", "fp32", 29, 2),
    case("falcon-hf-flash-none-bf16-mqa", FALCON, "hf", "flash", "none", "bf16", 45, 3),
    case("falcon-hf-eager-full-bf16-mqa", FALCON, "hf", "eager", "full", "bf16", 37, 2),
    case("falcon-hf-eager-none-bf16-newarch", FALCON_NEW, "hf", "eager", "none", "bf16", 33, 3),
    case("falcon-hf-flash-none-fp32-newarch-drop", FALCON_NEW, "hf", "flash", "none", "fp32", 29, 2, 0.1, 0.0),
    case("falcon-hf-eager-none-bf16-newarch-1ln", FALCON_NEW_1LN, "hf", "eager", "none", "bf16", 41, 2),
    # Gemma 3 text (per-head Gemma q/k norms, local + global RoPE tables, sliding eager mask)
    case("gemma3_text-hf-eager-none-bf16-mqa", GEMMA3, "hf", "eager", "none", "bf16", 37, 3),
    case("gemma3_text-hf-eager-none-fp32-gqa", GEMMA3_GQA, "hf", "eager", "none", "fp32", 29, 2),
    case("gemma3_text-hf-flash-none-bf16-gqa", GEMMA3_GQA, "hf", "flash", "none", "bf16", 45, 3),
    case("gemma3_text-hf-sdpa-none-bf16-mqa-attndrop", GEMMA3, "hf", "sdpa", "none", "bf16", 33, 2, 0.0, 0.1),
    case("gemma3_text-hf-eager-full-bf16-mqa", GEMMA3, "hf", "eager", "full", "bf16", 37, 2),
    case("gemma3_text-hf-sdpa-full-fp32-gqa", GEMMA3_GQA, "hf", "sdpa", "full", "fp32", 29, 3),
    # Llama 4 text (4.57; transformers 5 saves the same: Llama4TextExperts keeps its own bmm)
    case("llama4_text-hf-eager-none-bf16", LLAMA4, "hf", "eager", "none", "bf16", 37, 2),
    case("llama4_text-hf-eager-full-bf16", LLAMA4, "hf", "eager", "full", "bf16", 37, 2),
    case("llama4_text-hf-sdpa-none-bf16", LLAMA4_SDPA, "hf", "sdpa", "none", "bf16", 45, 3),
    case("llama4_text-hf-sdpa-full-bf16", LLAMA4_SDPA, "hf", "sdpa", "full", "bf16", 41, 2),
    case("llama4_text-hf-eager-none-fp32-nope-wrapper", LLAMA4_NOPE, "hf", "eager", "none", "fp32", 29, 2),
    case("llama4_text-hf-eager-none-bf16-plain", LLAMA4_PLAIN, "hf", "eager", "none", "bf16", 37, 2),
    case_5("llama4_text-hf5-eager-full-bf16", LLAMA4, "eager", "full", "bf16", 37, 2),
    case_5("llama4_text-hf5-sdpa-none-bf16-nope", dict(LLAMA4_NOPE, attention_chunk=64), "sdpa", "none", "bf16", 33, 2),
    # encoders (issue 8 item 4): BERT / RoBERTa, eager and sdpa, MLM and classifier heads
    case("bert-hf-eager-none-bf16-mlm-drop", BERT, "hf", "eager", "none", "bf16", 37, 3, 0.1, 0.1),
    case("bert-hf-eager-none-fp32-mlm", BERT, "hf", "eager", "none", "fp32", 29, 2),
    case("bert-hf-sdpa-none-bf16-mlm-drop", BERT, "hf", "sdpa", "none", "bf16", 45, 3, 0.1, 0.1),
    case("bert-hf-eager-none-bf16-cls-drop", BERT_CLS, "hf", "eager", "none", "bf16", 41, 2, 0.1, 0.1),
    case("bert-hf-sdpa-none-fp32-cls", BERT_CLS, "hf", "sdpa", "none", "fp32", 33, 3),
    case("bert-hf-eager-full-bf16-mlm-drop", BERT, "hf", "eager", "full", "bf16", 37, 2, 0.1, 0.1),
    case("bert-hf-sdpa-full-bf16-cls", BERT_CLS, "hf", "sdpa", "full", "bf16", 29, 3),
    case("bert-hf-eager-none-bf16-bare", dict(BERT, head="none"), "hf", "eager", "none", "bf16", 31, 2),
    case("roberta-hf-eager-none-bf16-mlm-drop", ROBERTA, "hf", "eager", "none", "bf16", 37, 3, 0.1, 0.1),
    case("roberta-hf-sdpa-none-fp32-mlm", ROBERTA, "hf", "sdpa", "none", "fp32", 29, 2),
    case("roberta-hf-eager-none-bf16-cls-drop", ROBERTA_CLS, "hf", "eager", "none", "bf16", 41, 2, 0.1, 0.1),
    case("roberta-hf-sdpa-none-bf16-cls", ROBERTA_CLS, "hf", "sdpa", "none", "bf16", 33, 3),
    case("roberta-hf-eager-full-fp32-cls-drop", ROBERTA_CLS, "hf", "eager", "full", "fp32", 29, 2, 0.1, 0.0),

    # transformers 5 (--hf-version 5): fused 3-D experts by grouped_mm (the default), eager, batched_mm;
    # dense families unchanged from 4.57 (a Llama and a GPT-2 case show it)
    case_5("mixtral-hf-eager-none-bf16-hf5", MIXTRAL, "eager", "none", "bf16", 37, 3),
    case_5("mixtral-hf-flash-none-fp32-top1-hf5", MIXTRAL_TOP1, "flash", "none", "fp32", 41, 3),
    case_5("mixtral-hf-flash-none-bf16-top3-hf5-eager", MIXTRAL_TOP3, "flash", "none", "bf16", 29, 3, impl="eager"),
    case_5("mixtral-hf-flash-none-bf16-hf5-batched", MIXTRAL, "flash", "none", "bf16", 23, 2, impl="batched_mm"),
    case_5("mixtral-hf-sdpa-full-bf16-hf5", MIXTRAL, "sdpa", "full", "bf16", 37, 3),
    case_5("qwen3_moe-hf-flash-none-bf16-hf5", QWEN3_MOE, "flash", "none", "bf16", 37, 3),
    case_5("qwen3_moe-hf-eager-none-fp32-nonorm-hf5", QWEN3_MOE_NONORM, "eager", "none", "fp32", 29, 2),
    case_5("qwen2_moe-hf-eager-none-bf16-hf5", QWEN2_MOE, "eager", "none", "bf16", 37, 3),
    case_5("qwen2_moe-hf-sdpa-none-bf16-step2-norm-hf5-batched", QWEN2_MOE_STEP2, "sdpa", "none", "bf16", 21, 2,
           impl="batched_mm"),
    case_5("deepseek_v3-hf-flash-none-bf16-padv-hf5", DSV3, "flash", "none", "bf16", 41, 3),
    case_5("deepseek_v3-hf-eager-none-fp32-hf5", DSV3, "eager", "none", "fp32", 29, 2),
    case_5("deepseek_v3-hf-eager-none-bf16-noqlora-hf5-eager", DSV3_NOLORA, "eager", "none", "bf16", 29, 3, impl="eager"),
    case_5("deepseek_v3-hf-sdpa-none-bf16-hf5-batched", DSV3, "sdpa", "none", "bf16", 19, 2, impl="batched_mm"),
    case_5("llama-hf-eager-none-bf16-gqa-hf5", LLAMA_GQA, "eager", "none", "bf16", 37, 3),
    case_5("gpt2-hf-eager-full-bf16-drop-hf5", GPT2, "eager", "full", "bf16", 40, 2, hd=0.1, ad=0.1),
]


# ---------------------------------------------------------------------------------------------
# HF config.json


def hf_config(cfg: models.ModelConfig, run: models.RunConfig):
    dtype = {"bf16": "bfloat16", "fp32": "float32"}[run.dtype]
    if cfg.family == "llama4_text":
        return llama4_model.hf_config(cfg, run, wrapper=cfg.wrapper)
    if cfg.family == "gpt2":
        return {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "n_embd": cfg.hidden,
            "n_layer": cfg.layers,
            "n_head": cfg.heads,
            "n_inner": cfg.ffn,
            "n_positions": cfg.max_positions,
            "n_ctx": cfg.max_positions,
            "vocab_size": cfg.vocab,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": cfg.eps,
            "resid_pdrop": run.hidden_dropout,
            "embd_pdrop": run.hidden_dropout,
            "attn_pdrop": run.attention_dropout,
            "tie_word_embeddings": True,
            "torch_dtype": dtype,
        }
    if cfg.family == "gpt_bigcode":
        return {
            "model_type": "gpt_bigcode",
            "architectures": ["GPTBigCodeForCausalLM"],
            "n_embd": cfg.hidden,
            "n_layer": cfg.layers,
            "n_head": cfg.heads,
            "n_inner": cfg.ffn,
            "n_positions": cfg.max_positions,
            "vocab_size": cfg.vocab,
            "multi_query": cfg.kv_heads == 1,
            "activation_function": "gelu_pytorch_tanh",
            "layer_norm_epsilon": cfg.eps,
            "resid_pdrop": run.hidden_dropout,
            "embd_pdrop": run.hidden_dropout,
            "attn_pdrop": run.attention_dropout,
            "attention_softmax_in_fp32": True,
            "scale_attention_softmax_in_fp32": True,
            "torch_dtype": dtype,
        }
    if cfg.family == "phi":
        assert cfg.head_dim * cfg.heads == cfg.hidden  # PhiAttention: head_dim = hidden_size // num_attention_heads
        return {
            "model_type": "phi",
            "architectures": ["PhiForCausalLM"],
            "hidden_size": cfg.hidden,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads,
            "intermediate_size": cfg.ffn,
            "vocab_size": cfg.vocab,
            "max_position_embeddings": cfg.max_positions,
            "partial_rotary_factor": cfg.rotary_pct,
            "layer_norm_eps": cfg.eps,
            "hidden_act": "gelu_new",
            "qk_layernorm": False,
            "resid_pdrop": run.hidden_dropout,
            "embd_pdrop": run.hidden_dropout,
            "attention_dropout": run.attention_dropout,
            "tie_word_embeddings": False,
            "torch_dtype": dtype,
        }
    if cfg.family == "falcon":
        return {
            "model_type": "falcon",
            "architectures": ["FalconForCausalLM"],
            "hidden_size": cfg.hidden,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_kv_heads": cfg.kv_heads if cfg.new_arch else cfg.heads,
            "multi_query": cfg.kv_heads == 1,
            "new_decoder_architecture": cfg.new_arch,
            "num_ln_in_parallel_attn": cfg.num_ln if cfg.new_arch else None,
            "parallel_attn": True,
            "alibi": False,
            "bias": cfg.attention_bias,
            "ffn_hidden_size": cfg.ffn,
            "vocab_size": cfg.vocab,
            "max_position_embeddings": cfg.max_positions,
            "layer_norm_epsilon": cfg.eps,
            "activation": "gelu",
            "hidden_dropout": run.hidden_dropout,
            "attention_dropout": run.attention_dropout,
            "tie_word_embeddings": cfg.tie_embeddings,
            "torch_dtype": dtype,
        }
    if cfg.family in models.ENCODER_FAMILIES:
        roberta = cfg.family == "roberta"
        head = {"mlm": "ForMaskedLM", "classifier": "ForSequenceClassification", "none": "Model"}[cfg.head]
        return {
            "model_type": cfg.family,
            "architectures": [("Roberta" if roberta else "Bert") + head],
            "hidden_size": cfg.hidden,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "intermediate_size": cfg.ffn,
            "vocab_size": cfg.vocab,
            "max_position_embeddings": cfg.max_positions,
            "type_vocab_size": cfg.type_vocab,
            "layer_norm_eps": cfg.eps,
            "hidden_act": "gelu",
            "hidden_dropout_prob": run.hidden_dropout,
            "attention_probs_dropout_prob": run.attention_dropout,
            "classifier_dropout": cfg.classifier_dropout,
            "id2label": {str(i): f"LABEL_{i}" for i in range(cfg.num_labels)},
            "position_embedding_type": "absolute",
            "pad_token_id": 1 if roberta else 0,
            "torch_dtype": dtype,
        }
    if cfg.family == "gpt_neox":
        return {
            "model_type": "gpt_neox",
            "architectures": ["GPTNeoXForCausalLM"],
            "hidden_size": cfg.hidden,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "intermediate_size": cfg.ffn,
            "vocab_size": cfg.vocab,
            "max_position_embeddings": cfg.max_positions,
            "rotary_pct": cfg.rotary_pct,
            "rotary_emb_base": 10000,
            "use_parallel_residual": cfg.parallel_residual,
            "layer_norm_eps": cfg.eps,
            "hidden_act": "gelu",
            "attention_bias": cfg.attention_bias,
            "hidden_dropout": run.hidden_dropout,
            "attention_dropout": run.attention_dropout,
            "tie_word_embeddings": cfg.tie_embeddings,
            "torch_dtype": dtype,
        }
    classes = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mixtral": "MixtralForCausalLM",
               "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
               "phi3": "Phi3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
               "deepseek_v3": "DeepseekV3ForCausalLM", "olmo2": "Olmo2ForCausalLM",
               "gemma3_text": "Gemma3ForCausalLM", "mistral": "MistralForCausalLM"}  # fmt: skip
    config = {
        "model_type": cfg.family,
        "architectures": [classes[cfg.family]],
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.ffn,
        "vocab_size": cfg.vocab,
        "max_position_embeddings": cfg.max_positions,
        "rms_norm_eps": cfg.eps,
        "hidden_act": "silu",
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_dropout": run.attention_dropout,
        "torch_dtype": dtype,
    }
    if cfg.family in ("llama", "olmo2"):
        config["attention_bias"] = cfg.attention_bias
        if cfg.family == "llama":
            config["mlp_bias"] = False
    if cfg.family == "mistral":
        config["sliding_window"] = 4096  # MistralConfig's default; longer than every case's s
    if cfg.family == "mixtral":
        config["num_local_experts"] = cfg.experts
        config["num_experts_per_tok"] = cfg.top_k
        config["output_router_logits"] = False
    if cfg.family in ("gemma", "gemma2", "gemma3_text"):
        config["hidden_act"] = config["hidden_activation"] = "gelu_pytorch_tanh"
        config["attention_bias"] = False
    if cfg.family == "gemma3_text":
        config.update({
            "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
            "sliding_window": cfg.sliding_window,
            "sliding_window_pattern": cfg.sliding_pattern,
            "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0,
            "attn_logit_softcapping": None,
            "final_logit_softcapping": None,
        })  # fmt: skip
    if cfg.family == "gemma2":
        config["query_pre_attn_scalar"] = cfg.query_pre_attn_scalar
        config["attn_logit_softcapping"] = cfg.attn_softcap
        config["final_logit_softcapping"] = cfg.final_softcap
        config["sliding_window"] = 4096  # even layers; longer than every case's s
    if cfg.family in ("qwen3", "qwen3_moe"):
        config["attention_bias"] = False
        config["use_sliding_window"] = False
    if cfg.family == "qwen3_moe":
        config["num_experts"] = cfg.experts
        config["num_experts_per_tok"] = cfg.top_k
        config["moe_intermediate_size"] = cfg.ffn
        config["intermediate_size"] = 4 * cfg.ffn  # dense MLP size, unused: every layer is sparse
        config["decoder_sparse_step"] = 1
        config["mlp_only_layers"] = []
        config["norm_topk_prob"] = cfg.norm_topk_prob
        config["output_router_logits"] = False
    if cfg.family == "qwen2_moe":
        del config["head_dim"]  # Qwen2MoeAttention: hidden_size // num_attention_heads
        config["num_experts"] = cfg.experts
        config["num_experts_per_tok"] = cfg.top_k
        config["moe_intermediate_size"] = cfg.ffn
        config["shared_expert_intermediate_size"] = cfg.shared_ffn
        config["intermediate_size"] = cfg.dense_ffn
        config["decoder_sparse_step"] = cfg.sparse_step
        config["mlp_only_layers"] = list(cfg.mlp_only_layers)
        config["norm_topk_prob"] = cfg.norm_topk_prob
        config["use_sliding_window"] = False
        config["output_router_logits"] = False
    if cfg.family == "deepseek_v3":
        del config["head_dim"]  # qk_nope_head_dim + qk_rope_head_dim
        assert cfg.shared_ffn % cfg.ffn == 0
        config.update({
            "intermediate_size": cfg.dense_ffn,
            "moe_intermediate_size": cfg.ffn,
            "n_routed_experts": cfg.experts,
            "n_shared_experts": cfg.shared_ffn // cfg.ffn,
            "num_experts_per_tok": cfg.top_k,
            "n_group": cfg.n_group,
            "topk_group": cfg.topk_group,
            "routed_scaling_factor": cfg.routed_scaling,
            "norm_topk_prob": cfg.norm_topk_prob,
            "first_k_dense_replace": cfg.first_dense,
            "q_lora_rank": cfg.q_lora_rank or None,
            "kv_lora_rank": cfg.kv_lora_rank,
            "qk_nope_head_dim": cfg.qk_nope_dim,
            "qk_rope_head_dim": cfg.qk_rope_dim,
            "v_head_dim": cfg.v_head_dim,
            "rope_interleave": cfg.rope_interleave,
            "rope_scaling": None,
            "attention_bias": False,
        })  # fmt: skip
    if cfg.family == "phi3":
        del config["head_dim"]  # Phi3Config has none: hidden_size // num_attention_heads
        config["partial_rotary_factor"] = cfg.rotary_pct
        config["resid_pdrop"] = config["embd_pdrop"] = run.hidden_dropout
        config["sliding_window"] = None
    return config


def cli_args(actmem, config_path, run: models.RunConfig, par=None, extra=()):
    parallel = []
    if par is not None:
        parallel = ["--tp", str(par.tp), "--cp", str(par.cp)] + (["--sp"] if par.sp else [])
    return [
        actmem, "estimate", "--model", config_path,
        "--seq-len", str(run.seq_len), "--micro-batch", str(run.micro_batch),
        "--dtype", run.dtype, "--framework", run.framework, "--attention", run.attention,
        "--recompute", run.recompute,
        "--hidden-dropout", str(run.hidden_dropout), "--attention-dropout", str(run.attention_dropout),
        "--hf-version", run.hf_version, "--json",
    ] + (["--experts-impl", run.experts_impl] if run.hf_version == "5" else []) + (
        ["--packed-docs", str(run.packed_docs)] if run.packed_docs else []) + parallel + list(extra)  # fmt: skip


def call_actmem(actmem, name, model, run, workdir, par=None, extra=(), check=lambda activations: None):
    """Writes the case's config.json and runs `actmem estimate --json` on it.

    Returns (activations dict, None) or (None, error text). `check(activations)` may raise
    ValueError/KeyError/TypeError to reject a JSON that lacks what the caller compares."""
    if not actmem or not os.path.isfile(actmem) or not os.access(actmem, os.X_OK):
        return None, f"actmem binary not found or not executable: {actmem!r}"
    path = os.path.join(workdir, name, "config.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(hf_config(model, run), f, indent=2)
    args = cli_args(actmem, path, run, par, extra)
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{' '.join(args)}\n{e}"
    if proc.returncode != 0:
        return None, f"{' '.join(args)}\nexit {proc.returncode}\n{proc.stderr.strip()}"
    try:
        activations = json.loads(proc.stdout)["activations"]
        check(activations)
        return activations, None
    except (ValueError, KeyError, TypeError) as e:
        return None, f"{' '.join(args)}\nunreadable JSON ({e!r}):\n{proc.stdout[:2000]}\n{proc.stderr.strip()}"


def run_cli(actmem, c, workdir):
    """Returns (activations dict, None) or (None, error text)."""

    def check(activations):
        int(activations["per_layer_bytes"]), int(activations["total_bytes"])

    return call_actmem(actmem, c["name"], c["model"], c["run"], workdir, par=c["par"], check=check)


def layer_and_total_row(name, width, m, activations):
    """Prints one row, a measure.Measurement against actmem's activations (per layer, total), and
    returns whether both lie within TOLERANCE (a figure measured as zero must be estimated as zero).
    For the runners of one switch each (freeze_validation.py, frozen_layers_validation.py)."""

    def err(est, meas):
        return (est - meas) / meas if meas else float(est != 0)

    est_layer, est_total = activations["per_layer_bytes"], activations["total_bytes"]
    e_layer, e_total = err(est_layer, m.per_layer_bytes), err(est_total, m.total_bytes)
    ok = abs(e_layer) <= TOLERANCE and abs(e_total) <= TOLERANCE
    print(f"{name:<{width}}{m.per_layer_bytes:>11}{est_layer:>11}{100 * e_layer:>+7.2f}"
          f"{m.total_bytes:>12}{est_total:>12}{100 * e_total:>+7.2f}  {'ok' if ok else 'FAIL'}")
    if not ok:
        print("   measured by region:", m.region_bytes)
    return ok


# ---------------------------------------------------------------------------------------------
# reporting


def rel_error(estimated, measured):
    return (estimated - measured) / measured if measured else float("inf")


def tensor_diff(c, activations):
    """Match the CLI's tensors with EXPECTED.md's terms (verified against the measurement) by byte
    count and list what is left on either side: the tensors that make the difference."""
    _, _, layer_terms, outside_terms = expected_for(c)
    terms = [("layer", *t) for t in layer_terms] + [("outside", *t) for t in outside_terms]
    left_est = list(activations.get("tensors") or [])
    unmatched = []
    for where, name, formula, nbytes in terms:
        hit = next((t for t in left_est if _int(t.get("bytes")) == nbytes), None)
        if hit is None:
            unmatched.append(f"      {where:8s} {name:60s} {formula:16s} {nbytes:>10d}")
        else:
            left_est.remove(hit)
    lines = ["    expected terms (EXPECTED.md, = measured) with no CLI tensor of the same bytes:"] + unmatched
    lines.append("    CLI tensors with no expected term of the same bytes:")
    for t in left_est:
        lines.append(
            f"      {str(t.get('name')):40s} {str(t.get('shape')):20s} {str(t.get('dtype')):9s} "
            f"{str(t.get('bytes')):>10s}  {t.get('formula', '')}"
        )
    return "\n".join(lines)


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def expected_for(c):
    if c["par"] is not None:
        return expected.expected_rank(c["model"], c["run"], c["par"])
    return expected.expected(c["model"], c["run"])


def check_formulas(cases):
    """Measured bytes must equal the hand formulas exactly (they are exact byte counts)."""
    failed = 0
    print(f"{'case':46s} {'meas/layer':>11s} {'formula':>11s} {'meas total':>11s} {'formula':>11s}")
    for c in cases:
        m = measure.measure(c["model"], c["run"], par=c["par"])
        per_layer, total, _, _ = expected_for(c)
        ok = per_layer == m.per_layer_bytes and total == m.total_bytes
        failed += not ok
        print(f"{c['name']:46s} {m.per_layer_bytes:>11d} {per_layer:>11d} {m.total_bytes:>11d} {total:>11d}  {'ok' if ok else 'DIFF'}")
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actmem", help="path to the actmem binary")
    parser.add_argument("--filter", default="", help="run only cases whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--measure-only", action="store_true", help="print measurements, no CLI")
    parser.add_argument("--all-tensors", action="store_true", help="with --measure-only: every region, not only the middle layer")
    parser.add_argument("--backward", action="store_true", help="also run backward (checks the emulated ops train)")
    parser.add_argument("--check-formulas", action="store_true", help="compare measurements with EXPECTED.md's formulas (expected.py), no CLI")
    args = parser.parse_args()

    cases = [c for c in CASES if args.filter in c["name"]]
    if args.list:
        for c in cases:
            print(c["name"])
        print(f"{len(cases)} cases")
        return 0
    if not cases:
        print(f"no case matches {args.filter!r}", file=sys.stderr)
        return 2
    if args.check_formulas:
        return check_formulas(cases)
    if not args.measure_only and not args.actmem:
        parser.error("--actmem PATH is required unless --list, --measure-only or --check-formulas")

    started = time.time()
    passed, failed = 0, 0
    header = f"{'case':46s} {'meas/layer':>11s} {'est/layer':>11s} {'err%':>7s} {'meas total':>11s} {'est total':>11s} {'err%':>7s}"
    print(header)
    with tempfile.TemporaryDirectory(prefix="actmem-validation-") as workdir:
        for c in cases:
            m = measure.measure(c["model"], c["run"], backward=args.backward, par=c["par"])
            if args.measure_only:
                print(f"{c['name']:46s} {m.per_layer_bytes:>11d} {'':>11s} {'':>7s} {m.total_bytes:>11d}")
                regions = ", ".join(f"{k}: {v}" for k, v in m.region_bytes.items())
                print(f"    regions: {regions}")
                print(measure.format_storages(m, None if args.all_tensors else f"layer {m.middle_layer}"))
                _, _, layer_terms, outside_terms = expected_for(c)
                print("    EXPECTED.md terms, per layer:")
                for name, formula, nbytes in layer_terms:
                    print(f"      {name:60s} {formula:16s} {nbytes:>10d}")
                print("    EXPECTED.md terms, outside the layers (total = L x per layer + these):")
                for name, formula, nbytes in outside_terms:
                    print(f"      {name:60s} {formula:16s} {nbytes:>10d}")
                continue
            activations, error = run_cli(args.actmem, c, workdir)
            if error:
                failed += 1
                print(f"{c['name']:46s} {m.per_layer_bytes:>11d} {'-':>11s} {'-':>7s} {m.total_bytes:>11d} {'-':>11s} {'-':>7s}  FAIL")
                print("    CLI failed: " + error.replace("\n", "\n    "))
                continue
            est_layer, est_total = int(activations["per_layer_bytes"]), int(activations["total_bytes"])
            err_layer, err_total = rel_error(est_layer, m.per_layer_bytes), rel_error(est_total, m.total_bytes)
            ok = abs(err_layer) <= TOLERANCE and abs(err_total) <= TOLERANCE
            passed += ok
            failed += not ok
            print(
                f"{c['name']:46s} {m.per_layer_bytes:>11d} {est_layer:>11d} {100 * err_layer:>+7.2f} "
                f"{m.total_bytes:>11d} {est_total:>11d} {100 * err_total:>+7.2f}  {'ok' if ok else 'FAIL'}"
            )
            if not ok:
                regions = ", ".join(f"{k}: {v}" for k, v in m.region_bytes.items())
                print(f"    measured regions: {regions}")
                print(tensor_diff(c, activations))
    print(f"({time.time() - started:.1f} s)")
    if args.measure_only:
        print(f"{len(cases)} cases measured")
        return 0
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
