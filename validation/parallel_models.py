"""One rank of a Megatron-style tensor / sequence / context parallel model, in one process.

No torch.distributed: the rank holds its own shard of every parallel weight, and the collectives
are autograd Functions that only move data around in the shapes a real rank would see. What
matters for memory is what each op saves for backward; the collectives are emulated so that they
save exactly what Megatron-LM's do (written here after reading Megatron-LM, not copied):

  * megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication:
    ColumnParallelLinear / RowParallelLinear save `(input, weight)`. Under sequence parallelism
    the column-parallel input is the rank's s/t shard: the forward all-gathers it into a global
    scratch buffer (get_global_memory_buffer, not saved) and backward gathers it again. So a
    linear after an SP region keeps s/t of its input, not s.
  * megatron/core/tensor_parallel/mappings.py: copy_to / reduce_from_tensor_model_parallel_region
    (identity / all-reduce), scatter_to / gather_from / reduce_scatter_to_sequence_parallel_region:
    none of their Functions saves a tensor. ColumnParallelLinear skips copy_to_... altogether
    when it all-reduces the input gradient asynchronously (the default), so it is not modeled.
  * layers.py, VocabParallelEmbedding.forward (tp > 1): masked_input = input.clone() - start;
    masked_input[input_mask] = 0; F.embedding(masked_input, weight) (saves masked_input, int64);
    output_parallel[input_mask, :] = 0.0 (index_put_: saves the bool input_mask). With tp = 1
    F.embedding saves the input ids themselves and nothing is masked.
  * cross_entropy.py, _VocabParallelCrossEntropy.forward: saves (exp_logits, target_mask,
    masked_target_1d): the fp32 softmax over the rank's V/t logits, a bool mask and the int64
    local targets, one per token (s/cp · b).
  * Context parallelism (ring attention over flash kernels, TransformerEngine
    AttnFuncWithCPAndKVP2P): each rank holds s/cp tokens (two load-balanced chunks of s/(2cp));
    the KV blocks received from the other ranks are used and dropped. Emulated as the spec states
    it (activation-rules.md, actmem's CP note): the kernel saves the local q, k, v, the local
    output and the fp32 logsumexp (b, a/t, s/cp). TE itself saves a packed kv communication
    buffer instead of k and v (see EXPECTED.md, "uncertain").

Per-rank shapes: heads a/t, KV heads kv/t (kv >= t) or one replicated KV head (kv < t, as actmem
assumes; Megatron-LM itself asserts kv % t == 0), FFN f/t, vocabulary ceil(V/t) (Megatron pads
the vocabulary to a multiple of t; here the partition is ceil(V/t)). Activation layout (s, b, ...)
as Megatron. Sequence: s_loc = s/cp on the rank; the residual stream is s_loc/t under SP.
"""
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import emulated_ops as ops
import models
from models import region


@dataclasses.dataclass
class ParallelConfig:
    tp: int = 1
    sp: bool = False
    cp: int = 1


def rank_shapes(cfg: models.ModelConfig, par: ParallelConfig):
    """Per-rank heads, KV heads, FFN, vocabulary partition."""
    t = par.tp
    kv_r = cfg.kv_heads // t if cfg.kv_heads >= t else 1
    return cfg.heads // t, kv_r, cfg.ffn // t, -(-cfg.vocab // t)


# ---------------------------------------------------------------------------------------------
# collectives and parallel linears (nothing saved by the collectives)


def _gather_seq(x, tp):
    """All-gather along the first (sequence) dim: the other ranks' shards are emulated by copies."""
    return torch.cat([x] * tp, dim=0) if tp > 1 else x


class ParallelLinearFn(torch.autograd.Function):
    """Megatron-LM LinearWithGradAccumulationAndAsyncCommunication (tensor_parallel/layers.py):
    ctx.save_for_backward(input, weight) with `input` the rank's own (s/t shard under SP); the
    all-gathered total_input lives in a scratch buffer and is regathered in backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, sequence_parallel, tp):
        with torch.no_grad():
            total = _gather_seq(x, tp) if sequence_parallel else x
            out = torch.matmul(total, weight.t())
            if bias is not None:
                out = out + bias
        ctx.sequence_parallel, ctx.tp, ctx.has_bias = sequence_parallel, tp, bias is not None
        ctx.save_for_backward(x, weight)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        total = _gather_seq(x, ctx.tp) if ctx.sequence_parallel else x
        grad_input = grad.matmul(weight)
        if ctx.sequence_parallel:  # reduce-scatter of the input gradient
            grad_input = grad_input.view(ctx.tp, x.shape[0], *grad_input.shape[1:]).sum(0)
        grad_weight = grad.reshape(-1, grad.shape[-1]).t().matmul(total.reshape(-1, total.shape[-1]))
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None


class ReduceFromTP(torch.autograd.Function):
    """mappings.py _ReduceFromModelParallelRegion: all-reduce in forward (in place), identity in
    backward. Saves nothing."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()  # the sum over ranks; a new tensor stands in for the in-place all-reduce

    @staticmethod
    def backward(ctx, grad):
        return grad


