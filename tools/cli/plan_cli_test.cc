// End-to-end tests of `actmem plan` and `actmem estimate --gpu`: real command lines, exit codes,
// and the plan's rows reproduced byte for byte by the `actmem estimate` flags it prints.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/library.h"  // machine_options()
#include "cli_test_run.h"

namespace {

using actmem::testing_cli::Result;
using actmem::testing_cli::one_line;
using actmem::testing_cli::run;

constexpr const char* kPlan = "plan --model llama-3-8b --gpus 16 --gpu h100-80gb --seq-len 8192 --global-batch 64";

TEST(PlanCli, JsonRowsAreReproducedByEstimate) {
  Result r = run(std::string(kPlan) + " --top 5 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& p = j["plan"];
  EXPECT_GT(p["searched"].get<int64_t>(), 0);
  EXPECT_GT(p["fitting"].get<int64_t>(), 0);
  EXPECT_GE(p["search_ms"].get<double>(), 0.0);
  ASSERT_EQ(p["layouts"].size(), 5u);
  double previous = 0;
  for (const auto& row : p["layouts"]) {
    for (const char* key : {"flags", "peak_bytes", "step_time_s", "tokens_per_s_per_gpu", "mfu", "tp", "sp", "pp",
                            "vpp", "cp", "ep", "dp", "zero", "recompute", "micro_batch", "num_micro_batches"})
      EXPECT_TRUE(row.contains(key)) << key;
    EXPECT_GE(row["step_time_s"].get<double>(), previous);
    previous = row["step_time_s"].get<double>();
    EXPECT_EQ(row["tp"].get<int64_t>() * row["pp"].get<int64_t>() * row["cp"].get<int64_t>() * row["dp"].get<int64_t>(),
              16);
    // The flags are an `actmem estimate` command line: it gives the same bytes and says FITS.
    const std::string flags = row["flags"].get<std::string>();
    ASSERT_EQ(flags.rfind("--model llama-3-8b --framework megatron ", 0), 0u) << flags;
    Result e = run("estimate " + flags + " --json");
    ASSERT_EQ(e.code, 0) << flags << "\n" << e.err;
    const auto est = nlohmann::json::parse(e.out);
    EXPECT_EQ(est["memory"]["total_bytes"].get<int64_t>(), row["peak_bytes"].get<int64_t>()) << flags;
    EXPECT_TRUE(est["fit"]["fits"].get<bool>()) << flags;
    EXPECT_EQ(est["fit"]["needed_bytes"].get<int64_t>(), row["needed_bytes"].get<int64_t>()) << flags;
  }
}

// The plan's workload is the option table's (every workload option of `estimate`): a LoRA
// fine-tune under HF with sdpa is planned, and each row's command repeats exactly the options that
// differ from estimate's defaults, so it reproduces the row's bytes.
TEST(PlanCli, WorkloadOptionsComeFromTheTable) {
  Result r = run(std::string(kPlan) + " --framework hf --attention sdpa --lora-rank 16 --lora-targets all --top 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out)["plan"]["layouts"];
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    const std::string flags = row["flags"].get<std::string>();
    ASSERT_EQ(flags.rfind("--model llama-3-8b --attention sdpa --lora-rank 16 --lora-targets q,k,v,o,gate,up,down ", 0),
              0u)
        << flags;
    Result e = run("estimate " + flags + " --json");
    ASSERT_EQ(e.code, 0) << flags << "\n" << e.err;
    EXPECT_EQ(nlohmann::json::parse(e.out)["memory"]["total_bytes"].get<int64_t>(), row["peak_bytes"].get<int64_t>());
  }
  // Megatron's fp32 gradients follow from the framework: not repeated as --grad-dtype.
  Result m = run(std::string(kPlan) + " --top 1 --json");
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_EQ(nlohmann::json::parse(m.out)["plan"]["layouts"][0]["flags"].get<std::string>().find("--grad-dtype"),
            std::string::npos);
  Result from = run("plan --from \"--model llama-3-8b --gpu h100-80gb\" --framework hf");
  EXPECT_EQ(from.code, 2);
  EXPECT_EQ(from.err, "actmem: --framework with --from: give it inside --from's flags, which state the job\n");
}

TEST(PlanCli, TableHasTheSearchLineAndExplain) {
  Result r = run(std::string(kPlan) + " --top 3 --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(" fit (+"), std::string::npos) << r.out;  // + the fewest-recomputed-layers evaluations
  EXPECT_NE(r.out.find(", searched in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1: actmem estimate --model llama-3-8b --framework megatron"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compute: (3·forward + recompute FLOPs)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MFU"), std::string::npos);
}

TEST(PlanCli, GlobalBatchInTokens) {
  // 524,288 tokens at 8,192 per sequence = 64 sequences: the same search as --global-batch 64.
  Result tokens = run("plan --model llama-3-8b --gpus 16 --gpu h100-80gb --seq-len 8192 --global-batch-tokens 524288 "
                      "--top 1 --json");
  ASSERT_EQ(tokens.code, 0) << tokens.err;
  const auto j = nlohmann::json::parse(tokens.out)["plan"];
  EXPECT_EQ(j["global_batch"].get<int64_t>(), 64);
  const auto& l = j["layouts"][0];
  EXPECT_EQ(l["dp"].get<int64_t>() * l["micro_batch"].get<int64_t>() * l["num_micro_batches"].get<int64_t>(), 64);
  Result bad = run("plan --model llama-3-8b --gpus 16 --gpu h100-80gb --seq-len 8192 --global-batch-tokens 1000");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("must be a multiple of --seq-len 8192"), std::string::npos) << bad.err;
}

TEST(PlanCli, NothingFitsSaysTheClosestAndExits2) {
  Result r = run("plan --model llama-3.1-405b --gpus 8 --gpu a100-40gb --global-batch 8");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out.rfind("nothing fits; the closest is actmem estimate --model llama-3.1-405b", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("GiB of 39.59 GiB)"), std::string::npos) << r.out;
}

// Every layout refused: the plan says why the engine refused the first one (LoRA is modelled for the
// hf rules only, as PEFT applies it), in the CLI's spelling; the JSON has the option and message.
TEST(PlanCli, NoValidLayoutSaysWhy) {
  Result r = run(std::string(kPlan) + " --lora-rank 16");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(", 0 valid, 0 fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; the first was refused:\n--framework megatron: LoRA is modelled as PEFT applies it to HF "
                       "models; use --framework hf\n"),
            std::string::npos)
      << r.out;
  Result j = run(std::string(kPlan) + " --lora-rank 16 --json");
  EXPECT_EQ(j.code, 2);
  const auto plan = nlohmann::json::parse(j.out)["plan"];
  EXPECT_EQ(plan["valid"].get<int64_t>(), 0);
  EXPECT_EQ(plan["refusal"]["option"], "framework");
  EXPECT_EQ(plan["refusal"]["message"].get<std::string>().rfind("@framework megatron: LoRA", 0), 0u) << plan;
}

// The plan's own flags are the library's plan_options() table: each one there, with its help and
// its default, and a bad value refused in the table's words.
TEST(PlanCli, PlanFlagsComeFromTheTable) {
  Result help = run("plan --help");
  ASSERT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--seq-len INT=8192"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--max-pp INT=16384"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--top INT=10"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--recompute TEXT"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--offload-optimizer         pin optimizer offload on"), std::string::npos) << help.out;
  Result bad = run(std::string(kPlan) + " --max-tp two");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "actmem: --max-tp 'two': expected a whole number\n");
}

// The machine's flags (estimate --gpu ..., plan --gpu ...) are the library's machine_options()
// rows: every row is a flag of both commands, and a bad value is refused in the table's words.
TEST(PlanCli, MachineFlagsComeFromTheTable) {
  const Result estimate = run("estimate --help"), plan = run("plan --help");
  ASSERT_EQ(estimate.code, 0);
  ASSERT_EQ(plan.code, 0);
  for (const auto& info : actmem::machine_options()) {
    std::string flag = "--" + std::string(info.name);
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_NE(estimate.out.find("  " + flag + " "), std::string::npos) << flag;
    EXPECT_NE(plan.out.find("  " + flag + " "), std::string::npos) << flag;
  }
  EXPECT_NE(estimate.out.find("--gpus-per-node INT=8 "), std::string::npos) << estimate.out;  // MachineOptions{}
  Result bad = run("estimate --model llama-3-8b --gpu h100-80gb --compute-efficiency fast");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "actmem: --compute-efficiency 'fast': expected a number\n");
  Result twice = run(std::string(kPlan) + " --gpu a100-80gb");
  EXPECT_EQ(twice.code, 2);
  EXPECT_EQ(twice.err, "actmem: --gpu given twice (h100-80gb and a100-80gb); give it once\n");
}


// A row's command repeats the machine the plan was fitted on, allowances included: with 1 GiB
// of CUDA context and 10% fragmentation the needed bytes are the peak's 1.10 plus 1 GiB plus NCCL,
// and `actmem estimate` with the row's flags gives the same verdict (before, only --gpu came back,
// so the row's FITS could not be reproduced).
TEST(PlanCli, RowsRepeatTheMachineOptions) {
  Result r = run(std::string(kPlan) + " --cuda-context 1GiB --fragmentation 0.1 --top 3 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["plan"]["layouts"].size(), 3u);
  for (const auto& row : j["plan"]["layouts"]) {
    const std::string flags = row["flags"].get<std::string>();
    EXPECT_NE(flags.find(" --gpu h100-80gb --cuda-context 1GiB --fragmentation 0.1"), std::string::npos) << flags;
    EXPECT_EQ(flags.find("--gpus-per-node"), std::string::npos) << flags;  // still the default: not repeated
    Result e = run("estimate " + flags + " --json");
    ASSERT_EQ(e.code, 0) << flags << "\n" << e.err;
    const auto est = nlohmann::json::parse(e.out);
    EXPECT_EQ(est["fit"]["needed_bytes"].get<int64_t>(), row["needed_bytes"].get<int64_t>()) << flags;
    const int64_t peak = row["peak_bytes"].get<int64_t>();
    EXPECT_GE(row["needed_bytes"].get<int64_t>(), peak + peak / 10 + (int64_t{1} << 30)) << flags;
  }
}
TEST(PlanCli, BadInputIsOneLineAndExit2) {
  for (const char* args :
       {"plan --model llama-3-8b --gpus 16 --gpu h100-8gb --global-batch 64",   // unknown GPU
        "plan --model llama-3-8b --gpus 16 --gpu h100-80gb --global-batch 64 --tp 3",  // pin not dividing
        "plan --model llama-3-8b --gpus 16 --gpu h100-80gb",                      // no batch
        "plan --model llama-3-8b --gpus 16 --global-batch 64",                    // no GPU
        "plan --model llama-3-8b --gpus 16 --gpu h100-80gb --global-batch 64 --recompute some",
        "estimate --model llama-3-8b --gpu h100-80gb --fragmentation 1.5"}) {
    Result r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_TRUE(one_line(r.err)) << args << ": " << r.err;
  }
  Result r = run("plan --model llama-3-8b --gpus 16 --gpu h100-80gb --global-batch 64 --tp 3");
  EXPECT_NE(r.err.find("--tp 3 does not divide --gpus 16"), std::string::npos) << r.err;
}

TEST(EstimateFit, VerdictOnlyWithAGpuAndWhatToChange) {
  // Without --gpu the JSON has no fit (the recorded golden outputs stay identical).
  Result plain = run("estimate --model llama-3-8b --json");
  ASSERT_EQ(plain.code, 0);
  EXPECT_FALSE(nlohmann::json::parse(plain.out).contains("fit"));

  // Llama-3-8B on 8 GPUs, ZeRO 0, no recomputation: 16 bytes/param (128 GB) cannot fit an H100.
  Result r = run("estimate --model llama-3-8b --framework megatron --dp 8 --gpu h100-80gb --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& fit = j["fit"];
  EXPECT_FALSE(fit["fits"].get<bool>());
  EXPECT_EQ(fit["overflow_stage"].get<int64_t>(), 0);
  EXPECT_EQ(fit["capacity_bytes"].get<int64_t>(), 85045477376);  // the catalog's h100-80gb
  EXPECT_EQ(fit["headroom_bytes"].get<int64_t>(),
            fit["capacity_bytes"].get<int64_t>() - j["memory"]["total_bytes"].get<int64_t>() -
                fit["allowance_bytes"].get<int64_t>());
  ASSERT_FALSE(fit["changes"].empty());
  EXPECT_TRUE(fit["changes"][0]["fits"].get<bool>());

  Result table = run("estimate --model llama-3-8b --framework megatron --dp 8 --gpu h100-80gb");
  EXPECT_NE(table.out.find("DOES NOT FIT: pipeline stage 0 needs"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("What to change"), std::string::npos);
  Result fits = run("estimate --model llama-3-8b --framework megatron --dp 8 --zero 1 --recompute full --gpu h100-80gb");
  EXPECT_NE(fits.out.find("\nFITS: "), std::string::npos) << fits.out;
  // --gpu-memory overrides the capacity; the allowances are flags.
  Result own = run("estimate --model llama-3-8b --dp 8 --zero 3 --gpu-memory 40GiB --cuda-context 1GiB "
                   "--nccl-per-group 0 --fragmentation 0 --json");
  ASSERT_EQ(own.code, 0) << own.err;
  const auto o = nlohmann::json::parse(own.out)["fit"];
  EXPECT_EQ(o["capacity_bytes"].get<int64_t>(), int64_t{40} << 30);
  EXPECT_EQ(o["allowance_bytes"].get<int64_t>(), int64_t{1} << 30);
}

TEST(PlanCli, FromGivesChangesAndSolvers) {
  Result r = run("plan --from \"--model llama-3-8b --framework megatron --dp 8 --seq-len 8192 --gpu h100-80gb\"");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("What to change"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest micro-batch that fits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("longest sequence that fits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fewest layers per chunk to recompute in full"), std::string::npos) << r.out;
}

}  // namespace
