// The web page's front end: actmem's library compiled to WebAssembly (web/CMakeLists.txt), bound
// to JavaScript with embind. Like the CLI it includes only the public API and names every option
// as the CLI does (the option tables of option_table.h and serve_request.h: seq_len is --seq-len),
// so the page's JSON is the CLI's `--json` output byte for byte and its errors are the CLI's lines.
//
// Every entry point takes one JSON request and returns one JSON text:
//   {"ok": true, "json": "<what `actmem estimate ... --json` prints, less the newline>", ...chart data}
//   {"ok": false, "field": "tp", "message": "--tp 3: num_attention_heads (32) is not divisible by 3; ..."}
// A request: {"model": "llama-3-8b" | "config": "<config.json text>", "config_name": "config.json",
//             "options": {"seq_len": 8192, "tp": 2, "recompute": "selective", ...}, "gpu": "h100-80gb"}
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <emscripten/bind.h>

#include "api/library.h"

namespace actmem::web {

namespace {

using nlohmann::json;

/// How the CLI spells an option (tools/cli/cli.cc flag_of): seq_len -> --seq-len, zero_stage -> --zero.
std::string flag_of(const std::string& field) {
  if (field == "zero_stage") return "--zero";
  std::string flag = "--" + field;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string failure(const Error& e, const std::string& field_hint = "") {
  return json{{"ok", false},
              {"field", e.field.empty() ? field_hint : e.field},
              {"message", render_message(e.message, flag_of)}}
      .dump();
}

std::string failure(const std::string& message, const std::string& field) {
  return json{{"ok", false}, {"field", field}, {"message", message}}.dump();
}

/// A request's option value as the option tables take it.
std::optional<OptionValue> to_value(const json& v) {
  if (v.is_boolean()) return OptionValue{v.get<bool>()};
  if (v.is_number_integer()) return OptionValue{v.get<int64_t>()};
  if (v.is_number_float()) return OptionValue{v.get<double>()};
  if (v.is_string()) return OptionValue{v.get<std::string>()};
  return std::nullopt;
}

/// The request's model: a preset (or, as in the CLI, any name load_model() takes) or a config.json text.
Expected<ModelSpec> request_model(const json& req) {
  if (req.contains("config") && req["config"].is_string() && !req["config"].get<std::string>().empty()) {
    const std::string name = req.value("config_name", std::string("config.json"));
    auto m = parse_hf_config(req["config"].get<std::string>(), name);
    if (!m) return m.error();
    m->name = name;
    return m;
  }
  const std::string name = req.value("model", std::string("llama-3-70b"));
  auto m = load_model(name);
  if (!m) return m.error();
  m->name = name;
  return m;
}

std::string model_key(const json& req) {
  if (req.contains("config") && req["config"].is_string() && !req["config"].get<std::string>().empty())
    return "config:" + req.value("config_name", std::string()) + "\n" + req["config"].get<std::string>();
  return "preset:" + req.value("model", std::string("llama-3-70b"));
}

// The prepared model is cached per workload: a change of a layout option (OptionSpec::scope) reuses
// it; a workload option re-prepares.
struct Cache {
  std::string key;
  std::optional<PreparedModel> prepared;
};
Cache& cache() {
  static Cache c;
  return c;
}

struct Prepared {
  PreparedModel model;
  TrainingSettings settings;
};

/// Options by name in the CLI's order, the checks, then the (cached) prepared model: the CLI's
/// run_training() up to explain().
Expected<Prepared> prepare_request(const json& req) {
  TrainingSettings s;
  const json options = req.value("options", json::object());
  json workload_options = json::object();
  for (const auto& info : training_options()) {
    const std::string name(info.name);
    if (!options.contains(name) || options[name].is_null()) continue;
    auto value = to_value(options[name]);
    if (!value) return Error{ErrorKind::kInvalid, name, "@" + name + ": expected a number, text or true/false"};
    if (auto ok = set_training_option(s, name, *value); !ok) return ok.error();
    if (info.scope == OptionScope::kWorkload) workload_options[name] = options[name];
  }
  for (const auto& [name, value] : options.items()) {  // names the table does not know: "did you mean"
    bool known = false;
    for (const auto& info : training_options()) known = known || info.name == name;
    if (!known) {
      auto v = to_value(value);
      if (auto ok = set_training_option(s, name, v ? *v : OptionValue{false}); !ok) return ok.error();
    }
  }
  if (auto ok = check_options(s.workload, s.layout); !ok) return ok.error();
  const std::string key = model_key(req) + "\n" + workload_options.dump();
  Cache& c = cache();
  if (c.key != key || !c.prepared) {
    auto model = request_model(req);
    if (!model) return model.error();
    auto prepared = prepare(*model, s.workload);
    if (!prepared) return prepared.error();
    c.prepared = *prepared;
    c.key = key;
  }
  return Prepared{*c.prepared, s};
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The GPU as the CLI's --gpu NAME takes it: the library's to_machine() with the CLI's defaults
/// (allowances, 8 GPUs per node).
Expected<std::optional<Machine>> request_machine(const json& req) {
  MachineOptions o;
  o.gpu = req.value("gpu", std::string());
  if (o.gpu.empty()) return std::optional<Machine>{};
  auto m = to_machine(o);
  if (!m) return m.error();
  return std::optional<Machine>{*m};
}

/// One point of a sweep: the engine's peak (with the allowances when a GPU is given), or null when
/// the layout is invalid there.
json point(const PreparedModel& model, const Layout& layout, const std::optional<Machine>& gpu) {
  Totals t;
  if (!evaluate(model, layout, t)) return nullptr;
  int64_t needed = t.total;
  if (gpu) needed = check_fit(t, layout.parallel, gpu->capacity, gpu->allowances).needed.count();
  return json{{"needed", needed}, {"activations", t.activations}, {"total", t.total}};
}

/// Activation memory and the peak vs sequence length and micro-batch, for each recomputation mode.
json sweeps(const PreparedModel& model, const Layout& base, const std::optional<Machine>& gpu) {
  std::vector<int64_t> seqs;
  for (int64_t s = 512; s <= int64_t{1} << 20; s *= 2) seqs.push_back(s);
  if (std::find(seqs.begin(), seqs.end(), base.seq_len) == seqs.end()) {
    seqs.push_back(base.seq_len);
    std::sort(seqs.begin(), seqs.end());
  }
  std::vector<int64_t> batches;
  for (int64_t b = 1; b <= 64; b *= 2) batches.push_back(b);
  if (std::find(batches.begin(), batches.end(), base.micro_batch) == batches.end()) {
    batches.push_back(base.micro_batch);
    std::sort(batches.begin(), batches.end());
  }
  json out{{"seq_len", seqs}, {"micro_batch", batches}, {"by_seq_len", json::object()}, {"by_micro_batch", json::object()}};
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    const std::string name(kRecomputeNames.name(r));
    Layout l = base;
    l.recompute = r;
    if (r != Recompute::kFull) l.recompute_layers = -1, l.checkpoint_every = 0;
    json by_seq = json::array(), by_batch = json::array();
    for (int64_t s : seqs) {
      Layout x = l;
      x.seq_len = s;
      by_seq.push_back(point(model, x, gpu));
    }
    for (int64_t b : batches) {
      Layout x = l;
      x.micro_batch = b;
      by_batch.push_back(point(model, x, gpu));
    }
    out["by_seq_len"][name] = std::move(by_seq);
    out["by_micro_batch"][name] = std::move(by_batch);
  }
  return out;
}

/// Every pipeline stage's GPU; with a GPU, each stage's allowances as check_fit() counts them for
/// that stage's peak (the fragmentation share differs by stage).
json stages_json(const Report& r, const std::optional<Machine>& gpu) {
  json arr = json::array();
  for (const auto& s : r.stages) {
    json row{{"weights", s.weights},         {"gradients", s.gradients}, {"optimizer", s.optimizer},
             {"activations", s.activations}, {"transient", s.transient}, {"workspaces", s.workspaces},
             {"fp8_weight_cache", s.fp8_weight_cache}, {"total", s.total}};
    if (gpu) {
      Totals t;
      t.total = s.total + r.totals.reserve;
      row["allowance"] = check_fit(t, r.layout.parallel, gpu->capacity, gpu->allowances).allowance.count();
    }
    arr.push_back(std::move(row));
  }
  return arr;
}

}  // namespace

/// `actmem models --json`.
std::string presets() {
  auto arr = json::array();
  for (const auto& p : list_presets()) arr.push_back({{"name", p.name}, {"description", p.description}, {"source", p.source}});
  return arr.dump();
}

/// The GPU catalog: name, description, capacity (as cudaMemGetInfo reports it).
std::string gpus() {
  auto arr = json::array();
  for (const auto& g : gpu_catalog())
    arr.push_back({{"name", std::string(g.name)}, {"description", std::string(g.description)}, {"total_bytes", g.total.count()}});
  return arr.dump();
}

/// The option names, kinds and help texts of estimate (training) and serve, and the whole training
/// option table (options_json(): kind, group, default, range, ...) that the form is built from.
std::string options() {
  auto list = [](auto infos) {
    auto arr = json::array();
    for (const auto& o : infos)
      arr.push_back({{"name", std::string(o.name)}, {"flag", flag_of(std::string(o.name))},
                     {"kind", std::string(option_kind_name(o.kind))}, {"help", std::string(o.help)}});
    return arr;
  };
  return json{{"estimate", list(training_options())}, {"serve", list(serve_options())}, {"table", options_json()}}.dump();
}

/// `actmem estimate --json` (with "gpu": `estimate --gpu NAME --json`), the per-stage bars and,
/// with "sweep": true, the recomputation sweeps.
std::string estimate(const std::string& request) {
  const auto t0 = std::chrono::steady_clock::now();
  json req = json::parse(request, nullptr, false);
  if (req.is_discarded() || !req.is_object()) return failure("the page sent a malformed request", "");
  auto prepared = prepare_request(req);
  if (!prepared) return failure(prepared.error(), "model");
  auto report = explain(prepared->model, prepared->settings.layout);
  if (!report) return failure(report.error());
  auto gpu = request_machine(req);
  if (!gpu) return failure(gpu.error(), "gpu");
  json j = report_json(*report);
  if (*gpu) add_fit_json(j, prepared->model, *report, (*gpu)->gpu_name, (*gpu)->capacity, (*gpu)->allowances, (*gpu)->cluster);
  json out{{"ok", true}, {"json", j.dump(2)}, {"stages", stages_json(*report, *gpu)}, {"peak_stage", report->totals.peak_stage}};
  if (req.value("sweep", false)) out["sweep"] = sweeps(prepared->model, prepared->settings.layout, *gpu);
  out["ms"] = ms_since(t0);
  return out.dump();
}

/// `actmem serve --json`, and the KV cache and sequences that fit vs context length.
std::string serve_request(const std::string& request) {
  const auto t0 = std::chrono::steady_clock::now();
  json req = json::parse(request, nullptr, false);
  if (req.is_discarded() || !req.is_object()) return failure("the page sent a malformed request", "");
  ServeRequest r;
  const json options = req.value("options", json::object());
  for (const auto& info : serve_options()) {
    const std::string name(info.name);
    if (!options.contains(name) || options[name].is_null()) continue;
    auto value = to_value(options[name]);
    if (!value) return failure("@" + name + ": expected a number, text or true/false", name);
    if (auto ok = set_serve_option(r, name, *value); !ok) return failure(ok.error(), name);
  }
  auto model = request_model(req);
  if (!model) {  // the CLI's run_serve(): "--model NAME: message"
    const std::string name = req.contains("config") && req["config"].is_string() && !req["config"].get<std::string>().empty()
                                 ? req.value("config_name", std::string("config.json"))
                                 : req.value("model", std::string());
    return failure("--model " + name + ": " + render_message(model.error().message, flag_of), "model");
  }
  auto result = serve(*model, r);
  if (!result) return failure(result.error());
  json out{{"ok", true}, {"json", serve_json(*result).dump(2)}};
  if (req.value("sweep", false)) {
    json ctx = json::array(), kv = json::array(), seqs = json::array(), total = json::array();
    // 1k, 2k, 4k, ... (×4 past 32k) up to the model's context limit (128k when it states none), the
    // limit, and the request's own context: at most ~9 serve() calls (~1.5 ms each in the browser for
    // DeepSeek-V3).
    const int64_t limit = model->max_positions > 0 ? std::min<int64_t>(model->max_positions, int64_t{1} << 20)
                                                   : int64_t{1} << 17;
    std::vector<int64_t> lens;
    for (int64_t t = 1024; t <= limit; t *= t < 32768 ? 2 : 4) lens.push_back(t);
    if (lens.empty() || lens.back() != limit) lens.push_back(limit);
    if (std::find(lens.begin(), lens.end(), r.context_len) == lens.end()) {
      lens.push_back(r.context_len);
      std::sort(lens.begin(), lens.end());
    }
    for (int64_t t : lens) {
      ServeRequest x = r;
      x.context_len = t;
      auto p = serve_once(*model, x);  // a point of the chart: no suggestions
      if (!p) continue;  // beyond the model's positions, or invalid
      ctx.push_back(t);
      kv.push_back(p->serving.kv_bytes().count());
      total.push_back(p->serving.total().count());
      seqs.push_back(p->capacity ? json(p->capacity->max_sequences) : json(nullptr));
    }
    out["sweep"] = {{"context_len", ctx}, {"kv_bytes", kv}, {"total_bytes", total}, {"max_sequences", seqs}};
  }
  out["ms"] = ms_since(t0);
  return out.dump();
}

/// `actmem plan --json` for the request's model and workload options, "gpus", "global_batch" and the GPU.
std::string plan_request(const std::string& request) {
  const auto t0 = std::chrono::steady_clock::now();
  json req = json::parse(request, nullptr, false);
  if (req.is_discarded() || !req.is_object()) return failure("the page sent a malformed request", "");
  auto prepared = prepare_request(req);
  if (!prepared) return failure(prepared.error(), "model");
  auto gpu = request_machine(req);
  if (!gpu) return failure(gpu.error(), "gpu");
  if (!*gpu) return failure("--gpu: the planner needs a GPU, e.g. --gpu h100-80gb", "gpu");
  PlanRequest p;
  p.gpus = req.value("gpus", int64_t{0});
  p.seq_len = prepared->settings.layout.seq_len;
  p.global_batch = req.value("global_batch", int64_t{0});
  if (p.gpus < 1) return failure("--gpus: give the number of GPUs, e.g. --gpus 64", "gpus");
  if (p.global_batch < 1) return failure("--global-batch: give the global batch in sequences", "global_batch");
  p.capacity = (*gpu)->capacity;
  p.allowances = (*gpu)->allowances;
  p.cluster = (*gpu)->cluster;
  p.keep = static_cast<std::size_t>(std::clamp<int64_t>(req.value("top", int64_t{10}), 1, 100));
  auto result = plan(prepared->model, p);
  if (!result) return failure(result.error());
  // The workload flags `actmem plan` repeats in each row: the library's plan_workload_flags().
  // The page plans the workload its form states (prepared above): every workload option.
  PlanOptions flags;
  flags.model = prepared->model.name();
  flags.training = prepared->settings;
  const std::string prefix = plan_workload_flags(flags);
  json out{{"ok", true},
           {"json", plan_json(*result, p, prepared->model.name(), (*gpu)->gpu_name, prefix, " --gpu " + (*gpu)->gpu_name).dump(2)}};
  out["ms"] = ms_since(t0);
  return out.dump();
}

}  // namespace actmem::web

EMSCRIPTEN_BINDINGS(actmem) {
  emscripten::function("presets", &actmem::web::presets);
  emscripten::function("gpus", &actmem::web::gpus);
  emscripten::function("options", &actmem::web::options);
  emscripten::function("estimate", &actmem::web::estimate);
  emscripten::function("serve", &actmem::web::serve_request);
  emscripten::function("plan", &actmem::web::plan_request);
}
