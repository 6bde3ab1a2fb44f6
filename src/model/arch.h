// Architecture traits, one row per HuggingFace model_type (llama.cpp `llama-arch` style).
// A row holds what the HF modeling class hard-codes (norm kind, fused projections, biases), the
// defaults its config class uses for absent keys, and the modeling file's saved-tensor quirks
// (HfQuirks, read by the op graph under the hf rules). Adding a family is adding a row in arch.cc.
// A model that is no HF family (a Megatron-LM launch line's composition) has no row: no quirks.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "actmem/expected.h"
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
  kGptOss,    // every layer; experts sized by intermediate_size, with biases; a router with a bias;
              // softmax over the top-k logits
};

/// Which layers use sliding-window attention.
enum class WindowStyle {
  kNone,
  kAllLayers,         // Mistral, Phi-3: `sliding_window` (null = none) on every layer
  kFromMaxWindowLayer,// Qwen2/3: use_sliding_window and layer index >= max_window_layers
  kEvenLayers,        // Gemma 2: layers 0, 2, 4, ... slide, odd layers are global
  kPattern,           // Gemma 3: layer i slides unless (i + 1) % sliding_window_pattern == 0
};

/// Config keys only some families have, read by that family's code in hf_config.cc.
enum class FamilyKeys {
  kNone,
  kGptBigcode,  // multi_query (one KV head), add_cross_attention (refused)
  kPhi,         // qk_layernorm (refused)
  kFalcon,      // multi_query, parallel_attn, new_decoder_architecture, bias, alibi (refused)
  kEncoder,     // BERT, RoBERTa: type_vocab_size, the head from `architectures`, position_embedding_type
  kLlama4,      // after the layers: intermediate_size_mlp, no_rope_layers, attention_chunk_size, use_qk_norm
};

/// HF modeling-file quirks that change saved tensors (a row's fields that deviate from Llama's;
/// validation/EXPECTED.md verifies each against the measured saved tensors). The op graph applies
/// them under the hf rules only.
struct HfQuirks {
  bool softmax_in_activation_dtype = false;  // GPT-2: nn.functional.softmax without dtype=float32
  // GemmaRMSNorm: `(x·rsqrt).float() * (1.0 + weight.float())`, then cast: the multiply keeps the
  // fp32 normalized x (instead of Llama's activation-dtype one) and the fp32 (1 + w) vector.
  bool rms_norm_scale_fp32 = false;
  // DeepseekV3TopkRouter: `F.linear(x.type(float32), weight.type(float32))` keeps fp32 copies of its
  // input (T·h) and of the router weight (E·h: a new tensor, not the parameter) unless the
  // activations already are fp32 (then both are the originals: the norm output, the parameter).
  bool router_fp32 = false;
  // DeepseekV3MoE.moe: the fp32 routing weights are not cast back, so `expert_out * weight` is
  // promoted to fp32: the weight column (k·T) and the weighted output kept by index_add_ (k·T·h)
  // are fp32 (Mixtral / Qwen MoE cast the weights to the activation dtype first).
  bool moe_combine_fp32 = false;
  // Phi3Model never applies an embedding dropout: 4.44 builds `embed_dropout` but forward() does
  // not call it; 4.48+ (modeling_phi3.py, Phi3Model) has none. resid_pdrop is applied (hidden).
  bool no_embedding_dropout = false;
  // transformers 4.44 (and 4.45), before ForCausalLMLoss: `shift_logits = logits[..., :-1, :]
  // .contiguous()` and CrossEntropyLoss over the s−1 shifted rows. LlamaForCausalLM upcasts first
  // (`logits = logits.float()`): an fp32 log-softmax; GPT2LMHeadModel does not: the log-softmax is
  // in the logits' (activation) dtype. Families without one have no measured 4.44 rule.
  enum class ShiftedLoss { kNone, kFp32, kActivationDtype } loss_4_44 = ShiftedLoss::kNone;
  // Olmo2RMSNorm: `(self.weight * x_normalized).to(input_dtype)` with x_normalized still fp32: the
  // multiply keeps the fp32 normalized x (Llama casts it to the activation dtype first).
  bool rms_norm_weight_fp32 = false;
  // FalconAttention (no alibi): the eager path applies no attention dropout, and the parallel block
  // drops `mlp_output + attention_output` once (dropout_add with hidden_dropout).
  bool no_attention_dropout = false;
  bool one_residual_dropout = false;
  // Gemma3TextModel: rotary_emb_local gives the sliding layers their own cos/sin (rope_local_base_freq)
  // and create_sliding_window_causal_mask their own eager mask; every layer receives both
  // position embeddings, and its own type's mask.
  bool local_rope_and_mask = false;
  // Llama4TextModel (modeling_llama4.py, transformers 4.57 and 5): complex RoPE (one fp32 complex
  // freqs_cis shared by all layers), q/k transposed after RoPE (eager matmul copies them), L2 q/k
  // norm, temperature-tuned q on NoPE layers, the full and the chunked eager masks, and
  // Llama4TextMoe: every expert on every token (repeat + bmm), a sigmoid top-k router, a shared
  // expert, its experts held as fused 3-D parameters; modeled under the hf rules only.
  bool llama4 = false;
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
  bool position_ids_from_input = false;  // RoBERTa: ModelSpec::position_ids_from_input
  bool qk_norm_full_width = false;   // OLMo 2: q_norm / k_norm over the whole q / k projection
  bool attention_sinks = false;      // GPT-OSS: one learned sink logit per attention head (ModelSpec)
  // Keys read by a family's own code in hf_config.cc (read_family_keys, read_llama4_layers), and
  // the keys whose unsupported values are refused there with the field named.
  FamilyKeys family_keys = FamilyKeys::kNone;
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
  // rope_scaling when the key is absent (the config class's default), as config.json text.
  std::string_view default_rope_json = "";
  // Non-empty: what actmem does not model for training this family; estimates refuse it and only
  // `actmem serve` takes the model.
  std::string_view training_not_modelled = "";
  // vLLM's model file builds its RoPE cos/sin table in fp32 (get_rope(dtype=torch.float32)), kept so
  // through loading: gpt_oss.py (v0.19.0).
  bool vllm_rope_fp32 = false;
  HfQuirks hf = {};
};

/// Example: find_arch("llama")->gated_mlp == true. Unknown types get the supported list and a
/// "did you mean" suggestion.
Expected<const ArchTraits*> find_arch(std::string_view model_type);

/// The row of `model_type`, or null (no error text: for lookups that have a fallback).
const ArchTraits* arch_row(std::string_view model_type);

/// The HF modeling-file quirks of a model's row; none for a model without one (a Megatron
/// composition). Example: hf_quirks(gpt2_spec).softmax_in_activation_dtype == true.
const HfQuirks& hf_quirks(const ModelSpec& model);

/// Every supported model_type, in table order.
std::vector<std::string_view> supported_model_types();

}  // namespace actmem
