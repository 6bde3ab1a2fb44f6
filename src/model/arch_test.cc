#include "model/arch.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(ArchTest, EveryRequiredTypeHasARow) {
  for (std::string_view type : {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
                                "gemma2", "gpt2", "gpt_neox", "phi3", "deepseek_v3", "gpt_bigcode", "phi", "olmo2",
                                "falcon", "gemma3_text", "bert", "roberta", "llama4_text", "granite"}) {
    auto arch = find_arch(type);
    ASSERT_TRUE(arch) << type;
    EXPECT_EQ((*arch)->model_type, type);
  }
  EXPECT_EQ(supported_model_types().size(), 23u);
}

TEST(ArchTest, TraitsFollowTheHfClasses) {
  const ArchTraits& gpt2 = **find_arch("gpt2");
  EXPECT_EQ(gpt2.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(gpt2.norm_bias && gpt2.fused_qkv && gpt2.learned_positions && gpt2.tie_embeddings);
  EXPECT_FALSE(gpt2.gated_mlp);
  EXPECT_EQ(gpt2.default_act, ActFn::kGeluNew);

  const ArchTraits& llama = **find_arch("llama");
  EXPECT_EQ(llama.norm, NormKind::kRMSNorm);
  EXPECT_TRUE(llama.gated_mlp);
  EXPECT_FALSE(llama.tie_embeddings);
  EXPECT_EQ(llama.moe, MoeStyle::kNone);

  EXPECT_TRUE((*find_arch("qwen2"))->qkv_bias);
  EXPECT_FALSE((*find_arch("qwen2"))->o_bias);
  EXPECT_TRUE((*find_arch("qwen3"))->qk_norm);
  EXPECT_TRUE((*find_arch("gemma2"))->sandwich_norms);
  EXPECT_EQ((*find_arch("gemma2"))->window, WindowStyle::kEvenLayers);
  EXPECT_TRUE((*find_arch("gemma"))->embedding_scaled);
  EXPECT_TRUE((*find_arch("gpt_neox"))->parallel_residual);
  EXPECT_DOUBLE_EQ((*find_arch("gpt_neox"))->default_rotary_fraction, 0.25);
  EXPECT_TRUE((*find_arch("phi3"))->fused_gate_up);
  EXPECT_TRUE((*find_arch("deepseek_v3"))->mla);
  EXPECT_EQ((*find_arch("deepseek_v3"))->moe, MoeStyle::kDeepseek);
  EXPECT_EQ((*find_arch("mixtral"))->moe, MoeStyle::kMixtral);
  EXPECT_EQ((*find_arch("qwen2_moe"))->moe, MoeStyle::kQwen2Moe);
  EXPECT_EQ((*find_arch("qwen3_moe"))->moe, MoeStyle::kQwen3Moe);
  EXPECT_EQ((*find_arch("llama4_text"))->moe, MoeStyle::kLlama4);
  // Issue 8 families (modeling_gpt_bigcode.py, modeling_phi.py, modeling_olmo2.py, modeling_falcon.py,
  // modeling_gemma3.py).
  EXPECT_TRUE((*find_arch("gpt_bigcode"))->fused_qkv && (*find_arch("gpt_bigcode"))->learned_positions);
  EXPECT_TRUE((*find_arch("phi"))->shared_input_norm && (*find_arch("phi"))->lm_head_bias);
  EXPECT_TRUE((*find_arch("olmo2"))->post_norms_only && (*find_arch("olmo2"))->qk_norm_full_width);
  EXPECT_EQ((*find_arch("falcon"))->default_act, ActFn::kGelu);
  EXPECT_EQ((*find_arch("gemma3_text"))->window, WindowStyle::kPattern);
}

TEST(ArchTest, UnknownTypeListsSupportedAndSuggests) {
  auto r = find_arch("qwen2-moe");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("did you mean 'qwen2_moe'?"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("llama, mistral"), std::string::npos);
  auto far = find_arch("t5");
  ASSERT_FALSE(far);
  EXPECT_EQ(far.error().message.find("did you mean"), std::string::npos) << far.error().message;
}

}  // namespace
}  // namespace actmem
