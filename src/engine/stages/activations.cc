// Activations: what one micro-batch of the whole model keeps for backward under the recomputation
// plan (recompute_plan.h), layer kinds bound by layer_kinds.cc; the pipeline stage multiplies it by
// the micro-batches in flight. Its check: check_recompute (checks.cc). Its explanation: report.cc
// describe_activations, from what record_activations() leaves in the sink.
#include "engine/stages/account.h"

namespace actmem::detail {

int64_t storage_bytes(const Storage& st, const SymValues& v) {
  int64_t n = dtype_bytes(st.dtype);
  for (const Dim& d : st.shape) n = checked_mul(n, d.value(v));
  return n;
}

namespace {

int64_t kept(const Account& a, const KindBytes& k, int64_t position) {
  return a.plan.kept(k.none, k.selective, k.input, position);
}

/// explain(): the layers' bytes by group (attention, MLP, norms, MoE), summed over every layer; a
/// layer that keeps only its input (full recomputation, a torchtitan checkpointed block) counts it
/// under norms.
void record_layer_groups(const Account& a, RecordingSink& rec) {
  const GraphSet& g = *a.b.graphs;
  const RecomputePlan& plan = a.plan;
  SymValues v = a.b.values;
  for (Group grp : kLayerGroups) {
    Bytes sum{0};
    for (int64_t i = 0; i < a.p.model.num_layers; ++i) {
      const std::size_t k = a.p.kind_of[static_cast<std::size_t>(i)];
      if (a.l.recompute == Recompute::kFull || (plan.layer_sac() && plan.layer_sac_checkpointed(i))) {
        if (grp == Group::kNorms) sum += Bytes{kept(a, a.s.kinds[k], i)};
        continue;
      }
      v[static_cast<std::size_t>(Sym::kFfn)] = g.kinds[k].spec.ffn / a.par.tp;
      for (const auto& st : g.kinds[k].graph.storages)
        if (st.group == grp && st.saved(rec.layer_policy)) sum += Bytes{storage_bytes(st, v)};
    }
    rec.layer_groups[static_cast<std::size_t>(grp)] = sum.count();
  }
}

/// explain(): what describe_activations lists: the binding, the middle layer's symbol values, and
/// which policy each region's storages are listed under.
void record_activations(const Account& a, RecordingSink& rec) {
  const RecomputePlan& plan = a.plan;
  const bool full = a.l.recompute == Recompute::kFull;
  rec.binding = a.b;
  rec.mid_values = a.b.values;
  rec.mid_values[static_cast<std::size_t>(Sym::kFfn)] = a.b.graphs->kinds[a.p.middle_kind].spec.ffn / a.par.tp;
  // torchtitan's selective N: the listed layer is one that runs normally (per_layer's).
  rec.listed = plan.layer_sac() ? Recompute::kNone : a.l.recompute;
  rec.layer_policy = full || plan.layer_sac() ? Recompute::kNone : a.l.recompute;
  rec.shared_saved = plan.some_layer_not_recomputed();
  rec.shared_kept = plan.some_layer_recomputed();
  rec.partial = plan.partial();
  record_layer_groups(a, rec);
  rec.kinds = a.s.kinds;
  rec.embedding = a.embedding;
  rec.head_loss = a.head_loss;
  rec.shared = a.shared;
  rec.layers_total = a.layers.count();
}

}  // namespace

Bytes kept_run(const Account& a, int64_t first, int64_t n) {
  const Scratch& s = a.s;
  const RecomputePlan& plan = a.plan;
  const auto kind_at = [&](int64_t i) -> const KindBytes& { return s.kinds[a.p.kind_of[static_cast<std::size_t>(i)]]; };
  Bytes sum{0};
  if (plan.layer_sac()) {  // torchtitan: every N-th layer checkpointed, by position
    for (int64_t pos = 0; pos < n; ++pos) sum += Bytes{kept(a, kind_at(first + pos), pos)};
    return sum;
  }
  if (plan.strided()) {
    for (int64_t pos = 0; pos < n; pos += plan.checkpoint_every) sum += Bytes{kind_at(first + pos).input};
    return sum;
  }
  const int64_t inputs = plan.input_run(n);
  for (std::size_t k = 0; k < a.num_kinds; ++k) {
    const KindBytes& kb = s.kinds[k];
    sum += Bytes{kb.input} * a.p.count(k, first, first + inputs) +
           Bytes{a.l.recompute == Recompute::kSelective ? kb.selective : kb.none} * a.p.count(k, first + inputs, first + n);
  }
  return sum;
}

void account_activations(Account& a) {
  const GraphSet& g = *a.b.graphs;
  a.plan = RecomputePlan::of(a.l, a.b.chunk_layers);
  // Shared storages: saved by the layers that run normally, kept by the checkpointed ones
  // (Storage::kept_shared), each once.
  const bool run_normally = a.plan.some_layer_not_recomputed();
  const bool recomputed = a.plan.some_layer_recomputed();
  a.shared = (run_normally ? eval(g.shared.none, a.v) : 0) +
             (recomputed ? eval(run_normally ? g.shared.checkpointed_only : g.shared.checkpointed, a.v) : 0);

  // One micro-batch, the whole model as one stage (one recomputation unit).
  const int64_t num_layers = a.p.model.num_layers;
  a.layers = kept_run(a, 0, num_layers);
  double forward = 2.0 * a.tokens * a.p.lm_head_macs;
  for (std::size_t k = 0; k < a.num_kinds; ++k)
    forward += static_cast<double>(a.p.count(k, 0, num_layers)) * a.s.kinds[k].flops;
  const KindBytes& mid = a.s.kinds[a.p.middle_kind];
  a.t.activations_total = (Bytes{a.embedding} + a.layers + Bytes{a.head_loss} + Bytes{a.shared}).count();
  // Under full recomputation per_layer is a recomputed layer (its input), unless none is recomputed.
  a.t.per_layer = a.plan.per_layer_is_input() ? mid.input : kept(a, mid, 0);
  a.t.forward_flops = forward;
  if (a.rec) record_activations(a, *a.rec);
}

}  // namespace actmem::detail
