// End-to-end: `actmem estimate --from FILE` for torchtitan TOML, axolotl / LLaMA-Factory YAML, and
// Megatron-LM's own theoretical memory beside actmem's (examples/).
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_run.h"

namespace {

using actmem::testing_cli::Result;
using actmem::testing_cli::run;

const std::string kData = std::string(ACTMEM_SOURCE_DIR) + "/examples/";

TEST(FromFormatsCli, TorchtitanToml) {
  Result r = run("estimate --from " + kData + "torchtitan_llama3_70b.toml --dp 8 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["format"], "torchtitan");
  EXPECT_EQ(j["inputs"]["tp"], 8);
  EXPECT_EQ(j["inputs"]["dp"], 8);  // the flag: the file's -1 names no number
  EXPECT_EQ(j["inputs"]["recompute"], "full");
  EXPECT_EQ(j["model"]["num_layers"], 80);
  EXPECT_NE(r.err.find("  --tp 8  <- parallelism.tensor_parallel_degree = 8 (" + kData + "torchtitan_llama3_70b.toml:40)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("actmem: warning: parallelism.data_parallel_shard_degree = -1"), std::string::npos) << r.err;
}

TEST(FromFormatsCli, AxolotlYamlAndUnknownKeys) {
  Result r = run("estimate --from " + kData + "axolotl_llama3_qlora.yml --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["format"], "axolotl");
  EXPECT_EQ(j["inputs"]["seq_len"], 4096);
  EXPECT_EQ(j["inputs"]["micro_batch"], 2);
  EXPECT_NE(r.err.find("model: base_model: NousResearch/Meta-Llama-3-8B"), std::string::npos) << r.err;

  const std::string bad = ::testing::TempDir() + "actmem_bad_" + std::to_string(getpid()) + ".yml";
  {
    FILE* f = fopen(bad.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("base_model: NousResearch/Meta-Llama-3-8B\nsequence_len: 2048\nmicro_batch_size: 1\nmagic_memory_saver: true\n", f);
    fclose(f);
  }
  Result e = run("estimate --from " + bad);
  EXPECT_EQ(e.code, 2);
  EXPECT_EQ(e.err, "actmem: magic_memory_saver: true (" + bad + ":4): unknown key \"magic_memory_saver\"; actmem cannot "
                   "tell whether it changes memory (remove it from the file, or give the job as actmem flags)\n");
  std::remove(bad.c_str());
}

TEST(FromFormatsCli, MegatronTheorySideBySide) {
  Result r = run("estimate --from " + kData + "megatron_llama3_8b.sh");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Megatron-LM's theoretical memory (theoretical_memory_usage.py): weight and "
                       "optimizer=57438.81 MB, activation=38761.87 MB, total=96200.67 MB (MB = MiB)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("why they differ:"), std::string::npos);
  Result j = run("estimate --from " + kData + "megatron_llama3_8b.sh --json");
  ASSERT_EQ(j.code, 0) << j.err;
  auto json = nlohmann::json::parse(j.out);
  EXPECT_NEAR(json["megatron_theory"]["total_mib"].get<double>(), 96200.67, 0.005);
  // With --gpu the fit verdict joins them, and the file's echo stays in the JSON.
  Result g = run("estimate --from " + kData + "megatron_llama3_8b.sh --gpu h200-141gb --json");
  ASSERT_EQ(g.code, 0) << g.err;
  auto gj = nlohmann::json::parse(g.out);
  EXPECT_EQ(gj["config"]["format"], "megatron");
  EXPECT_TRUE(gj["fit"].is_object());
  EXPECT_NEAR(gj["megatron_theory"]["total_mib"].get<double>(), 96200.67, 0.005);
  // Not for other formats.
  Result t = run("estimate --from " + kData + "torchtitan_debug_model.toml --dp 8");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(t.out.find("Megatron-LM's theoretical memory"), std::string::npos);
}

}  // namespace

// issue 20: a flag beside --from is computed with and was echoed as the file's value ("attention sdpa
// <- hf-trainer's default"): the echo, on stderr and in the JSON config.settings, shows the flag's value
// and says it came from the command line. TrainingArguments names no attention: the default is sdpa.
TEST(FromFormatsCli, CommandLineOverrideIsEchoed) {
  const std::string file = kData + "hf_training_args_genomenlp.json";
  Result r = run("estimate --from " + file + " --model gpt2 --seq-len 512 --attention eager --micro-batch 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["inputs"]["attention"], "eager");
  EXPECT_EQ(j["inputs"]["micro_batch"], 2);
  nlohmann::json attention, batch, accum;
  for (const auto& s : j["config"]["settings"]) {
    if (s["option"] == "attention") attention = s;
    if (s["option"] == "micro_batch") batch = s;
    if (s["option"] == "grad_accum") accum = s;
  }
  EXPECT_EQ(attention["value"], "eager");
  EXPECT_EQ(attention["source"], "the command line (--attention eager), over 'sdpa' <- hf-trainer's default attention: "
                                 "transformers' sdpa (not in " + file + ")");
  EXPECT_EQ(batch["value"], 2);  // a count stays a number
  EXPECT_EQ(batch["source"], "the command line (--micro-batch 2), over 16 <- per_device_train_batch_size: 16 (" + file +
                                 ":9)");
  EXPECT_EQ(accum["value"], 1);  // gradient_accumulation_steps, read (was dropped)
  EXPECT_EQ(accum["source"], "gradient_accumulation_steps: 1 (" + file + ":13)");
  EXPECT_NE(r.err.find("  --attention 'eager'  <- the command line (--attention eager), over 'sdpa' <- hf-trainer's "
                       "default attention"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("--attention 'sdpa'"), std::string::npos) << r.err;
}
