// The transients of the step (ZeRO-3's gathered layer, the recomputed segment, the loss backward,
// a dequantized 4-bit linear, offloading's working set, gradient accumulation): each a real tensor
// size, the largest one counted in the peak.
#pragma once

#include "engine/engine.h"

namespace actmem::detail {

/// The transients of the peak stage, each a real tensor size; only the largest is in the peak,
/// since they do not coincide (the logits gradient exists at the start of backward on the last
/// stage, a ZeRO-3 gather around each layer).
Breakdown describe_transients(const Prepared& p, const Layout& o, const Totals& t, const RecordingSink& rec);

/// The largest transient of e.transients (the first of equals), as account() chose it, added to e.memory.
void add_peak_transient(TrainingEstimate& e);

}  // namespace actmem::detail
