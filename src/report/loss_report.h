// The --loss switch written out (policies/loss_impl.h has the rules and their sources): the loss
// transient as a term with its formula, and the note saying what the loss keeps.
#pragma once

#include <string>

#include "policies/options.h"
#include "report/breakdown.h"

namespace actmem::detail {

/// The transient of a chunked or fused loss: key `chunked_loss` or `fused_linear_ce_chunk`; its
/// bytes equal loss_transient_bytes() for the same arguments.
Term describe_loss_transient(const Workload& w, int64_t s_local, int64_t b, int64_t hidden, int64_t vocab);
/// One line for the report's notes.
std::string loss_note(const Workload& w, int64_t hidden, int64_t vocab);

}  // namespace actmem::detail
