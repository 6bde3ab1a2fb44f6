// prepare(), evaluate(), explain(): one accounting routine (account()) over a model prepared once.
//
// prepare() builds the per-layer op graphs with symbolic dimensions (op_graph.h) for the four
// structural variants a layout can pick, the parameters of each layer kind, and the facts the
// checks need. A layout then binds the per-GPU values of the symbols and walks the layers once per
// pipeline rank: no graph is built and nothing is formatted unless explain() asks for the terms.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include <fmt/format.h>

#include "util/text_table.h"      // group_digits, for the --params name
#include "model/weight_tensors.h"  // lm_head_macs_per_token
#include "tensors/te_rules.h"        // check_megatron_workload
#include "policies/encoder_checks.h"  // encoders: HF, data parallelism only
#include "policies/packed_docs.h"    // check_packed_docs, packed_attention_keys

namespace actmem {

const ModelSpec* PreparedModel::model() const { return impl_->param_only ? nullptr : &impl_->model; }
const Workload& PreparedModel::workload() const { return impl_->workload; }
const std::string& PreparedModel::name() const { return impl_->name; }

namespace {

StaticOptions static_options(const Workload& w, const Layout& l) {
  StaticOptions o;
  o.weight_dtype = w.weight_dtype;
  o.grad_dtype = w.grad_dtype;
  o.optimizer = w.optimizer;
  o.precision = w.precision;
  o.zero_stage = l.zero_stage;
  o.offload_optimizer = l.offload_optimizer;
  o.parallel = l.parallel;
  return o;
}

/// Llama 4 text (model_type llama4_text) is modeled from transformers' modeling_llama4.py only.
Expected<void> check_llama4_workload(const ModelSpec& m, const Workload& w) {
  if (m.model_type != "llama4_text") return {};
  if (w.framework != Framework::kHF)
    return Error{ErrorKind::kIncompatible, "framework",
                 fmt::format("@framework {}: Llama 4 (NoPE layers, chunked attention, L2 q/k norm, its sigmoid "
                             "top-k MoE) is modeled for @framework hf only; use @framework hf",
                             kFrameworkNames.name(w.framework))};
  if (w.hf_version == HfVersion::k4_44)
    return Error{ErrorKind::kIncompatible, "hf_version",
                 "@hf_version 4.44: Llama 4 arrived in transformers 4.51 (modeling_llama4.py); use @hf_version 5 or "
                 "4.57"};
  if (w.attention == AttentionImpl::kFlash)
    return Error{ErrorKind::kIncompatible, "attention",
                 "@attention flash: transformers' Llama 4 does not support flash_attention_2 "
                 "(Llama4PreTrainedModel._supports_flash_attn = False); use @attention sdpa or eager"};
  if (w.experts_impl != ExpertsImpl::kGroupedMm)
    return Error{ErrorKind::kIncompatible, "experts_impl",
                 fmt::format("@experts_impl {}: Llama4TextExperts runs its own bmm over every expert (no experts "
                             "backend to choose); drop @experts_impl",
                             kExpertsImplNames.name(w.experts_impl))};
  return {};
}

}  // namespace

Expected<PreparedModel> prepare(const ModelSpec& given, const Workload& workload) {
  // @head (encoders) replaces the head the config named: on a copy, before anything reads the model.
  ModelSpec headed;
  if (!workload.head.empty()) {
    headed = given;
    if (auto h = set_encoder_head(headed, workload.head); !h) return h.error();
  }
  const ModelSpec& model = workload.head.empty() ? given : headed;
  if (auto v = model.validate(); !v) return v.error();
  if (auto v = check_llama4_workload(model, workload); !v) return v.error();
  if (auto v = detail::check_torchtitan_workload(model, workload); !v) return v.error();
  if (auto v = detail::check_megatron_workload(model, workload); !v) return v.error();
  if (auto v = detail::check_encoder_workload(model, workload); !v) return v.error();
  if (workload.framework == Framework::kHF && !detail::hf_version_modeled(model, workload.hf_version))
    return Error{ErrorKind::kIncompatible, "hf_version",
                 fmt::format("@hf_version {}: the transformers 4.44 rules are modeled for model_type gpt2, llama, "
                             "mistral and qwen2 only, not '{}'; use @hf_version 5 or 4.57",
                             kHfVersionNames.name(workload.hf_version), model.model_type)};
  // @experts_impl picks transformers 5's experts backend; elsewhere a choice other than the default
  // would be silently ignored (grouped_mm, the default, cannot be told apart from no choice).
  if (workload.experts_impl != ExpertsImpl::kGroupedMm &&
      (workload.framework != Framework::kHF || workload.hf_version != HfVersion::k5))
    return Error{ErrorKind::kIncompatible, "experts_impl",
                 fmt::format("@experts_impl {} applies to @framework hf with @hf_version 5 only (transformers 5's "
                             "experts backends); drop it, or use @framework hf @hf_version 5",
                             kExpertsImplNames.name(workload.experts_impl))};
  try {
    auto p = std::make_shared<detail::Prepared>();
    static std::atomic<uint64_t> next_id{1};
    p->id = next_id.fetch_add(1, std::memory_order_relaxed);
    p->name = model.name;
    p->model = model;
    p->workload = workload;
    p->per_param = workload.framework == Framework::kTorchtitan ? fsdp2_bytes_per_param(workload.optimizer)
                                                                : bytes_per_param(static_options(workload, {}));
    if (workload.framework == Framework::kTorchtitan) {  // FSDP2 keeps fp32 shards of both (fsdp2.h)
      p->workload.weight_dtype = DType::kFP32;
      p->workload.grad_dtype = DType::kFP32;
    }
    p->params = count_params(model);
    p->tp_facts = detail::TpFacts::of(model);
    p->kind_of = detail::layer_kinds(model, detail::layer_grads(model, workload));
    for (bool gqa : {false, true})
      for (bool tp : {false, true}) {
        const detail::Variant v{gqa, tp};
        p->variants[v.index()] = detail::build_graphs(model, workload, v);
      }
    // Megatron MLA keeps other tensors under sequence parallelism (op_graph.cc latent_attention):
    // the SP variants (tp > 1 only) are built for it alone.
    // Under the TE spec also the CP variants (its ring buffer outlives what mla_up_proj frees).
    p->sp_variants = model.mla.has_value() && workload.framework == Framework::kMegatron;
    p->cp_variants = p->sp_variants && workload.megatron.impl == TransformerImpl::kTransformerEngine;
    for (bool gqa : {false, true})
      for (bool tp : {false, true})
        for (bool sp : {false, true})
          for (bool cp : {false, true}) {
            if ((!sp && !cp) || (sp && !(p->sp_variants && tp)) || (cp && !p->cp_variants)) continue;
            const detail::Variant v{gqa, tp, sp, cp};
            p->variants[v.index()] = detail::build_graphs(model, workload, v);
          }
    const auto& kinds = p->variants[0].kinds;
    p->num_kinds = kinds.size();
    p->kind_prefix.assign((p->kind_of.size() + 1) * p->num_kinds, 0);
    for (std::size_t i = 0; i < p->kind_of.size(); ++i)
      for (std::size_t k = 0; k < p->num_kinds; ++k)
        p->kind_prefix[(i + 1) * p->num_kinds + k] = p->kind_prefix[i * p->num_kinds + k] + (p->kind_of[i] == k ? 1 : 0);
    p->kind_params.resize(kinds.size());
    for (std::size_t i = 0; i < p->kind_of.size(); ++i) p->kind_params[p->kind_of[i]] = p->params.layers[i];
    p->middle_kind = p->kind_of[model.layers.size() / 2];
    p->lm_head_macs = lm_head_macs_per_token(model);
    p->shape_static = needs_weight_shapes(workload);
    // Every weight tensor: the static memory of fine-tuning (shape_static) and the largest gradient
    // of gradient accumulation (grad_accum.h).
    p->tensors = weight_tensors_with_frozen_layers(model, workload.frozen_layers);
    PreparedModel out;
    out.impl_ = std::move(p);
    return out;
  } catch (const OverflowError&) {
    return Error{ErrorKind::kOverflow, "model", "the model's sizes overflow 64-bit arithmetic; check the config"};
  }
}

Expected<PreparedModel> prepare_params_only(int64_t params, const Workload& workload) {
  if (params <= 0)
    return Error{ErrorKind::kInvalid, "params",
                 fmt::format("@params {} must be a positive parameter count, e.g. 7.5e9", params)};
  auto p = std::make_shared<detail::Prepared>();
  p->name = fmt::format("--params {}", group_digits(params));
  p->param_only = true;
  p->param_count = params;
  p->workload = workload;
  p->per_param = bytes_per_param(static_options(workload, {}));
  PreparedModel out;
  out.impl_ = std::move(p);
  return out;
}

namespace detail {

namespace {

/// Megatron's interleaved schedule on one rank (see in_flight_per_chunk in engine.h).
struct Interleaved {
  int64_t pp, vpp, round, warmup, steps;
  Interleaved(const ParallelLayout& p, int64_t rank)
      : pp(p.pp), vpp(p.vpp), round(p.pp * p.vpp), warmup((p.pp - rank - 1) * 2 + (p.vpp - 1) * p.pp),
        steps(p.num_micro_batches > 0 ? std::min(p.num_micro_batches * p.vpp - warmup, round) : round) {}
  /// Virtual micro-batches of chunk j among the first n (forward order).
  int64_t of_chunk(int64_t n, int64_t j) const {
    return (n / round) * pp + std::clamp(n % round - j * pp, int64_t{0}, pp);
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
  const int64_t warmup = (p.pp - rank - 1) * 2 + (p.vpp - 1) * p.pp;
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
  for (int64_t k = 0; k < sched.steps; ++k) {
    sched.counts_at(k, step);
    Bytes bytes{0};
    for (int64_t j = 0; j < p.vpp; ++j) bytes += Bytes{chunk_bytes[j]} * step[j];
    if (bytes > best) {
      best = bytes;
      best_k = k;
    }
  }
  sched.counts_at(best_k, counts);
}

namespace {

int64_t eval(const Polynomial& poly, const SymValues& v) {
  int64_t out = 0;
  if (!poly.eval(v, out)) throw OverflowError("activation sizes overflow 64 bits");
  return out;
}

/// Scratch space reused by every evaluation on a thread: after the first call of a size, the hot
/// path allocates nothing.
struct Scratch {
  std::vector<KindBytes> kinds;
  std::vector<int64_t> kind_per_rank;  // parameters of one layer of each kind on one GPU
  std::vector<int64_t> kind_expert;    // of which routed experts
  std::vector<double> kind_work;       // FLOPs of one layer of each kind per micro-batch: 3·forward (+ the
                                       // attention core again under selective recomputation)
  std::vector<int64_t> chunk_layer_bytes, chunk_bytes, counts, step;
  std::vector<int64_t> kind_rerun;  // full recomputation: layers of each kind rerun
  std::vector<int64_t> kind_fp8_elements;  // TE fp8 weight cache: weight elements of one layer per TP rank
  std::vector<int64_t> kind_fp8_copies;    // and its fp8 weight copies (one scale_inv each)
  std::vector<int64_t> kind_offload_kept;  // --cpu-offloading-num-layers: what TE leaves on the GPU per layer
  std::vector<int64_t> kind_fp8_bytes;     // and its bytes (te_fp8_weight_cache_layer_bytes)
  /// evaluate(): the layer kinds' bytes and FLOPs, the embedding's and the head's, of the last few
  /// bindings. They are a function of the prepared model, the graph variant and the symbol values
  /// alone, and a search visits each binding for many layouts (ZeRO stage, recomputation,
  /// offloading, pipeline shapes differ; the symbols do not), so the polynomials are evaluated once.
  struct Bound {
    uint64_t prepared = 0;  // Prepared::id; 0: empty
    std::size_t variant = 0;
    SymValues values{};
    std::vector<KindBytes> kinds;
    int64_t embedding = 0, head_loss = 0;
  };
  std::array<Bound, 4> bound;
  std::size_t next_bound = 0;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

/// The parameters one GPU of pipeline stage `stage` holds (stage_params() over layer kinds), and,
/// when `work` is given, adds the stage's FLOPs for one micro-batch: s.kind_work per layer, plus a
/// forward per layer that `rerun` (full recomputation) reruns.
StageParams stage_params_from_kinds(const Prepared& p, const ParallelLayout& par, const PipelineSplit& split,
                                    int64_t stage, const Scratch& s, double* work = nullptr,
                                    const RecomputePlan* rerun = nullptr) {
  StageParams st;
  st.stage = stage;
  st.first_layer = split.chunk_begin(split.chunk_of(stage, 0));
  double sum = work ? *work : 0;
  for (int64_t j = 0; j < split.vpp; ++j) {
    const int64_t c = split.chunk_of(stage, j);
    const int64_t begin = split.chunk_begin(c);
    const int64_t end = begin + split.chunk_size(c);
    const int64_t rerun_end = rerun ? begin + rerun->rerun(end - begin) : begin;
    st.num_layers += end - begin;
    for (std::size_t k = 0; k < p.num_kinds; ++k) {
      const int64_t n = p.count(k, begin, end);
      st.dense = checked_add(st.dense, checked_mul(n, s.kind_per_rank[k] - s.kind_expert[k]));
      st.expert = checked_add(st.expert, checked_mul(n, s.kind_expert[k]));
      if (work) {  // in a local, in the same order: the same sum, without a store per term
        sum += static_cast<double>(n) * s.kind_work[k];
        if (rerun_end > begin) sum += static_cast<double>(p.count(k, begin, rerun_end)) * s.kinds[k].flops;
      }
    }
  }
  if (work) *work = sum;
  add_embedding_and_head(st, p.params, par.tp, par.pp);
  return st;
}

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

}  // namespace

Binding bind(const Prepared& p, const Layout& l) {
  const ModelSpec& m = p.model;
  const auto& par = l.parallel;
  const int64_t t = par.tp;
  Binding b;
  auto set = [&](Sym s, int64_t v) { b.values[static_cast<std::size_t>(s)] = v; };
  const int64_t seq_local = l.seq_len / par.cp;
  set(Sym::kSeqRep, seq_local / (par.sp ? t : 1));
  set(Sym::kSeqTp, seq_local);
  set(Sym::kSeqKey, l.seq_len);
  set(Sym::kSeqShifted, seq_local - 1);
  set(Sym::kRngWords, 2 * par.cp);
  set(Sym::kBatch, l.micro_batch);
  set(Sym::kHidden, m.hidden);
  set(Sym::kQHeads, m.num_heads / t);
  set(Sym::kKvHeads, m.kv_heads_per_rank(t));
  set(Sym::kHeadDim, m.head_dim);
  set(Sym::kVocab, ceil_div(m.vocab, t));
  if (m.moe) {
    const MoeSpec& e = *m.moe;
    set(Sym::kExpertFfn, e.expert_ffn / t);
    set(Sym::kSharedFfn, e.shared_ffn / t);
    // Rows each GPU's experts process: k·s·b with balanced routing (dropless), or the padded
    // capacity E·⌈cf·k·s·b/E⌉ with a capacity factor. Not divided by ep: expert parallelism is
    // carved out of data parallelism, so each of the ep ranks brings its own micro-batch and the
    // all-to-all (or all-gather) dispatcher sends each rank's E/ep experts their rows from all ep
    // ranks: ep·k·s·b rows over ep ranks (Megatron-core token_dispatcher.py, torchtitan
    // expert_parallel.py, DeepSpeed-MoE alike).
    const int64_t token_rows = checked_mul(checked_mul(e.experts_per_token, seq_local), l.micro_batch);
    if (e.capacity_factor > 0.0) {
      const auto cap = static_cast<int64_t>(
          std::ceil(e.capacity_factor * static_cast<double>(token_rows) / static_cast<double>(e.num_experts)));
      set(Sym::kMoeRows, checked_mul(cap, e.num_experts));
    } else {
      set(Sym::kMoeRows, token_rows);
    }
    const int64_t local = ceil_div(e.num_experts, par.ep);
    set(Sym::kLocalExperts, local);
    // Megatron TE fp8: TEGroupedMLP's Fp8Padding rounds each local expert's rows up to 16 (te_rules.h).
    const int64_t rows = b.values[static_cast<std::size_t>(Sym::kMoeRows)];
    const bool fp8 = p.workload.framework == Framework::kMegatron && p.workload.megatron.fp8 != Fp8Recipe::kNone;
    set(Sym::kExpertRows, fp8 ? te_fp8_expert_rows(rows, local) : rows);
  }
  b.variant.gqa_repeat = !m.mla && m.num_kv_heads < m.num_heads &&
                         b.values[static_cast<std::size_t>(Sym::kKvHeads)] < b.values[static_cast<std::size_t>(Sym::kQHeads)];
  b.variant.tensor_parallel = t > 1;
  b.variant.sequence_parallel = p.sp_variants && par.sp && t > 1;
  b.variant.context_parallel = p.cp_variants && par.cp > 1;
  b.graphs = &p.variants[b.variant.index()];
  b.split = PipelineSplit::of(m.num_layers, par);
  b.chunk_layers = b.split.largest_chunk();
  return b;
}

template <typename Reporter, typename Sink>
bool account(const Prepared& p, const Layout& l, Totals& t, Reporter& reporter, Sink& sink) {
  t = Totals{};
  if (!check_options(p.workload, l, reporter)) return false;
  if (!check_torchtitan_layout(p.workload, l, reporter)) return false;
  if (!p.param_only && !check_encoder_layout(p.model, l, reporter)) return false;
  const ParallelLayout& par = l.parallel;
  const Workload& w = p.workload;
  Scratch& s = scratch();

  if (p.param_only) {
    if (needs_weight_shapes(w))
      return reporter.fail(ErrorKind::kIncompatible, "params", [&] {
        return fmt::format("@params gives no weight shapes, which {} needs; give @model",
                           w.lora.enabled() ? "LoRA" : w.optimizer_in_backward ? "the optimizer step in backward"
                                                                                : kOptimizerNames.name(w.optimizer));
      });
    if (par.cp > 1 || par.ep > 1 || par.sp)
      return reporter.fail(ErrorKind::kIncompatible, "params", [] {
        return std::string("@params gives no architecture: @cp, @ep and @sp need a model (@model)");
      });
    if (!check_static(par, reporter)) return false;
    // param_only_counts(): all parameters TP-splittable, spread over pp equal pseudo-layers; the
    // peak GPU is the stage with the most static bytes.
    Bytes best{-1};
    for (int64_t stage = 0; stage < par.pp; ++stage) {
      StageParams st;
      st.stage = stage;
      st.first_layer = stage;
      st.num_layers = 1;
      st.dense = ceil_div(p.param_count / par.pp + (stage < p.param_count % par.pp ? 1 : 0), par.tp);
      const int z = w.framework == Framework::kTorchtitan ? 3 : l.zero_stage;  // FSDP2 (fsdp2.h)
      const StageStatic bytes = stage_static_bytes(st, p.per_param, z, l.offload_optimizer, par);
      if (bytes.total() > best) {
        best = bytes.total();
        t.peak_stage = stage;
        t.params_on_gpu = st.total();
        t.weights = bytes.weights.count();
        t.gradients = bytes.gradients.count();
        t.optimizer = bytes.optimizer.count();
        t.cpu_optimizer = bytes.cpu_optimizer.count();
        if constexpr (Sink::kRecords) sink.stage = st;
      }
    }
    t.reserve = l.reserve.count();
    t.total = (Bytes{t.weights} + Bytes{t.gradients} + Bytes{t.optimizer} + l.reserve).count();
    return true;
  }

  const ModelSpec& m = p.model;
  if (!check_parallel(m, p.tp_facts, par, reporter)) return false;
  if (!check_sequence(l.seq_len, par, reporter)) return false;
  if (!check_loss(w, l, reporter)) return false;
  if (!check_offload(w, l, reporter)) return false;
  if (!check_cpu_offloading(m.num_layers, w, l, reporter)) return false;
  if (!check_recompute(m, w, l, reporter)) return false;
  if (!check_static(par, reporter)) return false;
  if (!check_finetune_model(m.fused_qkv, m.fused_gate_up, w, reporter)) return false;
  if (!check_frozen_layers(m.num_layers, w, reporter)) return false;
  if (!check_packed_docs(m, w, l, reporter)) return false;
  if (!check_grad_accum(w, l, reporter)) return false;

  const Binding b = bind(p, l);
  const GraphSet& g = *b.graphs;
  SymValues v = b.values;

  // Each layer kind under each policy, and its forward FLOPs.
  const std::size_t num_kinds = g.kinds.size();
  s.kinds.resize(num_kinds);
  const double sd = static_cast<double>(l.seq_len);
  const double bd = static_cast<double>(l.micro_batch);
  const double tokens = sd * bd;
  // evaluate(): the same binding seen lately (Scratch::Bound; sd and bd are its kSeqKey and kBatch).
  const Scratch::Bound* seen = nullptr;
  if constexpr (!Sink::kRecords)
    for (const auto& e : s.bound)
      if (e.prepared == p.id && e.variant == b.variant.index() && e.values == b.values) seen = &e;
  if (seen) std::copy(seen->kinds.begin(), seen->kinds.end(), s.kinds.begin());
  const bool te_spec = w.megatron.impl == TransformerImpl::kTransformerEngine;  // cpu_offloading.h
  for (std::size_t k = 0; k < num_kinds; ++k) {
    const LayerKind& kind = g.kinds[k];
    v[static_cast<std::size_t>(Sym::kFfn)] = kind.spec.ffn / par.tp;
    if (l.cpu_offloading_num_layers > 0) {  // per evaluation (not in Scratch::Bound): cpu_offloading.h
      s.kind_offload_kept.resize(num_kinds);
      s.kind_offload_kept[k] = te_offload_kept_bytes(kind.graph, v, te_spec);
    }
    if (seen) continue;
    KindBytes& kb = s.kinds[k];
    kb.none = eval(kind.graph.none, v);
    kb.selective = eval(kind.graph.selective, v);
    kb.input = eval(kind.graph.input, v);
    kb.rerun = eval(kind.graph.rerun, v);
    // FLOPs (whole model, not per GPU; matmuls 2·m·n·k, attention over the full s×s square as
    // Megatron's MFU formula counts it, or s×window with a sliding window).
    // Packed rows under flash: the full square of each document (packed_docs.h).
    const double keys = packed_attention_keys(w, l.seq_len, kind.spec.sliding_window);
    kb.core_flops = 2.0 * bd * static_cast<double>(m.num_heads) * sd * keys * kind.qk_v_head_dims;
    kb.flops = 2.0 * tokens * kind.macs_per_token + kb.core_flops;
    // What selective recomputation reruns: core attention (Megatron's default recompute_modules), and
    // the MLP's linears with recompute_modules mlp (te_rules.h).
    kb.selective_flops = (kind.selective_reruns_core ? kb.core_flops : 0.0) + 2.0 * tokens * kind.selective_recompute_macs;
  }
  const int64_t embedding = seen ? seen->embedding : eval(g.embedding.none, v);
  const int64_t head_loss = seen ? seen->head_loss : eval(g.head.none, v);
  if (!Sink::kRecords && !seen) {
    for (auto& x : s.bound) x.kinds.reserve(num_kinds);  // every entry at once: no allocation after a first call
    Scratch::Bound& e = s.bound[s.next_bound];
    s.next_bound = (s.next_bound + 1) % s.bound.size();
    e.prepared = p.id;
    e.variant = b.variant.index();
    e.values = b.values;
    e.kinds.assign(s.kinds.begin(), s.kinds.end());
    e.embedding = embedding;
    e.head_loss = head_loss;
  }
  const int64_t chunk_layers = b.chunk_layers;
  const RecomputePlan plan = RecomputePlan::of(l, chunk_layers);
  auto kept = [&](const KindBytes& k, int64_t position) { return plan.kept(k.none, k.selective, k.input, position); };
  // What layers [first, first + n) keep as one recomputation unit (positions 0 .. n−1).
  auto kept_run = [&](int64_t first, int64_t n) {
    Bytes sum{0};
    if (plan.layer_sac()) {  // torchtitan: every N-th layer checkpointed, by position
      for (int64_t pos = 0; pos < n; ++pos) sum += Bytes{kept(s.kinds[p.kind_of[static_cast<std::size_t>(first + pos)]], pos)};
      return sum;
    }
    if (plan.strided()) {
      for (int64_t pos = 0; pos < n; pos += plan.checkpoint_every)
        sum += Bytes{s.kinds[p.kind_of[static_cast<std::size_t>(first + pos)]].input};
      return sum;
    }
    const int64_t inputs = plan.input_run(n);
    for (std::size_t k = 0; k < num_kinds; ++k) {
      const KindBytes& kb = s.kinds[k];
      sum += Bytes{kb.input} * p.count(k, first, first + inputs) +
             Bytes{l.recompute == Recompute::kSelective ? kb.selective : kb.none} * p.count(k, first + inputs, first + n);
    }
    return sum;
  };
  // Shared storages: saved by the layers that run normally, kept by the checkpointed ones
  // (Storage::kept_shared), each once.
  const bool run_normally = plan.some_layer_not_recomputed();
  const bool recomputed = plan.some_layer_recomputed();
  const int64_t shared = (run_normally ? eval(g.shared.none, v) : 0) +
                         (recomputed ? eval(run_normally ? g.shared.checkpointed_only : g.shared.checkpointed, v) : 0);

  // One micro-batch, the whole model as one stage (one recomputation unit).
  const int64_t num_layers = m.num_layers;
  const Bytes layers = kept_run(0, num_layers);
  double forward = 2.0 * tokens * p.lm_head_macs;
  for (std::size_t k = 0; k < num_kinds; ++k) forward += static_cast<double>(p.count(k, 0, num_layers)) * s.kinds[k].flops;
  const KindBytes& mid = s.kinds[p.middle_kind];
  t.activations_total = (Bytes{embedding} + layers + Bytes{head_loss} + Bytes{shared}).count();
  // Under full recomputation per_layer is a recomputed layer (its input), unless none is recomputed.
  t.per_layer = plan.per_layer_is_input() ? mid.input : kept(mid, 0);
  t.forward_flops = forward;

  // Static memory per stage: the parameters of one layer of each kind on one GPU.
  s.kind_per_rank.resize(num_kinds);
  s.kind_expert.resize(num_kinds);
  s.kind_work.resize(num_kinds);
  for (std::size_t k = 0; k < num_kinds; ++k)
    s.kind_work[k] = 3.0 * s.kinds[k].flops + (l.recompute == Recompute::kSelective ? s.kinds[k].selective_flops : 0.0);
  int64_t largest_layer = 0;
  for (std::size_t k = 0; k < num_kinds; ++k) {
    const LayerParams& lp = p.kind_params[k];
    s.kind_per_rank[k] = lp.per_rank(par.tp, par.ep);
    s.kind_expert[k] = ceil_div(ceil_div(lp.routed_experts, par.ep), par.tp);
    largest_layer = std::max(largest_layer, s.kind_per_rank[k]);
  }

  // TE's cached fp8 weight copies (te_rules.h): weight elements of one layer of each kind per TP rank.
  const bool fp8_cache_on = te_fp8_weight_cache_on(w, l.zero_stage);
  if (fp8_cache_on) {
    s.kind_fp8_elements.resize(num_kinds);
    s.kind_fp8_copies.resize(num_kinds);
    s.kind_fp8_bytes.resize(num_kinds);
    for (std::size_t k = 0; k < num_kinds; ++k) {
      s.kind_fp8_elements[k] = te_fp8_weight_elements(m, g.kinds[k].spec, par.tp, par.ep);
      s.kind_fp8_copies[k] = te_fp8_weight_copies(m, g.kinds[k].spec, par.ep);
      s.kind_fp8_bytes[k] = te_fp8_weight_cache_layer_bytes(m, g.kinds[k].spec, par.tp, par.ep, w.megatron);
    }
  }

  // Recomputation: the extra bytes alive while one unit is rerun in backward, and its FLOPs.
  Bytes recompute_peak{0};
  double recompute_flops = 0;
  const bool titan = w.framework == Framework::kTorchtitan;
  if (plan.layer_sac()) {
    // A checkpointed layer is rerun in backward: its activations live again beside its input.
    for (int64_t i = 0; i < num_layers; ++i) {
      if (!plan.layer_sac_checkpointed(i)) continue;
      const KindBytes& kb = s.kinds[p.kind_of[static_cast<std::size_t>(i)]];
      recompute_peak = std::max(recompute_peak, Bytes{kb.none} - Bytes{kb.input});
      recompute_flops += kb.flops;
    }
  } else if (l.recompute == Recompute::kSelective && titan) {
    // Per-op SAC: the rerun allocates what it does not find in the cache; it reruns every second mm.
    for (std::size_t k = 0; k < num_kinds; ++k) {
      recompute_peak = std::max(recompute_peak, Bytes{s.kinds[k].rerun});
      recompute_flops += static_cast<double>(p.count(k, 0, num_layers)) * 2.0 * tokens * g.kinds[k].op_sac_recompute_macs;
    }
  } else if (l.recompute == Recompute::kSelective) {
    for (std::size_t k = 0; k < num_kinds; ++k)
      recompute_peak = std::max(recompute_peak, Bytes{s.kinds[k].none} - Bytes{s.kinds[k].selective});
    for (std::size_t k = 0; k < num_kinds; ++k)
      recompute_flops += static_cast<double>(p.count(k, 0, num_layers)) * s.kinds[k].selective_flops;
  } else if (l.recompute == Recompute::kFull) {
    // Segments never cross a model chunk (a stage's share of layers); with recompute_layers only
    // the first N layers of each chunk are rerun.
    const int64_t segment = plan.segment();
    // evaluate(), one-layer segments: a rerun layer's peak is its kind's (none − input), so the
    // largest is over the kinds that some chunk reruns (counted below), not over every layer; and
    // chunks follow each other in layer order, so chunk c + 1 begins where chunk c ends.
    // explain() takes every layer and chunk_begin(), the reference fast_path_test checks against.
    const bool by_kind = !Sink::kRecords && segment == 1;
    s.kind_rerun.assign(num_kinds, 0);
    int64_t next_first = 0;
    for (int64_t c = 0, rank = 0; c < par.pp * par.vpp; ++c, rank = rank + 1 == par.pp ? 0 : rank + 1) {
      const int64_t first = Sink::kRecords ? b.split.chunk_begin(c) : next_first;
      const int64_t n = Sink::kRecords ? b.split.chunk_size(c) : b.split.chunk_size_on_rank(rank);
      next_first = first + n;
      const int64_t rerun = plan.rerun(n);
      for (int64_t pos = 0; !by_kind && pos < rerun; pos += segment) {
        Bytes seg{0};
        for (int64_t i = first + pos; i < first + std::min(n, pos + segment); ++i)
          seg += Bytes{s.kinds[p.kind_of[static_cast<std::size_t>(i)]].none};
        recompute_peak = std::max(recompute_peak, seg - Bytes{s.kinds[p.kind_of[static_cast<std::size_t>(first + pos)]].input});
      }
      for (std::size_t k = 0; k < num_kinds; ++k) {
        const int64_t reruns = p.count(k, first, first + rerun);
        s.kind_rerun[k] += reruns;
        recompute_flops += static_cast<double>(reruns) * s.kinds[k].flops;
      }
    }
    for (std::size_t k = 0; by_kind && k < num_kinds; ++k)
      if (s.kind_rerun[k] > 0)
        recompute_peak = std::max(recompute_peak, Bytes{s.kinds[k].none} - Bytes{s.kinds[k].input});
  }
  t.recompute_peak = recompute_peak.count();
  t.recompute_flops = recompute_flops;

  // Transients present on every stage: a ZeRO-3 gathered layer (parameters, current + prefetched,
  // and its full gradient) and the recomputed segment; the logits' on the last stage only.
  const int wb = dtype_bits(w.weight_dtype) / 8;
  const int gb = dtype_bits(w.grad_dtype) / 8;
  const Bytes zero3 = !titan && l.zero_stage == 3 && par.dp > 1 ? Bytes{checked_mul(largest_layer, 2 * wb + gb)}
                                                                  : Bytes{-1};
  // torchtitan: FSDP2's unsharded parameters and gradients (fsdp2.h), present whenever a block
  // runs, so added to the largest of the other transients rather than competing with them.
  const int64_t head_params = ceil_div(p.params.lm_head > 0 ? p.params.lm_head : p.params.embedding, par.tp) +
                              p.params.lm_head_bias + p.params.final_norm;
  const Fsdp2Transient fsdp2 = titan ? fsdp2_transient(largest_layer, head_params) : Fsdp2Transient{};
  const int zero_stage = titan ? 3 : l.zero_stage;  // FSDP2 shards parameters, gradients and state
  const int64_t s_local = l.seq_len / par.cp;
  const int64_t v_local = ceil_div(m.vocab, par.tp);
  // torchtitan's train.py (forward_backward_step) deletes pred before loss.backward(): HF's loss
  // transient without the held logits.
  // An encoder's MLM loss does not upcast: d(log-probs), d(logits) and the held logits, all e bytes.
  const int logits_grad_bytes = m.encoder                       ? 3 * dtype_bytes(w.dtype)
                                : w.framework == Framework::kHF ? 8 + dtype_bytes(w.dtype)
                                : titan                         ? 8
                                                                : 4;
  // An encoder's classifier or pooler has b·n logits, not s·b·V: no vocabulary-sized transient.
  const bool vocab_logits = !m.encoder || m.head == EncoderHead::kMaskedLM;
  const Bytes logits_grad{!vocab_logits            ? Bytes{-1}
                          : w.loss != LossImpl::kFull  // chunked or fused (loss_impl.h)
                              ? Bytes{loss_transient_bytes(w, s_local, l.micro_batch, m.hidden, v_local)}
                              : Bytes{checked_mul(checked_mul(checked_mul(logits_grad_bytes, s_local), l.micro_batch),
                                                  v_local)}};
  // A 4-bit base dequantizes one linear's weight at a time (finetune.h), on every stage.
  const Bytes dequantized{p.shape_static ? dequantized_weight_bytes(p.tensors, w, par.tp) : -1};
  // Offloading (offload.h): what stays on the GPU of the head and shared storages, and the working
  // set of tensors brought back in backward (an allowance: one layer's saved tensors).
  Bytes offload_head_gpu{0};
  Bytes offload_shared_gpu{0};
  Bytes offload_working_set{-1};
  if (l.offload_activations) {
    offload_head_gpu = Bytes{offload_head_gpu_bytes(g.head, v)};
    offload_shared_gpu = recomputed ? Bytes{eval(g.shared.checkpointed, v)} : Bytes{0};
    offload_working_set = Bytes{0};
    for (std::size_t k = 0; k < num_kinds; ++k)
      offload_working_set = std::max(offload_working_set, Bytes{l.recompute == Recompute::kFull ? s.kinds[k].input
                                                                                               : s.kinds[k].none});
  }
  // Megatron's CPU offloading (cpu_offloading.h, one stage): the decoder layers' part on the GPU is
  // TE's window of L − N full layers plus what the offloaded ones leave behind.
  CpuOffloadSplit cpu_off{};
  int64_t cpu_off_shared_host = 0;
  const int64_t cpu_off_n = l.cpu_offloading_num_layers;
  if (cpu_off_n > 0) {
    auto kind_at = [&](int64_t i) { return p.kind_of[static_cast<std::size_t>(i)]; };
    cpu_off = cpu_offload_split(
        num_layers, cpu_off_n, [&](int64_t i) { return s.kinds[kind_at(i)].none; },
        [&](int64_t i) { return s.kind_offload_kept[kind_at(i)]; });
    const int64_t shared_all = eval(g.shared.none, v);
    cpu_off_shared_host = checked_mul(shared_all - te_offload_kept_bytes(g.shared, v, te_spec), cpu_off_n);
  }
  // Gradient accumulation: one parameter's new gradient beside .grad (grad_accum.h).
  const Bytes accumulated_grad{l.grad_accum > 1 ? accumulated_grad_bytes(p.tensors, w, l) : -1};
  auto largest_transient = [&](bool last) {
    Bytes peak{-1};
    for (Bytes x : {zero3, t.recompute_peak > 0 ? recompute_peak : Bytes{-1}, last ? logits_grad : Bytes{-1},
                    dequantized, offload_working_set, accumulated_grad})
      if (x > peak) peak = x;
    return (peak < Bytes{0} ? Bytes{0} : peak) + fsdp2.total();
  };

  // Pipeline: per rank, its chunks' layers × micro-batches in flight; embedding on rank 0, head on
  // the last. The peak GPU is the stage whose static part + activations in flight + largest
  // transient is largest: the first stage holds the most micro-batches, the last the LM head.
  const std::size_t vpp = static_cast<std::size_t>(par.vpp);
  s.chunk_layer_bytes.resize(vpp);
  s.chunk_bytes.resize(vpp);
  s.counts.resize(vpp);
  s.step.resize(vpp);
  Bytes worst{-1};
  Bytes best_peak{-1};
  double busiest_work = 0;
  // Ranks 1 .. pp − 2 alike (middle_ranks_alike): rank r + 1 holds, chunk for chunk, no more
  // micro-batches in flight than rank r. 1F1B: min(pp − r, M). Interleaved: at each steady step k
  // rank r + 1 has run two forwards fewer (warm-up (pp − r − 1)·2 + (vpp − 1)·pp) and the same k
  // backwards, so its chunk counts are at most rank r's at step k, or, past rank r's last steady
  // step, at most rank r's there (all forwards run, fewer backwards); and no chunk ever holds more
  // than M. With equal static bytes, work and transients, rank 1 is the peak (the first of equals)
  // of them all, and evaluate() skips ranks 2 .. pp − 2. explain() walks every rank (its per-stage
  // table); engine_test checks both give the same totals.
  const bool skip_middle = !Sink::kRecords && par.pp > 3 && middle_ranks_alike(p, b.split);
  for (int64_t rank = 0; rank < par.pp; ++rank) {
    if (skip_middle && rank == 2) rank = par.pp - 1;
    for (std::size_t j = 0; j < vpp; ++j) {
      const int64_t c = b.split.chunk_of(rank, static_cast<int64_t>(j));
      s.chunk_layer_bytes[j] = s.chunk_bytes[j] = kept_run(b.split.chunk_begin(c), b.split.chunk_size(c)).count();
    }
    if (rank == 0) s.chunk_bytes.front() = (Bytes{s.chunk_bytes.front()} + Bytes{embedding}).count();
    if (rank == par.pp - 1) s.chunk_bytes.back() = (Bytes{s.chunk_bytes.back()} + Bytes{head_loss}).count();
    if constexpr (Sink::kRecords)  // explain(): the reference walk, which evaluate()'s is checked against
      in_flight_per_chunk_reference(par, rank, s.chunk_bytes.data(), s.counts.data(), s.step.data());
    else
      in_flight_per_chunk(par, rank, s.chunk_bytes.data(), s.counts.data(), s.step.data());
    Bytes stage_layers{0};
    for (std::size_t j = 0; j < vpp; ++j) stage_layers += Bytes{s.chunk_layer_bytes[j]} * s.counts[j];
    Bytes stage = stage_layers + Bytes{shared};
    if (rank == 0) {
      stage += Bytes{embedding} * s.counts[0];
      if constexpr (Sink::kRecords) sink.first_stage_layers_in_flight = stage_layers.count();
    }
    if (rank == par.pp - 1) stage += Bytes{head_loss} * s.counts[vpp - 1];
    sink.on_stage(rank, stage);
    if (stage > worst) {
      worst = stage;
      t.in_flight_stage = rank;
      t.in_flight_micro_batches = s.counts[0];
    }

    // This stage's work for one micro-batch (3·forward + recompute FLOPs), counted in the same pass
    // as its parameters: the busiest stage sets the pipeline's pace (Totals::stage_imbalance).
    double work = par.pp > 1 && rank == par.pp - 1 ? 3.0 * 2.0 * tokens * p.lm_head_macs : 0;
    StageParams st = stage_params_from_kinds(p, par, b.split, rank, s, par.pp > 1 ? &work : nullptr,
                                             l.recompute == Recompute::kFull ? &plan : nullptr);
    busiest_work = std::max(busiest_work, work);
    StageStatic bytes;
    if (p.shape_static) {  // one stage (check_finetune): the whole model's tensors
      const FinetuneStatic fs = finetune_static(p.tensors, w, par.tp);
      bytes = finetune_stage_static(fs, l.zero_stage, l.offload_optimizer, par.dp);
      st.dense = checked_add(fs.trainable, fs.frozen);
      st.expert = 0;
      t.paged_optimizer = l.offload_optimizer ? 0 : ceil_div(fs.paged_state.count(), l.zero_stage >= 1 ? par.dp : 1);
    } else {
      bytes = stage_static_bytes(st, p.per_param, zero_stage, l.offload_optimizer, par);
    }
    const Bytes transient = largest_transient(rank == par.pp - 1);
    // Offloading (one stage, check_offload): the GPU keeps the head's and the checkpoint keywords.
    const Bytes on_gpu = l.offload_activations ? offload_head_gpu + offload_shared_gpu
                         : cpu_off_n > 0       ? stage - layers - Bytes{head_loss} +
                                               std::max(Bytes{cpu_off.last} + Bytes{head_loss}, Bytes{cpu_off.gpu})
                                               : stage;
    int64_t fp8_elements = 0;  // the stage's TE linear weight elements per TP rank (fp8 weight cache)
    int64_t fp8_copies = 0;    // and its fp8 weight copies
    int64_t fp8_bytes = 0;     // and the bytes of their cached fp8 copies (te_rules.h)
    if (fp8_cache_on)
      for (int64_t j = 0; j < par.vpp; ++j) {
        const int64_t c = b.split.chunk_of(rank, j);
        const int64_t begin = b.split.chunk_begin(c);
        for (std::size_t k = 0; k < num_kinds; ++k) {
          const int64_t n = p.count(k, begin, begin + b.split.chunk_size(c));
          fp8_elements = checked_add(fp8_elements, checked_mul(n, s.kind_fp8_elements[k]));
          fp8_copies = checked_add(fp8_copies, checked_mul(n, s.kind_fp8_copies[k]));
          fp8_bytes = checked_add(fp8_bytes, checked_mul(n, s.kind_fp8_bytes[k]));
        }
      }
    const Bytes fp8_cache{fp8_bytes};
    const Bytes stage_peak = bytes.total() + fp8_cache + on_gpu + transient;
    if constexpr (Sink::kRecords)
      sink.stages.push_back({bytes.weights.count(), bytes.gradients.count(), bytes.optimizer.count(), on_gpu.count(),
                             transient.count(), stage_peak.count(), fp8_cache.count()});
    if (stage_peak > best_peak) {
      best_peak = stage_peak;
      t.peak_stage = rank;
      t.params_on_gpu = st.total();
      t.weights = bytes.weights.count();
      t.gradients = bytes.gradients.count();
      t.optimizer = bytes.optimizer.count();
      t.cpu_optimizer = bytes.cpu_optimizer.count();
      t.activations = on_gpu.count();
      t.host_activations = cpu_off_n > 0 ? checked_add(cpu_off.host, cpu_off_shared_host) : (stage - on_gpu).count();
      t.transient = transient.count();
      t.fp8_weight_cache = fp8_cache.count();
      if constexpr (Sink::kRecords) {
        sink.stage = st;
        sink.fp8_weight_elements = fp8_elements;
        sink.fp8_weight_copies = fp8_copies;
        sink.logits_grad = rank == par.pp - 1 ? logits_grad.count() : -1;
      }
    }
  }
  t.in_flight_max = worst.count();
  const double all_work = 3.0 * t.forward_flops + t.recompute_flops;
  t.stage_imbalance = par.pp > 1 && all_work > 0 ? busiest_work * static_cast<double>(par.pp) / all_work : 1.0;
  t.reserve = l.reserve.count();
  t.total = (best_peak + l.reserve).count();
  if constexpr (Sink::kRecords) {
    sink.kinds = s.kinds;
    sink.embedding = embedding;
    sink.head_loss = head_loss;
    sink.shared = shared;
    sink.layers_total = layers.count();
    sink.zero3_layer_params = largest_layer;
    sink.zero3_bytes = zero3.count();
    sink.dequantized_weight = dequantized.count();
    sink.fsdp2 = fsdp2;
    sink.offload_working_set = offload_working_set.count();
    if (cpu_off_n > 0) {
      sink.cpu_offload_layers_gpu = cpu_off.gpu;
      sink.cpu_offload_layers_host = cpu_off.host;
      sink.cpu_offload_shared_host = cpu_off_shared_host;
      sink.cpu_offload_peak_step = cpu_off.peak_step;
      sink.cpu_offload_kept_per_layer = s.kind_offload_kept[p.middle_kind];
    }
    sink.accumulated_grad = accumulated_grad.count();
  }
  return true;
}

}  // namespace detail

bool evaluate(const PreparedModel& model, const Layout& layout, Totals& out) noexcept {
  detail::FastReporter reporter;
  detail::NullSink sink;
  try {
    if (detail::account(model.impl(), layout, out, reporter, sink)) return true;
    out.error = reporter.kind;
    out.error_field = reporter.field;
  } catch (const OverflowError&) {
    out.error = ErrorKind::kOverflow;
    out.error_field = "seq_len";
  } catch (...) {  // std::bad_alloc on the first call of a thread
    out.error = ErrorKind::kOverflow;
    out.error_field = "";
  }
  return false;
}

Expected<Report> explain(const PreparedModel& model, const Layout& layout) {
  detail::MessageReporter reporter;
  detail::RecordingSink sink;
  Report r;
  r.source = model;
  r.model_name = model.name();
  r.model = model.model();
  r.workload = model.workload();
  r.layout = layout;
  try {
    if (!detail::account(model.impl(), layout, r.totals, reporter, sink)) return reporter.error;
    r.estimate = detail::describe(model.impl(), layout, r.totals, sink);
    r.stages = std::move(sink.stages);
  } catch (const OverflowError&) {
    return Error{ErrorKind::kOverflow, "seq_len",
                 model.model() ? "activation sizes overflow 64 bits (size arithmetic overflowed int64); check @seq_len "
                                 "and @micro_batch"
                               : "the estimate overflowed 64-bit arithmetic; @params is absurd"};
  }
  return r;
}

}  // namespace actmem

namespace actmem {

Expected<void> check_options(const Workload& workload, const Layout& layout) {
  detail::MessageReporter reporter;
  if (!detail::check_options(workload, layout, reporter)) return reporter.error;
  return {};
}

}  // namespace actmem
