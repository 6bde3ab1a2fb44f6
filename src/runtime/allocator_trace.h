// A recorded allocation sequence replayed through the caching allocator model: what a job's
// tensors reserve under another PYTORCH_CUDA_ALLOC_CONF, or, for a trace recorded on a GPU, whether
// the model asks the driver for the same segments the real allocator did.
//
// The trace is a JSON file (format "actmem-allocator-trace-1"; tools/snapshot_to_trace.py writes one
// from a torch.cuda.memory._snapshot() pickle):
//   {"format": "actmem-allocator-trace-1", "source": "...",
//    "segments": [{"address": A, "stream": 0, "pool": "large", "blocks": [{"size": S, "allocated": true}]}],
//    "events": [["alloc", address, size, stream, "name"], ["free", address], ["empty_cache"]]}
// `segments` is the allocator's state when the trace begins (empty for a trace from the start);
// `events` are the tensors' allocations (their requested sizes) and frees, in order; an alloc's
// stream and name (what the tensor is: actmem's step timeline names them) may be left out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actmem/expected.h"
#include "runtime/caching_allocator.h"

namespace actmem {

struct TraceEvent {
  enum Kind { kAlloc, kFree, kEmptyCache } kind = kAlloc;
  int64_t address = 0, size = 0;
  int stream = 0;
  std::string name;  // optional: what the tensor is (an alloc's fifth entry)
};

struct AllocatorTrace {
  std::string source;
  std::vector<SegmentInfo> segments;  // at the start
  std::vector<TraceEvent> events;
};

/// Reads the JSON text of a trace; an error names the entry at fault.
Expected<AllocatorTrace> parse_allocator_trace(const std::string& text);
/// The trace as that JSON text.
/// Example: parse_allocator_trace(write_allocator_trace(t))->events.size() == t.events.size().
std::string write_allocator_trace(const AllocatorTrace& trace);

struct TraceSegmentEvent {
  SegmentEvent event;
  int64_t at = 0;  // the index of the trace event that caused it
};

/// One entry of the replay's timeline, as a snapshot's device trace has it: a tensor allocated
/// or freed at the model's address, or a driver call (tools/trace_to_snapshot.py writes them as a
/// snapshot that pytorch.org/memory_viz opens).
struct TimelineEntry {
  enum Kind { kAlloc, kFree, kSegmentAlloc, kSegmentFree, kSegmentMap, kSegmentUnmap } kind = kAlloc;
  int64_t address = 0, size = 0;  // for a tensor its requested size
  int stream = 0;
  int64_t event = -1;  // for a tensor the trace event that allocated it (its name is there); -1: none
};

struct ReplayResult {
  AllocatorStats stats;
  int64_t reserved_at_allocated_peak = 0;  // the cache beside the tensors when they peak
  int64_t oom_at = -1;                     // the event PyTorch raises OutOfMemoryError at; -1: none
  std::vector<TraceSegmentEvent> segment_events;
  std::vector<SegmentInfo> final_segments;
  std::vector<TimelineEntry> timeline;
};

/// Replays `trace` under `config` on `device`; stops at an out-of-memory. Example: a trace of one
/// 3 MiB alloc gives stats.reserved_peak == 20 MiB.
Expected<ReplayResult> replay_trace(const AllocatorTrace& trace, const AllocatorConfig& config,
                                    const AllocatorDevice& device);

}  // namespace actmem
