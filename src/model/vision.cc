#include "model/vision.h"

#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "model/weight_tensors.h"
#include "util/bytes.h"  // checked_mul
#include "util/json_text.h"

namespace actmem {
namespace {

using json = nlohmann::json;

/// A tower's HF config-class defaults for absent keys (transformers SiglipVisionConfig,
/// CLIPVisionConfig, PixtralVisionConfig, Llama4VisionConfig).
struct TowerDefaults {
  const char* model_type;
  VisionTower tower;
  int64_t hidden, intermediate, layers, image_size, patch;
};
constexpr TowerDefaults kTowers[] = {
    {"siglip_vision_model", VisionTower::kSiglip, 768, 3072, 12, 224, 16},
    {"clip_vision_model", VisionTower::kClip, 768, 3072, 12, 224, 32},
    {"pixtral", VisionTower::kPixtral, 1024, 4096, 24, 1024, 16},
    {"llama4_vision_model", VisionTower::kLlama4, 768, 5632, 34, 448, 14},
};

/// Which wrappers vLLM builds as these projectors, and with which towers.
struct WrapperRule {
  const char* model_type;
  VisionProjector projector;
  int64_t default_feature_layer;  // 0: every layer is built (no vision_feature_layer pruning)
  bool default_projector_bias;
  bool post_norm;
};
constexpr WrapperRule kWrappers[] = {
    {"gemma3", VisionProjector::kGemma3, 0, false, true},       // gemma3_mm.py:515-520, siglip.py:719-722
    {"llava", VisionProjector::kLlava, -2, true, false},        // llava.py:438-497
    {"llava_next", VisionProjector::kLlava, -2, true, false},   // llava_next.py:253-287
    {"llama4", VisionProjector::kLlama4, 0, false, true},       // mllama4.py:384-490
    {"mistral3", VisionProjector::kMistral3, -1, false, false}, // mistral3.py:75-160, :314-356
};

Error bad(const std::string& source, const std::string& key, const std::string& what) {
  return Error{fmt::format("{}: '{}' {}", source, key, what)};
}

Expected<int64_t> size_or(const json& object, const char* key, int64_t fallback, const std::string& source,
                          const std::string& prefix) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (int64_t{1} << 24))
    return bad(source, prefix + key, fmt::format("must be a positive integer, got {}", describe_json(*it)));
  return it->get<int64_t>();
}

/// vLLM's layer count for vision_feature_layer (models/utils.py:876-886 get_layer_index: i < 0
/// counts from the end, N + i + 1 layers; a list builds up to its deepest).
Expected<std::pair<int64_t, int64_t>> feature_layers(const json& root, int64_t fallback, int64_t n,
                                                     const std::string& source) {
  auto it = root.find("vision_feature_layer");
  std::vector<int64_t> ids;
  if (it == root.end() || it->is_null()) {
    if (fallback == 0) return std::pair<int64_t, int64_t>{n, 1};
    ids.push_back(fallback);
  } else if (it->is_number_integer()) {
    ids.push_back(it->get<int64_t>());
  } else if (it->is_array() && !it->empty()) {
    for (const json& e : *it) {
      if (!e.is_number_integer())
        return bad(source, "vision_feature_layer", fmt::format("must be integers, got {}", describe_json(*it)));
      ids.push_back(e.get<int64_t>());
    }
  } else {
    return bad(source, "vision_feature_layer", fmt::format("must be an integer or a list, got {}", describe_json(*it)));
  }
  int64_t deepest = 0;
  for (int64_t i : ids) {
    const int64_t built = i < 0 ? n + i + 1 : i;
    if (built < 0 || built > n)
      return bad(source, "vision_feature_layer",
                 fmt::format("{} is outside the tower's {} layers (vision_config.num_hidden_layers)", i, n));
    deepest = std::max(deepest, built);
  }
  return std::pair<int64_t, int64_t>{deepest, static_cast<int64_t>(ids.size())};
}

Expected<bool> bool_or(const json& object, const char* key, bool fallback, const std::string& source,
                       const std::string& prefix) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return bad(source, prefix + key, fmt::format("must be true or false, got {}", describe_json(*it)));
  return it->get<bool>();
}

// The tensors' roles and shards, short for the tables below.
constexpr auto kLin = WeightRole::kLinear;
constexpr auto kEmb = WeightRole::kEmbedding;  // not a quantizable linear layer
constexpr auto kNorm = WeightRole::kNorm;
constexpr auto kBias = WeightRole::kBias;
constexpr auto kCol = WeightShard::kColumn;
constexpr auto kRow = WeightShard::kRow;
constexpr auto kRep = WeightShard::kReplicated;

