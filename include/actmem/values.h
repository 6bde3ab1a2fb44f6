// The plain values the public API (actmem.h) and the library share, so that each has one home:
// an option's value as a front end gives it, and the numbers of one layout's per-GPU memory that
// evaluate() fills (the fast path: no strings, no allocation). The standard library only.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "actmem/expected.h"  // ErrorKind

namespace actmem {

/// An option's value as a front end received it: a flag, a whole number, a real number or text
/// (the option tables' kinds: policies/option_table.h).
using OptionValue = std::variant<bool, int64_t, double, std::string>;

/// Per-GPU peak of one layout, as plain numbers (bytes unless said otherwise). On the most loaded
/// GPU: the pipeline stage whose static + activations in flight + largest transient is largest.
struct Totals {
  int64_t total = 0;          // weights + gradients + optimizer + activations + transient + reserve
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;      // on the GPU (0 when offloaded)
  int64_t cpu_optimizer = 0;  // offloaded to host memory
  int64_t paged_optimizer = 0;  // of optimizer: bitsandbytes paged state in unified memory
  int64_t activations = 0;    // saved activations in flight on the peak stage (on the GPU)
  int64_t host_activations = 0;  // of the saved activations: offloaded to host memory (--offload-activations)
  int64_t transient = 0;      // the largest transient of the step on the peak stage
  int64_t reserve = 0;
  // TransformerEngine's cached fp8 weight copies on the peak stage (framework megatron, @fp8; in
  // `total`, not in `weights`): 2 bytes per TE linear weight element + 4 per linear (te_rules.h).
  int64_t fp8_weight_cache = 0;
  // cuBLAS workspaces in PyTorch's allocator all job long (framework megatron: two of PyTorch's, one
  // of TE's under the TE spec; policies/workspaces.h); in `total`, the same on every stage.
  int64_t workspaces = 0;
  int64_t peak_stage = 0;     // pipeline rank of the peak GPU
  int64_t params_on_gpu = 0;  // parameters the peak stage's GPU holds (after TP/EP, before ZeRO)

  // Activations (zero for a parameter-count-only model).
  int64_t per_layer = 0;               // one middle layer, per GPU
  int64_t activations_total = 0;       // whole model, one micro-batch
  int64_t in_flight_max = 0;           // the most loaded stage's activations in flight
  int64_t in_flight_stage = 0;
  int64_t in_flight_micro_batches = 0;
  int64_t recompute_peak = 0;          // one recomputed segment re-run in backward
  double forward_flops = 0;            // one micro-batch, whole model
  double recompute_flops = 0;
  // The busiest pipeline stage's share of a micro-batch's work (3·forward + recompute FLOPs) times
  // pp: 1 when stages are balanced, > 1 when one stage (its layers, the LM head) holds more.
  double stage_imbalance = 1;

  // Why evaluate() returned false: the kind and the option at fault (explain() has the message).
  ErrorKind error = ErrorKind::kInvalid;
  const char* error_field = "";
};

/// One pipeline stage's GPU (bytes), as the engine accounted it; the peak stage's equals Totals.
struct StageTotals {
  int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0, transient = 0;
  int64_t total = 0;  // the sum (reserve not included)
  int64_t fp8_weight_cache = 0;  // in total (Totals::fp8_weight_cache)
  int64_t workspaces = 0;        // in total (Totals::workspaces)
  // Held after the step and not at its peak, so not in total: Megatron's received pipeline inputs
  // with their gradients (policies/pipeline_inputs.h).
  int64_t pipeline_inputs_kept = 0;
  int64_t grad_copies_kept = 0;  // and the fp32 copies of 16-bit gradients (policies/grad_copies.h)
  int64_t static_bytes() const { return weights + gradients + optimizer + fp8_weight_cache + workspaces; }
  int64_t after_step() const { return static_bytes() + pipeline_inputs_kept + grad_copies_kept; }
};

}  // namespace actmem
