#include "serve/suggest.h"

#include <gtest/gtest.h>

#include "model/presets.h"
#include "serve/serve_request.h"

namespace actmem {
namespace {

// Llama-3-8B, 64 requests of 8192 tokens on one H100-80GB at 0.9 (vLLM 0.19 rules). By hand:
// requested ⌈85,045,477,376 × 0.9⌉ = 76,540,929,639; less weights 16,062,619,648, the sampler
// peak 1,990,283,264 and 256 MiB non-torch leaves 58,219,591,271 B = 27,761 blocks of 2 MiB (32
// layers × 16·8·128·2·2 B), 54.22x at 512 pages per request. What fits 64:
// - --max-model-len 6928: ⌈6928/16⌉ = 433 pages, 27,761 / 433 = 64.11x (6944 would need 434: 63.96x);
// - --kv-cache-dtype fp8: pages of half the bytes, 55,523 blocks, 108.44x;
// - --tensor-parallel-size 2.
// Not: --max-num-seqs (the sampler of 512 still leaves < 64x), --gpu-memory-utilization (even 0.99
// holds 61.35x).
TEST(Suggest, Llama8bSixtyFourRequestsOnOneH100) {
  ServeRequest r;
  r.context_len = 8192;
  r.batch = 64;
  r.gpu = "h100-80gb";
  const ModelSpec model = *load_model("llama-3-8b");
  auto result = serve(model, r);
  ASSERT_TRUE(result) << result.error().message;
  ASSERT_FALSE(result->capacity->fits);
  EXPECT_NEAR(result->capacity->vllm->max_concurrency, 27761.0 / 512.0, 1e-9);
  const auto& s = result->suggestions;
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].flag, "--max-model-len 6928");
  EXPECT_NEAR(s[0].concurrency, 27761.0 / 433.0, 1e-9);
  EXPECT_EQ(s[0].effect, "54.22x -> 64.11x requests of 6,928 tokens");
  EXPECT_EQ(s[1].flag, "--kv-cache-dtype fp8");
  EXPECT_EQ(s[2].flag, "--tensor-parallel-size 2");
  EXPECT_EQ(s[2].option, "tp");
}

TEST(Suggest, NothingWhenItFits) {
  ServeRequest r;
  r.context_len = 8192;
  r.batch = 4;
  r.gpu = "h100-80gb";
  auto result = serve(*load_model("llama-3-8b"), r);
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->capacity->fits);
  EXPECT_TRUE(result->suggestions.empty());
}

}  // namespace
}  // namespace actmem
