#include "policies/parallel.h"

#include "policies/layout_checks.h"
#include "model/model_spec.h"

namespace actmem {

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
