// The Python front end: actmem._native, wrapped by actmem/__init__.py. Like the CLI it converts
// inputs and renders outputs and computes nothing: keyword arguments go through the library's option
// tables (set_training_option, set_serve_option), results come back as the CLI's --json text
// (report_json, serve_json), and every Error becomes a ValueError with the CLI's one-line message,
// options spelled as Python keywords (python_message()).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include "actmem/actmem.h"

namespace py = pybind11;

namespace actmem::python {

namespace {

/// `@tp 3: ...` -> `tp=3: ...`: an option followed by its value (a number, or text in quotes) reads as
/// the keyword that set it; any other mention is the bare keyword (`sp with tp=2`). zero_stage is zero.
std::string python_message(const std::string& message) {
  constexpr char kMark = '\x01';
  const std::string marked = render_message(message, [](const std::string& field) {
    return (field == "zero_stage" ? std::string("zero") : field) + kMark;
  });
  std::string out;
  out.reserve(marked.size());
  for (std::size_t i = 0; i < marked.size(); ++i) {
    if (marked[i] != kMark) {
      out += marked[i];
      continue;
    }
    const auto digit = [&](std::size_t k) { return k < marked.size() && marked[k] >= '0' && marked[k] <= '9'; };
    const bool value_follows = i + 2 < marked.size() && marked[i + 1] == ' ' &&
                               (digit(i + 2) || marked[i + 2] == '\'' || (marked[i + 2] == '-' && digit(i + 3)));
    if (value_follows) {
      out += '=';
      ++i;  // the space
    }
  }
  return out;
}

[[noreturn]] void raise(const Error& e) { throw py::value_error(python_message(e.message)); }

template <typename T>
T value_or_raise(Expected<T> r) {
  if (!r) raise(r.error());
  return std::move(*r);
}

/// A keyword argument as an OptionValue: bool before int (Python's bool is an int).
OptionValue option_value(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    try {
      return v.cast<int64_t>();
    } catch (const py::cast_error&) {
      raise(Error{ErrorKind::kInvalid, name, "@" + name + " " + py::repr(v).cast<std::string>() + ": too large"});
    }
  }
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  raise(Error{ErrorKind::kInvalid, name,
              "@" + name + " " + py::repr(v).cast<std::string>() + ": expected a number, True/False or a string"});
}

/// A model: a config.json text (`is_json`), else a preset name or a path, as load_model() reads it.
ModelSpec load(const std::string& model, bool is_json, const std::string& display_name) {
  if (is_json) return value_or_raise(parse_hf_config(model, display_name));
  auto spec = value_or_raise(load_model(model));
  spec.name = model;  // as the CLI names it
  return spec;
}

/// The model and options of a training job: `from_config` (a Megatron-LM script) first, if given,
/// then the keywords on top, as the CLI's --from and flags; `model` (when not empty) over the config's.
struct TrainingJob {
  std::optional<TrainingConfig> config;
  Report report;
  MachineOptions machine;  // gpu=, gpu_memory=, ...: the fit verdict, as the CLI's --gpu adds it
};

bool is_machine_option(const std::string& name) {
  for (const auto& o : machine_options())
    if (o.name == name) return true;
  return false;
}

TrainingJob training_job(const std::string& model, bool is_json, const std::string& display_name,
                         const py::dict& options, const std::string& from_config) {
  TrainingJob job;
  TrainingSettings settings;
  if (!from_config.empty()) {
    job.config = value_or_raise(load_training_config(from_config));
    if (auto ok = apply_training_config(*job.config, settings); !ok) raise(ok.error());
  }
  std::vector<OptionOverride> overrides;  // keywords over the file's settings, echoed in config.settings
  for (const auto& [key, value] : options) {
    const auto name = key.cast<std::string>();
    if (is_machine_option(name)) {
      if (auto ok = set_machine_option(job.machine, name, option_value(name, value)); !ok) raise(ok.error());
      continue;
    }
    OptionValue v = option_value(name, value);
    if (auto ok = set_training_option(settings, name, v); !ok) raise(ok.error());
    std::string given = std::holds_alternative<bool>(v) ? (std::get<bool>(v) ? "True" : "False") : describe_option_value(v);
    overrides.push_back({name, std::move(v), name + "=" + given});
  }
  if (job.config) mark_overrides(*job.config, overrides, "the keywords");
  if (auto ok = check_options(settings.workload, settings.layout); !ok) raise(ok.error());
  ModelSpec spec;
  if (!model.empty() || !job.config) {
    spec = load(model, is_json, display_name);
  } else if (job.config->model) {
    spec = *job.config->model;
  } else {
    raise(Error{ErrorKind::kConfig, "", from_config + " does not describe the model (no --num-layers/--hidden-size); "
                                                      "give model= as well"});
  }
  const PreparedModel prepared = value_or_raise(prepare(spec, settings.workload));
  job.report = value_or_raise(explain(prepared, settings.layout));
  return job;
}

std::string estimate_json(const std::string& model, bool is_json, const std::string& display_name, const py::dict& options,
                          const std::string& from_config) {
  auto job = training_job(model, is_json, display_name, options, from_config);
  nlohmann::json j;
  if (job.machine.given()) {  // as `estimate --gpu ... --json`: the fit verdict and what to change
    const Machine machine = value_or_raise(to_machine(job.machine));
    j = fit_report_json(job.report.source, job.report, machine);
  } else {
    j = report_json(job.report);
  }
  if (job.config) j["config"] = training_config_json(*job.config);  // as the CLI's --from adds it
  if (job.config)  // a Megatron-LM script: Megatron's own report beside actmem's, as the CLI adds it
    if (auto m = megatron_theory_json(*job.config, job.report); !m.is_null()) j["megatron_theory"] = m;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string explain_text(const std::string& model, bool is_json, const std::string& display_name, const py::dict& options,
                         const std::string& from_config) {
  auto job = training_job(model, is_json, display_name, options, from_config);
  if (job.machine.given())
    raise(Error{ErrorKind::kIncompatible, "gpu", "explain_text() is the derivation alone; the fit verdict for @gpu is in "
                                                 "estimate(..., gpu=...)[\"fit\"]"});
  return render_explain(job.report);
}

/// serve()'s model: model= when given (a config.json text, a preset or a path), else the config.json
/// of from_config's line.
ModelSpec serve_model(const std::string& model, bool is_json, const std::string& display_name,
                      const std::optional<VllmCommand>& line) {
  if (model.empty() && line) {
    auto loaded = load_model(line->model_config);
    if (!loaded) raise(Error{ErrorKind::kConfig, "model", line->model_source + ": " + loaded.error().message});
    return std::move(*loaded);
  }
  if (is_json) return value_or_raise(parse_hf_config(model, display_name));
  auto loaded = load_model(model);  // the CLI names the model in this message
  if (!loaded) raise(Error{ErrorKind::kUnknownName, "model", "@model " + model + ": " + loaded.error().message});
  return std::move(*loaded);
}

/// `actmem serve --json` as text; with from_config (a `vllm serve` line, as the CLI's --from reads it)
/// the line's settings first and the keywords on top, echoed in "config" with where each came from.
std::string serve_json_text(const std::string& model, bool is_json, const std::string& display_name,
                            const py::dict& options, const std::string& from_config) {
  std::optional<VllmCommand> line;
  if (!from_config.empty()) line = value_or_raise(load_vllm_command(from_config, !model.empty()));
  ServeRequest request;
  bool context_given = false;
  std::vector<OptionOverride> keywords;
  for (const auto& [key, value] : options) {
    const auto name = key.cast<std::string>();
    context_given = context_given || name == "context_len";
    OptionValue v = option_value(name, value);
    std::string given = std::holds_alternative<bool>(v) ? (std::get<bool>(v) ? "True" : "False") : describe_option_value(v);
    keywords.push_back({name, std::move(v), name + "=" + given});
  }
  if (line) {
    if (auto ok = apply_vllm_overrides(*line, keywords, "the keywords"); !ok) raise(ok.error());
  } else {
    for (const auto& k : keywords)
      if (auto ok = set_serve_option(request, k.option, k.value); !ok) raise(ok.error());
    if (!context_given)  // the CLI's --context-len is required too
      raise(Error{ErrorKind::kInvalid, "context_len", "serve needs @context_len: tokens per sequence, e.g. context_len=8192"});
  }
  const ModelSpec spec = serve_model(model, is_json, display_name, line);
  if (line) {
    if (auto ok = apply_vllm_model_context(*line, spec); !ok) raise(ok.error());
    request = line->request;
  }
  auto j = serve_json(value_or_raise(serve(spec, request)));
  if (line) j["config"] = vllm_command_json(*line);  // as the CLI's --from adds it
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// `actmem serve --generate --json` as text: HF generate() on one GPU (serve/generate.h). Keywords:
/// prompt_len, new_tokens (both required), batch, dtype, attention, as the CLI's flags.
std::string generate_json_text(const std::string& model, bool is_json, const std::string& display_name,
                               const py::dict& options) {
  GenerateOptions o;
  for (const auto& [key, value] : options) {
    const auto name = key.cast<std::string>();
    const OptionValue v = option_value(name, value);
    const auto count = [&]() -> int64_t {
      if (const auto* n = std::get_if<int64_t>(&v)) return *n;
      raise(Error{ErrorKind::kInvalid, name, fmt::format("@{} takes a whole number", name)});
      return 0;
    };
    const auto text = [&]() -> std::string {
      if (const auto* t = std::get_if<std::string>(&v)) return *t;
      raise(Error{ErrorKind::kInvalid, name, fmt::format("@{} takes a name", name)});
      return {};
    };
    if (name == "prompt_len") {
      o.prompt_len = count();
    } else if (name == "new_tokens") {
      o.new_tokens = count();
    } else if (name == "batch") {
      o.batch = count();
    } else if (name == "dtype") {
      const std::string d = text();
      if (d != "auto") o.dtype = value_or_raise(parse_dtype(d));
    } else if (name == "attention") {
      const auto a = kGenerateAttentionNames.parse(text());
      if (!a) raise(Error{ErrorKind::kUnknownName, "attention", "@attention " + text() + ": use eager, sdpa or flash"});
      o.attention = *a;
    } else {
      raise(Error{ErrorKind::kUnknownName, name,
                  fmt::format("generate() takes prompt_len, new_tokens, batch, dtype and attention, not {}", name)});
    }
  }
  ModelSpec spec;
  if (is_json) {
    spec = value_or_raise(parse_hf_config(model, display_name));
  } else {
    auto loaded = load_model(model);
    if (!loaded) raise(Error{ErrorKind::kUnknownName, "model", "@model " + model + ": " + loaded.error().message});
    spec = std::move(*loaded);
  }
  return generate_json(spec.name, value_or_raise(estimate_generate(spec, o))).dump();
}

/// `actmem plan --json` as text: the options through the library's plan table (set_plan_option(),
/// which takes the machine keywords too) and to_plan_request(), as the CLI's flags go. A plan in which
/// nothing fits is a result (its "closest"), not an error, as the CLI prints it.
std::string plan_json_text(const std::string& model, bool is_json, const std::string& display_name,
                           const py::dict& options) {
  PlanOptions o;
  for (const auto& [key, value] : options) {
    const auto name = key.cast<std::string>();
    if (auto ok = set_plan_option(o, name, option_value(name, value)); !ok) raise(ok.error());
  }
  std::optional<ModelSpec> spec;
  if (is_json) {
    spec = value_or_raise(parse_hf_config(model, display_name));
    o.model = display_name;
  } else {
    o.model = model;
  }
  const PlanSetup setup = value_or_raise(to_plan_request(o, spec));
  const PlanResult result = value_or_raise(plan(setup.model, setup.request));
  return actmem::plan_json(result, setup).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// (keyword, help) pairs of an option table (OptionInfo or OptionSpec rows), options named as keywords.
template <typename Row>
py::list option_names(const std::span<const Row> rows) {
  py::list out;
  for (const auto& o : rows)
    out.append(py::make_tuple(std::string(o.name), python_message(std::string(o.help))));
  return out;
}

/// The training option table as JSON (options_json()), each option's value under the keywords given:
/// what a keyword sets, read back through the table (the CLI's `actmem options --json --tp 8`).
std::string options_json_text(const py::dict& options) {
  TrainingSettings settings;
  for (const auto& [key, value] : options) {
    const auto name = key.cast<std::string>();
    if (auto ok = set_training_option(settings, name, option_value(name, value)); !ok) raise(ok.error());
  }
  return options_json(settings).dump();
}

}  // namespace

}  // namespace actmem::python

PYBIND11_MODULE(_native, m) {
  using namespace actmem::python;
  m.doc() = "actmem's C++ library; use the actmem package (actmem/__init__.py)";
  m.def("estimate_json", &estimate_json, py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"),
        py::arg("from_config") = "");
  m.def("explain_text", &explain_text, py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"),
        py::arg("from_config") = "");
  m.def("serve_json", &serve_json_text, py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"),
        py::arg("from_config") = "");
  m.def("generate_json", &generate_json_text, py::arg("model"), py::arg("is_json"), py::arg("display_name"),
        py::arg("options"));
  m.def("plan_json", &plan_json_text, py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"));
  m.def("plan_options", [] { return option_names(actmem::plan_options()); });
  m.def("training_options", [] { return option_names(actmem::training_options()); });
  m.def("options_json", &options_json_text, py::arg("options"));
  m.def("serve_options", [] { return option_names(actmem::serve_options()); });
  m.def("machine_options", [] { return option_names(actmem::machine_options()); });
  m.def("presets", [] {
    py::list out;
    for (const auto& p : actmem::list_presets()) out.append(std::string(p.name));
    return out;
  });
  m.def("python_message", &python_message, "an Error message with options spelled as keywords (for tests)");
}
