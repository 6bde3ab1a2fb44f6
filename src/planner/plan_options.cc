#include "planner/plan_options.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "util/spellcheck.h"
#include "model/presets.h"  // load_model()

namespace actmem {

namespace {

using Setter = Expected<void> (*)(PlanOptions&, std::string_view, const OptionValue&);
using Getter = std::string (*)(const PlanOptions&);
struct Row {
  OptionInfo info;
  Setter set;
  Getter get;  // the value as help shows it; empty when unset (searched, or derived)
};

#define ACTMEM_SET(convert, field)                                                   \
  [](PlanOptions& o, std::string_view n, const OptionValue& v) -> Expected<void> {    \
    auto x = convert(n, v);                                                          \
    if (!x) return x.error();                                                        \
    o.field = *x;                                                                    \
    return {};                                                                       \
  },                                                                                 \
      [](const PlanOptions& o) { return default_shown(o.field); }

Expected<int> option_zero(std::string_view name, const OptionValue& v) {
  auto n = option_count(name, v);
  if (!n) return n.error();
  if (*n < -1000 || *n > 1000)  // the planner checks the stage; this keeps it an int
    return Error{ErrorKind::kInvalid, std::string(name), fmt::format("@{} {}: use 0, 1, 2 or 3", name, *n)};
  return static_cast<int>(*n);
}

Expected<std::size_t> option_top(std::string_view name, const OptionValue& v) {
  auto n = option_count(name, v);
  if (!n) return n.error();
  if (*n < 0) return Error{ErrorKind::kInvalid, std::string(name), fmt::format("@{} {}: use 1 or more", name, *n)};
  return static_cast<std::size_t>(*n);
}

const std::array kRows{
    Row{{"gpus", OptionKind::kCount, "number of GPUs"}, ACTMEM_SET(option_count, gpus)},
    Row{{"seq_len", OptionKind::kCount, "sequence length"}, ACTMEM_SET(option_count, seq_len)},
    Row{{"global_batch", OptionKind::kCount, "sequences per optimizer step"}, ACTMEM_SET(option_count, global_batch)},
    Row{{"global_batch_tokens", OptionKind::kCount, "tokens per optimizer step"},
        ACTMEM_SET(option_count, global_batch_tokens)},
    Row{{"tp", OptionKind::kCount, "pin tensor parallelism"}, ACTMEM_SET(option_count, tp)},
    Row{{"pp", OptionKind::kCount, "pin pipeline parallelism"}, ACTMEM_SET(option_count, pp)},
    Row{{"vpp", OptionKind::kCount, "pin virtual stages"}, ACTMEM_SET(option_count, vpp)},
    Row{{"cp", OptionKind::kCount, "pin context parallelism"}, ACTMEM_SET(option_count, cp)},
    Row{{"ep", OptionKind::kCount, "pin expert parallelism"}, ACTMEM_SET(option_count, ep)},
    Row{{"dp", OptionKind::kCount, "pin data parallelism"}, ACTMEM_SET(option_count, dp)},
    Row{{"micro_batch", OptionKind::kCount, "pin the micro-batch"}, ACTMEM_SET(option_count, micro_batch)},
    Row{{"zero", OptionKind::kCount, "pin the ZeRO stage"}, ACTMEM_SET(option_zero, zero)},
    Row{{"recompute", OptionKind::kText, "pin recomputation: none, selective or full"},
        ACTMEM_SET(option_text, recompute)},
    Row{{"sp", OptionKind::kFlag, "pin sequence parallelism on"}, ACTMEM_SET(option_flag, sp)},
    Row{{"offload_optimizer", OptionKind::kFlag, "pin optimizer offload on"}, ACTMEM_SET(option_flag, offload_optimizer)},
    Row{{"max_tp", OptionKind::kCount, "bound tp (default: GPUs per node)"}, ACTMEM_SET(option_count, max_tp)},
    Row{{"max_pp", OptionKind::kCount, "bound pp"}, ACTMEM_SET(option_count, max_pp)},
    Row{{"max_vpp", OptionKind::kCount, "bound vpp"}, ACTMEM_SET(option_count, max_vpp)},
    Row{{"max_cp", OptionKind::kCount, "bound cp"}, ACTMEM_SET(option_count, max_cp)},
    Row{{"max_ep", OptionKind::kCount, "bound ep"}, ACTMEM_SET(option_count, max_ep)},
    Row{{"max_micro_batch", OptionKind::kCount, "bound the micro-batch"}, ACTMEM_SET(option_count, max_micro_batch)},
    Row{{"top", OptionKind::kCount, "layouts to show"}, ACTMEM_SET(option_top, top)},
};

#undef ACTMEM_SET

const std::array<OptionInfo, kRows.size()> kInfos = [] {
  std::array<OptionInfo, kRows.size()> infos{};
  for (std::size_t i = 0; i < kRows.size(); ++i) infos[i] = kRows[i].info;
  return infos;
}();

}  // namespace

std::span<const OptionInfo> plan_options() { return kInfos; }

std::string plan_option_default(std::string_view name) {
  static const PlanOptions defaults;
  for (const auto& r : kRows)
    if (r.info.name == name) return r.get(defaults);
  return "";
}

Expected<void> set_plan_option(PlanOptions& o, std::string_view name, const OptionValue& value) {
  for (const auto& r : kRows)
    if (r.info.name == name) return r.set(o, name, value);
  for (const auto& m : machine_options())
    if (m.name == name) return set_machine_option(o.machine, name, value);
  if (const OptionSpec* spec = find_training_option(name)) {
    if (spec->scope == OptionScope::kWorkload) return set_training_option(o.training, name, value);
    return Error{ErrorKind::kInvalid, std::string(name),
                 fmt::format("@{} is a layout option, which the planner searches: pin or bound the layout with "
                             "the plan's own options (@tp, @pp, @recompute, @max_tp, ...)",
                             name)};
  }
  std::vector<std::string_view> names;
  for (const auto& r : kRows) names.push_back(r.info.name);
  for (const auto& m : machine_options()) names.push_back(m.name);
  for (const auto& t : training_options())
    if (t.scope == OptionScope::kWorkload) names.push_back(t.name);
  const auto guess = closest_name(name, names);
  return Error{ErrorKind::kUnknownName, std::string(name),
               fmt::format("unknown option @{}{}", name, guess ? fmt::format("; did you mean @{}?", *guess) : "")};
}

TrainingSettings plan_training_defaults() {
  TrainingSettings s;
  (void)set_training_option(s, "framework", std::string(kFrameworkNames.name(kPlanDefaultFramework)));
  return s;
}

namespace {

/// An option as `actmem estimate` spells it: seq_len is --seq-len (the workload and machine
/// options have no other spelling; the CLI's flag_of also maps the layout's zero_stage).
std::string cli_flag(std::string_view name) {
  std::string flag = "--" + std::string(name);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

}  // namespace

std::string plan_workload_flags(const PlanOptions& o) {
  // Replayed in the table's order on estimate's defaults: an option is repeated where its value
  // still differs, so what follows from an earlier one (fp32 gradients from megatron) is not.
  std::string s = "--model " + o.model;
  TrainingSettings replay;
  for (const OptionSpec& spec : training_options()) {
    if (spec.scope != OptionScope::kWorkload) continue;
    const auto value = spec.get(o.training.workload, o.training.layout);
    if (!value || value == spec.get(replay.workload, replay.layout)) continue;
    const std::string flag = cli_flag(spec.name);
    if (const bool* on = std::get_if<bool>(&*value)) {
      if (!*on) continue;  // a switch cannot be given off
      s += " " + flag;
    } else if (const std::string* text = std::get_if<std::string>(&*value)) {
      s += " " + flag + " " + *text;
    } else {
      s += " " + flag + " " + std::visit([](auto x) { return fmt::format("{}", x); }, *value);
    }
    (void)spec.set(replay, spec.name, *value);
  }
  return s;
}

// Every machine option that differs from MachineOptions' defaults (GPU, capacity, allowances,
// speeds), so that a row's `actmem estimate` command gives the fit verdict the planner gave.
std::string plan_machine_flags(const MachineOptions& m) {
  std::string s;
  for (const OptionInfo& info : machine_options()) {
    const std::string text = machine_option_text(m, info.name);
    if (text.empty() || text == machine_option_default(info.name)) continue;
    const std::string flag = cli_flag(info.name);
    s += " " + flag + " " + text;
  }
  return s;
}

Expected<PlanSetup> to_plan_request(const PlanOptions& o, const std::optional<ModelSpec>& spec) {
  const Workload& workload = o.training.workload;
  if (!o.machine.given())
    return Error{ErrorKind::kInvalid, "gpu", "@gpu: the planner needs a GPU, e.g. @gpu h100-80gb"};
  if (o.machine.gpu.empty())
    return Error{ErrorKind::kInvalid, "gpu",
                 "@gpu: the time model needs the GPU's speeds from the catalog; give @gpu NAME "
                 "(@gpu_memory may override its capacity)"};
  auto machine = to_machine(o.machine);
  if (!machine) return machine.error();
  if (!machine->has_speeds)
    return Error{ErrorKind::kInvalid, "gpu",
                 fmt::format("@gpu {}: the catalog has no bf16 peak or link bandwidth for it", o.machine.gpu)};
  if (o.gpus < 1) return Error{ErrorKind::kInvalid, "gpus", "@gpus: give the number of GPUs, e.g. @gpus 64"};
  if (o.global_batch.has_value() == o.global_batch_tokens.has_value())
    return Error{ErrorKind::kInvalid, "global_batch",
                 "@global_batch: give the global batch in sequences (@global_batch) or in tokens "
                 "(@global_batch_tokens), one of them"};
  int64_t batch = o.global_batch.value_or(0);
  if (o.global_batch_tokens) {
    if (o.seq_len < 1 || *o.global_batch_tokens % o.seq_len != 0 || *o.global_batch_tokens < o.seq_len)
      return Error{ErrorKind::kInvalid, "global_batch_tokens",
                   fmt::format("@global_batch_tokens {}: must be a multiple of @seq_len {}", *o.global_batch_tokens,
                               o.seq_len)};
    batch = *o.global_batch_tokens / o.seq_len;
  }
  ModelSpec model;
  if (spec) {
    model = *spec;
  } else {
    auto loaded = load_model(o.model);
    if (!loaded) return loaded.error();
    model = std::move(*loaded);
    model.name = o.model;
  }
  auto prepared = prepare(model, workload);
  if (!prepared) return prepared.error();

  PlanRequest req;
  req.gpus = o.gpus;
  req.seq_len = o.seq_len;
  req.global_batch = batch;
  req.capacity = machine->capacity;
  req.allowances = machine->allowances;
  req.cluster = machine->cluster;
  req.tp = o.tp;
  req.pp = o.pp;
  req.vpp = o.vpp;
  req.cp = o.cp;
  req.ep = o.ep;
  req.dp = o.dp;
  req.micro_batch = o.micro_batch;
  req.zero = o.zero;
  if (!o.recompute.empty()) {
    auto rc = kRecomputeNames.parse(o.recompute);
    if (!rc) return rc.error();
    req.recompute = *rc;
  }
  if (o.sp) req.sp = true;
  if (o.offload_optimizer) req.offload_optimizer = true;
  req.max_tp = o.max_tp;
  req.max_pp = o.max_pp;
  req.max_vpp = o.max_vpp;
  req.max_cp = o.max_cp;
  req.max_ep = o.max_ep;
  req.max_micro_batch = o.max_micro_batch;
  req.keep = std::max<std::size_t>(o.top, 1);
  return PlanSetup{std::move(*prepared),    std::move(*machine),    std::move(req),
                   model.name,              plan_workload_flags(o), plan_machine_flags(o.machine)};
}

nlohmann::json plan_json(const PlanResult& result, const PlanSetup& setup) {
  return plan_json(result, setup.request, setup.model_name, setup.machine.gpu_name, setup.flags_prefix,
                   setup.flags_suffix);
}

}  // namespace actmem
