// Recomputation: a recomputed unit is rerun in backward, and its activations live again beside what
// it keeps until its backward is done: the largest such unit is a transient (transients.cc); the
// reruns' forward FLOPs are the recomputation cost. Its check: check_recompute (checks.cc). Its
// explanation: the recompute_segment term (report.cc describe_transients) and the FLOPs shares.
#include "engine/stages/account.h"

#include <algorithm>

namespace actmem::detail {

namespace {

struct Rerun {
  Bytes peak{0};
  double flops = 0;
};

/// torchtitan's every-N-th-layer SAC: a checkpointed layer is rerun in backward, its activations
/// live again beside its input.
Rerun layer_sac_rerun(const Account& a) {
  Rerun r;
  for (int64_t i = 0; i < a.p.model.num_layers; ++i) {
    if (!a.plan.layer_sac_checkpointed(i)) continue;
    const KindBytes& kb = a.s.kinds[a.p.kind_of[static_cast<std::size_t>(i)]];
    r.peak = std::max(r.peak, Bytes{kb.none} - Bytes{kb.input});
    r.flops += kb.flops;
  }
  return r;
}

/// Selective recomputation. torchtitan's per-op SAC: the rerun allocates what it does not find in
/// the cache; it reruns every second mm. Megatron's: core attention (and the MLP with
/// recompute_modules mlp) rerun.
Rerun selective_rerun(const Account& a) {
  Rerun r;
  const Scratch& s = a.s;
  const int64_t num_layers = a.p.model.num_layers;
  if (a.w.framework == Framework::kTorchtitan) {
    const GraphSet& g = *a.b.graphs;
    for (std::size_t k = 0; k < a.num_kinds; ++k) {
      r.peak = std::max(r.peak, Bytes{s.kinds[k].rerun});
      r.flops += static_cast<double>(a.p.count(k, 0, num_layers)) * 2.0 * a.tokens * g.kinds[k].op_sac_recompute_macs;
    }
    return r;
  }
  for (std::size_t k = 0; k < a.num_kinds; ++k)
    r.peak = std::max(r.peak, Bytes{s.kinds[k].none} - Bytes{s.kinds[k].selective});
  for (std::size_t k = 0; k < a.num_kinds; ++k)
    r.flops += static_cast<double>(a.p.count(k, 0, num_layers)) * s.kinds[k].selective_flops;
  return r;
}

/// Full recomputation. Segments never cross a model chunk (a stage's share of layers); with
/// recompute_layers only the first N layers of each chunk are rerun.
Rerun full_rerun(const Account& a) {
  Rerun r;
  Scratch& s = a.s;
  const PipelineSplit& split = a.b.split;
  const auto kind_at = [&](int64_t i) -> const KindBytes& { return s.kinds[a.p.kind_of[static_cast<std::size_t>(i)]]; };
  const int64_t segment = a.plan.segment();
  // evaluate(), one-layer segments: a rerun layer's peak is its kind's (none − input), so the
  // largest is over the kinds that some chunk reruns (counted below), not over every layer; and
  // chunks follow each other in layer order, so chunk c + 1 begins where chunk c ends.
  // explain() takes every layer and chunk_begin(), the reference fast_path_test checks against.
  const bool reference = a.rec != nullptr;
  const bool by_kind = !reference && segment == 1;
  s.kind_rerun.assign(a.num_kinds, 0);
  int64_t next_first = 0;
  for (int64_t c = 0, rank = 0; c < a.par.pp * a.par.vpp; ++c, rank = rank + 1 == a.par.pp ? 0 : rank + 1) {
    const int64_t first = reference ? split.chunk_begin(c) : next_first;
    const int64_t n = reference ? split.chunk_size(c) : split.chunk_size_on_rank(rank);
    next_first = first + n;
    const int64_t rerun = a.plan.rerun(n);
    for (int64_t pos = 0; !by_kind && pos < rerun; pos += segment) {
      Bytes seg{0};
      for (int64_t i = first + pos; i < first + std::min(n, pos + segment); ++i) seg += Bytes{kind_at(i).none};
      r.peak = std::max(r.peak, seg - Bytes{kind_at(first + pos).input});
    }
    for (std::size_t k = 0; k < a.num_kinds; ++k) {
      const int64_t reruns = a.p.count(k, first, first + rerun);
      s.kind_rerun[k] += reruns;
      r.flops += static_cast<double>(reruns) * s.kinds[k].flops;
    }
  }
  for (std::size_t k = 0; by_kind && k < a.num_kinds; ++k)
    if (s.kind_rerun[k] > 0) r.peak = std::max(r.peak, Bytes{s.kinds[k].none} - Bytes{s.kinds[k].input});
  return r;
}

}  // namespace

void account_recompute(Account& a) {
  Rerun r;
  if (a.plan.layer_sac())
    r = layer_sac_rerun(a);
  else if (a.l.recompute == Recompute::kSelective)
    r = selective_rerun(a);
  else if (a.l.recompute == Recompute::kFull)
    r = full_rerun(a);
  a.t.recompute_peak = r.peak.count();
  a.t.recompute_flops = r.flops;
}

}  // namespace actmem::detail
