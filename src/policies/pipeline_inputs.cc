#include "policies/pipeline_inputs.h"

#include <algorithm>

#include "util/bytes.h"
#include "util/dtype.h"

namespace actmem {

PipelineInputsKept pipeline_inputs_kept(const Workload& w, const Layout& l, int64_t hidden, int64_t rank) {
  const ParallelLayout& p = l.parallel;
  if (w.framework != Framework::kMegatron || p.pp <= 1) return {};
  const int64_t vpp = std::max<int64_t>(p.vpp, 1);
  const int64_t cp = std::max<int64_t>(p.cp, 1);
  const int64_t tp = p.sp ? std::max<int64_t>(p.tp, 1) : 1;
  // schedules.py get_tensor_shapes: seq_length // cp, then // tp under sequence parallelism.
  const int64_t seq = l.seq_len / cp / tp;
  PipelineInputsKept k;
  k.chunks = rank == 0 ? vpp - 1 : vpp;  // rank 0's first chunk embeds its own input
  k.tensor_bytes = checked_mul(checked_mul(checked_mul(seq, l.micro_batch), hidden), dtype_bits(w.dtype) / 8);
  return k;
}

}  // namespace actmem
