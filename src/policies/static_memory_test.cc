#include "policies/static_memory.h"

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "model/test_models.h"

namespace actmem {
namespace {

/// Static memory of a model known by its parameter count (prepare_params_only + explain). It does
/// not depend on the sequence, which explain() needs all the same: 1 when not given.
StaticMemory run(int64_t params, const Workload& w, Layout l) {
  if (l.seq_len == 0) l.seq_len = 1;
  return testing::params_only_for_test(params, w, l).static_memory;
}

/// What the engine's static stage computes for hand-built counts: the most loaded stage of
/// stage_params() by stage_static_bytes().
StageStatic run(const ParamCounts& c, const Workload& w, const Layout& l) {
  StageStatic best;
  bool first = true;
  for (const auto& st : stage_params(c, l.parallel)) {
    const StageStatic m = stage_static_bytes(st, bytes_per_param(w), l.zero_stage, l.offload_optimizer, l.parallel);
    if (first || m.total() > best.total()) best = m;
    first = false;
  }
  return best;
}

// Seed card / ZeRO paper §3: mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes per parameter.
TEST(StaticMemory, MixedPrecisionAdamIs16BytesPerParam) {
  auto per = bytes_per_param(Workload{});
  EXPECT_EQ(per.weights + per.gradients + per.optimizer, 16.0);
  // 70e9 parameters -> 1120 GB (seed card: "static 16Ψ = 1120 GB").
  EXPECT_EQ(run(70'000'000'000, {}, {}).total(), Bytes{1'120'000'000'000});
}

// Rajbhandari et al. 2020 (ZeRO), Figure 1: Ψ = 7.5B, N_d = 64, K = 12:
// baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB.
TEST(StaticMemory, ZeroPaperFigure1) {
  Layout l{.parallel = {.dp = 64}};
  const int64_t psi = 7'500'000'000;
  const int64_t expected[] = {120'000'000'000, 31'406'250'000, 16'640'625'000, 1'875'000'000};
  for (int stage = 0; stage <= 3; ++stage) {
    l.zero_stage = stage;
    EXPECT_EQ(run(psi, {}, l).total(), Bytes{expected[stage]}) << "stage " << stage;
  }
}

// Korthikanti et al. 2022, Figure 1: the 22B model at TP 8 with fp32 gradients (2 + 4 + 12 = 18
// bytes per parameter) needs 45.5625 GiB for parameters and optimizer state. The paper counts
// Ψ = 12·L·h² (L = 48, h = 6144); our exact architecture count adds biases, norms and embeddings.
TEST(StaticMemory, KorthikantiFigure1WeightsAndOptimizer22B) {
  const int64_t psi = int64_t{12} * 48 * 6144 * 6144;
  EXPECT_DOUBLE_EQ(run(psi, {.grad_dtype = DType::kFP32}, {.parallel = {.tp = 8}}).total().gib(), 45.5625);
}

TEST(StaticMemory, OptimizerVariants) {
  Workload o;
  o.optimizer = Optimizer::kSGD;
  EXPECT_EQ(bytes_per_param(o).optimizer, 8.0);  // fp32 master + momentum
  o.optimizer = Optimizer::kAdamW8bit;
  EXPECT_DOUBLE_EQ(bytes_per_param(o).optimizer, 4.0 + 2.0 + 8.0 / 2048.0);
  o.weight_dtype = DType::kFP32;
  o.grad_dtype = DType::kFP32;
  o.optimizer = Optimizer::kAdamW;
  EXPECT_EQ(bytes_per_param(o).optimizer, 8.0);  // no master copy for fp32 training
}

TEST(StaticMemory, OffloadMovesOptimizerToHost) {
  auto m = run(1'000'000'000, {}, {.offload_optimizer = true});
  EXPECT_EQ(m.optimizer, Bytes{0});
  EXPECT_EQ(m.cpu_optimizer, Bytes{12'000'000'000});
  EXPECT_EQ(m.total(), Bytes{4'000'000'000});
}

TEST(StaticMemory, PipelinePlacesEmbeddingFirstAndHeadLast) {
  ParamCounts c;
  c.embedding = 1000;
  c.lm_head = 1000;
  c.final_norm = 10;
  for (int i = 0; i < 4; ++i) c.layers.push_back(LayerParams{.attention = 100, .replicated = 2});
  ParallelLayout l;
  l.pp = 2;
  l.tp = 2;
  auto st = stage_params(c, l);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].total(), 2 * (50 + 2) + 500);
  EXPECT_EQ(st[1].total(), 2 * (50 + 2) + 500 + 10);
}

// TP beyond the KV heads: each rank keeps one whole KV head (Megatron replicates, vLLM too).
// Llama-3-8B layer: k/v = 2·4096·1024; at tp 16 each rank holds 1/8 of it, not 1/16.
TEST(StaticMemory, KvHeadsReplicateWhenTpExceedsThem) {
  LayerParams l{.attention = 2 * 4096 * 4096, .kv_projection = 2 * 4096 * 1024, .kv_heads = 8};
  EXPECT_EQ(l.per_rank(8, 1), 2 * 4096 * 4096 / 8 + 2 * 4096 * 1024 / 8);
  EXPECT_EQ(l.per_rank(16, 1), 2 * 4096 * 4096 / 16 + 2 * 4096 * 1024 / 8);
}

TEST(StaticMemory, ExpertsShardOverEpAndExpertDataParallel) {
  ParamCounts c;
  for (int i = 0; i < 2; ++i) c.layers.push_back(LayerParams{.routed_experts = 8000});
  auto m = run(c, {}, {.parallel = {.dp = 8, .ep = 4}, .zero_stage = 1});
  // 2 layers × 8000 / ep 4 = 4000 expert params per GPU; optimizer sharded over dp/ep = 2.
  EXPECT_EQ(m.weights, Bytes{8000});
  EXPECT_EQ(m.optimizer, Bytes{2000 * 12});
}

// MoE parallel folding (Megatron parallel_state.py l.870-880): with tp 2, dp 4 and ep 4 at etp 1 the
// expert grid takes the 8 tensor- and data-parallel ranks as ep 4 × expert-dp 2; each GPU keeps 2 of 8
// whole experts where etp 2 (the default, etp = tp) would keep 2 halves. Megatron-LM's CI case
// moe/gpt3_mcore_te_tp2_pp1_te_8experts_etp1_ep4 runs this layout. Context parallelism joins the
// data-parallel ranks in the distributed optimizer's shard (intra_dp_cp_group).
TEST(StaticMemory, ExpertGridFoldsTensorAndContextParallelRanks) {
  ParamCounts c;
  c.layers.push_back(LayerParams{.dense_mlp = 4000, .routed_experts = 8000});
  Layout o{.parallel = {.dp = 4, .tp = 2, .ep = 4, .etp = 1}, .zero_stage = 1};
  auto m = run(c, {}, o);
  // dense 4000 / tp 2 = 2000, experts 8000 / (ep 4 · etp 1) = 2000 per GPU.
  EXPECT_EQ(m.weights, Bytes{2 * (2000 + 2000)});
  // optimizer: dense over dp 4, experts over the expert-dp group tp·dp / (ep·etp) = 2.
  EXPECT_EQ(m.optimizer, Bytes{12 * (2000 / 4 + 2000 / 2)});
  EXPECT_EQ(o.parallel.expert_dp(), 2);
  o.parallel.etp = 0;  // etp = tp: 2 halves of experts; ep 4 must then divide cp·dp = 4
  EXPECT_EQ(run(c, {}, o).weights, Bytes{2 * (2000 + 1000)});
  o.parallel.ep = 8;  // 8 × 2 ranks from 2 × 4: too many (check_static, on Mixtral's 8 experts)
  o.seq_len = 4096;
  auto bad = testing::try_estimate(testing::mixtral_8x7b(), {.framework = Framework::kMegatron}, o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "@ep 8 must divide cp·dp = 4: expert parallelism is carved out of the data- and "
                                 "context-parallel ranks (with @etp below @tp, of tensor-parallel ranks too: MoE "
                                 "parallel folding)");
  o.parallel = {.dp = 2, .tp = 2, .cp = 2, .ep = 1};  // the dense shard: dp·cp = 4 ranks
  EXPECT_EQ(run(c, {}, o).optimizer, Bytes{12 * (2000 / 4 + 4000 / 4)});
}

TEST(StaticMemory, BadInputIsAnError) {
  Layout o{.seq_len = 1, .zero_stage = 4};
  auto r = testing::try_params_only(1000, {}, o);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("@zero_stage"), std::string::npos);
  o.zero_stage = 0;
  o.parallel.dp = 6;
  o.parallel.ep = 4;  // ep 4 does not divide dp 6 (check_static, on Mixtral's 8 experts)
  o.seq_len = 4096;
  EXPECT_FALSE(testing::try_estimate(testing::mixtral_8x7b(), {.framework = Framework::kMegatron}, o).has_value());
}

}  // namespace
}  // namespace actmem
