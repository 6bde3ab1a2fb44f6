"""Megatron-core with TransformerEngine (TE) on Debian's torch 1.13 CPU: what a layer built by the
TE spec keeps for backward, under bf16/fp32 and fp8 (per-tensor scaling), and what Megatron's
--recompute-modules drop, measured, and `actmem estimate --framework megatron
--transformer-impl ... --fp8 ... --recompute-modules ...` held to it within 1 %.

TE cannot run here (no CUDA). The reference layer below follows the save_for_backward lists of
TE's autograd Functions and Megatron-core's modules line for line (TE main @d0067d0da6cb,
Megatron-LM main @d98e8a64ddf3; validation/notes/fidelity-research.md section B):
  TELayerNormLinearFn  TE module/layernorm_linear.py _LayerNormLinear.forward: saves
                       (inputmat, weight, ln_weight, ln_out, mu, rsigma) l.526-536; inputmat is
                       inp.view(-1, h) (l.182-188: the caller's storage); mu None for RMSNorm;
                       under fp8 ln_out is a Float8Tensor with only its columnwise usage (l.478-487)
  TELinearFn           TE module/linear.py _Linear.forward: saves inputmat (l.619-621), the fp8
                       columnwise copy under fp8 (l.606-617)
  TEFusedRoPEFn        TE attention/rope.py FusedRoPEFunc: save_for_backward(freqs, ...) l.152
  te_dot_product_attention + FusedAttnFn
                       TE dot_product_attention/utils.py get_qkv_layout l.2421ff (.contiguous()
                       when no layout fits, l.2612-2615); backends.py FusedAttnFunc.forward:
                       saves q, k, v, out + aux_ctx_tensors (softmaxStats fp32 [b, np, s, 1],
                       rng_state int64 [2]) l.1592-1664
  SwiGLUFp8StoreFn     Megatron fusions/fused_bias_swiglu.py SwiGLUFunction (l.232-235):
                       input.to(float8_e4m3fn) with activation_func_fp8_input_store
  TELayer              Megatron transformer/transformer_layer.py + attention.py with the TE spec
                       (gpt_layer_specs.py l.145, l.543: norms fused into linear_qkv and fc1);
                       recompute_modules core_attn (attention.py l.446 _checkpointed_attention_forward:
                       tensor_parallel.checkpoint keeps q, k, v) and mlp (transformer_layer.py
                       l.537-539: the MLP checkpointed, its input kept)
  LocalLayer           models.MegatronLayer (the local spec) with recompute_modules layernorm
                       (transformer_layer.py l.475-530: CheckpointWithoutOutput, random.py l.993:
                       the norm runs without saving, its output storage is freed once its consumer
                       saved it, and is recomputed in backward) and mlp.
fp8 storage is emulated: a Float8Tensor's columnwise data is a uint8 tensor of the transposed
shape (in, N) and its _scale_inv an fp32 tensor of one element; float8_e4m3fn (the SwiGLU
store) is a uint8 tensor of the input's shape. Their values are not used by backward (the
backward recomputes from the bf16 input each Function also keeps), so gradients stay exact and
`--self-check` compares them with the plain model.

Measured: the distinct storages the forward keeps for backward (saved_tensors_hooks, a view
counts its storage, parameters excluded), each read after the forward (a storage freed by
CheckpointWithoutOutput counts 0, and a later storage at its address is a new one).

    /usr/bin/python3 validation/te_validation.py --actmem build/actmem
    /usr/bin/python3 validation/te_validation.py --measure-only [--filter X]
    /usr/bin/python3 validation/te_validation.py --self-check
"""
import dataclasses
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import parallel_models  # noqa: E402
import run_validation  # noqa: E402
import runner  # noqa: E402
from emulated_ops import BiasGeLUFn, SwiGLUFn, _attention_math, _rotate_half, dropout  # noqa: E402


@dataclasses.dataclass(frozen=True)
class MegatronOpts:
    impl: str = "transformer_engine"  # local | transformer_engine
    fp8: str = "none"  # none | delayed | tensorwise (per-tensor scaling: the same saved bytes) | mxfp8 | blockwise
    act_fp8_store: bool = False  # --activation-func-fp8-input-store
    modules: tuple = ("core_attn",)  # --recompute-modules (with recompute selective)
    dispatcher: str = "allgather"  # --moe-token-dispatcher (Megatron's --moe-token-dispatcher-type)
    no_cache: bool = False  # --disable-parameter-transpose-cache (per-tensor recipes)
    deterministic: bool = False  # --deterministic (Megatron's --deterministic-mode; MoE's unpermute index_add_)


class Fp8Recipe(str):
    """A recipe name passed to the TE Functions as their `fp8` argument (truthy), which with
    `no_cache` (--disable-parameter-transpose-cache) also saves the weight's fresh fp8 copy."""
    no_cache = False


# ---------------------------------------------------------------------------------------------
# fp8 storage (emulated)


def fp8_columnwise(x2d):
    """Float8Tensor after update_usage(rowwise_usage=False, columnwise_usage=True): the transposed
    data (in, N), 1 byte per element, and _scale_inv, one fp32 element (per-tensor scaling)."""
    with torch.no_grad():
        amax = x2d.detach().abs().max().float().clamp(min=1e-12)
        scale = 127.0 / amax
        data = (x2d.t().float() * scale).round().clamp(-127, 127).to(torch.int8).view(torch.uint8).contiguous()
        scale_inv = (1.0 / scale).reshape(1)
    return data, scale_inv


def fp8_rowwise(x2d):
    """Float8Tensor with only its rowwise usage (the layout it is all-gathered in under sequence
    parallelism): the (N, in) data, 1 byte per element, and _scale_inv, one fp32 element."""
    data, scale_inv = fp8_columnwise(x2d)
    return data.t().contiguous(), scale_inv


def _pad(x, m):
    return (x + m - 1) // m * m


