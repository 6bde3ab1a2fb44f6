"""Reference decoder-only transformers, written for this suite (not copied from HF), in two
framework styles:

  hf        eager PyTorch op by op, following transformers' modeling_gpt2 / modeling_llama /
            modeling_qwen2 / modeling_mixtral, activations laid out (b, s, ...)
  megatron  Megatron-LM fused kernels emulated by autograd Functions (emulated_ops.py),
            activations laid out (s, b, ...)

Families: gpt2 (LayerNorm, learned positions, GeLU MLP, tied head), llama / qwen2 (RMSNorm, RoPE,
GQA, SwiGLU; qwen2 = qkv bias), mixtral (llama attention + top-k MoE of SwiGLU experts, hf only),
and in hf style only the FAMILY_TRAITS rows (gemma, gemma2, qwen3, qwen3_moe, qwen2_moe, phi3,
gpt_neox, deepseek_v3 with multi-head latent attention and sigmoid-routed MoE).

Every forward runs inside `region(...)` blocks so measure.py can attribute saved storages to
embedding / layer i / head. Torch 2.x CUDA behaviours that 1.13 CPU lacks are emulated through
emulated_ops (dropout bool masks, fp32 LayerNorm stats, mean saving only sizes).
"""
import contextlib
import dataclasses
import functools
import math
import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import emulated_ops as ops

# ---------------------------------------------------------------------------------------------
# regions: which part of the model is running (read by measure.py's pack hook)

_region = ["outside"]


@contextlib.contextmanager
def region(name):
    previous = _region[0]
    _region[0] = name
    try:
        yield
    finally:
        _region[0] = previous


def current_region():
    return _region[0]


# Tensors the model passes into a checkpointed layer, watched by measure.py: which of them are
# still alive once the forward has returned (held by a checkpoint until backward) and which died.
_watched = []


def watch(tensor):
    """Note a tensor that the model passes into checkpointed layers (weakref + its region)."""
    if tensor is not None:
        _watched.append((weakref.ref(tensor), current_region()))
    return tensor


def take_watched():
    out = list(_watched)
    _watched.clear()
    return out


# ---------------------------------------------------------------------------------------------
# configuration


@dataclasses.dataclass
class ModelConfig:
    family: str  # gpt2 | llama | qwen2 | mixtral | gemma | gemma2 | qwen3 | qwen3_moe | qwen2_moe | phi3 | gpt_neox | deepseek_v3
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    max_positions: int = 1024
    eps: float = 1e-5
    tie_embeddings: bool = False
    attention_bias: bool = False
    experts: int = 0
    top_k: int = 0
    rotary_pct: float = 1.0  # gpt_neox rotary_pct / phi3 partial_rotary_factor
    parallel_residual: bool = True  # gpt_neox use_parallel_residual
    query_pre_attn_scalar: int = 0  # gemma2: scaling = query_pre_attn_scalar ** -0.5
    attn_softcap: float = 0.0  # gemma2 attn_logit_softcapping (eager: tanh on the scores)
    final_softcap: float = 0.0  # gemma2 final_logit_softcapping (tanh on the logits)
    norm_topk_prob: bool = True  # MoE: top-k weights renormalized (Mixtral always; Qwen3-MoE config key)
    # MoE layer placement and shared experts (Qwen2-MoE, DeepSeek-V3); `ffn` is the routed expert's
    # size, `dense_ffn` the dense MLP's (layers without experts)
    dense_ffn: int = 0
    shared_ffn: int = 0  # Qwen2-MoE shared_expert_intermediate_size; DeepSeek n_shared_experts * ffn
    sparse_step: int = 1  # Qwen2-MoE decoder_sparse_step
    mlp_only_layers: tuple = ()  # Qwen2-MoE
    first_dense: int = 0  # DeepSeek-V3 first_k_dense_replace
    n_group: int = 1  # DeepSeek-V3 group-limited routing
    topk_group: int = 1
    routed_scaling: float = 1.0  # DeepSeek-V3 routed_scaling_factor
    # DeepSeek-V3 multi-head latent attention (q_lora_rank 0 = q_proj straight from h)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    rope_interleave: bool = True
    o_bias: bool = False  # phi: `dense` has a bias (the separate q/k/v take attention_bias)
    lm_head_bias: bool = False  # phi: PhiForCausalLM's lm_head has a bias
    new_arch: bool = False  # falcon new_decoder_architecture (kv = num_kv_heads; else multi_query kv = 1 or MHA)
    num_ln: int = 2  # falcon num_ln_in_parallel_attn (new architecture)
    sliding_pattern: int = 0  # gemma3_text sliding_window_pattern: layer i slides unless (i + 1) % pattern == 0
    sliding_window: int = 0  # gemma3_text sliding_window (the eager sliding mask)
    # encoders (bert, roberta): the head (mlm | classifier | none), its labels and dropout (None =
    # hidden_dropout_prob, as BertForSequenceClassification), token types
    head: str = "mlm"
    num_labels: int = 2
    classifier_dropout: float = None
    type_vocab: int = 2
    # llama4_text (llama4_model.py): ffn = intermediate_size (experts and the shared expert), dense_ffn =
    # intermediate_size_mlp, sparse_step = interleave_moe_layer_step; no_rope_layers (1 = RoPE; empty:
    # every 4th layer NoPE), attention_chunk_size (the RoPE layers' chunked mask), use_qk_norm
    # (L2 norm on the RoPE layers), attn_temperature_tuning with floor_scale / attn_scale (NoPE layers)
    no_rope_layers: tuple = ()
    attention_chunk: int = 8192
    use_qk_norm: bool = True
    temperature_tuning: bool = True
    floor_scale: float = 8192.0
    attn_scale: float = 0.1
    wrapper: bool = False  # llama4_text: the case's config.json is the Llama4ForConditionalGeneration wrapper

    def llama4_rope(self, i):
        """Llama4TextAttention.use_rope: no_rope_layers[i], default int((i + 1) % 4 != 0)."""
        return bool(self.no_rope_layers[i]) if self.no_rope_layers else (i + 1) % 4 != 0

    def is_sliding(self, i):
        return bool(self.sliding_pattern) and (i + 1) % self.sliding_pattern != 0

    def is_moe_layer(self, i):
        """Which layers hold routed experts, as each HF decoder layer decides."""
        moe = self.traits.moe
        if not moe:
            return False
        if moe == "qwen2_moe":  # Qwen2MoeDecoderLayer
            return i not in self.mlp_only_layers and (i + 1) % self.sparse_step == 0
        if moe == "deepseek":  # DeepseekV3DecoderLayer
            return i >= self.first_dense
        if moe == "llama4":  # Llama4TextConfig.moe_layers: range(step - 1, L, step)
            return (i + 1) % self.sparse_step == 0
        return True  # Mixtral, Qwen3-MoE (every layer here)

    @property
    def traits(self):
        return FAMILY_TRAITS[self.family]


@dataclasses.dataclass(frozen=True)
class FamilyTraits:
    """What the HF modeling file of a family hard-codes (hf style only; megatron ignores it)."""

    norm: str = "rms"  # rms (LlamaRMSNorm) | gemma_rms (fp32 (1 + w)) | layer (nn.LayerNorm)
    qkv: str = "separate"  # separate | gpt2 (c_attn split) | phi3 (qkv_proj sliced) | neox (per-head interleaved) | mla (DeepSeek)
    mlp: str = "swiglu"  # swiglu | geglu_tanh | phi3 (gate_up_proj chunked) | gelu_new | gelu (exact, biased)
    rope: bool = True
    qk_norm: bool = False  # qwen3: RMSNorm over head_dim on q and k before RoPE
    embed_scale: bool = False  # gemma: embeddings * sqrt(h) (a 0-dim tensor normalizer)
    sandwich: bool = False  # gemma2: post-attention and post-feedforward norms
    hidden_dropout: bool = False  # the model applies resid dropout (gpt2, gpt_neox, phi3)
    embedding_dropout: bool = False  # ... and an embedding dropout (gpt2 drop, gpt_neox emb_dropout; not phi3)
    softmax_fp32: bool = True  # eager softmax(dtype=float32); GPT-2 softmax in activation dtype
    # MoE block: "" (dense) | mixtral (softmax router, expert loop; Qwen3-MoE too) | qwen2_moe
    # (+ shared expert scaled by sigmoid(shared_expert_gate(x))) | deepseek (fp32 router on
    # sigmoid scores, group-limited top-k, fp32 combine, shared experts)
    moe: str = ""
    # layer wiring: "" (pre-norm, sequential residual) | phi (one input_layernorm read by attention
    # and the MLP, parallel residual) | olmo2 (no input norms; norms on the attention and MLP outputs)
    layer: str = ""
    qk_norm_full: bool = False  # olmo2: q_norm / k_norm over the whole projection, before the head split
    learned_positions: bool = False  # gpt2, gpt_bigcode: wpe
    qk_norm_after_transpose: bool = False  # gemma3: q_norm / k_norm (Gemma RMSNorm) on the (b, heads, s, d) tensors


