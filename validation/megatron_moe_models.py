"""Megatron-core MoE layers for the reference models: what MoELayer (router, allgather token
dispatcher, grouped experts, shared experts) keeps for backward, on one process (EP = 1, TP = 1),
under the local and the TransformerEngine layer specs, and Megatron's MoE --recompute-modules
(moe_act, moe, shared_experts).

Followed line by line: Megatron-LM main @d98e8a64ddf3 (the mirror's HEAD), megatron/core/transformer/moe/:
  router.py         TopKRouter.forward l.845-873 (gating -> routing), Router.gating l.90-113
                    (router_gating_linear in the input dtype: moe_router_dtype None), routing l.746-837
                    (topk_routing_with_score_function, then the aux loss when it is enabled)
  moe_utils.py      RouterGatingLinearFunction l.1357-1440 (save_for_backward(inp, weight, bias): the
                    router keeps its input), topk_routing_with_score_function l.766-958 (softmax:
                    topk on the logits then an fp32 softmax of the k scores, or with
                    moe_router_pre_softmax an fp32 softmax of all E then topk; probs.type_as(logits);
                    zeros_like(logits).scatter(1, top_indices, probs)), compute_routing_scores_for_aux_loss
                    l.960-1016 (fp32 softmax over all E, topk), get_tokens_per_expert_and_token_count
                    l.269-289, switch_load_balancing_loss_func l.63-150 (probs.sum(0) * tokens_per_expert),
                    MoEAuxLossAutoScaler l.291-330 (keeps the 0-dim aux loss), permute l.344-494
                    (unfused: argsort of the transposed map, sorted_indices = flat_sorted % T,
                    tokens.index_select(0, sorted_indices)), unpermute l.497-625 (probs None:
                    zeros.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, h), tokens); under
                    --deterministic-mode index_add_(0, sorted_indices, tokens), l.604-612)
  token_dispatcher.py  MoEAllGatherTokenDispatcher (Megatron's default moe_token_dispatcher_type)
                    l.271-373: local_probs = probs[:, local].contiguous() -> .T.contiguous().masked_select(
                    local_map.T.contiguous()) (masked_select keeps its input, the transposed probs, and
                    the mask), permute, unpermute with no probs (the probs weigh the activation)
                    MoEAlltoAllTokenDispatcher (--moe-token-dispatcher-type alltoall) l.375-960:
                    preprocess l.501-622 (dropless: num_out_tokens = T·k; at EP = TP = 1 the
                    per-expert counts are num_global_tokens_per_local_expert), dispatch_preprocess
                    l.624-680 -> permute(hidden, routing_map, probs=probs) (moe_utils.py l.470-492:
                    permuted_probs = probs.T.contiguous().reshape(-1)[flat_sorted], the index a k·T
                    view of the whole E·T argsort), token_dispatch l.682-726 (all_to_all: identity
                    for one rank, tensor_parallel/mappings.py _AllToAll), dispatch_postprocess
                    l.728-794 (num_local_experts > 1: sort_chunks_by_idxs, split + cat, moe_utils.py
                    l.628-670), combine_preprocess l.796-835 (sort_chunks_by_idxs back),
                    combine_postprocess l.876-908 (unpermute, probs None)
  experts.py        TEGroupedMLP.forward l.840-1047: linear_fc1 (TE GroupedLinear: keeps its input,
                    the permuted tokens), bias_act_func -> weighted_bias_swiglu_impl (bias_swiglu_fusion,
                    Megatron's default), linear_fc2 (keeps the activation output); moe_act:
                    CheckpointWithoutOutput around bias_act_func (l.1019-1030), its output freed once
                    fc2 ran. SequentialMLP (moe_grouped_gemm off) keeps the same bytes: split views of
                    the permuted tokens, per-expert outputs of the same total rows.
  shared_experts.py SharedExpertMLP.forward l.200-207 (MLP, then sigmoid(linear(x, gate_weight)) * out)
  moe_layer.py      MoELayer.forward l.614-719: shared_experts_compute (checkpointed with
                    shared_experts in recompute_modules, l.508-534), route, dispatch, experts, combine,
                    postprocess (out + shared); moe in recompute_modules: tensor_parallel.checkpoint
                    around the whole custom_forward (l.701-717) keeping its input
megatron/core/fusions/fused_bias_swiglu.py WeightedSwiGLUFunction l.266-287: save_for_backward(input, weights)

Autograd Functions stand only where Megatron runs a fused kernel or a Function of its own
(RouterGatingLinearFunction, TE GroupedLinear, WeightedSwiGLUFunction); everything else (topk,
softmax, scatter, masked_select, index_select, scatter_add_) is the same torch code Megatron runs
unfused (moe_permute_fusion and moe_router_fusion off, their defaults).

The aux loss is on (moe_router_load_balancing_type aux_loss, Megatron's default type, with a
nonzero --moe-aux-loss-coeff as every Megatron MoE recipe sets; Megatron's coefficient default 0
would skip it): its fp32 softmax over all E, its topk indices and the int64 tokens_per_expert are kept.
"""

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import emulated_ops as ops
import models
import te_validation as tv

