"""transformers 5 MoE blocks (`--hf-version 5`): fused 3-D expert weights run by the experts
implementation (validation/EXPECTED.md, "transformers 5", names the source files and commits).

  gate_up_proj (E, 2f, h), down_proj (E, h, f)  (MixtralExperts, Qwen2MoeExperts, Qwen3MoeExperts,
  DeepseekV3NaiveMoe: the same parameters as 4.x's per-expert w1/w3/w2, fused)

Routers as 5.x writes them:
  MixtralTopKRouter / Qwen3MoeTopKRouter / Qwen2MoeTopKRouter: F.linear(x, W), softmax of the
  fp32 logits (keeps its fp32 output), topk (keeps the int64 indices), `/=` row sums when
  normalized (keeps the fp32 top-k values and the sums), cast to the logits' dtype.
  DeepseekV3TopkRouter: F.linear(x.float(), W.float()) (fp32 copies of x and W), sigmoid,
  group-limited choice under no_grad, gather, `/= (sum + 1e-20)`, `* routed_scaling_factor`:
  fp32 routing weights go into the experts.

Experts (integrations/moe.py @8b584a67):
  eager       the per-expert loop of MixtralExperts.forward (torch.where, x[token_idx], one fused
              F.linear to [gate|up], chunk, act * up, F.linear down, * weight column, index_add_)
  grouped_mm  grouped_mm_experts_forward: token_idx, argsort perm / inv_perm, one grouped GEMM per
              projection over the expert-sorted rows, weights applied, [inv_perm], view+sum
  batched_mm  batched_mm_experts_forward: per-row weight copies gate_up_proj[ids] and
              down_proj[ids] multiplied by torch.bmm, valid mask, view+sum

torch 1.13 has no torch._grouped_mm: GroupedMM below computes it group by group and saves what
torch 2.9's autograd formula for _grouped_mm saves (tools/autograd/derivatives.yaml:
`self: _grouped_mm_mat1_backward(grad, mat2, ..., offs)`, `mat2: _grouped_mm_mat2_backward(grad,
self, ..., offs)`): self, mat2 and offs.
"""
import torch
import torch.nn.functional as F
from torch import nn


class GroupedMM(torch.autograd.Function):
    """torch._grouped_mm(input (S, K), weight (G, K, N), offs int32 (G)) -> (S, N): rows
    offs[g-1]:offs[g] use weight[g]. Saves input, weight (a view of the parameter) and offs."""

    @staticmethod
    def forward(ctx, x, w, offs):
        with torch.no_grad():
            out = x.new_zeros(x.shape[0], w.shape[2])
            start = 0
            for g, end in enumerate(offs.tolist()):
                if end > start:
                    out[start:end] = x[start:end] @ w[g]
                start = end
        ctx.save_for_backward(x, w, offs)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, w, offs = ctx.saved_tensors
        gx, gw = torch.zeros_like(x), torch.zeros_like(w)
        start = 0
        for g, end in enumerate(offs.tolist()):
            if end > start:
                gx[start:end] = grad[start:end] @ w[g].t()
                gw[g] = x[start:end].t() @ grad[start:end]
            start = end
        return gx, gw, None