def mxfp8_columnwise(x2d):
    """MXFP8Tensor after update_usage(rowwise_usage=False): TE csrc/quantizer.cpp
    MXFP8Quantizer::create_tensor l.1502-1535 and get_scale_shape l.1852-1881. The columnwise data
    keeps the (N, in) layout, 1 byte per element; one e8m0 scale byte per 32 rows of a column, the
    scale tensor (pad(N/32, 4), pad(in, 128)) uint8. N and in must be multiples of 32."""
    n, k = x2d.shape
    assert n % 32 == 0 and k % 32 == 0, "MXFP8 needs both dims divisible by 32"
    with torch.no_grad():
        amax = x2d.detach().float().abs().view(n // 32, 32, k).amax(1).clamp(min=2.0 ** -127)
        exp = torch.floor(torch.log2(amax / 448.0)).clamp(-127, 127)
        scale = torch.full((_pad(n // 32, 4), _pad(k, 128)), 127, dtype=torch.uint8)
        scale[: n // 32, :k] = (exp + 127).to(torch.uint8)
        x = x2d.float().view(n // 32, 32, k) / torch.pow(2.0, exp)[:, None, :]
        data = x.round().clamp(-127, 127).to(torch.int8).view(torch.uint8).reshape(n, k).contiguous()
    return data, scale


def blockwise_columnwise(x2d):
    """Float8BlockwiseQTensor with 1x128 tiles (Float8BlockScaling x_block_scaling_dim 1) after
    update_usage(rowwise_usage=False): TE csrc/quantizer.cpp Float8BlockQuantizer::create_tensor
    l.1090-1116, get_scale_shape l.1476-1483: the transposed data (in, N), 1 byte per element, and
    fp32 scales, one per 128-row tile of a column, (⌈N/128⌉, pad(in, 4))."""
    n, k = x2d.shape
    tiles = (n + 127) // 128
    with torch.no_grad():
        xf = torch.zeros(tiles * 128, k)
        xf[:n] = x2d.detach().float()
        amax = xf.abs().view(tiles, 128, k).amax(1).clamp(min=1e-12)
        scale_inv = torch.zeros(tiles, _pad(k, 4))
        scale_inv[:, :k] = amax / 448.0
        x = xf.view(tiles, 128, k) / scale_inv[:, None, :k]
        data = x.reshape(-1, k)[:n].t().round().clamp(-127, 127).to(torch.int8).view(torch.uint8).contiguous()
    return data, scale_inv


def fp8_saved(x2d, fp8, gather=1):
    """What a TE linear keeps of its quantized input under recipe `fp8` (True: per-tensor):
    MXFP8 and blockwise keep their columnwise usage even under sequence parallelism
    (layernorm_linear.py l.478-487; supports_only_rowwise_all_gather() is False for both)."""
    if fp8 == "mxfp8":
        return mxfp8_columnwise(x2d)
    if fp8 == "blockwise":
        return blockwise_columnwise(x2d)
    return fp8_rowwise(x2d) if gather > 1 else fp8_columnwise(x2d)


def fp8_weight_copy(weight):
    """--disable-parameter-transpose-cache: Megatron passes is_first_microbatch None
    (extensions/transformer_engine.py l.1338-1340), TE's cache_name is None (linear.py l.1958), the
    forward quantizes the weight with rowwise and columnwise usage (l.466-490) and saves that
    Float8Tensor for dgrad (wt_save = weightmat, l.643-661): on Hopper its data (out, in) and
    _transpose (in, out), 1 byte per element each, and the one-element fp32 scale_inv."""
    data, scale_inv = fp8_rowwise(weight.detach())
    return data, data.t().contiguous(), scale_inv


def _weight_saves(fp8, weight):
    return fp8_weight_copy(weight) if getattr(fp8, "no_cache", False) else ()


def _norm(x2d, w, b, eps, rms):
    xf = x2d.float()
    if rms:
        rsigma = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        y = xf * rsigma[:, None] * w.float()
        return y.to(x2d.dtype), None, rsigma
    mu = xf.mean(-1)
    rsigma = torch.rsqrt(((xf - mu[:, None]) ** 2).mean(-1) + eps)
    y = (xf - mu[:, None]) * rsigma[:, None] * w.float() + b.float()
    return y.to(x2d.dtype), mu, rsigma


def _grads(fn, inputs, grad):
    """Backward by recomputation: gradients of fn(*inputs) for those that are tensors."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() if isinstance(t, torch.Tensor) else t for t in inputs]
        out = fn(*leaves)
        wanted = [t for t in leaves if isinstance(t, torch.Tensor)]
        got = iter(torch.autograd.grad(out, wanted, grad, allow_unused=True))
        return [next(got) if isinstance(t, torch.Tensor) else None for t in leaves]


# ---------------------------------------------------------------------------------------------
# TE autograd Functions (save lists as in TE)


class TELayerNormLinearFn(torch.autograd.Function):
    """_LayerNormLinear: saves inputmat (the caller's storage), ln_out (bf16, or fp8 columnwise +
    scale_inv), mu (LayerNorm only), fp32 rsigma (N,); weights are parameters.

    Sequence parallel (`gather` = t > 1: column-parallel with sequence_parallel, l.174
    with_input_all_gather): the norm runs on the rank's s/t rows, ln_out is all-gathered into
    ln_out_total for the GEMM and ln_out_total is freed after it (l.430-435, clear_tensor_data);
    ln_out, the local s/t shard, is what is saved (l.466-536), and backward gathers it again
    (ctx.ln_out_needs_gather). Under fp8 the quantizer drops columnwise usage before the gather
    (l.230-232: Float8Quantizer / Float8CurrentScalingQuantizer supports_only_rowwise_all_gather)
    and ln_out keeps its rowwise data (l.478-487: update_usage(rowwise_usage=False) only when no
    gather is needed): the local (N/t, h) fp8 data + scale_inv."""

    @staticmethod
    def forward(ctx, inp, ln_w, ln_b, weight, bias, eps, rms, fp8, gather):
        h = inp.shape[-1]
        inputmat = inp.view(-1, h).detach()  # the same storage (a no-grad view cannot be saved in 1.13)
        with torch.no_grad():
            ln_out, mu, rsigma = _norm(inputmat, ln_w, ln_b, eps, rms)
            ln_out_total = torch.cat([ln_out] * gather) if gather > 1 else ln_out  # the other ranks' rows
            out = F.linear(ln_out_total, weight, bias)
            del ln_out_total  # clear_tensor_data(ln_out_total): not saved
        if fp8:
            ln_save = fp8_saved(ln_out, fp8, gather)
        else:
            ln_save = (ln_out,)
        ctx.eps, ctx.rms, ctx.shape, ctx.gather = eps, rms, inp.shape, gather
        # the weights (parameters, not counted) are held as attributes here
        ctx.params = (ln_w, ln_b, weight, bias)
        ctx.save_for_backward(inputmat, *ln_save, mu, rsigma, *_weight_saves(fp8, weight))
        return out.view(inp.shape[0] * gather, *inp.shape[1:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        inputmat = ctx.saved_tensors[0]
        ln_w, ln_b, weight, bias = ctx.params
        gather = ctx.gather

        def fn(x, lw, lb, w, b):
            y = _norm(x, lw, lb, ctx.eps, ctx.rms)[0]
            return F.linear(torch.cat([y] * gather) if gather > 1 else y, w, b)  # reduce-scatter in backward

        gx, glw, glb, gw, gb = _grads(fn, (inputmat, ln_w, ln_b, weight, bias), grad.reshape(-1, weight.shape[0]))
        return gx.view(ctx.shape), glw, glb, gw, gb, None, None, None, None


class TELinearFn(torch.autograd.Function):
    """_Linear: saves inputmat = inp.view(-1, in) (the caller's storage), or under fp8 the
    columnwise fp8 copy + scale_inv. `save_original` (Megatron attention.py l.428-444:
    set_save_original_input(linear_proj) for fp8 recipes other than delayed): under fp8 the
    original high-precision input is saved instead (linear.py l.597-598, inputmat = inp), the
    FusedAttention output that attention saves already."""

    @staticmethod
    def forward(ctx, inp, weight, bias, fp8, save_original):
        inputmat = inp.reshape(-1, inp.shape[-1]).detach()  # the caller's storage when contiguous
        with torch.no_grad():
            out = F.linear(inputmat, weight, bias)
        quantized = fp8 and not save_original
        ctx.fp8, ctx.shape, ctx.params = quantized, inp.shape, (weight, bias)
        if fp8 and not quantized:  # save_original: the bf16 input, and without the cache the weight copy
            ctx.save_for_backward(inputmat, *_weight_saves(fp8, weight))
        elif quantized:
            ctx.save_for_backward(*fp8_saved(inputmat, fp8), *_weight_saves(fp8, weight))
            ctx.inp = inputmat.detach()  # held for the exact backward only (not a saved tensor of TE)
        else:
            ctx.save_for_backward(inputmat)
        return out.view(*inp.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        weight, bias = ctx.params
        x = ctx.inp if ctx.fp8 else ctx.saved_tensors[0]
        gx, gw, gb = _grads(lambda a, w, b: F.linear(a, w, b), (x, weight, bias), grad.reshape(-1, weight.shape[0]))
        return gx.view(ctx.shape), gw, gb, None, None


class TEFusedRoPEFn(torch.autograd.Function):
    """FusedRoPEFunc: a new contiguous output; saves freqs (the model's fp32 (s, 1, 1, d) tensor)."""

    @staticmethod
    def forward(ctx, x, freqs):
        with torch.no_grad():
            cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
            out = (x * cos + _rotate_half(x) * sin).contiguous()
        ctx.save_for_backward(freqs)
        return out

    @staticmethod
    def backward(ctx, grad):
        (freqs,) = ctx.saved_tensors
        cos, sin = freqs.cos().to(grad.dtype), freqs.sin().to(grad.dtype)
        gs = grad * sin
        half = grad.shape[-1] // 2
        return grad * cos + torch.cat((gs[..., half:], -gs[..., :half]), dim=-1), None


class FusedAttnFn(torch.autograd.Function):
    """FusedAttnFunc (bf16/fp32, sbhd): saves q, k, v, out, softmaxStats fp32 (b, np, s, 1) and
    rng_state int64 (2,). out is (s, b, np·hn), the tensor returned (linear_proj's input)."""

    @staticmethod
    def forward(ctx, q, k, v):
        s, b, a = q.shape[:3]
        p = (1, 2, 0, 3)
        with torch.no_grad():
            o, lse = _attention_math(q.permute(p), k.permute(p), v.permute(p))
            out = o.permute(2, 0, 1, 3).contiguous().view(s, b, -1)  # np·hn_v (MLA: v head dim)
            stats = lse.reshape(b, a, s, 1).contiguous()
            rng_state = torch.zeros(2, dtype=torch.int64)  # torch::empty({2}) (attention.cpp l.235)
        ctx.save_for_backward(q, k, v, out, stats, rng_state)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors[:3]
        s, b = q.shape[:2]
        p = (1, 2, 0, 3)

        def fn(qq, kk, vv):
            return _attention_math(qq.permute(p), kk.permute(p), vv.permute(p))[0].permute(2, 0, 1, 3).reshape(s, b, -1)

        return tuple(_grads(fn, (q, k, v), grad))


class CPAttnP2PFn(torch.autograd.Function):
    """AttnFuncWithCPAndKVP2P (TE context_parallel.py), bf16/fp32, sbhd, FusedAttention, one CP
    rank of `cp`: k and v are packed into p2p_comm_buffers[0] = cat(k.view(-1), v.view(-1))
    (l.1690); each ring step receives the next rank's block into a new buffer (l.1706, emulated by
    copies: the other ranks' k, v equal this rank's here); out is corrected step by step in the
    activation dtype (flash_attn_fwd_out_correction_init returns out_per_step's dtype, l.149), and
    softmax_lse = clone(softmax_lse_per_step[0]), fp32 (b, np, s/cp) (l.1938). Saved (l.2087-2142,
    the f16 branch): q, kv = p2p_comm_buffers[-1] (the last received buffer: k and v's bytes in one
    new storage; this rank's own k and v are not kept), out, softmax_lse and one rng_state int64 [2]
    per step (cp of them); cu_seqlens are None for sbhd and the per-step ones are TE's cached
    (b + 1) int32 tensors (not modelled, < 100 bytes). Attention is emulated non-causal over the
    gathered keys (as parallel_models.RingFlashAttentionFn): the saved shapes are the point."""

    @staticmethod
    def forward(ctx, q, k, v, cp):
        s, b, a, d = q.shape
        p = (1, 2, 0, 3)
        with torch.no_grad():
            kv = torch.cat((k.reshape(-1), v.reshape(-1)))  # p2p_comm_buffers[0]
            for _ in range(cp - 1):
                kv = torch.empty_like(kv).copy_(kv)  # p2p_comm_buffers[i + 1]: received from the previous rank
            kk, vv = torch.cat([k] * cp), torch.cat([v] * cp)
            o, lse = _attention_math(q.permute(p), kk.permute(p), vv.permute(p), causal=False)
            out = o.permute(2, 0, 1, 3).contiguous()
            softmax_lse = lse.reshape(b, a, s).clone()
            rng_states = [torch.zeros(2, dtype=torch.int64) for _ in range(cp)]
        ctx.cp, ctx.kv_shapes = cp, (k.shape, v.shape)
        ctx.save_for_backward(q, kv, out, softmax_lse, *rng_states)
        return out.view(s, b, -1)  # a·dv: MLA's v head dim differs from q's (o_shape, l.1689)

    @staticmethod
    def backward(ctx, grad):
        q, kv = ctx.saved_tensors[:2]
        k_shape, v_shape = ctx.kv_shapes
        k = kv[: k_shape.numel()].view(k_shape)
        v = kv[k_shape.numel():].view(v_shape)
        s, b, a, d = q.shape
        p = (1, 2, 0, 3)

        def fn(qq, kk, vv):
            kf, vf = torch.cat([kk] * ctx.cp), torch.cat([vv] * ctx.cp)
            o = _attention_math(qq.permute(p), kf.permute(p), vf.permute(p), causal=False)[0]
            return o.permute(2, 0, 1, 3).reshape(s, b, -1)

        gq, gk, gv = _grads(fn, (q, k, v), grad)
        return gq, gk, gv, None


def te_dot_product_attention(q, k, v, cp=1):
    """DotProductAttention: get_qkv_layout keeps q, k, v views of one storage that match a layout
    (sbh3d / sbhd_sbh2d); otherwise (q, k fresh RoPE outputs, v a strided view) .contiguous()s
    each: a copy of v only (q and k already are contiguous). Under context parallelism
    FusedAttention.forward (backends.py l.2248-2250) makes each contiguous and runs
    AttnFuncWithCPAndKVP2P (CPAttnP2PFn)."""
    same = q.storage().data_ptr() == k.storage().data_ptr() == v.storage().data_ptr()
    if not same:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if cp > 1:
        return CPAttnP2PFn.apply(q.contiguous(), k.contiguous(), v.contiguous(), cp)
    return FusedAttnFn.apply(q, k, v)


class SwiGLUFp8StoreFn(torch.autograd.Function):
    """SwiGLUFunction with fp8_input_store: saves input.to(float8_e4m3fn) (1 byte per element)."""

    @staticmethod
    def forward(ctx, x):
        with torch.no_grad():
            gate, up = torch.chunk(x, 2, dim=-1)
            out = F.silu(gate) * up
            stored = x.to(torch.int8).view(torch.uint8)  # float8_e4m3fn: 1 byte per element
        ctx.x = x.detach()  # the exact backward only; TE's backward reads the fp8 copy
        ctx.save_for_backward(stored)
        return out

    @staticmethod
    def backward(ctx, grad):
        (gx,) = _grads(lambda t: F.silu(torch.chunk(t, 2, -1)[0]) * torch.chunk(t, 2, -1)[1], (ctx.x,), grad)
        return gx


# ---------------------------------------------------------------------------------------------
# Megatron CheckpointWithoutOutput (tensor_parallel/random.py), for recompute_modules layernorm


class _CheckpointWithoutOutputFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_fn, state, *args):
        with torch.no_grad():
            out = run_fn(*args)
        ctx.run_fn, ctx.state = run_fn, state
        ctx.save_for_backward(*args)
        return out

    @staticmethod
    def backward(ctx, grad):
        # as random.py's CheckpointWithoutOutputFunction.backward: recompute, then
        # torch.autograd.backward, which also accumulates the module's parameter gradients
        with torch.enable_grad():
            args = [t.detach().requires_grad_() for t in ctx.saved_tensors]
            torch.autograd.backward(ctx.run_fn(*args), grad)
        return (None, None, *[a.grad for a in args])


class CheckpointWithoutOutput:
    """checkpoint(fn, *args) runs fn without saving and keeps args; discard_output_and_register_recompute
    frees the output's storage (resize_(0)) and restores it (recomputed) when the hook tensor's
    gradient arrives, before the consumer's backward reads it."""

    def checkpoint(self, fn, *args):
        self.state = {}
        self.fn, self.args = fn, args
        self.out = _CheckpointWithoutOutputFn.apply(fn, self.state, *args)
        return self.out

    def discard_output_and_register_recompute(self, hook_tensor):
        storage = self.out.storage()
        self.nbytes_elems = storage.size()
        storage.resize_(0)

        def restore(grad):
            with torch.no_grad():
                recomputed = self.fn(*self.args)
            self.out.storage().resize_(self.nbytes_elems)
            self.out.storage().copy_(recomputed.storage())
            return grad

        if hook_tensor.requires_grad:
            hook_tensor.register_hook(restore)


# ---------------------------------------------------------------------------------------------
# layers


class TELayer(nn.Module):
    """A GPT layer of get_gpt_layer_with_transformer_engine_spec: linear_qkv =
    TELayerNormColumnParallelLinear (input_layernorm IdentityOp), TE DotProductAttention, linear_proj
    = TERowParallelLinear, linear_fc1 = TELayerNormColumnParallelLinear (pre_mlp_layernorm
    IdentityOp), Megatron's fused SwiGLU (or bias-GeLU), linear_fc2 = TERowParallelLinear.

    With `par` (parallel_models.ParallelConfig) it is one tensor/sequence/context-parallel rank:
    a/t heads, kv/t KV heads, f/t FFN (parallel_models.rank_shapes); under sequence parallelism
    the LayerNormLinears all-gather their s/t input rows (TELayerNormLinearFn `gather`) and the
    row-parallel linears reduce-scatter their output, otherwise all-reduce; under context
    parallelism DotProductAttention runs AttnFuncWithCPAndKVP2P (CPAttnP2PFn). The row-parallel
    biases are added after the reduction (Megatron's skip_bias_add, in bias-dropout-add)."""

    def __init__(self, cfg: models.ModelConfig, run: models.RunConfig, opts: MegatronOpts, par=None):
        par = par or parallel_models.ParallelConfig()
        a_r, kv_r, f_r, _ = parallel_models.rank_shapes(cfg, par)
        cfg = dataclasses.replace(cfg, heads=a_r, kv_heads=kv_r, ffn=f_r)
        super().__init__()
        self.cfg, self.run, self.opts, self.par = cfg, run, opts, par
        h, a, kv, d, f = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn
        self.gpt = cfg.family == "gpt2"
        self.ln1_w, self.ln2_w = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
        self.ln1_b = nn.Parameter(torch.zeros(h)) if self.gpt else None
        self.ln2_b = nn.Parameter(torch.zeros(h)) if self.gpt else None
        self.qkv_w = nn.Parameter(torch.randn((a + 2 * kv) * d, h) * 0.02)
        self.qkv_b = nn.Parameter(torch.zeros((a + 2 * kv) * d)) if self.gpt or cfg.attention_bias else None
        self.proj_w = nn.Parameter(torch.randn(h, a * d) * 0.02)
        self.proj_b = nn.Parameter(torch.zeros(h)) if self.gpt else None
        self.fc1_w = nn.Parameter(torch.randn(f if self.gpt else 2 * f, h) * 0.02)
        self.fc1_bias = nn.Parameter(torch.zeros(f)) if self.gpt else None  # skip_bias_add -> bias_gelu
        self.fc2_w = nn.Parameter(torch.randn(h, f) * 0.02)
        self.fc2_b = nn.Parameter(torch.zeros(h)) if self.gpt else None

    @property
    def fp8(self):
        """False, or the recipe's name (truthy)."""
        if self.opts.fp8 == "none":
            return False
        recipe = Fp8Recipe(self.opts.fp8)
        recipe.no_cache = self.opts.no_cache
        return recipe

    @property
    def gather(self):
        """Rows a LayerNormLinear all-gathers: t under sequence parallelism, else 1 (none)."""
        return self.par.tp if self.par.sp and self.par.tp > 1 else 1

    def row_parallel(self, x, weight, bias, save_original=False):
        """TERowParallelLinear: the linear on the rank's input, then reduce-scatter (SP) or all-reduce
        (neither saves anything), then the bias."""
        out = TELinearFn.apply(x, weight, None, self.fp8, save_original)
        if self.par.tp > 1:
            out = (parallel_models.ReduceScatterToSP.apply(out, self.par.tp) if self.par.sp
                   else parallel_models.ReduceFromTP.apply(out))
        return out + bias if bias is not None else out

    def selective(self, module):
        return self.run.recompute == "selective" and module in self.opts.modules

    def mlp(self, h1):
        cfg = self.cfg
        fc1 = TELayerNormLinearFn.apply(h1, self.ln2_w, self.ln2_b, self.fc1_w, None, cfg.eps, not self.gpt, self.fp8,
                                        self.gather)
        if self.gpt:
            act = BiasGeLUFn.apply(fc1, self.fc1_bias)
        elif self.opts.act_fp8_store:
            act = SwiGLUFp8StoreFn.apply(fc1)
        else:
            act = SwiGLUFn.apply(fc1)
        return self.row_parallel(act, self.fc2_w, self.fc2_b)

    def attention(self, q, k, v):
        return te_dot_product_attention(q, k, v, self.par.cp)

    def forward(self, x, rope):
        cfg, run = self.cfg, self.run
        b = x.shape[1]
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        groups = a // kv
        # SelfAttention.get_query_key_value_tensors (attention.py l.1824-1918)
        qkv = TELayerNormLinearFn.apply(x, self.ln1_w, self.ln1_b, self.qkv_w, self.qkv_b, cfg.eps, not self.gpt,
                                        self.fp8, self.gather)
        s = qkv.shape[0]  # s/cp: the whole local sequence, gathered under SP
        qkv = qkv.view(s, b, kv, (groups + 2) * d)
        q, k, v = torch.split(qkv, [groups * d, d, d], dim=3)
        q = q.reshape(s, b, a, d)
        if rope is not None:
            q = TEFusedRoPEFn.apply(q, rope)
            k = TEFusedRoPEFn.apply(k, rope)
        if self.selective("core_attn"):
            context = checkpoint(self.attention, q, k, v, use_reentrant=True)
        else:
            context = self.attention(q, k, v)
        # attention.py l.428-444: linear_proj keeps its original input under fp8 recipes other than delayed
        out = self.row_parallel(context, self.proj_w, self.proj_b, save_original=self.opts.fp8 not in ("none", "delayed"))
        x = x + dropout(out, run.hidden_dropout)
        if self.selective("mlp"):
            y = checkpoint(self.mlp, x, use_reentrant=True)
        else:
            y = self.mlp(x)
        return x + dropout(y, run.hidden_dropout)


class LocalLayer(models.MegatronLayer):
    """The local spec (models.MegatronLayer) with recompute_modules core_attn, layernorm, mlp."""

    def __init__(self, cfg, run, opts: MegatronOpts):
        super().__init__(cfg, run)
        self.opts = opts

    def selective(self, module):
        return self.run.recompute == "selective" and module in self.opts.modules

    def _mlp(self, y):
        if self.cfg.family == "gpt2":
            return self.fc2(BiasGeLUFn.apply(self.fc1(y), self.fc1_bias))
        return self.fc2(SwiGLUFn.apply(self.fc1(y)))

    def _normed(self, x, i):
        if not self.selective("layernorm"):
            return self.norm(x, i), None
        ckpt = CheckpointWithoutOutput()
        return ckpt.checkpoint(lambda t: self.norm(t, i), x), ckpt

    def forward(self, x, rope):
        cfg, run = self.cfg, self.run
        s, b, _ = x.shape
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
        groups = a // kv
        if rope is not None:
            rope = (rope.cos(), rope.sin())
        n1, ckpt1 = self._normed(x, 1)
        qkv = self.qkv(n1)
        if ckpt1:  # transformer_layer.py: after linear_qkv saved it
            ckpt1.discard_output_and_register_recompute(qkv)
        qkv = qkv.view(s, b, kv, (groups + 2) * d)
        q, k, v = torch.split(qkv, [groups * d, d, d], dim=3)
        q = q.reshape(s, b, a, d)
        if rope is not None:
            from emulated_ops import FusedRoPEFn

            q = FusedRoPEFn.apply(q, *rope)
            k = FusedRoPEFn.apply(k, *rope)
        if self.selective("core_attn"):
            context = checkpoint(self.core_attention, q, k, v, use_reentrant=True)
        else:
            context = self.core_attention(q, k, v)
        out = self.proj(context.view(s, b, a * d))
        x = x + dropout(out, run.hidden_dropout)
        n2, ckpt2 = self._normed(x, 2)
        y = checkpoint(self._mlp, n2, use_reentrant=True) if self.selective("mlp") else self._mlp(n2)
        if ckpt2:
            ckpt2.discard_output_and_register_recompute(y)
        return x + dropout(y, run.hidden_dropout)


def build(cfg, run, opts, seed=0, par=None):
    """The model on one GPU; with `par`, one tensor/sequence/context-parallel rank:
    parallel_models.MegatronRankModel (vocab-parallel embedding and cross entropy, SP scatter)
    with TE layers of that rank."""
    torch.manual_seed(seed)
    if par is not None:
        if opts.impl != TE:
            raise ValueError("a parallel rank is modelled for the TE spec only here (run_validation.py has the local one)")
        model = parallel_models.MegatronRankModel(cfg, run, par)
        model.layers = nn.ModuleList(TELayer(cfg, run, opts, par) for _ in range(cfg.layers))
        return model.to(run.torch_dtype).train()
    model = models.MegatronModel(cfg, run)
    layer = TELayer if opts.impl == "transformer_engine" else LocalLayer
    model.layers = nn.ModuleList(layer(cfg, run, opts) for _ in range(cfg.layers))
    return model.to(run.torch_dtype).train()


# ---------------------------------------------------------------------------------------------
# measurement


def _key(t):
    return t.storage().data_ptr()


def measure(cfg, run, opts, seed=0, backward=False, par=None, build_fn=None):
    model = build_fn(cfg, run, opts, seed) if build_fn else build(cfg, run, opts, seed, par)
    g = torch.Generator().manual_seed(seed)
    seq = run.seq_len // (par.cp if par else 1)  # a CP rank's tokens
    ids = torch.randint(0, cfg.vocab, (run.micro_batch, seq), generator=g)
    labels = torch.randint(0, cfg.vocab, (run.micro_batch, seq), generator=g)
    excluded = {_key(p) for p in model.parameters()}
    seen = {}  # storage key -> (tensor, regions)
    retired = []  # entries whose storage CheckpointWithoutOutput freed: its address may be reused

    def pack(t):
        if t.dim() == 0 or t.numel() == 0 or _key(t) in excluded:
            return t
        old = seen.get(_key(t))
        if old is not None and old[0].storage().nbytes() == 0 and t.storage().nbytes() > 0:
            retired.append(seen.pop(_key(t)))  # a new storage at a freed one's address
        entry = seen.setdefault(_key(t), (t, set()))
        entry[1].add(models.current_region())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(ids, labels)
    regions, storages = {}, []
    for t, where in list(seen.values()) + retired:
        region = next(iter(where)) if len(where) == 1 else "shared"
        nbytes = t.storage().nbytes()  # read now: CheckpointWithoutOutput may have freed it
        regions[region] = regions.get(region, 0) + nbytes
        storages.append((region, tuple(t.shape), str(t.dtype).replace("torch.", ""), nbytes))
    if backward:
        loss.backward()
    middle = f"layer {cfg.layers // 2}"
    return {"layer": regions.get(middle, 0), "total": sum(regions.values()), "storages": storages,
            "middle": middle, "model": model}


def self_check():
    """Gradients with recompute_modules (and the fp8 emulation) equal those without (fp32): the
    checkpoints, CheckpointWithoutOutput's freed-and-restored storage and the Functions' backwards."""
    cfg = models.ModelConfig(**dict(LLAMA, layers=2))
    ok = True
    for impl, modules, fp8, store in ((TE, ("core_attn", "mlp"), "delayed", True),
                                      ("local", ("core_attn", "layernorm", "mlp"), "none", False)):
        attention = "flash" if impl == TE else "eager"
        grads = []
        for rc, o in (("none", MegatronOpts(impl)), ("selective", MegatronOpts(impl, fp8, store, modules))):
            m = measure(cfg, models.RunConfig("megatron", attention, rc, "fp32", 16, 2), o, backward=True)
            grads.append([p.grad.clone() for p in m["model"].parameters()])
        for g0, g1 in zip(*grads):
            if not torch.allclose(g0, g1, rtol=1e-4, atol=1e-6):
                print(f"self-check: {impl} {modules} fp8 {fp8}: gradients differ from the plain layer's")
                ok = False
                break
    # The rank's Functions against plain torch: the sequence-parallel LayerNormLinear (all-gather in
    # forward, reduce-scatter of the input gradient) and the CP ring attention (keys of all ranks).
    torch.manual_seed(0)
    x = torch.randn(6, 2, 16, requires_grad=True)
    lw, w = torch.randn(16, requires_grad=True), torch.randn(12, 16, requires_grad=True)
    for fp8 in (False, True):
        got = torch.autograd.grad(TELayerNormLinearFn.apply(x, lw, None, w, None, 1e-6, True, fp8, 2).square().sum(),
                                  (x, lw, w))
        y = _norm(x.view(-1, 16), lw, None, 1e-6, True)[0].view(6, 2, 16)
        ref = torch.autograd.grad(F.linear(torch.cat([y, y]), w).square().sum(), (x, lw, w))
        if not all(torch.allclose(a, r, rtol=1e-4, atol=1e-4) for a, r in zip(got, ref)):
            print(f"self-check: sequence-parallel TELayerNormLinearFn (fp8 {fp8}) gradients differ")
            ok = False
    q, k, v = (torch.randn(4, 2, heads, 8, requires_grad=True) for heads in (4, 2, 2))
    got = torch.autograd.grad(CPAttnP2PFn.apply(q, k, v, 2).square().sum(), (q, k, v))
    p = (1, 2, 0, 3)
    o, _ = _attention_math(q.permute(p), torch.cat([k, k]).permute(p), torch.cat([v, v]).permute(p), causal=False)
    ref = torch.autograd.grad(o.permute(2, 0, 1, 3).square().sum(), (q, k, v))
    if not all(torch.allclose(a, r, rtol=1e-4, atol=1e-5) for a, r in zip(got, ref)):
        print("self-check: CPAttnP2PFn gradients differ")
        ok = False
    if ok:
        print("self-check: TE and local layers with recompute_modules (and fp8 emulation) give the plain gradients; "
              "so do the sequence-parallel LayerNormLinear and the CP ring attention")
    return ok


# ---------------------------------------------------------------------------------------------
# cases

LLAMA = dict(family="llama", hidden=256, layers=3, heads=8, kv_heads=2, head_dim=32, ffn=704, vocab=1003, eps=1e-6)
LLAMA_MHA = dict(LLAMA, hidden=192, heads=6, kv_heads=6, head_dim=32, ffn=512, vocab=1009)
GPT = dict(family="gpt2", hidden=192, layers=3, heads=6, kv_heads=6, head_dim=32, ffn=768, vocab=1013, max_positions=256)

TE = "transformer_engine"
CASES = [
    # name, model, dtype, seq, batch, recompute, MegatronOpts
    ("te-llama-gqa-none-bf16", LLAMA, "bf16", 64, 2, "none", MegatronOpts(TE)),
    ("te-llama-gqa-none-fp32", LLAMA, "fp32", 48, 3, "none", MegatronOpts(TE)),
    ("te-llama-mha-none-bf16", LLAMA_MHA, "bf16", 80, 1, "none", MegatronOpts(TE)),
    ("te-gpt-norope-none-bf16", GPT, "bf16", 64, 2, "none", MegatronOpts(TE)),
    ("te-llama-gqa-coreattn-bf16", LLAMA, "bf16", 64, 2, "selective", MegatronOpts(TE)),
    ("te-llama-gqa-mlp-bf16", LLAMA, "bf16", 64, 2, "selective", MegatronOpts(TE, modules=("mlp",))),
    ("te-llama-gqa-coreattn-mlp-bf16", LLAMA, "bf16", 64, 2, "selective",
     MegatronOpts(TE, modules=("core_attn", "mlp"))),
    ("te-llama-gqa-layernorm-bf16", LLAMA, "bf16", 64, 2, "selective", MegatronOpts(TE, modules=("layernorm",))),
    ("te-gpt-coreattn-mlp-bf16", GPT, "bf16", 64, 2, "selective", MegatronOpts(TE, modules=("core_attn", "mlp"))),
    ("te-llama-gqa-full-bf16", LLAMA, "bf16", 64, 2, "full", MegatronOpts(TE)),
    ("te-llama-gqa-fp8-delayed", LLAMA, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="delayed")),
    ("te-llama-mha-fp8-tensorwise", LLAMA_MHA, "bf16", 80, 1, "none", MegatronOpts(TE, fp8="tensorwise")),
    ("te-llama-gqa-fp8-actstore", LLAMA, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="delayed", act_fp8_store=True)),
    ("te-llama-gqa-fp8-coreattn", LLAMA, "bf16", 64, 2, "selective", MegatronOpts(TE, fp8="delayed")),
    ("te-llama-gqa-fp8-mlp", LLAMA, "bf16", 64, 2, "selective", MegatronOpts(TE, fp8="delayed", modules=("mlp",))),
    ("te-gpt-fp8-none", GPT, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="delayed")),
    # Block-scaled recipes (te_rules.h): MXFP8's padded e8m0 scales (f = 704 pads to 768, GPT's
    # h = 192 to 256), blockwise's fp32 1x128-tile scales; linear_proj keeps its bf16 input.
    ("te-llama-gqa-fp8-mxfp8", LLAMA, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="mxfp8")),
    ("te-llama-gqa-fp8-blockwise", LLAMA, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="blockwise")),
    ("te-gpt-fp8-mxfp8", GPT, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="mxfp8")),
    ("te-gpt-fp8-blockwise-fp32", GPT, "fp32", 48, 3, "none", MegatronOpts(TE, fp8="blockwise")),
    ("te-llama-gqa-fp8-mxfp8-store-mlp", LLAMA, "bf16", 64, 2, "selective",
     MegatronOpts(TE, fp8="mxfp8", act_fp8_store=True, modules=("mlp",))),
    ("te-llama-gqa-fp8-blockwise-coreattn-drop", LLAMA, "bf16", 64, 2, "selective",
     MegatronOpts(TE, fp8="blockwise"), 0.1),
    # --disable-parameter-transpose-cache: each layer keeps its four fp8 weight copies (data +
    # transpose + scale_inv) per micro-batch; inside the checkpointed MLP (mlp) they are not kept.
    ("te-llama-gqa-fp8-nocache", LLAMA, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="delayed", no_cache=True)),
    ("te-gpt-fp8-tensorwise-nocache", GPT, "bf16", 64, 2, "none",
     MegatronOpts(TE, fp8="tensorwise", no_cache=True)),
    ("te-llama-gqa-fp8-nocache-mlp", LLAMA, "bf16", 64, 2, "selective",
     MegatronOpts(TE, fp8="delayed", no_cache=True, modules=("mlp",))),
    ("local-llama-gqa-layernorm-bf16", LLAMA, "bf16", 64, 2, "selective",
     MegatronOpts("local", modules=("layernorm",))),
    ("local-llama-gqa-mlp-bf16", LLAMA, "bf16", 64, 2, "selective", MegatronOpts("local", modules=("mlp",))),
    ("local-llama-gqa-all3-bf16", LLAMA, "bf16", 64, 2, "selective",
     MegatronOpts("local", modules=("core_attn", "layernorm", "mlp"))),
    ("local-gpt-layernorm-mlp-fp32", GPT, "fp32", 48, 2, "selective",
     MegatronOpts("local", modules=("layernorm", "mlp"))),
    # Megatron's default dropouts (0.1): bias-dropout-add keeps a bool mask per residual add; the
    # attention dropout runs inside FusedAttention, which keeps only its rng_state.
    ("te-llama-gqa-none-bf16-drop", LLAMA, "bf16", 64, 2, "none", MegatronOpts(TE), 0.1),
    ("te-llama-gqa-fp8-coreattn-drop", LLAMA, "bf16", 64, 2, "selective", MegatronOpts(TE, fp8="delayed"), 0.1),
]

