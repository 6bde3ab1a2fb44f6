// --from a Megatron-LM argument line: the layer spec, TE fp8 and recompute modules
// (megatron/training/arguments.py: --transformer-impl, --fp8-format, --fp8-recipe,
// --activation-func-fp8-input-store, --recompute-modules nargs='*').
#include <gtest/gtest.h>

#include "api/library.h"
#include "config/config_test_util.h"
#include "config/training_config.h"

namespace actmem {
namespace {

using testing::find;

TEST(MegatronTeArgs, SpecFp8AndRecomputeModules) {
  auto c = read_megatron_args("--transformer-impl transformer_engine --fp8-format hybrid --fp8-recipe tensorwise "
                              "--activation-func-fp8-input-store --recompute-granularity selective "
                              "--recompute-modules core_attn mlp",
                              "te.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.megatron.impl, TransformerImpl::kTransformerEngine);
  EXPECT_EQ(s.workload.megatron.fp8, Fp8Recipe::kTensorwise);
  EXPECT_TRUE(s.workload.megatron.fp8_act_input_store);
  EXPECT_EQ(s.workload.megatron.recompute_modules, unsigned{kRecomputeCoreAttn | kRecomputeMlp});
  EXPECT_EQ(find(*c, "recompute_modules")->source, "--recompute-modules core_attn mlp (te.sh:1)");
}

// No --transformer-impl: TransformerConfig.transformer_impl defaults to "transformer_engine"
// (megatron/core/transformer/transformer_config.py l.1314 at d98e8a64), not actmem's local default.
// --moe-grouped-gemm is read under the TE spec with experts (TEGroupedMLP,
// extensions/transformer_engine_spec_provider.py l.75-85); the local spec's SequentialMLP and a
// dense model ignore it (models/backends.py l.133-142).
TEST(MegatronTeArgs, DefaultSpecIsTeAndGroupedGemmIsRead) {
  auto c = read_megatron_args("--num-experts 8 --moe-grouped-gemm", "g.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.megatron.impl, TransformerImpl::kTransformerEngine);
  EXPECT_EQ(find(*c, "transformer_impl")->source, "Megatron's default (no --transformer-impl)");
  EXPECT_TRUE(s.workload.megatron.moe_grouped_gemm);
  EXPECT_EQ(find(*c, "moe_grouped_gemm")->source, "--moe-grouped-gemm (g.sh:1)");
  for (const char* ignored : {"--transformer-impl local --num-experts 8 --moe-grouped-gemm", "--moe-grouped-gemm"}) {
    auto l = read_megatron_args(ignored, "l.sh");
    ASSERT_TRUE(l) << l.error().message;
    EXPECT_EQ(find(*l, "moe_grouped_gemm"), nullptr) << ignored;
  }
}

// --attention-backend under the TE spec: unfused is TE's UnfusedDotProductAttention (language_module.py
// l.141-144), read as eager; local needs --spec local (arguments.py l.436-437), refused.
TEST(MegatronTeArgs, AttentionBackendUnderTheTeSpec) {
  auto c = read_megatron_args("--transformer-impl transformer_engine --attention-backend unfused", "u.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.attention, AttentionImpl::kEager);
  EXPECT_EQ(s.workload.megatron.impl, TransformerImpl::kTransformerEngine);
  EXPECT_EQ(find(*c, "attention")->source, "--attention-backend unfused (u.sh:1)");
  auto local = read_megatron_args("--transformer-impl transformer_engine --attention-backend local", "l.sh");
  ASSERT_FALSE(local);
  EXPECT_NE(local.error().message.find("--spec local"), std::string::npos) << local.error().message;
  EXPECT_TRUE(read_megatron_args("--transformer-impl local --attention-backend local", "l.sh"));
}

// --moe-layer-recompute, deprecated in TransformerConfig.__post_init__ (transformer_config.py
// l.2014-2025): granularity selective, "moe" appended to the modules (default ["core_attn"]);
// with --recompute-granularity full Megatron raises ValueError.
TEST(MegatronTeArgs, MoeLayerRecomputeIsRecomputeModulesMoe) {
  auto c = read_megatron_args("--moe-layer-recompute", "m.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.recompute, Recompute::kSelective);
  EXPECT_EQ(s.workload.megatron.recompute_modules, unsigned{kRecomputeCoreAttn | kRecomputeMoe});
  auto with = read_megatron_args("--recompute-granularity selective --recompute-modules moe_act --moe-layer-recompute",
                                 "m.sh");
  ASSERT_TRUE(with) << with.error().message;
  TrainingSettings s2;
  ASSERT_TRUE(apply_training_config(*with, s2));
  EXPECT_EQ(s2.workload.megatron.recompute_modules, unsigned{kRecomputeMoeAct | kRecomputeMoe});
  EXPECT_FALSE(read_megatron_args("--recompute-granularity full --moe-layer-recompute", "m.sh"));
}

TEST(MegatronTeArgs, Fp8FormatAloneMeansTeWithTheDelayedRecipe) {
  auto c = read_megatron_args("--fp8-format e4m3", "f.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.megatron.impl, TransformerImpl::kTransformerEngine);  // Megatron's default spec
  EXPECT_EQ(s.workload.megatron.fp8, Fp8Recipe::kDelayed);                   // transformer_config.py l.594
  // Without either flag: Megatron's default spec too (TransformerConfig.transformer_impl).
  auto plain = read_megatron_args("--num-layers 2", "p.sh");
  ASSERT_TRUE(plain);
  EXPECT_EQ(find(*plain, "transformer_impl")->value, OptionValue{std::string("transformer_engine")});
}

// --moe-token-dispatcher-type (arguments.py; choices allgather, alltoall, flex; default
// allgather): alltoall is read, flex is refused by the option's name table.
TEST(MegatronTeArgs, MoeTokenDispatcherType) {
  auto c = read_megatron_args("--moe-token-dispatcher-type alltoall", "moe.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.megatron.dispatcher, MoeDispatcher::kAlltoall);
  EXPECT_EQ(find(*c, "moe_token_dispatcher")->source, "--moe-token-dispatcher-type alltoall (moe.sh:1)");
  auto flex = read_megatron_args("--moe-token-dispatcher-type flex", "moe.sh");
  ASSERT_TRUE(flex) << flex.error().message;
  TrainingSettings f;
  EXPECT_FALSE(apply_training_config(*flex, f));
}

}  // namespace
}  // namespace actmem