def _swiglu(gate_up):
    """_default_apply_gate: chunk (views of one storage), act(gate) keeps gate, mul keeps both."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class HF5Experts(nn.Module):
    """MixtralExperts with @use_experts_implementation; `impl` is config._experts_implementation."""

    def __init__(self, experts, hidden, ffn, impl):
        super().__init__()
        self.num_experts, self.impl = experts, impl
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * ffn, hidden).normal_(std=0.02))
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, ffn).normal_(std=0.02))

    def forward(self, x, top_k_index, top_k_weights):
        return {"eager": self._eager, "grouped_mm": self._grouped, "batched_mm": self._batched}[self.impl](
            x, top_k_index, top_k_weights)

    def _eager(self, x, top_k_index, top_k_weights):
        final = torch.zeros_like(x)
        with torch.no_grad():
            expert_mask = F.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            state = x[token_idx]
            out = _swiglu(F.linear(state, self.gate_up_proj[expert_idx]))
            out = F.linear(out, self.down_proj[expert_idx])
            out = out * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, out.to(final.dtype))
        return final

    def _grouped(self, x, top_k_index, top_k_weights):
        num_tokens, hidden = x.shape
        k = top_k_index.size(-1)
        token_idx = torch.arange(num_tokens).unsqueeze(1).expand(-1, k).reshape(-1)
        sample_weights = top_k_weights.reshape(-1)
        expert_ids = top_k_index.reshape(-1)
        selected = x[token_idx]
        perm = torch.argsort(expert_ids)
        inv_perm = torch.argsort(perm)
        expert_ids_g = expert_ids[perm]
        sample_weights_g = sample_weights[perm]
        selected_g = selected[perm]
        counts = torch.histc(expert_ids_g.float(), bins=self.num_experts, min=0, max=self.num_experts - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        gate_up = GroupedMM.apply(selected_g.to(self.gate_up_proj.dtype), self.gate_up_proj.transpose(-2, -1), offsets)
        gated = _swiglu(gate_up)
        out_g = GroupedMM.apply(gated.to(self.down_proj.dtype), self.down_proj.transpose(-2, -1), offsets)
        out_g = out_g * sample_weights_g.unsqueeze(-1)
        out = out_g[inv_perm]
        return out.view(num_tokens, k, hidden).sum(dim=1).to(x.dtype)

    def _batched(self, x, top_k_index, top_k_weights):
        num_tokens, hidden = x.shape
        k = top_k_index.size(-1)
        token_idx = torch.arange(num_tokens).unsqueeze(1).expand(-1, k).reshape(-1)
        sample_weights = top_k_weights.reshape(-1)
        expert_ids = top_k_index.reshape(-1)
        valid_mask = expert_ids < self.num_experts
        ids = expert_ids.clamp(0, self.num_experts - 1)
        selected = x[token_idx]
        w_gate_up = self.gate_up_proj[ids]
        w_down = self.down_proj[ids]
        gate_up = torch.bmm(w_gate_up, selected.unsqueeze(-1)).squeeze(-1)
        gated = _swiglu(gate_up)
        out = torch.bmm(w_down, gated.unsqueeze(-1)).squeeze(-1)
        out = out * sample_weights.unsqueeze(-1)
        out = out * valid_mask.unsqueeze(-1).to(out.dtype)
        return out.view(num_tokens, k, hidden).sum(dim=1).to(x.dtype)


class HF5MoE(nn.Module):
    """MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock / Qwen2MoeSparseMoeBlock of 5.x: router
    module, fused experts, Qwen2-MoE's sigmoid-gated shared expert as 4.x."""

    def __init__(self, cfg, run, mlp_cls):
        super().__init__()
        self.cfg = cfg
        self.router_w = nn.Parameter(torch.empty(cfg.experts, cfg.hidden).normal_(std=0.02))
        self.experts = HF5Experts(cfg.experts, cfg.hidden, cfg.ffn, run.experts_impl)
        if cfg.traits.moe == "qwen2_moe":
            import dataclasses
            self.shared_expert = mlp_cls(dataclasses.replace(cfg, family="llama", ffn=cfg.shared_ffn), run)
            self.shared_expert_gate = nn.Linear(cfg.hidden, 1, bias=False)

    def forward(self, x):
        b, s, h = x.shape
        flat = x.view(-1, h)
        router_logits = F.linear(flat, self.router_w)
        probs = F.softmax(router_logits.float(), dim=-1)
        top_value, top_index = torch.topk(probs, self.cfg.top_k, dim=-1)
        if self.cfg.norm_topk_prob:
            top_value /= top_value.sum(dim=-1, keepdim=True)
        top_value = top_value.to(router_logits.dtype)
        out = self.experts(flat, top_index, top_value)
        if self.cfg.traits.moe == "qwen2_moe":
            out = out + torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        return out.reshape(b, s, h)


class HF5DeepseekMoE(nn.Module):
    """DeepseekV3MoE of 5.x: DeepseekV3TopkRouter (fp32 logits), route_tokens_to_experts (sigmoid,
    group-limited top-k, gather, normalize, scale: fp32 weights), DeepseekV3NaiveMoe experts,
    shared experts on all tokens."""

    def __init__(self, cfg, run, mlp_cls, topk_indices_fn):
        super().__init__()
        import dataclasses
        self.cfg = cfg
        self.gate_w = nn.Parameter(torch.empty(cfg.experts, cfg.hidden).normal_(std=0.02))
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.experts))
        self.experts = HF5Experts(cfg.experts, cfg.hidden, cfg.ffn, run.experts_impl)
        self.shared_experts = mlp_cls(dataclasses.replace(cfg, family="llama", ffn=cfg.shared_ffn), run)
        self._topk_indices_fn = topk_indices_fn

    def forward(self, x):
        cfg = self.cfg
        shape = x.shape
        flat = x.view(-1, cfg.hidden)
        router_logits = F.linear(flat.type(torch.float32), self.gate_w.type(torch.float32))
        scores = router_logits.sigmoid()
        indices = self._topk_indices_fn(self, scores)
        weights = scores.gather(1, indices)
        if cfg.norm_topk_prob:
            weights /= weights.sum(dim=-1, keepdim=True) + 1e-20
        weights = weights * cfg.routed_scaling
        routed = self.experts(flat, indices, weights).view(*shape)
        return routed + self.shared_experts(x)
