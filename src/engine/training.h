// A training step's peak memory per GPU: static part (weights, gradients, optimizer state) +
// saved activations in flight + the largest transient of the step + a reserve allowance.
// Composes static_memory.h and activation.h; renderers print the result.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tensors/activation.h"
#include "report/breakdown.h"
#include "util/expected.h"
#include "model/model_spec.h"
#include "model/params.h"
#include "policies/static_memory.h"

namespace actmem {

struct TrainingOptions {
  StaticOptions static_options;    // its .parallel is the layout used everywhere
  ActivationOptions activation;    // its .parallel is overwritten with static_options.parallel
  Bytes reserve{0};                // CUDA context + allocator slack: an allowance, --reserve
};

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

/// Example: estimate_training(load_preset("llama-3-70b").value(), opts)->total().
Expected<TrainingEstimate> estimate_training(const ModelSpec& model, TrainingOptions options);

/// Static memory only, for a model known by its parameter count (`--params 7.5e9`).
Expected<TrainingEstimate> estimate_training_params_only(int64_t params, TrainingOptions options);

}  // namespace actmem
