"""Reference decoder-only transformers, written for this suite (not copied from HF), in two
framework styles:

  hf        eager PyTorch op by op, following transformers' modeling_gpt2 / modeling_llama /
            modeling_qwen2 / modeling_mixtral, activations laid out (b, s, ...)
  megatron  Megatron-LM fused kernels emulated by autograd Functions (emulated_ops.py),
            activations laid out (s, b, ...)

Families: gpt2 (LayerNorm, learned positions, GeLU MLP, tied head), llama / qwen2 (RMSNorm, RoPE,
GQA, SwiGLU; qwen2 = qkv bias), mixtral (llama attention + top-k MoE of SwiGLU experts, hf only).

Every forward runs inside `region(...)` blocks so measure.py can attribute saved storages to
embedding / layer i / head. Torch 2.x CUDA behaviours that 1.13 CPU lacks are emulated through
emulated_ops (dropout bool masks, fp32 LayerNorm stats, mean saving only sizes).
"""
import contextlib
import dataclasses
import functools
import math

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


# ---------------------------------------------------------------------------------------------
# configuration


@dataclasses.dataclass
class ModelConfig:
    family: str  # gpt2 | llama | qwen2 | mixtral
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


class HFAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        a, kv, d, h = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.hidden
        if cfg.family == "gpt2":
            self.c_attn = _linear(h, 3 * h, True)  # fused: q, k, v are views of one output
            self.o_proj = _linear(h, h, True)
        else:
            bias = cfg.attention_bias
            self.q_proj = _linear(h, a * d, bias)
            self.k_proj = _linear(h, kv * d, bias)
            self.v_proj = _linear(h, kv * d, bias)
            self.o_proj = _linear(a * d, h, False)

    def forward(self, x, rope, mask):
        cfg, run = self.cfg, self.run
        b, s, _ = x.shape
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        if cfg.family == "gpt2":
            q, k, v = self.c_attn(x).split(cfg.hidden, dim=2)
            q, k, v = (t.view(b, s, a, d).transpose(1, 2) for t in (q, k, v))
        else:
            q = self.q_proj(x).view(b, s, a, d).transpose(1, 2)
            k = self.k_proj(x).view(b, s, kv, d).transpose(1, 2)
            v = self.v_proj(x).view(b, s, kv, d).transpose(1, 2)
            cos, sin = (t.unsqueeze(1) for t in rope)
            # apply_rotary_pos_emb: saves cos and sin only (they do not require grad)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        if run.attention == "eager":
            out = self._eager(q, k, v, mask)
        else:
            # flash_attention_2 / sdpa: (b, s, heads, d) views go to the kernel as they are
            out = ops.FlashAttentionFn.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), "bshd")
        out = out.reshape(b, s, a * d)
        out = self.o_proj(out)
        if cfg.family == "gpt2":
            out = ops.dropout(out, run.hidden_dropout)  # resid_dropout
        return out

    def _eager(self, q, k, v, mask):
        cfg, run = self.cfg, self.run
        groups = cfg.heads // cfg.kv_heads
        k = hf_repeat_kv(k, groups)
        v = hf_repeat_kv(v, groups)
        # matmul folds (b, a) with reshape: q/k/v that are strided views (GPT-2's c_attn split,
        # Llama's v_proj output when groups == 1) are copied, and bmm saves the copies.
        scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(cfg.head_dim))
        scores = scores + mask  # additive causal mask, shared, not saved by add
        if cfg.family == "gpt2":
            probs = F.softmax(scores, dim=-1).type(v.dtype)  # softmax in activation dtype
        else:
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        probs = ops.dropout(probs, run.attention_dropout)
        out = torch.matmul(probs, v)
        return out.transpose(1, 2).contiguous()


class HFMLP(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        h, f = cfg.hidden, cfg.ffn
        if cfg.family == "gpt2":
            self.c_fc = _linear(h, f, True)
            self.c_proj = _linear(f, h, True)
        else:
            self.gate_proj = _linear(h, f, False)
            self.up_proj = _linear(h, f, False)
            self.down_proj = _linear(f, h, False)

    def forward(self, x):
        if self.cfg.family == "gpt2":
            return ops.dropout(self.c_proj(hf_gelu_new(self.c_fc(x))), self.run.hidden_dropout)
        # silu saves its input; mul saves silu's output and up's output; down saves the product
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class HFMoE(nn.Module):
    """MixtralSparseMoeBlock, dropless, experts run on the tokens routed to them.
    Saves (per layer, T = s·b tokens, k = top_k, E experts):
      gate linear input (the norm output), fp32 router softmax (T·E),
      topk indices int64 (T·k) and the normalization's saved tensors (fp32 T·k and T·1),
      per expert e with n_e tokens (sum n_e = k·T): torch.where's row/column index tensors
      (int64 n_e each), the gathered tokens (n_e·h, saved by gate and up), SwiGLU as HF (4 n_e·f),
      the expert output (n_e·h) and its routing weight column (n_e·1) saved by the weighting mul.
    """

    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg = cfg
        self.gate = _linear(cfg.hidden, cfg.experts, False)
        self.experts = nn.ModuleList(HFMLP(dataclasses.replace(cfg, family="llama"), run) for _ in range(cfg.experts))

    def forward(self, x):
        b, s, h = x.shape
        x = x.view(-1, h)
        router_logits = self.gate(x)
        weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, self.cfg.top_k, dim=-1)
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
        return final.reshape(b, s, h)


class HFLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.norm1_w = nn.Parameter(torch.ones(h))
        self.norm2_w = nn.Parameter(torch.ones(h))
        if cfg.family == "gpt2":
            self.norm1_b = nn.Parameter(torch.zeros(h))
            self.norm2_b = nn.Parameter(torch.zeros(h))
        self.attn = HFAttention(cfg, run)
        self.mlp = HFMoE(cfg, run) if cfg.family == "mixtral" else HFMLP(cfg, run)

    def norm(self, x, i):
        w = self.norm1_w if i == 1 else self.norm2_w
        if self.cfg.family == "gpt2":
            b = self.norm1_b if i == 1 else self.norm2_b
            return ops.LayerNormFn.apply(x, w, b, self.cfg.eps)
        return hf_rms_norm(x, w, self.cfg.eps)

    def forward(self, x, rope, mask):
        x = x + self.attn(self.norm(x, 1), rope, mask)
        return x + self.mlp(self.norm(x, 2))


class HFModel(nn.Module):
    def __init__(self, cfg: ModelConfig, run: RunConfig):
        super().__init__()
        self.cfg, self.run = cfg, run
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        if cfg.family == "gpt2":
            self.pos_embed = nn.Embedding(cfg.max_positions, cfg.hidden)
            self.final_b = nn.Parameter(torch.zeros(cfg.hidden))
        self.layers = nn.ModuleList(HFLayer(cfg, run) for _ in range(cfg.layers))
        self.final_w = nn.Parameter(torch.ones(cfg.hidden))
        if not cfg.tie_embeddings:
            self.lm_head = _linear(cfg.hidden, cfg.vocab, False)

    def forward(self, input_ids, labels):
        cfg, run = self.cfg, self.run
        b, s = input_ids.shape
        dtype = self.final_w.dtype
        with region("embedding"):
            x = self.embed(input_ids)  # saves input_ids (int64)
            if cfg.family == "gpt2":
                position_ids = torch.arange(s).unsqueeze(0)  # (1, s), saved by wpe
                x = ops.dropout(x + self.pos_embed(position_ids), run.hidden_dropout)
                rope = None
            else:
                rope = _rope_tables(s, cfg.head_dim, dtype)
            # additive causal mask built once per forward (eager only; add does not save it)
            mask = torch.full((s, s), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]
        for i, layer in enumerate(self.layers):
            with region(f"layer {i}"):
                if run.recompute == "full":
                    # HF GradientCheckpointingLayer: only positional hidden_states go through the
                    # reentrant checkpoint; rope/mask are bound as keyword args (closure).
                    x = checkpoint(functools.partial(layer, rope=rope, mask=mask), x, use_reentrant=True)
                else:
                    x = layer(x, rope, mask)
        with region("head"):
            if cfg.family == "gpt2":
                x = ops.LayerNormFn.apply(x, self.final_w, self.final_b, cfg.eps)
            else:
                x = hf_rms_norm(x, self.final_w, cfg.eps)
            weight = self.embed.weight if cfg.tie_embeddings else self.lm_head.weight
            logits = F.linear(x, weight)
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
        cfg, run = self.cfg, self.run
        s, b, _ = x.shape
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        groups = a // kv
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
        if cfg.family == "mixtral":
            raise ValueError("megatron style MoE is not implemented in the reference models")
        self.cfg, self.run = cfg, run
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        if cfg.family == "gpt2":
            self.pos_embed = nn.Embedding(cfg.max_positions, cfg.hidden)
            self.final_b = nn.Parameter(torch.zeros(cfg.hidden))
        self.layers = nn.ModuleList(MegatronLayer(cfg, run) for _ in range(cfg.layers))
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
            else:
                cos, sin = _rope_tables(s, cfg.head_dim, torch.float32)
                rope = (cos[0, :, None, None, :], sin[0, :, None, None, :])
            x = x.transpose(0, 1).contiguous()  # [s, b, h]
            x = ops.dropout(x, run.hidden_dropout)  # embedding dropout
        for i, layer in enumerate(self.layers):
            with region(f"layer {i}"):
                if run.recompute == "full":
                    x = checkpoint(functools.partial(layer, rope=rope), x, use_reentrant=True)
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


def build(cfg: ModelConfig, run: RunConfig, seed=0):
    torch.manual_seed(seed)
    model = (HFModel if run.framework == "hf" else MegatronModel)(cfg, run)
    return model.to(run.torch_dtype).train()
