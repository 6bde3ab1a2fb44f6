// actmem.h first: it declares what the planner builds on, then includes the planner's headers.
#include "engine/prepared.h"
#include "planner/time_model.h"
#include "policies/pipeline_split.h"

#include <algorithm>

#include <fmt/format.h>

namespace actmem {

Cluster cluster_for(const GpuSpec& gpu, int64_t gpus_per_node) {
  Cluster c;
  c.peak_flops = gpu.bf16_flops;
  c.intra_node_bandwidth = gpu.link_bandwidth;
  c.gpus_per_node = gpus_per_node;
  return c;
}

namespace {

/// Effective bandwidth of a group of `size` ranks whose neighbours are `stride` ranks apart.
double group_bandwidth(const Cluster& c, int64_t size, int64_t stride) {
  const bool inside = size * stride <= c.gpus_per_node;
  return (inside ? c.intra_node_bandwidth : c.inter_node_bandwidth) * c.collective_efficiency;
}

double safe_div(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

StepTime step_time(const ModelSpec* model, const Workload& w, const Layout& l, const Totals& t, int64_t global_batch,
                   const Cluster& c) noexcept {
  StepTime st;
  if (!(c.peak_flops > 0) || !(c.intra_node_bandwidth > 0) || !(c.inter_node_bandwidth > 0) ||
      !(c.host_bandwidth > 0) || !(c.host_memory_bandwidth > 0) || !(c.compute_efficiency > 0) || !(c.collective_efficiency > 0))
    return st;  // no speeds: every term 0
  const ParallelLayout& p = l.parallel;
  st.gpus = p.dp * p.tp * p.pp * p.cp;
  st.global_batch = static_cast<double>(global_batch);
  const double n = static_cast<double>(st.gpus);
  const double b = static_cast<double>(l.micro_batch);
  const double micro_batches_global = st.global_batch / b;
  if (p.dp < 1 || p.tp < 1 || p.pp < 1 || p.cp < 1 || p.ep < 1 || p.vpp < 1 || l.micro_batch < 1 || l.seq_len < 1)
    return st;  // not a layout evaluate() accepts
  st.num_micro_batches = std::max<int64_t>(1, global_batch / (p.dp * l.micro_batch));
  const double m = static_cast<double>(st.num_micro_batches);
  st.hw_flops_per_gpu = (3.0 * t.forward_flops + t.recompute_flops) * micro_batches_global / n;
  st.model_flops_per_gpu = 3.0 * t.forward_flops * micro_batches_global / n;
  st.achievable = c.peak_flops * c.compute_efficiency;
  st.stage_imbalance = t.stage_imbalance > 1 ? t.stage_imbalance : 1.0;
  st.compute = safe_div(st.hw_flops_per_gpu, st.achievable) * st.stage_imbalance;
  const double per_micro_batch = safe_div(st.compute, m);  // one micro-batch on one stage

  const double act = static_cast<double>(dtype_bytes(w.dtype));
  const double wb = static_cast<double>(dtype_bits(w.weight_dtype)) / 8.0;
  const double gb = static_cast<double>(dtype_bits(w.grad_dtype)) / 8.0;
  const double s_local = static_cast<double>(l.seq_len) / static_cast<double>(p.cp);
  const double tp = static_cast<double>(p.tp), cp = static_cast<double>(p.cp), ep = static_cast<double>(p.ep);
  const double dp = static_cast<double>(p.dp), pp = static_cast<double>(p.pp), vpp = static_cast<double>(p.vpp);

  if (model) {
    const double h = static_cast<double>(model->hidden);
    const auto split = detail::PipelineSplit::of(model->num_layers, p);
    st.layers_per_stage = split.largest_chunk() * p.vpp;
    st.moe_layers_per_stage = model->num_moe_layers() / p.pp;
    const double layers = static_cast<double>(st.layers_per_stage);

    // TP: Megatron's two all-reduces per layer in forward and two in backward (all-gather +
    // reduce-scatter under sequence parallelism: the same bytes), two more when the layer's
    // forward is recomputed. Not overlapped with compute (Megatron-LM 2021 does not).
    if (p.tp > 1) {
      st.tp_allreduces = 4 + (l.recompute == Recompute::kFull ? 2 : 0);
      st.tp_message = s_local * b * h * act;
      st.tp_bw = group_bandwidth(c, p.tp, 1);
      const double one = 2.0 * (tp - 1) / tp * st.tp_message / st.tp_bw;
      double recomputed = layers;
      if (l.recompute == Recompute::kFull && l.recompute_layers >= 0)
        recomputed = std::min<double>(layers, static_cast<double>(l.recompute_layers) * vpp);
      st.tp = m * (layers * 4 + (l.recompute == Recompute::kFull ? 2 * recomputed : 0)) * one;
    }
    // CP: ring attention passes each rank's K and V block around the ring, c − 1 hops in forward
    // and, in backward, K/V again plus their gradients: 3(c − 1) blocks per layer, hidden behind
    // the attention core of the same layer when it is long enough.
    if (p.cp > 1) {
      const double kv_heads = static_cast<double>(model->mla ? model->num_heads / p.tp : model->kv_heads_per_rank(p.tp));
      const double head_dim = static_cast<double>(model->mla ? model->mla->qk_head_dim() : model->head_dim);
      st.cp_block = 2.0 * s_local * b * kv_heads * head_dim * act;
      st.cp_bw = group_bandwidth(c, p.cp, p.tp);
      const double heads = static_cast<double>(model->num_heads) / tp;
      const double s = static_cast<double>(l.seq_len);
      // forward + backward (3x) attention core per GPU: 4·b·s²·heads·d over cp ranks
      st.attention_core = safe_div(3.0 * 4.0 * b * s * s * heads * head_dim / cp, st.achievable);
      const double ring = 3.0 * (cp - 1) * st.cp_block / st.cp_bw;
      st.cp = m * layers * std::max(0.0, ring - st.attention_core);
    }
    // EP: dispatch and combine all-to-alls in forward and again in backward, top-k copies of
    // each token's hidden state, (e−1)/e of them leaving the rank. Not overlapped.
    if (p.ep > 1 && model->moe) {
      const double k = static_cast<double>(model->moe->experts_per_token);
      st.ep_message = s_local * b * k * h * act;
      st.ep_bw = group_bandwidth(c, p.ep, p.tp * p.cp);
      st.ep = m * static_cast<double>(st.moe_layers_per_stage) * 4.0 * (ep - 1) / ep * st.ep_message / st.ep_bw;
    }
    // PP: each micro-batch's activation crosses each chunk boundary forward and its gradient
    // backward (Megatron's scatter/gather sends 1/t of it under sequence parallelism).
    if (p.pp > 1) {
      st.pp_message = s_local * b * h * act / (p.sp ? tp : 1.0);
      st.pp_bw = group_bandwidth(c, p.pp, p.tp * p.cp * p.dp);
      st.pp_p2p = m * 2.0 * vpp * st.pp_message / st.pp_bw;
    }
  }
  // Pipeline bubble (Narayanan et al. 2021 §2.2): (p − 1)/(v·m) of the busy time.
  if (p.pp > 1) st.bubble = (pp - 1) / (vpp * m) * (st.compute + st.tp + st.cp + st.ep);

  // Data parallelism over the peak stage's parameters (after TP/EP, before ZeRO).
  if (p.dp > 1) {
    const double psi = static_cast<double>(t.params_on_gpu);
    st.dp_bw = group_bandwidth(c, p.dp, p.tp * p.cp);
    const double frac = (dp - 1) / dp;
    if (l.zero_stage == 0) {
      st.dp_bytes = 2.0 * frac * psi * gb;  // all-reduce
    } else if (l.zero_stage < 3) {
      st.dp_bytes = frac * psi * (gb + wb);  // reduce-scatter gradients + all-gather updated weights
    } else {
      st.dp_bytes = m * frac * psi * (2.0 * wb + gb);  // per micro-batch: 2 all-gathers + reduce-scatter
    }
    st.dp_comm_total = st.dp_bytes / st.dp_bw;
    // ZeRO 0-2: overlapped with the backward of the last micro-batch (2/3 of its compute);
    // ZeRO-3: prefetched gathers overlap all of each micro-batch's compute.
    st.dp_overlap = l.zero_stage < 3 ? per_micro_batch * 2.0 / 3.0 : st.compute;
    st.dp = std::max(0.0, st.dp_comm_total - st.dp_overlap);
  }
  if (l.offload_optimizer) {
    const double shard = static_cast<double>(t.params_on_gpu) / (l.zero_stage >= 1 ? dp : 1.0);
    st.offload = shard * (gb + wb) / c.host_bandwidth +
                 shard * kCpuAdamBytesPerParam / (c.host_memory_bandwidth / static_cast<double>(c.gpus_per_node));
  }

  st.total = st.compute + st.tp + st.cp + st.ep + st.pp_p2p + st.bubble + st.dp + st.offload;
  if (st.total > 0) {
    st.tokens_per_s_per_gpu = st.global_batch * static_cast<double>(l.seq_len) / st.total / n;
    st.mfu = safe_div(st.model_flops_per_gpu / st.total, c.peak_flops);
    st.tflops_per_gpu = st.hw_flops_per_gpu / st.total / 1e12;
  }
  return st;
}

std::vector<TimeTerm> explain_step_time(const StepTime& st, const Layout& l, const Cluster& c) {
  const auto& p = l.parallel;
  const auto gbs = [](double bw) { return fmt::format("{:.0f} GB/s", bw / 1e9); };
  const auto mb = [](double bytes) { return fmt::format("{:.2f} MB", bytes / 1e6); };
  std::vector<TimeTerm> out;
  if (st.stage_imbalance > 1)
    out.push_back({"compute", "(3·forward + recompute FLOPs)·(B/b) / N / (peak · efficiency) · busiest stage / average",
                   fmt::format("{:.4g} FLOP / ({:.0f} TFLOP/s · {:.2f}) · {:.3f}", st.hw_flops_per_gpu,
                               c.peak_flops / 1e12, c.compute_efficiency, st.stage_imbalance),
                   st.compute});
  else
    out.push_back({"compute", "(3·forward + recompute FLOPs)·(B/b) / N / (peak · efficiency)",
                   fmt::format("{:.4g} FLOP / ({:.0f} TFLOP/s · {:.2f})", st.hw_flops_per_gpu, c.peak_flops / 1e12,
                               c.compute_efficiency),
                   st.compute});
  if (p.tp > 1)
    out.push_back({"tensor parallel", "m · (L_stage · 4 + recomputed · 2) all-reduces · 2(t−1)/t · s/cp·b·h·bytes / bw",
                   fmt::format("{} micro-batches · {} layers · {} per layer · 2·{}/{} · {} / {}", st.num_micro_batches,
                               st.layers_per_stage, st.tp_allreduces, p.tp - 1, p.tp, mb(st.tp_message), gbs(st.tp_bw)),
                   st.tp});
  if (p.cp > 1)
    out.push_back({"context parallel (ring, exposed)", "m · L_stage · max(0, 3(c−1)·KV block / bw − attention core)",
                   fmt::format("{} · {} · max(0, 3·{}·{} / {} − {:.3g} s)", st.num_micro_batches, st.layers_per_stage,
                               p.cp - 1, mb(st.cp_block), gbs(st.cp_bw), st.attention_core),
                   st.cp});
  if (p.ep > 1)
    out.push_back({"expert parallel all-to-all", "m · MoE layers/pp · 4 · (e−1)/e · s/cp·b·k·h·bytes / bw",
                   fmt::format("{} · {} · 4 · {}/{} · {} / {}", st.num_micro_batches, st.moe_layers_per_stage, p.ep - 1,
                               p.ep, mb(st.ep_message), gbs(st.ep_bw)),
                   st.ep});
  if (p.pp > 1) {
    out.push_back({"pipeline p2p", "m · 2·v · s/cp·b·h·bytes (/t with sp) / bw",
                   fmt::format("{} · 2·{} · {} / {}", st.num_micro_batches, p.vpp, mb(st.pp_message), gbs(st.pp_bw)),
                   st.pp_p2p});
    out.push_back({"pipeline bubble", "(p−1)/(v·m) · (compute + tp + cp + ep)",
                   fmt::format("{}/({}·{}) · busy", p.pp - 1, p.vpp, st.num_micro_batches), st.bubble});
  }
  if (p.dp > 1) {
    const char* what = l.zero_stage == 0   ? "all-reduce 2(d−1)/d·Ψ·grad bytes"
                       : l.zero_stage < 3 ? "reduce-scatter + all-gather (d−1)/d·Ψ·(grad + weight bytes)"
                                          : "m · (d−1)/d·Ψ·(2·weight + grad bytes)";
    out.push_back({"data parallel (exposed)",
                   fmt::format("max(0, {} / bw − {})", what,
                               l.zero_stage < 3 ? "backward of the last micro-batch" : "compute (prefetched)"),
                   fmt::format("max(0, {} / {} − {:.3g} s)", mb(st.dp_bytes), gbs(st.dp_bw), st.dp_overlap), st.dp});
  }
  if (l.offload_optimizer)
    out.push_back({"optimizer offload (not overlapped)",
                   "Ψ shard · (grad + weight bytes) / PCIe + Ψ shard · 28 bytes / (host memory bandwidth / G)",
                   fmt::format("PCIe {}, host memory {} over {} GPUs", gbs(c.host_bandwidth), gbs(c.host_memory_bandwidth),
                               c.gpus_per_node),
                   st.offload});
  return out;
}

}  // namespace actmem
