// End-to-end: `actmem estimate --from FILE` with Megatron-LM launch scripts (examples/).
#include <cstdio>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_run.h"

namespace {

using actmem::testing_cli::Result;
using actmem::testing_cli::run;

const std::string kGpt3 = std::string(ACTMEM_SOURCE_DIR) + "/examples/megatron_gpt3_175b.sh";

TEST(FromConfigCli, ReadsEchoesAndWarns) {
  Result r = run("estimate --from " + kGpt3 + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["inputs"]["tp"], 8);
  EXPECT_EQ(j["inputs"]["pp"], 16);
  EXPECT_EQ(j["inputs"]["framework"], "megatron");
  EXPECT_EQ(j["model"]["num_layers"], 96);
  EXPECT_EQ(j["config"]["format"], "megatron");
  EXPECT_NE(r.err.find("  --tp 8  <- --tensor-model-parallel-size 8 (" + kGpt3 + ":12)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("actmem: warning: --nproc_per_node 8"), std::string::npos) << r.err;
}

TEST(FromConfigCli, FlagsGivenOverrideTheFile) {
  Result r = run("estimate --from " + kGpt3 + " --tp 4 --recompute full --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["inputs"]["tp"], 4);
  EXPECT_EQ(j["inputs"]["pp"], 16);  // from the file
  EXPECT_EQ(j["inputs"]["recompute"], "full");
  EXPECT_EQ(j["inputs"]["seq_len"], 2048);  // the file's, not the CLI's default 8192
}

TEST(FromConfigCli, AFileWithoutAModelNeedsModel) {
  const std::string path = ::testing::TempDir() + "actmem_layout_only_" + std::to_string(getpid()) + ".sh";
  {
    FILE* f = fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("--tensor-model-parallel-size 2 --seq-length 4096 --bf16\n", f);
    fclose(f);
  }
  Result r = run("estimate --from " + path);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("does not describe the model"), std::string::npos) << r.err;
  Result with_model = run("estimate --from " + path + " --model llama-3-8b --json");
  ASSERT_EQ(with_model.code, 0) << with_model.err;
  auto j = nlohmann::json::parse(with_model.out);
  EXPECT_EQ(j["inputs"]["tp"], 2);
  EXPECT_EQ(j["inputs"]["seq_len"], 4096);
  EXPECT_EQ(j["inputs"]["grad_dtype"], "fp32");  // Megatron accumulates bf16 gradients in fp32
  std::remove(path.c_str());
}

}  // namespace
