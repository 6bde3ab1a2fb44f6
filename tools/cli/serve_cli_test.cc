// `actmem serve` driven in-process through CLI11, with the real preset loader.
#include "serve_cli.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>  // getpid

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace actmem::cli {
namespace {

struct CliRun {
  int rc = 0;
  std::string out;
  std::string err;
};

CliRun run_serve(std::vector<std::string> args) {
  CLI::App app;
  auto runner = add_serve_command(app);
  args.insert(args.begin(), "serve");
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  app.parse(args);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  CliRun r;
  r.rc = runner();
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

// The contract keys, for Llama-3-8B in bf16 (131072 B of KV per token); weights 16,060,522,496 B
// of parameters and vLLM's RoPE cache of 8192·128·2 = 2,097,152 B.
TEST(ServeCli, JsonContract) {
  CliRun r = run_serve({"--model", "llama-3-8b", "--context-len", "8192", "--batch", "4", "--kv-dtype", "bf16", "--tp",
                     "1", "--block-size", "16", "--max-num-batched-tokens", "2048", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache"]["per_token_bytes"], 131072);
  EXPECT_EQ(j["kv_cache"]["total_bytes"], int64_t{4} * 8192 * 131072);
  EXPECT_EQ(j["memory"]["weights_bytes"], int64_t{16'060'522'496} + 2'097'152);
  EXPECT_GT(j["memory"]["total_bytes"].get<int64_t>(), j["memory"]["weights_bytes"].get<int64_t>());
  EXPECT_FALSE(j.contains("capacity"));
}

// vllm-project/vllm issue #12330 through the command line: 5693 blocks against the logged 5691
// (5694 before the 2 MiB RoPE cache was counted with the weights).
TEST(ServeCli, CapacityWithMeasuredAmounts) {
  CliRun r = run_serve({"--model", "llama-3-8b", "--context-len", "8192", "--gpu-memory", "39.50GiB",
                     "--gpu-memory-utilization", "0.9", "--activation-peak", "9.37GiB", "--non-torch-memory",
                     "0.10GiB", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["capacity"]["kv_blocks"], 5693);
  EXPECT_EQ(j["capacity"]["max_sequences"], 11);
  EXPECT_EQ(j["capacity"]["max_context_len"], 8192);
}

TEST(ServeCli, TableNamesEveryTerm) {
  CliRun r = run_serve({"--model", "llama-3-8b", "--context-len", "4096", "--gpu", "h100-80gb"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* s : {"weights (bf16)", "KV cache (bf16, 1 × 4096 tokens)", "profile peak", "non-torch",
                        "16,062,619,648", "max sequences of 4096 tokens", "per token"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  // --explain adds each weight tensor and formula: q_proj is a·d·h per layer, 32 × 4096 × 4096 × 2 B.
  CliRun e = run_serve({"--model", "llama-3-8b", "--context-len", "4096", "--explain"});
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_NE(e.out.find("attn.q_proj"), std::string::npos);
  EXPECT_NE(e.out.find("32 × 4096 × 4096 × 2"), std::string::npos) << e.out;
}

TEST(ServeCli, BadInputIsOneLineAndExit2) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--model", "llama-3-8b", "--context-len", "1024", "--tp", "3"},
           {"--model", "llama-3-8b", "--context-len", "1024", "--kv-dtype", "int4"},
           {"--model", "llama-3-8b", "--context-len", "1024", "--gpu", "h100"},
           {"--model", "llama-3-8b", "--context-len", "1024", "--gpu-memory", "80 parsecs"},
           {"--model", "llama-3-8b", "--context-len", "1024", "--gpu-memory", "80"},  // bytes: a forgotten unit
           {"--model", "llama-3-8b", "--context-len", "1024", "--block-size", "9223372036854775807"},
           {"--model", "llama-3-8b", "--context-len", "1024", "--gpu-memory-utilization", "1.5"},
           {"--model", "llama-3-8b", "--context-len", "1024", "--quant-group-size", "7"},
           {"--model", "gpt2", "--gpu", "h100-80gb", "--context-len", "2048"},  // past the learned positions
           {"--model", "llama-3-8b", "--gpu", "h100-80gb", "--context-len", "9223372036854775807"},
       }) {
    CliRun r = run_serve(args);
    EXPECT_EQ(r.rc, 2) << args[5];
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(args[4]), std::string::npos) << r.err;
  }
}

// `serve --generate`: HF generate() (serve/generate.h); numbers as generate_test.cc derives them.
TEST(ServeCli, GenerateJson) {
  CliRun r = run_serve({"--model", "llama-3-8b", "--generate", "--prompt-len", "4096", "--new-tokens", "512",
                        "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mode"], "generate");
  EXPECT_EQ(j["final_cache_tokens"], 4607);
  EXPECT_EQ(j["memory"]["weights_bytes"], int64_t{16'060'522'496});
  EXPECT_EQ(j["memory"]["peak_bytes"], int64_t{17'016'823'808});  // sdpa by default: the MLP block wins
  EXPECT_EQ(j["peak_phase"], "prefill");
  CliRun eager = run_serve({"--model", "llama-3-8b", "--generate", "--prompt-len", "4096", "--new-tokens", "512",
                            "--attention", "eager", "--json"});
  ASSERT_EQ(eager.rc, 0) << eager.err;
  EXPECT_EQ(nlohmann::json::parse(eager.out)["memory"]["peak_bytes"], int64_t{21'043'355'648});
  CliRun table = run_serve({"--model", "llama-3-8b", "--generate", "--prompt-len", "4096", "--new-tokens", "512"});
  ASSERT_EQ(table.rc, 0) << table.err;
  EXPECT_NE(table.out.find("17,016,823,808"), std::string::npos) << table.out;
}

TEST(ServeCli, GenerateBadInputIsOneLineAndExit2) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--model", "llama-3-8b", "--generate", "--new-tokens", "8000", "--prompt-len", "1000"},
           {"--model", "llama-3-8b", "--generate", "--new-tokens", "0", "--prompt-len", "1000"},
           {"--model", "llama-3-8b", "--generate", "--prompt-len", "0", "--new-tokens", "10"},
           {"--model", "llama-3-8b", "--generate", "--prompt-len", "99999999999", "--new-tokens", "10"},
           {"--model", "llama-3-8b", "--generate", "--attention", "paged", "--prompt-len", "10"},
           {"--model", "llama-3-8b", "--generate", "--context-len", "100", "--prompt-len", "10"},
           {"--model", "llama-3-8b", "--json", "--new-tokens", "10", "--context-len", "100"},  // no --generate
       }) {
    CliRun r = run_serve(args);
    EXPECT_EQ(r.rc, 2) << args[3];
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(args[3]), std::string::npos) << r.err;
  }
}

// `serve --from FILE`: a `vllm serve` line (serve/vllm_command.h) read, echoed on stderr as
// `estimate --from` echoes its file, and served. Qwen2-0.5B's config.json (tests/data/configs)
// gives max_position_embeddings 131072, vLLM's max_model_len when the line has none.
std::string write_line(const std::string& tag, const std::string& text) {
  const std::string path = ::testing::TempDir() + "actmem_vllm_" + tag + "_" + std::to_string(getpid()) + ".sh";
  std::ofstream(path) << text;
  return path;
}

const std::string kQwenConfig = std::string(ACTMEM_SOURCE_DIR) + "/tests/data/configs/qwen2-0.5b.json";

TEST(ServeCli, FromReadsAVllmServeLine) {
  const std::string path = write_line("plain", "vllm serve " + kQwenConfig +
                                                   " --tensor-parallel-size 2 --max-model-len 4k --enable-lora \\\n"
                                                   "  --port 8000\n");
  CliRun r = run_serve({"--from", path, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["context_len"], 4000);
  EXPECT_EQ(j["config"]["format"], "vllm");
  EXPECT_NE(r.err.find("actmem: read from " + path + " (vllm):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  --model " + kQwenConfig + "  <- vllm serve " + kQwenConfig + " (" + path + ":1)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  --tp 2  <- --tensor-parallel-size 2 (" + path + ":1)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  no memory effect: --port (" + path + ":2)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("actmem: warning: --enable-lora (" + path + ":1): not modelled"), std::string::npos) << r.err;
  std::remove(path.c_str());
}

TEST(ServeCli, FromFlagsGivenWinAndTheModelGivesTheContext) {
  const std::string path = write_line("over", "vllm serve " + kQwenConfig + " -tp 2 --max-num-seqs 64\n");
  CliRun r = run_serve({"--from", path, "--tp", "1", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["context_len"], 131072);  // no --max-model-len: the model's max_position_embeddings
  EXPECT_EQ(j["vllm"]["max_num_seqs"], 64);
  EXPECT_NE(r.err.find("  --tp 1  <- the command line (--tp 1), over 2 <- -tp 2 (" + path + ":1)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("  --context-len 131072  <- the model's max_model_len"), std::string::npos) << r.err;
  CliRun ctx = run_serve({"--from", path, "--context-len", "2048", "--json"});
  ASSERT_EQ(ctx.rc, 0) << ctx.err;
  EXPECT_EQ(nlohmann::json::parse(ctx.out)["context_len"], 2048);
  std::remove(path.c_str());
}

TEST(ServeCli, FromErrorsAreOneLineAndExit2) {
  const std::string typo = write_line("typo", "vllm serve " + kQwenConfig + " --tensor-paralel-size 2\n");
  const std::string hub = write_line("hub", "vllm serve meta-llama/Llama-3.1-8B-Instruct\n");
  for (const auto& [args, part] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--from", typo}, "did you mean --tensor-parallel-size?"},
           {{"--from", hub}, "Hugging Face hub id"},
           {{"--from", hub + ".absent"}, "cannot read the file"},
           {{"--from", typo, "--generate", "--prompt-len", "10", "--new-tokens", "10"}, "--from reads a `vllm serve`"},
           {{"--context-len", "100"}, "--model is required"},
       }) {
    CliRun r = run_serve(args);
    EXPECT_EQ(r.rc, 2) << part;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  }
  // --model beside --from: the hub id on the line is not needed.
  CliRun given = run_serve({"--from", hub, "--model", kQwenConfig, "--context-len", "1024"});
  EXPECT_EQ(given.rc, 0) << given.err;
  std::remove(typo.c_str());
  std::remove(hub.c_str());
}

}  // namespace
}  // namespace actmem::cli