class ReduceScatterToSP(torch.autograd.Function):
    """mappings.py _ReduceScatterToSequenceParallelRegion: reduce-scatter along s in forward,
    all-gather in backward. Saves nothing."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x.view(tp, x.shape[0] // tp, *x.shape[1:]).sum(0)

    @staticmethod
    def backward(ctx, grad):
        return _gather_seq(grad, ctx.tp), None


class ScatterToSP(torch.autograd.Function):
    """mappings.py _ScatterToSequenceParallelRegion: this rank's s/t chunk in forward (a view,
    input_list[rank].contiguous()), all-gather in backward. Saves nothing."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp, ctx.n = tp, x.shape[0]
        return x[: x.shape[0] // tp].contiguous()

    @staticmethod
    def backward(ctx, grad):
        return _gather_seq(grad, ctx.tp), None


def column_linear(x, weight, bias, par):
    return ParallelLinearFn.apply(x, weight, bias, par.sp and par.tp > 1, par.tp)


def row_linear(x, weight, par):
    """RowParallelLinear: the linear saves its (s, f/t or a·d/t) input; then all-reduce, or
    reduce-scatter to s/t under SP. The bias is added after the reduction (skip_bias_add, in
    bias-dropout-add)."""
    out = ParallelLinearFn.apply(x, weight, None, False, par.tp)
    if par.tp == 1:
        return out
    return ReduceScatterToSP.apply(out, par.tp) if par.sp else ReduceFromTP.apply(out)


class RingFlashAttentionFn(torch.autograd.Function):
    """One CP rank of ring attention with flash kernels: the rank's q, k, v cover s/cp tokens;
    the cp − 1 KV blocks received around the ring are used and dropped (emulated by copies of the
    local block, not saved). Saves the local q, k, v (as passed: views keep their storage), the
    output and the fp32 logsumexp (b, a, s/cp). Layout sbhd."""

    @staticmethod
    def forward(ctx, q, k, v, cp):
        perm = (1, 2, 0, 3)
        with torch.no_grad():
            kk, vv = torch.cat([k] * cp, dim=0), torch.cat([v] * cp, dim=0)
            out, lse = ops._attention_math(q.permute(perm), kk.permute(perm), vv.permute(perm), causal=False)
            out = out.permute(2, 0, 1, 3).contiguous()
        ctx.cp = cp
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, _, _ = ctx.saved_tensors
        perm = (1, 2, 0, 3)
        with torch.enable_grad():
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            kf, vf = torch.cat([kk] * ctx.cp, dim=0), torch.cat([vv] * ctx.cp, dim=0)
            o, _ = ops._attention_math(qq.permute(perm), kf.permute(perm), vf.permute(perm), causal=False)
            gq, gk, gv = torch.autograd.grad(o.permute(2, 0, 1, 3), (qq, kk, vv), grad)
        return gq, gk, gv, None


class VocabParallelCrossEntropyFn(torch.autograd.Function):
    """Megatron-LM tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy on one rank:
    logits (s, b, V/t) upcast to fp32 (in place from then on), target_mask = target outside the
    rank's vocabulary range, masked_target = target − start (0 where masked);
    ctx.save_for_backward(exp_logits, target_mask, masked_target_1d). Returns per-token losses.
    The max / sum all-reduces over ranks are identities here."""

    @staticmethod
    def forward(ctx, logits, target, vocab_start):
        with torch.no_grad():
            lf = logits.float()
            lf -= lf.max(dim=-1)[0].unsqueeze(-1)
            vocab_end = vocab_start + lf.shape[-1]
            target_mask = (target < vocab_start) | (target >= vocab_end)
            masked_target = target.clone() - vocab_start
            masked_target[target_mask] = 0
            masked_target_1d = masked_target.view(-1)
            lf2 = lf.view(-1, lf.shape[-1])
            predicted = lf2[torch.arange(lf2.shape[0]), masked_target_1d].clone().view_as(target)
            predicted[target_mask] = 0.0
            exp_logits = lf
            torch.exp(lf, out=exp_logits)
            sum_exp = exp_logits.sum(dim=-1)
            loss = torch.log(sum_exp) - predicted
            exp_logits.div_(sum_exp.unsqueeze(-1))
        ctx.logits_dtype = logits.dtype
        ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        g = softmax.clone()
        g2 = g.view(-1, g.shape[-1])
        g2[torch.arange(g2.shape[0]), masked_target_1d] -= 1.0 - target_mask.view(-1).float()
        return (g * grad.unsqueeze(-1)).to(ctx.logits_dtype), None, None


# ---------------------------------------------------------------------------------------------
# the rank's model


class MegatronRankLayer(models.MegatronLayer):
    """models.MegatronLayer built with the rank's shard sizes (a/t heads, kv_r KV heads, f/t), and
    the forward rewritten around the parallel linears and collectives."""

    def __init__(self, cfg: models.ModelConfig, run: models.RunConfig, par: ParallelConfig):
        a_r, kv_r, f_r, _ = rank_shapes(cfg, par)
        super().__init__(dataclasses.replace(cfg, heads=a_r, kv_heads=kv_r, ffn=f_r), run)
        self.par = par

    def core_attention(self, q, k, v):
        if self.par.cp > 1:
            return RingFlashAttentionFn.apply(q, k, v, self.par.cp)
        return super().core_attention(q, k, v)

    def forward(self, x, rope):
        cfg, run, par = self.cfg, self.run, self.par
        b = x.shape[1]
        a, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim  # per rank
        groups = a // kv
        qkv = column_linear(self.norm(x, 1), self.qkv.weight, self.qkv.bias, par)
        s = qkv.shape[0]  # s/cp: the whole local sequence, gathered under SP
        qkv = qkv.view(s, b, kv, (groups + 2) * d)
        q, k, v = torch.split(qkv, [groups * d, d, d], dim=3)
        q = q.reshape(s, b, a, d)
        if rope is not None:  # rotary_pos_emb: fp32 freqs (s/cp, 1, 1, d)
            rope = (rope.cos(), rope.sin())
            q = ops.FusedRoPEFn.apply(q, *rope)
            k = ops.FusedRoPEFn.apply(k, *rope)
        if run.recompute == "selective":
            context = checkpoint(self.core_attention, q, k, v, use_reentrant=True)
        else:
            context = self.core_attention(q, k, v)
        out = row_linear(context.view(s, b, a * d), self.proj.weight, par)
        if self.proj.bias is not None:
            out = out + self.proj.bias
        x = x + ops.dropout(out, run.hidden_dropout)
        y = self.norm(x, 2)
        if cfg.family == "gpt2":
            y = ops.BiasGeLUFn.apply(column_linear(y, self.fc1.weight, None, par), self.fc1_bias)
        else:
            y = ops.SwiGLUFn.apply(column_linear(y, self.fc1.weight, None, par))
        y = row_linear(y, self.fc2.weight, par)
        if self.fc2.bias is not None:
            y = y + self.fc2.bias
        return x + ops.dropout(y, run.hidden_dropout)


class MegatronRankModel(nn.Module):
    """Embedding (VocabParallelEmbedding [+ learned positions]), layers, final norm, column-
    parallel output layer, vocab-parallel cross entropy: rank 0 of the TP group, one CP rank."""

    def __init__(self, cfg: models.ModelConfig, run: models.RunConfig, par: ParallelConfig):
        super().__init__()
        if cfg.family == "mixtral":
            raise ValueError("megatron style MoE is not implemented in the reference models")
        self.cfg, self.run, self.par = cfg, run, par
        _, _, _, v_r = rank_shapes(cfg, par)
        self.vocab_start = 0  # rank 0's partition [0, V/t)
        self.embed = nn.Embedding(v_r, cfg.hidden)
        if cfg.family == "gpt2":
            self.pos_embed = nn.Embedding(cfg.max_positions, cfg.hidden)  # not vocab-parallel
            self.final_b = nn.Parameter(torch.zeros(cfg.hidden))
        self.layers = nn.ModuleList(MegatronRankLayer(cfg, run, par) for _ in range(cfg.layers))
        self.final_w = nn.Parameter(torch.ones(cfg.hidden))
        if not cfg.tie_embeddings:
            self.output_layer = models._linear(cfg.hidden, v_r, False)

    def vocab_parallel_embedding(self, input_ids, reduce_scatter):
        """layers.py VocabParallelEmbedding.forward: then all-reduce, or (reduce_scatter_embeddings)
        transpose to [s, b, h] and reduce-scatter to s/t."""
        if self.par.tp == 1:
            return F.embedding(input_ids, self.embed.weight)  # saves input_ids
        start, end = self.vocab_start, self.vocab_start + self.embed.weight.shape[0]
        input_mask = (input_ids < start) | (input_ids >= end)
        masked_input = input_ids.clone() - start
        masked_input[input_mask] = 0
        out = F.embedding(masked_input, self.embed.weight)  # saves masked_input (int64)
        out[input_mask, :] = 0.0  # index_put_ saves input_mask (bool)
        if reduce_scatter:
            return ReduceScatterToSP.apply(out.transpose(0, 1).contiguous(), self.par.tp)
        return ReduceFromTP.apply(out)

    def forward(self, input_ids, labels):
        """input_ids, labels: (b, s/cp), this CP rank's tokens."""
        cfg, run, par = self.cfg, self.run, self.par
        b, s = input_ids.shape
        sp = par.sp and par.tp > 1
        # LanguageModelEmbedding (megatron/core/models/common/embeddings/language_model_embedding.py):
        # reduce_scatter_embeddings = no position embeddings and SP; otherwise all-reduce, add the
        # positions, transpose, scatter to s/t, and clone (clone_scatter_output_in_embedding, default
        # True: the scatter's output is a view that would keep the whole s·b·h alive).
        reduce_scatter = sp and cfg.family != "gpt2"
        with region("embedding"):
            x = self.vocab_parallel_embedding(input_ids, reduce_scatter)
            if cfg.family == "gpt2":
                position_ids = torch.arange(s).repeat(b, 1)  # (b, s/cp) on a CP rank, saved
                x = x + self.pos_embed(position_ids)
                rope = None
            else:
                rope = models.megatron_rotary_freqs(s, cfg.head_dim)  # this rank's positions
            if not reduce_scatter:
                x = x.transpose(0, 1).contiguous()  # [s, b, h]
                if sp:
                    x = ScatterToSP.apply(x, par.tp).clone()  # s/t of the residual stream from here on
            x = ops.dropout(x, run.hidden_dropout)
        for i, layer in enumerate(self.layers):
            with region(f"layer {i}"):
                if run.recompute == "full":
                    x = checkpoint(layer, x, rope, use_reentrant=True)  # rotary_pos_emb positional
                else:
                    x = layer(x, rope)
        with region("head"):
            if cfg.family == "gpt2":
                x = ops.LayerNormFn.apply(x, self.final_w, self.final_b, cfg.eps)
            else:
                x = ops.RMSNormFn.apply(x, self.final_w, cfg.eps)
            weight = self.embed.weight if cfg.tie_embeddings else self.output_layer.weight
            logits = column_linear(x, weight, None, par)  # (s/cp, b, V/t), input kept s/t under SP
            losses = VocabParallelCrossEntropyFn.apply(logits, labels.transpose(0, 1).contiguous(), self.vocab_start)
            return losses.sum() / losses.numel()


def build(cfg: models.ModelConfig, run: models.RunConfig, par: ParallelConfig, seed=0):
    torch.manual_seed(seed)
    return MegatronRankModel(cfg, run, par).to(run.torch_dtype).train()


def self_check():
    """Gradients of the emulated Functions against plain torch (single rank semantics)."""
    torch.manual_seed(0)
    x = torch.randn(6, 2, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)
    par1 = ParallelConfig(tp=1)
    got = torch.autograd.grad(column_linear(x, w, bias, par1).square().sum(), (x, w, bias))
    ref = torch.autograd.grad(F.linear(x, w, bias).square().sum(), (x, w, bias))
    assert all(torch.allclose(a, r) for a, r in zip(got, ref)), "ParallelLinearFn"
    logits = torch.randn(6, 2, 7, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 7, (6, 2))
    got = torch.autograd.grad(VocabParallelCrossEntropyFn.apply(logits, target, 0).sum(), logits)[0]
    ref = torch.autograd.grad(F.cross_entropy(logits.view(-1, 7), target.view(-1), reduction="sum"), logits)[0]
    assert torch.allclose(got, ref), "VocabParallelCrossEntropyFn"
    q, k, v = (torch.randn(4, 2, h, 8, requires_grad=True) for h in (3, 1, 1))
    got = torch.autograd.grad(RingFlashAttentionFn.apply(q, k, v, 2).square().sum(), (q, k, v))
    perm = (1, 2, 0, 3)
    out, _ = ops._attention_math(q.permute(perm), torch.cat([k] * 2).permute(perm), torch.cat([v] * 2).permute(perm), False)
    ref = torch.autograd.grad(out.square().sum(), (q, k, v))
    assert all(torch.allclose(a, r, atol=1e-5) for a, r in zip(got, ref)), "RingFlashAttentionFn"
    print("parallel_models self_check ok")


if __name__ == "__main__":
    self_check()
