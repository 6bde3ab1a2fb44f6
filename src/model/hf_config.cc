#include "model/hf_config.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>  // config.json reader; parse errors give line and column

#include "model/arch.h"
#include "util/bytes.h"  // checked_mul, OverflowError
#include "model/params.h"
#include "model/config_reader.h"
#include "model/rope_context.h"
#include "util/json_text.h"

namespace actmem {

namespace {

using json = nlohmann::json;
using hf_detail::ConfigReader;
using hf_detail::describe;
using hf_detail::Key;

// Bounds on what a config may say: the same as ModelSpec::validate()'s (model_spec.h).
using namespace limits;  // NOLINT: kMaxDim, kMaxLayers, ...


// Key spellings and aliases, as data.
constexpr Key kModelType{{"model_type"}};
constexpr Key kHiddenSize{{"hidden_size", "n_embd", "d_model"}};
constexpr Key kNumLayers{{"num_hidden_layers", "n_layer", "num_layers", "n_layers"}};
constexpr Key kNumHeads{{"num_attention_heads", "n_head", "num_heads", "n_heads"}};
constexpr Key kNumKvHeads{{"num_key_value_heads", "num_kv_heads", "n_head_kv"}};
constexpr Key kHeadDim{{"head_dim"}};
constexpr Key kVocabSize{{"vocab_size", "n_vocab", "padded_vocab_size"}};
constexpr Key kIntermediateSize{{"intermediate_size", "n_inner", "ffn_hidden_size", "d_ff"}};
constexpr Key kMaxPositionEmbeddings{{"max_position_embeddings", "n_positions", "n_ctx", "seq_length"}};
constexpr Key kNormEps{{"rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", "norm_epsilon"}};
constexpr Key kDtype{{"torch_dtype", "dtype"}, true};
constexpr Key kTieWordEmbeddings{{"tie_word_embeddings"}, true};
constexpr Key kAttentionBias{{"attention_bias"}};
constexpr Key kMlpBias{{"mlp_bias"}};
constexpr Key kParallelResidual{{"use_parallel_residual"}};
constexpr Key kRotaryFraction{{"rotary_pct", "partial_rotary_factor"}};
constexpr Key kRopeParameters{{"rope_parameters", "rope_scaling"}};
constexpr Key kAttnSoftcap{{"attn_logit_softcapping"}};
constexpr Key kFinalSoftcap{{"final_logit_softcapping"}};
constexpr Key kHiddenDropout{{"resid_pdrop", "hidden_dropout", "hidden_dropout_prob"}};
constexpr Key kAttentionDropout{{"attn_pdrop", "attention_dropout", "attention_probs_dropout_prob"}};
constexpr Key kEmbeddingDropout{{"embd_pdrop", "embedding_dropout"}};
constexpr Key kSlidingWindow{{"sliding_window"}};
constexpr Key kUseSlidingWindow{{"use_sliding_window"}};
constexpr Key kMaxWindowLayers{{"max_window_layers"}};
constexpr Key kLayerTypes{{"layer_types"}};
constexpr Key kNumExperts{{"num_local_experts", "num_experts", "n_routed_experts"}};
constexpr Key kExpertsPerToken{{"num_experts_per_tok", "moe_top_k"}};
constexpr Key kMoeIntermediateSize{{"moe_intermediate_size"}};
constexpr Key kNormTopkProb{{"norm_topk_prob"}};
constexpr Key kSharedExpertSize{{"shared_expert_intermediate_size"}};
constexpr Key kNumSharedExperts{{"n_shared_experts"}};
constexpr Key kNGroup{{"n_group"}};
constexpr Key kTopkGroup{{"topk_group"}};
constexpr Key kRoutedScalingFactor{{"routed_scaling_factor"}};
constexpr Key kFirstDenseLayers{{"first_k_dense_replace"}};
constexpr Key kMoeLayerFreq{{"moe_layer_freq"}};
constexpr Key kDecoderSparseStep{{"decoder_sparse_step"}};
constexpr Key kMlpOnlyLayers{{"mlp_only_layers"}};
constexpr Key kQLoraRank{{"q_lora_rank"}};
constexpr Key kKvLoraRank{{"kv_lora_rank"}};
constexpr Key kQkNopeHeadDim{{"qk_nope_head_dim"}};
constexpr Key kQkRopeHeadDim{{"qk_rope_head_dim"}};
constexpr Key kVHeadDim{{"v_head_dim"}};

struct ActName {
  std::string_view name;
  ActFn fn;
};
// HF ACT2FN spellings we know the saved-tensor behaviour of.
constexpr std::array<ActName, 7> kActNames{{
    {"gelu", ActFn::kGelu},
    {"gelu_new", ActFn::kGeluNew},
    {"gelu_pytorch_tanh", ActFn::kGeluTanh},
    {"gelu_fast", ActFn::kGeluTanh},
    {"silu", ActFn::kSilu},
    {"swish", ActFn::kSilu},
    {"relu", ActFn::kRelu},
}};



Expected<ActFn> read_activation(const ConfigReader& r, const ArchTraits& arch) {
  const Key key{{arch.act_key}};
  auto name = r.optional_string(key);
  if (!name) return name.error();
  if (!*name) return arch.default_act;
  for (const auto& a : kActNames)
    if (a.name == **name) return a.fn;
  std::vector<std::string_view> known;
  for (const auto& a : kActNames) known.push_back(a.name);
  return r.error(fmt::format("'{}' = \"{}\" is not a supported activation; use one of {}", arch.act_key,
                             one_line(**name, 40), fmt::join(known, ", ")));
}

/// The attention window of every layer, per the architecture's sliding-window style, or from an
/// explicit `layer_types` list (newer transformers write one).
Expected<std::vector<int64_t>> read_windows(const ConfigReader& r, const ArchTraits& arch, int64_t num_layers) {
  std::vector<int64_t> windows(static_cast<size_t>(num_layers), 0);
  if (arch.window == WindowStyle::kNone) return windows;

  // Null means "no window" (HF's None); absent means the class default.
  auto window_key = r.find(kSlidingWindow);
  int64_t window = arch.default_window;
  if (window_key) {
    auto w = r.optional_int(kSlidingWindow, 0, kMaxPositions);
    if (!w) return w.error();
    window = w->value_or(0);
  }
  int64_t first_sliding = 0;
  if (arch.window == WindowStyle::kFromMaxWindowLayer) {
    auto use = r.bool_or(kUseSlidingWindow, false);
    if (!use) return use.error();
    if (!*use) return windows;
    auto max_window_layers = r.int_or(kMaxWindowLayers, 28, 0, kMaxLayers);
    if (!max_window_layers) return max_window_layers.error();
    first_sliding = *max_window_layers;
  }

  if (auto types = r.find(kLayerTypes); types && !types->value->is_null()) {
    const json& list = *types->value;
    if (!list.is_array() || static_cast<int64_t>(list.size()) != num_layers)
      return r.error(fmt::format("'{}' must be a list of {} strings (one per layer), got {}", types->name,
                                 num_layers, describe(list)));
    for (size_t i = 0; i < list.size(); ++i) {
      const json& t = list[i];
      if (t == "full_attention") continue;
      if (t != "sliding_attention")
        return r.error(fmt::format("'{}'[{}] = {} is not supported; use \"full_attention\" or \"sliding_attention\"",
                                   types->name, i, describe(t)));
      if (window == 0)
        return r.error(fmt::format("'{}'[{}] is sliding_attention but sliding_window is null", types->name, i));
      windows[i] = window;
    }
    return windows;
  }

  int64_t pattern = 0;
  if (arch.window == WindowStyle::kPattern) {  // Gemma3TextConfig: sliding_window_pattern, default 6
    static constexpr Key kSlidingPattern{{"sliding_window_pattern"}};
    auto p = r.int_or(kSlidingPattern, 6, 1, kMaxLayers);
    if (!p) return p.error();
    pattern = *p;
  }
  for (int64_t i = 0; i < num_layers; ++i) {
    const bool sliding = arch.window == WindowStyle::kEvenLayers ? i % 2 == 0
                         : arch.window == WindowStyle::kPattern  ? (i + 1) % pattern != 0
                                                                 : i >= first_sliding;
    windows[static_cast<size_t>(i)] = sliding ? window : 0;
  }
  return windows;
}

/// Which layers hold routed experts, per the MoE style's keys.
Expected<std::vector<bool>> read_moe_layers(const ConfigReader& r, const ArchTraits& arch, int64_t num_layers,
                                            int64_t num_experts) {
  std::vector<bool> moe(static_cast<size_t>(num_layers), false);
  if (num_experts == 0) return moe;
  switch (arch.moe) {
    case MoeStyle::kNone:
      return moe;
    case MoeStyle::kMixtral:
    case MoeStyle::kGptOss:
      moe.assign(moe.size(), true);
      return moe;
    case MoeStyle::kQwen2Moe:
    case MoeStyle::kQwen3Moe: {
      // HF: MoE when layer_idx not in mlp_only_layers and (layer_idx + 1) % decoder_sparse_step == 0.
      auto step = r.int_or(kDecoderSparseStep, 1, 1, kMaxLayers);
      if (!step) return step.error();
      std::set<int64_t> mlp_only;
      if (auto f = r.find(kMlpOnlyLayers); f && !f->value->is_null()) {
        if (!f->value->is_array())
          return r.error(fmt::format("'{}' must be a list of layer indices, got {}", f->name, describe(*f->value)));
        for (const json& v : *f->value) {
          auto i = r.to_int({f->name, &v});
          if (!i) return i.error();
          mlp_only.insert(*i);
        }
      }
      for (int64_t i = 0; i < num_layers; ++i)
        moe[static_cast<size_t>(i)] = !mlp_only.contains(i) && (i + 1) % *step == 0;
      return moe;
    }
    case MoeStyle::kDeepseek: {
      // HF: MoE when layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0.
      auto first_dense = r.int_or(kFirstDenseLayers, 3, 0, kMaxLayers);
      if (!first_dense) return first_dense.error();
      auto freq = r.int_or(kMoeLayerFreq, 1, 1, kMaxLayers);
      if (!freq) return freq.error();
      for (int64_t i = 0; i < num_layers; ++i) moe[static_cast<size_t>(i)] = i >= *first_dense && i % *freq == 0;
      return moe;
    }
    case MoeStyle::kLlama4: {
      // Llama4TextConfig: moe_layers, else range(interleave_moe_layer_step − 1, L, interleave_moe_layer_step).
      static constexpr Key kMoeLayers{{"moe_layers"}};
      static constexpr Key kInterleave{{"interleave_moe_layer_step"}};
      if (auto f = r.find(kMoeLayers); f && !f->value->is_null()) {
        if (!f->value->is_array())
          return r.error(fmt::format("'{}' must be a list of layer indices, got {}", f->name, describe(*f->value)));
        for (const json& v : *f->value) {
          auto i = r.to_int({f->name, &v});
          if (!i) return i.error();
          if (*i < 0 || *i >= num_layers)
            return r.error(fmt::format("'{}' holds layer {}, outside 0..{}", f->name, *i, num_layers - 1));
          moe[static_cast<size_t>(*i)] = true;
        }
        return moe;
      }
      auto step = r.int_or(kInterleave, 1, 1, kMaxLayers);
      if (!step) return step.error();
      for (int64_t i = *step - 1; i < num_layers; i += *step) moe[static_cast<size_t>(i)] = true;
      return moe;
    }
  }
  return moe;
}

Expected<std::optional<MoeSpec>> read_moe(const ConfigReader& r, const ArchTraits& arch, int64_t ffn) {
  if (arch.moe == MoeStyle::kNone) return std::optional<MoeSpec>{};
  const MoeDefaults& d = arch.moe_defaults;
  MoeSpec moe;
  auto experts = r.int_or(kNumExperts, d.num_experts, 0, kMaxExperts);
  if (!experts) return experts.error();
  if (*experts == 0) return std::optional<MoeSpec>{};  // HF falls back to the dense MLP
  moe.num_experts = *experts;
  auto top_k = r.int_or(kExpertsPerToken, d.experts_per_token, 1, moe.num_experts);
  if (!top_k) return top_k.error();
  moe.experts_per_token = *top_k;
  if (arch.moe == MoeStyle::kMixtral || arch.moe == MoeStyle::kGptOss) {
    if (ffn == 0) return r.error("missing required key 'intermediate_size' (the size of one expert)");
    moe.expert_ffn = ffn;
    moe.router_bias = arch.moe == MoeStyle::kGptOss;  // GptOssTopKRouter: a bias of E; softmax over the top k
    if (moe.router_bias) return std::optional<MoeSpec>{moe};
  } else if (arch.moe == MoeStyle::kLlama4) {
    // Llama4TextExperts and the shared expert (Llama4TextMLP(config)) are both intermediate_size wide;
    // Llama4Router scores with sigmoid on the top-k logits: no renormalization.
    moe.expert_ffn = moe.shared_ffn = ffn > 0 ? ffn : d.expert_ffn;
    moe.normalize_topk = false;
    return std::optional<MoeSpec>{moe};
  } else {
    auto expert_ffn = r.int_or(kMoeIntermediateSize, d.expert_ffn, 1, kMaxFfn);
    if (!expert_ffn) return expert_ffn.error();
    moe.expert_ffn = *expert_ffn;
  }
  if (arch.moe != MoeStyle::kMixtral) {
    // Qwen2-MoE / Qwen3-MoE config classes default to false, DeepSeek-V3's to true.
    auto normalize = r.bool_or(kNormTopkProb, arch.moe == MoeStyle::kDeepseek);
    if (!normalize) return normalize.error();
    moe.normalize_topk = *normalize;
  }
  if (arch.moe == MoeStyle::kQwen2Moe) {
    auto shared = r.int_or(kSharedExpertSize, d.shared_ffn, 0, kMaxFfn);
    if (!shared) return shared.error();
    moe.shared_ffn = *shared;
    moe.shared_expert_gate = *shared > 0;
  }
  if (arch.moe == MoeStyle::kDeepseek) {
    // shared experts are n_shared_experts experts of moe_intermediate_size, run as one MLP.
    auto shared = r.int_or(kNumSharedExperts, d.shared_ffn, 0, 1024);
    if (!shared) return shared.error();
    moe.shared_ffn = checked_mul(*shared, moe.expert_ffn);
    moe.router_bias = true;  // e_score_correction_bias, a parameter in the checkpoint
    // DeepseekV3TopkRouter: sigmoid scores, group-limited top-k (configuration_deepseek_v3.py
    // defaults n_group 8, topk_group 4, routed_scaling_factor 2.5); read for Megatron's TopKRouter.
    moe.sigmoid_scores = true;
    auto groups = r.int_or(kNGroup, 8, 1, moe.num_experts);
    if (!groups) return groups.error();
    auto group_topk = r.int_or(kTopkGroup, 4, 1, *groups);
    if (!group_topk) return group_topk.error();
    auto scaling = r.double_or(kRoutedScalingFactor, 2.5, 0.0, 1e6);
    if (!scaling) return scaling.error();
    moe.router_groups = *groups;
    moe.router_group_topk = *group_topk;
    moe.routed_scaling_factor = *scaling;
  }
  return std::optional<MoeSpec>{moe};
}

Expected<std::optional<MlaSpec>> read_mla(const ConfigReader& r, const ArchTraits& arch) {
  if (!arch.mla) return std::optional<MlaSpec>{};
  if (!r.find(kQLoraRank))
    return r.error("missing required key 'q_lora_rank'; use null when q is projected directly");
  MlaSpec mla;
  struct Field {
    const Key& key;
    int64_t& value;
    bool nullable;
  };
  const Field fields[] = {
      {kQLoraRank, mla.q_lora_rank, true},           {kKvLoraRank, mla.kv_lora_rank, false},
      {kQkNopeHeadDim, mla.qk_nope_head_dim, false}, {kQkRopeHeadDim, mla.qk_rope_head_dim, false},
      {kVHeadDim, mla.v_head_dim, false},
  };
  for (const auto& f : fields) {
    auto v = f.nullable ? r.int_or(f.key, 0, 1, kMaxDim) : r.required_int(f.key, 1, kMaxDim);
    if (!v) return v.error();
    f.value = *v;
  }
  auto bias = r.bool_or(kAttentionBias, false);
  if (!bias) return bias.error();
  if (*bias) return r.error("'attention_bias' = true is not supported with multi-head latent attention");
  return std::optional<MlaSpec>{mla};
}

/// Dropout probabilities, [0, 1).
Expected<void> read_dropouts(const ConfigReader& r, const ArchTraits& arch, ModelSpec& spec) {
  struct Field {
    const Key& key;
    double& value;
  };
  const Field fields[] = {{kHiddenDropout, spec.hidden_dropout},
                          {kAttentionDropout, spec.attention_dropout},
                          {kEmbeddingDropout, spec.embedding_dropout}};
  for (const auto& f : fields) {
    auto v = r.double_or(f.key, arch.default_dropout, 0.0, 0.999);
    if (!v) return v.error();
    f.value = *v;
  }
  return {};
}

/// A key whose truthy value (true, a non-zero number, a non-empty string) the modeling class
/// supports but actmem does not: a one-line error naming it.
Expected<void> refuse_truthy(const ConfigReader& r, std::string_view model_type, std::string_view key,
                             std::string_view what) {
  auto f = r.find(Key{{key}});
  if (!f || f->value->is_null()) return {};
  const json& v = *f->value;
  const bool truthy = (v.is_boolean() && v.get<bool>()) || (v.is_number() && v.get<double>() != 0.0) ||
                      (v.is_string() && !v.get<std::string>().empty()) || (v.is_array() && !v.empty()) ||
                      (v.is_object() && !v.empty());
  if (!truthy) return {};
  return r.error(fmt::format("'{}' = {} is not supported for model_type '{}' ({}); set it to false or remove it",
                             f->name, describe(v), model_type, what));
}

/// Falcon (configuration_falcon.py defaults: multi_query true, parallel_attn true,
/// new_decoder_architecture false, bias false, alibi false, num_kv_heads = num_attention_heads,
/// num_ln_in_parallel_attn null = 2 under the new architecture; FalconAttention, FalconDecoderLayer).
Expected<void> read_falcon_keys(const ConfigReader& r, const ArchTraits& arch, ModelSpec& spec) {
  static constexpr Key kMultiQuery{{"multi_query"}};
  static constexpr Key kNewArch{{"new_decoder_architecture"}};
  static constexpr Key kParallelAttn{{"parallel_attn"}};
  static constexpr Key kBias{{"bias"}};
  static constexpr Key kNumLn{{"num_ln_in_parallel_attn"}};
  if (auto e = refuse_truthy(r, arch.model_type, "alibi", "ALiBi attention biases instead of RoPE"); !e) return e;
  if (auto e = refuse_truthy(r, arch.model_type, "apply_residual_connection_post_layernorm",
                             "the residual taken after the input LayerNorm");
      !e)
    return e;
  auto new_arch = r.bool_or(kNewArch, false);
  if (!new_arch) return new_arch.error();
  auto multi_query = r.bool_or(kMultiQuery, true);
  if (!multi_query) return multi_query.error();
  auto parallel = r.bool_or(kParallelAttn, true);
  if (!parallel) return parallel.error();
  auto bias = r.bool_or(kBias, false);
  if (!bias) return bias.error();
  spec.qkv_bias = spec.o_bias = spec.mlp_bias = *bias;
  if (*new_arch) {
    // KV heads from num_kv_heads (read already); ln_attn and ln_mlp both read the layer input.
    auto num_ln = r.int_or(kNumLn, 2, 1, 2);
    if (!num_ln) return num_ln.error();
    spec.parallel_residual = true;
    spec.shared_input_norm = *num_ln == 1;
    spec.kv_copied_in_split = spec.kv_expanded_in_split = true;
    return {};
  }
  if (!*parallel)
    return r.error("'parallel_attn' = false (sequential Falcon blocks, whose attention residual is dropped "
                   "with attention_dropout) is not supported; use a parallel_attn or new_decoder_architecture config");
  spec.parallel_residual = spec.shared_input_norm = true;
  spec.kv_copied_in_split = true;  // multi_query: `[..., [-2], :]` copies; MHA: transpose(1, 2).reshape copies
  if (*multi_query) {
    spec.num_kv_heads = 1;
  } else if (spec.num_kv_heads != spec.num_heads) {
    return r.error(fmt::format("'num_kv_heads' = {} needs new_decoder_architecture (without it and without "
                               "multi_query the fused projection holds num_attention_heads = {} KV heads)",
                               spec.num_kv_heads, spec.num_heads));
  }
  return {};
}

/// The head an encoder's `architectures` names: BertModel / RobertaModel (none: the bare model,
/// BERT's with its pooler), *ForMaskedLM, *ForSequenceClassification. Absent: the bare model.
Expected<EncoderHead> encoder_head_of(const ConfigReader& r) {
  auto f = r.find(Key{{"architectures"}});
  if (!f || f->value->is_null() || (f->value->is_array() && f->value->empty())) return EncoderHead::kNone;
  const json& v = *f->value;
  if (!v.is_array() || !v.front().is_string())
    return r.error(fmt::format("'architectures' = {} must be a list of class names", describe(v)));
  const std::string name = v.front().get<std::string>();
  auto ends = [&](std::string_view tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends("ForMaskedLM")) return EncoderHead::kMaskedLM;
  if (ends("ForSequenceClassification")) return EncoderHead::kClassifier;
  if (ends("Model") && !ends("LMHeadModel")) return EncoderHead::kNone;
  return r.error(fmt::format("'architectures' = '{}' is not modelled for an encoder (heads: *Model, *ForMaskedLM, "
                             "*ForSequenceClassification); name one of those, or remove the key and choose with @head",
                             one_line(name)));
}

/// BERT / RoBERTa (configuration_bert.py, configuration_roberta.py: type_vocab_size 2,
/// position_embedding_type "absolute", classifier_dropout None = hidden_dropout_prob, num_labels 2
/// (PretrainedConfig), is_decoder false). BertEmbeddings applies hidden_dropout_prob after its
/// LayerNorm (no separate embedding dropout key).
Expected<void> read_encoder_keys(const ConfigReader& r, const ArchTraits& arch, ModelSpec& spec) {
  static constexpr Key kTypeVocab{{"type_vocab_size"}};
  static constexpr Key kNumLabels{{"num_labels"}};
  static constexpr Key kClassifierDropout{{"classifier_dropout"}};
  static constexpr Key kPositionType{{"position_embedding_type"}};
  if (auto e = refuse_truthy(r, arch.model_type, "is_decoder", "a causal decoder (BertLMHeadModel)"); !e) return e;
  if (auto e = refuse_truthy(r, arch.model_type, "add_cross_attention", "a cross-attention block per layer"); !e)
    return e;
  auto position_type = r.optional_string(kPositionType);
  if (!position_type) return position_type.error();
  if (*position_type && **position_type != "absolute")
    return r.error(fmt::format("'position_embedding_type' = '{}' is not supported for model_type '{}' (only "
                               "\"absolute\"; relative_key adds a distance embedding and its scores)",
                               one_line(**position_type), arch.model_type));
  auto type_vocab = r.int_or(kTypeVocab, 2, 0, kMaxVocab);
  if (!type_vocab) return type_vocab.error();
  auto head = encoder_head_of(r);
  if (!head) return head.error();
  int64_t labels = 2;
  if (auto f = r.find(Key{{"id2label"}}); f && f->value->is_object() && !f->value->empty())
    labels = static_cast<int64_t>(f->value->size());
  auto num_labels = r.int_or(kNumLabels, labels, 1, kMaxVocab);
  if (!num_labels) return num_labels.error();
  if (*head == EncoderHead::kClassifier && *num_labels < 2)
    return r.error("'num_labels' = 1 is a regression head (MSELoss), not modelled; use num_labels >= 2");
  auto cls_dropout = r.double_or(kClassifierDropout, spec.hidden_dropout, 0.0, 0.999);
  if (!cls_dropout) return cls_dropout.error();
  spec.encoder = true;
  spec.type_vocab = *type_vocab;
  spec.position_ids_from_input = arch.position_ids_from_input;
  spec.head = *head;
  spec.num_labels = *num_labels;
  spec.classifier_dropout = *cls_dropout;
  spec.embedding_dropout = spec.hidden_dropout;  // BertEmbeddings.dropout is nn.Dropout(hidden_dropout_prob)
  return {};
}

/// Llama 4 text (configuration_llama4.py Llama4TextConfig, modeling_llama4.py), after the layers:
///  - dense layers (not in moe_layers) are Llama4TextMLP(intermediate_size_mlp), default 16384;
///  - no_rope_layers (1 = RoPE, 0 = NoPE), empty or absent: int((i + 1) % no_rope_layer_interval != 0),
///    interval default 4;
///  - layer_types ("chunked_attention" | "full_attention"), absent: chunked on the RoPE layers, which
///    attend within attention_chunk_size tokens (default 8192; null: full causal attention);
///  - use_qk_norm (default true): Llama4TextL2Norm on the RoPE layers; attn_temperature_tuning
///    (default true; Scout's config.json writes 4, a truthy number): q scaled on the NoPE layers.
Expected<void> read_llama4_layers(const ConfigReader& r, ModelSpec& spec) {
  static constexpr Key kMlpSize{{"intermediate_size_mlp"}};
  static constexpr Key kNoRope{{"no_rope_layers"}};
  static constexpr Key kNoRopeInterval{{"no_rope_layer_interval"}};
  static constexpr Key kChunk{{"attention_chunk_size"}};
  static constexpr Key kUseQkNorm{{"use_qk_norm"}};
  static constexpr Key kTemperature{{"attn_temperature_tuning"}};
  auto mlp = r.int_or(kMlpSize, 16384, 1, kMaxFfn);
  if (!mlp) return mlp.error();
  const auto n = static_cast<size_t>(spec.num_layers);
  std::vector<bool> rope(n, true);
  const auto listed = r.find(kNoRope);
  if (listed && !listed->value->is_null() && !(listed->value->is_array() && listed->value->empty())) {
    const json& list = *listed->value;
    if (!list.is_array() || list.size() < n)
      return r.error(fmt::format("'{}' must be a list of at least {} 0/1 values (1 = RoPE), got {}", listed->name, n,
                                 describe(list)));
    for (size_t i = 0; i < n; ++i) {
      auto v = r.to_int({listed->name, &list[i]});
      if (!v) return v.error();
      if (*v != 0 && *v != 1)
        return r.error(fmt::format("'{}'[{}] = {} must be 0 (NoPE) or 1 (RoPE)", listed->name, i, *v));
      rope[i] = *v == 1;
    }
  } else {
    auto interval = r.int_or(kNoRopeInterval, 4, 1, kMaxLayers);
    if (!interval) return interval.error();
    for (size_t i = 0; i < n; ++i) rope[i] = (static_cast<int64_t>(i) + 1) % *interval != 0;
  }
  auto chunk = r.int_or(kChunk, 8192, 1, kMaxPositions);
  if (!chunk) return chunk.error();
  if (auto f = r.find(kChunk); f && f->value->is_null()) *chunk = 0;
  std::vector<bool> chunked = rope;
  if (auto types = r.find(Key{{"layer_types"}}); types && !types->value->is_null()) {
    const json& list = *types->value;
    if (!list.is_array() || list.size() != n)
      return r.error(fmt::format("'{}' must be a list of {} strings (one per layer), got {}", types->name, n,
                                 describe(list)));
    for (size_t i = 0; i < n; ++i) {
      if (list[i] != "chunked_attention" && list[i] != "full_attention")
        return r.error(fmt::format("'{}'[{}] = {} is not supported; use \"chunked_attention\" or \"full_attention\"",
                                   types->name, i, describe(list[i])));
      chunked[i] = list[i] == "chunked_attention";
    }
  }
  auto qk = r.bool_or(kUseQkNorm, true);
  if (!qk) return qk.error();
  bool temperature = true;
  if (auto f = r.find(kTemperature); f && !f->value->is_null()) {
    if (f->value->is_boolean())
      temperature = f->value->get<bool>();
    else if (f->value->is_number())
      temperature = f->value->get<double>() != 0.0;
    else
      return r.error(fmt::format("'{}' must be true, false or a number, got {}", f->name, describe(*f->value)));
  }
  spec.qk_l2_norm = *qk;
  spec.attn_temperature_tuning = temperature;
  for (size_t i = 0; i < n; ++i) {
    LayerSpec& l = spec.layers[i];
    if (!l.moe) l.ffn = *mlp;
    l.no_rope = !rope[i];
    l.attention_chunk = chunked[i] ? *chunk : 0;
  }
  return {};
}

/// Keys only some families have (ArchTraits::family_keys), read after the common ones.
///  - gpt_bigcode (configuration_gpt_bigcode.py, GPTBigCodeAttention): multi_query (default true)
///    means one KV head; add_cross_attention adds a cross-attention block (refused).
///  - phi (configuration_phi.py, PhiAttention): qk_layernorm adds LayerNorms on q and k (refused).
///  - Llama 4's keys are per layer: read_llama4_layers, once the layers exist.
Expected<void> read_family_keys(const ConfigReader& r, const ArchTraits& arch, ModelSpec& spec) {
  switch (arch.family_keys) {
    case FamilyKeys::kGptBigcode: {
      static constexpr Key kMultiQuery{{"multi_query"}};
      auto mq = r.bool_or(kMultiQuery, true);
      if (!mq) return mq.error();
      spec.num_kv_heads = *mq ? 1 : spec.num_heads;
      return refuse_truthy(r, arch.model_type, "add_cross_attention", "a cross-attention block per layer");
    }
    case FamilyKeys::kPhi:
      return refuse_truthy(r, arch.model_type, "qk_layernorm", "LayerNorms on q and k");
    case FamilyKeys::kFalcon:
      return read_falcon_keys(r, arch, spec);
    case FamilyKeys::kEncoder:
      return read_encoder_keys(r, arch, spec);
    case FamilyKeys::kNone:
    case FamilyKeys::kLlama4:
      break;
  }
  return {};
}

/// RoPE scaling (rope_parameters / rope_scaling, or the family's default), the partial rotary
/// fraction and Gemma 2's logit softcaps.
Expected<void> read_rope_and_softcaps(const ConfigReader& r, const ArchTraits& arch, ModelSpec& spec) {
  // Partial rotary: top-level key, else inside rope_parameters / rope_scaling (transformers v5).
  double rotary_default = arch.default_rotary_fraction;
  // Absent: the config class's default (our own text); null: none.
  const auto rope = r.find(kRopeParameters);
  const json fallback = rope || arch.default_rope_json.empty() ? json() : json::parse(arch.default_rope_json);
  if (const json& block = rope ? *rope->value : fallback; !block.is_null()) {
    auto rotary_in_rope = read_rope_block(block, rope ? rope->name : "rope_scaling", rotary_default, spec, describe);
    if (!rotary_in_rope) return r.error(rotary_in_rope.error().message);
    rotary_default = *rotary_in_rope;
  }
  auto rotary = r.double_or(kRotaryFraction, rotary_default, 0.0, 1.0);
  if (!rotary) return rotary.error();
  spec.rotary_fraction = *rotary;
  auto attn_softcap = r.double_or(kAttnSoftcap, arch.default_attn_softcap, 0.0, 1e9);
  if (!attn_softcap) return attn_softcap.error();
  spec.attn_logit_softcap = *attn_softcap;
  auto final_softcap = r.double_or(kFinalSoftcap, arch.default_final_softcap, 0.0, 1e9);
  if (!final_softcap) return final_softcap.error();
  spec.final_logit_softcap = *final_softcap;
  return {};
}

Expected<ModelSpec> read_spec(const ConfigReader& r, const ArchTraits& arch, std::string display_name) {
  ModelSpec spec;
  spec.name = std::move(display_name);
  spec.model_type = std::string{arch.model_type};

  // Core sizes.
  struct SizeField {
    const Key& key;
    int64_t& value;
    int64_t max;
  };
  const SizeField sizes[] = {{kHiddenSize, spec.hidden, kMaxDim},
                             {kNumLayers, spec.num_layers, kMaxLayers},
                             {kNumHeads, spec.num_heads, kMaxDim},
                             {kVocabSize, spec.vocab, kMaxVocab}};
  for (const auto& f : sizes) {
    auto v = r.required_int(f.key, 1, f.max);
    if (!v) return v.error();
    f.value = *v;
  }
  // Absent means multi-head attention (GPT-2, GPT-NeoX have no such key).
  auto kv_heads = r.int_or(kNumKvHeads, spec.num_heads, 1, kMaxDim);
  if (!kv_heads) return kv_heads.error();
  spec.num_kv_heads = *kv_heads;
  if (spec.num_heads % spec.num_kv_heads != 0)
    return r.error(fmt::format("num_attention_heads ({}) is not divisible by num_key_value_heads ({}); "
                               "grouped-query attention needs whole groups",
                               spec.num_heads, spec.num_kv_heads));

  auto mla = read_mla(r, arch);
  if (!mla) return mla.error();
  spec.mla = *mla;
  auto head_dim = r.optional_int(kHeadDim, 1, kMaxDim);
  if (!head_dim) return head_dim.error();
  if (spec.mla) {
    spec.head_dim = spec.mla->qk_head_dim();  // the per-head width of q and (decompressed) k
  } else if (*head_dim) {
    spec.head_dim = **head_dim;
  } else if (arch.default_head_dim > 0) {
    spec.head_dim = arch.default_head_dim;
  } else {
    if (spec.hidden % spec.num_heads != 0)
      return r.error(fmt::format("hidden_size ({}) is not divisible by num_attention_heads ({}); set head_dim",
                                 spec.hidden, spec.num_heads));
    spec.head_dim = spec.hidden / spec.num_heads;
  }

  auto max_positions = r.int_or(kMaxPositionEmbeddings, arch.default_max_positions, 1, kMaxPositions);
  if (!max_positions) return max_positions.error();
  spec.max_positions = *max_positions;

  auto ffn = r.optional_int(kIntermediateSize, 1, kMaxFfn);
  if (!ffn) return ffn.error();
  const int64_t dense_ffn = ffn->value_or(arch.default_ffn_multiple * spec.hidden);

  // Layer structure, hard-coded by the modeling class.
  spec.norm = arch.norm;
  spec.norm_bias = arch.norm_bias;
  spec.gated_mlp = arch.gated_mlp;
  spec.fused_qkv = arch.fused_qkv;
  spec.fused_gate_up = arch.fused_gate_up;
  spec.learned_positions = arch.learned_positions;
  spec.qk_norm = arch.qk_norm;
  spec.sandwich_norms = arch.sandwich_norms;
  spec.embedding_scaled = arch.embedding_scaled;
  spec.lm_head_bias = arch.lm_head_bias;
  spec.shared_input_norm = arch.shared_input_norm;
  spec.post_norms_only = arch.post_norms_only;
  spec.qk_norm_full_width = arch.qk_norm_full_width;
  spec.attention_sinks = arch.attention_sinks;

  auto act = read_activation(r, arch);
  if (!act) return act.error();
  spec.act = *act;
  auto eps = r.double_or(kNormEps, arch.default_norm_eps, 0.0, 1.0);
  if (!eps) return eps.error();
  spec.norm_eps = *eps;

  spec.qkv_bias = arch.qkv_bias;
  spec.o_bias = arch.o_bias;
  if (arch.attention_bias_key && !arch.mla) {
    auto bias = r.bool_or(kAttentionBias, arch.qkv_bias);
    if (!bias) return bias.error();
    spec.qkv_bias = spec.o_bias = *bias;
  }
  spec.mlp_bias = arch.mlp_bias;
  if (arch.mlp_bias_key) {
    auto bias = r.bool_or(kMlpBias, arch.mlp_bias);
    if (!bias) return bias.error();
    spec.mlp_bias = *bias;
  }
  auto tied = r.bool_or(kTieWordEmbeddings, arch.tie_embeddings);
  if (!tied) return tied.error();
  spec.tied_embeddings = *tied;
  auto parallel = r.bool_or(kParallelResidual, arch.parallel_residual);
  if (!parallel) return parallel.error();
  spec.parallel_residual = *parallel;

  if (auto p = read_rope_and_softcaps(r, arch, spec); !p) return p.error();
  if (auto d = read_dropouts(r, arch, spec); !d) return d.error();

  if (auto f = read_family_keys(r, arch, spec); !f) return f.error();

  // Absent dtype: PyTorch (and HF from_pretrained without torch_dtype) loads fp32.
  auto dtype_name = r.optional_string(kDtype);
  if (!dtype_name) return dtype_name.error();
  spec.dtype = DType::kFP32;
  if (*dtype_name) {
    auto dtype = parse_dtype(**dtype_name);
    if (!dtype) return r.error(fmt::format("torch_dtype: {}", one_line(dtype.error().message)));
    spec.dtype = *dtype;
  }

  // Per-layer data.
  auto moe = read_moe(r, arch, dense_ffn);
  if (!moe) return moe.error();
  spec.moe = *moe;
  auto moe_layers = read_moe_layers(r, arch, spec.num_layers, spec.moe ? spec.moe->num_experts : 0);
  if (!moe_layers) return moe_layers.error();
  auto windows = read_windows(r, arch, spec.num_layers);
  if (!windows) return windows.error();
  spec.layers.resize(static_cast<size_t>(spec.num_layers));
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    LayerSpec& layer = spec.layers[i];
    layer.moe = (*moe_layers)[i];
    layer.sliding_window = (*windows)[i];
    if (!layer.moe) {
      if (dense_ffn == 0)
        return r.error(fmt::format("missing required key 'intermediate_size' (layer {} has a dense MLP)", i));
      layer.ffn = dense_ffn;
    }
  }
  if (arch.family_keys == FamilyKeys::kLlama4)
    if (auto l = read_llama4_layers(r, spec); !l) return l.error();
  if (spec.moe && spec.num_moe_layers() == 0) spec.moe.reset();

