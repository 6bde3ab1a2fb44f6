// The public API (include/actmem/actmem.h) on the library: a Job's options go through the option
// tables (set_training_option, set_serve_option, set_plan_option, set_machine_option), files
// through the --from readers, and the answers are the renderers' JSON and text, as the CLI prints
// them. Nothing is computed here that the CLI does not compute the same way.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "api/library.h"

namespace actmem {

namespace {

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

bool is_machine_option(std::string_view name) {
  for (const auto& o : machine_options())
    if (o.name == name) return true;
  return false;
}

/// How an option overriding a file's setting is echoed: as the user wrote it, else name=value.
std::string given_text(const Option& o) {
  return o.given.empty() ? o.name + "=" + describe_option_value(o.value) : o.given;
}

/// The job's model: its config.json text, else a preset or a path as load_model() reads it (the
/// model named as given, as the CLI names it).
Expected<ModelSpec> load_job_model(const Job& job) {
  if (!job.config_json.empty()) return parse_hf_config(job.config_json, job.model.empty() ? "config.json" : job.model);
  auto spec = load_model(job.model);
  if (!spec) return spec.error();
  spec->name = job.model;
  return spec;
}

/// A training job as the CLI's estimate takes it: `from` (a training config) first, the options on
/// top, the machine options apart (the fit verdict); the model given over the config's.
struct TrainingJob {
  std::optional<TrainingConfig> config;
  TrainingSettings settings;
  MachineOptions machine;
  ModelSpec model;
};

Expected<TrainingJob> training_job(const Job& job) {
  TrainingJob t;
  if (!job.from.empty()) {
    auto config = load_training_config(job.from);
    if (!config) return config.error();
    t.config = std::move(*config);
    if (auto ok = apply_training_config(*t.config, t.settings); !ok) return ok.error();
  }
  std::vector<OptionOverride> overrides;  // over the file's settings, echoed in config.settings
  for (const auto& o : job.options) {
    if (is_machine_option(o.name)) {
      if (auto ok = set_machine_option(t.machine, o.name, o.value); !ok) return ok.error();
      continue;
    }
    if (auto ok = set_training_option(t.settings, o.name, o.value); !ok) return ok.error();
    overrides.push_back({o.name, o.value, given_text(o)});
  }
  if (t.config) mark_overrides(*t.config, overrides, job.origin);
  if (auto ok = check_options(t.settings.workload, t.settings.layout); !ok) return ok.error();
  if (!job.model.empty() || !job.config_json.empty() || !t.config) {
    auto spec = load_job_model(job);
    if (!spec) return spec.error();
    t.model = std::move(*spec);
  } else if (t.config->model) {
    t.model = *t.config->model;
  } else {
    return Error{ErrorKind::kConfig, "model",
                 job.from + " does not describe the model (no --num-layers/--hidden-size); give @model as well"};
  }
  return t;
}

Expected<Report> training_report(const TrainingJob& t) {
  auto prepared = prepare(t.model, t.settings.workload);
  if (!prepared) return prepared.error();
  return explain(*prepared, t.settings.layout);
}

}  // namespace

Expected<std::string> estimate_json(const Job& job) {
  auto t = training_job(job);
  if (!t) return t.error();
  auto report = training_report(*t);
  if (!report) return report.error();
  nlohmann::json j;
  if (t->machine.given()) {  // as `estimate --gpu ... --json`: the fit verdict and what to change
    auto machine = to_machine(t->machine);
    if (!machine) return machine.error();
    j = fit_report_json(report->source, *report, *machine);
  } else {
    j = report_json(*report);
  }
  if (t->config) {  // as the CLI's --from adds them: the settings with their sources, Megatron's own report
    j["config"] = training_config_json(*t->config);
    if (auto m = megatron_theory_json(*t->config, *report); !m.is_null()) j["megatron_theory"] = m;
  }
  return dump(j);
}

Expected<std::string> explain_text(const Job& job) {
  auto t = training_job(job);
  if (!t) return t.error();
  if (t->machine.given())
    return Error{ErrorKind::kIncompatible, "gpu",
                 "explain is the derivation alone; the fit verdict for @gpu is in estimate's JSON (\"fit\")"};
  auto report = training_report(*t);
  if (!report) return report.error();
  return render_explain(*report);
}

Expected<Totals> evaluate(const Job& job) {
  auto t = training_job(job);
  if (!t) return t.error();
  auto report = training_report(*t);  // explain(): an invalid layout's error comes with its message
  if (!report) return report.error();
  return report->totals;
}

Expected<std::string> serve_json(const Job& job) {
  std::optional<VllmCommand> line;
  if (!job.from.empty()) {
    auto read = load_vllm_command(job.from, !job.model.empty() || !job.config_json.empty());
    if (!read) return read.error();
    line = std::move(*read);
  }
  ServeRequest request;
  bool context_given = false;
  std::vector<OptionOverride> overrides;
  for (const auto& o : job.options) {
    context_given = context_given || o.name == "context_len";
    overrides.push_back({o.name, o.value, given_text(o)});
  }
  if (line) {
    if (auto ok = apply_vllm_overrides(*line, overrides, job.origin); !ok) return ok.error();
  } else {
    for (const auto& o : overrides)
      if (auto ok = set_serve_option(request, o.option, o.value); !ok) return ok.error();
    if (!context_given)  // the CLI's --context-len is required too
      return Error{ErrorKind::kInvalid, "context_len", "serve needs @context_len: tokens per sequence, e.g. @context_len 8192"};
  }
  ModelSpec spec;
  if (line && job.model.empty() && job.config_json.empty()) {  // the config.json of the line's model
    auto loaded = load_model(line->model_config);
    if (!loaded) return Error{ErrorKind::kConfig, "model", line->model_source + ": " + loaded.error().message};
    spec = std::move(*loaded);
  } else if (!job.config_json.empty()) {
    auto parsed = parse_hf_config(job.config_json, job.model.empty() ? "config.json" : job.model);
    if (!parsed) return parsed.error();
    spec = std::move(*parsed);
  } else {
    auto loaded = load_model(job.model);  // the model named in the message, as the CLI names it
    if (!loaded) return Error{ErrorKind::kUnknownName, "model", "@model " + job.model + ": " + loaded.error().message};
    spec = std::move(*loaded);
  }
  if (line) {
    if (auto ok = apply_vllm_model_context(*line, spec); !ok) return ok.error();
    request = line->request;
  }
  auto estimate = serve(spec, request);
  if (!estimate) return estimate.error();
  auto j = actmem::serve_json(*estimate);
  if (line) j["config"] = vllm_command_json(*line);  // as the CLI's --from adds it
  return dump(j);
}

Expected<std::string> generate_json(const Job& job) {
  GenerateOptions o;
  for (const auto& opt : job.options) {
    const auto* count = std::get_if<int64_t>(&opt.value);
    const auto* text = std::get_if<std::string>(&opt.value);
    const bool takes_count = opt.name == "prompt_len" || opt.name == "new_tokens" || opt.name == "batch";
    const bool takes_text = opt.name == "dtype" || opt.name == "attention";
    if (!takes_count && !takes_text)
      return Error{ErrorKind::kUnknownName, opt.name,
                   fmt::format("generate takes prompt_len, new_tokens, batch, dtype and attention, not {}", opt.name)};
    if (takes_count && !count) return Error{ErrorKind::kInvalid, opt.name, fmt::format("@{} takes a whole number", opt.name)};
    if (takes_text && !text) return Error{ErrorKind::kInvalid, opt.name, fmt::format("@{} takes a name", opt.name)};
    if (opt.name == "prompt_len") {
      o.prompt_len = *count;
    } else if (opt.name == "new_tokens") {
      o.new_tokens = *count;
    } else if (opt.name == "batch") {
      o.batch = *count;
    } else if (opt.name == "dtype") {
      if (*text != "auto") {
        auto d = parse_dtype(*text);
        if (!d) return d.error();
        o.dtype = *d;
      }
    } else {
      const auto a = kGenerateAttentionNames.parse(*text);
      if (!a) return Error{ErrorKind::kUnknownName, "attention", "@attention " + *text + ": use eager, sdpa or flash"};
      o.attention = *a;
    }
  }
  ModelSpec spec;
  if (!job.config_json.empty()) {
    auto parsed = parse_hf_config(job.config_json, job.model.empty() ? "config.json" : job.model);
    if (!parsed) return parsed.error();
    spec = std::move(*parsed);
  } else {
    auto loaded = load_model(job.model);
    if (!loaded) return Error{ErrorKind::kUnknownName, "model", "@model " + job.model + ": " + loaded.error().message};
    spec = std::move(*loaded);
  }
  auto estimate = estimate_generate(spec, o);
  if (!estimate) return estimate.error();
  return dump(actmem::generate_json(spec.name, *estimate));
}

Expected<std::string> plan_json(const Job& job) {
  PlanOptions o;
  for (const auto& opt : job.options)
    if (auto ok = set_plan_option(o, opt.name, opt.value); !ok) return ok.error();
  std::optional<ModelSpec> spec;
  if (!job.config_json.empty()) {
    auto parsed = parse_hf_config(job.config_json, job.model.empty() ? "config.json" : job.model);
    if (!parsed) return parsed.error();
    spec = std::move(*parsed);
    o.model = job.model.empty() ? "config.json" : job.model;
  } else {
    o.model = job.model;
  }
  auto setup = to_plan_request(o, spec);
  if (!setup) return setup.error();
  auto result = plan(setup->model, setup->request);
  if (!result) return result.error();
  return dump(actmem::plan_json(*result, *setup));
}

Expected<std::string> options_json(const std::vector<Option>& options) {
  TrainingSettings settings;
  for (const auto& o : options)
    if (auto ok = set_training_option(settings, o.name, o.value); !ok) return ok.error();
  return dump(actmem::options_json(settings));
}

struct Estimator::State {
  PreparedModel prepared;
  TrainingSettings settings;  // the job's: what each evaluate() starts from
};

Expected<Estimator> Estimator::prepare(const Job& job) {
  auto t = training_job(job);
  if (!t) return t.error();
  if (t->machine.given())
    return Error{ErrorKind::kIncompatible, "gpu", "an Estimator gives the memory alone; the fit verdict for @gpu is in "
                                                  "estimate's JSON (\"fit\")"};
  auto prepared = actmem::prepare(t->model, t->settings.workload);
  if (!prepared) return prepared.error();
  Estimator e;
  e.state_ = std::make_shared<const State>(State{std::move(*prepared), t->settings});
  return e;
}

Expected<Totals> Estimator::evaluate(const std::vector<Option>& layout) const {
  TrainingSettings settings = state_->settings;
  for (const auto& o : layout) {
    const OptionSpec* spec = find_training_option(o.name);
    if (spec && spec->scope == OptionScope::kWorkload)
      return Error{ErrorKind::kIncompatible, o.name,
                   fmt::format("@{} is a workload option: the model is prepared for it, so give it to "
                               "Estimator::prepare (layout options here: seq_len, tp, recompute, ...)",
                               o.name)};
    if (auto ok = set_training_option(settings, o.name, o.value); !ok) return ok.error();
  }
  if (auto ok = check_options(settings.workload, settings.layout); !ok) return ok.error();
  Totals t;
  if (actmem::evaluate(state_->prepared, settings.layout, t)) return t;
  auto report = explain(state_->prepared, settings.layout);  // the message for what evaluate() refused
  if (!report) return report.error();
  return Error{t.error, t.error_field, "layout refused"};
}

Expected<std::vector<OptionHelp>> option_help(std::string_view table) {
  std::vector<OptionHelp> out;
  const auto add = [&](const auto& rows) {
    for (const auto& o : rows) out.push_back({std::string(o.name), std::string(o.help)});
  };
  if (table == "training") {
    add(training_options());
  } else if (table == "serve") {
    add(serve_options());
  } else if (table == "plan") {
    add(plan_options());
  } else if (table == "machine") {
    add(machine_options());
  } else {
    return Error{ErrorKind::kUnknownName, "", fmt::format("option table '{}': the tables are training, serve, plan "
                                                          "and machine", table)};
  }
  return out;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : list_presets()) out.emplace_back(p.name);
  return out;
}

}  // namespace actmem
