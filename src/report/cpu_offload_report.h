// --cpu-offloading-num-layers written out (policies/cpu_offloading.h has the rule and its source):
// the GPU part of the saved activations as the memory term, and a note saying how many layers'
// activations live where and the PCIe bytes each micro-batch moves.
#pragma once

#include <string>

#include "engine/prepared.h"
#include "engine/engine.h"
#include "report/breakdown.h"

namespace actmem::detail {

/// The memory term `activations` under Megatron's CPU offloading: what stays on the GPU.
Term cpu_offload_activations_term(const Totals& t, const RecordingSink& rec, int64_t num_layers, int64_t n);
std::string cpu_offload_note(const Totals& t, const RecordingSink& rec, int64_t num_layers, int64_t n,
                             int64_t grad_accum);

}  // namespace actmem::detail
