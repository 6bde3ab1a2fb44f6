#include "cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "actmem/actmem.h"
#include "serve_cli.h"

namespace actmem::cli {

namespace {

constexpr const char* kDefaultModel = "llama-3-70b";  // the seed card's 70B at 8k
constexpr int64_t kDefaultSeqLen = 8192;

/// Raw flag values, parsed into library options by to_training_options().
struct TrainingFlags {
  std::string model = kDefaultModel;
  std::string params;  // "7.5e9": a parameter-count-only model
  int64_t seq_len = kDefaultSeqLen;
  int64_t micro_batch = 1;
  std::string dtype = "bf16";
  std::string framework = "hf";
  std::string attention = "flash";
  std::string recompute = "none";
  int64_t recompute_layers = -1;
  int64_t checkpoint_every = 0;
  std::optional<double> hidden_dropout;
  std::optional<double> attention_dropout;
  std::string weight_dtype = "bf16";
  std::string grad_dtype;  // default: the weight dtype
  std::string optimizer = "adamw";
  int zero = 0;
  bool offload_optimizer = false;
  // Fine-tuning (README "Fine-tuning"): precision, the step in backward, LoRA / QLoRA.
  std::string precision = "mixed";
  bool optimizer_in_backward = false;
  int64_t lora_rank = 0;
  std::string lora_targets;  // default: q,v (PEFT's and torchtune's default for Llama)
  std::optional<double> lora_dropout;
  std::string base_weight_dtype = "bf16";
  bool double_quant = false;
  std::string adapter_dtype = "fp32";
  ParallelLayout parallel;
  std::string reserve = "0";
  bool json = false;
  const CLI::Option* model_option = nullptr;  // to tell an explicit --model from the default
};

void add_training_flags(CLI::App* cmd, TrainingFlags& f) {
  f.model_option =
      cmd->add_option("--model", f.model, "config.json path or preset name (actmem models)")->capture_default_str();
  cmd->add_option("--params", f.params, "parameter count only, e.g. 7.5e9 (static memory, no activations)");
  cmd->add_option("--seq-len", f.seq_len, "sequence length s")->capture_default_str();
  cmd->add_option("--micro-batch", f.micro_batch, "micro-batch size b")->capture_default_str();
  cmd->add_option("--dtype", f.dtype, "activation dtype: bf16, fp16, fp32")->capture_default_str();
  cmd->add_option("--framework", f.framework, "save rules: hf (transformers eager) or megatron")->capture_default_str();
  cmd->add_option("--attention", f.attention, "eager, sdpa or flash")->capture_default_str();
  cmd->add_option("--recompute", f.recompute, "none, selective or full")->capture_default_str();
  cmd->add_option("--recompute-layers", f.recompute_layers, "with --recompute full: recompute only N layers per stage");
  cmd->add_option("--checkpoint-every", f.checkpoint_every, "with --recompute full: keep a checkpoint every k layers");
  cmd->add_option("--hidden-dropout", f.hidden_dropout, "hidden dropout p (default: from config.json)");
  cmd->add_option("--attention-dropout", f.attention_dropout, "attention dropout p (default: from config.json)");
  cmd->add_option("--weight-dtype", f.weight_dtype, "bf16, fp16 or fp32")->capture_default_str();
  cmd->add_option("--grad-dtype", f.grad_dtype, "gradient dtype: bf16/fp16 or fp32 accumulation (default: weights')");
  cmd->add_option("--optimizer", f.optimizer, "adamw, adamw-8bit or sgd")->capture_default_str();
  cmd->add_option("--zero", f.zero, "ZeRO stage 0-3 over --dp (FSDP full shard = 3)")->capture_default_str();
  cmd->add_flag("--offload-optimizer", f.offload_optimizer, "optimizer state and fp32 master in CPU memory");
  cmd->add_option("--precision", f.precision, "mixed (fp32 master + fp32 state) or pure (none; state in the weight dtype)")
      ->capture_default_str();
  cmd->add_flag("--optimizer-in-backward", f.optimizer_in_backward, "step each parameter in backward, freeing its gradient");
  cmd->add_option("--lora-rank", f.lora_rank, "LoRA rank r (0 = full fine-tuning)")->capture_default_str();
  cmd->add_option("--lora-targets", f.lora_targets, "LoRA layers: subset of q,k,v,o,gate,up,down or all (default q,v)");
  cmd->add_option("--lora-dropout", f.lora_dropout, "LoRA dropout p");
  cmd->add_option("--base-weight-dtype", f.base_weight_dtype, "frozen LoRA base: bf16, fp16, fp32, int8 or nf4")
      ->capture_default_str();
  cmd->add_flag("--double-quant", f.double_quant, "nf4 with 8-bit block scales (bnb_4bit_use_double_quant)");
  cmd->add_option("--adapter-dtype", f.adapter_dtype, "LoRA adapter dtype (PEFT: fp32, torchtune: bf16)")
      ->capture_default_str();
  cmd->add_option("--dp", f.parallel.dp, "data-parallel size")->capture_default_str();
  cmd->add_option("--tp", f.parallel.tp, "tensor-parallel size")->capture_default_str();
  cmd->add_flag("--sp", f.parallel.sp, "sequence parallelism (with --tp)");
  cmd->add_option("--pp", f.parallel.pp, "pipeline-parallel size")->capture_default_str();
  cmd->add_option("--vpp", f.parallel.vpp, "virtual stages per rank (interleaved 1F1B)")->capture_default_str();
  cmd->add_option("--cp", f.parallel.cp, "context-parallel size")->capture_default_str();
  cmd->add_option("--ep", f.parallel.ep, "expert-parallel size")->capture_default_str();
  cmd->add_option("--num-micro-batches", f.parallel.num_micro_batches, "micro-batches per pipeline flush");
  cmd->add_option("--reserve", f.reserve, "CUDA context + allocator slack allowance, e.g. 2GiB")->capture_default_str();
  cmd->add_flag("--json", f.json, "machine-readable output");
}

Expected<int64_t> parse_count(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 1 || v > 1e15 || v != std::floor(v))
    return Error{fmt::format("{} '{}': expected a positive whole count like 7.5e9", flag, text)};
  return static_cast<int64_t>(v);
}

/// The CLI's spelling of a library option: seq_len -> --seq-len (zero_stage is --zero).
std::string flag_of(const std::string& field) {
  if (field == "zero_stage") return "--zero";
  std::string flag = "--" + field;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

int fail(const Error& e) {
  fmt::print(stderr, "actmem: {}\n", render_message(e.message, flag_of));
  return 2;
}

struct TrainingInputs {
  Workload workload;
  Layout layout;
};

Expected<TrainingInputs> to_inputs(const TrainingFlags& f) {
  TrainingInputs in;
  auto& w = in.workload;
  auto& l = in.layout;
  auto dtype = parse_dtype(f.dtype);
  auto weight = parse_dtype(f.weight_dtype);
  auto grad = parse_dtype(f.grad_dtype.empty() ? f.weight_dtype : f.grad_dtype);
  auto framework = kFrameworkNames.parse(f.framework);
  auto attention = kAttentionNames.parse(f.attention);
  auto recompute = kRecomputeNames.parse(f.recompute);
  auto optimizer = kOptimizerNames.parse(f.optimizer);
  auto reserve = f.reserve == "0" ? Expected<Bytes>(Bytes{0}) : parse_size(f.reserve);
  if (!dtype) return Error{"--dtype: " + dtype.error().message};
  if (!weight) return Error{"--weight-dtype: " + weight.error().message};
  if (!grad) return Error{"--grad-dtype: " + grad.error().message};
  if (!framework) return framework.error();
  if (!attention) return attention.error();
  if (!recompute) return recompute.error();
  if (!optimizer) return optimizer.error();
  if (!reserve) return Error{"--reserve: " + reserve.error().message};
  auto precision = kPrecisionNames.parse(f.precision);
  auto base = kBaseWeightNames.parse(f.base_weight_dtype);
  auto adapter = parse_dtype(f.adapter_dtype);
  if (!precision) return precision.error();
  if (!base) return base.error();
  if (!adapter) return Error{"--adapter-dtype: " + adapter.error().message};
  if (f.lora_rank == 0 && (!f.lora_targets.empty() || f.lora_dropout))
    return Error{"--lora-targets and --lora-dropout shape LoRA adapters; give --lora-rank (e.g. 16)"};
  w.precision = *precision;
  w.optimizer_in_backward = f.optimizer_in_backward;
  w.lora.rank = f.lora_rank;
  w.lora.targets = kLoraQ | kLoraV;
  if (!f.lora_targets.empty()) {
    auto targets = parse_lora_targets(f.lora_targets);
    if (!targets) return targets.error();
    w.lora.targets = *targets;
  }
  w.lora.dropout = f.lora_dropout.value_or(0.0);
  w.lora.base = *base;
  w.lora.double_quant = f.double_quant;
  w.lora.adapter_dtype = *adapter;
  w.dtype = *dtype;
  w.weight_dtype = *weight;
  w.grad_dtype = *grad;
  w.framework = *framework;
  w.attention = *attention;
  w.optimizer = *optimizer;
  w.hidden_dropout = f.hidden_dropout;
  w.attention_dropout = f.attention_dropout;
  l.seq_len = f.seq_len;
  l.micro_batch = f.micro_batch;
  l.parallel = f.parallel;
  l.recompute = *recompute;
  l.recompute_layers = f.recompute_layers;
  l.checkpoint_every = f.checkpoint_every;
  l.zero_stage = f.zero;
  l.offload_optimizer = f.offload_optimizer;
  l.reserve = *reserve;
  return in;
}

enum class TrainingOutput { kTable, kExplain };

int run_training(const TrainingFlags& f, TrainingOutput output) {
  auto inputs = to_inputs(f);
  if (!inputs) return fail(inputs.error());
  if (auto ok = check_options(inputs->workload, inputs->layout); !ok) return fail(ok.error());
  Expected<PreparedModel> prepared = Error{""};
  ModelSpec model;
  if (!f.params.empty()) {
    if (f.model_option && f.model_option->count() > 0)
      return fail(Error{"--params and --model both describe the model; give one (--params for static memory only, "
                        "--model for everything)"});
    auto n = parse_count("--params", f.params);
    if (!n) return fail(n.error());
    prepared = prepare_params_only(*n, inputs->workload);
  } else {
    auto loaded = load_model(f.model);
    if (!loaded) return fail(loaded.error());
    loaded->name = f.model;
    prepared = prepare(*loaded, inputs->workload);
  }
  if (!prepared) return fail(prepared.error());
  auto report = explain(*prepared, inputs->layout);
  if (!report) return fail(report.error());
  if (f.json) {
    fmt::print("{}\n", report_json(*report).dump(2));
  } else if (output == TrainingOutput::kExplain) {
    fmt::print("{}", render_explain(*report));
  } else {
    fmt::print("{}", render_table(*report));
  }
  return 0;
}

using Runner = std::function<int()>;

Runner add_estimate(CLI::App& app) {
  auto flags = std::make_shared<TrainingFlags>();
  auto* cmd = app.add_subcommand("estimate", "Peak training memory per GPU: static + activations + transients");
  add_training_flags(cmd, *flags);
  return [flags] { return run_training(*flags, TrainingOutput::kTable); };
}

Runner add_explain(CLI::App& app) {
  auto flags = std::make_shared<TrainingFlags>();
  auto* cmd = app.add_subcommand("explain", "The estimate's derivation, term by term: formula = values = bytes");
  add_training_flags(cmd, *flags);
  return [flags] { return run_training(*flags, TrainingOutput::kExplain); };
}

Runner add_models(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("models", "List the built-in model presets");
  cmd->add_flag("--json", *json, "machine-readable output");
  return [json] {
    if (*json) {
      auto arr = nlohmann::json::array();
      for (const auto& p : list_presets())
        arr.push_back({{"name", p.name}, {"description", p.description}, {"source", p.source}});
      fmt::print("{}\n", arr.dump(2));
      return 0;
    }
    TextTable t;
    for (const auto& p : list_presets()) t.add_row({{std::string(p.name)}, {std::string(p.description)}});
    fmt::print("{}", t.render(""));
    return 0;
  };
}

// The subcommand table (ninja style): name → registration.
struct Command {
  const char* name;
  Runner (*add)(CLI::App&);
};
const Command kCommands[] = {
    {"estimate", add_estimate},
    {"explain", add_explain},
    {"models", add_models},
    {"serve", add_serve_command},
};

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"actmem: GPU memory of transformer training and serving, tensor by tensor"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "actmem 0.1.0");
  std::vector<std::pair<CLI::App*, Runner>> runners;
  std::vector<std::string_view> names;
  for (const auto& c : kCommands) {
    Runner r = c.add(app);
    runners.emplace_back(app.get_subcommand(c.name), std::move(r));
    names.emplace_back(c.name);
  }
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    bool known = false;
    for (const auto& n : names) known = known || n == word;
    if (!known) {
      auto guess = closest_name(word, names);
      fmt::print(stderr, "actmem: unknown command '{}'{}; commands: {}\n", word,
                 guess ? fmt::format("; did you mean '{}'?", *guess) : "", fmt::join(names, ", "));
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    fmt::print(stderr, "actmem: {}\n", e.what());
    return 2;
  }
  for (auto& [sub, runner] : runners)
    if (sub->parsed()) return runner();
  return 2;
}

}  // namespace actmem::cli
