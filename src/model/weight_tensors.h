// Weight tensors of a model by shape, role, part and how tensor parallelism splits them: the one
// place weight shapes are written. Serving sizes each tensor in its own dtype (quantized linear
// layers with their group scales, embeddings and norms in the base dtype) and shards it the way vLLM
// does; the parameter counts (params.h) sum them by how they shard; the FLOPs of a layer's linear
// layers are their shapes too (linear_macs_per_token).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"

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

/// Which block of the model a tensor belongs to: decides the parameter-count bucket (params.h) and
/// how many tokens pass through it (a token visits k of the E routed experts).
enum class WeightPart {
  kEmbedding,         // token and learned position embeddings
  kLayerNorm,         // a layer's residual-stream norms (input, post-attention, Gemma 2 sandwich)
  kAttention,         // projections, their biases, q/k norms and MLA's latent norms
  kMlp,               // the dense MLP and its biases
  kRouter,            // MoE router (gate) and its score-correction bias
  kRoutedExperts,     // the E routed experts (count E per layer)
  kSharedExperts,     // always-active shared expert(s) (DeepSeek, Qwen2-MoE)
  kSharedExpertGate,  // Qwen2-MoE: sigmoid(Linear(h, 1)) scaling the shared expert
  kFinalNorm,         // the norm before the LM head
  kLmHead,            // output projection and its bias
  kVision,            // a multimodal wrapper's vision tower and projector (model/vision.h; serving only)
};

/// One tensor shape, held by `count` layers (or once for embedding, head, final norm); within one
/// layer, routed experts have count E.
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
  WeightPart part = WeightPart::kAttention;
  bool frozen = false;  // requires_grad False outside LoRA: a frozen leading layer's (policies/frozen_layers.h)

  int64_t numel() const;  // rows × cols, checked (throws OverflowError)
  /// Rows and columns one TP rank holds. Example: q_proj of Llama-3-8B at tp 4 is 1024 × 4096.
  int64_t rank_rows(int64_t tp) const;
  int64_t rank_cols(int64_t tp) const;
};

/// The tensors of one layer of shape `layer`, each with count 1 (routed experts: count E).
/// Example: a Llama-3-8B layer has 9 (two norms, q/k/v/o, gate/up/down).
std::vector<WeightTensor> layer_weight_tensors(const ModelSpec& model, const LayerSpec& layer);

/// What comes before the layers: the token embedding (and a learned position table).
std::vector<WeightTensor> embedding_weight_tensors(const ModelSpec& model);

/// What comes after the layers: the final norm, an untied LM head and its bias.
std::vector<WeightTensor> head_weight_tensors(const ModelSpec& model);

/// Every weight tensor of the model: embedding, the layers' tensors with identical shapes merged
/// into one row whose count is the number of layers, then the head. Example: the numel() × count
/// of llama-3-8b sums to 8,030,261,248.
std::vector<WeightTensor> weight_tensors(const ModelSpec& model);

/// The tensors one pipeline stage holds, as vLLM's PP places them (vllm/model_executor/models/llama.py
/// @8b141ed8c: embed_tokens on the first stage, and on the last when the head is tied to it; the
/// final norm and the head on the last; PPMissingLayer elsewhere): layers [first_layer,
/// first_layer + num_layers). Example: stage_weight_tensors(m, 0, L, true, true) == weight_tensors(m).
std::vector<WeightTensor> stage_weight_tensors(const ModelSpec& model, int64_t first_layer, int64_t num_layers,
                                               bool first_stage, bool last_stage);

/// Sum of numel() × count: the parameter count. Example: llama_3_1_70b gives 70,553,706,496.
int64_t total_weight_elements(const std::vector<WeightTensor>& tensors);

/// Multiply-accumulates one token spends in the linear layers of one layer of shape `layer`: every
/// weight matrix of role kLinear plus the MoE router (not biases, norms or embeddings), the routed
/// experts at k of their E copies (a token visits k experts). The forward FLOPs of the layer are
/// 2 · tokens · this + the attention core (QK^T and PV, which have no weights).
/// The Qwen2-MoE shared-expert gate (h MACs, ~1e-6 of a layer) is left out, as the activation
/// engine's FLOP count always has. Example: a Llama-3-70B layer gives
/// 8192·(8192 + 2·1024) + 8192·8192 + 3·8192·28672 = 855,638,016.
double linear_macs_per_token(const ModelSpec& model, const LayerSpec& layer);

/// Multiply-accumulates one token spends in the LM head: h · V, also when it is tied to the
/// embedding (the same matrix is used twice). Example: Llama-3-70B gives 8192 · 128256.
double lm_head_macs_per_token(const ModelSpec& model);

}  // namespace actmem