/// The projector into the language model's hidden size H.
template <typename Add>
void add_projector(const VisionSpec& s, int64_t H, Add& add) {
  const int64_t h = s.hidden;
  switch (s.projector) {
    case VisionProjector::kGemma3:
      add("mm_input_projection", 1, h, H, kEmb, kRep, "h_v", "H");
      add("mm_soft_emb_norm", 1, h, 1, kNorm, kRep, "h_v", "1");
      break;
    case VisionProjector::kLlava:
      add("projector.linear_1", 1, H, checked_mul(h, s.feature_layers), kLin, kCol, "H", "h_v·n_feat");
      if (s.projector_bias) add("projector.linear_1.bias", 1, H, 1, kBias, kCol, "H", "1");
      add("projector.linear_2", 1, H, H, kLin, kRow, "H", "H");
      if (s.projector_bias) add("projector.linear_2.bias", 1, H, 1, kBias, kRep, "H", "1");
      if (s.image_newline) add("image_newline", 1, H, 1, kEmb, kRep, "H", "1");
      break;
    case VisionProjector::kLlama4:
      add("adapter.fc1", 1, s.adapter_mid, s.adapter_in, kLin, kCol, "proj_in", "I_v");
      add("adapter.fc2", 1, s.adapter_out, s.adapter_mid, kLin, kRow, "proj_out", "proj_in");
      if (s.projector_bias) {
        add("adapter.fc1.bias", 1, s.adapter_mid, 1, kBias, kCol, "proj_in", "1");
        add("adapter.fc2.bias", 1, s.adapter_out, 1, kBias, kRep, "proj_out", "1");
      }
      add("projector.linear_1", 1, H, s.vision_output, kLin, kCol, "H", "vision_out");
      break;
    case VisionProjector::kMistral3:
      add("projector.norm", 1, h, 1, kNorm, kRep, "h_v", "1");
      add("projector.patch_merger", 1, h, checked_mul(checked_mul(s.spatial_merge, s.spatial_merge), h), kEmb, kRep,
          "h_v", "s²·h_v");
      add("projector.linear_1", 1, H, h, kLin, kCol, "H", "h_v");
      if (s.projector_bias) add("projector.linear_1.bias", 1, H, 1, kBias, kCol, "H", "1");
      add("projector.linear_2", 1, H, H, kLin, kRow, "H", "H");
      if (s.projector_bias) add("projector.linear_2.bias", 1, H, 1, kBias, kRep, "H", "1");
      break;
  }
}

}  // namespace

Expected<std::optional<VisionSpec>> read_vision_config(const json& root, const std::string& wrapper_type,
                                                       const std::string& source, std::vector<std::string>& warnings) {
  auto vc = root.find("vision_config");
  if (vc == root.end() || vc->is_null()) return std::optional<VisionSpec>{};
  if (!vc->is_object()) return bad(source, "vision_config", fmt::format("must be an object, got {}", describe_json(*vc)));
  const json& v = *vc;
  const std::string type = v.contains("model_type") && v["model_type"].is_string()
                               ? v["model_type"].get<std::string>()
                               : std::string("(none)");
  const WrapperRule* wrapper = nullptr;
  for (const auto& w : kWrappers)
    if (wrapper_type == w.model_type) wrapper = &w;
  const TowerDefaults* tower = nullptr;
  for (const auto& t : kTowers)
    if (type == t.model_type) tower = &t;
  const bool pairs = wrapper && tower &&
                     (wrapper->projector == VisionProjector::kLlava
                          ? (tower->tower == VisionTower::kSiglip || tower->tower == VisionTower::kClip)
                          : wrapper->projector == VisionProjector::kGemma3 ? tower->tower == VisionTower::kSiglip
                          : wrapper->projector == VisionProjector::kLlama4 ? tower->tower == VisionTower::kLlama4
                                                                           : tower->tower == VisionTower::kPixtral);
  if (!pairs) {
    warnings.push_back(fmt::format("{}: the vision tower (vision_config.model_type {}) of a '{}' wrapper is not "
                                   "counted: actmem knows the towers of gemma3, llava, llava_next, llama4 and "
                                   "mistral3; weights are low by its size",
                                   source, type, wrapper_type));
    return std::optional<VisionSpec>{};
  }
  const std::string p = "vision_config.";
  VisionSpec s;
  s.model_type = type;
  s.tower = tower->tower;
  s.projector = wrapper->projector;
  for (auto [key, field, fallback] : {std::tuple{"hidden_size", &s.hidden, tower->hidden},
                                      std::tuple{"intermediate_size", &s.intermediate, tower->intermediate},
                                      std::tuple{"num_hidden_layers", &s.layers, tower->layers},
                                      std::tuple{"image_size", &s.image_size, tower->image_size},
                                      std::tuple{"patch_size", &s.patch, tower->patch},
                                      std::tuple{"num_channels", &s.channels, int64_t{3}}}) {
    auto n = size_or(v, key, fallback, source, p);
    if (!n) return n.error();
    *field = *n;
  }
  if (s.patch > s.image_size)
    return bad(source, p + "patch_size", fmt::format("{} is larger than image_size {}", s.patch, s.image_size));
  // Only the LLaVA family and Mistral 3 prune the tower to the feature layer (Gemma 3, Llama 4 build all).
  auto built = wrapper->default_feature_layer == 0 ? Expected<std::pair<int64_t, int64_t>>{std::pair{s.layers, int64_t{1}}}
                                                   : feature_layers(root, wrapper->default_feature_layer, s.layers, source);
  if (!built) return built.error();
  s.layers = built->first;
  s.feature_layers = built->second;
  s.post_norm = wrapper->post_norm;
  const bool llama4 = s.projector == VisionProjector::kLlama4;
  auto bias = llama4 ? bool_or(v, "multi_modal_projector_bias", false, source, p)
                     : bool_or(root, "multimodal_projector_bias", wrapper->default_projector_bias, source, "");
  if (!bias) return bias.error();
  s.projector_bias = *bias;
  s.image_newline = wrapper_type == "llava_next";
  auto merge = size_or(root, "spatial_merge_size", 2, source, "");
  if (!merge) return merge.error();
  s.spatial_merge = *merge;
  if (llama4) {
    s.takes_quant_config = false;
    s.adapter_in = s.intermediate;
    for (auto [key, field, fallback] : {std::tuple{"projector_input_dim", &s.adapter_mid, int64_t{4096}},
                                        std::tuple{"projector_output_dim", &s.adapter_out, int64_t{4096}},
                                        std::tuple{"vision_output_dim", &s.vision_output, int64_t{7680}}}) {
      auto n = size_or(v, key, fallback, source, p);
      if (!n) return n.error();
      *field = *n;
    }
  }
  return std::optional<VisionSpec>{s};
}

