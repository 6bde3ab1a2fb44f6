"""Megatron-core multi-latent attention (DeepSeek-V3 style) for the reference models, (s, b, ...)
layout, with a dense MLP (every layer dense: first_k_dense_replace = num_hidden_layers).

Followed line for line (Megatron-LM main @d98e8a64ddf3):
  megatron/core/transformer/multi_latent_attention.py
      MLASelfAttention._qkv_down_projection (l.638-664): linear_q_down_proj(h) -> q_compressed
      [s, b, q_lora_rank]; linear_kv_down_proj(h) -> kv_combined [s, b, kv_lora_rank + rope dim];
      get_query_key_value_tensors (l.666-1002): torch.split(kv_combined) -> kv_compressed, k_pos_emb
      (views); q_layernorm(q_compressed), kv_layernorm(kv_compressed) (l.779-781);
      qkv_up_proj_and_rope_apply (l.855-981): linear_q_up_proj / linear_kv_up_proj, then RoPE:
      with apply_rope_fusion (Megatron-LM's default, `--no-rope-fusion` turns it off; MLA's rope
      type yarn) fused_apply_mla_rope_for_q (RoPE in place on the q_up output: query is that
      storage) and fused_apply_mla_rope_for_kv (new key [s, b, n, dqk] and value [s, b, n, dv]);
      both kernels save only cos/sin (fusions/fused_mla_yarn_rope_apply.py l.335, l.811), the
      module's cos_cached/sin_cached buffers (yarn_rotary_pos_embedding.py l.202-206), not
      activations: here the Functions hold them as attributes and save nothing;
      recompute_up_proj (l.171-174, l.983-988, l.455-458): "mla_up_proj" in recompute_modules runs
      qkv_up_proj_and_rope_apply(q_compressed, kv_compressed, k_pos_emb, rotary_pos_emb) under
      tensor_parallel.CheckpointWithoutOutput (random.py l.748-800: no_grad, save_for_backward of
      the inputs) and, once core attention has run (and saved query, key, value),
      discard_output_and_register_recompute(core_attn_out) frees the three outputs' storages
      (random.py _discard_outputs: untyped_storage().resize_(0)); they are recomputed in backward.
  megatron/core/models/gpt/gpt_layer_specs.py
      local spec (get_gpt_layer_local_submodules, multi_latent_attention): input_layernorm and
      q/kv_layernorm separate norms (RMSNorm: WrappedTorchNorm = torch.nn.RMSNorm, backends.py
      l.118-127; saves input and fp32 rstd), the projections ColumnParallelLinear (save their
      input), Megatron's DotProductAttention (eager: bmm keeps q, k; the fused softmax its output;
      bmm probs and v);
      TE spec (get_gpt_layer_with_transformer_engine_submodules, multi_latent_attention, no
      mla_down_proj_fusion): input_layernorm TENorm, linear_q_down_proj / linear_kv_down_proj
      TELinear (duplicated), linear_q_up_proj / linear_kv_up_proj TELayerNormColumnParallelLinear
      with qk_layernorm (the q/kv norm fused into the up projection; q_layernorm IdentityOp), TE
      DotProductAttention (FusedAttention), dense MLP with fc1 TELayerNormColumnParallelLinear.
      Without q LoRA, transformer/mla_qk_norm_config.py _resolve_mla_qk_layernorm makes
      linear_q_proj the fused norm + linear too (a norm over h on the input_layernorm output); the
      local spec then refuses a q_layernorm (_reject_common_spec_conflicts): local, no q LoRA,
      is modeled without a q norm here (as HF's q_proj).
  megatron/core/models/gpt/gpt_model.py l.183: no model-level rotary_pos_emb with MLA (the
      attention module owns its RoPE), so none is passed into (or kept by) a checkpointed layer.
"""
import dataclasses
import math

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import emulated_ops as ops
import models


