#include "model/arch.h"

#include <array>

#include <fmt/format.h>

#include "util/spellcheck.h"

namespace actmem {

namespace {

// Rows list only what differs from the struct defaults (a Llama-like decoder: RMSNorm, SwiGLU,
// separate q/k/v, no biases, untied, no saved-tensor quirks). Sources: each HF transformers
// modeling_<type>.py and configuration_<type>.py (v4.4x-v4.5x); the defaults are the config
// classes' keyword defaults.
constexpr std::array kArchTable{
    ArchTraits{.model_type = "llama", .hf_class = "LlamaForCausalLM", .mlp_bias_key = true,
               .nested_defaults_json = R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                   "num_hidden_layers": 32, "num_attention_heads": 32})",
               .hf = {.loss_4_44 = HfQuirks::ShiftedLoss::kFp32}},
    ArchTraits{.model_type = "mistral", .hf_class = "MistralForCausalLM", .attention_bias_key = false,
               .window = WindowStyle::kAllLayers, .default_window = 4096, .default_max_positions = 4096 * 32,
               .nested_defaults_json = R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8})",
               // MistralForCausalLM: copied from Llama
               .hf = {.loss_4_44 = HfQuirks::ShiftedLoss::kFp32}},
    ArchTraits{.model_type = "mixtral", .hf_class = "MixtralForCausalLM", .attention_bias_key = false,
               .moe = MoeStyle::kMixtral, .moe_defaults = {.num_experts = 8, .experts_per_token = 2},
               .window = WindowStyle::kAllLayers, .default_max_positions = 4096 * 32, .default_norm_eps = 1e-5},
    ArchTraits{.model_type = "qwen2", .hf_class = "Qwen2ForCausalLM", .qkv_bias = true, .attention_bias_key = false,
               .window = WindowStyle::kFromMaxWindowLayer, .default_window = 4096, .default_max_positions = 32768,
               // Qwen2ForCausalLM: copied from Llama
               .hf = {.loss_4_44 = HfQuirks::ShiftedLoss::kFp32}},
    ArchTraits{.model_type = "qwen2_moe", .hf_class = "Qwen2MoeForCausalLM", .qkv_bias = true,
               .attention_bias_key = false, .moe = MoeStyle::kQwen2Moe,
               .moe_defaults = {.num_experts = 60, .experts_per_token = 4, .expert_ffn = 1408, .shared_ffn = 5632},
               .window = WindowStyle::kFromMaxWindowLayer, .default_window = 4096, .default_max_positions = 32768},
    ArchTraits{.model_type = "qwen3", .hf_class = "Qwen3ForCausalLM", .qk_norm = true,
               .window = WindowStyle::kFromMaxWindowLayer, .default_window = 4096, .default_head_dim = 128,
               .default_max_positions = 32768},
    ArchTraits{.model_type = "qwen3_moe", .hf_class = "Qwen3MoeForCausalLM", .qk_norm = true,
               .moe = MoeStyle::kQwen3Moe,
               .moe_defaults = {.num_experts = 128, .experts_per_token = 8, .expert_ffn = 768},
               .window = WindowStyle::kFromMaxWindowLayer, .default_window = 4096, .default_head_dim = 128,
               .default_max_positions = 32768},
    ArchTraits{.model_type = "gemma", .hf_class = "GemmaForCausalLM", .act_key = "hidden_activation",
               .default_act = ActFn::kGeluTanh, .tie_embeddings = true, .embedding_scaled = true,
               .default_head_dim = 256, .default_max_positions = 8192,
               .nested_defaults_json = R"({"vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
                   "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16})",
               .hf = {.rms_norm_scale_fp32 = true}},
    ArchTraits{.model_type = "gemma2", .hf_class = "Gemma2ForCausalLM", .act_key = "hidden_activation",
               .default_act = ActFn::kGeluTanh, .tie_embeddings = true, .sandwich_norms = true,
               .embedding_scaled = true, .window = WindowStyle::kEvenLayers, .default_window = 4096,
               .default_head_dim = 256, .default_max_positions = 8192, .default_attn_softcap = 50.0,
               .default_final_softcap = 30.0,
               .nested_defaults_json = R"({"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                   "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4})",
               .hf = {.rms_norm_scale_fp32 = true}},
    // Gemma3ForCausalLM, text part (modeling_gemma3.py): Gemma 2's sandwich norms and GeGLU, q_norm
    // / k_norm per head (Gemma3RMSNorm, (1 + w) in fp32), no softcapping, five sliding layers for
    // each global one (sliding_window_pattern 6, or layer_types), local and global RoPE tables.
    ArchTraits{.model_type = "gemma3_text", .hf_class = "Gemma3ForCausalLM", .act_key = "hidden_activation",
               .default_act = ActFn::kGeluTanh, .tie_embeddings = true, .qk_norm = true, .sandwich_norms = true,
               .embedding_scaled = true, .window = WindowStyle::kPattern, .default_window = 4096,
               .default_head_dim = 256, .default_max_positions = 131072,
               .nested_defaults_json = R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                   "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4})",
               .hf = {.rms_norm_scale_fp32 = true, .local_rope_and_mask = true}},
    ArchTraits{.model_type = "gpt2", .hf_class = "GPT2LMHeadModel", .norm = NormKind::kLayerNorm, .norm_bias = true,
               .gated_mlp = false, .act_key = "activation_function", .default_act = ActFn::kGeluNew,
               .fused_qkv = true, .qkv_bias = true, .o_bias = true, .attention_bias_key = false, .mlp_bias = true,
               .tie_embeddings = true, .learned_positions = true, .default_ffn_multiple = 4,
               .default_max_positions = 1024, .default_norm_eps = 1e-5, .default_dropout = 0.1,
               .hf = {.softmax_in_activation_dtype = true, .loss_4_44 = HfQuirks::ShiftedLoss::kActivationDtype}},
    ArchTraits{.model_type = "gpt_neox", .hf_class = "GPTNeoXForCausalLM", .norm = NormKind::kLayerNorm,
               .norm_bias = true, .gated_mlp = false, .default_act = ActFn::kGelu, .fused_qkv = true,
               .qkv_bias = true, .o_bias = true, .mlp_bias = true, .parallel_residual = true,
               .default_norm_eps = 1e-5, .default_rotary_fraction = 0.25},
    ArchTraits{.model_type = "phi3", .hf_class = "Phi3ForCausalLM", .fused_qkv = true, .fused_gate_up = true,
               .attention_bias_key = false, .window = WindowStyle::kAllLayers, .default_max_positions = 4096,
               .default_norm_eps = 1e-5,
               .hf = {.no_embedding_dropout = true}},
    // GPTBigCodeForCausalLM (StarCoder, SantaCoder): GPT-2's block with one fused c_attn of
    // (a + 2·kv)·d outputs, kv = 1 under multi_query (the config class's default), exact LayerNorm,
    // learned positions, biases everywhere, activation_function default gelu_pytorch_tanh.
    ArchTraits{.model_type = "gpt_bigcode", .hf_class = "GPTBigCodeForCausalLM", .norm = NormKind::kLayerNorm,
               .norm_bias = true, .gated_mlp = false, .act_key = "activation_function",
               .default_act = ActFn::kGeluTanh, .fused_qkv = true, .qkv_bias = true, .o_bias = true,
               .attention_bias_key = false, .mlp_bias = true, .tie_embeddings = true, .learned_positions = true,
               .family_keys = FamilyKeys::kGptBigcode, .default_ffn_multiple = 4, .default_max_positions = 1024,
               .default_norm_eps = 1e-5, .default_dropout = 0.1},
    // PhiForCausalLM (Phi-1, Phi-1.5, Phi-2): separate q/k/v and `dense` with biases, partial
    // rotary (partial_rotary_factor 0.5), one input_layernorm read by attention and the MLP in
    // parallel, fc1/fc2 with biases and gelu_new, final_layernorm, an LM head with a bias.
    ArchTraits{.model_type = "phi", .hf_class = "PhiForCausalLM", .norm = NormKind::kLayerNorm, .norm_bias = true,
               .gated_mlp = false, .default_act = ActFn::kGeluNew, .qkv_bias = true, .o_bias = true,
               .attention_bias_key = false, .mlp_bias = true, .parallel_residual = true, .lm_head_bias = true,
               .shared_input_norm = true, .family_keys = FamilyKeys::kPhi, .default_norm_eps = 1e-5,
               .default_rotary_fraction = 0.5},
    // Olmo2ForCausalLM: Llama's projections and SwiGLU, RMSNorm only after attention and after the
    // MLP (post_attention_layernorm, post_feedforward_layernorm), q_norm / k_norm over the full
    // q and k projections before RoPE.
    ArchTraits{.model_type = "olmo2", .hf_class = "Olmo2ForCausalLM", .qk_norm = true,
               .post_norms_only = true, .qk_norm_full_width = true, .default_norm_eps = 1e-5,
               // modeling_olmo2.py Olmo2RMSNorm.forward
               .hf = {.rms_norm_weight_fp32 = true}},
    // FalconForCausalLM (modeling_falcon.py): one fused query_key_value of (a + 2·kv)·d outputs
    // (kv = 1 under multi_query, num_kv_heads under new_decoder_architecture), LayerNorm, exact
    // gelu MLP of ffn_hidden_size (4h), RoPE; `bias` switches every linear's bias. Falcon-7B:
    // parallel_attn with one input_layernorm; new_decoder_architecture (40B, 180B): ln_attn and
    // ln_mlp on the same input (num_ln_in_parallel_attn = 2). read_family_keys reads the rest.
    ArchTraits{.model_type = "falcon", .hf_class = "FalconForCausalLM", .norm = NormKind::kLayerNorm,
               .norm_bias = true, .gated_mlp = false, .act_key = "activation", .default_act = ActFn::kGelu,
               .fused_qkv = true, .attention_bias_key = false, .tie_embeddings = true, .parallel_residual = true,
               .shared_input_norm = true, .family_keys = FamilyKeys::kFalcon, .default_ffn_multiple = 4,
               .default_norm_eps = 1e-5,
               // modeling_falcon.py: F.softmax(..., dtype=hidden_states.dtype); FalconModel has no embedding dropout
               .hf = {.softmax_in_activation_dtype = true, .no_embedding_dropout = true, .no_attention_dropout = true,
                      .one_residual_dropout = true}},
    // BertModel / BertForMaskedLM / BertForSequenceClassification (modeling_bert.py): separate
    // query/key/value and attention.output.dense with biases, post-LN (LayerNorm(dropout(out) + x)),
    // intermediate.dense -> exact gelu -> output.dense, learned absolute positions (512), token types,
    // embeddings.LayerNorm; no causal mask, no final norm, no LM head (read_encoder_keys: the head).
    ArchTraits{.model_type = "bert", .hf_class = "BertModel", .norm = NormKind::kLayerNorm, .norm_bias = true,
               .gated_mlp = false, .default_act = ActFn::kGelu, .qkv_bias = true, .o_bias = true,
               .attention_bias_key = false, .mlp_bias = true, .tie_embeddings = true, .learned_positions = true,
               .encoder = true, .family_keys = FamilyKeys::kEncoder, .default_max_positions = 512,
               .default_norm_eps = 1e-12, .default_dropout = 0.1,
               // modeling_bert.py BertSelfAttention: nn.functional.softmax(scores, dim=-1)
               .hf = {.softmax_in_activation_dtype = true}},
    // RobertaModel (modeling_roberta.py): BERT's layers; position ids counted from padding_idx + 1
    // (create_position_ids_from_input_ids), so the table holds max_position_embeddings = 514 rows
    // for 512 tokens; RobertaClassificationHead instead of the pooler + classifier.
    ArchTraits{.model_type = "roberta", .hf_class = "RobertaModel", .norm = NormKind::kLayerNorm, .norm_bias = true,
               .gated_mlp = false, .default_act = ActFn::kGelu, .qkv_bias = true, .o_bias = true,
               .attention_bias_key = false, .mlp_bias = true, .tie_embeddings = true, .learned_positions = true,
               .encoder = true, .position_ids_from_input = true, .family_keys = FamilyKeys::kEncoder,
               .default_max_positions = 512, .default_norm_eps = 1e-12, .default_dropout = 0.1,
               // RobertaSelfAttention copies BertSelfAttention
               .hf = {.softmax_in_activation_dtype = true}},
    // Llama4ForCausalLM, the text model of Llama4ForConditionalGeneration (modeling_llama4.py,
    // configuration_llama4.py Llama4TextConfig, transformers 4.51+): Llama's attention and norms;
    // NoPE every no_rope_layer_interval-th layer, L2 q/k norm (no weight) on the RoPE layers; MoE
    // layers (Llama4TextMoe): sigmoid top-k router, experts as fused 3-D weights, one shared expert.
    // hf_config.cc read_llama4_layers reads the rest (intermediate_size_mlp, no_rope_layers, ...).
    ArchTraits{.model_type = "llama4_text", .hf_class = "Llama4ForCausalLM", .family_keys = FamilyKeys::kLlama4,
               .moe = MoeStyle::kLlama4,
               .moe_defaults = {.num_experts = 16, .experts_per_token = 1, .expert_ffn = 8192, .shared_ffn = 8192},
               .default_head_dim = 128, .default_max_positions = 4096 * 32, .default_norm_eps = 1e-5,
               .nested_defaults_json = R"({"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
                   "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8})",
               // modeling_llama4.py eager_attention_forward: "llama4 doesn't cast attn weights to fp32"
               .hf = {.softmax_in_activation_dtype = true, .llama4 = true}},
    ArchTraits{.model_type = "deepseek_v3", .hf_class = "DeepseekV3ForCausalLM", .mla = true,
               .moe = MoeStyle::kDeepseek,
               .moe_defaults = {.num_experts = 256, .experts_per_token = 8, .expert_ffn = 2048, .shared_ffn = 1},
               .default_max_positions = 4096,
               .hf = {.router_fp32 = true, .moe_combine_fp32 = true}},
    // GptOssForCausalLM (modeling_gpt_oss.py, configuration_gpt_oss.py, transformers 4.55+): q/k/v/o
    // with biases (attention_bias, default true), one sink logit per head, sliding window 128 on the
    // even layers (layer_types), every layer MoE: GptOssTopKRouter (a Linear with a bias; softmax over
    // the top-k logits) and GptOssExperts, fused 3-D gate_up_proj (E, h, 2·f) and down_proj (E, f, h)
    // with biases and a clamped SwiGLU (swiglu_limit). Its rope_scaling default is YaRN ×32 over 4096.
    ArchTraits{.model_type = "gpt_oss", .hf_class = "GptOssForCausalLM", .qkv_bias = true, .o_bias = true,
               .mlp_bias = true, .attention_sinks = true, .moe = MoeStyle::kGptOss,
               .moe_defaults = {.num_experts = 128, .experts_per_token = 4}, .window = WindowStyle::kEvenLayers,
               .default_window = 128, .default_head_dim = 64, .default_max_positions = 131072,
               .default_norm_eps = 1e-5,
               .nested_defaults_json = R"({"vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880,
                   "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8})",
               .default_rope_json =
                   R"({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096})",
               .training_not_modelled = "the saved tensors of GptOssExperts' clamped SwiGLU with biases and of the "
                                        "attention sinks",
               .vllm_rope_fp32 = true},
    // GraniteForCausalLM (modeling_granite.py): Llama's layers with four scalar multipliers
    // (embedding_multiplier, residual_multiplier, attention_multiplier as the softmax scale,
    // logits_scaling): a multiply by a Python float saves nothing for backward and adds no weight.
    ArchTraits{.model_type = "granite", .hf_class = "GraniteForCausalLM", .mlp_bias_key = true,
               .nested_defaults_json = R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                   "num_hidden_layers": 32, "num_attention_heads": 32})"},
};

}  // namespace

std::vector<std::string_view> supported_model_types() {
  std::vector<std::string_view> names;
  for (const auto& row : kArchTable) names.push_back(row.model_type);
  return names;
}

const ArchTraits* arch_row(std::string_view model_type) {
  for (const auto& row : kArchTable)
    if (row.model_type == model_type) return &row;
  return nullptr;
}

const HfQuirks& hf_quirks(const ModelSpec& model) {
  static constexpr HfQuirks kNone{};
  const ArchTraits* row = arch_row(model.model_type);
  return row ? row->hf : kNone;
}

Expected<const ArchTraits*> find_arch(std::string_view model_type) {
  for (const auto& row : kArchTable)
    if (row.model_type == model_type) return &row;
  const auto names = supported_model_types();
  std::string hint;
  if (auto near = closest_name(model_type, names)) hint = fmt::format("did you mean '{}'? ", *near);
  // Pasted or fuzzed values can be long or hold control characters: the message stays one line.
  std::string shown;
  for (char c : model_type.substr(0, 64)) shown.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  return Error{fmt::format("model_type '{}{}' is not supported; {}supported: {}", shown,
                           model_type.size() > 64 ? "..." : "", hint, fmt::join(names, ", "))};
}

}  // namespace actmem
