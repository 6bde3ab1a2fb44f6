#include "serve/kv_cache.h"

#include <gtest/gtest.h>

#include "serve/serve_test_models.h"

namespace actmem {
namespace {

using testing::deepseek_v3;
using testing::gemma_2_9b;
using testing::llama_3_1_70b;
using testing::llama_3_8b;
using testing::mistral_7b_v01;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

KvCacheLayout layout_of(const ModelSpec& m, KvCacheOptions o = {}) {
  auto r = kv_cache_layout(m, o);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return *r;
}

// 2 (K, V) · 2 bytes · 32 layers · 8 KV heads · 128 head dim = 131072 B = 128 KiB per token.
TEST(KvCache, Llama3_8BPerTokenBf16) {
  EXPECT_EQ(layout_of(llama_3_8b()).per_token, Bytes{131072});
  EXPECT_EQ(layout_of(llama_3_8b()).groups.front().per_token.formula, "2·kv·d·e·L");
  EXPECT_EQ(layout_of(llama_3_8b(), {.dtype = DType::kFP8}).per_token, Bytes{65536});
}

// HF blog "Llama 3.1 - 405B, 70B & 8B with multilinguality and long context"
// (huggingface.co/blog/llama31), table of KV cache memory in fp16:
//   8B:  0.125 / 1.95 / 15.62 GB   70B: 0.313 / 4.88 / 39.06 GB   for 1024 / 16000 / 128000 tokens
// (the blog's "GB" are GiB: 1024 tokens × 128 KiB = 0.125 GiB).
TEST(KvCache, HfLlama31BlogTable) {
  struct Row {
    ModelSpec model;
    int64_t tokens;
    int64_t exact_bytes;
    double blog_gib;
  };
  const Row rows[] = {
      {llama_3_8b(), 1024, int64_t{1024} * 131072, 0.125},
      {llama_3_8b(), 16000, int64_t{16000} * 131072, 1.95},
      {llama_3_8b(), 128000, int64_t{128000} * 131072, 15.62},
      {llama_3_1_70b(), 1024, int64_t{1024} * 327680, 0.313},
      {llama_3_1_70b(), 16000, int64_t{16000} * 327680, 4.88},
      {llama_3_1_70b(), 128000, int64_t{128000} * 327680, 39.06},
  };
  for (const auto& row : rows) {
    auto r = estimate_kv_cache(row.model, {.dtype = DType::kFP16}, row.tokens, 1);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->total.count(), row.exact_bytes) << row.model.name << " " << row.tokens;
    // The blog cuts to the digits shown (15.625 -> 15.62, 0.3125 -> 0.313): within half a unit plus a hair.
    EXPECT_NEAR(r->total.count() / kGiB, row.blog_gib, 0.0051) << row.model.name << " " << row.tokens;
  }
}

// DeepSeek-V3 MLA: vLLM/SGLang cache the 512-wide latent and the 64-wide rope key, 576 values per
// token per layer (DeepSeek-V2 paper, Table 1: (d_c + d_h^R)·l), whole on every TP rank.
TEST(KvCache, DeepSeekV3Latent) {
  const auto latent = layout_of(deepseek_v3());
  EXPECT_EQ(latent.values_per_token_per_layer, 576);
  EXPECT_EQ(latent.per_token, Bytes{576 * 2 * 61});
  EXPECT_EQ(layout_of(deepseek_v3(), {.tp = 8}).per_token, Bytes{576 * 2 * 61});
}

// HF transformers keeps K = a·(nope + rope) and V = a·v_head per token per layer after kv_b_proj.
TEST(KvCache, DeepSeekV3Decompressed) {
  const auto full = layout_of(deepseek_v3(), {.mla_layout = MlaCacheLayout::kDecompressed});
  EXPECT_EQ(full.values_per_token_per_layer, 128 * (128 + 64) + 128 * 128);
  EXPECT_EQ(full.per_token, Bytes{int64_t{40960} * 2 * 61});
  EXPECT_EQ(layout_of(deepseek_v3(), {.tp = 8, .mla_layout = MlaCacheLayout::kDecompressed}).per_token,
            Bytes{int64_t{5120} * 2 * 61});
}

// GQA under TP: 8 KV heads over 8 ranks is one head each; over 16 ranks each rank still keeps one
// (vLLM replicates KV heads when tp > kv), so per-rank KV stops shrinking.
TEST(KvCache, KvHeadsSplitThenReplicatedByTp) {
  EXPECT_EQ(layout_of(llama_3_1_70b(), {.tp = 8}).per_token, Bytes{2 * 1 * 128 * 2 * 80});
  const auto tp16 = layout_of(llama_3_1_70b(), {.tp = 16});
  EXPECT_EQ(tp16.per_token, Bytes{2 * 1 * 128 * 2 * 80});
  ASSERT_FALSE(tp16.notes.empty());
  EXPECT_NE(tp16.notes.front().find("replicated 2x"), std::string::npos);
}

TEST(KvCache, MqaKeepsOneHeadPerRank) {
  ModelSpec mqa = llama_3_8b();
  mqa.num_kv_heads = 1;
  EXPECT_EQ(layout_of(mqa, {.tp = 4}).per_token, Bytes{2 * 1 * 128 * 2 * 32});
}

// Mistral-7B-v0.1: sliding_window 4096 on all layers; past 4096 tokens the cache stops growing.
TEST(KvCache, SlidingWindowCapsTokens) {
  auto r = estimate_kv_cache(mistral_7b_v01(), {}, 8192, 2);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->per_sequence, Bytes{int64_t{4096} * 131072});
  EXPECT_EQ(r->total, Bytes{int64_t{2} * 4096 * 131072});
  EXPECT_EQ(r->breakdown.terms.front().key, "kv_cache.window_4096");
}