def mla_cos_sin(seq_len, rope_dim, dtype, theta=10000.0):
    """cos_cached / sin_cached (s, 1, 1, dr) in the activation dtype (mscale 1)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float32) / rope_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)[:, None, None, :]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rope(t, cos, sin):
    return t * cos + ops._rotate_half(t) * sin


def _rope_q(q, cos, sin, dn):
    return torch.cat((q[..., :dn], _rope(q[..., dn:], cos, sin)), dim=-1)


def _rope_kv(kv, k_pe, cos, sin, dn):
    s, b, a, _ = kv.shape
    k_rot = _rope(k_pe.unsqueeze(2), cos, sin).expand(s, b, a, -1)
    return torch.cat((kv[..., :dn], k_rot), dim=-1), kv[..., dn:].contiguous()


class FusedMLARoPEQFn(torch.autograd.Function):
    """fused_apply_mla_rope_for_q (_FusedMLARoPEInplace): RoPE on the trailing rope dims of q,
    saves only cos/sin (buffers). The kernel works in place on the q_up output; here the result
    is a new tensor and the q_up output dies: the same bytes either way (one [s, b, n, dqk])."""

    @staticmethod
    def forward(ctx, q, cos, sin, dn):
        ctx.cos, ctx.sin, ctx.dn, ctx.shape = cos, sin, dn, q.shape
        with torch.no_grad():
            return _rope_q(q, cos, sin, dn)

    @staticmethod
    def backward(ctx, grad):
        # RoPE is linear in q: its gradient needs no saved q (the kernel's backward reads cos/sin)
        with torch.enable_grad():
            z = torch.zeros(ctx.shape, dtype=grad.dtype, requires_grad=True)
            (g,) = torch.autograd.grad(_rope_q(z, ctx.cos, ctx.sin, ctx.dn), z, grad)
        return g, None, None, None


class FusedMLARoPEKVFn(torch.autograd.Function):
    """fused_apply_mla_rope_for_kv (_FusedMLARoPEKVSplit): key = [k_nope | rope(k_pos_emb) at every
    head] and value, both new tensors (o_key, o_value = kv.new_empty(...)); saves only cos/sin."""

    @staticmethod
    def forward(ctx, kv, k_pe, cos, sin, dn):
        ctx.cos, ctx.sin, ctx.dn, ctx.shapes = cos, sin, dn, (kv.shape, k_pe.shape)
        with torch.no_grad():
            return _rope_kv(kv, k_pe, cos, sin, dn)

    @staticmethod
    def backward(ctx, gk, gv):
        with torch.enable_grad():
            z = [torch.zeros(s, dtype=gk.dtype, requires_grad=True) for s in ctx.shapes]
            key, value = _rope_kv(*z[:1], z[1], ctx.cos, ctx.sin, ctx.dn)
            g_kv, g_pe = torch.autograd.grad((key, value), z, (gk, gv))
        return g_kv, g_pe, None, None, None


class _CkptFn(torch.autograd.Function):
    """CheckpointWithoutOutputFunction (random.py l.748-800): runs the function under no_grad and
    save_for_backward()s its inputs; backward recomputes with grad and backpropagates."""

    @staticmethod
    def forward(ctx, run_fn, holder, *args):
        with torch.no_grad():
            outs = run_fn(*args)
        ctx.run_fn = run_fn
        ctx.save_for_backward(*args)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        with torch.enable_grad():
            args = [t.detach().requires_grad_() for t in ctx.saved_tensors]
            torch.autograd.backward(ctx.run_fn(*args), grads)
        return (None, None, *[a.grad for a in args])


class CheckpointWithoutOutput:
    """tensor_parallel.CheckpointWithoutOutput with several outputs (query, key, value):
    discard_output_and_register_recompute frees every output's storage and restores it
    (recomputed) when the hook tensor's gradient arrives, before core attention's backward."""

    def checkpoint(self, fn, *args):
        self.fn, self.args = fn, args
        self.outs = _CkptFn.apply(fn, None, *args)
        return self.outs

    def discard_output_and_register_recompute(self, hook_tensor):
        sizes = [o.storage().size() for o in self.outs]
        for o in self.outs:
            o.storage().resize_(0)

        def restore(grad):
            with torch.no_grad():
                again = self.fn(*self.args)
            for o, r, n in zip(self.outs, again, sizes):
                o.storage().resize_(n)
                o.storage().copy_(r.storage())
            return grad

        if hook_tensor.requires_grad:
            hook_tensor.register_hook(restore)


def local_core_attention(q, k, v, attention_dropout):
    """Megatron DotProductAttention (local spec): bmm on [s, b·n, d] views (kept, no copies), the
    fused scale-mask-softmax keeps its output, bmm(probs, v); q/k head dim dqk, v's dv."""
    s, b, a, dqk = q.shape
    dv = v.shape[-1]
    qb = q.reshape(s, b * a, dqk).transpose(0, 1)
    kb = k.reshape(s, b * a, dqk).transpose(0, 1).transpose(1, 2)
    vb = v.reshape(s, b * a, dv).transpose(0, 1)
    probs = ops.ScaleMaskSoftmaxFn.apply(torch.bmm(qb, kb), 1.0 / math.sqrt(dqk))
    probs = ops.dropout(probs, attention_dropout)
    context = torch.bmm(probs, vb)  # (b·n, s, dv)
    return context.view(b, a, s, dv).permute(2, 0, 1, 3).contiguous().view(s, b, a * dv)