FAMILY_TRAITS = {
    "gpt2": FamilyTraits(norm="layer", qkv="gpt2", mlp="gelu_new", rope=False, hidden_dropout=True,
                         embedding_dropout=True, softmax_fp32=False, learned_positions=True),
    # modeling_gpt_bigcode.py (4.5x attention interface): one c_attn of (a + 2·kv)·d outputs; MQA
    # `c_attn(x).unsqueeze(1).split((h, kv·d, kv·d), dim=3)` (k, v: (b, 1, s, d) views broadcast by
    # matmul), MHA per-head [q | k | v] (`view(b, s, a, 3d).transpose(1, 2).split(3 * [d])`);
    # eager_attention_forward (fp32 softmax); GPT2-style block, MLP gelu_pytorch_tanh with biases
    "gpt_bigcode": FamilyTraits(norm="layer", qkv="bigcode", mlp="gelu_tanh", rope=False, hidden_dropout=True,
                                embedding_dropout=True, learned_positions=True),
    # modeling_phi.py: PhiAttention (q/k/v/dense with biases, partial rotary), PhiMLP fc1 -> gelu_new
    # -> fc2 (biases), PhiDecoderLayer: attn and MLP on one input_layernorm output, each through
    # resid_dropout, summed with the residual; PhiModel embed_dropout; LayerNorm final_layernorm
    "phi": FamilyTraits(norm="layer", mlp="gelu_new", hidden_dropout=True, embedding_dropout=True, layer="phi"),
    # modeling_olmo2.py: Olmo2RMSNorm multiplies the weight in fp32; q_norm / k_norm on the q_proj /
    # k_proj outputs (full width) before view and RoPE; Olmo2DecoderLayer post-norms only
    "olmo2": FamilyTraits(norm="olmo2_rms", qk_norm=True, qk_norm_full=True, layer="olmo2"),
    # modeling_falcon.py (4.5x): FalconAttention._split_heads, RoPE, eager softmax in the activation
    # dtype without attention dropout, FalconFlashAttention2; FalconDecoderLayer parallel block
    # (`mlp_output += attention_output`, one dropout_add); FalconMLP exact gelu; no embedding dropout
    # modeling_gemma3.py (Gemma3ForCausalLM, text): Gemma 2's layer without softcapping, q_norm /
    # k_norm (Gemma3RMSNorm, (1 + w) in fp32) after the head transpose, local RoPE tables and a
    # sliding eager mask for the sliding layers (Gemma3TextModel: both position embeddings to every layer)
    "gemma3_text": FamilyTraits(norm="gemma_rms", mlp="geglu_tanh", embed_scale=True, sandwich=True, qk_norm=True,
                                qk_norm_after_transpose=True),
    "falcon": FamilyTraits(norm="layer", qkv="falcon", mlp="gelu", softmax_fp32=False, layer="falcon"),
    "llama": FamilyTraits(),
    "mistral": FamilyTraits(),  # MistralForCausalLM: Llama's blocks (sliding_window longer than every case's s)
    "qwen2": FamilyTraits(),
    "mixtral": FamilyTraits(moe="mixtral"),
    "gemma": FamilyTraits(norm="gemma_rms", mlp="geglu_tanh", embed_scale=True),
    "gemma2": FamilyTraits(norm="gemma_rms", mlp="geglu_tanh", embed_scale=True, sandwich=True),
    "qwen3": FamilyTraits(qk_norm=True),
    "qwen3_moe": FamilyTraits(qk_norm=True, moe="mixtral"),  # Qwen3MoeSparseMoeBlock: the Mixtral loop, norm_topk_prob
    "qwen2_moe": FamilyTraits(moe="qwen2_moe"),  # Qwen2 attention (qkv bias) + Qwen2MoeSparseMoeBlock
    "deepseek_v3": FamilyTraits(qkv="mla", moe="deepseek"),  # modeling_deepseek_v3.py
    # Phi3DecoderLayer: resid_attn_dropout / resid_mlp_dropout (resid_pdrop); Phi3Model applies no
    # embedding dropout (4.44 builds embed_dropout and never calls it; 4.48+ has none)
    "phi3": FamilyTraits(qkv="phi3", mlp="phi3", hidden_dropout=True),
    "gpt_neox": FamilyTraits(norm="layer", qkv="neox", mlp="gelu", hidden_dropout=True, embedding_dropout=True),
    # modeling_llama4.py (4.57, 5): its own model class, llama4_model.py (complex RoPE, NoPE layers,
    # L2 q/k norm, temperature tuning, chunked mask, softmax without fp32 upcast, Llama4TextMoe)
    "llama4_text": FamilyTraits(softmax_fp32=False, moe="llama4"),
    # encoders: HFEncoderModel below (post-LN BertLayer); the traits only say LayerNorm / no RoPE
    "bert": FamilyTraits(norm="layer", mlp="gelu", rope=False, softmax_fp32=False, learned_positions=True),
    "roberta": FamilyTraits(norm="layer", mlp="gelu", rope=False, softmax_fp32=False, learned_positions=True),
}


@dataclasses.dataclass
class RunConfig:
    framework: str  # hf | megatron
    attention: str  # eager | flash | sdpa
    recompute: str  # none | selective | full
    dtype: str  # bf16 | fp32
    seq_len: int
    micro_batch: int
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    # full recompute: torch.utils.checkpoint's reentrant Function (HF 4.x default, Megatron's own
    # tensor_parallel.checkpoint) or the non-reentrant one (HF 5.x default)
    checkpoint: str = "reentrant"
    hf_version: str = "4.57"  # hf: transformers code layout, 4.57, 4.44 (the loss) or 5 (MoE experts)
    experts_impl: str = "grouped_mm"  # hf_version 5: config._experts_implementation (hf5_models.py)
    # hf: N documents packed in each row (DataCollatorWithFlattening's position_ids restarting per
    # document, no attention_mask; actmem --packed-docs N); 0 = unpacked rows
    packed_docs: int = 0

    @property
    def torch_dtype(self):
        return {"bf16": torch.bfloat16, "fp32": torch.float32}[self.dtype]


def _linear(n_in, n_out, bias):
    layer = nn.Linear(n_in, n_out, bias=bias)
    nn.init.normal_(layer.weight, std=0.02)
    return layer


def _rope_tables(seq_len, head_dim, dtype, theta=10000.0):
    """HF LlamaRotaryEmbedding: computed once per model forward in fp32, cast to the activation
    dtype; shape (1, s, d). Shared by all layers."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    positions = torch.arange(seq_len, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)[None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rope_tables_from_ids(position_ids, head_dim, dtype, theta=10000.0):
    """LlamaRotaryEmbedding.forward with (b, s) position ids: inv_freq expanded to the batch, freqs =
    (inv_freq @ position_ids).transpose(1, 2), cos/sin of cat(freqs, freqs) in fp32 cast to the
    activation dtype: (b, s, d), one row per sequence."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    b = position_ids.shape[0]
    freqs = (inv_freq[None, :, None].expand(b, -1, 1) @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def packed_position_ids(seq_len, docs, batch):
    """DataCollatorWithFlattening's position_ids for `docs` documents of seq_len // docs tokens per row
    (the last takes the remainder), restarting at 0 per document: a (b, s) int64 tensor."""
    size = seq_len // docs
    lengths = [size] * (docs - 1) + [seq_len - size * (docs - 1)]
    row = torch.cat([torch.arange(n) for n in lengths])
    return row.repeat(batch, 1)


@functools.lru_cache(maxsize=32)
def megatron_rotary_freqs(seq_len, head_dim, theta=10000.0):
    """Megatron-core RotaryEmbedding.forward (lru_cache'd): emb = cat(freqs, freqs)[:, None, None, :],
    fp32 (s, 1, 1, d); one tensor for every layer and micro-batch."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return torch.cat((freqs, freqs), dim=-1)[:, None, None, :]


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


# ---------------------------------------------------------------------------------------------
# HF style


def hf_rms_norm(x, weight, eps):
    """LlamaRMSNorm.forward. Saves: pow -> fp32 x (a copy for bf16, x itself for fp32);
    rsqrt -> its fp32 output (s·b); x*rsqrt -> fp32 x and rsqrt (already counted);
    weight * normalized -> the normalized x in activation dtype (new tensor)."""
    input_dtype = x.dtype
    x = x.to(torch.float32)
    variance = ops.MeanLastDim.apply(x.pow(2))  # torch 2.x mean saves only sizes
    x = x * torch.rsqrt(variance + eps)
    return weight * x.to(input_dtype)


def hf_gemma_rms_norm(x, weight, eps):
    """GemmaRMSNorm / Gemma2RMSNorm.forward: normalizes in fp32 and scales by (1 + weight) in fp32,
    then casts. Saves: fp32 x (pow; a copy for bf16, x itself for fp32), fp32 rsqrt (s·b), and
    for the (1 + w) multiply both factors: the fp32 normalized x and the fp32 (1 + w) vector
    (h elements, derived from the parameter, not a parameter itself)."""
    xf = x.float()
    out = xf * torch.rsqrt(ops.MeanLastDim.apply(xf.pow(2)) + eps)
    out = out * (1.0 + weight.float())
    return out.type_as(x)


def hf_olmo2_rms_norm(x, weight, eps):
    """Olmo2RMSNorm.forward: `(self.weight * x_normalized).to(input_dtype)` with x_normalized in
    fp32. Saves: fp32 x (pow; a copy for bf16, x itself for fp32), fp32 rsqrt (s·b), and for the
    weight multiply the fp32 normalized x (the weight is a parameter)."""
    input_dtype = x.dtype
    x = x.to(torch.float32)
    variance = ops.MeanLastDim.apply(x.pow(2))
    x = x * torch.rsqrt(variance + eps)
    return (weight * x).to(input_dtype)


def hf_gelu_new(x):
    """transformers NewGELUActivation as its Python formula. Saves x (pow), tanh's output,
    0.5*x and (1 + tanh) (the final mul saves both operands)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def hf_repeat_kv(x, groups):
    """(b, kv, s, d) -> (b, kv*groups, s, d): expand + reshape = a copy when groups > 1."""
    if groups == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, groups, s, d).reshape(b, kv * groups, s, d)


