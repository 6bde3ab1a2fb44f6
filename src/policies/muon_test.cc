// Megatron's Muon (--optimizer muon): the 2-D weights inside the layers and the learned position
// table get one fp32 momentum buffer beside their fp32 master, the 1-D tensors, the word embedding
// and the output layer Adam's two moments (megatron/core/optimizer/emerging_optimizers.py
// _is_nonlinear_or_embedding, language_module.py is_embedding_or_output_parameter, at d98e8a64;
// Emerging-Optimizers orthogonalized_optimizer.py: state momentum_buffer = zeros_like(grad)).
// The model is Megatron CI's moe/gpt3_moe_mcore_te_ep8_resume_torch_dist_muon_1node launch line
// (shared/data/megatron-ci), its counts worked out by hand from L, h, a, E, f, V.
#include <string>

#include <gtest/gtest.h>

#include "api/library.h"
#include "config/config_test_util.h"
#include "policies/static_memory.h"

namespace actmem {
namespace {

const std::string kMuonMoe =
    "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --micro-batch-size 4 --global-batch-size 32 "
    "--seq-length 1024 --max-position-embeddings 1024 --vocab-file vocab.json --disable-bias-linear "
    "--transformer-impl transformer_engine --expert-model-parallel-size 4 --num-experts 8 --moe-router-topk 2 "
    "--moe-ffn-hidden-size 1024 --moe-grouped-gemm --bf16 --optimizer muon";

Report muon_report(const std::string& extra, int64_t gpus) {
  auto c = read_megatron_args(kMuonMoe + extra, "muon.sh");
  EXPECT_TRUE(c) << (c ? "" : c.error().message);
  TrainingSettings s;
  if (c) {
    EXPECT_TRUE(apply_training_config(*c, s));
  }
  s.layout.parallel.dp = gpus;
  return c && c->model ? testing::report_of(*c->model, s) : Report{};
}

TEST(Muon, MatricesKeepOneMomentumTheRestAdam) {
  constexpr int64_t L = 12, h = 512, E = 8, fe = 1024, V = 50304, P = 1024;
  // On one GPU of ep 4: per layer linear_qkv 3h·h, linear_proj h·h, router E·h and E/4 experts of
  // fc1 fe·h + fc2 h·fe (2-D); two LayerNorms, weight and bias, 4h (1-D). The position table P·h
  // is 2-D and unmarked (Muon's); the word embedding V·h (tied, one copy at pp 1) and the final
  // LayerNorm 2h are Adam's.
  constexpr int64_t matrices = L * (3 * h * h + h * h + E * h + E / 4 * 2 * fe * h) + P * h;
  constexpr int64_t rest = L * 4 * h + V * h + 2 * h;
  EXPECT_EQ(matrices, 38'322'176);
  EXPECT_EQ(rest, 25'781'248);
  const Report r = muon_report("", 4);
  EXPECT_EQ(r.totals.params_on_gpu, matrices + rest);
  // 4 (fp32 master) + 4 (momentum) per 2-D weight; 4 + 4 (m) + 4 (v) for the rest.
  EXPECT_EQ(r.totals.optimizer, 8 * matrices + 12 * rest);
  EXPECT_EQ(r.totals.optimizer, 615'952'384);
  const Term* t = r.estimate.static_memory.breakdown.find("optimizer");
  ASSERT_NE(t, nullptr);
  EXPECT_NE(t->formula.find("Ψ_2D · (4 (fp32 master) + 4 (momentum))"), std::string::npos) << t->formula;
  EXPECT_NE(t->substituted.find("38,322,176 2-D params × 8 B + 25,781,248 other params × 12 B"), std::string::npos)
      << t->substituted;
}

// With --use-distributed-optimizer each part is sharded over DP (Megatron's layer-wise distributed
// optimizer: whole matrices per rank, counted as an even share and warned): dp 4, expert-dp 1.
TEST(Muon, DistributedOptimizerShardsEachPart) {
  constexpr int64_t dense_matrices = 12 * (4 * 512 * 512 + 8 * 512) + 1024 * 512, experts = 12 * 2 * 2 * 1024 * 512;
  constexpr int64_t rest = 12 * 4 * 512 + 50304 * 512 + 2 * 512;
  const Report r = muon_report(" --use-distributed-optimizer", 4);
  EXPECT_EQ(r.totals.optimizer, 8 * (dense_matrices / 4 + experts) + 12 * (rest / 4));
}

TEST(Muon, RefusedWhereItIsNotModeled) {
  auto c = read_megatron_args(kMuonMoe, "muon.sh");
  ASSERT_TRUE(c);
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  auto p = prepare(*c->model, s.workload);
  ASSERT_TRUE(p);
  Layout fsdp = s.layout;
  fsdp.zero_stage = 3;
  auto refused = explain(*p, fsdp);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "optimizer");
  EXPECT_NE(refused.error().message.find("Megatron-FSDP"), std::string::npos) << refused.error().message;
  Workload hf = s.workload;
  hf.framework = Framework::kHF;
  hf.megatron = MegatronOptions{};
  auto ph = prepare(*c->model, hf);
  ASSERT_TRUE(ph);
  auto other = explain(*ph, s.layout);
  ASSERT_FALSE(other);
  EXPECT_NE(other.error().message.find("@framework megatron only"), std::string::npos) << other.error().message;
}

}  // namespace
}  // namespace actmem