class MegatronMLALayer(nn.Module):
    """A dense GPT layer with MLASelfAttention, local or TE spec. `modules`: recompute_modules
    (used with run.recompute == "selective": core_attn, mla_up_proj, mlp)."""

    def __init__(self, cfg: models.ModelConfig, run: models.RunConfig, impl="local", modules=("core_attn",)):
        super().__init__()
        self.cfg, self.run, self.impl, self.modules = cfg, run, impl, tuple(modules)
        h, a = cfg.hidden, cfg.heads
        dqk, dv = cfg.qk_nope_dim + cfg.qk_rope_dim, cfg.v_head_dim
        f = cfg.dense_ffn or cfg.ffn
        self.norm1_w, self.norm2_w = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
        if cfg.q_lora_rank:
            self.q_down = models._linear(h, cfg.q_lora_rank, False)
            self.q_norm_w = nn.Parameter(torch.ones(cfg.q_lora_rank))
            self.q_up = models._linear(cfg.q_lora_rank, a * dqk, False)
        else:
            self.q_proj = models._linear(h, a * dqk, False)
            if impl != "local":  # TE, no q LoRA: the q norm is fused into linear_q_proj (over h)
                self.q_norm_w = nn.Parameter(torch.ones(h))
        self.kv_down = models._linear(h, cfg.kv_lora_rank + cfg.qk_rope_dim, False)
        self.kv_norm_w = nn.Parameter(torch.ones(cfg.kv_lora_rank))
        self.kv_up = models._linear(cfg.kv_lora_rank, a * (cfg.qk_nope_dim + dv), False)
        self.proj = models._linear(a * dv, h, False)
        self.fc1 = models._linear(h, 2 * f, False)  # fused [gate | up]
        self.fc2 = models._linear(f, h, False)

    def selective(self, module):
        return self.run.recompute == "selective" and module in self.modules

    # -- the pieces that differ between the specs

    def _linear(self, x, layer):
        if self.impl == "local":
            return layer(x)
        import te_validation as te

        return te.TELinearFn.apply(x, layer.weight, None, False, False)

    def _norm_linear(self, x, w, layer):
        """q/kv layernorm + up projection: local: a norm module then a linear; TE:
        TELayerNormColumnParallelLinear (input, ln_out, rsigma)."""
        if self.impl == "local":
            return layer(ops.RMSNormFn.apply(x, w, self.cfg.eps))
        import te_validation as te

        return te.TELayerNormLinearFn.apply(x, w, None, layer.weight, None, self.cfg.eps, True, False, 1)

    def _up_proj_and_rope(self, q_c, kv_c, k_pe):
        """qkv_up_proj_and_rope_apply. Local: q_c, kv_c are the normed latents; TE: the raw ones
        (the norm is inside linear_q_up_proj / linear_kv_up_proj)."""
        cfg = self.cfg
        s, b = k_pe.shape[:2]
        a, dn = cfg.heads, cfg.qk_nope_dim
        if cfg.q_lora_rank:
            q = self._norm_linear(q_c, self.q_norm_w, self.q_up) if self.impl != "local" else self.q_up(q_c)
        elif self.impl == "local":
            q = self.q_proj(q_c)
        else:
            # mla_qk_norm_config.py _resolve_mla_qk_layernorm: without q LoRA, qk_layernorm makes
            # linear_q_proj a fused norm + linear (TELayerNormColumnParallelLinear) over h
            q = self._norm_linear(q_c, self.q_norm_w, self.q_proj)
        if self.impl == "local":
            kv = self.kv_up(kv_c)
        else:
            kv = self._norm_linear(kv_c, self.kv_norm_w, self.kv_up)
        cos, sin = self.cos_sin
        query = FusedMLARoPEQFn.apply(q.view(s, b, a, -1), cos, sin, dn)
        key, value = FusedMLARoPEKVFn.apply(kv.view(s, b, a, -1), k_pe, cos, sin, dn)
        return query, key, value

    def _core(self, q, k, v):
        if self.impl != "local":
            import te_validation as te

            return te.te_dot_product_attention(q, k, v)
        if self.run.attention == "eager":
            return local_core_attention(q, k, v, self.run.attention_dropout)
        s, b = q.shape[:2]
        return ops.FlashAttentionFn.apply(q, k, v, "sbhd").view(s, b, -1)

    def _mlp(self, y):
        if self.impl == "local":
            return self.fc2(ops.SwiGLUFn.apply(self.fc1(y)))
        import te_validation as te

        fc1 = te.TELayerNormLinearFn.apply(y, self.norm2_w, None, self.fc1.weight, None, self.cfg.eps, True, False, 1)
        return te.TELinearFn.apply(ops.SwiGLUFn.apply(fc1), self.fc2.weight, None, False, False)

    def forward(self, x, rope=None):
        cfg, run = self.cfg, self.run
        s, b, _ = x.shape
        self.cos_sin = mla_cos_sin(s, cfg.qk_rope_dim, x.dtype)  # the module's cached buffers
        n1 = ops.RMSNormFn.apply(x, self.norm1_w, cfg.eps)  # input_layernorm (TENorm under TE)
        # _qkv_down_projection
        q_c = self._linear(n1, self.q_down) if cfg.q_lora_rank else n1
        kv_comb = self._linear(n1, self.kv_down)
        kv_c, k_pe = torch.split(kv_comb, [cfg.kv_lora_rank, cfg.qk_rope_dim], dim=-1)
        if self.impl == "local":  # q_layernorm / kv_layernorm modules (TE: fused into the up projections)
            if cfg.q_lora_rank:
                q_c = ops.RMSNormFn.apply(q_c, self.q_norm_w, cfg.eps)
            kv_c = ops.RMSNormFn.apply(kv_c, self.kv_norm_w, cfg.eps)
        ckpt = None
        if self.selective("mla_up_proj"):
            ckpt = CheckpointWithoutOutput()
            q, k, v = ckpt.checkpoint(self._up_proj_and_rope, q_c, kv_c, k_pe)
        else:
            q, k, v = self._up_proj_and_rope(q_c, kv_c, k_pe)
        if self.selective("core_attn"):
            context = checkpoint(self._core, q, k, v, use_reentrant=True)
        else:
            context = self._core(q, k, v)
        if ckpt is not None:
            ckpt.discard_output_and_register_recompute(context)
        out = self._linear(context, self.proj)
        x = x + ops.dropout(out, run.hidden_dropout)
        if self.impl == "local":
            y = ops.RMSNormFn.apply(x, self.norm2_w, cfg.eps)  # pre_mlp_layernorm
            y = checkpoint(self._mlp, y, use_reentrant=True) if self.selective("mlp") else self._mlp(y)
        else:
            y = checkpoint(self._mlp, x, use_reentrant=True) if self.selective("mlp") else self._mlp(x)
        return x + ops.dropout(y, run.hidden_dropout)