AUX_LOSS_COEFF = 1e-2


def unpermute(out, sorted_indices, T):
    """moe_utils.py unpermute with probs None (l.597-615 at d98e8a64): under
    torch.use_deterministic_algorithms(True) (--deterministic-mode) index_add_, whose backward keeps
    its source, the experts' output; else scatter_add_, which keeps only the index."""
    h = out.shape[-1]
    restored = torch.zeros((T, h), dtype=out.dtype)
    if torch.are_deterministic_algorithms_enabled():
        return restored.index_add_(0, sorted_indices, out)
    return restored.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, h), out)


@dataclasses.dataclass(frozen=True)
class RouterOpts:
    """TopKRouter's options (Megatron's flags; the defaults are what the cases above measure):
    score function (router.py l.176, moe_utils.py l.896-931), expert bias (l.180-198, l.923-926),
    group-limited top-k (moe_utils.py group_limited_topk l.690-728), top-k scaling factor (l.933-934),
    load-balancing type and coefficient (router.py l.388-551), z-loss (l.642-709, z_loss_func
    moe_utils.py l.153-182), router dtype (Router.gating l.105-111)."""
    score: str = "softmax"  # --moe-router-score-function softmax | sigmoid
    expert_bias: bool = False  # --moe-router-enable-expert-bias
    num_groups: int = 0  # --moe-router-num-groups
    group_topk: int = 0  # --moe-router-group-topk
    scaling: float = 0.0  # --moe-router-topk-scaling-factor
    lb: str = "aux_loss"  # --moe-router-load-balancing-type aux_loss | seq_aux_loss | global_aux_loss | none
    aux_coeff: float = AUX_LOSS_COEFF  # --moe-aux-loss-coeff (0: no aux loss)
    z_coeff: float = 0.0  # --moe-z-loss-coeff
    dtype: str = ""  # --moe-router-dtype fp32 | fp64 ("": the input dtype)

    def cli(self):
        """The actmem flags for these options (none for the defaults)."""
        out = []
        if self.score != "softmax":
            out += ["--moe-router-score-function", self.score]
        if self.expert_bias:
            out += ["--moe-router-enable-expert-bias"]
        if self.group_topk:
            out += ["--moe-router-num-groups", str(self.num_groups), "--moe-router-group-topk", str(self.group_topk)]
        if self.scaling:
            out += ["--moe-router-topk-scaling-factor", str(self.scaling)]
        if self.lb != "aux_loss":
            out += ["--moe-router-load-balancing-type", self.lb]
        if self.aux_coeff != AUX_LOSS_COEFF:
            out += ["--moe-aux-loss-coeff", str(self.aux_coeff)]
        if self.z_coeff:
            out += ["--moe-z-loss-coeff", str(self.z_coeff)]
        if self.dtype:
            out += ["--moe-router-dtype", self.dtype]
        return out


def group_limited_topk(scores, topk, num_groups, group_topk):
    """moe_utils.py group_limited_topk l.690-728."""
    num_tokens, num_experts = scores.shape
    group_scores = scores.view(num_tokens, num_groups, -1).topk(topk // group_topk, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=group_topk, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(num_tokens, num_groups, num_experts // num_groups).reshape(
        num_tokens, -1)
    masked_scores = scores.masked_fill(~score_mask.bool(), float('-inf'))
    return torch.topk(masked_scores, k=topk, dim=-1)


