// The step as a timeline (issue 23): every allocation and free of the peak pipeline stage's GPU in
// the order the step makes them, each a tensor the accounting counts, under the name `explain`
// lists it by. It lays out what account() found (engine/stages/) and derives no byte of its own, so
// its allocated bytes peak at exactly the estimate's peak (Totals::total − reserve):
//
//   held       weights, gradients, optimizer state, TE's fp8 weight cache, workspaces: allocated
//              before the step and held through it (the engine's convention: gradients present at
//              the peak; Megatron's and FSDP's gradient buffers are, HF's set_to_none ones are not);
//   forward    each micro-batch in flight at the peak step, chunk by chunk, layer by layer, the
//              storages its ops save under the recomputation plan (a checkpointed layer its input);
//              the shared storages (RoPE tables, masks) once;
//   peak       at the start of the last micro-batch's backward, each transient of the stage in turn
//              (the loss's backward, a ZeRO-3 gather, the recomputed segment, ...), FSDP2's
//              unsharded working set around them: the largest is the peak;
//   backward   the last micro-batch's saved storages freed, last layer first.
//
// Not events (yet): op outputs nothing saves (freed at once in the real step; the engine does not
// count them), optimizer temporaries, the rest of the pipeline schedule after the peak step. Under
// activation offloading the saved activations on the GPU are one block. Replayed through the
// caching allocator model (runtime/caching_allocator.h) it gives the reserved memory these tensors
// need; exported (to_allocator_trace) it is a trace `actmem allocator --trace` reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "runtime/allocator_trace.h"

namespace actmem::detail {

/// What a tensor of the timeline is, for a chart stacked by kind.
enum class TensorKind : uint8_t { kWeights, kGradients, kOptimizer, kFp8Cache, kWorkspaces, kActivations, kTransient };
const char* tensor_kind_name(TensorKind k);

struct StepEvent {
  bool alloc = true;  // else the free of tensor `id`
  TensorKind kind = TensorKind::kActivations;
  int64_t id = 0;     // an alloc and its free share it (1, 2, ...)
  int64_t bytes = 0;
  std::string name;   // e.g. "mb 2 · layers.3.attn_norm.rstd"
};

struct StepTimeline {
  std::vector<StepEvent> events;
  int64_t allocated_peak = 0;  // Σ allocs − Σ frees at its highest
  int64_t peak_event = -1;     // the alloc at which it is reached first
  std::vector<std::string> notes;
};

/// The timeline of the peak stage of an accounted layout (rec: what account() recorded).
StepTimeline step_timeline(const Prepared& p, const Layout& l, const Totals& t, const RecordingSink& rec);
/// The same, accounting the layout afresh (engine.cc); errors as explain()'s.
Expected<StepTimeline> step_timeline(const PreparedModel& model, const Layout& layout);

/// The timeline replayed through the caching allocator model under `alloc_conf`
/// (PYTORCH_CUDA_ALLOC_CONF; empty: the defaults) on a GPU without a limit.
struct TimelineMemory {
  int64_t events = 0;
  int64_t allocated_peak = 0;  // the tensors' bytes (the estimate's peak without @reserve)
  int64_t rounded_peak = 0;    // the allocator's blocks (512-byte rounding): max_memory_allocated
  int64_t reserved_peak = 0;   // its segments: max_memory_reserved
  int64_t segments = 0;        // cudaMalloc calls (or expandable segments mapped)
  std::vector<std::string> notes;  // the timeline's (StepTimeline::notes)
};
Expected<TimelineMemory> replay_timeline(const StepTimeline& timeline, const std::string& alloc_conf);

/// The timeline as an allocator trace (ids as addresses, stream 0, names kept).
AllocatorTrace to_allocator_trace(const StepTimeline& timeline);

}  // namespace actmem::detail
