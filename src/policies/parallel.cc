#include "policies/parallel.h"

#include <fmt/format.h>

#include "policies/layout_checks.h"
#include "model/model_spec.h"

namespace actmem {

std::string expert_grid_message(const ParallelLayout& p) {
  if (p.etp == 0)  // etp = tp: ep·tp | tp·cp·dp is ep | cp·dp
    return fmt::format("@ep {} must divide cp·dp = {}: expert parallelism is carved out of the data- and "
                       "context-parallel ranks (with @etp below @tp, of tensor-parallel ranks too: MoE parallel "
                       "folding)",
                       p.ep, p.cp * p.dp);
  return fmt::format("@ep {} × @etp {} = {} must divide tp·cp·dp = {}: the experts' grid (etp × ep × expert data "
                     "parallelism) is built from the same ranks (Megatron's MoE parallel folding)",
                     p.ep, p.etp, p.ep * p.etp, p.tp * p.cp * p.dp);
}

Expected<void> validate_layout(const ModelSpec& model, const ParallelLayout& layout) {
  detail::MessageReporter r;
  if (!detail::check_parallel(model, detail::TpFacts::of(model), layout, r)) return r.error;
  return {};
}

Expected<void> validate_sequence(int64_t seq_len, const ParallelLayout& layout) {
  detail::MessageReporter r;
  if (!detail::check_sequence(seq_len, layout, r)) return r.error;
  return {};
}

}  // namespace actmem
