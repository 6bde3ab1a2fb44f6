// The step as a timeline (timeline.h): what account() recorded for the peak stage, laid out in the
// order the step allocates and frees it.
#include "engine/timeline.h"

#include <algorithm>

#include <fmt/format.h>

namespace actmem::detail {

const char* tensor_kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::kWeights: return "weights";
    case TensorKind::kGradients: return "gradients";
    case TensorKind::kOptimizer: return "optimizer";
    case TensorKind::kFp8Cache: return "fp8_weight_cache";
    case TensorKind::kWorkspaces: return "workspaces";
    case TensorKind::kActivations: return "activations";
    case TensorKind::kTransient: return "transient";
  }
  return "activations";
}

namespace {

/// Builds the events, keeping the running allocated bytes and their first peak.
class Builder {
 public:
  explicit Builder(StepTimeline& out) : out_(out) {}
  int64_t alloc(TensorKind kind, int64_t bytes, std::string name) {
    const int64_t id = static_cast<int64_t>(alloc_at_.size()) + 1;
    alloc_at_.push_back(out_.events.size());
    out_.events.push_back({true, kind, id, bytes, std::move(name)});
    live_ += bytes;
    if (live_ > out_.allocated_peak) {
      out_.allocated_peak = live_;
      out_.peak_event = static_cast<int64_t>(out_.events.size()) - 1;
    }
    return id;
  }
  void free(int64_t id) {
    StepEvent e = out_.events[alloc_at_[static_cast<std::size_t>(id - 1)]];
    live_ -= e.bytes;
    e.alloc = false;
    out_.events.push_back(std::move(e));
  }
  void note(std::string text) {
    auto& notes = out_.notes;
    if (std::find(notes.begin(), notes.end(), text) == notes.end()) notes.push_back(std::move(text));
  }

 private:
  StepTimeline& out_;
  std::vector<std::size_t> alloc_at_;  // id − 1 -> the index of its alloc
  int64_t live_ = 0;
};

/// The storages of `g` a layer keeps under `keeps`, as storage_bytes() sizes them.
template <typename F>
void kept_storages(const Graph& g, RecomputePlan::Keeps keeps, F&& each) {
  if (g.records_nothing || keeps == RecomputePlan::Keeps::kNothing || g.storages.empty()) return;
  if (keeps == RecomputePlan::Keeps::kInput) {
    each(g.storages.front());
    return;
  }
  const Recompute policy = keeps == RecomputePlan::Keeps::kSelective ? Recompute::kSelective : Recompute::kNone;
  for (const Storage& st : g.storages)
    if (st.saved(policy)) each(st);
}

struct Walker {
  const Prepared& p;
  const Layout& l;
  const RecordingSink& rec;
  Builder& b;
  SymValues values;  // the binding with the last kind's FFN (what embedding and head are evaluated with)

  /// Allocates what layer `layer` (position `pos` of its chunk) keeps of micro-batch `prefix`;
  /// returns the ids, in order.
  void layer(int64_t layer, int64_t pos, const std::string& prefix, std::vector<int64_t>& ids) {
    const std::size_t k = p.kind_of[static_cast<std::size_t>(layer)];
    const LayerKind& kind = rec.binding.graphs->kinds[k];
    const KindBytes& kb = rec.kinds[k];
    const RecomputePlan::Keeps keeps = rec.plan.keeps(pos);
    const int64_t expected = rec.plan.kept(kb.none, kb.selective, kb.input, pos);
    SymValues v = rec.binding.values;
    v[static_cast<std::size_t>(Sym::kFfn)] = kind.spec.ffn / l.parallel.tp;
    int64_t sum = 0;
    const std::size_t first = ids.size();
    kept_storages(kind.graph, keeps, [&](const Storage& st) {
      const int64_t bytes = storage_bytes(st, v);
      sum += bytes;
      ids.push_back(b.alloc(TensorKind::kActivations, bytes, fmt::format("{}layers.{}.{}", prefix, layer, st.name)));
    });
    if (sum == expected) return;
    // The storages do not add up to the polynomial (never seen): the layer as one block, exact.
    for (std::size_t i = first; i < ids.size(); ++i) b.free(ids[i]);
    ids.resize(first);
    b.note("a layer whose saved storages do not add up to its kind's bytes is one block");
    if (expected > 0)
      ids.push_back(b.alloc(TensorKind::kActivations, expected, fmt::format("{}layers.{}", prefix, layer)));
  }

  void graph(const Graph& g, const std::string& prefix, std::vector<int64_t>& ids) {
    kept_storages(g, RecomputePlan::Keeps::kAll, [&](const Storage& st) {
      ids.push_back(b.alloc(TensorKind::kActivations, storage_bytes(st, values), prefix + st.name));
    });
  }
};

}  // namespace