def _grads(fn, inputs, grad):
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in inputs]
        got = torch.autograd.grad(fn(*leaves), leaves, grad, allow_unused=True)
    return got


class RouterGatingLinearFn(torch.autograd.Function):
    """moe_utils.py RouterGatingLinearFunction l.1357-1440: save_for_backward(inp, weight, bias);
    logits in router_dtype = the input dtype (moe_router_dtype None)."""

    @staticmethod
    def forward(ctx, inp, weight, router_dtype=None):
        ctx.save_for_backward(inp, weight)
        dt = router_dtype or inp.dtype  # --moe-router-dtype: logits in fp32 / fp64
        with torch.no_grad():
            out = torch.mm(inp.view(-1, inp.shape[-1]).to(dt), weight.to(dt).t())
        return out.view(*inp.shape[:-1], -1)

    @staticmethod
    def backward(ctx, grad):
        inp, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        gx = torch.mm(g, weight.to(g.dtype)).to(inp.dtype).view(inp.shape)
        gw = torch.mm(g.t(), inp.reshape(-1, inp.shape[-1]).to(g.dtype)).to(weight.dtype)
        return gx, gw, None


class GroupedLinearFn(torch.autograd.Function):
    """TE GroupedLinear (grouped GEMM) in bf16: saves the input (inputmats are torch.split views of
    it: one storage) and the weights (parameters); one output of all rows."""

    @staticmethod
    def forward(ctx, inp, splits, *weights):
        ctx.splits = splits
        ctx.save_for_backward(inp, *weights)
        with torch.no_grad():
            outs = [F.linear(x, w) for x, w in zip(torch.split(inp, splits), weights)]
            return torch.cat(outs, dim=0)

    @staticmethod
    def backward(ctx, grad):
        inp, *weights = ctx.saved_tensors
        gx, gw = [], []
        for x, w, g in zip(torch.split(inp, ctx.splits), weights, torch.split(grad, [s for s in ctx.splits])):
            gx.append(g @ w)
            gw.append(g.t() @ x)
        return (torch.cat(gx, 0), None, *gw)


def _weighted_swiglu(x, w):
    gate, up = torch.chunk(x, 2, dim=-1)
    return (F.silu(gate) * up * w).to(x.dtype)


class WeightedSwiGLUFn(torch.autograd.Function):
    """fused_bias_swiglu.py WeightedSwiGLUFunction l.266-287: save_for_backward(input, weights); with
    fp8_input_store the input as float8_e4m3fn (emulated: a uint8 tensor of its shape; the exact
    backward reads a detached reference, as te_validation.SwiGLUFp8StoreFn)."""

    @staticmethod
    def forward(ctx, x, weights, fp8_store=False):
        ctx.fp8_store = fp8_store
        if fp8_store:
            ctx.x = x.detach()
            ctx.save_for_backward(x.detach().to(torch.int8).view(torch.uint8), weights)
        else:
            ctx.save_for_backward(x, weights)
        with torch.no_grad():
            return _weighted_swiglu(x, weights)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        if ctx.fp8_store:
            x = ctx.x
        return (*_grads(_weighted_swiglu, (x, w), grad), None)


class AuxLossAutoScaler(torch.autograd.Function):
    """moe_utils.py MoEAuxLossAutoScaler l.291-330: keeps the 0-dim aux loss, adds its gradient."""

    @staticmethod
    def forward(ctx, output, aux_loss):
        ctx.save_for_backward(aux_loss)
        return output

    @staticmethod
    def backward(ctx, grad):
        (aux_loss,) = ctx.saved_tensors
        return grad, torch.ones_like(aux_loss)


# ---------------------------------------------------------------------------------------------
# TE fp8 (delayed / tensorwise per-tensor scaling) on the TE spec's experts (fp8-* cases)


