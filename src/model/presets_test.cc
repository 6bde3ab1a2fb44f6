#include "model/presets.h"

#include <set>

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(PresetsTest, EveryPresetParsesAndValidates) {
  std::set<std::string_view> names;
  for (const auto& p : list_presets()) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate " << p.name;
    EXPECT_FALSE(p.description.empty()) << p.name;
    EXPECT_FALSE(p.source.empty()) << p.name;
    auto spec = load_preset(p.name);
    ASSERT_TRUE(spec) << p.name << ": " << spec.error().message;
    EXPECT_EQ(spec->name, p.name);
    EXPECT_TRUE(spec->validate());
  }
  for (std::string_view required : {"gpt3-175b", "gpt-22b", "gpt-175b", "gpt-530b", "gpt-1t", "llama-2-7b",
                                    "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b",
                                    "mistral-7b", "mixtral-8x7b", "qwen2.5-72b", "deepseek-v3"})
    EXPECT_TRUE(names.contains(required)) << required;
}

// Korthikanti et al. 2022, Table 3.
TEST(PresetsTest, KorthikantiTable3) {
  struct Row {
    const char* name;
    int64_t h, a, L;
  };
  for (const Row& r : {Row{"gpt-22b", 6144, 64, 48}, Row{"gpt-175b", 12288, 96, 96}, Row{"gpt-530b", 20480, 128, 105},
                       Row{"gpt-1t", 25600, 160, 128}}) {
    auto m = load_preset(r.name);
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_EQ(m->hidden, r.h);
    EXPECT_EQ(m->num_heads, r.a);
    EXPECT_EQ(m->num_layers, r.L);
    EXPECT_EQ(m->vocab, 51200);
    EXPECT_EQ(m->max_positions, 2048);
    EXPECT_TRUE(m->learned_positions);
    EXPECT_EQ(m->layers[0].ffn, 4 * r.h);
    EXPECT_EQ(m->norm, NormKind::kLayerNorm);
    EXPECT_EQ(m->act, ActFn::kGelu);
    EXPECT_DOUBLE_EQ(m->hidden_dropout, 0.1);
    EXPECT_DOUBLE_EQ(m->attention_dropout, 0.1);
  }
}

TEST(PresetsTest, Mistral7bSlidesEveryLayer) {
  auto m = load_preset("mistral-7b");
  ASSERT_TRUE(m);
  for (const auto& l : m->layers) EXPECT_EQ(l.sliding_window, 4096);
  EXPECT_EQ(load_preset("mixtral-8x7b")->layers[0].sliding_window, 0);  // "sliding_window": null
}

TEST(PresetsTest, UnknownNameSuggests) {
  auto r = load_preset("llama3-70b");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "unknown model preset 'llama3-70b'; did you mean 'llama-3-70b'? (actmem models lists them)");
  auto far = load_preset("bloom");
  ASSERT_FALSE(far);
  EXPECT_EQ(far.error().message, "unknown model preset 'bloom' (actmem models lists them)");
}

TEST(PresetsTest, LoadModelTellsPathsFromNames) {
  auto preset = load_model("llama-2-7b");
  ASSERT_TRUE(preset);
  EXPECT_EQ(preset->hidden, 4096);
  const std::string path = std::string{ACTMEM_SOURCE_DIR} + "/tests/data/configs/qwen2-0.5b.json";
  auto file = load_model(path);
  ASSERT_TRUE(file) << file.error().message;
  EXPECT_EQ(file->hidden, 896);
  EXPECT_EQ(file->name, path);
  auto missing = load_model("no/such/config.json");  // ends in .json: a file, not a preset
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("cannot read config file"), std::string::npos);
}

}  // namespace
}  // namespace actmem
