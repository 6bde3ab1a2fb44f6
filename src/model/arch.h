// Architecture traits, one row per HuggingFace model_type (llama.cpp `llama-arch` style).
// A row holds what the HF modeling class hard-codes (norm kind, fused projections, biases) and the
// defaults its config class uses for absent keys. Adding a family is adding a row in arch.cc.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "util/expected.h"
#include "model/model_spec.h"

namespace actmem {

/// How routed experts are laid out and which layers have them.
enum class MoeStyle {
  kNone,
  kMixtral,   // every layer; experts sized by intermediate_size; no shared expert
  kQwen2Moe,  // decoder_sparse_step / mlp_only_layers; one shared expert with a sigmoid gate
  kQwen3Moe,  // as Qwen2-MoE without the shared expert
  kDeepseek,  // first_k_dense_replace / moe_layer_freq; n_shared_experts; e_score_correction_bias
  kLlama4,    // moe_layers / interleave_moe_layer_step; experts and the one shared expert sized by
              // intermediate_size; dense layers by intermediate_size_mlp; sigmoid top-k, no renormalization
};

/// Which layers use sliding-window attention.
enum class WindowStyle {
  kNone,
  kAllLayers,         // Mistral, Phi-3: `sliding_window` (null = none) on every layer
  kFromMaxWindowLayer,// Qwen2/3: use_sliding_window and layer index >= max_window_layers
  kEvenLayers,        // Gemma 2: layers 0, 2, 4, ... slide, odd layers are global
  kPattern,           // Gemma 3: layer i slides unless (i + 1) % sliding_window_pattern == 0
};

/// Defaults of MoE keys when absent (the HF config class's), per MoE style.
struct MoeDefaults {
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_ffn = 0;
  int64_t shared_ffn = 0;  // Qwen2-MoE shared_expert_intermediate_size; DeepSeek n_shared_experts
};

struct ArchTraits {
  std::string_view model_type;  // HF model_type, the table key
  std::string_view hf_class;    // the modeling class the row describes
  NormKind norm = NormKind::kRMSNorm;
  bool norm_bias = false;
  bool gated_mlp = true;
  std::string_view act_key = "hidden_act";  // the config key the MLP activation is read from
  ActFn default_act = ActFn::kSilu;
  bool fused_qkv = false;
  bool fused_gate_up = false;
  bool qkv_bias = false;             // default of q/k/v biases
  bool o_bias = false;               // default of the output-projection bias
  bool attention_bias_key = true;    // `attention_bias` switches q/k/v/o biases (Qwen2 hard-codes them)
  bool mlp_bias = false;             // default of MLP biases
  bool mlp_bias_key = false;         // `mlp_bias` switches them (Llama)
  bool tie_embeddings = false;       // HF default of tie_word_embeddings
  bool learned_positions = false;
  bool parallel_residual = false;    // default of use_parallel_residual
  bool qk_norm = false;
  bool sandwich_norms = false;
  bool embedding_scaled = false;
  bool mla = false;
  bool lm_head_bias = false;         // Phi: the LM head (nn.Linear) has a bias
  bool shared_input_norm = false;    // Phi: attention and MLP read one input_layernorm (parallel)
  bool post_norms_only = false;      // OLMo 2: post_attention / post_feedforward norms, no input norms
  bool encoder = false;              // BERT, RoBERTa: ModelSpec::encoder (read_encoder_keys)
  bool qk_norm_full_width = false;   // OLMo 2: q_norm / k_norm over the whole q / k projection
  // Keys read by a family's own code in hf_config.cc (read_family_keys): multi_query (GPTBigCode,
  // Falcon), parallel_attn / new_decoder_architecture / bias (Falcon), and the keys whose
  // unsupported values are refused there with the field named.
  bool family_keys = false;
  MoeStyle moe = MoeStyle::kNone;
  MoeDefaults moe_defaults = {};
  WindowStyle window = WindowStyle::kNone;
  int64_t default_window = 0;        // sliding_window when the key is absent (0 = none)
  int64_t default_ffn_multiple = 0;  // GPT-2: n_inner absent or null means 4*h
  int64_t default_head_dim = 0;      // 0 = hidden_size / num_attention_heads
  int64_t default_max_positions = 2048;
  double default_norm_eps = 1e-6;
  double default_dropout = 0.0;      // resid/attn/embd dropouts when absent (GPT-2: 0.1)
  double default_rotary_fraction = 1.0;
  double default_attn_softcap = 0.0;
  double default_final_softcap = 0.0;
  // The config class's defaults for the core sizes, as config.json text. Only used under a
  // multimodal wrapper's `text_config`, which older transformers wrote as a diff against them.
  std::string_view nested_defaults_json = "";
};

/// Example: find_arch("llama")->gated_mlp == true. Unknown types get the supported list and a
/// "did you mean" suggestion.
Expected<const ArchTraits*> find_arch(std::string_view model_type);

/// Every supported model_type, in table order.
std::vector<std::string_view> supported_model_types();

}  // namespace actmem
