// A training step's peak memory per GPU: static part (weights, gradients, optimizer state) +
// saved activations in flight + the largest transient of the step + a reserve allowance.
// Composes static_memory.h and activation.h; renderers print the result.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tensors/activation.h"
#include "report/breakdown.h"
#include "model/params.h"
#include "policies/static_memory.h"

namespace actmem {

/// What explain() reports of a training step (Report::estimate).
struct TrainingEstimate {
  ParamCounts params;
  bool param_only = false;                  // --params: no architecture, no activations
  StaticMemory static_memory;
  std::optional<ActivationReport> activations;
  Breakdown transients;                     // each transient of the step as its own term
  std::string peak_transient_key;           // which transient is counted in the total
  Breakdown memory;                         // per GPU: the terms summed into the peak
  Bytes total() const { return memory.total(); }
  std::vector<std::string> notes;
};

}  // namespace actmem