def hf_apply_rope(x, cos, sin):
    """apply_rotary_pos_emb on (b, heads, s, d) with (1, 1, s, rot) tables. Full rotary (Llama):
    x*cos + rotate_half(x)*sin. Partial (GPT-NeoX, Phi-3): the first rot dims are rotated and
    concatenated with the rest (cat saves nothing). Only cos and sin are saved."""
    rot = cos.shape[-1]
    if rot == x.shape[-1]:
        return x * cos + _rotate_half(x) * sin
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    return torch.cat((x_rot * cos + _rotate_half(x_rot) * sin, x_pass), dim=-1)


def _rotary_dims(cfg):
    if cfg.traits.qkv == "mla":  # DeepSeek: RoPE on the qk_rope_head_dim part only
        return cfg.qk_rope_dim
    return int(cfg.head_dim * cfg.rotary_pct)


def hf_apply_rope_interleave(x, cos, sin):
    """DeepSeek-V3 apply_rotary_pos_emb_interleave: de-interleave the pairs (view, transpose,
    reshape: a copy, saved by nothing), then x*cos + rotate_half(x)*sin. Only cos, sin are saved."""
    b, heads, s, d = x.shape
    x = x.view(b, heads, s, d // 2, 2).transpose(4, 3).reshape(b, heads, s, d)
    return x * cos + _rotate_half(x) * sin


class HFAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        a, kv, d, h = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.hidden
        qkv = cfg.traits.qkv
        if qkv == "gpt2":
            self.c_attn = _linear(h, 3 * h, True)  # fused: q, k, v are views of one output
            self.o_proj = _linear(h, h, True)
        elif qkv == "phi3":
            self.qkv_proj = _linear(h, (a + 2 * kv) * d, False)  # Phi3Attention: sliced q | k | v
            self.o_proj = _linear(a * d, h, False)
        elif qkv == "neox":
            self.query_key_value = _linear(h, 3 * h, cfg.attention_bias)  # per head [q | k | v]
            self.o_proj = _linear(h, h, cfg.attention_bias)  # `dense`
        elif qkv == "falcon":
            assert cfg.new_arch or kv in (1, a)
            self.c_attn = _linear(h, (a + 2 * kv) * d, cfg.attention_bias)  # query_key_value
            self.o_proj = _linear(h, h, cfg.attention_bias)  # dense
        elif qkv == "bigcode":
            assert kv in (1, a), "GPTBigCode: multi_query (kv = 1) or MHA"
            self.c_attn = _linear(h, (a + 2 * kv) * d, True)
            self.o_proj = _linear(h, h, True)  # c_proj
        else:
            bias = cfg.attention_bias
            self.q_proj = _linear(h, a * d, bias)
            self.k_proj = _linear(h, kv * d, bias)
            self.v_proj = _linear(h, kv * d, bias)
            self.o_proj = _linear(a * d, h, cfg.o_bias)
        if cfg.traits.qk_norm_full:
            self.q_norm_w = nn.Parameter(torch.ones(a * d))
            self.k_norm_w = nn.Parameter(torch.ones(kv * d))
        elif cfg.traits.qk_norm:
            init = torch.zeros if cfg.traits.norm == "gemma_rms" else torch.ones
            self.q_norm_w = nn.Parameter(init(d))
            self.k_norm_w = nn.Parameter(init(d))

    def forward(self, x, rope, mask):
        cfg, run = self.cfg, self.run
        b, s, _ = x.shape
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        qkv = cfg.traits.qkv
        if qkv == "gpt2":
            q, k, v = self.c_attn(x).split(cfg.hidden, dim=2)
            q, k, v = (t.view(b, s, a, d).transpose(1, 2) for t in (q, k, v))
        elif qkv == "phi3":
            fused = self.qkv_proj(x)
            q = fused[..., : a * d].view(b, s, a, d).transpose(1, 2)
            k = fused[..., a * d : (a + kv) * d].view(b, s, kv, d).transpose(1, 2)
            v = fused[..., (a + kv) * d :].view(b, s, kv, d).transpose(1, 2)
        elif qkv == "neox":
            # GPTNeoXAttention: view (b, s, a, 3d), transpose, chunk: per-head interleaved layout
            fused = self.query_key_value(x).view(b, s, a, 3 * d).transpose(1, 2)
            q, k, v = fused.chunk(3, dim=-1)
        elif qkv == "falcon":
            return self._falcon(x, rope, mask)
        elif qkv == "bigcode" and kv == 1:
            # GPTBigCodeAttention, multi_query: k and v are (b, 1, s, d) views, one head for all
            q, k, v = self.c_attn(x).unsqueeze(1).split((a * d, d, d), dim=3)
            q = q.view(b, s, a, d).transpose(1, 2)
        elif qkv == "bigcode":
            q, k, v = self.c_attn(x).view(b, s, a, 3 * d).transpose(1, 2).split(3 * [d], dim=3)
        elif cfg.traits.qk_norm_full:
            # Olmo2Attention: q_norm(q_proj(x)), k_norm(k_proj(x)) over the whole projection
            q = hf_norm(cfg, self.q_proj(x), self.q_norm_w).view(b, s, a, d).transpose(1, 2)
            k = hf_norm(cfg, self.k_proj(x), self.k_norm_w).view(b, s, kv, d).transpose(1, 2)
            v = self.v_proj(x).view(b, s, kv, d).transpose(1, 2)
        else:
            q = self.q_proj(x).view(b, s, a, d)
            k = self.k_proj(x).view(b, s, kv, d)
            if cfg.traits.qk_norm_after_transpose:  # Gemma3Attention: view, transpose, then q_norm / k_norm
                q = hf_norm(cfg, q.transpose(1, 2), self.q_norm_w).transpose(1, 2)
                k = hf_norm(cfg, k.transpose(1, 2), self.k_norm_w).transpose(1, 2)
            elif cfg.traits.qk_norm:  # Qwen3: RMSNorm over head_dim on the (b, s, heads, d) view
                q = hf_rms_norm(q, self.q_norm_w, cfg.eps)
                k = hf_rms_norm(k, self.k_norm_w, cfg.eps)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            v = self.v_proj(x).view(b, s, kv, d).transpose(1, 2)
        if rope is not None:
            cos, sin = (t.unsqueeze(1) for t in rope)
            # saves cos and sin only (they do not require grad)
            q = hf_apply_rope(q, cos, sin)
            k = hf_apply_rope(k, cos, sin)
        if run.attention == "eager":
            out = self._eager(q, k, v, mask)
        elif run.packed_docs and run.attention == "flash":
            out = self._flash_varlen(q, k, v, mask)
        elif run.packed_docs and run.attention == "sdpa":
            # sdpa_attention_forward with a mask: repeat_kv (use_gqa_in_sdpa is False), then torch SDPA
            groups = cfg.heads // cfg.kv_heads
            out = ops.EfficientAttentionBiasFn.apply(q, hf_repeat_kv(k, groups), hf_repeat_kv(v, groups), mask)
            out = out.transpose(1, 2).contiguous()  # already (b, s, heads, d) in memory: no copy
        else:
            # flash_attention_2 / sdpa: (b, s, heads, d) views go to the kernel as they are
            out = ops.FlashAttentionFn.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), "bshd")
        out = out.reshape(b, s, a * d)
        out = self.o_proj(out)
        if cfg.family in ("gpt2", "gpt_bigcode"):
            out = ops.dropout(out, run.hidden_dropout)  # resid_dropout
        return out

    def _flash_varlen(self, q, k, v, position_ids):
        """_flash_attention_forward on a packed row (batch 1): _is_packed_sequence, then _prepare_from_posids:
        q, k, v (b, s, heads, d) .contiguous().view(-1, heads, d) and prepare_fa_kwargs_from_position_ids'
        int32 cu_seq_lens_q = cat(nonzero(position_ids == 0), [total]), cu_seq_lens_k the same tensor;
        flash_attn_varlen_func, output viewed back to (b, s, heads, d). `position_ids` come in the mask slot."""
        b, _, s, d = q.shape
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        q, k, v = (t.view(-1, t.shape[2], d) for t in (q, k, v))
        flat = position_ids.view(-1)
        starts = (flat == 0).nonzero().view(-1)
        cu_seqlens = torch.cat((starts.to(torch.int32), torch.tensor(flat.size(), dtype=torch.int32)))
        out = ops.VarlenFlashAttentionFn.apply(q, k, v, cu_seqlens, cu_seqlens)
        return out.view(b, s, out.shape[1], d)

    def _falcon(self, x, rope, mask):
        """FalconAttention / FalconFlashAttention2.forward without alibi."""
        cfg, run = self.cfg, self.run
        b, s, _ = x.shape
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        fused = self.c_attn(x)
        if cfg.new_arch:  # _split_heads: per KV group [q ... q | k | v]; k, v broadcast and flattened (copies)
            qkv = fused.view(b, s, kv, a // kv + 2, d)
            q, k, v = qkv[:, :, :, :-2], qkv[:, :, :, [-2]], qkv[:, :, :, [-1]]
            k, v = torch.broadcast_to(k, q.shape), torch.broadcast_to(v, q.shape)
            q, k, v = (t.flatten(2, 3) for t in (q, k, v))
            kvh = a
        elif kv == 1:  # multi_query: [q heads | k | v]; list indexing copies k and v (index keeps its int64 index)
            f = fused.view(b, s, a + 2, d)
            q, k, v = f[..., :-2, :], f[..., [-2], :], f[..., [-1], :]
            kvh = 1
        else:
            f = fused.view(b, s, a, 3, d)
            q, k, v = f[..., 0, :], f[..., 1, :], f[..., 2, :]
            kvh = a
        q = q.transpose(1, 2).reshape(b, a, s, d)
        k = k.transpose(1, 2).reshape(b, kvh, s, d)
        v = v.transpose(1, 2).reshape(b, kvh, s, d)
        cos, sin = (t.unsqueeze(1) for t in rope)
        q, k = hf_apply_rope(q, cos, sin), hf_apply_rope(k, cos, sin)
        if run.attention == "eager":
            scores = q @ k.transpose(-1, -2)  # multi_query: matmul broadcasts k over the heads (a copy)
            scores /= math.sqrt(d)
            probs = F.softmax(scores + mask, dim=-1, dtype=x.dtype)  # no attention dropout here
            out = (probs @ v).view(b, a, s, d).permute(0, 2, 1, 3).reshape(b, s, a * d)
        else:  # FalconFlashAttention2: (b, s, heads, d) views to the kernel
            out = ops.FlashAttentionFn.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), "bshd")
            out = out.reshape(b, s, a * d)
        return self.o_proj(out)

    def _eager(self, q, k, v, mask):
        cfg, run = self.cfg, self.run
        # GPTBigCode has no repeat_kv: matmul broadcasts the (b, 1, s, d) k and v over the heads
        groups = 1 if cfg.traits.qkv == "bigcode" else cfg.heads // cfg.kv_heads
        k = hf_repeat_kv(k, groups)
        v = hf_repeat_kv(v, groups)
        scaling = (cfg.query_pre_attn_scalar or cfg.head_dim) ** -0.5
        # matmul folds (b, a) with reshape: q/k/v that are strided views (GPT-2's c_attn split,
        # Llama's v_proj output when groups == 1) are copied, and bmm saves the copies.
        scores = torch.matmul(q, k.transpose(2, 3)) * scaling
        if cfg.attn_softcap:  # Gemma 2: tanh saves its output (activation dtype)
            scores = torch.tanh(scores / cfg.attn_softcap) * cfg.attn_softcap
        scores = scores + mask  # additive causal mask, shared, not saved by add
        if cfg.traits.softmax_fp32:
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        else:
            probs = F.softmax(scores, dim=-1).type(v.dtype)  # GPT-2: softmax in activation dtype
        probs = ops.dropout(probs, run.attention_dropout)
        out = torch.matmul(probs, v)
        return out.transpose(1, 2).contiguous()


