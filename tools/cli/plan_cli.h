// `actmem plan` (which layout fits N GPUs and runs fastest) and the fit verdict that `estimate
// --gpu` adds: capacity, allowances, headroom, FITS / DOES NOT FIT, and what to change.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "api/library.h"

namespace CLI {
class App;
}

namespace actmem::cli {

/// The GPU, the allowances and the machine's speeds, as typed (shared by estimate and plan): the
/// library's MachineOptions (planner/machine.h), which to_machine() parses.
using FitFlags = MachineOptions;
void add_fit_flags(CLI::App* cmd, FitFlags& f);

/// `estimate --gpu`: the estimate's table (or JSON) with the fit verdict added, and, when it does
/// not fit, what to change. Returns the exit code (0; 2 on bad flags).
/// `extra`: keys added to the JSON (the --from config's echo).
int print_with_fit(const PreparedModel& model, const Report& report, const FitFlags& f, bool json,
                   const std::string& rendered, const nlohmann::json& extra = nullptr);

/// Registers `plan` on `app`; the runner prints and returns the exit code (2: bad input or nothing fits).
std::function<int()> add_plan_command(CLI::App& app);

}  // namespace actmem::cli
