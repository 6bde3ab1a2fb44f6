// Static memory: the parameters each pipeline rank holds (its chunks' layers by kind, the embedding
// on the first, the head on the last), their weights, gradients and optimizer state under ZeRO /
// FSDP2 (static_memory.h, fsdp2.h) or by weight tensor for fine-tuning (finetune.h), and TE's cached
// fp8 weight copies (te_rules.h). Its checks: check_static, check_finetune_model (checks.cc). Its
// explanation: describe_static / describe_finetune_static and the fp8 cache term (report.cc).
#include "engine/stages/account.h"

#include <algorithm>

#include "tensors/te_rules.h"  // the fp8 weight cache

namespace actmem::detail {

namespace {

/// The parameters one GPU of pipeline rank `rank` holds (stage_params() over layer kinds), and,
/// when `work` is given, adds the rank's FLOPs for one micro-batch: s.kind_work per layer, plus a
/// forward per layer that `rerun` (full recomputation) reruns.
StageParams stage_params_from_kinds(const Account& a, int64_t rank, double* work, const RecomputePlan* rerun) {
  const Prepared& p = a.p;
  const PipelineSplit& split = a.b.split;
  const Scratch& s = a.s;
  StageParams st;
  st.stage = rank;
  st.first_layer = split.chunk_begin(split.chunk_of(rank, 0));
  double sum = work ? *work : 0;
  for (int64_t j = 0; j < split.vpp; ++j) {
    const int64_t c = split.chunk_of(rank, j);
    const int64_t begin = split.chunk_begin(c);
    const int64_t end = begin + split.chunk_size(c);
    const int64_t rerun_end = rerun ? begin + rerun->rerun(end - begin) : begin;
    st.num_layers += end - begin;
    for (std::size_t k = 0; k < p.num_kinds; ++k) {
      const int64_t n = p.count(k, begin, end);
      st.dense = checked_add(st.dense, checked_mul(n, s.kind_per_rank[k] - s.kind_expert[k]));
      st.expert = checked_add(st.expert, checked_mul(n, s.kind_expert[k]));
      st.dense_scalar = checked_add(st.dense_scalar, checked_mul(n, s.kind_dense_vectors[k]));
      st.expert_scalar = checked_add(st.expert_scalar, checked_mul(n, s.kind_expert_vectors[k]));
      if (work) {  // in a local, in the same order: the same sum, without a store per term
        sum += static_cast<double>(n) * s.kind_work[k];
        if (rerun_end > begin) sum += static_cast<double>(p.count(k, begin, rerun_end)) * s.kinds[k].flops;
      }
    }
  }
  if (work) *work = sum;
  add_embedding_and_head(st, p.params, a.par.tp, a.par.pp);
  return st;
}

/// TE's cached fp8 weight copies of rank `rank`'s layers.
void add_fp8_cache(const Account& a, int64_t rank, RankStatic& out) {
  const PipelineSplit& split = a.b.split;
  int64_t bytes = 0;
  for (int64_t j = 0; j < a.par.vpp; ++j) {
    const int64_t c = split.chunk_of(rank, j);
    const int64_t begin = split.chunk_begin(c);
    for (std::size_t k = 0; k < a.num_kinds; ++k) {
      const int64_t n = a.p.count(k, begin, begin + split.chunk_size(c));
      out.fp8_elements = checked_add(out.fp8_elements, checked_mul(n, a.s.kind_fp8_elements[k]));
      out.fp8_copies = checked_add(out.fp8_copies, checked_mul(n, a.s.kind_fp8_copies[k]));
      bytes = checked_add(bytes, checked_mul(n, a.s.kind_fp8_bytes[k]));
    }
  }
  out.fp8_cache = Bytes{bytes};
}

}  // namespace

void account_layer_params(Account& a) {
  Scratch& s = a.s;
  const std::size_t num_kinds = a.num_kinds;
  const ParallelLayout& par = a.par;
  s.kind_per_rank.resize(num_kinds);
  s.kind_expert.resize(num_kinds);
  s.kind_dense_vectors.resize(num_kinds);
  s.kind_expert_vectors.resize(num_kinds);
  s.kind_work.resize(num_kinds);
  for (std::size_t k = 0; k < num_kinds; ++k)
    s.kind_work[k] = 3.0 * s.kinds[k].flops + (a.l.recompute == Recompute::kSelective ? s.kinds[k].selective_flops : 0.0);
  a.largest_layer = 0;
  for (std::size_t k = 0; k < num_kinds; ++k) {
    const LayerParams& lp = a.p.kind_params[k];
    s.kind_expert[k] = lp.experts_per_rank(par.ep, par.expert_tp());
    s.kind_per_rank[k] = lp.per_rank(par.tp, par.ep) - lp.experts_per_rank(par.ep, par.tp) + s.kind_expert[k];
    s.kind_dense_vectors[k] = lp.dense_vectors_per_rank(par.tp);
    s.kind_expert_vectors[k] = lp.expert_vectors_per_rank(par.ep, par.expert_tp());
    a.largest_layer = std::max(a.largest_layer, s.kind_per_rank[k]);
  }
  // TE's cached fp8 weight copies (te_rules.h): weight elements of one layer of each kind per TP rank.
  a.fp8_cache_on = te_fp8_weight_cache_on(a.w, a.l.zero_stage);
  if (!a.fp8_cache_on) return;
  const ModelSpec& m = a.p.model;
  const GraphSet& g = *a.b.graphs;
  s.kind_fp8_elements.resize(num_kinds);
  s.kind_fp8_copies.resize(num_kinds);
  s.kind_fp8_bytes.resize(num_kinds);
  for (std::size_t k = 0; k < num_kinds; ++k) {
    s.kind_fp8_elements[k] = te_fp8_weight_elements(m, g.kinds[k].spec, par.tp, par.ep, par.etp);
    s.kind_fp8_copies[k] = te_fp8_weight_copies(m, g.kinds[k].spec, par.ep);
    s.kind_fp8_bytes[k] = te_fp8_weight_cache_layer_bytes(m, g.kinds[k].spec, par.tp, par.ep, a.w.megatron, par.etp);
  }
}

RankStatic rank_static(Account& a, int64_t rank, double* work) {
  const ParallelLayout& par = a.par;
  const Layout& l = a.l;
  RankStatic out;
  out.params = stage_params_from_kinds(a, rank, work, l.recompute == Recompute::kFull ? &a.plan : nullptr);
  if (a.p.shape_static) {  // one stage (check_finetune): the whole model's tensors
    const FinetuneStatic fs = finetune_static(a.p.tensors, a.w, par.tp);
    const int64_t shard = par.dp * par.cp;  // context-parallel ranks share the shard, as in stage_static_bytes
    out.bytes = finetune_stage_static(fs, l.zero_stage, l.offload_optimizer, shard);
    out.params.dense = checked_add(fs.trainable, fs.frozen);
    out.params.expert = 0;
    a.t.paged_optimizer = l.offload_optimizer ? 0 : ceil_div(fs.paged_state.count(), l.zero_stage >= 1 ? shard : 1);
    if (a.rec) a.rec->finetune = fs;
  } else {
    const int zero_stage = a.w.framework == Framework::kTorchtitan ? 3 : l.zero_stage;  // FSDP2 shards all three
    out.bytes = stage_static_bytes(out.params, a.p.per_param, zero_stage, l.offload_optimizer, par);
  }
  if (a.fp8_cache_on) {
    add_fp8_cache(a, rank, out);
    out.bytes.weights -= Bytes{fp8_param_weight_saving(a.w, out.fp8_elements)};  // fp8 primary weights
  }
  return out;
}

}  // namespace actmem::detail