class HFLatentAttention(nn.Module):
    """DeepseekV3Attention (multi-head latent attention), eager / flash_attention_2 / sdpa.

    q: q_a_proj -> q_a_layernorm (RMSNorm over q_lora_rank) -> q_b_proj, or q_proj; split per head
    into q_nope | q_rope (views). kv_a_proj_with_mqa -> [compressed kv (kv_lora_rank) | k_rope
    (qk_rope_head_dim, one head shared by all)]; kv_a_layernorm on the compressed part (a strided
    view) -> kv_b_proj -> per head [k_nope | v] (views). RoPE on q_rope and k_rope; k_rope expanded
    to all heads; query = cat(q_nope, q_rope), key = cat(k_nope, k_rope): new tensors.
    flash_attention_2 pads v to the q/k head dim when they differ (F.pad saves nothing) and slices
    the output back (reshape of the slice: a copy). sdpa does not pad."""

    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        h, a = cfg.hidden, cfg.heads
        dqk = cfg.qk_nope_dim + cfg.qk_rope_dim
        if cfg.q_lora_rank:
            self.q_a_proj = _linear(h, cfg.q_lora_rank, False)
            self.q_a_norm_w = nn.Parameter(torch.ones(cfg.q_lora_rank))
            self.q_b_proj = _linear(cfg.q_lora_rank, a * dqk, False)
        else:
            self.q_proj = _linear(h, a * dqk, False)
        self.kv_a_proj = _linear(h, cfg.kv_lora_rank + cfg.qk_rope_dim, False)
        self.kv_a_norm_w = nn.Parameter(torch.ones(cfg.kv_lora_rank))
        self.kv_b_proj = _linear(cfg.kv_lora_rank, a * (cfg.qk_nope_dim + cfg.v_head_dim), False)
        self.o_proj = _linear(a * cfg.v_head_dim, h, False)

    def forward(self, x, rope, mask):
        cfg, run = self.cfg, self.run
        b, s, _ = x.shape
        a, dn, dr, dv = cfg.heads, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
        dqk = dn + dr
        if cfg.q_lora_rank:
            q = self.q_b_proj(hf_rms_norm(self.q_a_proj(x), self.q_a_norm_w, 1e-6))
        else:
            q = self.q_proj(x)
        q = q.view(b, s, a, dqk).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [dn, dr], dim=-1)
        compressed = self.kv_a_proj(x)
        k_pass, k_rot = torch.split(compressed, [cfg.kv_lora_rank, dr], dim=-1)
        kv = self.kv_b_proj(hf_rms_norm(k_pass, self.kv_a_norm_w, 1e-6)).view(b, s, a, dn + dv).transpose(1, 2)
        k_pass, v = torch.split(kv, [dn, dv], dim=-1)
        k_rot = k_rot.view(b, 1, s, dr)
        cos, sin = (t.unsqueeze(1) for t in rope)
        apply = hf_apply_rope_interleave if cfg.rope_interleave else hf_apply_rope
        q_rot, k_rot = apply(q_rot, cos, sin), apply(k_rot, cos, sin)
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        query = torch.cat((q_pass, q_rot), dim=-1)
        key = torch.cat((k_pass, k_rot), dim=-1)
        pad = run.attention == "flash" and dqk != dv
        if pad:
            v = F.pad(v, [0, dqk - dv])
        if run.attention == "eager":
            scores = torch.matmul(query, key.transpose(2, 3)) * dqk**-0.5
            probs = F.softmax(scores + mask, dim=-1, dtype=torch.float32).to(query.dtype)
            probs = ops.dropout(probs, run.attention_dropout)
            out = torch.matmul(probs, v).transpose(1, 2).contiguous()  # matmul copies the strided v
        else:
            out = ops.FlashAttentionFn.apply(query.transpose(1, 2), key.transpose(1, 2), v.transpose(1, 2), "bshd")
        if pad:
            out = out[:, :, :, :dv]
        return self.o_proj(out.reshape(b, s, a * dv).contiguous())


