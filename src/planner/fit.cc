// actmem.h first: it declares what the planner builds on, then includes the planner's headers.
#include "engine/prepared.h"
#include "planner/fit.h"

#include <cmath>

namespace actmem {

int64_t communicator_count(const ParallelLayout& p) {
  int64_t n = 0;
  for (int64_t g : {p.tp, p.cp, p.dp, p.pp, p.ep}) n += g > 1 ? 1 : 0;
  return n;
}

FitVerdict check_fit(const Totals& t, const ParallelLayout& p, Bytes capacity, const Allowances& a) noexcept {
  FitVerdict v;
  v.capacity = capacity;
  v.cuda_context = a.cuda_context;
  v.nccl_groups = communicator_count(p);
  v.nccl = Bytes{a.nccl_per_group.count() * v.nccl_groups};
  v.fragmentation = Bytes{static_cast<int64_t>(std::ceil(a.fragmentation * static_cast<double>(t.total)))};
  v.allowance = Bytes{v.cuda_context.count() + v.nccl.count() + v.fragmentation.count()};
  v.needed = Bytes{t.total + v.allowance.count()};
  v.headroom = Bytes{capacity.count() - v.needed.count()};
  v.fits = v.headroom.count() >= 0;
  v.overflow_stage = v.fits ? -1 : t.peak_stage;
  return v;
}

}  // namespace actmem
