// Pipeline in flight: per rank, its chunks' layers × the micro-batches Megatron's schedule keeps in
// flight (engine.h in_flight_per_chunk); the embedding on rank 0, the head on the last. The peak GPU
// is the stage whose static part + activations in flight + largest transient is largest: the first
// stage holds the most micro-batches, the last the LM head. Its check: check_parallel (checks.cc).
// Its explanation: the pipeline note and Report::stages (report.cc).
#include "engine/stages/account.h"

#include <algorithm>
#include <limits>

#include "policies/grad_copies.h"
#include "policies/pipeline_inputs.h"

namespace actmem::detail {

namespace {

/// The interleaved schedule's warm-up forwards on `rank` (schedules.py get_pp_rank_microbatches).
int64_t interleaved_warmup(const ParallelLayout& p, int64_t rank) {
  return (p.pp - rank - 1) * 2 + (p.vpp - 1) * p.microbatch_group_or_pp();
}

/// Megatron's interleaved schedule on one rank (see in_flight_per_chunk in engine.h). Its forward
/// order is get_schedule_table's: groups of `group` micro-batches (pp unless
/// --microbatch-group-size-per-virtual-pipeline-stage), each run through chunk 0, 1, ..., then the
/// last group (m mod group when not 0) the same way; backward k takes entry k with its chunk mirrored.
struct Interleaved {
  int64_t vpp, group, round, warmup;
  int64_t full;  // virtual micro-batches in the full groups (all of them when m is unbounded)
  int64_t last_start, last;  // the last group's first micro-batch and its size
  int64_t steps;
  Interleaved(const ParallelLayout& p, int64_t rank)
      : vpp(p.vpp), group(p.microbatch_group_or_pp()), round(group * p.vpp), warmup(interleaved_warmup(p, rank)),
        full(p.num_micro_batches > 0 ? ((p.num_micro_batches + group - 1) / group - 1) * round
                                     : std::numeric_limits<int64_t>::max()),
        last_start(p.num_micro_batches > 0 ? full / round * group : 0),
        last(p.num_micro_batches > 0 ? p.num_micro_batches - last_start : group),
        // Every group full: the counts repeat every round (both ends move one group per round).
        steps(p.num_micro_batches == 0 ? round
              : periodic()             ? std::min(p.num_micro_batches * p.vpp - warmup, round)
                                       : p.num_micro_batches * p.vpp - warmup) {}
  bool periodic() const { return last == group; }
  /// Virtual micro-batches of chunk j among the first n (forward order).
  int64_t of_chunk(int64_t n, int64_t j) const {
    if (n <= full) return (n / round) * group + std::clamp(n % round - j * group, int64_t{0}, group);
    return last_start + std::clamp(n - full - j * last, int64_t{0}, last);
  }
  /// Chunk-micro-batches in flight on each chunk at steady step k.
  void counts_at(int64_t k, int64_t* out) const {
    for (int64_t j = 0; j < vpp; ++j) out[j] = of_chunk(warmup + 1 + k, j) - of_chunk(k, vpp - 1 - j);
  }
};

/// 1F1B, or the interleaved schedule's warm-up holding every forward: the counts without a walk.
bool in_flight_closed(const ParallelLayout& p, int64_t rank, int64_t* counts) {
  const int64_t m = p.num_micro_batches;
  if (p.vpp == 1) {
    counts[0] = std::min(p.pp - rank, m > 0 ? m : p.pp);
    return true;
  }
  const int64_t warmup = interleaved_warmup(p, rank);
  if (m > 0 && warmup + 1 >= m * p.vpp) {  // all forwards before the first backward
    std::fill(counts, counts + p.vpp, m);
    return true;
  }
  return false;
}

}  // namespace

void in_flight_per_chunk(const ParallelLayout& p, int64_t rank, const int64_t* chunk_bytes, int64_t* counts,
                         int64_t* step) {
  if (in_flight_closed(p, rank, counts)) return;
  const Interleaved sched(p, rank);
  if (sched.group != p.pp || !sched.periodic()) {  // the run walk below assumes groups of pp
    in_flight_per_chunk_reference(p, rank, chunk_bytes, counts, step);
    return;
  }
  // Every chunk keeping the same bytes: every step holds the same (w + 1 chunk-micro-batches), and
  // the first step is the one with the most.
  if (std::all_of(chunk_bytes + 1, chunk_bytes + p.vpp, [&](int64_t x) { return x == chunk_bytes[0]; })) {
    sched.counts_at(0, counts);
    return;
  }
  // From step k to k + 1 one forward starts (virtual micro-batch warmup + 1 + k, of chunk
  // ((warmup + 1 + k) mod round) / pp) and one backward ends (virtual micro-batch k, of chunk
  // vpp − 1 − (k mod round) / pp; steps <= round, so k mod round = k): the bytes change by
  // chunk_bytes[forward] − chunk_bytes[backward]. Both chunks stay the same for runs of steps that
  // end where k or warmup + 1 + k reaches a multiple of pp, so the bytes are linear on each run
  // (at most 2·vpp + 1 of them): rising to the run's end, else largest at its start. The first step
  // with the most bytes is therefore a run's start or end, and the walk goes run by run, O(vpp).
  sched.counts_at(0, step);
  Bytes bytes{0};
  for (int64_t j = 0; j < p.vpp; ++j) bytes += Bytes{chunk_bytes[j]} * step[j];
  Bytes best = bytes;
  int64_t best_k = 0;
  const int64_t f0 = (sched.warmup + 1) % sched.round;
  int64_t forward = f0 / p.pp, forward_pos = f0 % p.pp;
  int64_t backward = p.vpp - 1, backward_pos = 0;
  for (int64_t k = 0; k + 1 < sched.steps;) {
    const int64_t run = std::min({p.pp - forward_pos, p.pp - backward_pos, sched.steps - 1 - k});
    const Bytes change = Bytes{chunk_bytes[forward]} - Bytes{chunk_bytes[backward]};
    if (change > Bytes{0}) {
      bytes += change * run;
      if (bytes > best) {
        best = bytes;
        best_k = k + run;
      }
    } else {
      bytes += change * run;  // the run's start (already compared) is its largest
    }
    k += run;
    if ((forward_pos += run) == p.pp) {
      forward_pos = 0;
      if (++forward == p.vpp) forward = 0;
    }
    if ((backward_pos += run) == p.pp) {
      backward_pos = 0;
      --backward;
    }
    // The next run starts here: compared as the previous run's end (or it starts no higher).
  }
  sched.counts_at(best_k, counts);
}

void in_flight_per_chunk_reference(const ParallelLayout& p, int64_t rank, const int64_t* chunk_bytes,
                                   int64_t* counts, int64_t* step) {
  if (in_flight_closed(p, rank, counts)) return;
  const Interleaved sched(p, rank);
  Bytes best{-1};
  int64_t best_k = 0;
  auto walk = [&](int64_t from, int64_t to) {
    for (int64_t k = from; k < to; ++k) {
      sched.counts_at(k, step);
      Bytes bytes{0};
      for (int64_t j = 0; j < p.vpp; ++j) bytes += Bytes{chunk_bytes[j]} * step[j];
      if (bytes > best) {
        best = bytes;
        best_k = k;
      }
    }
  };
  // While the newest forward is in a full group the counts repeat every round (periodic() schedules
  // stop there); with a smaller last group, the steps whose forward reaches it follow: last·vpp of them.
  walk(0, std::min(sched.steps, sched.round));
  if (!sched.periodic()) walk(std::max(sched.round, sched.full - sched.warmup), sched.steps);
  sched.counts_at(best_k, counts);
}

namespace {

/// Whether pipeline ranks 1 .. pp − 2 hold the same layers chunk for chunk: for each j, the middle
/// ranks' chunks j·pp + 1 .. j·pp + pp − 2 (consecutive layers, `middle` each) repeat the same
/// sequence of layer kinds. Then those ranks have equal static bytes, equal work and equal bytes per
/// micro-batch on each chunk (same kinds at the same positions: any recomputation plan keeps the
/// same), and differ only in micro-batches in flight.
bool middle_ranks_alike(const Prepared& p, const PipelineSplit& split) {
  const int64_t d = split.middle;
  for (int64_t j = 0; j < split.vpp; ++j) {
    const int64_t begin = split.chunk_begin(split.chunk_of(1, j));
    const int64_t end = split.chunk_begin(split.chunk_of(split.pp - 1, j));
    bool one_kind = false;  // the common case, O(kinds): every layer of the stretch of one kind
    for (std::size_t k = 0; k < p.num_kinds && !one_kind; ++k) one_kind = p.count(k, begin, end) == end - begin;
    if (one_kind) continue;
    const auto* kinds = p.kind_of.data();
    if (!std::equal(kinds + begin, kinds + end - d, kinds + begin + d)) return false;
  }
  return true;
}

/// The saved bytes rank `rank` holds in flight at its peak step (counts left in Scratch::counts).
Bytes in_flight_on_rank(Account& a, int64_t rank) {
  Scratch& s = a.s;
  const ParallelLayout& par = a.par;
  const PipelineSplit& split = a.b.split;
  const std::size_t vpp = static_cast<std::size_t>(par.vpp);
  for (std::size_t j = 0; j < vpp; ++j) {
    const int64_t c = split.chunk_of(rank, static_cast<int64_t>(j));
    s.chunk_layer_bytes[j] = s.chunk_bytes[j] = kept_run(a, split.chunk_begin(c), split.chunk_size(c)).count();
  }
  if (rank == 0) s.chunk_bytes.front() = (Bytes{s.chunk_bytes.front()} + Bytes{a.embedding}).count();
  if (rank == par.pp - 1) s.chunk_bytes.back() = (Bytes{s.chunk_bytes.back()} + Bytes{a.head_loss}).count();
  if (a.rec)  // explain(): the reference walk, which evaluate()'s is checked against
    in_flight_per_chunk_reference(par, rank, s.chunk_bytes.data(), s.counts.data(), s.step.data());
  else
    in_flight_per_chunk(par, rank, s.chunk_bytes.data(), s.counts.data(), s.step.data());
  Bytes stage_layers{0};
  for (std::size_t j = 0; j < vpp; ++j) stage_layers += Bytes{s.chunk_layer_bytes[j]} * s.counts[j];
  Bytes stage = stage_layers + Bytes{a.shared};
  if (rank == 0) {
    stage += Bytes{a.embedding} * s.counts[0];
    if (a.rec) a.rec->first_stage_layers_in_flight = stage_layers.count();
  }
  if (rank == par.pp - 1) stage += Bytes{a.head_loss} * s.counts[vpp - 1];
  return stage;
}

/// The walk's running maxima.
struct Walk {
  Bytes worst{-1};      // the most activations in flight on a rank
  Bytes best_peak{-1};  // the peak stage's bytes
  double busiest_work = 0;
  // Held all job long: cuBLAS's, TE's, Megatron's global buffer (on the last stage also the output
  // layer's sequence-parallel gather).
  Bytes workspaces{0}, last_workspaces{0};
};

/// One rank: its activations in flight, static bytes and transient; the peak stage sets the totals.
void account_rank(Account& a, int64_t rank, Walk& walk) {
  const ParallelLayout& par = a.par;
  Totals& t = a.t;
  const bool last = rank == par.pp - 1;
  const Bytes in_flight = in_flight_on_rank(a, rank);
  if (a.rec) a.rec->in_flight_by_stage.push_back(in_flight);
  if (in_flight > walk.worst) {
    walk.worst = in_flight;
    t.in_flight_stage = rank;
    t.in_flight_micro_batches = a.s.counts[0];
  }
  // This stage's work for one micro-batch (3·forward + recompute FLOPs), counted in the same pass
  // as its parameters: the busiest stage sets the pipeline's pace (Totals::stage_imbalance).
  double work = par.pp > 1 && last ? 3.0 * 2.0 * a.tokens * a.p.lm_head_macs : 0;
  const RankStatic st = rank_static(a, rank, par.pp > 1 ? &work : nullptr);
  walk.busiest_work = std::max(walk.busiest_work, work);
  const Bytes transient = largest_transient(a, last);
  const Bytes on_gpu = activations_on_gpu(a, in_flight);
  const Bytes workspaces = last ? walk.last_workspaces : walk.workspaces;
  const Bytes stage_peak = st.bytes.total() + st.fp8_cache + workspaces + on_gpu + transient;
  if (a.rec)
    a.rec->stages.push_back({st.bytes.weights.count(), st.bytes.gradients.count(), st.bytes.optimizer.count(),
                             on_gpu.count(), transient.count(), stage_peak.count(), st.fp8_cache.count(),
                             workspaces.count(), pipeline_inputs_kept(a.w, a.l, a.p.model.hidden, rank).total(),
                             stage_static_bytes(st.params, {.optimizer = 1.0 * grad_copy_bytes_after_step(a.w)},
                                                a.l.zero_stage, a.l.offload_optimizer, a.par)
                                 .optimizer.count()});
  if (stage_peak <= walk.best_peak) return;
  walk.best_peak = stage_peak;
  t.peak_stage = rank;
  t.params_on_gpu = st.params.total();
  t.weights = st.bytes.weights.count();
  t.gradients = st.bytes.gradients.count();
  t.optimizer = st.bytes.optimizer.count();
  t.cpu_optimizer = st.bytes.cpu_optimizer.count();
  t.activations = on_gpu.count();
  t.host_activations = activations_on_host(a, in_flight, on_gpu);
  t.transient = transient.count();
  t.fp8_weight_cache = st.fp8_cache.count();
  t.workspaces = workspaces.count();
  if (a.rec) {
    a.rec->stage = st.params;
    a.rec->fp8_weight_elements = st.fp8_elements;
    a.rec->fp8_weight_copies = st.fp8_copies;
    a.rec->logits_grad = last ? a.tr.logits_grad.count() : -1;
    a.rec->peak_counts.assign(a.s.counts.begin(), a.s.counts.end());
    a.rec->peak_in_flight = in_flight.count();
    a.rec->peak_on_gpu = on_gpu.count();
    a.rec->plan = a.plan;
    list_transients(a, last, a.rec->peak_transients);
  }
}

}  // namespace

void account_pipeline(Account& a) {
  Scratch& s = a.s;
  const ParallelLayout& par = a.par;
  Totals& t = a.t;
  const std::size_t vpp = static_cast<std::size_t>(par.vpp);
  s.chunk_layer_bytes.resize(vpp);
  s.chunk_bytes.resize(vpp);
  s.counts.resize(vpp);
  s.step.resize(vpp);
  // Ranks 1 .. pp − 2 alike (middle_ranks_alike): rank r + 1 holds, chunk for chunk, no more
  // micro-batches in flight than rank r. 1F1B: min(pp − r, M). Interleaved: at each steady step k
  // rank r + 1 has run two forwards fewer (warm-up (pp − r − 1)·2 + (vpp − 1)·G) and the same k
  // backwards, so its chunk counts are at most rank r's at step k, or, past rank r's last steady
  // step, at most rank r's there (all forwards run, fewer backwards); and no chunk ever holds more
  // than M. With equal static bytes, work and transients, rank 1 is the peak (the first of equals)
  // of them all, and evaluate() skips ranks 2 .. pp − 2. explain() walks every rank (its per-stage
  // table); engine_test checks both give the same totals.
  const bool skip_middle = !a.rec && par.pp > 3 && middle_ranks_alike(a.p, a.b.split);
  Walk walk;
  auto held = [&](bool output_layer) {
    return Bytes{
        megatron_global_buffer(a.p.workspaces, a.w, a.p.model.num_heads, a.p.model.hidden, a.l, output_layer).total()};
  };
  walk.workspaces = held(false);
  walk.last_workspaces = held(true);
  for (int64_t rank = 0; rank < par.pp; ++rank) {
    if (skip_middle && rank == 2) rank = par.pp - 1;
    account_rank(a, rank, walk);
  }
  t.in_flight_max = walk.worst.count();
  const double all_work = 3.0 * t.forward_flops + t.recompute_flops;
  t.stage_imbalance = par.pp > 1 && all_work > 0 ? walk.busiest_work * static_cast<double>(par.pp) / all_work : 1.0;
  t.reserve = a.l.reserve.count();
  t.total = (walk.best_peak + a.l.reserve).count();
}

}  // namespace actmem::detail
