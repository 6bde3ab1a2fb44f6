"""Autograd Functions that make Debian's torch 1.13 CPU save what torch 2.x on CUDA (or a fused
Megatron kernel) saves for backward.

Every Function computes its forward under no_grad and saves exactly the tensors listed in its
docstring through ctx.save_for_backward, so saved_tensors_hooks see exactly those. Backward
passes are real (checked against plain torch ops by `self_check()`), so a training step works.

What torch 1.13 CPU does instead (checked with saved_tensors_hooks by `show_torch113_saves()`;
output recorded in the comments below, torch 1.13.1 Debian build):
  dropout     saves a mask in the *input dtype*           (CUDA 2.x native_dropout: a bool mask)
  layer_norm  bf16 input: saves bf16 mean and rstd         (CUDA 2.x: fp32, the accumulate type)
  mean        saves its input                               (2.x: only sizes)
"""
import math

import torch
import torch.nn.functional as F


def saved_by_torch(fn, *args):
    """(shape, dtype) of every tensor torch saves while running fn(*args)."""
    seen = []

    def pack(t):
        seen.append((tuple(t.shape), str(t.dtype).replace("torch.", "")))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return seen


# ---------------------------------------------------------------------------------------------
# torch 2.x CUDA behaviour of plain ops (used by both frameworks)


class _DropoutFn(torch.autograd.Function):
    """CUDA native_dropout: saves a bool mask (1 byte/element); its output is not saved by it.
    1.13 CPU: F.dropout saves the mask in the input dtype (2 or 4 bytes/element)."""

    @staticmethod
    def forward(ctx, x, p):
        with torch.no_grad():
            mask = torch.rand(x.shape, device=x.device) >= p
            out = x * mask * (1.0 / (1.0 - p))
        ctx.scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(mask)
        return out

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask * ctx.scale, None


def dropout(x, p, training=True):
    """p == 0 or eval: torch 2.x returns the input itself and saves nothing (same on 1.13)."""
    if p == 0.0 or not training:
        return x
    return _DropoutFn.apply(x, p)