// Gemma 2 9B: 21 sliding (4096) and 21 global layers, 8 KV heads of 256: 8192 B per token per layer.
TEST(KvCache, Gemma2AlternatingLayers) {
  const auto layout = layout_of(gemma_2_9b());
  ASSERT_EQ(layout.groups.size(), 2u);
  EXPECT_EQ(layout.groups[0].window, 4096);
  EXPECT_EQ(layout.groups[0].num_layers, 21);
  EXPECT_EQ(layout.per_token, Bytes{42 * 8192});
  EXPECT_EQ(layout.per_sequence(8192), Bytes{int64_t{21} * 8192 * 8192 + int64_t{21} * 8192 * 4096});
  EXPECT_EQ(layout.per_sequence(1000), Bytes{int64_t{42} * 8192 * 1000});
}

// Paged attention: each sequence rounds up to whole blocks (vLLM block_size 16), per layer group.
TEST(KvCache, PagedBlocksRoundUpPerSequence) {
  auto r = estimate_kv_cache(llama_3_8b(), {.block_size = 16}, 1000, 3);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->per_sequence, Bytes{int64_t{1008} * 131072});
  EXPECT_EQ(r->total, Bytes{int64_t{3} * 1008 * 131072});
  EXPECT_EQ(r->breakdown.terms.front().formula, "(2·kv·d·e·L)·⌈T/B⌉·B·b");
  const auto gemma = layout_of(gemma_2_9b(), {.block_size = 16});
  EXPECT_EQ(gemma.per_sequence(4100), Bytes{int64_t{21} * 8192 * 4112 + int64_t{21} * 8192 * 4096});
}

TEST(KvCache, ErrorsNameTheFlag) {
  auto int4 = kv_cache_layout(llama_3_8b(), {.dtype = DType::kINT4});
  ASSERT_FALSE(int4);
  EXPECT_NE(int4.error().message.find("@kv_dtype int4"), std::string::npos);
  auto tp3 = kv_cache_layout(llama_3_8b(), {.tp = 3});
  ASSERT_FALSE(tp3);
  EXPECT_NE(tp3.error().message.find("@tp 3"), std::string::npos);
  auto ctx = estimate_kv_cache(llama_3_8b(), {}, 0, 1);
  ASSERT_FALSE(ctx);
  EXPECT_NE(ctx.error().message.find("@context_len"), std::string::npos);
  EXPECT_FALSE(parse_mla_cache_layout("compressed"));
  EXPECT_EQ(*parse_mla_cache_layout("decompressed"), MlaCacheLayout::kDecompressed);
}

}  // namespace
}  // namespace actmem
