// Parameter counts checked against published totals; each test names its source.
#include "model/params.h"

#include <gtest/gtest.h>

#include "model/presets.h"

namespace actmem {
namespace {

ParamCounts preset_params(std::string_view name) {
  auto spec = load_preset(name);
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().message);
  return spec ? count_params(*spec) : ParamCounts{};
}

// Meta's Llama 2 model card / HF safetensors metadata.
TEST(ParamsTest, Llama2) {
  EXPECT_EQ(preset_params("llama-2-7b").total(), 6'738'415'616);
  EXPECT_EQ(preset_params("llama-2-13b").total(), 13'015'864'320);
  EXPECT_EQ(preset_params("llama-2-70b").total(), 68'976'648'192);
}

// HF safetensors metadata of meta-llama/Meta-Llama-3-8B, -70B and Llama-3.1-405B.
TEST(ParamsTest, Llama3) {
  EXPECT_EQ(preset_params("llama-3-8b").total(), 8'030'261'248);
  EXPECT_EQ(preset_params("llama-3-70b").total(), 70'553'706'496);
  EXPECT_EQ(preset_params("llama-3.1-405b").total(), 405'853'388'800);
}

// HF safetensors metadata of mistralai/Mistral-7B-v0.1.
TEST(ParamsTest, Mistral7b) { EXPECT_EQ(preset_params("mistral-7b").total(), 7'241'732'096); }

// Mixtral of Experts (Jiang et al. 2024) quotes 46.7B total and 12.9B active; these are the
// exact values from the shapes (HF safetensors metadata: 46,702,792,704).
TEST(ParamsTest, Mixtral8x7bTotalAndActive) {
  const ParamCounts p = preset_params("mixtral-8x7b");
  EXPECT_EQ(p.total(), 46'702'792'704);
  EXPECT_EQ(p.active(), 12'879'925'248);
  // 8 experts of 3 * 4096 * 14336 in each of 32 layers.
  EXPECT_EQ(p.layers[0].routed_experts, 8LL * 3 * 4096 * 14336);
  EXPECT_EQ(p.routed_active_per_layer, 2LL * 3 * 4096 * 14336);
}

// DeepSeek-V3 technical report: 671B total (the 685B on HF includes the 14B MTP module, which
// is not part of the main model). Includes e_score_correction_bias (256 per MoE layer).
TEST(ParamsTest, DeepseekV3MainModel) {
  const ParamCounts p = preset_params("deepseek-v3");
  EXPECT_EQ(p.total(), 671'026'419'200);
  ASSERT_EQ(p.layers.size(), 61u);
  EXPECT_EQ(p.layers[2].routed_experts, 0);  // first_k_dense_replace = 3
  EXPECT_EQ(p.layers[3].routed_experts, 256LL * 3 * 7168 * 2048);
  EXPECT_EQ(p.layers[3].shared_experts, 3LL * 7168 * 2048);
  // MLA per layer: q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj and two norms.
  const int64_t mla = 7168LL * 1536 + 1536 + 1536LL * 128 * 192 + 7168LL * 576 + 512 + 512LL * 128 * 256 +
                      128LL * 128 * 7168;
  EXPECT_EQ(p.layers[0].attention + p.layers[0].replicated - 2 * 7168, mla);
}

// GPT-2 small: 124,439,808 with the output layer tied and 1024 learned positions.
TEST(ParamsTest, Gpt2Small) {
  const ParamCounts p = preset_params("gpt2");
  EXPECT_EQ(p.total(), 124'439'808);
  EXPECT_EQ(p.lm_head, 0);
  EXPECT_EQ(p.embedding, 50257LL * 768);            // wte, vocab-parallel
  EXPECT_EQ(p.embedding_replicated, 1024LL * 768);  // wpe, whole on every TP rank
}

// HF safetensors metadata of Qwen/Qwen2.5-72B and Qwen2.5-7B (q/k/v biases included).
TEST(ParamsTest, Qwen25) {
  EXPECT_EQ(preset_params("qwen2.5-72b").total(), 72'706'203'648);
  EXPECT_EQ(preset_params("qwen2.5-7b").total(), 7'615'616'512);
}

// HF safetensors metadata of Qwen/Qwen3-8B (q_norm/k_norm of head_dim each) and Qwen3-30B-A3B.
TEST(ParamsTest, Qwen3) {
  EXPECT_EQ(preset_params("qwen3-8b").total(), 8'190'735'360);
  const ParamCounts moe = preset_params("qwen3-30b-a3b");
  EXPECT_EQ(moe.total(), 30'532'122'624);
  EXPECT_EQ(moe.active(), 3'353'032'704);  // "3.3B activated"
}

// HF safetensors metadata of google/gemma-2-9b: tied embeddings, four norms per layer.
TEST(ParamsTest, Gemma2) { EXPECT_EQ(preset_params("gemma-2-9b").total(), 9'241'705'984); }

TEST(ParamsTest, DenseModelActiveEqualsTotal) {
  const ParamCounts p = preset_params("llama-3-8b");
  EXPECT_EQ(p.active(), p.total());
  // Non-embedding: everything but the 128256 x 4096 embedding and the untied LM head.
  EXPECT_EQ(p.non_embedding(), 8'030'261'248 - 2LL * 128256 * 4096);
}

// Megatron GPT of Korthikanti et al. 2022 Table 3: 12 L h^2 (1 + 13/(12h) + (V + s)/(12 L h)).
TEST(ParamsTest, MegatronGptMatchesClosedForm) {
  for (auto [name, h, L] : {std::tuple{"gpt-22b", 6144LL, 48LL}, std::tuple{"gpt-175b", 12288LL, 96LL},
                            std::tuple{"gpt-530b", 20480LL, 105LL}, std::tuple{"gpt-1t", 25600LL, 128LL}}) {
    const int64_t closed_form = L * (12 * h * h + 13 * h) + (51200 + 2048) * h + 2 * h;
    EXPECT_EQ(preset_params(name).total(), closed_form) << name;
  }
}

TEST(ParamsTest, SplitSumsToTotal) {
  const ParamCounts p = preset_params("qwen2.5-72b");
  // Per layer: q/o weights and the q bias are TP-split; k/v weights and biases split by KV head
  // (8 of them); two RMSNorms are replicated.
  EXPECT_EQ(p.layers[0].attention, 2LL * 8192 * 8192 + 8192);
  EXPECT_EQ(p.layers[0].kv_projection, 2LL * 8192 * 1024 + 2 * 1024);
  EXPECT_EQ(p.layers[0].kv_heads, 8);
  EXPECT_EQ(p.layers[0].dense_mlp, 3LL * 8192 * 29568);
  EXPECT_EQ(p.layers[0].replicated, 2LL * 8192);
  EXPECT_EQ(p.final_norm, 8192);
}

}  // namespace
}  // namespace actmem