class MegatronMLAFp8Layer(MegatronMLALayer):
    """The TE spec's MLA layer under fp8 (--fp8 delayed|tensorwise, per-tensor scaling), the
    fp8-* cases: every TE linear keeps its input as the fp8 columnwise copy + scale_inv
    (te_validation.TELinearFn / TELayerNormLinearFn with fp8: TE linear.py l.606-617,
    layernorm_linear.py l.478-487), except where Megatron sets set_save_original_input:
      linear_proj for recipes other than delayed (multi_latent_attention.py l.235-251);
      linear_q_down_proj / linear_kv_down_proj under recompute_modules layernorm
      (transformer_layer.py l.476-479 -> multi_latent_attention.py l.1114-1118; delayed is refused
      then, transformer_config.py l.2000-2005).
    recompute_modules layernorm (input_layernorm a TENorm of its own under MLA):
    CheckpointWithoutOutput around it, its output freed once self-attention ran
    (transformer_layer.py l.712-720, l.683-688). Under mla_up_proj the up projections run in the
    checkpoint's no_grad and keep nothing, fp8 or not."""

    def __init__(self, cfg, run, recipe, modules=("core_attn",)):
        super().__init__(cfg, run, "transformer_engine", modules)
        self.recipe = recipe

    def _linear(self, x, layer):
        import te_validation as te

        if layer is self.proj:
            save_original = self.recipe != "delayed"
        else:
            save_original = self.selective("layernorm")
        return te.TELinearFn.apply(x, layer.weight, None, True, save_original)

    def _norm_linear(self, x, w, layer):
        import te_validation as te

        return te.TELayerNormLinearFn.apply(x, w, None, layer.weight, None, self.cfg.eps, True, True, 1)

    def _mlp(self, y):
        import te_validation as te

        fc1 = te.TELayerNormLinearFn.apply(y, self.norm2_w, None, self.fc1.weight, None, self.cfg.eps, True, True, 1)
        return te.TELinearFn.apply(ops.SwiGLUFn.apply(fc1), self.fc2.weight, None, True, False)

    def forward(self, x, rope=None):
        if not self.selective("layernorm"):
            return super().forward(x, rope)
        # MegatronMLALayer.forward (TE branch) with input_layernorm checkpointed
        cfg, run = self.cfg, self.run
        s, b, _ = x.shape
        self.cos_sin = mla_cos_sin(s, cfg.qk_rope_dim, x.dtype)
        import te_validation as te

        ln_ckpt = te.CheckpointWithoutOutput()  # one output (this module's class holds q, k, v)
        n1 = ln_ckpt.checkpoint(lambda t: ops.RMSNormFn.apply(t, self.norm1_w, cfg.eps), x)
        q_c = self._linear(n1, self.q_down) if cfg.q_lora_rank else n1
        kv_comb = self._linear(n1, self.kv_down)
        kv_c, k_pe = torch.split(kv_comb, [cfg.kv_lora_rank, cfg.qk_rope_dim], dim=-1)
        ckpt = None
        if self.selective("mla_up_proj"):
            ckpt = CheckpointWithoutOutput()
            q, k, v = ckpt.checkpoint(self._up_proj_and_rope, q_c, kv_c, k_pe)
        else:
            q, k, v = self._up_proj_and_rope(q_c, kv_c, k_pe)
        if self.selective("core_attn"):
            context = checkpoint(self._core, q, k, v, use_reentrant=True)
        else:
            context = self._core(q, k, v)
        if ckpt is not None:
            ckpt.discard_output_and_register_recompute(context)
        out = self._linear(context, self.proj)
        ln_ckpt.discard_output_and_register_recompute(out)
        x = x + ops.dropout(out, run.hidden_dropout)
        y = checkpoint(self._mlp, x, use_reentrant=True) if self.selective("mlp") else self._mlp(x)
        return x + ops.dropout(y, run.hidden_dropout)


