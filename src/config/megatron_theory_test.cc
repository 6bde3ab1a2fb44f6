// Megatron-LM's theoretical memory report, reimplemented, against the numbers Megatron's own
// theoretical_memory_usage.py (@ 1bcb3b9e0b029c6109d8d32872645bd540052963) prints for the fixture
// scripts' arguments. Each figure is derived by hand below from the formula, and equals what
// report_theoretical_memory() printed when run on these arguments:
//   llama3-8b: "weight and optimizer=57438.81 MB, activation=38761.87 MB, total=96200.67 MB"
//   gpt3-175b: "weight and optimizer=24683.09 MB, activation=31853.06 MB, total=56536.15 MB"
//   gpt3-175b with --sequence-parallel --recompute-granularity selective: "activation=9840.03 MB"
#include "config/megatron_theory.h"

#include <string>

#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

const std::string kData = std::string(ACTMEM_SOURCE_DIR) + "/examples/";
constexpr double kMiB = 1024.0 * 1024.0;

struct TheoryJob {
  TrainingConfig config;
  TrainingSettings settings;
};

TheoryJob read(const std::string& file) {
  TheoryJob job;
  auto c = load_training_config(kData + file);
  EXPECT_TRUE(c) << c.error().message;
  job.config = *c;
  EXPECT_TRUE(apply_training_config(job.config, job.settings));
  return job;
}

// examples/llama/train_llama3_8b_h200_bf16.sh: 8 GPUs, TP 1 (so no SP), distributed optimizer,
// Megatron's default LayerNorm, 16 micro-batches (128 / (1 × 8)).
TEST(MegatronTheory, Llama3_8bScript) {
  TheoryJob job = read("megatron_llama3_8b.sh");
  ASSERT_TRUE(job.config.model);
  auto m = megatron_theoretical_memory(*job.config.model, job.settings.layout, int64_t{16});
  ASSERT_TRUE(m) << m.error().message;
  // Parameters: per layer attention 2h²(1 + 8/32) = 41,943,040, SwiGLU 2·h·f·3/2 = 176,160,768,
  // LayerNorms 2·h·2 = 16,384; 32 layers + final LayerNorm 2h + untied embedding and output 2·V·h.
  const double h = 4096, f = 14336, V = 128256, L = 32;
  const double P = L * (2 * h * h * 1.25 + 2 * h * f * 1.5 + 4 * h) + 2 * h + 2 * V * h;
  EXPECT_EQ(P, 8'030'527'488.0);
  EXPECT_EQ(m->parameters_on_most_loaded_shard, P);
  EXPECT_EQ(m->bytes_per_parameter, 6 + 12.0 / 8);  // distributed optimizer over dp 8
  EXPECT_DOUBLE_EQ(m->weight_and_optimizer_mib, P * 7.5 / kMiB);
  EXPECT_NEAR(m->weight_and_optimizer_mib, 57438.81, 0.005);
  // Without SP: s·b·h·(10 + 24/t) per layer, + 8·s·b + s·b·h (embedding), + 2·(s·b·V/t + s·b·h)
  // (logits, final norm) at pp 1, all ×1.05.
  const double s = 8192;
  const double act = (s * h * 34 * L + 8 * s + s * h + 2 * (s * V + s * h)) * 1.05;
  EXPECT_DOUBLE_EQ(m->activation_mib, act / kMiB);
  EXPECT_NEAR(m->activation_mib, 38761.87, 0.005);
  EXPECT_NEAR(m->total_mib, 96200.67, 0.005);
  EXPECT_FALSE(m->sequence_parallel_formula);
}

// examples/gpt3/train_gpt3_175b_distributed.sh: TP 8 × PP 16, tied embeddings; Megatron's world of
// 128 GPUs is dp 1; micro-batches per step unknown (None: pp in flight).
TEST(MegatronTheory, Gpt3_175bScript) {
  TheoryJob job = read("megatron_gpt3_175b.sh");
  ASSERT_TRUE(job.config.model);
  auto m = megatron_theoretical_memory(*job.config.model, job.settings.layout, std::nullopt);
  ASSERT_TRUE(m) << m.error().message;
  // Most loaded shard (the first stage): (12h²·L/pp + V·h)/t + (4h·L + 2h)/pp, 18 bytes each.
  const double h = 12288, V = 51200, L = 96, pp = 16, t = 8;
  const double shard = (12 * h * h * L / pp + V * h) / t + (4 * h * L + 2 * h) / pp;
  EXPECT_DOUBLE_EQ(m->parameters_on_most_loaded_shard, shard);
  EXPECT_DOUBLE_EQ(m->weight_and_optimizer_mib, shard * 18 / kMiB);
  EXPECT_NEAR(m->weight_and_optimizer_mib, 24683.09, 0.005);
  // s·b·h·(10 + 24/8)·L + pp·(8·s·b + s·b·h), ×1.05; no logits on the first stage.
  const double s = 2048;
  EXPECT_DOUBLE_EQ(m->activation_mib, (s * h * 13 * L + pp * (8 * s + s * h)) * 1.05 / kMiB);
  EXPECT_NEAR(m->activation_mib, 31853.06, 0.005);
  EXPECT_NEAR(m->total_mib, 56536.15, 0.005);

  // With SP and selective recomputation Megatron takes Korthikanti et al.'s formula:
  // (s·b·h·(18 + 4·f/h)·L + pp·(8·s·b + s·b·h)) / t.
  Layout sp = job.settings.layout;
  sp.parallel.sp = true;
  sp.recompute = Recompute::kSelective;
  auto m_sp = megatron_theoretical_memory(*job.config.model, sp, std::nullopt);
  ASSERT_TRUE(m_sp);
  EXPECT_TRUE(m_sp->sequence_parallel_formula);
  EXPECT_DOUBLE_EQ(m_sp->activation_mib, (s * h * 34 * L + pp * (8 * s + s * h)) / t / kMiB);
  EXPECT_NEAR(m_sp->activation_mib, 9840.03, 0.005);
}

TEST(MegatronTheory, ComparisonNamesTheReasons) {
  TheoryJob job = read("megatron_llama3_8b.sh");
  auto prepared = prepare(*job.config.model, job.settings.workload);
  ASSERT_TRUE(prepared);
  auto report = explain(*prepared, job.settings.layout);
  ASSERT_TRUE(report) << report.error().message;
  auto m = megatron_theoretical_memory(*job.config.model, job.settings.layout, int64_t{16});
  ASSERT_TRUE(m);
  const auto lines = megatron_comparison(*m, *report);
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines[0], "Megatron-LM's theoretical memory (theoretical_memory_usage.py): weight and optimizer=57438.81 MB, "
                      "activation=38761.87 MB, total=96200.67 MB (MB = MiB)");
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  // --grad-reduce-in-bf16: actmem counts bf16 gradients where Megatron assumes fp32 main gradients.
  EXPECT_NE(all.find("gradients bf16"), std::string::npos) << all;
  EXPECT_NE(all.find("without sequence parallelism"), std::string::npos) << all;
  // Megatron's parameters leave out the LayerNorm biases actmem counts? Both count them: no line.
  EXPECT_EQ(all.find("parameters on the most loaded GPU"), std::string::npos) << all;
}

}  // namespace
}  // namespace actmem
