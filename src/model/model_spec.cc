#include "model/model_spec.h"

#include <fmt/format.h>

namespace actmem {

int64_t ModelSpec::num_moe_layers() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l.moe ? 1 : 0;
  return n;
}

bool ModelSpec::has_rope() const {
  if (mla) return true;
  if (learned_positions) return false;
  for (const auto& l : layers)
    if (!l.no_rope) return true;
  return false;
}

namespace {
using namespace limits;  // NOLINT: the bounds this file checks against

Expected<void> check_positive(const char* field, int64_t v, int64_t max) {
  if (v <= 0) return Error{fmt::format("{} must be a positive integer, got {}", field, v)};
  if (v > max) return Error{fmt::format("{} = {} is absurdly large (limit {}); check the config", field, v, max)};
  return {};
}
}  // namespace

Expected<void> ModelSpec::validate() const {
  struct Field {
    const char* name;
    int64_t value;
    int64_t max;
  };
  const Field fields[] = {
      {"hidden_size", hidden, kMaxDim},          {"num_hidden_layers", num_layers, kMaxLayers},
      {"num_attention_heads", num_heads, kMaxDim}, {"num_key_value_heads", num_kv_heads, kMaxDim},
      {"head_dim", head_dim, kMaxDim},           {"vocab_size", vocab, kMaxVocab},
  };
  for (const auto& f : fields)
    if (auto r = check_positive(f.name, f.value, f.max); !r) return r;
  if (num_heads % num_kv_heads != 0)
    return Error{fmt::format("num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", num_heads,
                             num_kv_heads)};
  if (static_cast<int64_t>(layers.size()) != num_layers)
    return Error{fmt::format("per-layer data has {} entries but num_hidden_layers is {}", layers.size(), num_layers)};
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    if (!l.moe)
      if (auto r = check_positive("intermediate_size", l.ffn, kMaxFfn); !r) return r;
    if (l.moe && !moe) return Error{fmt::format("layer {} is MoE but the model has no MoE fields", i)};
    if (l.sliding_window < 0) return Error{"sliding_window must be >= 0"};
    if (l.attention_chunk < 0) return Error{"attention_chunk_size must be >= 0"};
  }
  if (moe) {
    if (auto r = check_positive("num_experts", moe->num_experts, kMaxExperts); !r) return r;
    if (moe->experts_per_token > moe->num_experts)
      return Error{fmt::format("num_experts_per_tok ({}) exceeds the number of experts ({}); it must be <= {}",
                               moe->experts_per_token, moe->num_experts, moe->num_experts)};
    if (auto r = check_positive("num_experts_per_tok", moe->experts_per_token, moe->num_experts); !r) return r;
    if (auto r = check_positive("moe_intermediate_size", moe->expert_ffn, kMaxFfn); !r) return r;
  }
  if (mla) {
    if (auto r = check_positive("kv_lora_rank", mla->kv_lora_rank, kMaxDim); !r) return r;
    if (auto r = check_positive("qk_rope_head_dim", mla->qk_rope_head_dim, kMaxDim); !r) return r;
    if (auto r = check_positive("v_head_dim", mla->v_head_dim, kMaxDim); !r) return r;
  }
  if (encoder && head == EncoderHead::kClassifier)
    if (auto r = check_positive("num_labels", num_labels, kMaxVocab); !r) return r;
  for (double p : {hidden_dropout, attention_dropout, embedding_dropout, classifier_dropout})
    if (!(p >= 0.0 && p < 1.0)) return Error{fmt::format("dropout probability {} must be in [0, 1)", p)};
  return {};
}

}  // namespace actmem