class LayerNormFn(torch.autograd.Function):
    """CUDA native_layer_norm (and Megatron/apex/TE LayerNorm kernels): saves input, weight, bias,
    fp32 mean and fp32 rstd (one per row). Weight/bias are parameters (not activations).
    1.13 CPU with bf16 input: mean/rstd saved in bf16 instead."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        with torch.no_grad():
            xf = x.float()
            mean = xf.mean(-1, keepdim=True)
            rstd = torch.rsqrt((xf - mean).pow(2).mean(-1, keepdim=True) + eps)
            out = ((xf - mean) * rstd * weight.float() + bias.float()).to(x.dtype)
        ctx.eps = eps
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, bias, _, _ = ctx.saved_tensors
        with torch.enable_grad():
            xf = x.detach().float().requires_grad_()
            w = weight.detach().float().requires_grad_()
            b = bias.detach().float().requires_grad_()
            out = F.layer_norm(xf, (x.shape[-1],), w, b, ctx.eps)
            gx, gw, gb = torch.autograd.grad(out, (xf, w, b), grad.float())
        return gx.to(x.dtype), gw.to(weight.dtype), gb.to(bias.dtype), None


class MeanLastDim(torch.autograd.Function):
    """x.mean(-1, keepdim=True) as torch 2.x autograd records it: only the size is kept.
    1.13 saves the input of mean (which would double count RMSNorm's x.pow(2))."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        with torch.no_grad():
            return x.mean(-1, keepdim=True)

    @staticmethod
    def backward(ctx, grad):
        return grad.expand(ctx.shape) / ctx.shape[-1]


# ---------------------------------------------------------------------------------------------
# attention kernels


def _attention_math(q, k, v, causal=True):
    """q: (b, a, s, d), k/v: (b, kv, s, d). Returns out (b, a, s, d) and fp32 logsumexp (b, a, s)."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[2]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)
    return out, lse


class FlashAttentionFn(torch.autograd.Function):
    """FlashAttention-2 (and torch sdpa flash/efficient backends): saves q, k, v as given (kv heads,
    no repeat: views keep their whole storage alive), its output, and fp32 logsumexp (b, a, s).
    No s x s tensor. Attention dropout inside the kernel only keeps an RNG seed/offset, so it is
    not applied here (values do not matter for memory).

    Inputs are in `layout` 'bshd' (HF: (b, s, heads, d)) or 'sbhd' (Megatron: (s, b, heads, d));
    the output is a new contiguous tensor in the same layout, so the o_proj input
    (out.reshape(..., a*d)) is a view of the saved output storage.
    """

    @staticmethod
    def forward(ctx, q, k, v, layout):
        perm = (0, 2, 1, 3) if layout == "bshd" else (1, 2, 0, 3)
        with torch.no_grad():
            out, lse = _attention_math(q.permute(perm), k.permute(perm), v.permute(perm))
            back = (0, 2, 1, 3) if layout == "bshd" else (2, 0, 1, 3)
            out = out.permute(back).contiguous()
        ctx.perm = perm
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        with torch.enable_grad():
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            p = ctx.perm
            o, _ = _attention_math(qq.permute(p), kk.permute(p), vv.permute(p))
            back = (0, 2, 1, 3) if p == (0, 2, 1, 3) else (2, 0, 1, 3)
            gq, gk, gv = torch.autograd.grad(o.permute(back), (qq, kk, vv), grad)
        return gq, gk, gv, None


def _varlen_math(q, k, v, cu_seqlens):
    """q: (total, a, d), k/v: (total, kv, d); causal attention inside each document
    [cu_seqlens[i], cu_seqlens[i + 1]). Returns out (total, a, d) and fp32 logsumexp (a, total)."""
    outs, lses = [], []
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        perm = (1, 0, 2)  # (len, heads, d) -> (heads, len, d): one batch row of _attention_math
        o, lse = _attention_math(q[start:end].permute(perm)[None], k[start:end].permute(perm)[None],
                                 v[start:end].permute(perm)[None])
        outs.append(o[0].permute(perm))
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=-1)


class VarlenFlashAttentionFn(torch.autograd.Function):
    """flash_attn_varlen_func (flash-attn 2.x FlashAttnVarlenFunc): saves q, k, v as given (total,
    heads, d), its output, the fp32 logsumexp (heads, total) and cu_seqlens_q / cu_seqlens_k (int32,
    documents + 1; transformers passes one tensor for both, prepare_fa_kwargs_from_position_ids).
    Attention never crosses a document boundary."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k):
        with torch.no_grad():
            out, lse = _varlen_math(q, k, v, cu_seqlens_q)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        with torch.enable_grad():
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            o, _ = _varlen_math(qq, kk, vv, cu_q)
            gq, gk, gv = torch.autograd.grad(o, (qq, kk, vv), grad)
        return gq, gk, gv, None, None


def _biased_math(q, k, v, bias):
    """q, k, v: (b, heads, s, d) (k, v already at every query head); bias (b, 1, s, s) additive."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias.float()
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)
    return out, lse


class EfficientAttentionBiasFn(torch.autograd.Function):
    """torch SDPA with a mask on CUDA (torch >= 2.6), read from aten/src/ATen/native/transformers/
    attention.cpp: scaled_dot_product_attention converts a bool attn_mask to a float bias in the query
    dtype (convert_boolean_attn_mask: where(mask.logical_not(), -inf, 0)) - one new (b, 1, s, s)
    tensor per call - and, the flash kernel taking no mask, runs _scaled_dot_product_efficient_attention,
    whose backward (derivatives.yaml) needs query, key, value, attn_bias, output and logsumexp: all
    saved. The output is allocated (b, s, heads, d) and returned as its (b, heads, s, d) transpose.
    Takes the bool mask and makes the bias inside, as the call does; q, k, v (b, heads, s, d)."""

    @staticmethod
    def forward(ctx, q, k, v, bool_mask):
        with torch.no_grad():
            bias = torch.zeros(bool_mask.shape, dtype=q.dtype).masked_fill(bool_mask.logical_not(), float("-inf"))
            out, lse = _biased_math(q, k, v, bias)
            out = out.transpose(1, 2).contiguous()  # (b, s, heads, d) storage
        ctx.save_for_backward(q, k, v, bias, out, lse)
        return out.transpose(1, 2)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, bias, out, lse = ctx.saved_tensors
        with torch.enable_grad():
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            o, _ = _biased_math(qq, kk, vv, bias)
            gq, gk, gv = torch.autograd.grad(o, (qq, kk, vv), grad)
        return gq, gk, gv, None


class ScaleMaskSoftmaxFn(torch.autograd.Function):
    """Megatron fused upper-triangular scale-mask-softmax: saves its output in the activation
    dtype (computed in fp32 inside the kernel). Input (B, s, s) scores."""

    @staticmethod
    def forward(ctx, scores, scale):
        with torch.no_grad():
            s = scores.shape[-1]
            x = scores.float() * scale
            x = x.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
            probs = torch.softmax(x, dim=-1).to(scores.dtype)
        ctx.scale = scale
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        yf, gf = y.float(), grad.float()
        gx = yf * (gf - (gf * yf).sum(-1, keepdim=True))
        return (gx * ctx.scale).to(y.dtype), None


# ---------------------------------------------------------------------------------------------
# Megatron fused kernels


class RMSNormFn(torch.autograd.Function):
    """Megatron (apex / TE) fused RMSNorm: saves input, weight, fp32 rstd (one per row)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        with torch.no_grad():
            xf = x.float()
            rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            out = (xf * rstd * weight.float()).to(x.dtype)
        ctx.eps = eps
        ctx.save_for_backward(x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, _ = ctx.saved_tensors
        with torch.enable_grad():
            xf = x.detach().float().requires_grad_()
            w = weight.detach().float().requires_grad_()
            out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps) * w
            gx, gw = torch.autograd.grad(out, (xf, w), grad.float())
        return gx.to(x.dtype), gw.to(weight.dtype), None


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class FusedRoPEFn(torch.autograd.Function):
    """Megatron/TE fused RoPE: returns a new tensor and saves nothing through save_for_backward
    (the cos/sin table is shared by all layers; kept as a ctx attribute, not counted)."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        # x: (s, b, heads, d); cos/sin: (s, 1, 1, d)
        with torch.no_grad():
            out = (x * cos + _rotate_half(x) * sin).to(x.dtype).contiguous()
        ctx.cos, ctx.sin = cos, sin
        return out

    @staticmethod
    def backward(ctx, grad):
        # inverse rotation: R^T g = g*cos - rotate_half(g*sin)... derived from out = x*cos + R(x)*sin
        g = grad
        gs = g * ctx.sin
        half = g.shape[-1] // 2
        # R^T(y) = cat(y2, -y1)
        rt = torch.cat((gs[..., half:], -gs[..., :half]), dim=-1)
        return (g * ctx.cos + rt).to(grad.dtype), None, None


class SwiGLUFn(torch.autograd.Function):
    """Megatron fused SwiGLU (bias_swiglu): saves its input, the fused [gate|up] fc1 output
    (2·f per token). Output silu(gate) * up."""

    @staticmethod
    def forward(ctx, x):
        with torch.no_grad():
            gate, up = torch.chunk(x, 2, dim=-1)
            out = F.silu(gate) * up
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            gate, up = torch.chunk(xx, 2, dim=-1)
            (gx,) = torch.autograd.grad(F.silu(gate) * up, (xx,), grad)
        return gx


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


class BiasGeLUFn(torch.autograd.Function):
    """Megatron fused bias_gelu: saves its input (fc1 output without bias) and the bias
    (a parameter, not counted)."""

    @staticmethod
    def forward(ctx, x, bias):
        with torch.no_grad():
            out = _gelu_tanh(x + bias)
        ctx.save_for_backward(x, bias)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, bias = ctx.saved_tensors
        with torch.enable_grad():
            xx, bb = x.detach().requires_grad_(), bias.detach().requires_grad_()
            gx, gb = torch.autograd.grad(_gelu_tanh(xx + bb), (xx, bb), grad)
        return gx, gb


class FusedCrossEntropyFn(torch.autograd.Function):
    """Megatron (vocab-parallel / fused) cross entropy with tp = 1: saves the fp32 softmax of the
    logits (4 bytes x tokens x V), the bool target_mask (targets outside the rank's vocabulary:
    none at tp = 1, still saved) and the int64 masked targets (Megatron-LM
    tensor_parallel/cross_entropy.py, _VocabParallelCrossEntropy: save_for_backward(exp_logits,
    target_mask, masked_target_1d)); the logits themselves are not saved.
    Returns per-token losses (fp32). parallel_models.VocabParallelCrossEntropyFn is the tp > 1 one."""

    @staticmethod
    def forward(ctx, logits, target):
        with torch.no_grad():
            lf = logits.float()
            softmax = torch.softmax(lf, dim=-1)
            loss = torch.logsumexp(lf, dim=-1) - lf.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            target_mask = (target < 0) | (target >= lf.shape[-1])
            masked_target = target.clone()
        ctx.logits_dtype = logits.dtype
        ctx.save_for_backward(softmax, target_mask, masked_target)
        return loss

    @staticmethod
    def backward(ctx, grad):
        softmax, _, target = ctx.saved_tensors
        g = softmax.clone()
        g.scatter_add_(-1, target.unsqueeze(-1), -torch.ones_like(target, dtype=g.dtype).unsqueeze(-1))
        return (g * grad.unsqueeze(-1)).to(ctx.logits_dtype), None


# ---------------------------------------------------------------------------------------------
# checks


def show_torch113_saves():
    """What this torch build saves for the ops we emulate (the reason for each emulation)."""
    x = torch.randn(3, 5, 8, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(8, dtype=torch.bfloat16, requires_grad=True)
    b = torch.zeros(8, dtype=torch.bfloat16, requires_grad=True)
    return {
        # 1.13.1 CPU: [((3, 5, 8), 'bfloat16')]  (mask in input dtype; 2.x CUDA: bool)
        "F.dropout(bf16)": saved_by_torch(lambda: F.dropout(x, 0.1, True)),
        "DropoutFn(bf16)": saved_by_torch(lambda: dropout(x, 0.1)),
        # 1.13.1 CPU: input, weight, bias, mean (3,5,1) bf16, rstd (3,5,1) bf16
        "F.layer_norm(bf16)": saved_by_torch(lambda: F.layer_norm(x, (8,), w, b)),
        "LayerNormFn(bf16)": saved_by_torch(lambda: LayerNormFn.apply(x, w, b, 1e-5)),
        # 1.13.1 CPU: [((3, 5, 8), 'bfloat16')]  (input saved; 2.x saves only sizes)
        "Tensor.mean": saved_by_torch(lambda: x.mean(-1, keepdim=True)),
        "MeanLastDim": saved_by_torch(lambda: MeanLastDim.apply(x)),
    }


def self_check():
    """Gradients of the emulated Functions against plain torch ops (fp32, small). Returns a list of
    failure strings (empty when all agree)."""
    torch.manual_seed(0)
    failures = []

    def close(name, a, b_, tol=1e-4):
        if not torch.allclose(a, b_, atol=tol, rtol=tol):
            failures.append(f"{name}: max diff {(a - b_).abs().max().item():.3g}")

    def grads(fn, *inputs):
        ins = [t.detach().clone().requires_grad_() for t in inputs]
        out = fn(*ins)
        g = torch.randn_like(out)
        return torch.autograd.grad(out, ins, g, allow_unused=True), out, g

    x = torch.randn(2, 6, 8, dtype=torch.float64)
    w, bb = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    ins = [t.clone().requires_grad_() for t in (x, w, bb)]
    ref = F.layer_norm(ins[0], (8,), ins[1], ins[2], 1e-5)
    g = torch.randn_like(ref)
    r1 = torch.autograd.grad(ref, ins, g)
    ins2 = [t.clone().requires_grad_() for t in (x, w, bb)]
    r2 = torch.autograd.grad(LayerNormFn.apply(ins2[0], ins2[1], ins2[2], 1e-5), ins2, g)
    for a, c, n in zip(r1, r2, ("x", "w", "b")):
        close("LayerNormFn d" + n, a, c)

    ins = [t.clone().requires_grad_() for t in (x, w)]
    ref = ins[0] * torch.rsqrt(ins[0].pow(2).mean(-1, keepdim=True) + 1e-6) * ins[1]
    r1 = torch.autograd.grad(ref, ins, g)
    ins2 = [t.clone().requires_grad_() for t in (x, w)]
    r2 = torch.autograd.grad(RMSNormFn.apply(ins2[0], ins2[1], 1e-6), ins2, g)
    for a, c, n in zip(r1, r2, ("x", "w")):
        close("RMSNormFn d" + n, a, c)

    xi = x.clone().requires_grad_()
    (a,) = torch.autograd.grad(xi.mean(-1, keepdim=True), xi, torch.ones(2, 6, 1, dtype=x.dtype))
    xi2 = x.clone().requires_grad_()
    (c,) = torch.autograd.grad(MeanLastDim.apply(xi2), xi2, torch.ones(2, 6, 1, dtype=x.dtype))
    close("MeanLastDim", a, c)

    # RoPE: fused vs HF formula
    cos, sin = torch.randn(6, 1, 1, 8, dtype=torch.float64), torch.randn(6, 1, 1, 8, dtype=torch.float64)
    xr = torch.randn(6, 2, 3, 8, dtype=torch.float64)
    xa = xr.clone().requires_grad_()
    ga = torch.randn_like(xr)
    (a,) = torch.autograd.grad(xa * cos + _rotate_half(xa) * sin, xa, ga)
    xb = xr.clone().requires_grad_()
    (c,) = torch.autograd.grad(FusedRoPEFn.apply(xb, cos, sin), xb, ga)
    close("FusedRoPEFn", a, c)

    # SwiGLU, bias-GeLU
    xs = torch.randn(4, 10, dtype=torch.float64)
    xa, xb = xs.clone().requires_grad_(), xs.clone().requires_grad_()
    gs = torch.randn(4, 5, dtype=torch.float64)
    (a,) = torch.autograd.grad(F.silu(xa[:, :5]) * xa[:, 5:], xa, gs)
    (c,) = torch.autograd.grad(SwiGLUFn.apply(xb), xb, gs)
    close("SwiGLUFn", a, c)
    bias = torch.randn(10, dtype=torch.float64)
    xa, xb = xs.clone().requires_grad_(), xs.clone().requires_grad_()
    gg = torch.randn(4, 10, dtype=torch.float64)
    (a,) = torch.autograd.grad(F.gelu(xa + bias, approximate="tanh"), xa, gg)
    (c,) = torch.autograd.grad(BiasGeLUFn.apply(xb, bias), xb, gg)
    close("BiasGeLUFn", a, c, tol=1e-6)

    # cross entropy
    lg = torch.randn(7, 11, dtype=torch.float64)
    tg = torch.randint(0, 11, (7,))
    la, lb = lg.clone().requires_grad_(), lg.clone().requires_grad_()
    (a,) = torch.autograd.grad(F.cross_entropy(la, tg, reduction="sum"), la)
    (c,) = torch.autograd.grad(FusedCrossEntropyFn.apply(lb, tg).sum(), lb)
    close("FusedCrossEntropyFn", a, c)

    # flash vs eager math with GQA, both layouts
    q = torch.randn(2, 5, 4, 8, dtype=torch.float64)
    k = torch.randn(2, 5, 2, 8, dtype=torch.float64)
    v = torch.randn(2, 5, 2, 8, dtype=torch.float64)
    go = torch.randn(2, 5, 4, 8, dtype=torch.float64)

    def eager(q, k, v):  # bshd
        qq, kk, vv = (t.transpose(1, 2) for t in (q, k, v))
        kk, vv = kk.repeat_interleave(2, 1), vv.repeat_interleave(2, 1)
        sc = qq @ kk.transpose(-1, -2) / math.sqrt(8)
        sc = sc.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
        return (torch.softmax(sc, -1) @ vv).transpose(1, 2)

    ra = [t.clone().requires_grad_() for t in (q, k, v)]
    rb = [t.clone().requires_grad_() for t in (q, k, v)]
    oa = eager(*ra)
    ob = FlashAttentionFn.apply(*rb, "bshd")
    close("FlashAttentionFn out", oa, ob)
    ref_grads = torch.autograd.grad(oa, ra, go)
    for x1, x2 in zip(ref_grads, torch.autograd.grad(ob, rb, go)):
        close("FlashAttentionFn grad", x1, x2)
    rc = [t.transpose(0, 1).clone().requires_grad_() for t in (q, k, v)]
    oc = FlashAttentionFn.apply(*rc, "sbhd")
    close("FlashAttentionFn sbhd out", oa.transpose(0, 1), oc)
    for x1, x2 in zip(ref_grads, torch.autograd.grad(oc, rc, go.transpose(0, 1))):
        close("FlashAttentionFn sbhd grad", x1.transpose(0, 1), x2)

    # varlen flash: two documents of 3 and 2 tokens vs FlashAttentionFn on each alone
    qv, kv_, vv = (t[0].clone() for t in (q, k, v))  # (5, heads, d)
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    ra = [t.clone().requires_grad_() for t in (qv, kv_, vv)]
    oa = VarlenFlashAttentionFn.apply(*ra, cu, cu)
    for lo, hi in ((0, 3), (3, 5)):
        rb = [t[lo:hi].clone()[None].requires_grad_() for t in (qv, kv_, vv)]
        ob = FlashAttentionFn.apply(*rb, "bshd")
        close("VarlenFlashAttentionFn out", oa[lo:hi], ob[0])
        ga = torch.autograd.grad(oa[lo:hi], ra, go[0, lo:hi], retain_graph=True)
        gb = torch.autograd.grad(ob, rb, go[:1, lo:hi])
        for x1, x2 in zip(ga, gb):
            close("VarlenFlashAttentionFn grad", x1[lo:hi], x2[0])

    # efficient attention with a packed bool mask vs plain ops on the additive mask
    qe = torch.randn(2, 4, 5, 8, dtype=torch.float64)
    ke, ve = torch.randn_like(qe), torch.randn_like(qe)
    doc = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]])
    ar = torch.arange(5)
    allowed = (ar[None, None, :, None] >= ar[None, None, None, :]) & (doc[:, None, :, None] == doc[:, None, None, :])
    ra = [t.clone().requires_grad_() for t in (qe, ke, ve)]
    rb = [t.clone().requires_grad_() for t in (qe, ke, ve)]
    add = torch.zeros(allowed.shape, dtype=qe.dtype).masked_fill(~allowed, float("-inf"))
    oa = torch.softmax(ra[0] @ ra[1].transpose(-1, -2) / math.sqrt(8) + add, -1) @ ra[2]
    ob = EfficientAttentionBiasFn.apply(*rb, allowed)
    close("EfficientAttentionBiasFn out", oa, ob)
    ge = torch.randn_like(oa)
    for x1, x2 in zip(torch.autograd.grad(oa, ra, ge), torch.autograd.grad(ob, rb, ge)):
        close("EfficientAttentionBiasFn grad", x1, x2)

    # scale-mask-softmax
    sc = torch.randn(3, 5, 5, dtype=torch.float64)
    sa, sb = sc.clone().requires_grad_(), sc.clone().requires_grad_()
    gsm = torch.randn(3, 5, 5, dtype=torch.float64)
    ya = torch.softmax((sa * 0.3).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf")), -1)
    (a,) = torch.autograd.grad(ya, sa, gsm)
    (c,) = torch.autograd.grad(ScaleMaskSoftmaxFn.apply(sb, 0.3), sb, gsm)
    close("ScaleMaskSoftmaxFn", a, c)

    # dropout: backward scales by the same mask
    xd = torch.randn(1000, dtype=torch.float64, requires_grad=True)
    out = dropout(xd, 0.25)
    (gd,) = torch.autograd.grad(out, xd, torch.ones_like(out))
    close("DropoutFn", gd, (out != 0).double() / 0.75)
    return failures


if __name__ == "__main__":
    for name, saves in show_torch113_saves().items():
        print(f"{name:22s} {saves}")
    bad = self_check()
    print("self_check:", "ok" if not bad else bad)
