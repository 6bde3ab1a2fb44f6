// The notes on what Megatron's last pipeline stage holds after the step beside its static part
// (policies/pipeline_inputs.h and policies/grad_copies.h have the rules and their sources).
#pragma once

#include "engine/engine.h"

namespace actmem::detail {

/// Megatron with pp > 1: what the last stage (the rank Megatron logs) holds after the step beside its
/// static part, the received pipeline inputs with their gradients, as a note of `e`.
void add_pipeline_inputs_note(const Prepared& p, const Layout& o, TrainingEstimate& e);

/// Megatron with 16-bit gradient buffers and fp32 master weights: the fp32 gradient copies the
/// optimizer keeps after the step (the last stage's, as recorded), as a note of `e`.
void add_grad_copies_note(const Prepared& p, const RecordingSink& rec, TrainingEstimate& e);

}  // namespace actmem::detail
