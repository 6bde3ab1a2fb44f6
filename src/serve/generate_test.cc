// estimate_generate(): hand-computed peaks of HF generate() on one GPU.
// Sources: transformers src/transformers/cache_utils.py (DynamicLayer.update: torch.cat of K, then
// of V, per layer (b, kv, t, d) in the model dtype), models/llama/modeling_llama.py
// (eager_attention_forward: scores, fp32 softmax, .to(dtype); LlamaForCausalLM.forward computes the
// logits of the last `logits_to_keep` positions), generation/utils.py (GenerationMixin._sample: the
// last position's logits copied to fp32). Llama-3-8B from its config.json (serve_test_models.h).
#include "serve/generate.h"

#include <gtest/gtest.h>

#include "serve/serve_test_models.h"

namespace actmem {
namespace {

using testing::llama_3_8b;

// 8,030,261,248 parameters × 2 bytes (bf16), as serve_test.cc checks against the checkpoint.
constexpr int64_t kLlama3_8bWeights = int64_t{16'060'522'496};
// One token, all layers: 2 (K, V) · L 32 · kv 8 · d 128 · e 2.
constexpr int64_t kPerToken = int64_t{2} * 32 * 8 * 128 * 2;

GenerateReport gen(GenerateOptions o) {
  auto r = estimate_generate(llama_3_8b(), o);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return *r;
}

TEST(Generate, Llama3_8bSdpaPrefillPeak) {
  GenerateReport r = gen({.prompt_len = 4096, .new_tokens = 512, .batch = 1});
  EXPECT_EQ(r.final_tokens, 4607);  // P + N - 1: the 512th new token is never fed back
  EXPECT_EQ(r.weights_bytes().count(), kLlama3_8bWeights);
  EXPECT_EQ(r.prefill.find("kv_cache")->bytes.count(), kPerToken * 4096);  // 536,870,912
  EXPECT_EQ(r.decode.find("kv_cache")->bytes.count(), kPerToken * 4607);   // 603,848,704
  // MLP block: 2·P·h·e + P·2f·e + P·f·e = 67,108,864 + 234,881,024 + 117,440,512.
  EXPECT_EQ(r.prefill.find("workspace")->bytes.count(), int64_t{419'430'400});
  // torch.cat: the old K of one layer, b·kv·d·(T-1)·e = 8·128·4606·2.
  EXPECT_EQ(r.decode.find("transient")->bytes.count(), int64_t{8} * 128 * 4606 * 2);
  EXPECT_EQ(r.prefill_bytes().count(), kLlama3_8bWeights + 536'870'912 + 419'430'400);
  EXPECT_EQ(r.decode_bytes().count(), kLlama3_8bWeights + 603'848'704 + 9'433'088);
  EXPECT_EQ(r.peak_phase, "prefill");
  EXPECT_EQ(r.peak().count(), int64_t{17'016'823'808});
}

TEST(Generate, EagerAddsTheScoreMatrices) {
  GenerateReport r = gen({.prompt_len = 4096, .new_tokens = 512, .attention = GenerateAttention::kEager});
  // Attention block: 2·P·h·e + P·a·d·e + P·2·kv·d·e + P·a·d·e = 150,994,944, plus b·a·P·P·(2e+4)
  // = 32·4096·4096·8 = 4,294,967,296 (scores in bf16, fp32 softmax, bf16 copy).
  EXPECT_EQ(r.prefill.find("workspace")->bytes.count(), int64_t{150'994'944} + 4'294'967'296);
  EXPECT_EQ(r.peak().count(), int64_t{21'043'355'648});
  GenerateReport flash = gen({.prompt_len = 4096, .new_tokens = 512, .attention = GenerateAttention::kFlash});
  EXPECT_EQ(flash.peak().count(), int64_t{17'016'823'808});  // the MLP block, as sdpa
}

TEST(Generate, LongGenerationPeaksInTheLastDecodeStep) {
  GenerateReport r = gen({.prompt_len = 16, .new_tokens = 8000, .batch = 8});
  EXPECT_EQ(r.final_tokens, 8015);
  EXPECT_EQ(r.peak_phase, "decode");
  // 8 sequences × 8015 tokens × 131072 B + the old K of one layer: 8·8·128·8014·2.
  EXPECT_EQ(r.decode_bytes().count(), kLlama3_8bWeights + 8 * 8015 * kPerToken + int64_t{8} * 8 * 128 * 8014 * 2);
  EXPECT_EQ(r.peak().count(), int64_t{24'596'160'512});
}

TEST(Generate, OneNewTokenIsThePrefillOnly) {
  GenerateReport r = gen({.prompt_len = 1000, .new_tokens = 1});
  EXPECT_EQ(r.final_tokens, 1000);
  EXPECT_EQ(r.decode.find("kv_cache")->bytes.count(), kPerToken * 1000);
  // No decode step: the transient is the LM head's b·h·e + b·V·(e+4) = 8192 + 769,536.
  EXPECT_EQ(r.decode.find("transient")->bytes.count(), int64_t{777'728});
}

TEST(Generate, BadInputNamesTheField) {
  struct Case {
    GenerateOptions o;
    const char* field;
  };
  const Case cases[] = {{{.prompt_len = 0, .new_tokens = 10}, "prompt_len"},
                        {{.prompt_len = 10, .new_tokens = 0}, "new_tokens"},
                        {{.prompt_len = 10, .new_tokens = 10, .batch = 0}, "batch"},
                        {{.prompt_len = int64_t{1} << 40, .new_tokens = 10}, "prompt_len"},
                        {{.prompt_len = 8000, .new_tokens = 193}, "new_tokens"},  // 8193 > 8192 positions
                        {{.prompt_len = 10, .new_tokens = 10, .dtype = DType::kINT8}, "dtype"}};
  for (const auto& c : cases) {
    auto r = estimate_generate(llama_3_8b(), c.o);
    ASSERT_FALSE(r.has_value()) << c.field;
    EXPECT_EQ(r.error().field, c.field);
  }
  EXPECT_TRUE(estimate_generate(llama_3_8b(), {.prompt_len = 8000, .new_tokens = 192}).has_value());
}

}  // namespace
}  // namespace actmem
