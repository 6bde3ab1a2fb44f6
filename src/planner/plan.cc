// actmem.h first: it declares what the planner builds on, then includes the planner's headers.
#include "engine/prepared.h"
#include "planner/plan.h"
#include "policies/pipeline_split.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace actmem {

namespace {

std::vector<int64_t> divisors(int64_t n, int64_t max) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n && d <= max; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

bool pinned_or(const std::optional<int64_t>& pin, int64_t v) { return !pin || *pin == v; }

/// How `num_layers` go onto pp stages of vpp chunks each: (first stage, last stage) layers, 0 for
/// the even share. Even when pp·vpp divides the layers; otherwise the uneven splits Megatron-core
/// can run (--decoder-first/last-pipeline-num-layers: the other stages equal, every stage a
/// multiple of vpp) with the smallest largest stage, the first and last stage no larger than the
/// others (they also hold the embedding and the LM head). Llama 3 405B: 126 layers on pp 16 give
/// (6, 8), (7, 7), (8, 6) at vpp 1 and (6, 8), (8, 6) at vpp 2. Empty when none exists.
std::vector<std::pair<int64_t, int64_t>> stage_splits(int64_t num_layers, int64_t pp, int64_t vpp) {
  if (num_layers % (pp * vpp) == 0) return {{0, 0}};
  std::vector<std::pair<int64_t, int64_t>> out;
  if (pp < 2 || num_layers % vpp != 0) return out;
  // The largest stage M: the smallest multiple of vpp with L <= pp·M for which first + last =
  // L − (pp−2)·M splits into two multiples of vpp, each in [vpp, M].
  for (int64_t stage = (num_layers + pp - 1) / pp; out.empty() && stage <= num_layers; ++stage) {
    if (stage % vpp != 0) continue;
    const int64_t ends = num_layers - (pp - 2) * stage;
    if (ends < 2 * vpp) break;
    for (int64_t first = vpp; first <= stage; first += vpp) {
      const int64_t last = ends - first;
      if (last < vpp || last > stage || last % vpp != 0) continue;
      out.emplace_back(first == stage ? 0 : first, last == stage ? 0 : last);
    }
  }
  return out;
}

/// The search's loops, in one place: plan() and candidate_layouts() both walk them.
template <typename Visit>
void enumerate(const PreparedModel& model, const PlanRequest& r, Visit&& visit) {
  const ModelSpec* m = model.model();
  const int64_t num_layers = m ? m->num_layers : 1;
  const int64_t experts = m && m->is_moe() ? m->moe->num_experts : 1;
  const int64_t max_tp = r.max_tp > 0 ? r.max_tp : r.cluster.gpus_per_node;
  const Recompute recomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const bool fsdp2 = model.workload().framework == Framework::kTorchtitan;
  Layout l;
  l.seq_len = r.seq_len;
  // TP stays inside a node: its degree divides the node's GPUs (and the world).
  for (int64_t tp : divisors(r.cluster.gpus_per_node, max_tp)) {
    if (r.gpus % tp != 0 || !pinned_or(r.tp, tp) || (m && m->num_heads % tp != 0)) continue;
    for (int64_t cp : divisors(r.gpus / tp, r.max_cp)) {
      if (!pinned_or(r.cp, cp) || (cp > 1 && (!m || r.seq_len % (2 * cp) != 0))) continue;
      for (int64_t pp : divisors(r.gpus / (tp * cp), r.max_pp)) {
        if (!pinned_or(r.pp, pp) || pp > num_layers) continue;
        const int64_t dp = r.gpus / (tp * cp * pp);
        if (!pinned_or(r.dp, dp) || r.global_batch % dp != 0) continue;
        for (int64_t vpp = 1; vpp <= (pp > 1 ? r.max_vpp : 1); ++vpp) {
          if (!pinned_or(r.vpp, vpp)) continue;
          for (const auto& [first, last] : stage_splits(num_layers, pp, vpp))
          for (int64_t ep : divisors(dp * cp, r.max_ep)) {  // carved out of the dp·cp ranks (layout_checks.h)
            if (!pinned_or(r.ep, ep) || experts % ep != 0) continue;
            for (int64_t b : divisors(r.global_batch / dp, r.max_micro_batch)) {
              if (!pinned_or(r.micro_batch, b)) continue;
              const int64_t micro_batches = r.global_batch / (dp * b);
              if (vpp > 1 && micro_batches % pp != 0) continue;
              // ZeRO-2/3 do not combine with pipeline parallelism (DeepSpeed's PipelineEngine asserts
              // "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"; Megatron's distributed
              // optimizer is ZeRO-1).
              // torchtitan shards with FSDP2 whatever the ZeRO stage says (fsdp2.h): one value, 3.
              for (int zero = fsdp2 ? 3 : 0; zero <= (dp * cp == 1 ? 0 : pp > 1 ? 1 : 3); ++zero) {
                if (r.zero && *r.zero != zero) continue;
                for (Recompute rc : recomputes) {
                  if (r.recompute && *r.recompute != rc) continue;
                  for (int sp = tp > 1 && m ? 1 : 0; sp >= 0; --sp) {
                    if (r.sp && *r.sp != (sp == 1)) continue;
                    for (int off = 0; off <= 1; ++off) {
                      if (r.offload_optimizer ? *r.offload_optimizer != (off == 1) : off == 1 && zero == 0) continue;
                      l.micro_batch = b;
                      l.parallel = {.dp = dp, .tp = tp, .sp = sp == 1, .pp = pp, .vpp = vpp, .cp = cp, .ep = ep,
                                    .num_micro_batches = micro_batches, .first_stage_layers = first,
                                    .last_stage_layers = last};
                      l.zero_stage = zero;
                      l.recompute = rc;
                      l.offload_optimizer = off == 1;
                      visit(l);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

/// Faster first; equal times (sequence parallelism costs no time here): less memory first.
bool better(const PlannedLayout& a, const PlannedLayout& b) {
  if (a.time.total != b.time.total) return a.time.total < b.time.total;
  return a.totals.total < b.totals.total;
}

Expected<void> check_request(const PreparedModel& model, const PlanRequest& r) {
  const struct {
    const char* field;
    int64_t value, lo, hi;
  } ranges[] = {
      {"gpus", r.gpus, 1, limits::kMaxDp},
      {"gpus_per_node", r.cluster.gpus_per_node, 1, 1024},
      {"seq_len", r.seq_len, 1, limits::kMaxSeqLen},
      {"global_batch", r.global_batch, 1, limits::kMaxMicroBatches * 1024},
      {"max_tp", r.max_tp, 0, limits::kMaxTp},
      {"max_pp", r.max_pp, 1, limits::kMaxPp},
      {"max_vpp", r.max_vpp, 1, limits::kMaxVpp},
      {"max_cp", r.max_cp, 1, limits::kMaxCp},
      {"max_ep", r.max_ep, 1, limits::kMaxEp},
      {"max_micro_batch", r.max_micro_batch, 1, limits::kMaxMicroBatch},
  };
  for (const auto& x : ranges)
    if (x.value < x.lo || x.value > x.hi)
      return Error{ErrorKind::kInvalid, x.field,
                   fmt::format("@{} {} is out of range; use {}..{}", x.field, x.value, x.lo, x.hi)};
  if (r.capacity <= Bytes{0})
    return Error{ErrorKind::kInvalid, "gpu", "@gpu: the planner needs a GPU (@gpu NAME) or its memory (@gpu_memory SIZE)"};
  if (!(r.cluster.peak_flops > 0) || !(r.cluster.intra_node_bandwidth > 0) || !(r.cluster.inter_node_bandwidth > 0) ||
      !(r.cluster.compute_efficiency > 0 && r.cluster.compute_efficiency <= 1) ||
      !(r.cluster.collective_efficiency > 0 && r.cluster.collective_efficiency <= 1))
    return Error{ErrorKind::kInvalid, "gpu",
                 "@gpu: the time model needs the GPU's bf16 peak and link bandwidth (from the catalog, @gpu NAME), "
                 "bandwidths > 0 and efficiencies in (0, 1]"};
  const struct {
    const char* field;
    const std::optional<int64_t>& pin;
    int64_t hi;
  } pin_ranges[] = {{"vpp", r.vpp, limits::kMaxVpp}, {"ep", r.ep, limits::kMaxEp},
                    {"micro_batch", r.micro_batch, limits::kMaxMicroBatch}};
  for (const auto& x : pin_ranges)
    if (x.pin && (*x.pin < 1 || *x.pin > x.hi))
      return Error{ErrorKind::kInvalid, x.field, fmt::format("@{} {} is out of range; use 1..{}", x.field, *x.pin, x.hi)};
  if (r.zero && (*r.zero < 0 || *r.zero > 3))
    return Error{ErrorKind::kInvalid, "zero_stage", fmt::format("@zero_stage {} is out of range; use 0..3", *r.zero)};
  // Pins that can never hold, said before searching (the search would just find nothing).
  const struct {
    const char* field;
    const std::optional<int64_t>& pin;
    int64_t divides;
  } pins[] = {{"tp", r.tp, r.gpus}, {"pp", r.pp, r.gpus}, {"cp", r.cp, r.gpus}, {"dp", r.dp, r.gpus}};
  for (const auto& x : pins)
    if (x.pin && (*x.pin < 1 || x.divides % *x.pin != 0))
      return Error{ErrorKind::kIncompatible, x.field,
                   fmt::format("@{} {} does not divide @gpus {}", x.field, *x.pin, r.gpus)};
  if (r.tp && r.cluster.gpus_per_node % *r.tp != 0)
    return Error{ErrorKind::kIncompatible, "tp",
                 fmt::format("@tp {}: tensor parallelism stays inside a node, so it must divide @gpus_per_node {}",
                             *r.tp, r.cluster.gpus_per_node)};
  const int64_t fixed = r.tp.value_or(1) * r.pp.value_or(1) * r.cp.value_or(1) * r.dp.value_or(1);
  if (r.gpus % fixed != 0)
    return Error{ErrorKind::kIncompatible, "gpus",
                 fmt::format("the pinned degrees multiply to {}, which does not divide @gpus {}", fixed, r.gpus)};
  if (const ModelSpec* m = model.model(); m && r.pp && stage_splits(m->num_layers, *r.pp, r.vpp.value_or(1)).empty())
    return Error{ErrorKind::kIncompatible, "pp",
                 fmt::format("@pp {}: num_hidden_layers ({}) splits over {} stages neither evenly nor as Megatron's "
                             "uneven first/last stages allow",
                             *r.pp, m->num_layers, *r.pp)};
  return {};
}

int64_t bisect_recomputed_layers(const PreparedModel& model, Layout layout, Bytes capacity, const Allowances& a,
                                 int64_t lo, int64_t hi, int64_t& evaluated);  // with the solvers below

}  // namespace

std::vector<Layout> candidate_layouts(const PreparedModel& model, const PlanRequest& request) {
  std::vector<Layout> out;
  enumerate(model, request, [&](const Layout& l) { out.push_back(l); });
  return out;
}

Expected<PlanResult> plan(const PreparedModel& model, const PlanRequest& request) {
  if (auto ok = check_request(model, request); !ok) return ok.error();
  PlanResult result;
  result.best.reserve(request.keep + 1);
  const auto start = std::chrono::steady_clock::now();
  Totals t;
  std::optional<Layout> first_refused;
  PlannedLayout candidate;
  const auto keep = [&](const Layout& l, const Totals& totals, const FitVerdict& fit) {
    candidate.layout = l;
    candidate.totals = totals;
    candidate.fit = fit;
    candidate.time = step_time(model.model(), model.workload(), l, totals, request.global_batch, request.cluster);
    if (result.best.size() == request.keep && !better(candidate, result.best.back())) return;
    auto at = std::upper_bound(result.best.begin(), result.best.end(), candidate, better);
    result.best.insert(at, candidate);
    if (result.best.size() > request.keep) result.best.pop_back();
  };
  enumerate(model, request, [&](const Layout& l) {
    ++result.searched;
    if (!evaluate(model, l, t)) {
      if (!first_refused) first_refused = l;
      return;
    }
    ++result.valid;
    const FitVerdict fit = check_fit(t, l.parallel, request.capacity, request.allowances);
    if (!fit.fits) {
      if (result.fitting == 0 && (!result.closest || fit.needed < result.closest->fit.needed)) {
        result.closest = PlannedLayout{l, t, fit, {}};
        result.closest->time = step_time(model.model(), model.workload(), l, t, request.global_batch, request.cluster);
      }
      return;
    }
    ++result.fitting;
    keep(l, t, fit);
    // Full recomputation fits: the fewest recomputed layers per chunk that still fit run faster
    // (Megatron's --recompute-method block --recompute-num-layers N), found by bisection.
    // Not when recomputation is pinned: `--recompute full` means every layer, as in estimate.
    if (l.recompute == Recompute::kFull && l.recompute_layers < 0 && !request.recompute) {
      Layout fewer = l;
      const int64_t per_chunk =
          model.model() ? detail::PipelineSplit::of(model.model()->num_layers, l.parallel).largest_chunk() : 0;
      // n = 0 is no recomputation, which the search visits on its own.
      const int64_t n = per_chunk > 1 ? bisect_recomputed_layers(model, l, request.capacity, request.allowances, 1,
                                                                 per_chunk, result.refined)
                                      : per_chunk;
      if (n < per_chunk) {
        fewer.recompute_layers = n;
        ++result.refined;
        if (evaluate(model, fewer, t)) {
          keep(fewer, t, check_fit(t, fewer.parallel, request.capacity, request.allowances));
        }
      }
    }
  });

  result.search_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (result.fitting > 0) result.closest.reset();
  if (result.valid == 0 && first_refused) {
    auto refused = explain(model, *first_refused);
    if (!refused) result.refusal = refused.error();
  }
  return result;
}

std::string layout_flags(const Layout& l) {
  const auto& p = l.parallel;
  std::string s = fmt::format("--seq-len {} --micro-batch {} --dp {} --tp {}", l.seq_len, l.micro_batch, p.dp, p.tp);
  if (p.sp) s += " --sp";
  s += fmt::format(" --pp {}", p.pp);
  if (p.vpp > 1) s += fmt::format(" --vpp {}", p.vpp);
  if (p.cp > 1) s += fmt::format(" --cp {}", p.cp);
  if (p.ep > 1) s += fmt::format(" --ep {}", p.ep);
  if (p.first_stage_layers > 0) s += fmt::format(" --first-stage-layers {}", p.first_stage_layers);
  if (p.last_stage_layers > 0) s += fmt::format(" --last-stage-layers {}", p.last_stage_layers);
  if (p.num_micro_batches > 0) s += fmt::format(" --num-micro-batches {}", p.num_micro_batches);
  if (l.zero_stage > 0) s += fmt::format(" --zero {}", l.zero_stage);
  if (l.recompute != Recompute::kNone) s += fmt::format(" --recompute {}", kRecomputeNames.name(l.recompute));
  if (l.recompute_layers >= 0) s += fmt::format(" --recompute-layers {}", l.recompute_layers);
  if (l.checkpoint_every > 0) s += fmt::format(" --checkpoint-every {}", l.checkpoint_every);
  if (l.offload_optimizer) s += " --offload-optimizer";
  return s;
}

const char* dominant_memory(const Totals& t) {
  const struct {
    const char* name;
    int64_t bytes;
  } parts[] = {{"weights", t.weights},         {"gradients", t.gradients}, {"optimizer", t.optimizer},
               {"activations", t.activations}, {"transient", t.transient}, {"reserve", t.reserve},
               {"fp8_weight_cache", t.fp8_weight_cache}};
  const auto* best = &parts[0];
  for (const auto& x : parts)
    if (x.bytes > best->bytes) best = &x;
  return best->name;
}

// ---- Solvers ----------------------------------------------------------------------------------

namespace {

/// The verdict for one layout, or nullopt when the engine rejects it.
std::optional<FitVerdict> verdict(const PreparedModel& model, const Layout& l, Bytes capacity, const Allowances& a,
                                  Totals& t) {
  if (!evaluate(model, l, t)) return std::nullopt;
  return check_fit(t, l.parallel, capacity, a);
}

bool fits(const PreparedModel& model, const Layout& l, Bytes capacity, const Allowances& a) {
  Totals t;
  auto v = verdict(model, l, capacity, a, t);
  return v && v->fits;
}

}  // namespace

int64_t largest_micro_batch(const PreparedModel& model, Layout layout, int64_t global_batch, Bytes capacity,
                            const Allowances& a) {
  const int64_t per_replica = global_batch / layout.parallel.dp;
  if (per_replica < 1) return 0;
  auto options = divisors(per_replica, limits::kMaxMicroBatch);
  for (auto it = options.rbegin(); it != options.rend(); ++it) {
    layout.micro_batch = *it;
    layout.parallel.num_micro_batches = per_replica / *it;
    if (fits(model, layout, capacity, a)) return *it;
  }
  return 0;
}

int64_t longest_sequence(const PreparedModel& model, Layout layout, Bytes capacity, const Allowances& a, int64_t step,
                         int64_t max_seq) {
  if (step < 1) return 0;
  // Memory grows with the sequence: the largest k with k·step fitting, by bisection.
  int64_t lo = 0, hi = max_seq / step;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    layout.seq_len = mid * step;
    if (fits(model, layout, capacity, a))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo * step;
}

namespace {

/// The fewest n in [lo, hi] recomputed layers per chunk for which `layout` fits, given that hi
/// fits; `evaluated` counts the engine calls.
int64_t bisect_recomputed_layers(const PreparedModel& model, Layout layout, Bytes capacity, const Allowances& a,
                                 int64_t lo, int64_t hi, int64_t& evaluated) {
  layout.recompute = Recompute::kFull;
  layout.checkpoint_every = 0;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    layout.recompute_layers = mid;
    ++evaluated;
    if (fits(model, layout, capacity, a))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

}  // namespace

int64_t fewest_recomputed_layers(const PreparedModel& model, Layout layout, Bytes capacity, const Allowances& a) {
  const ModelSpec* m = model.model();
  if (!m) return -1;
  const int64_t per_chunk = detail::PipelineSplit::of(m->num_layers, layout.parallel).largest_chunk();
  layout.recompute = Recompute::kFull;
  layout.checkpoint_every = 0;
  layout.recompute_layers = per_chunk;
  if (!fits(model, layout, capacity, a)) return -1;
  int64_t evaluated = 0;
  return bisect_recomputed_layers(model, layout, capacity, a, 0, per_chunk, evaluated);
}

std::vector<Change> what_to_change(const PreparedModel& model, const Layout& base, int64_t global_batch,
                                   Bytes capacity, const Allowances& a, const Cluster& cluster, std::size_t keep) {
  Totals t0;
  const auto v0 = verdict(model, base, capacity, a, t0);
  if (!v0) return {};
  const StepTime time0 = step_time(model.model(), model.workload(), base, t0, global_batch, cluster);

  // Single changes: each named by its flags.
  std::vector<std::pair<std::string, Layout>> moves;
  const auto& p = base.parallel;
  const int64_t per_replica = global_batch / p.dp;
  for (Recompute rc : {Recompute::kSelective, Recompute::kFull})
    if (base.recompute != rc && !(base.recompute == Recompute::kFull)) {
      Layout l = base;
      l.recompute = rc;
      l.recompute_layers = -1;
      moves.emplace_back(fmt::format("--recompute {}", kRecomputeNames.name(rc)), l);
    }
  if (const int64_t n = fewest_recomputed_layers(model, base, capacity, a);
      n > 0 && model.model() && n < detail::PipelineSplit::of(model.model()->num_layers, p).largest_chunk()) {
    Layout l = base;
    l.recompute = Recompute::kFull;
    l.recompute_layers = n;
    l.checkpoint_every = 0;
    moves.emplace_back(fmt::format("--recompute full --recompute-layers {}", n), l);
  }
  for (int z = base.zero_stage + 1; z <= 3 && p.dp * p.cp > 1; ++z) {
    Layout l = base;
    l.zero_stage = z;
    moves.emplace_back(fmt::format("--zero {}", z), l);
  }
  if (!base.offload_optimizer) {
    Layout l = base;
    l.offload_optimizer = true;
    moves.emplace_back("--offload-optimizer", l);
  }
  if (p.tp > 1 && !p.sp) {
    Layout l = base;
    l.parallel.sp = true;
    moves.emplace_back("--sp", l);
  }
  for (int64_t b = base.micro_batch / 2; b >= 1; b /= 2) {
    if (base.micro_batch % b != 0 || per_replica % b != 0) continue;
    Layout l = base;
    l.micro_batch = b;
    l.parallel.num_micro_batches = per_replica / b;
    moves.emplace_back(fmt::format("--micro-batch {} --num-micro-batches {}", b, per_replica / b), l);
  }
  // More model parallelism, the GPUs taken from data parallelism (the global batch stays).
  const auto regroup = [&](const char* flag, int64_t factor, auto set) {
    if (p.dp % factor != 0) return;
    Layout l = base;
    l.parallel.dp = p.dp / factor;
    set(l.parallel);
    if (global_batch % (l.parallel.dp * l.micro_batch) != 0) return;
    l.parallel.num_micro_batches = global_batch / (l.parallel.dp * l.micro_batch);
    moves.emplace_back(fmt::format("{} --dp {} --num-micro-batches {}", flag, l.parallel.dp, l.parallel.num_micro_batches), l);
  };
  if (p.tp * 2 <= cluster.gpus_per_node)
    regroup(fmt::format("--tp {}", p.tp * 2).c_str(), 2, [&](ParallelLayout& q) { q.tp *= 2; });
  for (int64_t f : {2, 3, 4})
    regroup(fmt::format("--pp {}", p.pp * f).c_str(), f, [&](ParallelLayout& q) { q.pp *= f; });
  regroup(fmt::format("--cp {}", p.cp * 2).c_str(), 2, [&](ParallelLayout& q) { q.cp *= 2; });

  std::vector<Change> out;
  const auto consider = [&](const std::string& flags, const Layout& l) {
    Totals t;
    const auto v = verdict(model, l, capacity, a, t);
    if (!v) return;
    Change c;
    c.flags = flags;
    c.layout = l;
    c.needed = v->needed;
    c.saved = Bytes{v0->needed.count() - v->needed.count()};
    c.fits = v->fits;
    const StepTime st = step_time(model.model(), model.workload(), l, t, global_batch, cluster);
    c.time_cost = time0.total > 0 && model.model() ? st.total / time0.total - 1.0 : 0;  // no FLOPs: unknown
    if (c.saved > Bytes{0}) out.push_back(std::move(c));
  };
  for (const auto& [flags, l] : moves) consider(flags, l);
  // When no single change is enough: pairs of them (memory savers compose).
  if (std::none_of(out.begin(), out.end(), [](const Change& c) { return c.fits; })) {
    const std::size_t singles = out.size();
    for (std::size_t i = 0; i < singles; ++i)
      for (std::size_t j = i + 1; j < singles; ++j) {
        Layout l = out[i].layout;
        const Layout& o = out[j].layout;
        if (o.recompute != base.recompute) {
          if (l.recompute != base.recompute) continue;  // two recomputation changes
          l.recompute = o.recompute;
          l.recompute_layers = o.recompute_layers;
        }
        if (o.zero_stage != base.zero_stage) {
          if (l.zero_stage != base.zero_stage) continue;
          l.zero_stage = o.zero_stage;
        }
        if (o.offload_optimizer) l.offload_optimizer = true;
        if (o.parallel.sp) l.parallel.sp = l.parallel.tp > 1 || o.parallel.sp;
        if (o.micro_batch != base.micro_batch || o.parallel.dp != base.parallel.dp) {
          if (l.micro_batch != base.micro_batch || l.parallel.dp != base.parallel.dp) continue;
          l.micro_batch = o.micro_batch;
          l.parallel = o.parallel;
          l.parallel.sp = l.parallel.sp || out[i].layout.parallel.sp;
        }
        consider(out[i].flags + " " + out[j].flags, l);
      }
  }
  std::stable_sort(out.begin(), out.end(), [](const Change& x, const Change& y) {
    if (x.fits != y.fits) return x.fits;
    return x.fits ? x.time_cost < y.time_cost : x.saved > y.saved;
  });
  if (out.size() > keep) out.resize(keep);
  return out;
}

}  // namespace actmem