class Fp8PaddingFn(torch.autograd.Function):
    """TE module/fp8_padding.py _Fp8Padding (Megatron experts.py l.896-904, TEGroupedMLP under fp8):
    a new (sum(padded), in) tensor with each expert's rows followed by zero rows up to a multiple of
    16 (tex.fused_multi_row_padding); saves nothing (backward unpads)."""

    @staticmethod
    def forward(ctx, inp, splits, padded):
        ctx.splits, ctx.padded = splits, padded
        with torch.no_grad():
            out = inp.new_zeros((sum(padded), *inp.shape[1:]))
            src = dst = 0
            for n, p in zip(splits, padded):
                out[dst:dst + n] = inp[src:src + n]
                src, dst = src + n, dst + p
        return out

    @staticmethod
    def backward(ctx, grad):
        parts, dst = [], 0
        for n, p in zip(ctx.splits, ctx.padded):
            parts.append(grad[dst:dst + n])
            dst += p
        return torch.cat(parts, 0), None, None


class Fp8UnpaddingFn(torch.autograd.Function):
    """TE module/fp8_padding.py _Fp8Unpadding: each expert's first rows into a new tensor
    (tex.fused_multi_row_unpadding); saves nothing (backward pads)."""

    @staticmethod
    def forward(ctx, inp, splits, padded):
        ctx.splits, ctx.padded = splits, padded
        with torch.no_grad():
            parts, src = [], 0
            for n, p in zip(splits, padded):
                parts.append(inp[src:src + n])
                src += p
            return torch.cat(parts, 0)

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_zeros((sum(ctx.padded), *grad.shape[1:]))
        src = dst = 0
        for n, p in zip(ctx.splits, ctx.padded):
            out[dst:dst + n] = grad[src:src + n]
            src, dst = src + n, dst + p
        return out, None, None


class GroupedLinearFp8Fn(torch.autograd.Function):
    """TE GroupedLinear under fp8 (module/grouped_linear.py, the split-quantize path taken for
    per-tensor recipes): _split_quantize (l.819-826; csrc/extensions/cast.cpp split_quantize,
    AllocationMethod::UNFUSED: one Float8Tensor per expert, each allocated on its own), then
    (l.901-915) each inputmat.update_usage(rowwise_usage=False, columnwise_usage=True) and
    save_for_backward(*inputmats, *weights_fp8, ...) (l.930-936): per expert the transposed
    columnwise data (1 byte per element) and its fp32 scale_inv. weights_fp8 are the cached
    _fp8_workspaces (Megatron passes is_first_microbatch): a static term, not saved here. With
    save_original (Megatron experts.py l.273-276: linear_fc2 under moe_act for recipes other than
    delayed) inputmats[0] = inp, the caller's storage (l.903-905)."""

    @staticmethod
    def forward(ctx, inp, splits, save_original, *weights):
        ctx.splits, ctx.save_original, ctx.weights = splits, save_original, weights
        with torch.no_grad():
            outs = [F.linear(x, w) for x, w in zip(torch.split(inp, splits), weights)]
            out = torch.cat(outs, dim=0)
        if save_original:
            ctx.save_for_backward(inp)
        else:
            quantized = [tv.fp8_columnwise(x) for x in torch.split(inp.detach(), splits)]
            ctx.save_for_backward(*[q[0] for q in quantized], *[q[1] for q in quantized])
            ctx.inp = inp.detach()  # held for the exact backward only (TE's backward reads the fp8 data)
        return out

    @staticmethod
    def backward(ctx, grad):
        inp = ctx.saved_tensors[0] if ctx.save_original else ctx.inp
        gx, gw = [], []
        for x, w, g in zip(torch.split(inp, ctx.splits), ctx.weights, torch.split(grad, ctx.splits)):
            gx.append(g @ w)
            gw.append(g.t() @ x)
        return (torch.cat(gx, 0), None, None, *gw)


def balanced_routing_bias(T, E, k, dtype):
    """A constant added to the router logits so that token i picks experts (i·k + j) mod E, j < k:
    balanced routing (each expert k·T/E rows when E divides k·T), the routing actmem models; the fp8
    cases use it because Fp8Padding's row count depends on each expert's share."""
    bias = torch.zeros(T, E, dtype=dtype)
    for i in range(T):
        for j in range(k):
            bias[i, (i * k + j) % E] = 30.0
    return bias


