// Weight tensors of a model by shape, role and how tensor parallelism splits them, so that a
// serving estimate can size each one in its own dtype (quantized linear layers with their group
// scales, embeddings and norms in the base dtype) and shard it the way vLLM does.
// Counting parameters alone (params.h) cannot do this: group scales depend on each matrix's shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model_spec.h"

namespace actmem {

/// What a tensor is, which decides whether weight quantization touches it.
enum class WeightRole {
  kLinear,     // a projection matrix inside a layer: quantized by int4/int8/fp8 schemes
  kEmbedding,  // token (and learned position) embedding: stays in the base dtype
  kLmHead,     // output projection: stays in the base dtype (AWQ, GPTQ, vLLM fp8 leave it)
  kNorm,       // norm weights and biases
  kBias,       // projection biases
  kRouter,     // MoE router (gate) and its score bias: kept in the base dtype
};

/// How tensor parallelism splits a tensor, as vLLM's parallel layers do.
enum class WeightShard {
  kReplicated,  // whole on every rank
  kColumn,      // rows (output features) split: q/k/v, gate/up, column-parallel biases
  kRow,         // columns (input features) split: o_proj, down_proj
  kVocab,       // vocabulary rows split (VocabParallelEmbedding, ParallelLMHead)
  kKvHeads,     // k/v rows split by KV head; each rank keeps at least one head (replicated when kv < tp)
};

/// One tensor shape, held by `count` layers (or once for embedding, head, final norm).
/// A matrix is rows × cols = out_features × in_features; a vector has cols == 1.
struct WeightTensor {
  std::string name;  // "attn.q_proj", "mlp.experts.down_proj", "embed_tokens"
  int64_t count = 1;
  int64_t rows = 0;
  int64_t cols = 1;
  WeightRole role = WeightRole::kLinear;
  WeightShard shard = WeightShard::kReplicated;
  int64_t heads = 0;  // kKvHeads: number of KV heads the rows hold
  std::string rows_symbol;  // "a·d", "kv·d", "f", "V": for formulas
  std::string cols_symbol;  // "h", "f", "1"

  int64_t numel() const { return rows * cols; }
  /// Rows and columns one TP rank holds. Example: q_proj of Llama-3-8B at tp 4 is 1024 × 4096.
  int64_t rank_rows(int64_t tp) const;
  int64_t rank_cols(int64_t tp) const;
};

/// Every weight tensor of the model. Example: the numel() × count of llama-3-8b sums to 8,030,261,248.
std::vector<WeightTensor> weight_tensors(const ModelSpec& model);

/// Sum of numel() × count: the parameter count. Example: llama_3_1_70b gives 70,553,706,496.
int64_t total_weight_elements(const std::vector<WeightTensor>& tensors);

}  // namespace actmem
