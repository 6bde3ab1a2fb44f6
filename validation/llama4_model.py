"""Llama 4 text reference (model_type llama4_text), written for this suite from transformers'
modeling_llama4.py as of 4.57 and 5 (Llama4ForCausalLM; the two save the same tensors), hf style,
(b, s, ...) layout. What it follows, op by op:

  Llama4TextRMSNorm        as LlamaRMSNorm (`_norm(x.float()).type_as(x) * weight`)
  Llama4TextAttention      q/k/v/o projections viewed (b, s, heads, d); v transposed at once;
                           RoPE layers (no_rope_layers[i] == 1): apply_rotary_emb on the complex
                           view (`view_as_complex(x.float()...) * freqs_cis`, `view_as_real`,
                           `type_as`), then Llama4TextL2Norm on q and k when use_qk_norm;
                           NoPE layers with attn_temperature_tuning: q scaled by
                           `log1p(floor((cache_position + 1) / floor_scale)) * attn_scale + 1`
                           (fp32, (s,) expanded) and cast back; q, k transposed;
                           eager_attention_forward WITHOUT the fp32 softmax upcast, or sdpa
                           (emulated as the flash kernel, as the rest of the suite)
  Llama4TextMoe            Llama4Router (topk, scatter_ into -inf, sigmoid in fp32, cast back),
                           `x.repeat(E, 1) * scores.transpose(0, 1).reshape(-1, 1)`, every expert
                           on every token (Llama4TextExperts: bmm with the fused (E, h, 2f) and
                           (E, f, h) weights, chunk, up * silu(gate)), the shared expert
                           (Llama4TextMLP(intermediate_size)), `out.add_(routed.sum(0))`
  Llama4TextMLP            dense layers, intermediate_size_mlp
  Llama4TextModel          cache_position / position_ids, freqs_cis (Llama4TextRotaryEmbedding:
                           polar(1, pos * inv_freq), complex64 (1, s, d/2)), create_causal_mask and
                           create_chunked_causal_mask (eager: (b, 1, s, s) in the activation dtype
                           each; sdpa: None while s < attention_chunk_size), layer_types choose
                           each layer's mask; GradientCheckpointingLayer passes hidden_states
                           positionally, the rest as keywords
  Llama4ForCausalLM        final norm, lm_head, ForCausalLMLoss (fp32 logits, shifted labels)

The transpose(0, 1) in Llama4TextMoe is the fix of huggingface/transformers PR 40609 (in 4.57 and
5); 4.54-4.56 multiplied by `router_scores.reshape(-1, 1)`, a view (E·T·e bytes less per MoE layer).
"""
import dataclasses
import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import emulated_ops as ops
import models
from models import region, watch


def l2_norm(x, eps):
    """Llama4TextL2Norm: `_norm(x.float()).type_as(x)`, no weight. pow keeps the fp32 x (x itself
    in fp32), the multiply keeps it and the fp32 rsqrt (b·s·heads)."""
    xf = x.float()
    return (xf * torch.rsqrt(ops.MeanLastDim.apply(xf.pow(2)) + eps)).type_as(x)