# One tensor/sequence/context-parallel rank of the TE spec (TELayer with `par`, in
# parallel_models.MegatronRankModel), held to `actmem estimate ... --tp T [--sp] --cp C`.
# Heads and KV heads divisible by 4 (Megatron asserts kv % t == 0).
LLAMA_TP = dict(LLAMA, heads=8, kv_heads=4, vocab=1004)
GPT_TP = dict(GPT, heads=8, kv_heads=8, head_dim=24, vocab=1004)
P = parallel_models.ParallelConfig
PAR_CASES = [
    # name, model, dtype, seq, batch, recompute, MegatronOpts, dropout, ParallelConfig(tp, sp, cp)
    ("te-llama-tp2-bf16", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE), 0.0, P(2)),
    ("te-llama-tp2-sp-bf16", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE), 0.0, P(2, True)),
    ("te-llama-tp4-sp-bf16", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE), 0.0, P(4, True)),
    ("te-llama-tp4-coreattn-bf16", LLAMA_TP, "bf16", 64, 2, "selective", MegatronOpts(TE), 0.0, P(4)),
    ("te-llama-cp2-bf16", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE), 0.0, P(1, False, 2)),
    ("te-llama-tp2-sp-cp2-bf16", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE), 0.0, P(2, True, 2)),
    ("te-llama-tp2-sp-cp2-fp32", LLAMA_TP, "fp32", 48, 2, "none", MegatronOpts(TE), 0.0, P(2, True, 2)),
    ("te-llama-tp2-sp-full-bf16", LLAMA_TP, "bf16", 64, 2, "full", MegatronOpts(TE), 0.0, P(2, True)),
    ("te-llama-tp2-sp-drop-bf16", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE), 0.1, P(2, True)),
    ("te-gpt-tp2-sp-bf16", GPT_TP, "bf16", 64, 2, "none", MegatronOpts(TE), 0.0, P(2, True)),
    ("te-gpt-cp2-bf16", GPT_TP, "bf16", 64, 2, "none", MegatronOpts(TE), 0.0, P(1, False, 2)),
    ("te-llama-tp2-fp8-delayed", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="delayed"), 0.0, P(2)),
    ("te-llama-tp2-sp-fp8-delayed", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="delayed"), 0.0,
     P(2, True)),
    ("te-llama-tp4-sp-fp8-tensorwise", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="tensorwise"), 0.0,
     P(4, True)),
    ("te-llama-tp2-sp-cp2-fp8-actstore", LLAMA_TP, "bf16", 64, 2, "none",
     MegatronOpts(TE, fp8="delayed", act_fp8_store=True), 0.0, P(2, True, 2)),
    ("te-llama-tp2-sp-fp8-mlp", LLAMA_TP, "bf16", 64, 2, "selective", MegatronOpts(TE, fp8="tensorwise",
                                                                                    modules=("mlp",)), 0.0, P(2, True)),
    ("te-gpt-tp2-sp-cp2-fp8", GPT_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="delayed"), 0.0, P(2, True, 2)),
    # MXFP8 / blockwise under SP: the local ln_out shard keeps its columnwise usage (not rowwise)
    ("te-llama-tp2-sp-fp8-mxfp8", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="mxfp8"), 0.0, P(2, True)),
    ("te-llama-tp4-sp-fp8-blockwise", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="blockwise"), 0.0,
     P(4, True)),
    ("te-llama-tp2-fp8-mxfp8", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="mxfp8"), 0.0, P(2)),
    ("te-llama-tp2-sp-fp8-nocache", LLAMA_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="delayed", no_cache=True),
     0.0, P(2, True)),
    ("te-gpt-tp2-sp-cp2-fp8-blockwise", GPT_TP, "bf16", 64, 2, "none", MegatronOpts(TE, fp8="blockwise"), 0.0,
     P(2, True, 2)),
]


