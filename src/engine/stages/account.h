// The stages of account() (engine.h): each stage is one file here, with its check (run first, in
// the order below, so that the first error reported stays the same), its accounting, and what it
// records for explain(). account() only sequences them:
//
//   checks.cc        every stage's check of the layout, in the order errors are reported
//   param_only.cc    --params: static memory of pp equal pseudo-layers, nothing else
//   layer_kinds.cc   each layer kind's bytes and FLOPs under each policy, bound to the layout
//   activations.cc   one micro-batch of the whole model under the recomputation plan
//   static_memory.cc parameters per stage, their static bytes, TE's fp8 weight cache
//   recompute.cc     the recomputed segment's transient and the recomputation FLOPs
//   transients.cc    ZeRO-3 / FSDP2 gathers, the loss, the nf4 dequantized weight, gradient
//                    accumulation: the largest transient of a stage
//   offload.cc       --offload-activations, --cpu-offloading-num-layers: what stays on the GPU
//   pipeline.cc      the pipeline walk: micro-batches in flight per rank, the peak stage
//
// The hot path (evaluate()) passes no RecordingSink: a stage records only when `rec` is set, and
// allocates nothing after the first call of a size (Scratch).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/engine.h"

namespace actmem::detail {

/// A polynomial's value; throws OverflowError when it overflows 64 bits.
int64_t eval(const Polynomial& poly, const SymValues& v);

/// Scratch space reused by every evaluation on a thread: after the first call of a size, the hot
/// path allocates nothing.
struct Scratch {
  std::vector<KindBytes> kinds;
  std::vector<int64_t> kind_per_rank;  // parameters of one layer of each kind on one GPU
  std::vector<int64_t> kind_expert;    // of which routed experts
  std::vector<int64_t> kind_dense_vectors, kind_expert_vectors;  // of each, those in 1-D tensors (Muon's rest)
  std::vector<double> kind_work;       // FLOPs of one layer of each kind per micro-batch: 3·forward (+ the
                                       // attention core again under selective recomputation)
  std::vector<int64_t> chunk_layer_bytes, chunk_bytes, counts, step;
  std::vector<int64_t> kind_rerun;  // full recomputation: layers of each kind rerun
  std::vector<int64_t> kind_fp8_elements;  // TE fp8 weight cache: weight elements of one layer per TP rank
  std::vector<int64_t> kind_fp8_copies;    // and its fp8 weight copies (one scale_inv each)
  std::vector<int64_t> kind_offload_kept;  // --cpu-offloading-num-layers: what TE leaves on the GPU per layer
  std::vector<int64_t> kind_fp8_bytes;     // and its bytes (te_fp8_weight_cache_layer_bytes)
  /// evaluate(): the layer kinds' bytes and FLOPs, the embedding's and the head's, of the last few
  /// bindings. They are a function of the prepared model, the graph variant and the symbol values
  /// alone, and a search visits each binding for many layouts (ZeRO stage, recomputation,
  /// offloading, pipeline shapes differ; the symbols do not), so the polynomials are evaluated once.
  struct Bound {
    uint64_t prepared = 0;  // Prepared::id; 0: empty
    std::size_t variant = 0;
    SymValues values{};
    std::vector<KindBytes> kinds;
    int64_t embedding = 0, head_loss = 0;
  };
  std::array<Bound, 4> bound;
  std::size_t next_bound = 0;
};
Scratch& scratch();

/// What the transients stage found: each transient's bytes, -1 where it does not exist.
struct Transients {
  Bytes zero3{-1};                // ZeRO-3's gathered layer
  Bytes recompute{-1};            // the recomputed segment (recompute.cc)
  Bytes logits_grad{-1};          // the loss backward, on the last stage only
  Bytes dequantized{-1};          // a 4-bit base's dequantized linear
  Bytes offload_working_set{-1};  // --offload-activations: the tensors brought back in backward
  Bytes accumulated_grad{-1};     // --grad-accum: AccumulateGrad's new gradient
  Fsdp2Transient fsdp2;           // torchtitan: on top of the largest of the others
  // Offloading: what stays on the GPU of the head and shared storages (offload.h).
  Bytes offload_head_gpu{0};
  Bytes offload_shared_gpu{0};
  // --cpu-offloading-num-layers (cpu_offloading.h).
  CpuOffloadSplit cpu_off{};
  int64_t cpu_off_shared_host = 0;
};

/// One layout's accounting as the stages share it: the inputs, the binding, and what each stage
/// found for the ones after it. account() creates it and runs the stages over it in order.
struct Account {
  const Prepared& p;
  const Layout& l;
  Totals& t;
  RecordingSink* rec;  // explain(): what the report formats; evaluate(): nullptr
  Scratch& s = scratch();
  const ParallelLayout& par = l.parallel;
  const Workload& w = p.workload;
  // layer_kinds.cc
  Binding b{};
  SymValues v{};            // b.values with the last kind's FFN bound (what the regions are evaluated with)
  std::size_t num_kinds = 0;
  double seq = 0, batch = 0, tokens = 0;  // s, b and s·b as doubles (FLOPs)
  int64_t embedding = 0;    // bytes one micro-batch keeps of the embedding
  int64_t head_loss = 0;    // and of the final norm, LM head and loss
  // activations.cc
  RecomputePlan plan{};
  int64_t shared = 0;       // storages shared by all layers, counted once
  Bytes layers{0};          // all layers of one micro-batch
  // static_memory.cc
  int64_t largest_layer = 0;  // parameters of the largest layer on one GPU
  bool fp8_cache_on = false;
  // transients.cc
  Transients tr;
};

// --- the stages, in the order account() runs them ---

/// checks.cc: every check of the layout, each stage's in the order its errors are reported.
template <typename Reporter>
bool check_layout(const Prepared& p, const Layout& l, Reporter& reporter);

/// param_only.cc: --params: the stage with the most static bytes is the peak; nothing else is known.
void account_param_only(const Prepared& p, const Layout& l, Totals& t, RecordingSink* rec);

/// layer_kinds.cc: binds the layout and evaluates each layer kind's bytes (every policy) and FLOPs,
/// the embedding's and the head's bytes.
void bind_layer_kinds(Account& a);

/// activations.cc: the recomputation plan, the shared storages, one micro-batch of the whole model.
void account_activations(Account& a);
/// What layers [first, first + n) keep as one recomputation unit (positions 0 .. n−1).
Bytes kept_run(const Account& a, int64_t first, int64_t n);

/// static_memory.cc: the parameters of one layer of each kind on one GPU, TE's fp8 cache per kind.
void account_layer_params(Account& a);
/// The parameters and static bytes of pipeline rank `rank`; adds the rank's work for one
/// micro-batch to `work` (pp > 1).
struct RankStatic {
  StageParams params;
  StageStatic bytes;
  Bytes fp8_cache{0};
  int64_t fp8_elements = 0;  // the stage's TE linear weight elements per TP rank
  int64_t fp8_copies = 0;    // and its fp8 weight copies
};
RankStatic rank_static(Account& a, int64_t rank, double* work);

/// recompute.cc: the extra bytes alive while one unit is rerun in backward, and its FLOPs.
void account_recompute(Account& a);

/// transients.cc: every transient of the step; the largest of them on a stage (the last holds the loss's).
void account_transients(Account& a);
Bytes largest_transient(const Account& a, bool last);
/// The same transients by name, those that exist, in the order of the step (the loss's backward
/// first); FSDP2's unsharded working set, which comes on top of the largest, is not among them.
void list_transients(const Account& a, bool last, std::vector<NamedTransient>& out);

/// offload.cc: what offloading leaves on the GPU and its working set in backward.
void account_offload(Account& a);
/// The saved activations of a stage that stay on the GPU, of `in_flight` in all, and those in host memory.
Bytes activations_on_gpu(const Account& a, Bytes in_flight);
int64_t activations_on_host(const Account& a, Bytes in_flight, Bytes on_gpu);

/// pipeline.cc: per rank its chunks' layers × micro-batches in flight, its static bytes and
/// transients; the peak stage sets the totals.
void account_pipeline(Account& a);

}  // namespace actmem::detail
