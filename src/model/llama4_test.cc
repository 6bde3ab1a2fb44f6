// Llama 4 text (model_type llama4_text; issue 8, item 4): the config reader and the parameter
// counts of the presets. Sources: transformers configuration_llama4.py (Llama4TextConfig defaults,
// moe_layers / no_rope_layers derivation), modeling_llama4.py (the tensors), the meta-llama model
// cards (Scout "17B active, 109B total", Maverick "17B active, 400B total"; both totals include the
// vision encoder and projector, which actmem does not count).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/hf_config.h"
#include "model/params.h"
#include "model/presets.h"
#include "model/weight_tensors.h"

namespace actmem {
namespace {

using json = nlohmann::json;

ModelSpec preset(const char* name) {
  auto m = load_preset(name);
  EXPECT_TRUE(m) << (m ? "" : m.error().message);
  return m ? *m : ModelSpec{};
}

// Llama-4-Scout-17B-16E text_config: h 5120, 48 layers, 40 heads, 8 KV heads of 128, V 202048,
// every layer MoE (16 experts of 8192, top-1, one shared expert of 8192), untied head. Per layer:
// q, o 5120·5120 each, k, v 5120·1024 each (62,914,560); 2 norms (10,240); router 16·5120 (81,920);
// experts 16·3·5120·8192 (2,013,265,920, gate_up_proj (16, 5120, 16384) + down_proj (16, 8192, 5120));
// shared expert 3·5120·8192 (125,829,120): 2,202,101,760. ×48, + embedding and lm_head 202048·5120
// each, + the final norm: 107,769,861,120 (the card's 109B with the vision tower). Active: one expert
// of 16 per layer: 107,769,861,120 − 48·15·125,829,120 = 17,172,894,720 (the card's "17B").
TEST(Llama4Test, ScoutParamsExact) {
  const ModelSpec m = preset("llama-4-scout");
  EXPECT_EQ(m.model_type, "llama4_text");
  EXPECT_EQ(m.wrapper_model_type, "llama4");
  EXPECT_EQ(m.num_moe_layers(), 48);
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.moe->num_experts, 16);
  EXPECT_EQ(m.moe->expert_ffn, 8192);
  EXPECT_EQ(m.moe->shared_ffn, 8192);
  EXPECT_FALSE(m.moe->normalize_topk);
  EXPECT_TRUE(m.qk_l2_norm);
  EXPECT_FALSE(m.qk_norm);  // no weighted q/k RMSNorm
  EXPECT_TRUE(m.attn_temperature_tuning);
  int nope = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const bool expect_nope = (i + 1) % 4 == 0;  // no_rope_layer_interval 4
    EXPECT_EQ(m.layers[i].no_rope, expect_nope) << i;
    EXPECT_EQ(m.layers[i].attention_chunk, expect_nope ? 0 : 8192) << i;
    nope += m.layers[i].no_rope;
  }
  EXPECT_EQ(nope, 12);
  const ParamCounts p = count_params(m);
  const LayerParams& l = p.layers[0];
  EXPECT_EQ(l.attention + l.kv_projection, 62'914'560);
  EXPECT_EQ(l.routed_experts, 2'013'265'920);
  EXPECT_EQ(l.shared_experts, 125'829'120);
  EXPECT_EQ(l.replicated, 81'920 + 10'240);  // router + two norms
  EXPECT_EQ(p.embedding, 1'034'485'760);
  EXPECT_EQ(p.lm_head, 1'034'485'760);
  EXPECT_EQ(p.total(), 107'769'861'120);
  int fused = 0;
  for (const WeightTensor& t : layer_weight_tensors(m, m.layers[0]))
    if (t.name == "mlp.experts.gate_up_proj") {
      EXPECT_EQ(t.count, 16);
      EXPECT_EQ(t.numel(), 2 * 8192 * int64_t{5120});  // gate_up_proj[e]: (h, 2f)
      ++fused;
    }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(p.active(), 17'172'894'720);
}

// Llama-4-Maverick-17B-128E text_config: as Scout but 128 experts in every 2nd layer
// (interleave_moe_layer_step 2: layers 1, 3, ..., 47), the other 24 dense with intermediate_size_mlp
// 16384 (3·5120·16384 = 251,658,240), no q/k norm. Dense layer 314,583,040; MoE layer 62,914,560 +
// 10,240 + 128·5120 + 128·125,829,120 + 125,829,120 = 16,295,536,640. 24·both + 2·1,034,485,760 +
// 5120 = 400,711,848,960 (the card's 400B). Active: 400,711,848,960 − 24·127·125,829,120 =
// 17,184,691,200.
TEST(Llama4Test, MaverickParamsExact) {
  const ModelSpec m = preset("llama-4-maverick");
  EXPECT_EQ(m.num_moe_layers(), 24);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    EXPECT_EQ(m.layers[i].moe, i % 2 == 1) << i;
    if (!m.layers[i].moe) {
      EXPECT_EQ(m.layers[i].ffn, 16384) << i;
    }
  }
  EXPECT_FALSE(m.qk_l2_norm);
  const ParamCounts p = count_params(m);
  EXPECT_EQ(p.layers[0].dense_mlp, 251'658'240);
  EXPECT_EQ(p.layers[1].routed_experts, 128 * int64_t{125'829'120});
  EXPECT_EQ(p.total(), 400'711'848'960);
  EXPECT_EQ(p.active(), 17'184'691'200);
}

// A bare llama4_text config reads the same as the wrapper's text_config, without the wrapper note.
TEST(Llama4Test, BareTextConfigAndKeys) {
  json text = {{"model_type", "llama4_text"}, {"hidden_size", 320},       {"num_hidden_layers", 4},
               {"num_attention_heads", 10},   {"num_key_value_heads", 2}, {"head_dim", 32},
               {"intermediate_size", 160},    {"intermediate_size_mlp", 448}, {"num_local_experts", 4},
               {"num_experts_per_tok", 1},    {"interleave_moe_layer_step", 2}, {"vocab_size", 1009},
               {"attention_chunk_size", 16},  {"no_rope_layers", {1, 1, 0, 1}}, {"use_qk_norm", false},
               {"attn_temperature_tuning", 4}};
  auto bare = parse_hf_config(text.dump(), "bare.json");
  ASSERT_TRUE(bare) << bare.error().message;
  EXPECT_TRUE(bare->wrapper_model_type.empty());
  EXPECT_EQ(bare->layers[0].ffn, 448);
  EXPECT_TRUE(bare->layers[1].moe && bare->layers[3].moe && !bare->layers[2].moe);
  EXPECT_TRUE(bare->layers[2].no_rope);
  EXPECT_EQ(bare->layers[2].attention_chunk, 0);
  EXPECT_EQ(bare->layers[3].attention_chunk, 16);
  EXPECT_FALSE(bare->qk_l2_norm);
  EXPECT_TRUE(bare->attn_temperature_tuning);  // Scout's config.json writes 4: truthy
  json wrapped = {{"model_type", "llama4"}, {"text_config", text}, {"vision_config", {{"hidden_size", 1408}}}};
  auto w = parse_hf_config(wrapped.dump(), "wrapped.json");
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(w->wrapper_model_type, "llama4");
  EXPECT_EQ(count_params(*w).total(), count_params(*bare).total());

  // Explicit moe_layers win over the interleave step; layer_types choose the chunked layers.
  text["moe_layers"] = {0};
  text["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
  auto explicit_layers = parse_hf_config(text.dump(), "bare.json");
  ASSERT_TRUE(explicit_layers) << explicit_layers.error().message;
  EXPECT_EQ(explicit_layers->num_moe_layers(), 1);
  EXPECT_TRUE(explicit_layers->layers[0].moe);
  EXPECT_EQ(explicit_layers->layers[0].attention_chunk, 0);
  EXPECT_EQ(explicit_layers->layers[1].attention_chunk, 16);
}

TEST(Llama4Test, BadKeysNameTheField) {
  json text = {{"model_type", "llama4_text"}, {"hidden_size", 64}, {"num_hidden_layers", 2},
               {"num_attention_heads", 4},    {"vocab_size", 100}, {"no_rope_layers", {1, 2}}};
  auto r = parse_hf_config(text.dump(), "t.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no_rope_layers"), std::string::npos) << r.error().message;
  text["no_rope_layers"] = {1, 0};
  text["layer_types"] = {"sliding_attention", "full_attention"};
  r = parse_hf_config(text.dump(), "t.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("chunked_attention"), std::string::npos) << r.error().message;
  text.erase("layer_types");
  text["moe_layers"] = {5};
  r = parse_hf_config(text.dump(), "t.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("moe_layers"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace actmem
