// vLLM v0.19's part of serve.cc: the checks of its settings and its KV budget computed over
// serve's per-rank reports (serve/vllm.h has the rules themselves). Internal to src/serve/.
#pragma once

#include "model/model_spec.h"
#include "report/breakdown.h"
#include "serve/serve.h"
#include "actmem/expected.h"

namespace actmem {

/// vLLM refuses a max_model_len beyond what it derives from the config (vllm/config/model.py:2157-2170).
Expected<void> check_vllm_context(const ModelSpec& model, const ServeOptions& options);

/// What vLLM's settings must be, and what vLLM has no counterpart of (nothing to check without vLLM).
Expected<void> check_vllm_options(const ModelSpec& model, const ServeOptions& options);

/// Takes a report's weights, activation peak and non-torch memory out of a budget, term by term.
void subtract_from_budget(Breakdown& budget, const ServeReport& serving);

/// vLLM's own figures replace the engine-agnostic budget: the binding rank's (the fewest blocks).
Expected<void> apply_vllm_capacity(CapacityReport& c, const ModelSpec& model, const ServeReport& serving,
                                   const CapacityOptions& options);

}  // namespace actmem
