// `vllm serve` command lines read as vLLM v0.19.0 parses them. Each expected value names its
// source: vLLM's parsing rules as validation/notes/vllm_019_arguments.md records them (AP =
// vllm/utils/argparse_utils.py, AU = vllm/engine/arg_utils.py @8b141ed8c), the table
// src/serve/vllm_arguments.inc, or the v0.19.0 runs of ../shared/data/vllm-0.19/vllm019_runs.json.
#include "serve/vllm_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/presets.h"
#include "serve/serve_render.h"

namespace actmem {
namespace {

const std::string kRepo = ACTMEM_SOURCE_DIR;
const std::string kQwen = "tests/data/configs/qwen2-0.5b.json";  // relative to the repository
const std::string kRuns = kRepo + "/../shared/data/vllm-0.19/vllm019_runs.json";

VllmCommand read_ok(const std::string& text, std::string_view name = "") {
  auto c = read_vllm_command(text, kRepo, name);
  EXPECT_TRUE(c) << c.error().message;
  return c ? *c : VllmCommand{};
}

std::string read_error(const std::string& text) {
  auto c = read_vllm_command(text, kRepo);
  EXPECT_FALSE(c) << "read without an error: " << text;
  return c ? std::string() : c.error().message;
}

const ConfigSetting* find(const VllmCommand& c, std::string_view option) {
  for (const auto& s : c.settings)
    if (s.option == option) return &s;
  return nullptr;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

bool mentions(const std::vector<std::string>& lines, std::string_view part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

// The plain form: `vllm serve MODEL --flag value` (entrypoints/cli/serve.py:45: the positional
// model). Unset --max-model-len: vLLM derives it from the model (config/model.py:182).
TEST(VllmCommand, PlainLine) {
  const auto c = read_ok("vllm serve " + kQwen + " --tensor-parallel-size 2 --gpu-memory-utilization 0.95\n");
  EXPECT_EQ(c.entrypoint, "vllm serve");
  EXPECT_EQ(c.model, kQwen);
  EXPECT_EQ(c.model_config, kRepo + "/" + kQwen);
  EXPECT_EQ(c.model_source, "vllm serve " + kQwen + " (line 1)");
  EXPECT_EQ(c.request.tp, 2);
  EXPECT_DOUBLE_EQ(c.request.gpu_memory_utilization, 0.95);
  EXPECT_EQ(c.request.vllm_version, "0.19");
  EXPECT_EQ(c.request.context_len, 0);
  EXPECT_TRUE(c.context_from_model);
  ASSERT_NE(find(c, "tp"), nullptr);
  EXPECT_EQ(find(c, "tp")->source, "--tensor-parallel-size 2 (line 1)");
  EXPECT_TRUE(c.warnings.empty()) << joined(c.warnings);
}

// A launch script: comments, `export`, shell variables, KEY=VALUE prefixes and backslash
// continuations (shell_words.h). The notes' table of memory-relevant variables keeps
// VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (1 deducts CUDA graphs: not modelled) and
// VLLM_USE_FLASHINFER_SAMPLER; CUDA_VISIBLE_DEVICES changes no memory and is not kept.
TEST(VllmCommand, ScriptWithContinuationsAndEnvironment) {
  const std::string script =
      "#!/bin/bash\n"
      "# serve Qwen on two GPUs\n"
      "export VLLM_USE_FLASHINFER_SAMPLER=1\n"
      "MODEL=" + kQwen + "\n"
      "CUDA_VISIBLE_DEVICES=0,1 VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 vllm serve $MODEL \\\n"
      "    --tensor-parallel-size 2 \\\n"
      "    --max-num-seqs 128  # fewer sequences\n"
      "echo done\n";
  const auto c = read_ok(script, "serve.sh");
  EXPECT_EQ(c.model, kQwen);
  EXPECT_EQ(c.model_source, "vllm serve " + kQwen + " (serve.sh:5)");  // the command's line, not MODEL='s
  EXPECT_EQ(c.request.tp, 2);
  EXPECT_EQ(c.request.max_num_seqs, 128);
  EXPECT_EQ(find(c, "max_num_seqs")->source, "--max-num-seqs 128 (serve.sh:7)");
  ASSERT_EQ(c.env.size(), 2u);
  EXPECT_EQ(c.env[0].name, "VLLM_USE_FLASHINFER_SAMPLER");
  EXPECT_EQ(c.env[0].source, "VLLM_USE_FLASHINFER_SAMPLER=1 (serve.sh:3)");
  EXPECT_EQ(c.env[1].name, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS");
  EXPECT_TRUE(mentions(c.warnings, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (serve.sh:5): not modelled"));
  EXPECT_TRUE(mentions(c.warnings, "VLLM_USE_FLASHINFER_SAMPLER=1 (serve.sh:3): not modelled"));
}

// AP:235-269: '_' becomes '-' in a long name before '='; `--flag=value` is argparse's own. AU:2320-2382:
// 16k is 16,000 (k: powers of 1000). --dtype half is fp16, --kv-cache-dtype fp8 one byte.
TEST(VllmCommand, EqualsFormsAndUnderscores) {
  const auto c = read_ok("vllm serve " + kQwen +
                         " --tensor_parallel_size=4 --max_num_batched_tokens=16k --kv-cache-dtype=fp8 --dtype=half "
                         "--block_size 32");
  EXPECT_EQ(c.request.tp, 4);
  EXPECT_EQ(c.request.max_num_batched_tokens, 16000);
  EXPECT_EQ(c.request.kv_dtype, "fp8");
  EXPECT_EQ(c.request.dtype, "fp16");
  EXPECT_EQ(c.request.block_size, 32);
  EXPECT_EQ(find(c, "tp")->source, "--tensor-parallel-size 4 (line 1)");  // as normalised
}

// argparse's allow_abbrev (kept by FlexibleArgumentParser, AP:62-68): a unique prefix is the option
// (--max-num-seq, --gpu-mem, -t for -tp); -qfp8 is -q with fp8 attached; an ambiguous prefix
// (--max) is refused, naming the candidates.
TEST(VllmCommand, AbbreviationsAndShortAliases) {
  const auto c = read_ok("vllm serve " + kQwen + " --max-num-seq 64 --gpu-mem 0.8 -t 2 -pp 2 -dp 2 -qfp8");
  EXPECT_EQ(c.request.max_num_seqs, 64);
  EXPECT_DOUBLE_EQ(c.request.gpu_memory_utilization, 0.8);
  EXPECT_EQ(c.request.tp, 2);
  EXPECT_EQ(c.request.pp, 2);
  EXPECT_EQ(c.request.dp, 2);
  EXPECT_EQ(c.request.weight_dtype, "fp8");
  EXPECT_EQ(find(c, "weight_dtype")->source, "-q fp8 (line 1)");
  const std::string e = read_error("vllm serve " + kQwen + " --max 4");
  EXPECT_NE(e.find("--max (line 1): ambiguous"), std::string::npos) << e;
  EXPECT_NE(e.find("--max-model-len"), std::string::npos) << e;
  EXPECT_NE(e.find("--max-num-seqs"), std::string::npos) << e;
}

// An argument vLLM 0.19 does not have: an error with the table's closest spelling. `--tp` is one:
// vLLM's alias is -tp, and no long option starts with --tp (argparse refuses it).
TEST(VllmCommand, UnknownArgumentSaysDidYouMean) {
  EXPECT_NE(read_error("vllm serve " + kQwen + " --tp 2").find("(did you mean -tp?)"), std::string::npos);
  const std::string e = read_error("vllm serve " + kQwen + " --tensor-paralel-size 2");
  EXPECT_NE(e.find("--tensor-paralel-size (line 1): not an argument of vLLM 0.19"), std::string::npos) << e;
  EXPECT_NE(e.find("(did you mean --tensor-parallel-size?)"), std::string::npos) << e;
}

// vllm_arguments.inc: --enable-lora and --max-loras are kNotModelled (their why is the warning),
// --port and --api-key kNoEffect (listed without their values: a key is a secret).
TEST(VllmCommand, NotModelledWarnsAndNoEffectIsListed) {
  const auto c = read_ok("vllm serve " + kQwen + " --enable-lora --max-loras 4 --port 8000 --api-key sk-secret");
  EXPECT_TRUE(mentions(c.warnings, "--enable-lora (line 1): not modelled: LoRA adapter slots")) << joined(c.warnings);
  EXPECT_TRUE(mentions(c.warnings, "--max-loras 4 (line 1): not modelled:"));
  EXPECT_EQ(c.ignored, (std::vector<std::string>{"--port (line 1)", "--api-key (line 1)"}));
  EXPECT_FALSE(mentions(c.warnings, "sk-secret"));
}

// entrypoints/openai/api_server.py:712-724: the same parser, no subcommand, so the model is --model;
// `python -m vllm.entrypoints.cli.main serve` is `vllm serve`.
TEST(VllmCommand, ApiServerAndCliMainForms) {
  const auto api = read_ok("python3 -m vllm.entrypoints.openai.api_server --model " + kQwen + " --port 8000 -tp 2");
  EXPECT_EQ(api.entrypoint, "python3 -m vllm.entrypoints.openai.api_server");
  EXPECT_EQ(api.model, kQwen);
  EXPECT_EQ(api.model_source, "--model " + kQwen + " (line 1)");
  EXPECT_EQ(api.request.tp, 2);
  const auto main = read_ok("python -m vllm.entrypoints.cli.main serve " + kQwen + " -tp 4");
  EXPECT_EQ(main.entrypoint, "python -m vllm.entrypoints.cli.main serve");
  EXPECT_EQ(main.request.tp, 4);
  // AP:185-230: under serve the first --model moves to the positional slot; a second model is refused.
  const auto moved = read_ok("vllm serve --model " + kQwen + " -tp 2");
  EXPECT_EQ(moved.model, kQwen);
  EXPECT_NE(read_error("vllm serve " + kQwen + " --model " + kQwen).find("a second positional argument"),
            std::string::npos);
}

// AU:320-325, 2320-2382: --max-model-len takes 32k (32,000), 32K (32,768), and -1/auto (fit to memory:
// not modelled, the model's own length is used).
TEST(VllmCommand, MaxModelLenForms) {
  EXPECT_EQ(read_ok("vllm serve " + kQwen + " --max-model-len 32k").request.context_len, 32000);
  EXPECT_EQ(read_ok("vllm serve " + kQwen + " --max-model-len 32K").request.context_len, 32768);
  EXPECT_EQ(read_ok("vllm serve " + kQwen + " --max-model-len 25.6k").request.context_len, 25600);
  const auto fit = read_ok("vllm serve " + kQwen + " --max-model-len -1");
  EXPECT_TRUE(fit.context_from_model);
  EXPECT_TRUE(mentions(fit.warnings, "--max-model-len -1 (line 1): not modelled: vLLM fits max_model_len"));
  EXPECT_TRUE(read_ok("vllm serve " + kQwen + " --max-model-len auto").context_from_model);
  EXPECT_NE(read_error("vllm serve " + kQwen + " --max-model-len 1.5K").find("expected a whole number"), std::string::npos);
}

// argparse: the last of a repeated option wins, --x then --no-x is --no-x; flags take no value, so
// `--enforce-eager true` leaves `true` a second positional (unrecognized arguments).
TEST(VllmCommand, LastOneWinsAndFlags) {
  const auto c = read_ok("vllm serve " + kQwen +
                         " -tp 2 --tensor-parallel-size 4 --disable-hybrid-kv-cache-manager --enforce-eager "
                         "--enable-prefix-caching --no-enable-prefix-caching -O3 -cc.cudagraph_mode=FULL");
  EXPECT_EQ(c.request.tp, 4);
  EXPECT_TRUE(c.request.disable_hybrid_kv_cache_manager);
  EXPECT_TRUE(mentions(c.notes, "--no-enable-prefix-caching (line 1): read"));
  EXPECT_FALSE(mentions(c.notes, "--enable-prefix-caching (line 1)"));
  EXPECT_TRUE(mentions(c.notes, "--enforce-eager (line 1), -cc.cudagraph_mode=FULL (line 1): read; CUDA graphs"));
  EXPECT_TRUE(mentions(c.warnings, "--optimization-level 3 (line 1): not modelled"));  // AP: -O3 is -O 3
  EXPECT_NE(read_error("vllm serve " + kQwen + " --enforce-eager true").find("second positional"), std::string::npos);
  EXPECT_NE(read_error("vllm serve " + kQwen + " --enforce-eager=1").find("takes no value"), std::string::npos);
}

// A quoted JSON value is one word; the command ends at a redirection or `&`; nargs="+" lists take
// the words up to the next option (so `--served-model-name a b MODEL` swallows MODEL, as in vLLM).
// The read arguments actmem cannot honour warn: --cpu-offload-gb above 0, a --quantization method
// other than fp8 on an unquantized checkpoint. --kv-cache-memory (a unique prefix of
// --kv-cache-memory-bytes) is read.
TEST(VllmCommand, ValuesListsAndReadButNotModelled) {
  const auto c = read_ok("vllm serve " + kQwen +
                         " --compilation-config '{\"cudagraph_mode\": \"FULL\"}' --served-model-name a b "
                         "--kv-cache-memory 10G --cpu-offload-gb 0 --quantization awq --kv-cache-dtype fp8_ds_mla "
                         "--config=extra.yaml > serve.log 2>&1 &");
  EXPECT_TRUE(mentions(c.notes, "--compilation-config {\"cudagraph_mode\": \"FULL\"} (line 1): read; CUDA graphs"))
      << joined(c.notes);
  EXPECT_TRUE(mentions(c.ignored, "--served-model-name (line 1)"));
  EXPECT_TRUE(mentions(c.ignored, "--cpu-offload-gb (line 1)"));
  EXPECT_EQ(c.request.kv_cache_memory, "10737418240");
  EXPECT_TRUE(mentions(c.warnings, "--quantization awq (line 1): not modelled"));
  EXPECT_TRUE(mentions(c.warnings, "--kv-cache-dtype fp8_ds_mla (line 1): not modelled"));
  EXPECT_TRUE(mentions(c.warnings, "--config extra.yaml (line 1): vLLM reads a config file only as the two words"));
  EXPECT_EQ(c.request.kv_dtype, "auto");
  EXPECT_EQ(c.request.weight_dtype, "auto");
  EXPECT_TRUE(mentions(read_ok("vllm serve " + kQwen + " --cpu-offload-gb 4").warnings, "--cpu-offload-gb 4 (line 1): not modelled"));
  const std::string swallowed = read_error("vllm serve --served-model-name a b " + kQwen);
  EXPECT_NE(swallowed.find("no model on the line"), std::string::npos) << swallowed;
}

// A hub id is not a file: actmem downloads nothing, so it asks for the config.json; with a model
// of the front end's own (--model beside --from) the line's is not needed.
TEST(VllmCommand, HubIdAsksForTheConfigPath) {
  const std::string e = read_error("vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2");
  EXPECT_NE(e.find("meta-llama/Llama-3.1-8B-Instruct is a Hugging Face hub id"), std::string::npos) << e;
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  auto given = read_vllm_command("vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2", kRepo, "", true);
  ASSERT_TRUE(given) << given.error().message;
  EXPECT_EQ(given->model_config, "");
  EXPECT_EQ(given->request.tp, 2);
}

// A folder is read as vLLM reads a local model: its config.json.
TEST(VllmCommand, FolderWithConfigJson) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "actmem_vllm_model";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kRepo + "/" + kQwen, dir / "config.json", std::filesystem::copy_options::overwrite_existing);
  const auto c = read_ok("vllm serve " + dir.string());
  EXPECT_EQ(c.model_config, (dir / "config.json").string());
  EXPECT_NE(read_error("vllm serve tests/data").find("has no config.json"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Flags beside --from (keywords beside from_config=) win, and the echo says over what.
TEST(VllmCommand, OverridesWinAndSaySo) {
  auto c = read_ok("vllm serve " + kQwen + " --tensor-parallel-size 2");
  ASSERT_TRUE(apply_vllm_overrides(c, {{"tp", int64_t{4}, "--tp 4"}, {"context_len", int64_t{4096}, "--context-len 4096"}},
                                   "the command line"));
  EXPECT_EQ(c.request.tp, 4);
  EXPECT_EQ(c.request.context_len, 4096);
  EXPECT_FALSE(c.context_from_model);
  EXPECT_EQ(std::get<int64_t>(find(c, "tp")->value), 4);
  EXPECT_EQ(find(c, "tp")->source, "the command line (--tp 4), over 2 <- --tensor-parallel-size 2 (line 1)");
  auto bad = apply_vllm_overrides(c, {{"tp", std::string("two"), "tp='two'"}}, "the keywords");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message.rfind("the keywords (tp='two'): ", 0), 0u) << bad.error().message;
}

TEST(VllmCommand, OneCommandPerFile) {
  EXPECT_NE(read_error("echo hello\n").find("no vLLM command found"), std::string::npos);
  EXPECT_NE(read_error("vllm serve " + kQwen + " &\nvllm serve " + kQwen + "\n").find("a second vLLM command"),
            std::string::npos);
}

// --kv-cache-memory is a unique prefix of --kv-cache-memory-bytes (argparse abbreviations), read
// as vLLM's human_readable_int: 40G is 40·1024³ bytes (engine/arg_utils.py:354-364).
TEST(VllmCommand, KvCacheMemoryBytes) {
  const auto c = read_ok("vllm serve tests/data/configs/qwen2-0.5b.json --kv-cache-memory 40G");
  EXPECT_EQ(c.request.kv_cache_memory, std::to_string(int64_t{40} << 30));
}

// `--config FILE` (vllm/utils/argparse_utils.py:443-590 @8b141ed8c): the YAML's keys become
// arguments ahead of the line's own, which win; true is a flag, false nothing, a mapping JSON.
TEST(VllmCommand, ConfigYamlArguments) {
  const std::string dir = ::testing::TempDir();
  const std::string yaml = dir + "/serve_args.yaml";
  {
    std::ofstream f(yaml);
    f << "tensor-parallel-size: 2\nmax_model_len: 4096\nenable-prefix-caching: false\n"
         "compilation-config:\n  cudagraph_mode: FULL\ngpu-memory-utilization: 0.85\n";
  }
  const auto c = read_ok("vllm serve " + kQwen + " --config " + yaml + " --max-model-len 8192", "serve.sh");
  EXPECT_EQ(c.request.tp, 2);
  EXPECT_EQ(c.request.context_len, 8192);  // the line wins over the YAML's 4096
  EXPECT_DOUBLE_EQ(c.request.gpu_memory_utilization, 0.85);
  ASSERT_NE(find(c, "tp"), nullptr);
  EXPECT_EQ(find(c, "tp")->source, "--tensor-parallel-size 2 (" + yaml + ":1)");
  EXPECT_TRUE(mentions(c.notes, "--compilation-config {\"cudagraph_mode\":\"FULL\"} (" + yaml + ":4): read"))
      << joined(c.notes);
  EXPECT_NE(read_error("vllm serve " + kQwen + " --config a.yaml --config b.yaml").find("more than one config file"),
            std::string::npos);
  EXPECT_NE(read_error("vllm serve " + kQwen + " --config args.json").find("a .yaml or .yml file"), std::string::npos);
  EXPECT_NE(read_error("vllm serve " + kQwen + " --config missing.yaml").find("cannot read the file"),
            std::string::npos);
  // A YAML's model: the line's MODEL wins (vLLM moves --model first, then expands --config).
  {
    std::ofstream f(dir + "/with_model.yaml");
    f << "model: elsewhere.json\ntensor-parallel-size: 2\n";
  }
  for (const std::string& line : {"vllm serve " + kQwen + " --config " + dir + "/with_model.yaml",
                                 "vllm serve --model " + kQwen + " --config " + dir + "/with_model.yaml"}) {
    const auto m = read_ok(line);
    EXPECT_EQ(m.model, kQwen) << line;
    EXPECT_EQ(m.request.tp, 2);
  }
  {
    std::ofstream f(dir + "/list.yaml");
    f << "- 1\n- 2\n";
  }
  EXPECT_NE(read_error("vllm serve " + kQwen + " --config " + dir + "/list.yaml").find("expected a mapping"),
            std::string::npos);
}

// ../shared/data/vllm-0.19/vllm019_runs.json (llm-d-planner's v0.19.0 sweep on H100-80GB): every
// started run's settings written as the `vllm serve` line they came from, read back into the request.
TEST(VllmCommand, TheSweepsSettings) {
  std::ifstream f(kRuns);
  if (!f) GTEST_SKIP() << kRuns << " is absent";
  const auto data = nlohmann::json::parse(f);
  const std::map<std::string, std::string> dtypes = {{"auto", "auto"}, {"bfloat16", "bf16"}, {"float16", "fp16"},
                                                     {"float32", "fp32"}, {"fp8", "fp8"}};
  int read = 0;
  for (const auto& r : data["runs"]) {
    const auto& s = r["settings"];
    if (r["status"] != "ok" || !r["config_file"].is_string() || !s["gpu_memory_utilization_arg"].is_number()) continue;
    std::string line = "vllm serve ../shared/data/vllm-0.19/" + r["config_file"].get<std::string>();
    line += fmt::format(" --tensor-parallel-size {} --pipeline-parallel-size {} --data-parallel-size {}", s["tp"].get<int>(),
                        s["pp"].get<int>(), s["dp"].get<int>());
    line += fmt::format(" --max-model-len {} --gpu-memory-utilization {} --max-num-batched-tokens {} --block-size {}",
                        s["max_model_len"].get<int>(), s["gpu_memory_utilization_arg"].get<double>(),
                        s["max_num_batched_tokens"].get<int>(), s["block_size"].get<int>());
    line += " --dtype " + s["dtype_arg"].get<std::string>() + " --kv-cache-dtype " + s["kv_cache_dtype"].get<std::string>();
    if (s["quantization_arg"].is_string()) line += " --quantization " + s["quantization_arg"].get<std::string>();
    if (s["enable_prefix_caching"] == false) line += " --no-enable-prefix-caching";
    const auto c = read_ok(line);
    SCOPED_TRACE(r["id"].get<std::string>());
    EXPECT_EQ(c.request.tp, s["tp"].get<int>());
    EXPECT_EQ(c.request.pp, s["pp"].get<int>());
    EXPECT_EQ(c.request.context_len, s["max_model_len"].get<int>());
    EXPECT_DOUBLE_EQ(c.request.gpu_memory_utilization, s["gpu_memory_utilization_arg"].get<double>());
    EXPECT_EQ(c.request.max_num_batched_tokens, s["max_num_batched_tokens"].get<int>());
    EXPECT_EQ(c.request.dtype, dtypes.at(s["dtype_arg"].get<std::string>()));
    EXPECT_EQ(c.request.kv_dtype, dtypes.at(s["kv_cache_dtype"].get<std::string>()));
    EXPECT_EQ(c.request.weight_dtype, s["quantization_arg"] == "fp8" ? "fp8" : "auto");
    EXPECT_TRUE(c.warnings.empty()) << joined(c.warnings);  // a quantized checkpoint's config says what it stores
    ++read;
  }
  EXPECT_EQ(read, 34);  // 35 started, one at vLLM's default utilization ("None (default 0.9)")
}

// Llama-3.1-8B-Instruct, TP 2, 8192 tokens (meta-llama-llama-3-1-8b---h100-80gb--tp2pp1dp1--8192):
// the line read gives the estimate of the flags validation/vllm_validation.py gives for that run.
TEST(VllmCommand, LlamaTp2RunServesAsTheValidationFlags) {
  const std::string config = "../shared/data/vllm-0.19/configs/llama-3.1-8b-instruct.json";
  if (!std::filesystem::exists(kRepo + "/" + config)) GTEST_SKIP() << config << " is absent";
  auto c = read_ok("vllm serve " + config + " --tensor-parallel-size 2 --max-model-len 8192 "
                   "--gpu-memory-utilization 0.95 --max-num-batched-tokens 8192 --block-size 16 "
                   "--no-enable-prefix-caching");
  auto model = load_model(c.model_config);
  ASSERT_TRUE(model) << model.error().message;
  auto unset = read_ok("vllm serve " + config);  // no --max-model-len: config.json's max_position_embeddings
  ASSERT_TRUE(apply_vllm_model_context(unset, *model));
  EXPECT_EQ(unset.request.context_len, 131072);
  EXPECT_EQ(find(unset, "context_len")->source.rfind("the model's max_model_len", 0), 0u);
  c.request.gpu = "h100-80gb";
  ServeRequest flags;  // --tp 2 --context-len 8192 --gpu h100-80gb --gpu-memory-utilization 0.95 ...
  flags.tp = 2;
  flags.context_len = 8192;
  flags.gpu = "h100-80gb";
  flags.gpu_memory_utilization = 0.95;
  flags.max_num_batched_tokens = 8192;
  flags.block_size = 16;
  auto from_line = serve(*model, c.request);
  auto from_flags = serve(*model, flags);
  ASSERT_TRUE(from_line) << from_line.error().message;
  ASSERT_TRUE(from_flags) << from_flags.error().message;
  EXPECT_EQ(serve_json(*from_line).dump(), serve_json(*from_flags).dump());
}

}  // namespace
}  // namespace actmem