def cli_extra(opts: MegatronOpts, recompute):
    extra = ["--transformer-impl", opts.impl]
    if opts.fp8 != "none":
        extra += ["--fp8", opts.fp8]
    if opts.act_fp8_store:
        extra += ["--activation-func-fp8-input-store"]
    if recompute == "selective":
        extra += ["--recompute-modules", ",".join(opts.modules)]
    if opts.no_cache:
        extra += ["--disable-parameter-transpose-cache"]
    if opts.dispatcher != "allgather":
        extra += ["--moe-token-dispatcher", opts.dispatcher]
    if opts.deterministic:
        extra += ["--deterministic"]
    return extra


def setup(case):
    """A case's ModelConfig, RunConfig and ParallelConfig (None: whole layers)."""
    name, model, dtype, seq, batch, rc, mopts, *rest = case
    cfg = models.ModelConfig(**model)
    attention = "flash" if mopts.impl == TE else "eager"
    p = rest[0] if rest else 0.0
    par = rest[1] if len(rest) > 1 else None
    run = models.RunConfig("megatron", attention, rc, dtype, seq, batch, hidden_dropout=p, attention_dropout=p)
    return cfg, run, par


def measure_case(case):
    cfg, run, par = setup(case)
    return measure(cfg, run, case[6], par=par)


def estimate_case(case, actmem, workdir):
    cfg, run, par = setup(case)
    return run_validation.call_actmem(actmem, case[0], cfg, run, workdir, par=par, extra=cli_extra(case[6], case[5]))


def measure_only_row(case, m):
    print(f"{case[0]:34s} {m['layer']:11d} {'':11s} {m['total']:11d}")
    runner.print_storages(m)


def main():
    return runner.run_cases(CASES + PAR_CASES, measure_case, estimate_case,
                            lambda case, m, est: runner.worst_row(case[0], 34, m["layer"], m["total"], est),
                            runner.worst_header(34), measure_only=measure_only_row, self_check=self_check,
                            listing=True, error_line=lambda name, err: f"{name:34s} FAIL {err}", threads=None)


if __name__ == "__main__":
    sys.exit(main())
