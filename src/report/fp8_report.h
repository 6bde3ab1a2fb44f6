// TE's cached fp8 weight copies (Totals::fp8_weight_cache) written out for the block-scaled recipes
// and Blackwell (tensors/te_rules.h has the rules and their sources); the delayed / tensorwise
// Hopper term stays in report.cc as it was.
#pragma once

#include <cstdint>

#include "policies/options.h"
#include "report/breakdown.h"

namespace actmem::detail {

/// Term `fp8_weight_cache` of `bytes` (the engine's) over `elements` weight elements of the stage's
/// `layers` layers at tensor-parallel size `tp`: data bytes per element times Ψ, plus the scales
/// (`copies`: the stage's cached weight copies, one fp32 scale_inv each under the per-tensor recipes;
/// 4 per layer for dense standard-attention layers, more with MoE experts and MLA).
Term describe_fp8_weight_cache(const MegatronOptions& options, int64_t bytes, int64_t elements, int64_t layers,
                               int64_t tp, int64_t copies);
/// The same term with @fp8_param_gather (te_rules.h): the fp8 weights are the parameters, so what
/// stays is Hopper's transpose (1 byte per element; none on Blackwell) and a scale_inv per linear.
Term describe_fp8_param_extras(const MegatronOptions& options, int64_t elements, int64_t layers, int64_t tp,
                               int64_t copies);

}  // namespace actmem::detail
