// Exact parameter counts from shapes (no rounding, no rules of thumb), split the way
// sharding needs them: what tensor parallelism splits, what stays replicated, what is an expert.
// The shapes are weight_tensors.h's; this file only sums them into buckets.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_spec.h"

namespace actmem {

/// Parameters of one transformer layer, by how they shard.
struct LayerParams {
  int64_t attention = 0;       // split by TP: q/o weights (column/row parallel), q bias; all of MLA
  int64_t kv_projection = 0;   // k/v weights and biases (standard attention): split by TP down to one
  int64_t kv_heads = 0;        //   KV head per rank, then replicated (tp > kv, as Megatron/vLLM do)
  int64_t dense_mlp = 0;       // split by TP: dense MLP weights and column-parallel biases (0 in MoE layers)
  int64_t routed_experts = 0;  // all routed experts together (E experts); split by EP (and expert TP)
  int64_t shared_experts = 0;  // split by TP (DeepSeek/Qwen2-MoE shared expert weights)
  int64_t replicated = 0;      // whole on every TP rank: norms, router (+bias), row-parallel biases,
                               // q/k norms, MLA down-projections and their norms
  // Of the above, the parameters in 1-D tensors (norm weights and biases, projection biases), by the
  // same buckets: Megatron's Muon orthogonalizes only 2-D weights and leaves these to Adam
  // (emerging_optimizers.py _is_nonlinear_or_embedding).
  int64_t vector_replicated = 0;  // norms, row-parallel biases: whole on every TP rank
  int64_t vector_split = 0;       // column-parallel biases (attention, dense MLP, shared experts)
  int64_t vector_kv = 0;          // k/v biases: split by KV head as kv_projection
  int64_t vector_experts = 0;     // routed experts' biases: split as routed_experts
  int64_t total() const {
    return attention + kv_projection + dense_mlp + routed_experts + shared_experts + replicated;
  }
  /// Parameters one GPU holds under tensor parallelism `tp` and expert parallelism `ep` (routed
  /// experts split by ep, then by tp as expert TP). Example: Llama-3-8B layer at tp 16 keeps one of
  /// its 8 KV heads whole on every rank.
  int64_t per_rank(int64_t tp, int64_t ep) const;
  /// The routed experts one GPU holds: E/ep experts, each split by the expert TP degree `etp`.
  int64_t experts_per_rank(int64_t ep, int64_t etp) const;
  /// Of per_rank(tp, ep) - the routed experts, the parameters in 1-D tensors; and of
  /// experts_per_rank(ep, etp), those in 1-D tensors. Example: a Megatron GPT layer with LayerNorm and
  /// no linear biases has 2·2h (two norms, weight and bias) whatever tp.
  int64_t dense_vectors_per_rank(int64_t tp) const;
  int64_t expert_vectors_per_rank(int64_t ep, int64_t etp) const;
};

struct ParamCounts {
  int64_t embedding = 0;   // the token embedding, vocab-parallel under TP (V x h)
  int64_t embedding_replicated = 0;  // whole on every TP rank, first stage only: a learned position
                                     // table, BERT's token types and embedding LayerNorm
  int64_t embedding_vectors = 0;     // of embedding_replicated, the 1-D tensors (that LayerNorm)
  int64_t lm_head = 0;     // 0 when tied to the embedding
  int64_t lm_head_bias = 0;
  int64_t final_norm = 0;
  int64_t routed_active_per_layer = 0;  // k experts' worth of one MoE layer (for active params)
  std::vector<LayerParams> layers;

  int64_t total() const;
  /// The token embedding with the replicated tables beside it.
  int64_t all_embedding() const { return embedding + embedding_replicated; }
  /// Everything except the token/position embedding and an untied LM head.
  int64_t non_embedding() const;
  /// Parameters one token passes through: routed experts count k of E. Equals total() for dense.
  int64_t active() const;
};

/// Sums weight_tensors.h's tensors by bucket: routed experts; else replicated (kReplicated shard),
/// kv_projection (kKvHeads); else attention, dense_mlp or shared_experts by the tensor's part.
/// Example: count_params(llama_2_70b).total() == 68'976'648'192.
ParamCounts count_params(const ModelSpec& model);

}  // namespace actmem
