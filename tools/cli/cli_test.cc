// End-to-end tests of the actmem binary: real command lines, real output, exit codes.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_run.h"

namespace {

using actmem::testing_cli::Result;
using actmem::testing_cli::one_line;
using actmem::testing_cli::run;

nlohmann::json run_json(const std::string& args) {
  Result r = run(args + " --json");
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
}

// ZeRO paper Figure 1 (Ψ = 7.5B, N_d = 64): 1.9 GB per GPU with P_os+g+p.
TEST(Cli, ParamsOnlyZero3) {
  auto j = run_json("estimate --params 7.5e9 --dp 64 --zero 3");
  EXPECT_EQ(j["memory"]["total_bytes"], 1'875'000'000);
  EXPECT_TRUE(j["activations"]["per_layer_bytes"].is_null());
}

// Seed card "Model Memory Footprint": a 70B model is 1.13 TB to train at 16 bytes per parameter;
// Llama-3-70B has 70,553,706,496 parameters -> 1,128,859,303,936 B of static memory.
TEST(Cli, DefaultIsLlama3_70BAt8k) {
  auto j = run_json("estimate");
  EXPECT_EQ(j["model"]["name"], "llama-3-70b");
  EXPECT_EQ(j["inputs"]["seq_len"], 8192);
  EXPECT_EQ(j["params"]["total"], 70'553'706'496);
  EXPECT_EQ(j["memory"]["static_bytes"], 16 * int64_t{70'553'706'496});
  EXPECT_GT(j["activations"]["per_layer_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["memory"]["total_bytes"].get<int64_t>(),
            j["memory"]["static_bytes"].get<int64_t>() + j["memory"]["activations_bytes"].get<int64_t>() +
                j["memory"]["transient_bytes"].get<int64_t>() + j["memory"]["reserve_bytes"].get<int64_t>());
}

// Seed card: Llama-2-70B, s = 4096, b = 2, full recomputation keeps each layer's input:
// 2·s·b·h = 2 × 4096 × 2 × 8192 = 134,217,728 B per layer.
TEST(Cli, SeedCardFullRecomputation) {
  auto j = run_json("estimate --model llama-2-70b --seq-len 4096 --micro-batch 2 --recompute full");
  EXPECT_EQ(j["activations"]["per_layer_bytes"], 134'217'728);
  ASSERT_TRUE(j["activations"]["tensors"].is_array());
}

// Seed card: full recomputation costs ~1/3 more compute (one extra forward of every layer over a
// step of forward + backward ≈ 3 forwards); the LM head is not recomputed, so slightly under 1/3.
TEST(Cli, FullRecomputationCostsAThirdMoreCompute) {
  auto j = run_json("estimate --model llama-2-70b --seq-len 4096 --micro-batch 2 --recompute full");
  const double forward = j["activations"]["forward_flops"].get<double>();
  const double extra = j["activations"]["recompute_flops"].get<double>();
  EXPECT_GT(extra / (3 * forward), 0.32);
  EXPECT_LT(extra / (3 * forward), 1.0 / 3.0);
}

TEST(Cli, TableAndExplainNameTheTerms) {
  Result t = run("estimate --model llama-2-70b --seq-len 4096 --micro-batch 2 --recompute full");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("Weights (bf16)"), std::string::npos);
  EXPECT_NE(t.out.find("Total per GPU"), std::string::npos);
  Result e = run("explain --model llama-2-70b --seq-len 4096 --micro-batch 2 --recompute full");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("2·s·b·h"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("134,217,728"), std::string::npos) << e.out;
}

TEST(Cli, ModelsListsPresets) {
  Result r = run("models");
  ASSERT_EQ(r.code, 0);
  for (const char* name : {"llama-3-70b", "gpt-22b", "deepseek-v3", "mixtral-8x7b", "gpt3-175b"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
}

// Bad input: one line on stderr naming the field and the fix, exit code 2, nothing on stdout.
TEST(Cli, BadInputIsOneLineAndExitCode2) {
  struct Case {
    const char* args;
    const char* must_mention;
  };
  const Case cases[] = {
      {"estimate --model llama-3-70b --tp 3", "--tp"},
      {"estimate --model llama3-70b", "llama-3-70b"},
      {"estimate --model /nonexistent/config.json", "config.json"},
      {"estimate --seq-len 0", "--seq-len"},
      {"estimate --seq-len -5", "--seq-len"},
      {"estimate --micro-batch 99999999999", "--micro-batch"},
      {"estimate --dtype bf17", "--dtype"},
      {"estimate --framework deepspeed", "megatron"},
      {"estimate --zero 4", "--zero"},
      {"estimate --params abc", "--params"},
      {"estimate --params 7e9 --dp 6 --ep 4", "--ep"},
      {"estimate --params 7e9 --model llama-3-8b", "give one"},
      {"estimate --grad-dtype int4", "--grad-dtype"},
      {"estimat", "did you mean 'estimate'"},
      {"estimate --tp", "--tp"},
      {"estimate --reserve '2 parsecs'", "--reserve"},
      {"estimate --hidden-dropout 1.5", "--hidden-dropout"},
  };
  for (const auto& c : cases) {
    Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_TRUE(one_line(r.err)) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.must_mention), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args;
  }
}

TEST(Cli, MalformedConfigJson) {
  const std::string path = ::testing::TempDir() + "actmem_bad_config.json";
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("{\"model_type\": \"llama\", \"hidden_size\": 4096,", f);
  fclose(f);
  Result r = run("estimate --model " + path);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(one_line(r.err)) << r.err;
  std::remove(path.c_str());
}

}  // namespace

namespace {

// README "Fine-tuning": QLoRA of Llama-3-8B (nf4 + double quant, r 16 on all seven projections,
// paged AdamW, full recomputation, s 2048), every term checked by hand there.
TEST(Cli, QloraLlama3_8BReadmeExample) {
  auto j = run_json(
      "estimate --model llama-3-8b --seq-len 2048 --recompute full --lora-rank 16 --lora-targets all "
      "--base-weight-dtype nf4 --double-quant --optimizer paged-adamw");
  EXPECT_EQ(j["memory"]["weights_bytes"], 5'870'068'608);
  EXPECT_EQ(j["memory"]["gradients_bytes"], 167'772'160);
  EXPECT_EQ(j["memory"]["optimizer_bytes"], 335'544'320);
  EXPECT_EQ(j["memory"]["paged_optimizer_bytes"], 176'160'768);
  // README table: the frozen embedding keeps no input_ids; the checkpointed layers keep what they are
  // passed (HF 4.5x): cos and sin 2·2·2048·128, cache_position 8·2048.
  EXPECT_EQ(j["activations"]["total_bytes"], 1'621'123'072 + 1'064'960);
  EXPECT_EQ(j["memory"]["total_bytes"], 10'622'256'000);
  EXPECT_EQ(j["inputs"]["lora"]["targets"], "q,k,v,o,gate,up,down");
  // Default runs carry no fine-tuning keys (their JSON is unchanged).
  EXPECT_FALSE(run_json("estimate --model llama-3-8b")["inputs"].contains("lora"));
}

TEST(Cli, FineTuningFlagsErrorsNameTheFlag) {
  for (const char* args : {"estimate --model llama-3-8b --base-weight-dtype nf4",
                           "estimate --model llama-3-8b --lora-targets q,v",
                           "estimate --model llama-3-8b --lora-rank 8 --lora-targets q,x",
                           "estimate --model llama-3-8b --lora-rank 8 --pp 2",
                           "estimate --params 8e9 --optimizer adafactor"}) {
    Result r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_TRUE(one_line(r.err)) << r.err;
    EXPECT_NE(r.err.find("--"), std::string::npos) << r.err;
  }
}

}  // namespace

namespace {

// Issue 26: the arguments CLI11 leaves over were listed last first ("4 --ulysses-sp"); they are
// listed as typed, with the option closest to the first unknown flag.
TEST(Cli, UnknownArgumentsInTheOrderTypedWithASuggestion) {
  Result r = run("estimate --model gpt2 --seq-lenn 4 --ulysses-sp 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "actmem: --seq-lenn 4 --ulysses-sp 2 were not expected; did you mean --seq-len? (actmem estimate "
                   "--help lists the options)\n");
  r = run("serve --model gpt2 extra");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "actmem: extra was not expected\n");
}

}  // namespace
