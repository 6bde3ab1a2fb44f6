// Does a layout fit its GPU? The engine's peak (Totals.total) is what PyTorch's caching allocator
// holds; the GPU also holds what the allocator never sees. Those are named allowances with
// documented defaults (overridable, never silently zero):
//   CUDA context   the driver's per-process state and loaded kernels. PyTorch measured 287,047,680
//                  bytes with CUDA_MODULE_LOADING=LAZY and 666,632,192 without (pytorch/pytorch#86509,
//                  the change that made LAZY PyTorch's default); lazily loaded NCCL / cuBLAS kernels
//                  grow the lazy figure during training: default 512 MiB.
//   NCCL           communicator buffers, per communicator the GPU belongs to (each parallel group of
//                  size > 1): NCCL_BUFFSIZE defaults to 4 MiB (NCCL user guide, environment
//                  variables), per channel and per direction, up to 32 channels on NVSwitch systems:
//                  4 MiB · 2 · 32 = 256 MiB per communicator.
//   fragmentation  the caching allocator's reserved-but-unallocated blocks (block rounding, split
//                  segments; PyTorch "CUDA semantics: memory management"): an assumption of 5% of
//                  the allocator's peak; set 0 with expandable_segments measured on your job.
#pragma once

#include <cstdint>

#include "engine/prepared.h"

namespace actmem {

inline constexpr int64_t kDefaultCudaContextBytes = int64_t{512} << 20;
inline constexpr int64_t kDefaultNcclBytesPerGroup = int64_t{256} << 20;
inline constexpr double kDefaultFragmentation = 0.05;

struct Allowances {
  Bytes cuda_context{kDefaultCudaContextBytes};
  Bytes nccl_per_group{kDefaultNcclBytesPerGroup};
  double fragmentation = kDefaultFragmentation;  // fraction of the allocator's peak
};

struct FitVerdict {
  Bytes capacity{0};       // what the GPU offers (cudaMemGetInfo's total)
  Bytes cuda_context{0};
  Bytes nccl{0};
  int64_t nccl_groups = 0;
  Bytes fragmentation{0};
  Bytes allowance{0};      // cuda_context + nccl + fragmentation
  Bytes needed{0};         // the engine's peak + allowance
  Bytes headroom{0};       // capacity − needed (negative when it does not fit)
  bool fits = false;
  int64_t overflow_stage = -1;  // the pipeline stage whose GPU overflows (the peak stage), -1 when it fits
};

/// Parallel groups of size > 1 a GPU belongs to (one NCCL communicator each): tp, cp, dp, pp, ep.
/// Example: communicator_count({.dp = 2, .tp = 8, .pp = 4}) == 3.
int64_t communicator_count(const ParallelLayout& p);

/// The verdict for a layout the engine evaluated. Never allocates. Example: a 70 GiB peak at tp 8,
/// pp 4, dp 2 on 80 GiB needs 70 + 0.5 + 3·0.25 + 3.5 = 74.75 GiB: fits, headroom 5.25 GiB.
FitVerdict check_fit(const Totals& t, const ParallelLayout& p, Bytes capacity, const Allowances& a) noexcept;

}  // namespace actmem
