#include "model/presets.h"

#include <array>
#include <filesystem>

#include <fmt/format.h>

#include "model/hf_config.h"
#include "util/spellcheck.h"

namespace actmem {

namespace {

struct Preset {
  PresetInfo info;
  std::string_view config_json;  // config.json text, read by parse_hf_config
};

// The gpt-22b ... gpt-1t rows are Megatron GPT as in Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", Table 3: V = 51200, s = 2048, learned positions,
// ffn = 4h, LayerNorm, dropout 0.1, output layer tied to the embedding (Megatron shares them).
// Megatron's GeLU is one fused (erf) op, hence "gelu", not GPT-2's Python-formula "gelu_new".
// The paper trains in 16-bit; "float16" records that.
const std::array kPresets{
    Preset{{"gpt2", "OpenAI GPT-2 small (124M)", "huggingface.co/openai-community/gpt2 config.json"},
           R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
               "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024,
               "n_embd": 768, "n_head": 12, "n_inner": null, "n_layer": 12, "n_positions": 1024,
               "resid_pdrop": 0.1, "vocab_size": 50257})"},
    Preset{{"gpt3-175b", "OpenAI GPT-3 175B",
            "Brown et al. 2020, Table 2.1 (L=96, h=12288, a=96, s=2048; GPT-2 vocabulary and layer design)"},
           R"({"model_type": "gpt2", "n_embd": 12288, "n_head": 96, "n_layer": 96, "n_positions": 2048,
               "vocab_size": 50257, "activation_function": "gelu_new", "torch_dtype": "float16"})"},
    Preset{{"gpt-22b", "Megatron GPT 22B (Korthikanti et al. 2022)", "Korthikanti et al. 2022, Table 3"},
           R"({"model_type": "gpt2", "n_embd": 6144, "n_head": 64, "n_layer": 48, "n_positions": 2048,
               "vocab_size": 51200, "activation_function": "gelu", "resid_pdrop": 0.1, "attn_pdrop": 0.1,
               "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true,
               "torch_dtype": "float16"})"},
    Preset{{"gpt-175b", "Megatron GPT 175B (Korthikanti et al. 2022)", "Korthikanti et al. 2022, Table 3"},
           R"({"model_type": "gpt2", "n_embd": 12288, "n_head": 96, "n_layer": 96, "n_positions": 2048,
               "vocab_size": 51200, "activation_function": "gelu", "resid_pdrop": 0.1, "attn_pdrop": 0.1,
               "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true,
               "torch_dtype": "float16"})"},
    Preset{{"gpt-530b", "Megatron GPT 530B (Korthikanti et al. 2022)", "Korthikanti et al. 2022, Table 3"},
           R"({"model_type": "gpt2", "n_embd": 20480, "n_head": 128, "n_layer": 105, "n_positions": 2048,
               "vocab_size": 51200, "activation_function": "gelu", "resid_pdrop": 0.1, "attn_pdrop": 0.1,
               "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true,
               "torch_dtype": "float16"})"},
    Preset{{"gpt-1t", "Megatron GPT 1T (Korthikanti et al. 2022)", "Korthikanti et al. 2022, Table 3"},
           R"({"model_type": "gpt2", "n_embd": 25600, "n_head": 160, "n_layer": 128, "n_positions": 2048,
               "vocab_size": 51200, "activation_function": "gelu", "resid_pdrop": 0.1, "attn_pdrop": 0.1,
               "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true,
               "torch_dtype": "float16"})"},
    Preset{{"llama-2-7b", "Meta Llama 2 7B", "huggingface.co/meta-llama/Llama-2-7b-hf config.json"},
           R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
               "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
               "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
               "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
               "torch_dtype": "float16", "vocab_size": 32000})"},
    Preset{{"llama-2-13b", "Meta Llama 2 13B", "huggingface.co/meta-llama/Llama-2-13b-hf config.json"},
           R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 5120,
               "intermediate_size": 13824, "max_position_embeddings": 4096, "model_type": "llama",
               "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 40,
               "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
               "torch_dtype": "float16", "vocab_size": 32000})"},
    Preset{{"llama-2-70b", "Meta Llama 2 70B", "huggingface.co/meta-llama/Llama-2-70b-hf config.json"},
           R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 8192,
               "intermediate_size": 28672, "max_position_embeddings": 4096, "model_type": "llama",
               "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
               "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
               "torch_dtype": "float16", "vocab_size": 32000})"},
    Preset{{"llama-3-8b", "Meta Llama 3 8B", "huggingface.co/meta-llama/Meta-Llama-3-8B config.json"},
           R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
               "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": null,
               "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
               "vocab_size": 128256})"},
    Preset{{"llama-3-70b", "Meta Llama 3 70B", "huggingface.co/meta-llama/Meta-Llama-3-70B config.json"},
           R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 28672,
               "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 64,
               "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": null,
               "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
               "vocab_size": 128256})"},
    Preset{{"llama-3.1-8b", "Meta Llama 3.1 8B", "huggingface.co/meta-llama/Llama-3.1-8B config.json"},
           R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
               "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
               "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
               "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0,
               "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
               "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
               "vocab_size": 128256})"},
    Preset{{"llama-3.1-70b", "Meta Llama 3.1 70B", "huggingface.co/meta-llama/Llama-3.1-70B config.json"},
           R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 28672,
               "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
               "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
               "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0,
               "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
               "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
               "vocab_size": 128256})"},
    Preset{{"llama-3.1-405b", "Meta Llama 3.1 405B", "huggingface.co/meta-llama/Llama-3.1-405B config.json"},
           R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "hidden_act": "silu", "hidden_size": 16384, "intermediate_size": 53248,
               "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
               "num_attention_heads": 128, "num_hidden_layers": 126, "num_key_value_heads": 8,
               "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0,
               "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
               "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
               "vocab_size": 128256})"},
    Preset{{"mistral-7b", "Mistral 7B v0.1 (sliding window 4096)",
            "huggingface.co/mistralai/Mistral-7B-v0.1 config.json"},
           R"({"architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
               "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
               "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
               "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
               "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000})"},
    Preset{{"mixtral-8x7b", "Mistral Mixtral 8x7B (MoE, top-2 of 8)",
            "huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json"},
           R"({"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
               "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
               "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
               "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
               "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
               "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
               "vocab_size": 32000})"},
    Preset{{"qwen2.5-7b", "Qwen2.5 7B", "huggingface.co/Qwen/Qwen2.5-7B config.json"},
           R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
               "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 131072,
               "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
               "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
               "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
               "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 152064})"},
    Preset{{"qwen2.5-72b", "Qwen2.5 72B", "huggingface.co/Qwen/Qwen2.5-72B config.json"},
           R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
               "hidden_size": 8192, "intermediate_size": 29568, "max_position_embeddings": 131072,
               "max_window_layers": 80, "model_type": "qwen2", "num_attention_heads": 64,
               "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
               "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
               "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 152064})"},
    Preset{{"qwen3-8b", "Qwen3 8B (q/k norms)", "huggingface.co/Qwen/Qwen3-8B config.json"},
           R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
               "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
               "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
               "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
               "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false,
               "vocab_size": 151936})"},
    Preset{{"qwen3-30b-a3b", "Qwen3 30B-A3B (MoE, top-8 of 128)", "huggingface.co/Qwen/Qwen3-30B-A3B config.json"},
           R"({"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
               "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
               "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
               "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
               "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
               "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0, "sliding_window": null,
               "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false,
               "vocab_size": 151936})"},
    Preset{{"gemma-2-9b", "Google Gemma 2 9B (alternating sliding window)",
            "huggingface.co/google/gemma-2-9b config.json"},
           R"({"architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "head_dim": 256,
               "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
               "hidden_size": 3584, "intermediate_size": 14336, "max_position_embeddings": 8192,
               "model_type": "gemma2", "num_attention_heads": 16, "num_hidden_layers": 42,
               "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
               "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32",
               "vocab_size": 256000})"},
    // Llama 4: the multimodal wrapper's text_config (Llama4ForConditionalGeneration); only the text
    // model is counted (Scout: 107,769,861,120 of the model card's "109B total"; the rest is the vision
    // encoder and projector). Keys that change no estimate (token ids, rope_scaling's factors) left out.
    Preset{{"llama-4-scout", "Meta Llama 4 Scout 17B-16E (text model; MoE top-1 of 16 + shared expert)",
            "huggingface.co/meta-llama/Llama-4-Scout-17B-16E config.json (text_config)"},
           R"({"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
               "tie_word_embeddings": false, "torch_dtype": "bfloat16",
               "text_config": {"attention_bias": false, "attention_chunk_size": 8192, "attention_dropout": 0.0,
               "attn_scale": 0.1, "attn_temperature_tuning": true, "floor_scale": 8192, "head_dim": 128,
               "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": 1,
               "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760,
               "model_type": "llama4_text", "num_attention_heads": 40, "num_experts_per_tok": 1,
               "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
               "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "torch_dtype": "bfloat16", "use_qk_norm": true,
               "vocab_size": 202048}})"},
    Preset{{"llama-4-maverick", "Meta Llama 4 Maverick 17B-128E (text model; MoE top-1 of 128 every 2nd layer)",
            "huggingface.co/meta-llama/Llama-4-Maverick-17B-128E config.json (text_config)"},
           R"({"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
               "tie_word_embeddings": false, "torch_dtype": "bfloat16",
               "text_config": {"attention_bias": false, "attention_chunk_size": 8192, "attention_dropout": 0.0,
               "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": 2,
               "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576,
               "model_type": "llama4_text", "num_attention_heads": 40, "num_experts_per_tok": 1,
               "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 128,
               "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
               "use_qk_norm": false, "vocab_size": 202048}})"},
    Preset{{"deepseek-v3", "DeepSeek-V3 671B (MLA, MoE top-8 of 256; without the MTP module)",
            "huggingface.co/deepseek-ai/DeepSeek-V3 config.json"},
           R"({"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
               "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
               "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
               "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
               "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
               "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
               "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
               "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
               "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
               "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
               "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
               "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 129280})"},
};

}  // namespace

const std::vector<PresetInfo>& list_presets() {
  static const std::vector<PresetInfo> infos = [] {
    std::vector<PresetInfo> v;
    for (const auto& p : kPresets) v.push_back(p.info);
    return v;
  }();
  return infos;
}

Expected<ModelSpec> load_preset(std::string_view name) {
  for (const auto& p : kPresets)
    if (p.info.name == name) return parse_hf_config(p.config_json, std::string{name});
  std::vector<std::string_view> names;
  for (const auto& p : kPresets) names.push_back(p.info.name);
  std::string hint;
  if (auto near = closest_name(name, names)) hint = fmt::format("; did you mean '{}'?", *near);
  return Error{ErrorKind::kUnknownName, "model",
               fmt::format("unknown model preset '{}'{} (actmem models lists them)", name, hint)};
}

Expected<ModelSpec> load_model(const std::string& name_or_path) {
  std::error_code ec;  // the non-throwing overload: an unreadable path is just "not a file"
  if (name_or_path.ends_with(".json") || std::filesystem::exists(name_or_path, ec))
    return load_hf_config(name_or_path);
  return load_preset(name_or_path);
}

}  // namespace actmem