class HFMLP(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        h, f = cfg.hidden, cfg.ffn
        kind = cfg.traits.mlp
        if kind in ("gelu_new", "gelu", "gelu_tanh"):
            self.c_fc = _linear(h, f, True)  # GPT-2 c_fc / GPT-NeoX dense_h_to_4h
            self.c_proj = _linear(f, h, True)
        elif kind == "phi3":
            self.gate_up_proj = _linear(h, 2 * f, False)
            self.down_proj = _linear(f, h, False)
        else:
            self.gate_proj = _linear(h, f, False)
            self.up_proj = _linear(h, f, False)
            self.down_proj = _linear(f, h, False)

    def forward(self, x):
        kind = self.cfg.traits.mlp
        if kind == "gelu_new":  # GPT2MLP drops its output; Phi's decoder layer drops it (resid_dropout)
            out = self.c_proj(hf_gelu_new(self.c_fc(x)))
            return ops.dropout(out, self.run.hidden_dropout) if self.cfg.family == "gpt2" else out
        if kind == "gelu_tanh":  # GPTBigCodeMLP: gelu_pytorch_tanh (one op, saves its input), dropout
            return ops.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")), self.run.hidden_dropout)
        if kind == "gelu":  # GPT-NeoX: exact GeLU saves its input; the dropout is the layer's
            return self.c_proj(F.gelu(self.c_fc(x)))
        if kind == "phi3":
            # Phi3MLP: gate and up are views of one output; silu keeps gate (-> the whole storage)
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(up * F.silu(gate))
        act = F.silu if kind == "swiglu" else functools.partial(F.gelu, approximate="tanh")
        # act saves its input; mul saves act's output and up's output; down saves the product
        return self.down_proj(act(self.gate_proj(x)) * self.up_proj(x))


class HFMoE(nn.Module):
    """MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock / Qwen2MoeSparseMoeBlock, dropless, experts
    run on the tokens routed to them.
    Saves (per layer, T = s·b tokens, k = top_k, E experts):
      gate linear input (the norm output), fp32 router softmax (T·E),
      topk indices int64 (T·k) and the normalization's saved tensors (fp32 T·k and T·1),
      per expert e with n_e tokens (sum n_e = k·T): torch.where's row/column index tensors
      (int64 n_e each), the gathered tokens (n_e·h, saved by gate and up), SwiGLU as HF (4 n_e·f),
      the expert output (n_e·h) and its routing weight column (n_e·1) saved by the weighting mul.
    Qwen2-MoE adds the shared expert (SwiGLU of shared_ffn on all T tokens) scaled by
    sigmoid(shared_expert_gate(x)): the mul keeps the sigmoid output (T·1) and the shared output.
    """

    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg = cfg
        self.gate = _linear(cfg.hidden, cfg.experts, False)
        self.experts = nn.ModuleList(HFMLP(dataclasses.replace(cfg, family="llama"), run) for _ in range(cfg.experts))
        if cfg.traits.moe == "qwen2_moe":
            self.shared_expert = HFMLP(dataclasses.replace(cfg, family="llama", ffn=cfg.shared_ffn), run)
            self.shared_expert_gate = _linear(cfg.hidden, 1, False)

    def forward(self, x):
        b, s, h = x.shape
        x = x.view(-1, h)
        router_logits = self.gate(x)
        weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, self.cfg.top_k, dim=-1)
        if self.cfg.norm_topk_prob:  # the in-place div keeps the fp32 weights and their row sums
            weights /= weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        final = torch.zeros((b * s, h), dtype=x.dtype)
        expert_mask = F.one_hot(selected, num_classes=self.cfg.experts).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            idx, top_x = torch.where(expert_mask[e])
            if top_x.numel() == 0:
                continue
            tokens = x[None, top_x].reshape(-1, h)
            out = expert(tokens) * weights[top_x, idx, None]
            final.index_add_(0, top_x, out.to(x.dtype))
        if self.cfg.traits.moe == "qwen2_moe":
            final = final + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return final.reshape(b, s, h)


class HFDeepseekMoE(nn.Module):
    """DeepseekV3MoE with DeepseekV3TopkRouter (transformers 4.5x expert loop).
    Router: F.linear(x.float(), W.float()) keeps the fp32 copies of x (T·h) and, for a bf16 model,
    of W (E·h: a new tensor, not the parameter); sigmoid keeps its fp32 output (T·E). The
    group-limited choice (scores + e_score_correction_bias, top-2 per group summed, topk_group
    groups, top-k) runs under no_grad: nothing saved. gather keeps the int64 top-k indices;
    norm_topk_prob: the in-place `/= (sum + 1e-20)` keeps the fp32 weights and the denominators;
    `* routed_scaling_factor` (a Python scalar) keeps nothing.
    Expert loop: where (one (n_e, 2) int64 storage), gathered tokens, SwiGLU, expert output and the
    **fp32** weight column (the product is promoted to fp32), index_add_ into an fp32 buffer keeps
    the fp32 weighted output. Shared experts: one SwiGLU of n_shared·moe_ffn on all tokens.
    """

    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg = cfg
        self.gate_w = nn.Parameter(torch.empty(cfg.experts, cfg.hidden).normal_(std=0.02))
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.experts))
        self.experts = nn.ModuleList(HFMLP(dataclasses.replace(cfg, family="llama"), run) for _ in range(cfg.experts))
        self.shared_experts = HFMLP(dataclasses.replace(cfg, family="llama", ffn=cfg.shared_ffn), run)

    @torch.no_grad()
    def _topk_indices(self, scores):
        cfg = self.cfg
        E, groups = cfg.experts, cfg.n_group
        choice = scores.view(-1, E) + self.e_score_correction_bias.unsqueeze(0)
        group_scores = choice.view(-1, groups, E // groups).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=cfg.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, groups, E // groups).reshape(-1, E)
        choice = choice.masked_fill(~score_mask.bool(), 0.0)
        return torch.topk(choice, k=cfg.top_k, dim=-1, sorted=False)[1]

    def forward(self, x):
        cfg = self.cfg
        shape = x.shape
        flat = x.view(-1, cfg.hidden)
        scores = F.linear(flat.type(torch.float32), self.gate_w.type(torch.float32)).sigmoid()
        indices = self._topk_indices(scores)
        weights = scores.gather(1, indices)
        if cfg.norm_topk_prob:
            weights /= weights.sum(dim=-1, keepdim=True) + 1e-20
        weights = weights * cfg.routed_scaling
        final = torch.zeros_like(flat, dtype=weights.dtype)  # fp32
        expert_mask = F.one_hot(indices, num_classes=cfg.experts).permute(2, 0, 1)
        for e, expert in enumerate(self.experts):
            token_idx, weight_idx = torch.where(expert_mask[e])
            if token_idx.numel() == 0:
                continue
            out = expert(flat[token_idx]) * weights[token_idx, weight_idx].unsqueeze(-1)
            final.index_add_(0, token_idx, out)
        routed = final.type(x.dtype).view(*shape)
        return routed + self.shared_experts(x)


class HFLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig, index=0):
        super().__init__()
        self.cfg, self.run = cfg, run
        h = cfg.hidden
        n_norms = 4 if cfg.traits.sandwich else 2
        init = torch.zeros if cfg.traits.norm == "gemma_rms" else torch.ones  # Gemma: (1 + w)
        self.norm_w = nn.ParameterList(nn.Parameter(init(h)) for _ in range(n_norms))
        if cfg.traits.norm == "layer":
            self.norm_b = nn.ParameterList(nn.Parameter(torch.zeros(h)) for _ in range(n_norms))
        self.attn = HFLatentAttention(cfg, run) if cfg.traits.qkv == "mla" else HFAttention(cfg, run)
        if cfg.is_moe_layer(index) and run.hf_version == "5":  # fused 3-D experts (hf5_models.py)
            import hf5_models
            self.mlp = (hf5_models.HF5DeepseekMoE(cfg, run, HFMLP, HFDeepseekMoE._topk_indices)
                        if cfg.traits.moe == "deepseek" else hf5_models.HF5MoE(cfg, run, HFMLP))
        elif cfg.is_moe_layer(index):
            self.mlp = (HFDeepseekMoE if cfg.traits.moe == "deepseek" else HFMoE)(cfg, run)
        elif cfg.traits.moe:  # a dense layer of an MoE model: intermediate_size
            self.mlp = HFMLP(dataclasses.replace(cfg, ffn=cfg.dense_ffn), run)
        else:
            self.mlp = HFMLP(cfg, run)

    def norm(self, x, i):
        return hf_norm(self.cfg, x, self.norm_w[i], self.norm_b[i] if self.cfg.traits.norm == "layer" else None)

    def forward(self, x, rope, mask, **unused):
        cfg, run = self.cfg, self.run
        if cfg.family == "gpt_neox":
            # GPTNeoXLayer: post_attention_dropout / post_mlp_dropout (hidden_dropout)
            attn = ops.dropout(self.attn(self.norm(x, 0), rope, mask), run.hidden_dropout)
            if cfg.parallel_residual:  # x + attn(ln1(x)) + mlp(ln2(x))
                mlp = ops.dropout(self.mlp(self.norm(x, 1)), run.hidden_dropout)
                return mlp + attn + x
            attn = attn + x
            return ops.dropout(self.mlp(self.norm(attn, 1)), run.hidden_dropout) + attn
        if cfg.traits.layer == "phi":  # PhiDecoderLayer: one norm, parallel branches, resid_dropout on each
            n = self.norm(x, 0)
            attn = ops.dropout(self.attn(n, rope, mask), run.hidden_dropout)
            return attn + ops.dropout(self.mlp(n), run.hidden_dropout) + x
        if cfg.traits.layer == "falcon":  # FalconDecoderLayer, parallel block (7B: one norm; new arch: ln_attn, ln_mlp)
            an = self.norm(x, 0)
            mn = self.norm(x, 1) if cfg.new_arch and cfg.num_ln == 2 else an
            attn = self.attn(an, rope, mask)
            mlp = self.mlp(mn)
            mlp += attn
            return x + ops.dropout(mlp, run.hidden_dropout)  # dropout_add(mlp_output, residual, hidden_dropout)
        if cfg.traits.layer == "olmo2":  # Olmo2DecoderLayer: post_attention / post_feedforward norms only
            x = x + self.norm(self.attn(x, rope, mask), 0)
            return x + self.norm(self.mlp(x), 1)
        if cfg.traits.sandwich:  # Gemma2DecoderLayer
            x = x + self.norm(self.attn(self.norm(x, 0), rope, mask), 1)
            return x + self.norm(self.mlp(self.norm(x, 2)), 3)
        if cfg.family == "phi3":  # residual + resid_attn_dropout(attn), residual + resid_mlp_dropout(mlp)
            x = x + ops.dropout(self.attn(self.norm(x, 0), rope, mask), run.hidden_dropout)
            return x + ops.dropout(self.mlp(self.norm(x, 1)), run.hidden_dropout)
        x = x + self.attn(self.norm(x, 0), rope, mask)
        return x + self.mlp(self.norm(x, 1))