class MegatronMoE(nn.Module):
    """MoELayer with TopKRouter, MoEAllGatherTokenDispatcher, TEGroupedMLP (SwiGLU experts) and an
    optional SharedExpertMLP (gated as Qwen2-MoE's with moe_shared_expert_gate)."""

    def __init__(self, cfg: models.ModelConfig, modules=(), fp8_store=False, dispatcher="allgather", router=None):
        super().__init__()
        self.router = router or RouterOpts()
        # router.py l.180-198: the expert bias, an fp32 buffer (no gradient); global_aux_loss's
        # running tokens-per-expert and step count (l.203-221)
        E = cfg.experts
        self.register_buffer("expert_bias", torch.zeros(E) if self.router.expert_bias else None)
        self.register_buffer("global_tokens_per_expert", torch.zeros(E) if self.router.lb == "global_aux_loss" else None)
        self.ga_steps = 0
        self.fp8_store = fp8_store  # --activation-func-fp8-input-store
        self.fp8 = "none"  # TE fp8 recipe (TEMoELayer sets it); balanced routing then
        self.layernorm_recompute = False  # recompute_modules layernorm (TEMoELayer sets it)
        self.dispatcher = dispatcher  # moe_token_dispatcher_type: allgather | alltoall
        h, f, E = cfg.hidden, cfg.ffn, cfg.experts
        self.cfg, self.modules_ = cfg, tuple(modules)
        self.topk = cfg.top_k
        self.pre_softmax = not cfg.norm_topk_prob  # --moe-router-pre-softmax: softmax over E, no renormalization
        self.router_w = nn.Parameter(torch.randn(E, h) * 0.02)
        self.fc1_w = nn.ParameterList(nn.Parameter(torch.randn(2 * f, h) * 0.02) for _ in range(E))
        self.fc2_w = nn.ParameterList(nn.Parameter(torch.randn(h, f) * 0.02) for _ in range(E))
        self.shared = None
        if cfg.shared_ffn:
            self.shared_fc1 = models._linear(h, 2 * cfg.shared_ffn, False)
            self.shared_fc2 = models._linear(cfg.shared_ffn, h, False)
            self.shared_gate = nn.Parameter(torch.randn(1, h) * 0.02) if cfg.family == "qwen2_moe" else None
            self.shared = True

    # router.py TopKRouter.forward / routing
    def route(self, x):
        E, k, r = self.cfg.experts, self.topk, self.router
        s, b = x.shape[:2]
        router_dtype = {"": None, "fp32": torch.float32, "fp64": torch.float64}[r.dtype]
        logits = RouterGatingLinearFn.apply(x, self.router_w, router_dtype).view(-1, E)
        if self.fp8 != "none":  # balanced routing (fp8 cases): a constant added, nothing saved
            logits = logits + balanced_routing_bias(logits.shape[0], E, k, logits.dtype)
        T = logits.shape[0]
        if r.z_coeff and torch.is_grad_enabled():  # apply_z_loss l.655-679, z_loss_func l.169-181
            z_loss = torch.mean(torch.square(torch.logsumexp(logits, dim=-1))) * r.z_coeff
            logits = AuxLossAutoScaler.apply(logits, z_loss)

        def compute_topk(scores):  # moe_utils.py _compute_topk l.849-884
            if r.group_topk:
                return group_limited_topk(scores, k, r.num_groups, r.group_topk)
            return torch.topk(scores, k=k, dim=1)

        if r.score == "softmax":  # l.900-914
            if self.pre_softmax:
                scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
                probs, top_indices = compute_topk(scores)
            else:
                scores, top_indices = compute_topk(logits)
                probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        else:  # sigmoid, l.915-929
            scores = torch.sigmoid(logits.float())
            if self.expert_bias is not None:
                _, top_indices = compute_topk(scores + self.expert_bias.float())
                scores = torch.gather(scores, dim=1, index=top_indices)
            else:
                scores, top_indices = compute_topk(scores)
            probs = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20) if k > 1 else scores
        if r.scaling:  # l.933-934
            probs = probs * r.scaling
        probs = probs.type_as(logits)
        routing_probs = torch.zeros_like(logits).scatter(1, top_indices, probs)
        routing_map = torch.zeros_like(logits).int().scatter(1, top_indices, 1).bool()
        # router.py l.804: training, grad enabled (not in a checkpoint's forward), a nonzero coefficient
        if torch.is_grad_enabled() and r.lb != "none" and r.aux_coeff > 0:
            # compute_routing_scores_for_aux_loss l.996-1008
            if r.score == "softmax":
                aux_scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
            else:
                aux_scores = torch.sigmoid(logits.float())
                aux_scores = aux_scores / (aux_scores.sum(dim=-1, keepdim=True) + 1e-20)
            _, aux_top = torch.topk(aux_scores, k=k, dim=1)
            aux_map = torch.zeros_like(logits).int().scatter(1, aux_top, 1).bool()
            c = r.aux_coeff
            if r.lb == "aux_loss":  # _apply_aux_loss l.410-448
                tokens_per_expert = aux_map.sum(dim=0)
                aux_loss = torch.sum(aux_scores.sum(dim=0) * tokens_per_expert) * (E * c / (k * T * T))
            elif r.lb == "seq_aux_loss":  # _apply_seq_aux_loss l.450-505: b folded into the expert dim
                tokens_per_expert = aux_map.reshape(s, -1).sum(dim=0)
                aux_loss = torch.sum(aux_scores.reshape(s, -1).sum(dim=0) * tokens_per_expert) * (
                    E * c / (k * s * s)) / b
            else:  # global_aux_loss, _apply_global_aux_loss l.507-551
                self.global_tokens_per_expert += aux_map.sum(dim=0)
                self.ga_steps += 1
                averaged = self.global_tokens_per_expert / self.ga_steps
                aux_loss = torch.sum(aux_scores.sum(dim=0) * averaged) * (E * c / (k * T * T))
            routing_probs = AuxLossAutoScaler.apply(routing_probs, aux_loss)
        return routing_probs, routing_map

    def experts(self, tokens, splits, probs):
        if self.fp8 != "none":
            return self.experts_fp8(tokens, splits, probs)
        fc1 = GroupedLinearFn.apply(tokens, splits, *self.fc1_w)
        probs = probs.unsqueeze(-1)
        if "moe_act" in self.modules_:
            ckpt = tv.CheckpointWithoutOutput()
            act = ckpt.checkpoint(lambda x, p: WeightedSwiGLUFn.apply(x, p, self.fp8_store), fc1, probs)
            out = GroupedLinearFn.apply(act, splits, *self.fc2_w)
            ckpt.discard_output_and_register_recompute(out)
            return out
        act = WeightedSwiGLUFn.apply(fc1, probs, self.fp8_store)
        return GroupedLinearFn.apply(act, splits, *self.fc2_w)

    def experts_fp8(self, tokens, splits, probs):
        """TEGroupedMLP.forward under fp8 (experts.py l.876-1047): Fp8Padding of the tokens and the
        probs, GroupedLinear fc1 (fp8 inputs), the weighted SwiGLU (bf16 input, or the e4m3 store),
        GroupedLinear fc2 (fp8 inputs; under moe_act its original input, freed by the checkpoint),
        Fp8Unpadding."""
        padded = [(n + 15) // 16 * 16 for n in splits]
        probs = probs.unsqueeze(-1)
        if padded != splits:  # fp8_padding.py: unchanged when every split is aligned already
            tokens = Fp8PaddingFn.apply(tokens, splits, padded)
            probs = Fp8PaddingFn.apply(probs, splits, padded)
        fc1 = GroupedLinearFp8Fn.apply(tokens, padded, False, *self.fc1_w)
        if "moe_act" in self.modules_:
            ckpt = tv.CheckpointWithoutOutput()
            act = ckpt.checkpoint(lambda x, p: WeightedSwiGLUFn.apply(x, p, self.fp8_store), fc1, probs)
            out = GroupedLinearFp8Fn.apply(act, padded, True, *self.fc2_w)
            ckpt.discard_output_and_register_recompute(out)
        else:
            act = WeightedSwiGLUFn.apply(fc1, probs, self.fp8_store)
            out = GroupedLinearFp8Fn.apply(act, padded, False, *self.fc2_w)
        return Fp8UnpaddingFn.apply(out, splits, padded) if padded != splits else out

    def shared_experts_fp8(self, x):
        """SharedExpertMLP with TE linears under fp8 (TELinearFn: the fp8 columnwise input copy);
        with layernorm recompute (and no shared_experts checkpoint) linear_fc1 keeps its original
        input (moe_layer.py l.743-750 set_save_original_input), the norm output then freed."""
        save_original = self.layernorm_recompute and "shared_experts" not in self.modules_
        fc1 = tv.TELinearFn.apply(x, self.shared_fc1.weight, None, True, save_original)
        act = tv.SwiGLUFp8StoreFn.apply(fc1) if self.fp8_store else ops.SwiGLUFn.apply(fc1)
        y = tv.TELinearFn.apply(act, self.shared_fc2.weight, None, True, False)
        if self.shared_gate is not None:
            y = y * torch.sigmoid(F.linear(x, self.shared_gate))
        return y

    def shared_experts(self, x):
        if self.fp8 != "none":
            return self.shared_experts_fp8(x)
        fc1 = self.shared_fc1(x)
        y = self.shared_fc2(tv.SwiGLUFp8StoreFn.apply(fc1) if self.fp8_store else ops.SwiGLUFn.apply(fc1))
        if self.shared_gate is not None:
            y = y * torch.sigmoid(F.linear(x, self.shared_gate))
        return y

    def custom_forward(self, x):
        s, b, h = x.shape
        shared = None
        if self.shared:
            if "shared_experts" in self.modules_:
                shared = checkpoint(self.shared_experts, x, use_reentrant=True)
            else:
                shared = self.shared_experts(x)
        probs, routing_map = self.route(x)
        if self.dispatcher == "alltoall":
            restored = self.alltoall(x.view(-1, h), probs, routing_map)
            restored = restored.view(s, b, h)
            return restored + shared if shared is not None else restored
        # MoEAllGatherTokenDispatcher, EP = TP = 1
        hidden = x.view(-1, h)
        local_map = routing_map[:, 0:self.cfg.experts].contiguous()
        local_probs = probs[:, 0:self.cfg.experts].contiguous()
        tokens_per_expert = local_map.sum(dim=0).long()
        T = hidden.shape[0]
        flat_sorted = local_map.bool().T.contiguous().reshape(-1).argsort(descending=True, stable=True)
        sorted_indices = flat_sorted[: int(tokens_per_expert.sum().item())] % T
        permuted = hidden.index_select(0, sorted_indices)
        local_probs = local_probs.T.contiguous().masked_select(local_map.T.contiguous())
        out = self.experts(permuted, tokens_per_expert.tolist(), local_probs)
        restored = unpermute(out, sorted_indices, T)
        restored = restored.view(s, b, h)
        if shared is not None:
            restored = restored + shared
        return restored

    def alltoall(self, hidden, probs, routing_map):
        """MoEAlltoAllTokenDispatcher at EP = TP = 1 (one rank, all E experts local)."""
        T, h = hidden.shape
        E = self.cfg.experts
        num_out_tokens = T * self.topk  # preprocess l.553-556 (dropless)
        tokens_per_expert = routing_map.sum(dim=0).long()  # num_global_tokens_per_local_expert at EP = TP = 1
        # permute (moe_utils.py l.470-492), with probs
        flat_sorted = routing_map.bool().T.contiguous().reshape(-1).argsort(descending=True, stable=True)
        flat_sorted = flat_sorted[:num_out_tokens]
        sorted_indices = flat_sorted % T
        permuted_probs = probs.T.contiguous().reshape(-1)[flat_sorted]
        permuted = hidden.index_select(0, sorted_indices)
        # token_dispatch: all_to_all over one rank returns its input
        splits = tokens_per_expert.tolist()
        if E > 1:  # dispatch_postprocess: sort_chunks_by_idxs by sort_input_by_local_experts
            order = torch.arange(E).reshape(-1, E).T.ravel().tolist()
            chunks = torch.split(permuted, splits, dim=0)
            permuted = torch.cat([chunks[i] for i in order], dim=0)
            pchunks = torch.split(permuted_probs, splits, dim=0)
            permuted_probs = torch.cat([pchunks[i] for i in order], dim=0)
        out = self.experts(permuted, splits, permuted_probs)
        if E > 1:  # combine_preprocess: sort_chunks_by_idxs by restore_output_by_local_experts
            restore = torch.arange(E).reshape(E, -1).T.ravel().tolist()
            chunks = torch.split(out, splits, dim=0)
            out = torch.cat([chunks[i] for i in restore], dim=0)
        # combine_postprocess: unpermute, probs None
        return unpermute(out, sorted_indices, T)

    def forward(self, x):
        if "moe" in self.modules_:
            return checkpoint(self.custom_forward, x, use_reentrant=True)
        return self.custom_forward(x)


def _dense_cfg(cfg):
    return models.ModelConfig(**{**cfg.__dict__, "ffn": cfg.dense_ffn or cfg.ffn})


def build(cfg, run, opts, seed=0, router=None):
    """te_validation.build with MoE layers: the local spec (LocalLayer: fused RMSNorm modules) or the
    TE spec (TELayer attention; pre_mlp_layernorm a TENorm of its own for a MoE layer,
    gpt_layer_specs.py), every layer cfg.is_moe_layer(i) holding a MegatronMoE."""
    torch.manual_seed(seed)
    model = models.MegatronModel.__new__(models.MegatronModel)
    nn.Module.__init__(model)
    model.cfg, model.run = cfg, run
    model.embed = nn.Embedding(cfg.vocab, cfg.hidden)
    model.final_w = nn.Parameter(torch.ones(cfg.hidden))
    model.output_layer = models._linear(cfg.hidden, cfg.vocab, False)
    modules = opts.modules if run.recompute == "selective" else ()
    layers = []
    for i in range(cfg.layers):
        if not cfg.is_moe_layer(i):
            dense = _dense_cfg(cfg)
            layers.append(tv.TELayer(dense, run, opts) if opts.impl == tv.TE else tv.LocalLayer(dense, run, opts))
        else:
            layers.append(TEMoELayer(cfg, run, opts, modules, router) if opts.impl == tv.TE else
                          LocalMoELayer(cfg, run, opts, modules, router))
    model.layers = nn.ModuleList(layers)
    return model.to(run.torch_dtype).train()


class LocalMoELayer(tv.LocalLayer):
    """LocalLayer (local spec: fused RMSNorm pre_mlp_layernorm, recompute layernorm) with a MoE."""

    def __init__(self, cfg, run, opts, modules, router=None):
        super().__init__(cfg, run, opts)
        del self.fc1, self.fc2
        self.moe = MegatronMoE(cfg, modules, opts.act_fp8_store, opts.dispatcher, router)

    def selective(self, module):  # transformer_layer.py l.538: mlp recompute skips MoE layers
        return module != "mlp" and super().selective(module)

    def _mlp(self, y):
        return self.moe(y)


class TEMoELayer(tv.TELayer):
    """TELayer's attention; pre_mlp_layernorm a TENorm (TE RMSNorm keeps x and rsigma), then the MoE;
    recompute layernorm frees the TENorm output after the MoE ran (transformer_layer.py l.1088)."""

    def __init__(self, cfg, run, opts, modules, router=None):
        super().__init__(cfg, run, opts)
        del self.fc1_w, self.fc2_w
        self.moe = MegatronMoE(cfg, modules, opts.act_fp8_store, opts.dispatcher, router)
        self.moe.fp8 = opts.fp8
        self.moe.layernorm_recompute = "layernorm" in modules

    def selective(self, module):
        return module != "mlp" and super().selective(module)

    def mlp(self, h1):
        if self.run.recompute == "selective" and "layernorm" in self.opts.modules:
            ckpt = tv.CheckpointWithoutOutput()
            n2 = ckpt.checkpoint(lambda t: ops.RMSNormFn.apply(t, self.ln2_w, self.cfg.eps), h1)
            out = self.moe(n2)
            ckpt.discard_output_and_register_recompute(out)
            return out
        return self.moe(ops.RMSNormFn.apply(h1, self.ln2_w, self.cfg.eps))


def measure(cfg, run, opts, seed=0, backward=False, router=None):
    """te_validation.measure (saved_tensors_hooks; a storage freed by CheckpointWithoutOutput counts
    0) on the model built here; `router`: RouterOpts (None: the defaults)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(opts.deterministic)  # Megatron's --deterministic-mode
    try:
        return tv.measure(cfg, run, opts, seed, backward,
                          build_fn=lambda c, r, o, sd: build(c, r, o, sd, router))
    finally:
        torch.use_deterministic_algorithms(before)
