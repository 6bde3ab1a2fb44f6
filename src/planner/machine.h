// The GPU a job runs on, as a front end receives it (the CLI's fit flags, Python's keywords):
// catalog name or capacity, the allowances, the machine's speeds; and the fit verdict as the JSON
// every front end prints (`fit` in `estimate --gpu ... --json`). Moved here from the CLI so that
// the Python module gives the same dict without a copy of the code.
//
//   MachineOptions o;
//   set_machine_option(o, "gpu", std::string("h100-80gb"));
//   auto m = to_machine(o).value();          // m.capacity == 80 GiB of HBM
//   auto j = fit_report_json(prepared, report, m);   // report_json + "fit" (+ "changes")
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/prepared.h"
#include "policies/option_table.h"  // OptionInfo
#include "planner/fit.h"
#include "planner/plan.h"  // Change, what_to_change()
#include "planner/plan_json.h"  // fit_json(), changes_json(), implied_global_batch(), add_fit_json()
#include "planner/time_model.h"

namespace actmem {

/// The machine as typed: sizes as text ("80GiB"), unset = the default.
struct MachineOptions {
  std::string gpu;
  std::string gpu_memory;
  std::string cuda_context;    // default kDefaultCudaContextBytes
  std::string nccl_per_group;  // default kDefaultNcclBytesPerGroup
  std::optional<double> fragmentation;
  int64_t gpus_per_node = 8;
  std::optional<double> inter_node_gbps;  // GB/s per GPU, one direction
  std::optional<double> compute_efficiency;
  std::optional<double> collective_efficiency;
  bool given() const { return !gpu.empty() || !gpu_memory.empty(); }
};

/// The parsed machine: capacity, allowances and (when the GPU is from the catalog) its speeds.
struct Machine {
  Bytes capacity{0};
  std::string gpu_name;  // empty for gpu_memory
  Allowances allowances;
  Cluster cluster;
  bool has_speeds = false;
};
Expected<Machine> to_machine(const MachineOptions& o);

/// The machine options by name (gpu, gpu_memory, cuda_context, nccl_per_group, fragmentation,
/// gpus_per_node, inter_node_bandwidth, compute_efficiency, collective_efficiency), as the CLI's
/// flags are named. Example: set_machine_option(o, "gpu_memory", std::string("80GiB")).
std::span<const OptionInfo> machine_options();
/// A machine option's default as help shows it: machine_option_default("gpus_per_node") == "8"; ""
/// where the default is the catalog's or an allowance's (its help says which).
std::string machine_option_default(std::string_view name);
/// A machine option's value as typed back: machine_option_text(o, "fragmentation") == "0.1" after
/// set_machine_option(o, "fragmentation", 0.1); "" when unset.
std::string machine_option_text(const MachineOptions& o, std::string_view name);
Expected<void> set_machine_option(MachineOptions& o, std::string_view name, const OptionValue& value);

/// `estimate --gpu ... --json`: report_json(report) with "fit" (and, when it does not fit, the
/// changes that make it fit, fit.changes).
nlohmann::json fit_report_json(const PreparedModel& model, const Report& report, const Machine& m);

}  // namespace actmem

// `plan` as front ends take it (PlanOptions, to_plan_request()): after the machine it holds, so that
// every entry (actmem.h, machine.h, plan_options.h) sees MachineOptions first.
#include "planner/plan_options.h"
