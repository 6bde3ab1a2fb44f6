// The cuBLAS workspaces term (Totals::workspaces; policies/workspaces.h has the rules and sources).
#pragma once

#include "policies/options.h"
#include "policies/workspaces.h"
#include "report/breakdown.h"

namespace actmem::detail {

/// Term `cublas_workspaces`: "2·W_torch + W_TE" with the values, and where each comes from.
Term workspaces_term(const Workspaces& ws, const Workload& workload);

}  // namespace actmem::detail