def apply_rotary_emb(xq, xk, freqs_cis):
    """modeling_llama4.apply_rotary_emb: the complex multiply keeps only freqs_cis (shared)."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * freqs_cis[:, :, None, :]).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis[:, :, None, :]).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Llama4Attention(nn.Module):
    def __init__(self, cfg, run, index):
        super().__init__()
        self.cfg, self.run = cfg, run
        self.use_rope = cfg.llama4_rope(index)
        h, a, kv, d = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
        self.q_proj = models._linear(h, a * d, cfg.attention_bias)
        self.k_proj = models._linear(h, kv * d, cfg.attention_bias)
        self.v_proj = models._linear(h, kv * d, cfg.attention_bias)
        self.o_proj = models._linear(a * d, h, cfg.attention_bias)

    def forward(self, x, freqs_cis, mask, cache_position):
        cfg, run = self.cfg, self.run
        b, s, _ = x.shape
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        q = self.q_proj(x).view(b, s, -1, d)
        k = self.k_proj(x).view(b, s, -1, d)
        v = self.v_proj(x).view(b, s, -1, d).transpose(1, 2)
        if self.use_rope:
            q, k = apply_rotary_emb(q, k, freqs_cis)
            if cfg.use_qk_norm:
                q, k = l2_norm(q, cfg.eps), l2_norm(k, cfg.eps)
        elif cfg.temperature_tuning:
            scales = torch.log1p(torch.floor((cache_position.float() + 1.0) / cfg.floor_scale)) * cfg.attn_scale + 1.0
            scales = scales.view((1, s, 1, 1)).expand((b, s, 1, 1))
            q = (q * scales).to(q.dtype)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        if run.attention == "eager":
            groups = a // kv
            k, v = models.hf_repeat_kv(k, groups), models.hf_repeat_kv(v, groups)
            scores = torch.matmul(q, k.transpose(2, 3)) * d**-0.5
            scores = scores + mask[:, :, :, : k.shape[-2]]
            probs = ops.dropout(F.softmax(scores, dim=-1), run.attention_dropout)  # no fp32 upcast
            out = torch.matmul(probs, v).transpose(1, 2).contiguous()
        else:  # sdpa: (b, s, heads, d) views to the kernel
            out = ops.FlashAttentionFn.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), "bshd")
        return self.o_proj(out.reshape(b, s, a * d).contiguous())


class Llama4MoE(nn.Module):
    def __init__(self, cfg, run):
        super().__init__()
        self.cfg = cfg
        E, h, f = cfg.experts, cfg.hidden, cfg.ffn
        self.router = models._linear(h, E, False)
        self.gate_up_proj = nn.Parameter(torch.empty(E, h, 2 * f).normal_(std=0.02))
        self.down_proj = nn.Parameter(torch.empty(E, f, h).normal_(std=0.02))
        self.shared_expert = models.HFMLP(dataclasses.replace(cfg, family="llama"), run)

    def forward(self, x):
        cfg = self.cfg
        b, s, h = x.shape
        E = cfg.experts
        x = x.reshape(-1, h)
        logits = self.router(x)
        top_value, top_index = torch.topk(logits, cfg.top_k, dim=1)
        scores = torch.full_like(logits, float("-inf")).scatter_(1, top_index, top_value)
        scores = torch.sigmoid(scores.float()).to(scores.dtype)
        routed_in = x.repeat(E, 1)
        routed_in = routed_in * scores.transpose(0, 1).reshape(-1, 1)
        hidden = routed_in.view(E, -1, h)
        gate, up = torch.bmm(hidden, self.gate_up_proj).chunk(2, dim=-1)
        routed_out = torch.bmm(up * F.silu(gate), self.down_proj).view(-1, h)
        out = self.shared_expert(x)
        out.add_(routed_out.reshape(E, -1, h).sum(dim=0))
        return out.view(b, s, h)


class Llama4Layer(nn.Module):
    def __init__(self, cfg, run, index):
        super().__init__()
        h = cfg.hidden
        self.cfg = cfg
        self.attn = Llama4Attention(cfg, run, index)
        self.norm_w = nn.ParameterList(nn.Parameter(torch.ones(h)) for _ in range(2))
        if cfg.is_moe_layer(index):
            self.mlp = Llama4MoE(cfg, run)
        else:
            self.mlp = models.HFMLP(dataclasses.replace(cfg, family="llama", ffn=cfg.dense_ffn), run)

    def forward(self, x, attention_mask=None, position_ids=None, cache_position=None, position_embeddings=None):
        eps = self.cfg.eps
        x = x + self.attn(models.hf_rms_norm(x, self.norm_w[0], eps), position_embeddings, attention_mask,
                          cache_position)
        return x + self.mlp(models.hf_rms_norm(x, self.norm_w[1], eps))


class Llama4Model(nn.Module):
    def __init__(self, cfg, run):
        super().__init__()
        self.cfg, self.run = cfg, run
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Llama4Layer(cfg, run, i) for i in range(cfg.layers))
        self.final_w = nn.Parameter(torch.ones(cfg.hidden))
        self.lm_head = models._linear(cfg.hidden, cfg.vocab, False)

    def forward(self, input_ids, labels):
        cfg, run = self.cfg, self.run
        b, s = input_ids.shape
        dtype = self.embed.weight.dtype
        with region("embedding"):
            x = self.embed(input_ids)
            cache_position = torch.arange(s)
            position_ids = cache_position.unsqueeze(0)
            mask = chunked = None
            if run.attention == "eager":  # masking_utils eager_mask: torch.where over the (b, 1, s, s) broadcast
                pos = torch.arange(s)
                causal = (pos[None, None, None, :] <= pos[None, None, :, None]).expand(b, -1, s, s)
                zero, low = torch.tensor(0.0, dtype=dtype), torch.finfo(dtype).min
                mask = torch.where(causal, zero, low)
                same_chunk = (pos[None, None, None, :] // cfg.attention_chunk) == (pos[None, None, :, None] //
                                                                                   cfg.attention_chunk)
                chunked = torch.where(causal & same_chunk, zero, low)
            else:
                assert s < cfg.attention_chunk, "sdpa gets no mask only while s < attention_chunk_size"
            # Llama4TextRotaryEmbedding: fp32 freqs, polar -> complex64 (1, s, d/2), * attention_scaling (1.0)
            d = cfg.head_dim
            inv_freq = 1.0 / (500000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            freqs = (inv_freq[None, :, None] @ position_ids[:, None, :].float()).transpose(1, 2)
            freqs_cis = torch.polar(torch.ones_like(freqs), freqs) * 1.0
        use_reentrant = run.checkpoint == "reentrant"
        if run.recompute == "full":
            for t in (cache_position, freqs_cis, mask, chunked):
                watch(t)
        for i, layer in enumerate(self.layers):
            with region(f"layer {i}"):
                mask_i = chunked if cfg.llama4_rope(i) else mask  # layer_types: chunked on the RoPE layers
                kwargs = dict(attention_mask=mask_i, position_ids=position_ids, cache_position=cache_position,
                              position_embeddings=freqs_cis)
                if run.recompute != "full":
                    x = layer(x, **kwargs)
                else:
                    x = checkpoint(functools.partial(layer, **kwargs), watch(x), use_reentrant=use_reentrant)
        with region("head"):
            x = models.hf_rms_norm(x, self.final_w, cfg.eps)
            logits = self.lm_head(x).float()
            labels = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
            return F.cross_entropy(logits.view(-1, cfg.vocab), labels.view(-1), ignore_index=-100)


def hf_config(cfg, run, wrapper=False):
    """The config.json of the case: a bare llama4_text config, or the Llama4ForConditionalGeneration
    wrapper with it as text_config."""
    text = {
        "model_type": "llama4_text",
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.ffn,
        "intermediate_size_mlp": cfg.dense_ffn,
        "num_local_experts": cfg.experts,
        "num_experts_per_tok": cfg.top_k,
        "interleave_moe_layer_step": cfg.sparse_step,
        "no_rope_layers": [int(cfg.llama4_rope(i)) for i in range(cfg.layers)],
        "attention_chunk_size": cfg.attention_chunk,
        "use_qk_norm": cfg.use_qk_norm,
        "attn_temperature_tuning": cfg.temperature_tuning,
        "floor_scale": cfg.floor_scale,
        "attn_scale": cfg.attn_scale,
        "vocab_size": cfg.vocab,
        "max_position_embeddings": cfg.max_positions,
        "rms_norm_eps": cfg.eps,
        "hidden_act": "silu",
        "attention_bias": cfg.attention_bias,
        "attention_dropout": run.attention_dropout,
        "rope_theta": 500000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "torch_dtype": {"bf16": "bfloat16", "fp32": "float32"}[run.dtype],
    }
    if not wrapper:
        return text
    return {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "text_config": text,
            "vision_config": {"model_type": "llama4_vision_model"}, "tie_word_embeddings": False,
            "torch_dtype": text["torch_dtype"]}


# ---------------------------------------------------------------------------------------------
# EXPECTED.md "Llama 4 text" as code (expected.py dispatches here): (name, formula, bytes) terms.


def expected_layer_terms(cfg, run, index):
    s, b, h, a, kv, d = run.seq_len, run.micro_batch, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
    T, e = s * b, 2 if run.dtype == "bf16" else 4
    if run.recompute == "full":
        return [("layer input (checkpoint)", "e·T·h", e * T * h)]
    t = []

    def norm(label):
        t.extend([(f"{label} RMSNorm fp32 x (copy if e=2, x itself if e=4)", "4·T·h", 4 * T * h),
                  (f"{label} RMSNorm rsqrt fp32", "4·T", 4 * T),
                  (f"{label} RMSNorm normalized x (act dtype)", "e·T·h", e * T * h),
                  (f"{label} output = next linear input", "e·T·h", e * T * h)])  # fmt: skip

    norm("input_layernorm")
    if cfg.llama4_rope(index):
        if cfg.use_qk_norm:
            for name, heads, sym in (("q", a, "a"), ("k", kv, "kv")):
                t.extend([(f"L2Norm({name}) fp32 x (copy if e=2, the RoPE output if e=4)", f"4·T·{sym}·d", 4 * T * heads * d),
                          (f"L2Norm({name}) rsqrt fp32", f"4·T·{sym}", 4 * T * heads)])  # fmt: skip
    elif cfg.temperature_tuning:
        t.append(("temperature scales fp32 (s), kept by q * attn_scales", "4·s", 4 * s))
    eager = run.attention == "eager"
    if eager:
        groups = a // kv
        t.append(("q copy (matmul reshape of the transposed q)", "e·T·a·d", e * T * a * d))
        t.append(("k repeated (repeat_kv)" if groups > 1 else "k copy (matmul reshape)", "e·T·a·d", e * T * a * d))
        t.append(("softmax output (act dtype, no upcast), kept by AV too", "e·b·a·s²", e * b * a * s * s))
        t.append(("v repeated (repeat_kv)" if groups > 1 else "v copy (matmul reshape)", "e·T·a·d", e * T * a * d))
        t.append(("context (o_proj input)", "e·T·a·d", e * T * a * d))
    else:
        t.extend([("q (flash input; the L2Norm / scaled / RoPE output)", "e·T·a·d", e * T * a * d),
                  ("k (flash input)", "e·T·kv·d", e * T * kv * d),
                  ("v (v_proj output, flash input)", "e·T·kv·d", e * T * kv * d),
                  ("flash output = o_proj input", "e·T·a·d", e * T * a * d),
                  ("flash logsumexp fp32", "4·b·a·s", 4 * b * a * s)])  # fmt: skip
    norm("post_attention_layernorm")
    if cfg.is_moe_layer(index):
        E, k, f = cfg.experts, cfg.top_k, cfg.ffn
        t.extend([("router top-k indices int64", "8·T·k", 8 * T * k),
                  ("router sigmoid output fp32", "4·T·E", 4 * T * E),
                  ("x.repeat(E, 1), kept by the score multiply", "e·E·T·h", e * E * T * h),
                  ("score column (transposed copy), kept by the multiply", "e·E·T", e * E * T),
                  ("scaled routed input, kept by bmm #1", "e·E·T·h", e * E * T * h),
                  ("gate_up (E, T, 2f): gate kept by silu, up by the multiply", "2·e·E·T·f", 2 * e * E * T * f),
                  ("silu(gate)", "e·E·T·f", e * E * T * f),
                  ("up·silu(gate), kept by bmm #2", "e·E·T·f", e * E * T * f),
                  ("shared expert: gate, silu(gate), up, product", "4·e·T·f", 4 * e * T * f)])  # fmt: skip
    else:
        fd = cfg.dense_ffn
        t.append(("dense MLP (intermediate_size_mlp): gate, silu(gate), up, product", "4·e·T·fd", 4 * e * T * fd))
    return t


def expected_outside_terms(cfg, run):
    s, b, h, d, V = run.seq_len, run.micro_batch, cfg.hidden, cfg.head_dim, cfg.vocab
    T, e = s * b, 2 if run.dtype == "bf16" else 4
    full = run.recompute == "full"
    t = [("input ids int64 (embedding)", "8·T", 8 * T),
         ("freqs_cis complex64 (s, d/2), saved by the RoPE multiplies / kept by every checkpoint", "4·s·d", 4 * s * d)]
    if full:
        t.append(("cache_position int64, kept by every checkpoint", "8·s", 8 * s))
        if run.attention == "eager":
            rope = [cfg.llama4_rope(i) for i in range(cfg.layers)]
            if not all(rope):
                t.append(("eager causal mask (b, 1, s, s), kept by the NoPE layers' checkpoints", "e·b·s²", e * b * s * s))
            if any(rope):
                t.append(("eager chunked mask (b, 1, s, s), kept by the RoPE layers' checkpoints", "e·b·s²", e * b * s * s))
    t.extend([("final RMSNorm fp32 x", "4·T·h", 4 * T * h), ("final RMSNorm rsqrt", "4·T", 4 * T),
              ("final RMSNorm normalized x", "e·T·h", e * T * h), ("LM head input (final norm output)", "e·T·h", e * T * h),
              ("fp32 log-softmax (HF CE)", "4·T·V", 4 * T * V), ("targets int64", "8·T", 8 * T)])  # fmt: skip
    return t
