// prepare(), evaluate(), explain(): one accounting routine (account()) over a model prepared once.
//
// prepare() builds the per-layer op graphs with symbolic dimensions (op_graph.h) for the four
// structural variants a layout can pick, the parameters of each layer kind, and the facts the
// checks need. A layout then binds the per-GPU values of the symbols and walks the layers once per
// pipeline rank: no graph is built and nothing is formatted unless explain() asks for the terms.
#include "engine/engine.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "util/text_table.h"      // group_digits, for the --params name
#include "model/weight_tensors.h"  // lm_head_macs_per_token

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

}  // namespace

Expected<PreparedModel> prepare(const ModelSpec& model, const Workload& workload) {
  if (auto v = model.validate(); !v) return v.error();
  if (auto v = detail::check_torchtitan_workload(model, workload); !v) return v.error();
  if (workload.framework == Framework::kHF && !detail::hf_version_modeled(model, workload.hf_version))
    return Error{ErrorKind::kIncompatible, "hf_version",
                 fmt::format("@hf_version {}: the transformers 4.44 rules are modeled for model_type gpt2, llama, "
                             "mistral and qwen2 only, not '{}'; use @hf_version 5 or 4.57",
                             kHfVersionNames.name(workload.hf_version), model.model_type)};
  try {
    auto p = std::make_shared<detail::Prepared>();
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
    p->kind_of = detail::layer_kinds(model, workload.freeze_embeddings && !model.learned_positions);
    for (bool gqa : {false, true})
      for (bool tp : {false, true}) {
        const detail::Variant v{gqa, tp};
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
    if (p->shape_static) p->tensors = weight_tensors(model);
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

/// Micro-batches in flight on pipeline `rank` for each of its `vpp` model chunks, at the step of
/// Megatron's schedule (megatron/core/pipeline_parallel/schedules.py) where they hold the most bytes;
/// `chunk_bytes[j]` is what one micro-batch keeps on chunk j (embedding / head included).
/// 1F1B (forward_backward_pipelining_without_interleaving): rank r holds min(pp − r, M).
/// Interleaved (forward_backward_pipelining_with_interleaving): warm-up w = (pp−r−1)·2 + (vpp−1)·pp
/// forwards (get_pp_rank_microbatches; all M·vpp when w reaches that), then each steady step k runs
/// forward w + k and backward k; virtual micro-batch i is chunk (i mod pp·vpp)/pp in forward and
/// vpp − 1 minus that in backward (get_schedule_table, groups of pp). Every steady step holds w + 1
/// chunk-micro-batches, but which chunks repeats with period pp·vpp: e.g. rank 0 at pp 4, vpp 2,
/// M 8 holds 7 + 4 after the warm-up and 8 + 3 one step later (measured by
/// validation/pipeline_validation.py), so the step with the most bytes is searched. With uniform
/// layers rank 0 holds pp·vpp + pp − 1 chunk-micro-batches, L/pp·(pp + (pp−1)/vpp) layers:
/// Korthikanti's factor 1 + (p−1)/(p·v).
void in_flight_per_chunk(const ParallelLayout& p, int64_t rank, const int64_t* chunk_bytes, int64_t* counts,
                         int64_t* step) {
  const int64_t m = p.num_micro_batches;
  if (p.vpp == 1) {
    counts[0] = std::min(p.pp - rank, m > 0 ? m : p.pp);
    return;
  }
  const int64_t warmup = (p.pp - rank - 1) * 2 + (p.vpp - 1) * p.pp;
  if (m > 0 && warmup + 1 >= m * p.vpp) {  // all forwards before the first backward
    std::fill(counts, counts + p.vpp, m);
    return;
  }
  const int64_t round = p.pp * p.vpp;
  // virtual micro-batches of chunk j among the first n (forward order)
  const auto of_chunk = [&](int64_t n, int64_t j) {
    return (n / round) * p.pp + std::clamp(n % round - j * p.pp, int64_t{0}, p.pp);
  };
  const int64_t steps = m > 0 ? std::min(m * p.vpp - warmup, round) : round;
  const auto counts_at = [&](int64_t k, int64_t* out) {
    for (int64_t j = 0; j < p.vpp; ++j) out[j] = of_chunk(warmup + 1 + k, j) - of_chunk(k, p.vpp - 1 - j);
  };
  // From step k to k + 1 one forward starts (virtual micro-batch warmup + 1 + k, of chunk
  // ((warmup + 1 + k) mod round) / pp) and one backward ends (virtual micro-batch k, whose chunk
  // runs backward as vpp − 1 − (k mod round) / pp): the bytes change by two chunks', so the walk
  // is O(1) per step; the counts are rebuilt once, at the first step with the most bytes.
  counts_at(0, step);
  Bytes bytes{0};
  for (int64_t j = 0; j < p.vpp; ++j) bytes += Bytes{chunk_bytes[j]} * step[j];
  Bytes best = bytes;
  int64_t best_k = 0;
  for (int64_t k = 0; k + 1 < steps; ++k) {
    const int64_t forward = ((warmup + 1 + k) % round) / p.pp;
    const int64_t backward = p.vpp - 1 - (k % round) / p.pp;
    bytes += Bytes{chunk_bytes[forward]} - Bytes{chunk_bytes[backward]};
    if (bytes > best) {
      best = bytes;
      best_k = k + 1;
    }
  }
  counts_at(best_k, counts);
}

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
      if (work) {
        *work += static_cast<double>(n) * s.kind_work[k];
        if (rerun_end > begin) *work += static_cast<double>(p.count(k, begin, rerun_end)) * s.kinds[k].flops;
      }
    }
  }
  add_embedding_and_head(st, p.params, par.tp, par.pp);
  return st;
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
    // Rows each GPU's experts process: k·s·b/ep with balanced routing (dropless), or the padded
    // capacity E·⌈cf·k·s·b/E⌉/ep with a capacity factor.
    const int64_t token_rows = checked_mul(checked_mul(e.experts_per_token, seq_local), l.micro_batch);
    if (e.capacity_factor > 0.0) {
      const auto cap = static_cast<int64_t>(
          std::ceil(e.capacity_factor * static_cast<double>(token_rows) / static_cast<double>(e.num_experts)));
      set(Sym::kMoeRows, checked_mul(cap, e.num_experts) / par.ep);
    } else {
      set(Sym::kMoeRows, ceil_div(token_rows, par.ep));
    }
  }
  b.variant.gqa_repeat = !m.mla && m.num_kv_heads < m.num_heads &&
                         b.values[static_cast<std::size_t>(Sym::kKvHeads)] < b.values[static_cast<std::size_t>(Sym::kQHeads)];
  b.variant.tensor_parallel = t > 1;
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
  if (!check_recompute(m, w, l, reporter)) return false;
  if (!check_static(par, reporter)) return false;
  if (!check_finetune_model(m.fused_qkv, m.fused_gate_up, w, reporter)) return false;

  const Binding b = bind(p, l);
  const GraphSet& g = *b.graphs;
  SymValues v = b.values;

  // Each layer kind under each policy, and its forward FLOPs.
  const std::size_t num_kinds = g.kinds.size();
  s.kinds.resize(num_kinds);
  const double sd = static_cast<double>(l.seq_len);
  const double bd = static_cast<double>(l.micro_batch);
  const double tokens = sd * bd;
  for (std::size_t k = 0; k < num_kinds; ++k) {
    const LayerKind& kind = g.kinds[k];
    v[static_cast<std::size_t>(Sym::kFfn)] = kind.spec.ffn / par.tp;
    KindBytes& kb = s.kinds[k];
    kb.none = eval(kind.graph.none, v);
    kb.selective = eval(kind.graph.selective, v);
    kb.input = eval(kind.graph.input, v);
    kb.rerun = eval(kind.graph.rerun, v);
    // FLOPs (whole model, not per GPU; matmuls 2·m·n·k, attention over the full s×s square as
    // Megatron's MFU formula counts it, or s×window with a sliding window).
    const double keys = kind.spec.sliding_window > 0 ? static_cast<double>(std::min(l.seq_len, kind.spec.sliding_window)) : sd;
    kb.core_flops = 2.0 * bd * static_cast<double>(m.num_heads) * sd * keys * kind.qk_v_head_dims;
    kb.flops = 2.0 * tokens * kind.macs_per_token + kb.core_flops;
  }
  const int64_t embedding = eval(g.embedding.none, v);
  const int64_t head_loss = eval(g.head.none, v);
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
    s.kind_work[k] = 3.0 * s.kinds[k].flops + (l.recompute == Recompute::kSelective ? s.kinds[k].core_flops : 0.0);
  int64_t largest_layer = 0;
  for (std::size_t k = 0; k < num_kinds; ++k) {
    const LayerParams& lp = p.kind_params[k];
    s.kind_per_rank[k] = lp.per_rank(par.tp, par.ep);
    s.kind_expert[k] = ceil_div(ceil_div(lp.routed_experts, par.ep), par.tp);
    largest_layer = std::max(largest_layer, s.kind_per_rank[k]);
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
      recompute_flops += static_cast<double>(p.count(k, 0, num_layers)) * s.kinds[k].core_flops;
  } else if (l.recompute == Recompute::kFull) {
    // Segments never cross a model chunk (a stage's share of layers); with recompute_layers only
    // the first N layers of each chunk are rerun.
    const int64_t segment = plan.segment();
    for (int64_t c = 0; c < par.pp * par.vpp; ++c) {
      const int64_t first = b.split.chunk_begin(c);
      const int64_t n = b.split.chunk_size(c);
      const int64_t rerun = plan.rerun(n);
      for (int64_t pos = 0; pos < rerun; pos += segment) {
        Bytes seg{0};
        for (int64_t i = first + pos; i < first + std::min(n, pos + segment); ++i)
          seg += Bytes{s.kinds[p.kind_of[static_cast<std::size_t>(i)]].none};
        recompute_peak = std::max(recompute_peak, seg - Bytes{s.kinds[p.kind_of[static_cast<std::size_t>(first + pos)]].input});
      }
      for (std::size_t k = 0; k < num_kinds; ++k)
        recompute_flops += static_cast<double>(p.count(k, first, first + rerun)) * s.kinds[k].flops;
    }
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
  const int logits_grad_bytes = w.framework == Framework::kHF ? 8 + dtype_bytes(w.dtype) : titan ? 8 : 4;
  const Bytes logits_grad{w.loss != LossImpl::kFull  // chunked or fused (loss_impl.h)
                              ? loss_transient_bytes(w, s_local, l.micro_batch, m.hidden, v_local)
                              : checked_mul(checked_mul(checked_mul(logits_grad_bytes, s_local), l.micro_batch), v_local)};
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
  auto largest_transient = [&](bool last) {
    Bytes peak{-1};
    for (Bytes x : {zero3, t.recompute_peak > 0 ? recompute_peak : Bytes{-1}, last ? logits_grad : Bytes{-1},
                    dequantized, offload_working_set})
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
  for (int64_t rank = 0; rank < par.pp; ++rank) {
    for (std::size_t j = 0; j < vpp; ++j) {
      const int64_t c = b.split.chunk_of(rank, static_cast<int64_t>(j));
      s.chunk_layer_bytes[j] = s.chunk_bytes[j] = kept_run(b.split.chunk_begin(c), b.split.chunk_size(c)).count();
    }
    if (rank == 0) s.chunk_bytes.front() = (Bytes{s.chunk_bytes.front()} + Bytes{embedding}).count();
    if (rank == par.pp - 1) s.chunk_bytes.back() = (Bytes{s.chunk_bytes.back()} + Bytes{head_loss}).count();
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
    const Bytes on_gpu = l.offload_activations ? offload_head_gpu + offload_shared_gpu : stage;
    const Bytes stage_peak = bytes.total() + on_gpu + transient;
    if constexpr (Sink::kRecords)
      sink.stages.push_back({bytes.weights.count(), bytes.gradients.count(), bytes.optimizer.count(), on_gpu.count(),
                             transient.count(), stage_peak.count()});
    if (stage_peak > best_peak) {
      best_peak = stage_peak;
      t.peak_stage = rank;
      t.params_on_gpu = st.total();
      t.weights = bytes.weights.count();
      t.gradients = bytes.gradients.count();
      t.optimizer = bytes.optimizer.count();
      t.cpu_optimizer = bytes.cpu_optimizer.count();
      t.activations = on_gpu.count();
      t.host_activations = (stage - on_gpu).count();
      t.transient = transient.count();
      if constexpr (Sink::kRecords) {
        sink.stage = st;
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
