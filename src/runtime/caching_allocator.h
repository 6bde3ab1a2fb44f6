// PyTorch's CUDA caching allocator (the native backend) as a model: what device memory a sequence of
// tensor allocations and frees reserves. Every rule is read from pytorch/pytorch
// c10/cuda/CUDACachingAllocator.cpp @001074d2 (DeviceCachingAllocator; cited per function in the
// .cc) and c10/core/AllocatorConfig.cpp @065861fb (PYTORCH_CUDA_ALLOC_CONF).
//
// What is modelled: 512-byte rounding and roundup_power2_divisions; the small (<= 1 MiB) and large
// pools; 2 MiB small segments, 20 MiB segments for 1-10 MiB requests, 2 MiB rounding above; best fit
// by (stream, size, address); block splitting and when it is refused; max_split_size_mb and
// max_non_split_rounding_mb; merging of freed neighbours; the OOM retries (free oversize blocks, then
// every unsplit cached block); empty_cache; garbage_collection_threshold under a memory fraction;
// expandable_segments (2 MiB / 20 MiB pages mapped at the lowest address that fits, unmapped on
// release); per-stream pools. Not modelled: cross-stream uses (record_stream) that delay a free,
// CUDA-graph private pools, cudaMallocAsync. Device addresses are not the driver's: segments get
// increasing addresses, which only decides ties between cached blocks of equal size.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actmem/expected.h"

namespace actmem {

/// PYTORCH_CUDA_ALLOC_CONF as AllocatorConfig::parseArgs reads it (the native backend's options).
struct AllocatorConfig {
  static constexpr int kIntervals = 16;  // roundup_power2_divisions: one per power of two from 1 MiB
  int64_t max_split_size = std::numeric_limits<int64_t>::max();  // max_split_size_mb; default: no limit
  int64_t max_non_split_rounding = 20 << 20;                     // max_non_split_rounding_mb
  std::array<int64_t, kIntervals> roundup_power2_divisions{};    // 0: plain 512-byte rounding
  double garbage_collection_threshold = 0;                       // acts only under a memory fraction
  bool expandable_segments = false;
  std::string text;  // what was parsed, as given

  /// "expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]".
  /// Options without effect on device memory (release_lock_on_cudamalloc, pinned_*) are accepted.
  /// Example: AllocatorConfig::parse("max_split_size_mb:128")->max_split_size == 128 << 20.
  static Expected<AllocatorConfig> parse(std::string_view text);
  /// The divisions for a request of `size` bytes (AllocatorConfig::roundup_power2_divisions).
  int64_t divisions(int64_t size) const;
};

/// The allocator's statistics, as torch.cuda.memory_stats() names them (aggregate over both pools).
struct AllocatorStats {
  int64_t allocated = 0, allocated_peak = 0;  // "allocated_bytes": rounded block sizes (max_memory_allocated)
  int64_t requested = 0, requested_peak = 0;  // "requested_bytes": the sizes asked for
  int64_t reserved = 0, reserved_peak = 0;    // "reserved_bytes": segments and mapped pages (max_memory_reserved)
  int64_t segments = 0;                       // "segment.all.current"
  int64_t device_allocs = 0, device_frees = 0;  // "num_device_alloc" / "num_device_free"
  int64_t alloc_retries = 0, ooms = 0;          // "num_alloc_retries" / "num_ooms"
};

/// One block of a segment, as torch.cuda.memory_snapshot() lists it.
struct SegmentBlock {
  int64_t size = 0, requested = 0;
  bool allocated = false;
};
struct SegmentInfo {
  int64_t address = 0, size = 0;
  int stream = 0;
  bool large = false, expandable = false;
  std::vector<SegmentBlock> blocks;
};

/// What the allocator asked of the driver, in order (a snapshot's segment_* trace entries).
struct SegmentEvent {
  enum Kind { kAlloc, kFree, kMap, kUnmap } kind = kAlloc;  // cudaMalloc, cudaFree, pages mapped / unmapped
  int64_t address = 0, size = 0;
  int stream = 0;
};

/// The device the allocator runs on.
struct AllocatorDevice {
  int64_t capacity = 0;        // bytes cudaMalloc / cuMemCreate can still hand out; 0: unlimited
  int64_t total = 0;           // the GPU's total memory (memory fraction, expandable address space)
  double memory_fraction = 0;  // torch.cuda.set_per_process_memory_fraction; 0: not set
};

/// The model. Example:
///   CachingAllocator a(*AllocatorConfig::parse(""));
///   a.malloc(3 << 20);  // a 3 MiB tensor: a 20 MiB segment, split
///   a.stats().reserved == 20 << 20
class CachingAllocator {
 public:
  explicit CachingAllocator(AllocatorConfig config, AllocatorDevice device = {});
  ~CachingAllocator();
  CachingAllocator(CachingAllocator&&) noexcept;
  CachingAllocator& operator=(CachingAllocator&&) noexcept;

  /// A block for `bytes` on `stream`, as DeviceCachingAllocator::malloc: its handle, or -1 where
  /// PyTorch raises OutOfMemoryError (after both retries).
  int64_t malloc(int64_t bytes, int stream = 0);
  /// DeviceCachingAllocator::free of a handle malloc returned.
  void free(int64_t handle);
  /// torch.cuda.empty_cache(): every unsplit cached segment back to the driver.
  void empty_cache();

  const AllocatorStats& stats() const;
  /// The size the block of `handle` has (its request rounded), and its address.
  int64_t block_size(int64_t handle) const;
  int64_t block_address(int64_t handle) const;
  /// The largest cached free block (what an OOM message calls "reserved but unallocated" at most).
  int64_t largest_free_block() const;
  /// The segments in address order.
  std::vector<SegmentInfo> snapshot() const;
  /// Every segment event so far.
  const std::vector<SegmentEvent>& segment_events() const;

  /// A cudaMalloc segment as it was when a trace begins (setCheckpointPoolState's idea): at its
  /// address, its blocks in order, the allocated ones held; their handles, in block order. An
  /// error for an expandable segment, an empty one or one that overlaps another.
  Expected<std::vector<int64_t>> restore(const SegmentInfo& segment);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// round_size: the block size a request of `bytes` gets. Example: rounded_size(1, {}) == 512.
int64_t rounded_size(int64_t bytes, const AllocatorConfig& config);

}  // namespace actmem