  if (auto valid = spec.validate(); !valid) return r.error(valid.error().message);
  // Every later product of sizes must fit in int64; counting the parameters once proves it.
  try {
    (void)count_params(spec).total();
  } catch (const OverflowError&) {
    return r.error("the model's parameter count overflows int64; check the sizes");
  }
  return spec;
}

Expected<ModelSpec> parse_impl(std::string_view json_text, std::string display_name) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return Error{fmt::format("{}: malformed JSON: {}", display_name, json_error_text(e))};
  }
  if (!root.is_object())
    return Error{fmt::format("{}: config.json must be a JSON object, got {}", display_name, root.type_name())};

  // Multimodal wrappers (LLaVA, PaliGemma, ...) describe the language model in text_config.
  const json* config = &root;
  const json* wrapper = nullptr;
  if (auto it = root.find("text_config"); it != root.end() && !it->is_null()) {
    if (!it->is_object())
      return Error{fmt::format("{}: 'text_config' must be an object, got {}", display_name, describe(*it))};
    config = &*it;
    wrapper = &root;
  }
  const ConfigReader untyped(*config, wrapper, nullptr, display_name);
  auto model_type = untyped.optional_string(kModelType);
  if (!model_type) return model_type.error();
  if (!*model_type)
    return untyped.error(fmt::format("missing required key '{}model_type'; add e.g. \"model_type\": \"llama\"",
                                     wrapper ? "text_config." : ""));
  auto arch = find_arch(**model_type);
  if (!arch) return untyped.error(arch.error().message);

  json class_defaults;
  if (wrapper && !(*arch)->nested_defaults_json.empty())
    class_defaults = json::parse((*arch)->nested_defaults_json);  // our own text: well-formed
  const ConfigReader reader(*config, wrapper, class_defaults.is_object() ? &class_defaults : nullptr,
                            display_name);
  auto spec = read_spec(reader, **arch, std::move(display_name));
  if (spec && wrapper) {  // the wrapper's own model_type, e.g. "llama4" around "llama4_text"
    auto outer = ConfigReader(root, nullptr, nullptr, "").optional_string(kModelType);
    spec->wrapper_model_type = outer && *outer ? one_line(**outer, 40) : std::string{"multimodal"};
    auto vision = read_vision_config(root, spec->wrapper_model_type, spec->name, spec->warnings);
    if (!vision) return vision.error();
    spec->vision = std::move(*vision);
  }
  if (spec) {  // a wrapper's quantization_config sits beside text_config, at the root
    auto quant = read_quantization_config(root, spec->name);
    if (!quant) return quant.error();
    spec->quant = std::move(*quant);
  }
  return spec;
}

}  // namespace

Expected<ModelSpec> parse_hf_config(std::string_view json_text, std::string display_name) {
  // The readers above return Errors and do not throw; this is the boundary that guarantees it.
  // Every error of a config file is of kind kConfig, about the option `model` that named it.
  try {
    auto spec = parse_impl(json_text, std::move(display_name));
    if (!spec) return Error{ErrorKind::kConfig, "model", spec.error().message};
    return spec;
  } catch (const json::exception& e) {
    return Error{ErrorKind::kConfig, "model", fmt::format("config.json: {}", json_error_text(e))};
  } catch (const OverflowError& e) {
    return Error{ErrorKind::kConfig, "model", fmt::format("config.json: {}", e.what())};
  }
}

Expected<ModelSpec> load_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Error{ErrorKind::kInvalid, "model", fmt::format("cannot read config file '{}': {}", path, std::strerror(errno))};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{ErrorKind::kInvalid, "model", fmt::format("cannot read config file '{}': read failed", path)};
  return parse_hf_config(text.str(), path);
}

}  // namespace actmem
