// Layer kinds: a layout binds the per-GPU values of the symbols (bind()), and each layer kind's
// graphs are evaluated once: the bytes it keeps under each policy and its forward FLOPs. evaluate()
// keeps the last few bindings' values per thread (Scratch::Bound). Its check: check_parallel,
// check_sequence, check_frozen_layers, check_packed_docs (checks.cc). Its explanation: the saved
// tensors of the middle layer (report.cc describe_activations), from the recorded binding.
#include "engine/stages/account.h"

#include <algorithm>
#include <cmath>

#include "policies/packed_docs.h"  // packed_attention_keys
#include "tensors/te_rules.h"      // te_fp8_expert_rows

namespace actmem::detail {

int64_t eval(const Polynomial& poly, const SymValues& v) {
  int64_t out = 0;
  if (!poly.eval(v, out)) throw OverflowError("activation sizes overflow 64 bits");
  return out;
}

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

namespace {

/// The symbols of an MoE layer: its FFN, its rows and its local experts.
void bind_moe(const Prepared& p, const Layout& l, Binding& b) {
  const ModelSpec& m = p.model;
  const auto& par = l.parallel;
  const int64_t t = par.tp;
  auto set = [&](Sym s, int64_t v) { b.values[static_cast<std::size_t>(s)] = v; };
  const int64_t seq_local = l.seq_len / par.cp;
  const MoeSpec& e = *m.moe;
  const int64_t etp = par.expert_tp();
  set(Sym::kExpertFfn, e.expert_ffn / etp);
  set(Sym::kSharedFfn, e.shared_ffn / t);
  // Rows each GPU's experts process: k·s·b with balanced routing (dropless), or the padded
  // capacity E·⌈cf·k·s·b/E⌉ with a capacity factor. Not divided by ep: expert parallelism is
  // carved out of the data- and context-parallel ranks, so each of the ep ranks brings its own
  // tokens and the all-to-all (or all-gather) dispatcher sends each rank's E/ep experts their rows
  // from all ep ranks: ep·k·s·b rows over ep ranks (Megatron-core token_dispatcher.py, torchtitan
  // expert_parallel.py, DeepSpeed-MoE alike). Under TP each rank brings its s/tp sequence-parallel
  // shard and the expert-TP group gathers etp of them (the dispatcher's all-gather over the expert
  // TP group): k·s·b·etp/tp rows, k·s·b when the experts take the layers' TP (etp = tp).
  const int64_t all_rows = checked_mul(checked_mul(e.experts_per_token, seq_local), l.micro_batch);
  const int64_t token_rows = etp == t ? all_rows : checked_mul(all_rows, etp) / t;
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

/// One kind's bytes under each policy and its FLOPs (whole model, not per GPU; matmuls 2·m·n·k,
/// attention over the full s×s square as Megatron's MFU formula counts it, or s×window with a
/// sliding window).
KindBytes kind_bytes(const Account& a, const LayerKind& kind) {
  KindBytes kb;
  kb.none = eval(kind.graph.none, a.v);
  kb.selective = eval(kind.graph.selective, a.v);
  kb.input = eval(kind.graph.input, a.v);
  kb.rerun = eval(kind.graph.rerun, a.v);
  // Packed rows under flash: the full square of each document (packed_docs.h).
  const double keys = packed_attention_keys(a.w, a.l.seq_len, kind.spec.sliding_window);
  kb.core_flops = 2.0 * a.batch * static_cast<double>(a.p.model.num_heads) * a.seq * keys * kind.qk_v_head_dims;
  kb.flops = 2.0 * a.tokens * kind.macs_per_token + kb.core_flops;
  // What selective recomputation reruns: core attention (Megatron's default recompute_modules), and
  // the MLP's linears with recompute_modules mlp (te_rules.h).
  kb.selective_flops = (kind.selective_reruns_core ? kb.core_flops : 0.0) + 2.0 * a.tokens * kind.selective_recompute_macs;
  return kb;
}

/// evaluate(): keeps this binding's values for the next layouts that bind the same.
void remember_binding(Account& a) {
  Scratch& s = a.s;
  for (auto& x : s.bound) x.kinds.reserve(a.num_kinds);  // every entry at once: no allocation after a first call
  Scratch::Bound& e = s.bound[s.next_bound];
  s.next_bound = (s.next_bound + 1) % s.bound.size();
  e.prepared = a.p.id;
  e.variant = a.b.variant.index();
  e.values = a.b.values;
  e.kinds.assign(s.kinds.begin(), s.kinds.end());
  e.embedding = a.embedding;
  e.head_loss = a.head_loss;
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
  if (m.moe) bind_moe(p, l, b);
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

void bind_layer_kinds(Account& a) {
  a.b = bind(a.p, a.l);
  const GraphSet& g = *a.b.graphs;
  Scratch& s = a.s;
  a.v = a.b.values;
  a.num_kinds = g.kinds.size();
  s.kinds.resize(a.num_kinds);
  a.seq = static_cast<double>(a.l.seq_len);
  a.batch = static_cast<double>(a.l.micro_batch);
  a.tokens = a.seq * a.batch;
  // evaluate(): the same binding seen lately (Scratch::Bound; seq and batch are its kSeqKey and kBatch).
  const Scratch::Bound* seen = nullptr;
  if (!a.rec)
    for (const auto& e : s.bound)
      if (e.prepared == a.p.id && e.variant == a.b.variant.index() && e.values == a.b.values) seen = &e;
  if (seen) std::copy(seen->kinds.begin(), seen->kinds.end(), s.kinds.begin());
  const bool te_spec = a.w.megatron.impl == TransformerImpl::kTransformerEngine;  // cpu_offloading.h
  for (std::size_t k = 0; k < a.num_kinds; ++k) {
    const LayerKind& kind = g.kinds[k];
    a.v[static_cast<std::size_t>(Sym::kFfn)] = kind.spec.ffn / a.par.tp;
    if (a.l.cpu_offloading_num_layers > 0) {  // per evaluation (not in Scratch::Bound): cpu_offloading.h
      s.kind_offload_kept.resize(a.num_kinds);
      s.kind_offload_kept[k] = te_offload_kept_bytes(kind.graph, a.v, te_spec);
    }
    if (!seen) s.kinds[k] = kind_bytes(a, kind);
  }
  a.embedding = seen ? seen->embedding : eval(g.embedding.none, a.v);
  a.head_loss = seen ? seen->head_loss : eval(g.head.none, a.v);
  if (!a.rec && !seen) remember_binding(a);
}

}  // namespace actmem::detail