std::vector<WeightTensor> vision_weight_tensors(const VisionSpec& s, int64_t H) {
  std::vector<WeightTensor> out;
  auto add = [&](std::string name, int64_t count, int64_t rows, int64_t cols, WeightRole role, WeightShard shard,
                 std::string rs, std::string cs) {
    out.push_back({"vision." + std::move(name), count, rows, cols, role, shard, 0, std::move(rs), std::move(cs),
                   WeightPart::kVision});
  };
  const int64_t h = s.hidden, I = s.intermediate, L = s.layers;
  const int64_t grid = s.image_size / s.patch;
  const bool pixtral = s.tower == VisionTower::kPixtral;
  const bool layer_norm = !pixtral;  // LayerNorm (weight and bias) vs Pixtral's RMSNorm
  auto norm = [&](const std::string& name, int64_t count, int64_t size) {
    add(name + ".weight", count, size, 1, kNorm, kRep, "h_v", "1");
    if (layer_norm) add(name + ".bias", count, size, 1, kNorm, kRep, "h_v", "1");
  };

  // Patches and positions.
  if (s.tower == VisionTower::kLlama4)
    add("patch_embedding", 1, h, checked_mul(checked_mul(s.channels, s.patch), s.patch), kLin, kCol, "h_v", "C·p²");
  else
    add("patch_embedding", 1, h, checked_mul(checked_mul(s.channels, s.patch), s.patch), kEmb, kRep, "h_v", "C·p²");
  if (s.tower == VisionTower::kSiglip) add("patch_embedding.bias", 1, h, 1, kBias, kRep, "h_v", "1");
  const bool class_token = s.tower == VisionTower::kClip || s.tower == VisionTower::kLlama4;
  if (class_token) add("class_embedding", 1, h, 1, kEmb, kRep, "h_v", "1");
  if (!pixtral) add("position_embedding", 1, checked_mul(grid, grid) + (class_token ? 1 : 0), h, kEmb, kRep,
                    class_token ? "(image/p)²+1" : "(image/p)²", "h_v");
  if (s.tower == VisionTower::kClip || s.tower == VisionTower::kLlama4 || pixtral) norm("pre_norm", 1, h);

  // The layers: q/k/v fused (QKVParallelLinear), o, the MLP (Pixtral: SwiGLU gate_up/down).
  add("layers.attn.qkv_proj", L, 3 * h, h, kLin, kCol, "3·h_v", "h_v");
  add("layers.attn.o_proj", L, h, h, kLin, kRow, "h_v", "h_v");
  if (pixtral) {
    add("layers.mlp.gate_up_proj", L, 2 * I, h, kLin, kCol, "2·I_v", "h_v");
    add("layers.mlp.down_proj", L, h, I, kLin, kRow, "h_v", "I_v");
  } else {
    add("layers.attn.qkv_proj.bias", L, 3 * h, 1, kBias, kCol, "3·h_v", "1");
    add("layers.attn.o_proj.bias", L, h, 1, kBias, kRep, "h_v", "1");
    add("layers.mlp.fc1", L, I, h, kLin, kCol, "I_v", "h_v");
    add("layers.mlp.fc1.bias", L, I, 1, kBias, kCol, "I_v", "1");
    add("layers.mlp.fc2", L, h, I, kLin, kRow, "h_v", "I_v");
    add("layers.mlp.fc2.bias", L, h, 1, kBias, kRep, "h_v", "1");
  }
  norm("layers.norm1", L, h);
  norm("layers.norm2", L, h);
  if (s.post_norm) norm("post_norm", 1, h);

  add_projector(s, H, add);
  return out;
}

}  // namespace actmem
