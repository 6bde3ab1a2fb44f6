#include "model/params.h"

#include <stdexcept>

#include "util/bytes.h"  // checked_mul, checked_add: counts of absurd configs must not wrap
#include "model/weight_tensors.h"

namespace actmem {

namespace {

/// The LayerParams bucket of one layer tensor: how it shards decides, and for what TP splits, the
/// part it belongs to. Routed experts are their own bucket whatever their shard (EP splits them).
int64_t LayerParams::*bucket(const WeightTensor& t) {
  if (t.part == WeightPart::kRoutedExperts) return &LayerParams::routed_experts;
  switch (t.shard) {
    case WeightShard::kReplicated: return &LayerParams::replicated;  // norms, router, MLA down-projections,
                                                                      // row-parallel biases
    case WeightShard::kKvHeads: return &LayerParams::kv_projection;
    case WeightShard::kColumn:
    case WeightShard::kRow:
    case WeightShard::kVocab: break;
  }
  switch (t.part) {
    case WeightPart::kAttention: return &LayerParams::attention;
    case WeightPart::kMlp: return &LayerParams::dense_mlp;
    case WeightPart::kSharedExperts: return &LayerParams::shared_experts;
    default: break;
  }
  // A new TP-split tensor kind needs a bucket here; counting it anywhere else would be a wrong number.
  throw std::logic_error("weight tensor '" + t.name + "' is split by TP but has no parameter bucket");
}

/// The vector bucket of a 1-D layer tensor, beside its bucket() (which decides how it shards).
int64_t LayerParams::*vector_bucket(const WeightTensor& t) {
  const auto b = bucket(t);
  if (b == &LayerParams::routed_experts) return &LayerParams::vector_experts;
  if (b == &LayerParams::replicated) return &LayerParams::vector_replicated;
  if (b == &LayerParams::kv_projection) return &LayerParams::vector_kv;
  return &LayerParams::vector_split;
}

LayerParams layer_params(const ModelSpec& m, const LayerSpec& spec) {
  LayerParams p;
  for (const WeightTensor& t : layer_weight_tensors(m, spec)) {
    int64_t& field = p.*bucket(t);
    const int64_t n = checked_mul(t.numel(), t.count);
    field = checked_add(field, n);
    if (t.shard == WeightShard::kKvHeads) p.kv_heads = t.heads;
    if (t.cols == 1) {  // a vector (weight_tensors.h: rows × 1)
      int64_t& v = p.*vector_bucket(t);
      v = checked_add(v, n);
    }
  }
  return p;
}

}  // namespace

int64_t LayerParams::per_rank(int64_t tp, int64_t ep) const {
  // K/V split by heads: each rank keeps max(1, kv/tp) heads' worth.
  const int64_t kv = kv_heads > 0 ? checked_mul(kv_projection / kv_heads, kv_heads_per_rank(kv_heads, tp)) : 0;
  return checked_add(checked_add(ceil_div(attention, tp), kv),
                     checked_add(checked_add(ceil_div(dense_mlp, tp), ceil_div(shared_experts, tp)),
                                 checked_add(replicated, ceil_div(ceil_div(routed_experts, ep), tp))));
}

int64_t LayerParams::experts_per_rank(int64_t ep, int64_t etp) const {
  return ceil_div(ceil_div(routed_experts, ep), etp);
}

int64_t LayerParams::dense_vectors_per_rank(int64_t tp) const {
  const int64_t kv = kv_heads > 0 ? checked_mul(vector_kv / kv_heads, kv_heads_per_rank(kv_heads, tp)) : 0;
  return checked_add(checked_add(vector_replicated, ceil_div(vector_split, tp)), kv);
}

int64_t LayerParams::expert_vectors_per_rank(int64_t ep, int64_t etp) const {
  return ceil_div(ceil_div(vector_experts, ep), etp);
}

int64_t ParamCounts::total() const {
  int64_t n = checked_add(checked_add(checked_add(embedding, embedding_replicated), lm_head),
                          checked_add(lm_head_bias, final_norm));
  for (const auto& l : layers)
    for (int64_t part : {l.attention, l.kv_projection, l.dense_mlp, l.routed_experts, l.shared_experts, l.replicated})
      n = checked_add(n, part);
  return n;
}

int64_t ParamCounts::non_embedding() const {
  return checked_sub(total(), checked_add(checked_add(embedding, embedding_replicated), lm_head));
}

int64_t ParamCounts::active() const {
  int64_t n = total();
  for (const auto& l : layers)
    if (l.routed_experts > 0) n = checked_add(checked_sub(n, l.routed_experts), routed_active_per_layer);
  return n;
}

ParamCounts count_params(const ModelSpec& m) {
  ParamCounts c;
  for (const WeightTensor& t : embedding_weight_tensors(m)) {
    int64_t& field = t.shard == WeightShard::kVocab ? c.embedding : c.embedding_replicated;
    field = checked_add(field, checked_mul(t.numel(), t.count));
    if (t.shard != WeightShard::kVocab && t.cols == 1)
      c.embedding_vectors = checked_add(c.embedding_vectors, checked_mul(t.numel(), t.count));
  }
  for (const WeightTensor& t : head_weight_tensors(m)) {
    int64_t& field = t.part == WeightPart::kFinalNorm ? c.final_norm
                     : t.role == WeightRole::kBias    ? c.lm_head_bias
                                                      : c.lm_head;
    field = checked_add(field, checked_mul(t.numel(), t.count));
  }
  if (m.moe) {
    // k experts' worth of one MoE layer: one expert's tensors (count E) taken k times.
    for (const WeightTensor& t : layer_weight_tensors(m, LayerSpec{.moe = true}))
      if (t.part == WeightPart::kRoutedExperts)
        c.routed_active_per_layer =
            checked_add(c.routed_active_per_layer, checked_mul(t.numel(), m.moe->experts_per_token));
  }
  c.layers.reserve(m.layers.size());
  const LayerSpec* previous = nullptr;
  for (const LayerSpec& spec : m.layers) {
    // Runs of layers share a shape (their weights differ only by moe and the dense ffn): built once.
    const bool same = previous && previous->moe == spec.moe && (spec.moe || previous->ffn == spec.ffn);
    c.layers.push_back(same ? c.layers.back() : layer_params(m, spec));
    previous = &spec;
  }
  return c;
}

}  // namespace actmem
