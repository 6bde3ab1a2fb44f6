#include "cli.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "api/library.h"
#include "allocator_cli.h"
#include "options_cli.h"
#include "serve_cli.h"
#include "table_flags.h"

namespace actmem::cli {

namespace {

constexpr const char* kDefaultModel = "llama-3-70b";  // the seed card's 70B at 8k

/// The flags of estimate and explain: the table's, and the model, output and --from flags.
struct TrainingFlags {
  std::string model = kDefaultModel;
  std::string params;  // "7.5e9": a parameter-count-only model
  TableFlags table;
  bool json = false;
  FitFlags fit;  // --gpu / --gpu-memory: the fit verdict (plan_cli.h)
  std::string from;                           // a training config (Megatron-LM launch script)
  std::string timeline;                       // --timeline FILE: the step's allocations as a trace
  const CLI::Option* model_option = nullptr;  // to tell an explicit --model from the default
};

void add_training_flags(CLI::App* cmd, TrainingFlags& f) {
  f.model_option =
      cmd->add_option("--model", f.model, "config.json path or preset name (actmem models)")->capture_default_str();
  cmd->add_option("--params", f.params, "parameter count only, e.g. 7.5e9 (static memory, no activations)");
  cmd->add_flag("--json", f.json, "machine-readable output");
  add_fit_flags(cmd, f.fit);
  cmd->add_option("--from", f.from, "a training config to read: a Megatron-LM launch script or argument\n"
                  "line, a DeepSpeed JSON, a torchtitan TOML, an axolotl or LLaMA-Factory\nYAML");
  cmd->add_option("--timeline", f.timeline, "write the step's allocations and frees, each tensor named, as a\n"
                  "trace (actmem allocator --trace replays it; docs/allocator.md)");
  add_table_flags(cmd, f.table);
}

/// --timeline FILE: the peak GPU's step as an allocator trace (engine/timeline.h).
Expected<void> write_timeline(const PreparedModel& prepared, const Layout& layout, const std::string& path) {
  auto tl = detail::step_timeline(prepared, layout);
  if (!tl) return tl.error();
  AllocatorTrace trace = detail::to_allocator_trace(*tl);
  trace.source = fmt::format("actmem estimate: {} (the peak GPU's step)", prepared.name());
  std::ofstream out(path, std::ios::binary);
  out << write_allocator_trace(trace);
  if (!out) return Error{fmt::format("--timeline {}: cannot write the file", path)};
  return {};
}

Expected<int64_t> parse_count(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 1 || v > 1e15 || v != std::floor(v))
    return Error{fmt::format("{} '{}': expected a positive whole count like 7.5e9", flag, text)};
  return static_cast<int64_t>(v);
}

int fail(const Error& e) {
  fmt::print(stderr, "actmem: {}\n", render_message(e.message, flag_of));
  return 2;
}

enum class TrainingOutput { kTable, kExplain };

/// The flags' model prepared for their workload (--params or --model).
Expected<PreparedModel> prepare_flags(const TrainingFlags& f, const Workload& workload,
                                      const std::optional<ModelSpec>& from_config = std::nullopt) {
  if (!f.params.empty()) {
    if (f.model_option && f.model_option->count() > 0)
      return Error{"--params and --model both describe the model; give one (--params for static memory only, "
                   "--model for everything)"};
    auto n = parse_count("--params", f.params);
    if (!n) return n.error();
    return prepare_params_only(*n, workload);
  }
  if (from_config && f.model_option->count() == 0) return prepare(*from_config, workload);
  auto loaded = load_model(f.model);
  if (!loaded) return loaded.error();
  loaded->name = f.model;
  return prepare(*loaded, workload);
}

/// A flag given beside --from overrides the file (to_settings sets it on top): the echo says so
/// (training_config.h mark_overrides), the value typed by its option's kind as the flag set it.
std::vector<OptionOverride> flag_overrides(const TrainingFlags& f) {
  std::vector<OptionOverride> out;
  for (const auto& t : f.table.flags) {
    if (!t.given()) continue;
    const std::string flag = flag_of(std::string(t.spec->name));
    out.push_back({std::string(t.spec->name), t.value(), t.spec->kind == OptionKind::kFlag ? flag : flag + " " + t.text});
  }
  return out;
}

/// --from FILE: the file's settings, echoed on stderr with where each came from, and its warnings.
Expected<TrainingConfig> read_from(const TrainingFlags& f, TrainingSettings& base) {
  auto config = load_training_config(f.from);
  if (!config) return config.error();
  if (auto ok = apply_training_config(*config, base); !ok) return ok.error();
  mark_overrides(*config, flag_overrides(f), "the command line");
  fmt::print(stderr, "actmem: read from {} ({}):\n", f.from, config->format);
  for (const auto& s : config->settings)
    fmt::print(stderr, "  {} {}  <- {}\n", flag_of(s.option), describe_option_value(s.value), s.source);
  for (const auto& m : config->model_from) fmt::print(stderr, "  model: {}\n", m);
  for (const auto& w : config->warnings) fmt::print(stderr, "actmem: warning: {}\n", w);
  return config;
}

int run_training(const TrainingFlags& f, TrainingOutput output) {
  TrainingSettings base;
  std::optional<TrainingConfig> config;
  if (!f.from.empty()) {
    auto read = read_from(f, base);
    if (!read) return fail(read.error());
    config = std::move(*read);
    const bool model_given = f.model_option->count() > 0 || !f.params.empty();
    if (!config->model && !model_given)
      return fail(Error{fmt::format("{} does not describe the model ({}); add --model PRESET|config.json", f.from,
                                    config->model_from.empty() ? "no --num-layers/--hidden-size"
                                                               : config->model_from.back())});
    if (config->model && model_given)
      fmt::print(stderr, "actmem: warning: the model comes from --model/--params; the architecture in {} is not used\n",
                 f.from);
  }
  auto inputs = to_settings(f.table, base);
  if (!inputs) return fail(inputs.error());
  if (auto ok = check_options(inputs->workload, inputs->layout); !ok) return fail(ok.error());
  auto prepared = prepare_flags(f, inputs->workload, config ? config->model : std::nullopt);
  if (!prepared) return fail(prepared.error());
  auto report = explain(*prepared, inputs->layout);
  if (!report) return fail(report.error());
  if (!f.timeline.empty())
    if (auto ok = write_timeline(*prepared, inputs->layout, f.timeline); !ok) return fail(ok.error());
  // A Megatron-LM job: Megatron's own theoretical memory report beside actmem's (megatron_theory.h).
  const std::vector<std::string> comparison = config ? megatron_theory_lines(*config, *report) : std::vector<std::string>{};
  if (f.fit.given()) {  // the fit verdict, only when a GPU is given (the outputs without one stay as they were)
    nlohmann::json extra = nlohmann::json::object();
    if (config) extra["config"] = training_config_json(*config);
    if (!comparison.empty()) extra["megatron_theory"] = megatron_theory_json(*config, *report);
    const int code = print_with_fit(*prepared, *report, f.fit, f.json,
                                    f.json ? std::string()
                                    : output == TrainingOutput::kExplain ? render_explain(*report)
                                                                         : render_table(*report),
                                    extra);
    if (code == 0 && !f.json && !comparison.empty()) fmt::print("\n{}\n", fmt::join(comparison, "\n"));
    return code;
  }
  if (f.json) {
    auto j = report_json(*report);
    if (config) j["config"] = training_config_json(*config);  // a file's bytes need not be UTF-8: replace
    if (!comparison.empty()) j["megatron_theory"] = megatron_theory_json(*config, *report);
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (output == TrainingOutput::kExplain) {
    fmt::print("{}", render_explain(*report));
  } else {
    fmt::print("{}", render_table(*report));
  }
  if (!f.json && !comparison.empty()) fmt::print("\n{}\n", fmt::join(comparison, "\n"));
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
    {"allocator", add_allocator_command},
    {"estimate", add_estimate},
    {"explain", add_explain},
    {"models", add_models},
    {"options", add_options_command},
    {"plan", add_plan_command},
    {"serve", add_serve_command},
};

}  // namespace

std::string flag_of(const std::string& field) {
  if (field == "zero_stage") return "--zero";
  std::string flag = "--" + field;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

int report_error(const Error& e) { return fail(e); }

Expected<EstimateArgs> parse_estimate_args(const std::string& args) {
  CLI::App app{"estimate flags"};
  TrainingFlags f;
  add_training_flags(&app, f);
  try {
    app.parse(args, false);
  } catch (const CLI::ParseError& e) {
    return Error{fmt::format("--from: {}", parse_error_message(app, e))};
  }
  auto inputs = to_settings(f.table);
  if (!inputs) return inputs.error();
  if (auto ok = check_options(inputs->workload, inputs->layout); !ok) return ok.error();
  auto prepared = prepare_flags(f, inputs->workload);
  if (!prepared) return prepared.error();
  return EstimateArgs{*prepared, inputs->layout, f.fit};
}

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
    fmt::print(stderr, "actmem: {}\n", parse_error_message(app, e));
    return 2;
  }
  for (auto& [sub, runner] : runners)
    if (sub->parsed()) return runner();
  return 2;
}

}  // namespace actmem::cli