def _gpt2_block(layer, rope, x, past_key_values, cache_position, mask, encoder_hidden_states, **unused):
    return layer(x, rope, mask)


def hf_norm(cfg, x, weight, bias=None):
    kind = cfg.traits.norm
    if kind == "layer":
        return ops.LayerNormFn.apply(x, weight, bias, cfg.eps)
    if kind == "gemma_rms":
        return hf_gemma_rms_norm(x, weight, cfg.eps)
    if kind == "olmo2_rms":
        return hf_olmo2_rms_norm(x, weight, cfg.eps)
    return hf_rms_norm(x, weight, cfg.eps)


class HFModel(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        if cfg.traits.learned_positions:
            self.pos_embed = nn.Embedding(cfg.max_positions, cfg.hidden)
        if cfg.traits.norm == "layer":
            self.final_b = nn.Parameter(torch.zeros(cfg.hidden))
        self.layers = nn.ModuleList(HFLayer(cfg, run, i) for i in range(cfg.layers))
        self.final_w = nn.Parameter((torch.zeros if cfg.traits.norm == "gemma_rms" else torch.ones)(cfg.hidden))
        if not cfg.tie_embeddings:
            self.lm_head = _linear(cfg.hidden, cfg.vocab, cfg.lm_head_bias)

    def forward(self, input_ids, labels):
        cfg, run = self.cfg, self.run
        b, s = input_ids.shape
        dtype = self.embed.weight.dtype
        with region("embedding"):
            x = self.embed(input_ids)  # saves input_ids (int64)
            rope = rope_local = None
            # LlamaModel / GPT2Model.forward: cache_position = arange(s); position_ids =
            # cache_position.unsqueeze(0), a (1, s) view of the same int64 storage
            cache_position = torch.arange(s)
            position_ids = cache_position.unsqueeze(0)
            if run.packed_docs:  # the collator's (b, s) position ids, a model input of its own
                position_ids = packed_position_ids(s, run.packed_docs, b)
            if cfg.traits.learned_positions:
                x = ops.dropout(x + self.pos_embed(position_ids), run.hidden_dropout)  # wpe saves position_ids
            else:
                if cfg.traits.embed_scale:
                    # Gemma: hidden * torch.tensor(sqrt(h), dtype): mul saves only the 0-dim normalizer
                    x = x * torch.tensor(cfg.hidden**0.5, dtype=dtype)
                if cfg.family in ("gpt_neox", "phi"):
                    x = ops.dropout(x, run.hidden_dropout)  # emb_dropout / embed_dropout
                if run.packed_docs:
                    rope = _rope_tables_from_ids(position_ids, _rotary_dims(cfg), dtype)
                else:
                    rope = _rope_tables(s, _rotary_dims(cfg), dtype)
            # Gemma3TextModel: rotary_emb_local (rope_local_base_freq) for the sliding layers
            sliding = [cfg.is_sliding(i) for i in range(cfg.layers)]
            two_kinds = any(sliding) and not all(sliding)
            rope_local = _rope_tables(s, _rotary_dims(cfg), dtype, theta=10001.0) if two_kinds else rope
            # masking_utils.create_causal_mask: eager gets eager_mask, torch.where over the (b, 1, s, s)
            # broadcast of the bool causal pattern (materialised, activation dtype; add saves nothing);
            # sdpa and flash_attention_2 get None without padding (is_causal instead).
            mask = None
            if run.attention == "eager":
                arange = torch.arange(s)
                allowed = (arange[None, None, None, :] <= arange[None, None, :, None]).expand(b, -1, s, s)
                if run.packed_docs:  # find_packed_sequence_indices, and-ed in (torch >= 2.6)
                    doc = (position_ids == 0).cumsum(-1)
                    allowed = allowed & (doc[:, None, :, None] == doc[:, None, None, :])
                mask = torch.where(allowed, torch.tensor(0.0, dtype=dtype), torch.finfo(dtype).min)
            elif run.packed_docs and run.attention == "sdpa":
                # sdpa_mask with the packed-document mask function: a materialized (b, 1, s, s) bool mask
                arange = torch.arange(s)
                doc = (position_ids == 0).cumsum(-1)
                mask = (arange[None, None, None, :] <= arange[None, None, :, None]) & (
                    doc[:, None, :, None] == doc[:, None, None, :])
            elif run.packed_docs and run.attention == "flash":
                mask = position_ids  # flash_attention_mask is None; the layers read position_ids (_flash_varlen)
            mask_local = mask
            if run.attention == "eager" and two_kinds:  # create_sliding_window_causal_mask: another (b, 1, s, s)
                near = arange[None, None, None, :] > arange[None, None, :, None] - cfg.sliding_window
                mask_local = torch.where(allowed & near, torch.tensor(0.0, dtype=dtype), torch.finfo(dtype).min)
        use_reentrant = run.checkpoint == "reentrant"
        if run.recompute == "full":
            for t in (cache_position, mask, *(rope or ())):
                watch(t)
            if run.packed_docs:
                watch(position_ids)
            if rope_local is not rope:
                for t in rope_local:
                    watch(t)
            if mask_local is not mask:
                watch(mask_local)
        for i, layer in enumerate(self.layers):
            with region(f"layer {i}"):
                rope_i, mask_i = (rope_local, mask_local) if cfg.is_sliding(i) else (rope, mask)
                if run.recompute != "full":
                    x = layer(x, rope_i, mask_i)
                elif cfg.traits.learned_positions:
                    # GPT2Model.forward (GPTBigCodeModel.forward likewise) calls GPT2Block(GradientCheckpointingLayer) as block(hidden_states,
                    # past_key_values (None under checkpointing), cache_position, causal_mask,
                    # encoder_hidden_states, position_ids=..., ...): the mask is positional.
                    block = functools.partial(_gpt2_block, layer, rope, position_ids=position_ids)
                    x = checkpoint(block, watch(x), None, cache_position, mask, None, use_reentrant=use_reentrant)
                else:
                    # GradientCheckpointingLayer: checkpoint(partial(layer.__call__, **kwargs), *args); the
                    # decoder loop passes only hidden_states positionally, the rest as keywords.
                    fn = functools.partial(layer, rope=rope_i, mask=mask_i, position_ids=position_ids,
                                           cache_position=cache_position, rope_other=rope_local)
                    x = checkpoint(fn, watch(x), use_reentrant=use_reentrant)
        with region("head"):
            x = hf_norm(cfg, x, self.final_w, self.final_b if cfg.traits.norm == "layer" else None)
            weight = self.embed.weight if cfg.tie_embeddings else self.lm_head.weight
            bias = None if cfg.tie_embeddings else self.lm_head.bias
            logits = F.linear(x, weight, bias)
            if cfg.final_softcap:  # Gemma 2: tanh saves its output (activation dtype)
                logits = torch.tanh(logits / cfg.final_softcap) * cfg.final_softcap
            if run.hf_version == "4.44":
                # 4.44 / 4.45 *ForCausalLM.forward: LlamaForCausalLM `logits = logits.float()` (GPT2LMHeadModel:
                # no upcast), `shift_logits = logits[..., :-1, :].contiguous()`, `shift_labels =
                # labels[..., 1:].contiguous()`, CrossEntropyLoss() over the s-1 rows
                if cfg.family != "gpt2":
                    logits = logits.float()
                shift_logits = logits[..., :-1, :].contiguous()
                shift_labels = labels[..., 1:].contiguous()
                return F.cross_entropy(shift_logits.view(-1, cfg.vocab), shift_labels.view(-1))
            # transformers ForCausalLMLoss: upcast, shift labels by padding, CE over all s positions
            logits = logits.float()
            labels = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
            return F.cross_entropy(logits.view(-1, cfg.vocab), labels.view(-1), ignore_index=-100)


# ---------------------------------------------------------------------------------------------
# Megatron style, (s, b, ...) layout


class MegatronLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        h, a, kv, d, f = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn
        gpt = cfg.family == "gpt2"
        self.norm1_w, self.norm2_w = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
        if gpt:
            self.norm1_b, self.norm2_b = nn.Parameter(torch.zeros(h)), nn.Parameter(torch.zeros(h))
        self.qkv = _linear(h, (a + 2 * kv) * d, gpt or cfg.attention_bias)
        self.proj = _linear(a * d, h, gpt)
        if gpt:
            self.fc1 = _linear(h, f, False)  # skip_bias_add: the bias goes into bias_gelu
            self.fc1_bias = nn.Parameter(torch.zeros(f))
            self.fc2 = _linear(f, h, True)
        else:
            self.fc1 = _linear(h, 2 * f, False)  # fused [gate | up]
            self.fc2 = _linear(f, h, False)

    def norm(self, x, i):
        w = self.norm1_w if i == 1 else self.norm2_w
        if self.cfg.family == "gpt2":
            return ops.LayerNormFn.apply(x, w, self.norm1_b if i == 1 else self.norm2_b, self.cfg.eps)
        return ops.RMSNormFn.apply(x, w, self.cfg.eps)

    def core_attention(self, q, k, v):
        """q: (s, b, a, d); k, v: (s, b, kv, d)."""
        cfg, run = self.cfg, self.run
        s, b, a, d = q.shape
        if run.attention != "eager":
            return ops.FlashAttentionFn.apply(q, k, v, "sbhd")
        groups = a // cfg.kv_heads
        if groups > 1:
            # DotProductAttention expands k, v to all heads: copies. Written as expand+reshape
            # (same layout as repeat_interleave(dim=2), which would also save an int64 index of
            # a elements through index_select).
            k = k.unsqueeze(3).expand(s, b, cfg.kv_heads, groups, d).reshape(s, b, a, d)
            v = v.unsqueeze(3).expand(s, b, cfg.kv_heads, groups, d).reshape(s, b, a, d)
        # [s, b*a, d] views -> bmm on (b*a, s, d): views are saved, no copies
        qb = q.reshape(s, b * a, d).transpose(0, 1)
        kb = k.reshape(s, b * a, d).transpose(0, 1).transpose(1, 2)
        vb = v.reshape(s, b * a, d).transpose(0, 1)
        scores = torch.bmm(qb, kb)
        probs = ops.ScaleMaskSoftmaxFn.apply(scores, 1.0 / math.sqrt(d))
        probs = ops.dropout(probs, run.attention_dropout)
        context = torch.bmm(probs, vb)  # (b*a, s, d)
        return context.view(b, a, s, d).permute(2, 0, 1, 3).contiguous()

    def forward(self, x, rope):
        """rope: Megatron's rotary_pos_emb, the fp32 (s, 1, 1, d) frequencies (None: learned positions)."""
        cfg, run = self.cfg, self.run
        s, b, _ = x.shape
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        groups = a // kv
        if rope is not None:
            rope = (rope.cos(), rope.sin())  # inside the fused kernel; saved by nothing
        qkv = self.qkv(self.norm(x, 1)).view(s, b, kv, (groups + 2) * d)
        q, k, v = torch.split(qkv, [groups * d, d, d], dim=3)
        q = q.reshape(s, b, a, d)  # a view: the last dim splits into (groups, d)
        if rope is not None:
            q = ops.FusedRoPEFn.apply(q, *rope)
            k = ops.FusedRoPEFn.apply(k, *rope)
        if run.recompute == "selective":
            # recompute core attention: the reentrant checkpoint keeps q, k, v only
            context = checkpoint(self.core_attention, q, k, v, use_reentrant=True)
        else:
            context = self.core_attention(q, k, v)
        out = self.proj(context.view(s, b, a * d))
        x = x + ops.dropout(out, run.hidden_dropout)  # bias-dropout-add: a bool mask
        y = self.norm(x, 2)
        if cfg.family == "gpt2":
            y = self.fc2(ops.BiasGeLUFn.apply(self.fc1(y), self.fc1_bias))
        else:
            y = self.fc2(ops.SwiGLUFn.apply(self.fc1(y)))
        return x + ops.dropout(y, run.hidden_dropout)


class MegatronModel(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        mla = cfg.traits.qkv == "mla"
        if cfg.traits.moe and any(cfg.is_moe_layer(i) for i in range(cfg.layers)):
            raise ValueError("megatron style MoE is not implemented in the reference models")
        self.cfg, self.run = cfg, run
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        if cfg.family == "gpt2":
            self.pos_embed = nn.Embedding(cfg.max_positions, cfg.hidden)
            self.final_b = nn.Parameter(torch.zeros(cfg.hidden))
        if mla:  # multi-latent attention, dense MLP (megatron_mla_models.py)
            from megatron_mla_models import MegatronMLALayer as layer_cls
        else:
            layer_cls = MegatronLayer
        self.layers = nn.ModuleList(layer_cls(cfg, run) for _ in range(cfg.layers))
        self.final_w = nn.Parameter(torch.ones(cfg.hidden))
        if not cfg.tie_embeddings:
            self.output_layer = _linear(cfg.hidden, cfg.vocab, False)

    def forward(self, input_ids, labels):
        cfg, run = self.cfg, self.run
        b, s = input_ids.shape
        with region("embedding"):
            x = self.embed(input_ids)  # saves input_ids
            if cfg.family == "gpt2":
                # the data loader collates per-sample position ids: (b, s) int64, saved
                position_ids = torch.arange(s).repeat(b, 1)
                x = x + self.pos_embed(position_ids)
                rope = None
            elif cfg.traits.qkv == "mla":
                rope = None  # gpt_model.py l.183: with MLA the attention module owns its RoPE
            else:
                rope = megatron_rotary_freqs(s, cfg.head_dim)
            x = x.transpose(0, 1).contiguous()  # [s, b, h]
            x = ops.dropout(x, run.hidden_dropout)  # embedding dropout
        for i, layer in enumerate(self.layers):
            with region(f"layer {i}"):
                if run.recompute == "full":
                    # TransformerBlock._checkpointed_forward: tensor_parallel.checkpoint (reentrant,
                    # save_for_backward(*args)) with hidden_states and rotary_pos_emb positional
                    x = checkpoint(layer, x, rope, use_reentrant=True)
                else:
                    x = layer(x, rope)
        with region("head"):
            if cfg.family == "gpt2":
                x = ops.LayerNormFn.apply(x, self.final_w, self.final_b, cfg.eps)
            else:
                x = ops.RMSNormFn.apply(x, self.final_w, cfg.eps)
            weight = self.embed.weight if cfg.tie_embeddings else self.output_layer.weight
            logits = F.linear(x, weight)  # [s, b, V]
            losses = ops.FusedCrossEntropyFn.apply(logits, labels.transpose(0, 1).contiguous())
            return losses.sum() / losses.numel()  # sum saves no activation (0-dim scalar only)


# ---------------------------------------------------------------------------------------------
# Encoders, HF style: modeling_bert.py / modeling_roberta.py (transformers 4.5x layout, commit
# 8ec58104181bfb34d824d89bccc009b4f6be6e0e: BertSelfAttention, BertSdpaSelfAttention, BertLayer,
# BertEmbeddings, BertModel.forward, BertPooler, BertLMPredictionHead, BertFor*; RoBERTa copies
# them (modeling_roberta.py at 87b236ba2be8b3e48a7d0c8ca6513302736d2886), with
# create_position_ids_from_input_ids and RobertaClassificationHead). Called with
# input_ids and labels only (no token_type_ids, no attention_mask), as the decoder cases are.

ENCODER_FAMILIES = ("bert", "roberta")


class HFEncoderLayer(nn.Module):
    """BertLayer: self-attention (query/key/value/dense with biases), post-LN residuals, exact gelu."""

    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        h, f = cfg.hidden, cfg.ffn
        assert cfg.heads * cfg.head_dim == h and cfg.kv_heads == cfg.heads
        self.query, self.key, self.value = _linear(h, h, True), _linear(h, h, True), _linear(h, h, True)
        self.dense = _linear(h, h, True)  # attention.output.dense
        self.fc1, self.fc2 = _linear(h, f, True), _linear(f, h, True)  # intermediate.dense, output.dense
        self.ln_w = nn.ParameterList(nn.Parameter(torch.ones(h)) for _ in range(2))
        self.ln_b = nn.ParameterList(nn.Parameter(torch.zeros(h)) for _ in range(2))

    def forward(self, x, mask):
        cfg, run = self.cfg, self.run
        b, s, h = x.shape
        a, d = cfg.heads, cfg.head_dim

        def transpose_for_scores(t):  # view + permute(0, 2, 1, 3): (b, a, s, d) views
            return t.view(b, s, a, d).permute(0, 2, 1, 3)

        k = transpose_for_scores(self.key(x))
        v = transpose_for_scores(self.value(x))
        q = transpose_for_scores(self.query(x))
        if run.attention == "eager":  # BertSelfAttention
            scores = torch.matmul(q, k.transpose(-1, -2))  # matmul copies the strided q and kT (bmm keeps them)
            scores = scores / math.sqrt(d)
            if mask is not None:
                scores = scores + mask
            probs = F.softmax(scores, dim=-1)  # activation dtype
            probs = ops.dropout(probs, run.attention_dropout)
            context = torch.matmul(probs, v)  # v copied
            context = context.permute(0, 2, 1, 3).contiguous().view(b, s, h)
        else:  # BertSdpaSelfAttention: the (b, a, s, d) views to the kernel, attn_mask None (no padding)
            out = ops.FlashAttentionFn.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), "bshd")
            context = out.reshape(b, s, h)
        # BertSelfOutput / BertOutput: LayerNorm(dropout(dense(x)) + input_tensor)
        attn = ops.dropout(self.dense(context), run.hidden_dropout)
        attn = ops.LayerNormFn.apply(attn + x, self.ln_w[0], self.ln_b[0], cfg.eps)
        y = ops.dropout(self.fc2(F.gelu(self.fc1(attn))), run.hidden_dropout)
        return ops.LayerNormFn.apply(y + attn, self.ln_w[1], self.ln_b[1], cfg.eps)


