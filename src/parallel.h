// How a training job is laid out over GPUs; shared by static memory and activations.
#pragma once

#include <cstdint>

#include "expected.h"

namespace actmem {

struct ModelSpec;

/// Data (dp), tensor (tp, with sequence parallelism sp), pipeline (pp, with vpp virtual stages
/// per rank for the interleaved schedule), context (cp) and expert (ep) parallel degrees.
struct ParallelLayout {
  int64_t dp = 1;
  int64_t tp = 1;
  bool sp = false;
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t cp = 1;
  int64_t ep = 1;
  int64_t num_micro_batches = 0;  // per pipeline flush; 0 = as many as the schedule can hold (>= pp)
};

/// Checks the layout against the model: heads and KV heads divisible by tp, layers by pp·vpp,
/// experts by ep, and so on. The Error names the flag and a value that would work.
Expected<void> validate_layout(const ModelSpec& model, const ParallelLayout& layout);

}  // namespace actmem
