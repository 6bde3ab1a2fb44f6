// The workspaces term (Totals::workspaces: cuBLAS's, TE's and Megatron's global memory buffer;
// policies/workspaces.h has the rules and sources).
#pragma once

#include "engine/engine.h"
#include "policies/options.h"
#include "policies/workspaces.h"
#include "report/breakdown.h"

namespace actmem::detail {

/// Term `cublas_workspaces`: "2·W_torch + W_TE" with the values, and where each comes from.
/// With Megatron's global memory buffer, "+ elements·e" and its source.
Term workspaces_term(const Workspaces& ws, const Workload& workload);

/// workspaces_term of the prepared job's workspaces with the layout's global memory buffer on pipeline
/// stage `stage` (the last one holds the output layer).
Term layout_workspaces_term(const Prepared& p, const Layout& layout, int64_t stage);

}  // namespace actmem::detail