class HFEncoderModel(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        h = cfg.hidden
        self.word = nn.Embedding(cfg.vocab, h)
        self.pos = nn.Embedding(cfg.max_positions, h)
        self.tok_type = nn.Embedding(cfg.type_vocab, h)
        self.emb_ln_w, self.emb_ln_b = nn.Parameter(torch.ones(h)), nn.Parameter(torch.zeros(h))
        # BertEmbeddings' buffers: position_ids and the all-zero token_type_ids
        self.register_buffer("position_ids", torch.arange(cfg.max_positions).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, cfg.max_positions, dtype=torch.long), persistent=False)
        self.layers = nn.ModuleList(HFEncoderLayer(cfg, run) for _ in range(cfg.layers))
        roberta = cfg.family == "roberta"
        if cfg.head in ("none", "classifier") and not (roberta and cfg.head == "classifier"):
            self.pooler = _linear(h, h, True)  # BertPooler.dense
        if cfg.head == "classifier":
            if roberta:
                self.cls_dense = _linear(h, h, True)  # RobertaClassificationHead.dense
            self.classifier = _linear(h, cfg.num_labels, True)  # classifier / out_proj
        if cfg.head == "mlm":
            self.transform = _linear(h, h, True)
            self.head_ln_w, self.head_ln_b = nn.Parameter(torch.ones(h)), nn.Parameter(torch.zeros(h))
            self.decoder_bias = nn.Parameter(torch.zeros(cfg.vocab))  # decoder.weight tied to self.word

    def forward(self, input_ids, labels):
        cfg, run = self.cfg, self.run
        b, s = input_ids.shape
        dtype = self.word.weight.dtype
        with region("embedding"):
            token_type_ids = self.token_type_ids[:, :s].expand(b, s)  # a buffer view: kept, not an activation
            if cfg.family == "roberta":
                # create_position_ids_from_input_ids(input_ids, padding_idx = 1): a new (b, s) int64
                m = input_ids.ne(1).int()
                position_ids = (torch.cumsum(m, dim=1).type_as(m) * m).long() + 1
            else:
                position_ids = self.position_ids[:, :s]
            x = self.word(input_ids) + self.tok_type(token_type_ids)
            x += self.pos(position_ids)
            x = ops.LayerNormFn.apply(x, self.emb_ln_w, self.emb_ln_b, cfg.eps)
            x = ops.dropout(x, run.hidden_dropout)
            # BertModel.forward: attention_mask = ones((b, s)); eager: get_extended_attention_mask, the
            # additive (b, 1, 1, s) mask in the activation dtype; sdpa: _prepare_4d_attention_mask_for_sdpa
            # returns None when nothing is padded
            mask = None
            if run.attention == "eager":
                ones = torch.ones(b, s)
                mask = (1.0 - ones[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        if run.recompute == "full":
            watch(mask)
        for i, layer in enumerate(self.layers):
            with region(f"layer {i}"):
                if run.recompute == "full":
                    # BertEncoder: _gradient_checkpointing_func(layer.__call__, hidden_states, attention_mask, ...)
                    x = checkpoint(layer, watch(x), mask, use_reentrant=run.checkpoint == "reentrant")
                else:
                    x = layer(x, mask)
        with region("head"):
            p = run.hidden_dropout if cfg.classifier_dropout is None else cfg.classifier_dropout
            if cfg.head == "mlm":  # BertLMPredictionHead / RobertaLMHead
                t = ops.LayerNormFn.apply(F.gelu(self.transform(x)), self.head_ln_w, self.head_ln_b, cfg.eps)
                scores = F.linear(t, self.word.weight, self.decoder_bias)
                # CrossEntropyLoss on prediction_scores.view(-1, V) as they are (no upcast)
                return F.cross_entropy(scores.view(-1, cfg.vocab), labels.view(-1))
            if cfg.family == "roberta" and cfg.head == "classifier":
                y = ops.dropout(x[:, 0, :], p)  # RobertaClassificationHead
                y = ops.dropout(torch.tanh(self.cls_dense(y)), p)
            else:
                y = torch.tanh(self.pooler(x[:, 0]))  # BertPooler
                if cfg.head == "none":
                    return y.sum()
                y = ops.dropout(y, p)
            logits = self.classifier(y)
            targets = labels[:, 0] % cfg.num_labels  # (b,) int64 class labels
            return F.cross_entropy(logits.view(-1, cfg.num_labels), targets.view(-1))


def build(cfg: ModelConfig, run: RunConfig, seed=0):
    torch.manual_seed(seed)
    if cfg.family in ENCODER_FAMILIES:
        return HFEncoderModel(cfg, run).to(run.torch_dtype).train()
    if cfg.family == "llama4_text":
        import llama4_model
        return llama4_model.Llama4Model(cfg, run).to(run.torch_dtype).train()
    model = (HFModel if run.framework == "hf" else MegatronModel)(cfg, run)
    return model.to(run.torch_dtype).train()
