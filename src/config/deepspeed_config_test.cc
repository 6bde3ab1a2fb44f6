#include <string>

#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

const std::string kData = std::string(ACTMEM_SOURCE_DIR) + "/examples/";

// huggingface/transformers tests/deepspeed/ds_config_zero3.json: fp16, ZeRO-3, optimizer and
// parameters offloaded to CPU. With Llama-3-8B (P = 8,030,261,248) on dp 8.
TEST(DeepSpeedConfig, Zero3Offload) {
  auto c = load_training_config(kData + "deepspeed_zero3_offload.json");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->format, "deepspeed");
  EXPECT_FALSE(c->model);
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.zero_stage, 3);
  EXPECT_TRUE(s.layout.offload_optimizer);
  EXPECT_EQ(s.workload.dtype, DType::kFP16);
  EXPECT_EQ(s.workload.weight_dtype, DType::kFP16);
  EXPECT_EQ(s.workload.grad_dtype, DType::kFP16);
  EXPECT_EQ(s.workload.optimizer, Optimizer::kAdamW);
  EXPECT_EQ(s.layout.micro_batch, 1);  // not in the file: actmem's default
  // Named, not dropped: the parameter offload and the ZeRO-3 buffers actmem does not model.
  std::string all;
  for (const auto& w : c->warnings) all += w + "\n";
  for (const char* key : {"\"zero_optimization.offload_param.device\"", "\"zero_optimization.overlap_comm\"",
                          "\"zero_optimization.stage3_max_live_parameters\"", "\"zero_optimization.sub_group_size\"",
                          "give --dp"})
    EXPECT_NE(all.find(key), std::string::npos) << key;
  // Bytes: fp16 weights and gradients sharded over 8 (2·P/8 each), no optimizer state on the GPU,
  // 12·P/8 of it (fp32 master + Adam moments) in host memory.
  ASSERT_TRUE(set_training_option(s, "dp", int64_t{8}));
  ASSERT_TRUE(set_training_option(s, "seq_len", int64_t{2048}));
  auto prepared = prepare(load_model("llama-3-8b").value(), s.workload);
  ASSERT_TRUE(prepared);
  Totals t;
  ASSERT_TRUE(evaluate(*prepared, s.layout, t));
  const int64_t P = 8'030'261'248;
  EXPECT_EQ(t.weights, 2 * P / 8);
  EXPECT_EQ(t.gradients, 2 * P / 8);
  EXPECT_EQ(t.optimizer, 0);
  EXPECT_EQ(t.cpu_optimizer, 12 * P / 8);
}

// The HF Trainer's template (tests/deepspeed/ds_config_zero2.json): "auto" values are named, not guessed.
TEST(DeepSpeedConfig, Zero2AutoTemplate) {
  auto c = load_training_config(kData + "deepspeed_zero2_auto.json");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.zero_stage, 2);
  EXPECT_TRUE(s.layout.offload_optimizer);
  EXPECT_EQ(s.workload.dtype, DType::kBF16);  // fp16/bf16 "auto": not read, actmem's default stands
  std::string all;
  for (const auto& w : c->warnings) all += w + "\n";
  for (const char* key : {"\"fp16.enabled\": \"auto\"", "\"bf16.enabled\": \"auto\"",
                          "\"train_micro_batch_size_per_gpu\": \"auto\"", "\"zero_optimization.allgather_bucket_size\""})
    EXPECT_NE(all.find(key), std::string::npos) << key;
  for (const auto& setting : c->settings) EXPECT_NE(setting.option, "dtype");
}

TEST(DeepSpeedConfig, UnknownKeysAreErrors) {
  auto c = read_deepspeed_config(R"({"zero_optimization": {"stag": 2}})", "ds.json");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message,
            "\"zero_optimization.stag\": 2 (ds.json): unknown DeepSpeed key \"zero_optimization.stag\" (did you mean "
            "\"zero_optimization.stage\"?); actmem cannot tell whether it changes memory (remove it from the file, or "
            "give the job as actmem flags)");
  auto both = read_deepspeed_config(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "ds.json");
  ASSERT_FALSE(both);
  auto micro = read_deepspeed_config(R"({"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}})", "ds.json");
  ASSERT_TRUE(micro);
  EXPECT_EQ(std::get<int64_t>(micro->settings.front().value), 4);
  EXPECT_EQ(micro->settings.front().source, "\"train_micro_batch_size_per_gpu\": 4 (ds.json)");
}

}  // namespace
}  // namespace actmem