StepTimeline step_timeline(const Prepared& p, const Layout& l, const Totals& t, const RecordingSink& rec) {
  StepTimeline out;
  Builder b(out);
  const int64_t rank = t.peak_stage;
  const ParallelLayout& par = l.parallel;
  const auto at = static_cast<std::size_t>(rank);
  const StageTotals* stage = rank >= 0 && at < rec.stages.size() ? &rec.stages[at] : nullptr;
  // Held through the step.
  const std::pair<TensorKind, int64_t> held[] = {
      {TensorKind::kWeights, stage ? stage->weights : t.weights},
      {TensorKind::kGradients, stage ? stage->gradients : t.gradients},
      {TensorKind::kOptimizer, stage ? stage->optimizer : t.optimizer},
      {TensorKind::kFp8Cache, t.fp8_weight_cache},
      {TensorKind::kWorkspaces, t.workspaces}};
  for (const auto& [kind, bytes] : held)
    if (bytes > 0) b.alloc(kind, bytes, tensor_kind_name(kind));
  if (p.param_only || !rec.binding.graphs) {
    b.note("--params: no layers, so no activations or transients: the held state alone");
    return out;
  }
  Walker w{p, l, rec, b, rec.binding.values};
  const auto& kinds = rec.binding.graphs->kinds;
  w.values[static_cast<std::size_t>(Sym::kFfn)] = kinds.back().spec.ffn / par.tp;
  const GraphSet& g = *rec.binding.graphs;
  const bool last = rank == par.pp - 1;
  std::vector<int64_t> current;  // the ids of the micro-batch whose backward follows the peak
  if (rec.peak_on_gpu != rec.peak_in_flight) {
    // Offloading: what stays on the GPU, one block (the host copies are not GPU memory).
    b.note("activation offloading: the saved activations left on the GPU are one block");
    if (rec.peak_on_gpu > 0)
      current.push_back(b.alloc(TensorKind::kActivations, rec.peak_on_gpu, "saved activations left on the GPU"));
  } else {
    // Forward: the micro-batches in flight at the peak step, chunk by chunk (rec.peak_counts).
    const PipelineSplit& split = rec.binding.split;
    const int64_t vpp = par.vpp;
    int64_t most = 0;
    for (int64_t c : rec.peak_counts) most = std::max(most, c);
    bool shared_done = false;
    for (int64_t m = 0; m < most; ++m)
      for (int64_t j = 0; j < vpp; ++j) {
        if (m >= rec.peak_counts[static_cast<std::size_t>(j)]) continue;
        std::vector<int64_t> ids;
        const std::string prefix = most > 1 ? fmt::format("mb {} · ", m + 1) : "";
        if (rank == 0 && j == 0) w.graph(g.embedding, prefix, ids);
        if (!shared_done) {  // once per stage
          shared_done = true;
          for (const Storage& st : g.shared.storages)
            if (st.kept_shared(rec.shared_saved, rec.shared_kept))
              ids.push_back(b.alloc(TensorKind::kActivations, storage_bytes(st, w.values), st.name));
        }
        const int64_t c = split.chunk_of(rank, j);
        const int64_t begin = split.chunk_begin(c), n = split.chunk_size(c);
        for (int64_t pos = 0; pos < n; ++pos) w.layer(begin + pos, pos, prefix, ids);
        if (last && j == vpp - 1) w.graph(g.head, prefix, ids);
        current = std::move(ids);
      }
  }
  // The peak: FSDP2's unsharded working set around the stage's transients, each in turn.
  std::vector<int64_t> fsdp2;
  const Fsdp2Transient& f = rec.fsdp2;
  for (const auto& [name, bytes] : {std::pair{"FSDP2: two unsharded blocks", f.gathered_blocks},
                                    std::pair{"FSDP2: unsharded norm and output", f.head_unsharded},
                                    std::pair{"FSDP2: unsharded block gradients", f.block_grads}})
    if (bytes > Bytes{0}) fsdp2.push_back(b.alloc(TensorKind::kTransient, bytes.count(), name));
  for (const NamedTransient& tr : rec.peak_transients)
    if (tr.bytes > 0) b.free(b.alloc(TensorKind::kTransient, tr.bytes, tr.name));
  for (auto it = fsdp2.rbegin(); it != fsdp2.rend(); ++it) b.free(*it);
  // Backward of that micro-batch: its storages freed, last first.
  for (auto it = current.rbegin(); it != current.rend(); ++it) b.free(*it);
  return out;
}

AllocatorTrace to_allocator_trace(const StepTimeline& timeline) {
  AllocatorTrace trace;
  trace.source = "actmem step timeline";
  trace.events.reserve(timeline.events.size());
  for (const StepEvent& e : timeline.events)
    trace.events.push_back({e.alloc ? TraceEvent::kAlloc : TraceEvent::kFree, e.id, e.alloc ? e.bytes : 0, 0, e.name});
  return trace;
}

Expected<TimelineMemory> replay_timeline(const StepTimeline& timeline, const std::string& alloc_conf) {
  auto config = AllocatorConfig::parse(alloc_conf);
  if (!config) return config.error();
  auto r = replay_trace(to_allocator_trace(timeline), *config, AllocatorDevice{});
  if (!r) return r.error();
  return TimelineMemory{.events = static_cast<int64_t>(timeline.events.size()),
                        .allocated_peak = r->stats.requested_peak,
                        .rounded_peak = r->stats.allocated_peak,
                        .reserved_peak = r->stats.reserved_peak,
                        .segments = r->stats.device_allocs,
                        .notes = timeline.notes};
}

}  // namespace actmem::detail