# ---------------------------------------------------------------------------------------------
# One tensor / sequence parallel rank (parallel_models.py's collectives and parallel linears),
# local spec only: MLASelfAttention._qkv_down_projection with ColumnParallelLinear down projections
# (gather_output False), then get_query_key_value_tensors (l.746-764):
#   q_compressed [s, b, rq/t] -> gather_from_tensor_model_parallel_region (all-gather along the last
#   dim: a new [s, b, rq]; saves nothing) -> under SP scatter_to_sequence_parallel_region
#   (mappings.py l.60-81: input_[a:b].contiguous(), a VIEW of the gathered contiguous tensor);
#   kv_combined [s, b, (rkv+dr)/t] -> gathered [s, b, rkv+dr] -> split; under SP kv_compressed
#   (a strided view) is scattered: its slice .contiguous() is a copy [s/t, b, rkv].


class _GatherLastDim(torch.autograd.Function):
    """_GatherFromModelParallelRegion: all-gather along the last dim (the other ranks' parts
    emulated by copies); backward keeps this rank's slice. Saves nothing."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp, ctx.n = tp, x.shape[-1]
        return torch.cat([x] * tp, dim=-1) if tp > 1 else x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad[..., : ctx.n].contiguous(), None


class MegatronMLARankLayer(MegatronMLALayer):
    """MegatronMLALayer (local spec) on one TP rank: heads a/t, dense ffn f/t, the down
    projections' outputs rq/t and (rkv+dr)/t before the gather."""

    def __init__(self, cfg, run, par, modules=("core_attn",)):
        import parallel_models as pm

        t = par.tp
        f = cfg.dense_ffn or cfg.ffn
        rank_cfg = dataclasses.replace(cfg, heads=cfg.heads // t, kv_heads=cfg.heads // t, dense_ffn=f // t)
        super().__init__(rank_cfg, run, "local", modules)
        self.par, self.pm = par, pm
        h = cfg.hidden
        if cfg.q_lora_rank:
            self.q_down = models._linear(h, cfg.q_lora_rank // t, False)
        self.kv_down = models._linear(h, (cfg.kv_lora_rank + cfg.qk_rope_dim) // t, False)

    def forward(self, x, rope=None):
        cfg, run, par, pm = self.cfg, self.run, self.par, self.pm
        sp = par.sp and par.tp > 1
        col = lambda t, layer: pm.column_linear(t, layer.weight, None, par)  # noqa: E731
        n1 = ops.RMSNormFn.apply(x, self.norm1_w, cfg.eps)
        if cfg.q_lora_rank:
            q_c = _GatherLastDim.apply(col(n1, self.q_down), par.tp)
            if sp:
                q_c = pm.ScatterToSP.apply(q_c, par.tp)  # a view of the gathered storage
            q_c = ops.RMSNormFn.apply(q_c, self.q_norm_w, cfg.eps)
        else:
            q_c = n1
        kv_comb = _GatherLastDim.apply(col(n1, self.kv_down), par.tp)
        kv_c, k_pe = torch.split(kv_comb, [cfg.kv_lora_rank, cfg.qk_rope_dim], dim=-1)
        if sp:
            kv_c = pm.ScatterToSP.apply(kv_c, par.tp)  # a copy: kv_c is strided
        kv_c = ops.RMSNormFn.apply(kv_c, self.kv_norm_w, cfg.eps)
        s, b = k_pe.shape[:2]
        self.cos_sin = mla_cos_sin(s, cfg.qk_rope_dim, x.dtype)

        def up_proj_and_rope(q_c, kv_c, k_pe):  # qkv_up_proj_and_rope_apply on the rank
            q = col(q_c, self.q_up if cfg.q_lora_rank else self.q_proj)
            kv = col(kv_c, self.kv_up)
            cos, sin = self.cos_sin
            q = FusedMLARoPEQFn.apply(q.view(s, b, cfg.heads, -1), cos, sin, cfg.qk_nope_dim)
            k, v = FusedMLARoPEKVFn.apply(kv.view(s, b, cfg.heads, -1), k_pe, cos, sin, cfg.qk_nope_dim)
            return q, k, v

        ckpt = None
        if self.selective("mla_up_proj"):
            # recompute_up_proj (l.983-988): the checkpoint saves q_compressed, kv_compressed and
            # k_pos_emb, under SP a view of the gathered kv_combined: that whole storage is kept
            ckpt = CheckpointWithoutOutput()
            q, k, v = ckpt.checkpoint(up_proj_and_rope, q_c, kv_c, k_pe)
        else:
            q, k, v = up_proj_and_rope(q_c, kv_c, k_pe)
        if self.selective("core_attn"):
            context = checkpoint(self._core, q, k, v, use_reentrant=True)
        else:
            context = self._core(q, k, v)
        if ckpt is not None:
            ckpt.discard_output_and_register_recompute(context)
        out = pm.row_linear(context, self.proj.weight, par)
        x = x + ops.dropout(out, run.hidden_dropout)
        y = ops.RMSNormFn.apply(x, self.norm2_w, cfg.eps)
        y = pm.row_linear(ops.SwiGLUFn.apply(col(y, self.fc1)), self.fc2.weight, par)
        return x + ops.dropout(y, run.hidden_dropout)


class MegatronMLACPLayer(MegatronMLALayer):
    """MegatronMLALayer (TE spec) on one context-parallel rank of `cp` (tp 1), in
    parallel_models.MegatronRankModel: the layer sees s/cp tokens; the fused MLA RoPE takes
    cp_rank/cp_size for its positions (multi_latent_attention.py l.884-904; saves cos/sin only);
    TE DotProductAttention runs AttnFuncWithCPAndKVP2P (te_validation.CPAttnP2PFn, which keeps q,
    the last received k|v ring buffer with v at its own head dim (TE context_parallel.py l.1689
    o_shape = q.shape[:-1] + v.shape[-1:], l.1690), out [s/cp, b, n, dv], softmax_lse and cp
    rng_states). Megatron's local DotProductAttention refuses CP (dot_product_attention.py l.58)."""

    def __init__(self, cfg, run, modules=("core_attn",), cp=2):
        super().__init__(cfg, run, "transformer_engine", modules)
        self.cp = cp

    def _core(self, q, k, v):
        import te_validation as te

        return te.te_dot_product_attention(q, k, v, self.cp)


def mla_rope_freqs(seq_len, rope_dim, theta=10000.0):
    """The unfused path's rotary_pos_emb (YarnRotaryEmbedding.forward with mscale 1): fp32
    (s, 1, 1, dr), computed per call, needing no gradient."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float32) / rope_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return torch.cat((freqs, freqs), dim=-1)[:, None, None, :]


def apply_rotary_pos_emb_bshd(t, freqs, mscale=1.0):
    """rope_utils.py _apply_rotary_pos_emb_bshd with mla_rotary_interleaved=True (MLA's call,
    multi_latent_attention.py l.943-962): the interleaved rope dims gathered by a cat (a copy, saves
    nothing), cos_/sin_ computed per call in t's dtype (l.143-144) and kept by the multiplies,
    _rotate_half (chunk, cat: nothing), a final cat (nothing)."""
    rot_dim = freqs.shape[-1]
    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    t = torch.cat((t[..., 0::2], t[..., 1::2]), dim=-1)
    cos_ = (torch.cos(freqs) * mscale).to(t.dtype)
    sin_ = (torch.sin(freqs) * mscale).to(t.dtype)
    t = (t * cos_) + (ops._rotate_half(t) * sin_)
    return torch.cat((t, t_pass), dim=-1)


class MegatronMLAUnfusedRopeLayer(MegatronMLALayer):
    """MegatronMLALayer with apply_rope_fusion False (`--no-rope-fusion`): qkv_up_proj_and_rope_apply's
    else branch (multi_latent_attention.py l.920-981): q split into q_no_pe and q_pos_emb, kv into
    k_no_pe and value (views), RoPE on q_pos_emb and k_pos_emb [s, b, 1, dr] by
    apply_rotary_pos_emb_bshd (each call keeps its own cos_ and sin_ (s, 1, 1, dr) in the activation
    dtype), query = cat(q_no_pe, q_pos_emb), key = cat(k_no_pe, k_pos_emb expanded to n heads),
    then query.contiguous() / key.contiguous() (already) and value.contiguous() (a copy of the
    strided split view): query, key, value the same bytes as the fused path's."""

    def _up_proj_and_rope(self, q_c, kv_c, k_pe):
        cfg = self.cfg
        s, b = k_pe.shape[:2]
        a, dn, dr, dv = cfg.heads, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
        if cfg.q_lora_rank:
            q = self._norm_linear(q_c, self.q_norm_w, self.q_up) if self.impl != "local" else self.q_up(q_c)
        elif self.impl == "local":
            q = self.q_proj(q_c)
        else:
            q = self._norm_linear(q_c, self.q_norm_w, self.q_proj)
        kv = self.kv_up(kv_c) if self.impl == "local" else self._norm_linear(kv_c, self.kv_norm_w, self.kv_up)
        q = q.view(s, b, a, dn + dr)
        kv = kv.view(s, b, a, dn + dv)
        k_pos_emb = torch.unsqueeze(k_pe, -2)
        q_no_pe, q_pos_emb = torch.split(q, [dn, dr], dim=-1)
        k_no_pe, value = torch.split(kv, [dn, dv], dim=-1)
        freqs = mla_rope_freqs(s, dr)[0:s]
        q_pos_emb = apply_rotary_pos_emb_bshd(q_pos_emb, freqs)
        k_pos_emb = apply_rotary_pos_emb_bshd(k_pos_emb, freqs)
        query = torch.cat([q_no_pe, q_pos_emb], dim=-1)
        key = torch.cat([k_no_pe, k_pos_emb.expand(-1, -1, a, -1)], dim=-1)
        return query.contiguous(), key.contiguous(), value.contiguous()
