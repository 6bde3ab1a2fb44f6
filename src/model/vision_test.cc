#include "model/vision.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/hf_config.h"
#include "model/weight_tensors.h"

namespace actmem {
namespace {

VisionSpec read(const char* text, const std::string& wrapper) {
  std::vector<std::string> warnings;
  auto v = read_vision_config(nlohmann::json::parse(text), wrapper, "config.json", warnings);
  EXPECT_TRUE(v.has_value()) << (v ? "" : v.error().message);
  EXPECT_TRUE(v && v->has_value());
  EXPECT_TRUE(warnings.empty());
  return v && *v ? **v : VisionSpec{};
}

int64_t params(const VisionSpec& v, int64_t text_hidden) {
  return total_weight_elements(vision_weight_tensors(v, text_hidden));
}

// Per rank: Σ rank_rows × rank_cols × count.
int64_t rank_params(const VisionSpec& v, int64_t text_hidden, int64_t tp) {
  int64_t n = 0;
  for (const auto& t : vision_weight_tensors(v, text_hidden)) n += t.count * t.rank_rows(tp) * t.rank_cols(tp);
  return n;
}

// google/gemma-3-4b-it vision_config (SigLIP, h 1152, I 4304, 27 layers, 896/14 = 64² patches).
// By hand (siglip.py, gemma3_mm.py @8b141ed8c): conv 3·14²·1152 + 1152 = 678,528; positions
// 4096·1152 = 4,718,592; per layer 4h² + 2hI + I + 9h = 15,239,504, × 27; post_layernorm 2304;
// projector 1152·2560 + 1152 = 2,950,272. With it, vLLM 0.19 logs 8.58 GiB for the model
// (google-gemma-3-4b-it--h100-80gb--tp1pp1dp1--8192).
TEST(Vision, Gemma3Siglip) {
  const VisionSpec v = read(R"({"vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
    "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14,
    "vision_use_head": false}})",
                            "gemma3");
  EXPECT_EQ(v.tower, VisionTower::kSiglip);
  EXPECT_EQ(v.layers, 27);
  EXPECT_TRUE(v.post_norm);
  EXPECT_EQ(params(v, 2560), 416'866'032 + 2'950'272);
}

// Llama-4-Scout-17B-16E-Instruct: 34 layers of h 1408 with biases, 577 positions with the class
// token, the pixel-shuffle adapter (5632 → 4096 → 4096) and linear_1 (4096 → 5120); all
// TP-sharded (mllama4.py:233-490): 850,960,896 + 20,971,520 in all, 218,813,120 per rank at tp 4.
TEST(Vision, Llama4) {
  const VisionSpec v = read(R"({"vision_config": {"hidden_size": 1408, "image_size": 336, "intermediate_size": 5632,
    "model_type": "llama4_vision_model", "multi_modal_projector_bias": false, "num_channels": 3,
    "num_hidden_layers": 34, "patch_size": 14, "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096,
    "projector_output_dim": 4096, "vision_feature_layer": -1, "vision_output_dim": 4096}})",
                            "llama4");
  EXPECT_FALSE(v.takes_quant_config);
  EXPECT_EQ(params(v, 5120), 850'960'896 + 20'971'520);
  EXPECT_EQ(rank_params(v, 5120, 4), 213'570'240 + 5'242'880);
}

// Mistral-Small-3.1-24B-Instruct-2503: Pixtral (24 layers, h 1024, SwiGLU I 4096, no biases, no
// position table) 403,305,472; projector norm + patch merger 4h² + linear_1/linear_2 into H 5120
// 35,652,608 (mistral3.py:75-160); at tp 2, 201,978,880 + 19,923,968 per rank.
TEST(Vision, Mistral3Pixtral) {
  const VisionSpec v = read(R"({"model_type": "mistral3", "multimodal_projector_bias": false,
    "spatial_merge_size": 2, "vision_feature_layer": -1, "vision_config": {"hidden_size": 1024, "image_size": 1540,
    "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 24, "patch_size": 14,
    "model_type": "pixtral"}})",
                            "mistral3");
  EXPECT_EQ(params(v, 5120), 403'305'472 + 35'652'608);
  EXPECT_EQ(rank_params(v, 5120, 2), 201'978'880 + 19'923'968);
}

// ibm-granite/granite-vision-3.3-2b (LLaVA-NeXT around SigLIP 384/14): vision_feature_layer
// [-24, -20, -12, -1] builds all 27 layers, no post_layernorm, 27² positions, and a projector from
// 4·1152 features (llava.py:128-155, :438-497, llava_next.py:253-287): 412,984,944 + 13,637,632.
// Without the key, vLLM's -2 builds 26 layers and a 1152-wide projector.
TEST(Vision, LlavaNextFeatureLayers) {
  const char* tower = R"("vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
    "intermediate_size": 4304, "num_hidden_layers": 27, "patch_size": 14, "image_size": 384})";
  const VisionSpec all = read(("{" + std::string(tower) + R"(, "vision_feature_layer": [-24, -20, -12, -1]})").c_str(),
                              "llava_next");
  EXPECT_EQ(all.layers, 27);
  EXPECT_EQ(all.feature_layers, 4);
  EXPECT_FALSE(all.post_norm);
  EXPECT_EQ(params(all, 2048), 412'984'944 + 13'637'632);
  const VisionSpec second_last = read(("{" + std::string(tower) + "}").c_str(), "llava_next");
  EXPECT_EQ(second_last.layers, 26);
  EXPECT_EQ(second_last.feature_layers, 1);
}

TEST(Vision, UnknownTowerWarnsAndBadValuesAreErrors) {
  std::vector<std::string> warnings;
  auto v = read_vision_config(nlohmann::json::parse(R"({"vision_config": {"model_type": "moonvit"}})"), "kimi_vl",
                              "k.json", warnings);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->has_value());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("vision_config.model_type moonvit"), std::string::npos);
  auto bad = read_vision_config(
      nlohmann::json::parse(R"({"vision_config": {"model_type": "siglip_vision_model", "hidden_size": -3}})"),
      "gemma3", "g.json", warnings);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "g.json: 'vision_config.hidden_size' must be a positive integer, got -3");
  auto deep = read_vision_config(nlohmann::json::parse(R"({"vision_feature_layer": -40, "vision_config":
    {"model_type": "clip_vision_model", "num_hidden_layers": 24}})"),
                                 "llava", "l.json", warnings);
  ASSERT_FALSE(deep.has_value());
  EXPECT_EQ(deep.error().message,
            "l.json: 'vision_feature_layer' -40 is outside the tower's 24 layers (vision_config.num_hidden_layers)");
}

// tests/data/configs/llava-1.5-7b.json: CLIP ViT-L/14-336 (vision_feature_layer -2: 23 of 24 layers).
TEST(Vision, ReadWithTheModel) {
  auto m = load_hf_config(std::string(ACTMEM_SOURCE_DIR) + "/tests/data/configs/llava-1.5-7b.json");
  ASSERT_TRUE(m.has_value()) << m.error().message;
  ASSERT_TRUE(m->vision.has_value());
  EXPECT_EQ(m->vision->tower, VisionTower::kClip);
  EXPECT_EQ(m->vision->layers, 23);
  EXPECT_EQ(m->vision->hidden, 1024);
}

}  // namespace
}  // namespace actmem
