// --offload-activations written out (policies/offload.h has the rule and its source): the GPU part
// of the saved activations as the memory term, the backward working set as a transient, a note.
#pragma once

#include <string>

#include "engine/prepared.h"
#include "report/breakdown.h"

namespace actmem::detail {

/// The memory term `activations` when offloading: what stays on the GPU, with the host part named.
Term offloaded_activations_term(const Totals& t);
/// The transient `offload_working_set` (an allowance): one layer's saved tensors brought back.
Term offload_working_set_term(int64_t bytes, Recompute recompute);
std::string offload_note(const Totals& t);

}  // namespace actmem::detail
