// The planner's JSON, shared by every front end (the CLI's `estimate --gpu --json` and `plan
// --json`, the web page): the fit verdict, the changes that make a layout fit, a ranked layout and
// the whole plan. Front ends add only what they alone know (the CLI's --from config echo).
//
//   auto j = actmem::report_json(report);
//   actmem::add_fit_json(j, prepared, report, "h100-80gb", gpu.total, {}, actmem::cluster_for(gpu));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/prepared.h"
#include "planner/plan.h"  // PlanResult, Change; FitVerdict (fit.h)

namespace actmem {

/// The global batch an estimate's layout implies: dp · b · micro-batches (the schedule's default,
/// pp, when num_micro_batches is not given). Example: {dp 4, b 2, pp 2} -> 16.
int64_t implied_global_batch(const Layout& layout);

/// The verdict as `fit` in `estimate --gpu --json`: capacity, allowances, needed, headroom, fits.
nlohmann::json fit_json(const FitVerdict& verdict, std::string_view gpu_name, const Allowances& allowances);
/// The changes of what_to_change(): flags, saved/needed bytes, relative step-time cost, fits.
nlohmann::json changes_json(const std::vector<Change>& changes);

/// `estimate --gpu --json`: adds "fit" (and, when it does not fit, "fit.changes") to report_json(report).
void add_fit_json(nlohmann::json& json, const PreparedModel& model, const Report& report, std::string_view gpu_name,
                  Bytes capacity, const Allowances& allowances, const Cluster& cluster);

/// One ranked layout of `plan --json`. `flags_prefix`: the workload's `actmem estimate` flags (model,
/// framework, dtypes); `flags_suffix`: the machine's (" --gpu h100-80gb").
nlohmann::json planned_layout_json(const PlannedLayout& layout, const std::string& flags_prefix,
                                   const std::string& flags_suffix, const Cluster& cluster);

/// `plan --json`: {"plan": {model, gpus, ..., layouts[], closest}}.
nlohmann::json plan_json(const PlanResult& result, const PlanRequest& request, std::string_view model_name,
                         std::string_view gpu_name, const std::string& flags_prefix, const std::string& flags_suffix);

}  // namespace actmem
