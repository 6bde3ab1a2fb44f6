// The note on what Megatron's last pipeline stage holds after the step beside its static part
// (policies/pipeline_inputs.h has the rule and its source).
#pragma once

#include "engine/engine.h"

namespace actmem::detail {

/// Megatron with pp > 1: what the last stage (the rank Megatron logs) holds after the step beside its
/// static part, the received pipeline inputs with their gradients, as a note of `e`.
void add_pipeline_inputs_note(const Prepared& p, const Layout& o, TrainingEstimate& e);

}  // namespace actmem::detail
