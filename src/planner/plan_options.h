// `actmem plan` as a front end receives it (the CLI's flags, Python's keywords): the workload, the
// GPU count and global batch, pins and bounds, and the machine; turned into the planner's request
// here, once, so that `plan --json` and Python's actmem.plan() give the same dict.
//
//   PlanOptions o;
//   o.model = "llama-3-8b"; o.gpus = 16; o.global_batch = 64; o.machine.gpu = "h100-80gb";
//   auto setup = to_plan_request(o).value();        // the prepared model, machine and request
//   auto result = plan(setup.model, setup.request).value();
//   auto j = plan_json(result, setup);             // as `actmem plan ... --json` prints it
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/prepared.h"
#include "planner/machine.h"
#include "planner/plan.h"
#include "policies/option_table.h"

namespace actmem {

/// The planner's framework when none is given: Megatron-LM, whose parallelism (TP, SP, PP, VPP, CP,
/// EP) it searches; `estimate` defaults to the option table's (hf). @framework hf or torchtitan plans
/// what those run.
inline constexpr Framework kPlanDefaultFramework = Framework::kMegatron;

/// The workload a plan starts from: the option table's defaults with kPlanDefaultFramework set
/// through the table (so its rules follow: Megatron's fp32 gradients for bf16, default_grad_dtype).
TrainingSettings plan_training_defaults();

/// The plan's options. The workload is the training option table's (`training`: every option of
/// scope workload, set by name through set_plan_option(): framework, attention, dtypes, optimizer,
/// LoRA, loss, fp8, ...); the layout is what the planner searches, with the pins and bounds below.
struct PlanOptions {
  std::string model = "llama-3-70b";
  TrainingSettings training = plan_training_defaults();  // only its workload is read
  int64_t gpus = 0;
  int64_t seq_len = 8192;
  std::optional<int64_t> global_batch, global_batch_tokens;
  // Pins.
  std::optional<int64_t> tp, pp, vpp, cp, ep, dp, micro_batch;
  std::optional<int> zero;
  std::string recompute;  // empty: searched
  bool sp = false, offload_optimizer = false;
  // Bounds.
  int64_t max_tp = 0, max_pp = limits::kMaxPp, max_vpp = 8, max_cp = 64, max_ep = limits::kMaxEp,
          max_micro_batch = 16;
  std::size_t top = 10;  // layouts kept (at least 1)
  MachineOptions machine;
};

/// The plan's own options by name, as the CLI's flags are named (gpus, global_batch, tp, max_tp, top,
/// ...; not model, which front ends take apart). set_plan_option() also takes machine_options() and
/// the training option table's workload options (framework, attention, lora_rank, ...).
std::span<const OptionInfo> plan_options();
/// An option's default as help shows it: plan_option_default("seq_len") == "8192"; "" where there is
/// none to show (a pin not given is searched; max_tp 0 is the GPUs per node).
std::string plan_option_default(std::string_view name);
Expected<void> set_plan_option(PlanOptions& o, std::string_view name, const OptionValue& value);

/// What the planner runs on: the prepared model, the machine, the request, and the `actmem
/// estimate` flags every ranked layout's command repeats.
struct PlanSetup {
  PreparedModel model;
  Machine machine;
  PlanRequest request;
  std::string model_name;
  std::string flags_prefix;  // "--model llama-3-8b --framework megatron" (non-default workload flags)
  std::string flags_suffix;  // " --gpu h100-80gb"
};

/// Checks the options (in the CLI's order), loads and prepares the model and builds the request.
/// `spec`: the model when the front end has read it already (Python's dict); else o.model is loaded.
Expected<PlanSetup> to_plan_request(const PlanOptions& o, const std::optional<ModelSpec>& spec = std::nullopt);

/// The workload flags every row's `actmem estimate` command repeats: the model and each workload
/// option whose value `estimate` would not take by itself, in the table's order:
/// "--model llama-3-8b --framework megatron [--attention sdpa --lora-rank 16 ...]".
std::string plan_workload_flags(const PlanOptions& o);
/// The machine's flags for the same commands: " --gpu h100-80gb [--gpu-memory 80GiB]".
std::string plan_machine_flags(const MachineOptions& m);

/// `plan --json` for a setup's result.
nlohmann::json plan_json(const PlanResult& result, const PlanSetup& setup);

}  // namespace actmem
