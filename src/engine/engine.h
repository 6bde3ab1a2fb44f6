// The engine behind the public API (include/actmem/actmem.h): a model prepared once per workload,
// and one accounting routine, account(), that both evaluate() and explain() run.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/prepared.h"
#include "policies/workspaces.h"
#include "policies/layout_checks.h"
#include "policies/torchtitan_checks.h"
#include "tensors/op_graph.h"
#include "model/params.h"
#include "policies/pipeline_split.h"
#include "policies/recompute_plan.h"
#include "policies/static_memory.h"
#include "policies/fsdp2.h"  // framework torchtitan: FSDP2's sharded state and unsharded transients
#include "policies/finetune.h"
#include "policies/loss_impl.h"  // check_loss, loss_transient_bytes (--loss)
#include "policies/offload.h"    // --offload-activations: what stays on the GPU
#include "policies/cpu_offloading.h"  // --cpu-offloading-num-layers (megatron): TE cpu_offload
#include "policies/frozen_layers.h"  // --frozen-layers: check, frozen weight tensors
#include "policies/grad_accum.h"     // --grad-accum: check, AccumulateGrad's transient
#include "model/weight_tensors.h"

namespace actmem::detail {

struct Prepared {
  uint64_t id = 0;  // unique per prepare() in this process: what evaluate()'s per-thread caches key on
  std::string name;
  bool param_only = false;
  int64_t param_count = 0;  // param_only: the count given
  ModelSpec model;          // empty when param_only
  Workload workload;
  BytesPerParam per_param;
  ParamCounts params;                    // exact, from shapes (empty when param_only)
  std::vector<LayerParams> kind_params;  // the parameters of one layer of each kind
  TpFacts tp_facts;
  std::vector<std::size_t> kind_of;      // layer -> kind
  std::vector<int64_t> kind_prefix;      // (L + 1) × kinds: layers of each kind before layer i
  std::size_t num_kinds = 0;
  /// Layers of kind k among layers [first, end).
  int64_t count(std::size_t k, int64_t first, int64_t end) const {
    return kind_prefix[static_cast<std::size_t>(end) * num_kinds + k] -
           kind_prefix[static_cast<std::size_t>(first) * num_kinds + k];
  }
  std::array<GraphSet, 16> variants;     // by Variant::index()
  bool sp_variants = false;              // sequence_parallel variants built: Megatron MLA
  bool cp_variants = false;              // context_parallel variants built: Megatron MLA, TE spec
  std::size_t middle_kind = 0;           // the kind of layer L/2, the "per layer" figure
  double lm_head_macs = 0;               // h·V per token
  Workspaces workspaces;                 // cuBLAS workspaces held all job long (policies/workspaces.h)
  bool shape_static = false;             // static memory from the weight shapes (finetune.h)
  std::vector<WeightTensor> tensors;     // every weight tensor, when shape_static
};

/// What one layout binds: the per-GPU symbol values and the variant of the graphs.
struct Binding {
  SymValues values{};
  const GraphSet* graphs = nullptr;
  Variant variant;
  PipelineSplit split;       // which layers each pipeline rank holds
  int64_t chunk_layers = 0;  // the largest model chunk (L / (pp·vpp) when even)
};
Binding bind(const Prepared& p, const Layout& l);

/// Bytes one layer kind keeps under each policy, for a binding.
struct KindBytes {
  int64_t none = 0;
  int64_t selective = 0;
  int64_t input = 0;
  int64_t rerun = 0;      // allocated again when rerun under selective (Graph::rerun)
  double flops = 0;       // forward FLOPs of one layer, one micro-batch
  double core_flops = 0;  // of which core attention (QKᵀ and AV)
  double selective_flops = 0;  // what selective recomputation reruns (core attention; + the MLP with recompute_modules mlp)
};

/// The bytes of one storage at the bound symbol values (stages/activations.cc).
int64_t storage_bytes(const Storage& st, const SymValues& v);

/// The layers' groups a breakdown of activations sums (Group's first four, in order).
inline constexpr Group kLayerGroups[] = {Group::kAttention, Group::kMlp, Group::kNorms, Group::kMoe};

/// One transient of a stage (stages/transients.cc list_transients): only the largest is in the peak.
struct NamedTransient {
  const char* name = "";
  int64_t bytes = 0;
};

/// What explain() records beyond the totals, stage by stage (engine/stages/); evaluate() passes a
/// sink that records nothing. The report formats these and derives nothing from the layout.
struct RecordingSink {
  std::vector<Bytes> in_flight_by_stage;
  std::vector<KindBytes> kinds;
  // The activations stage (stages/activations.cc): the binding, and what its plan keeps.
  Binding binding;
  SymValues mid_values{};                   // the binding with the middle layer's FFN
  Recompute listed = Recompute::kNone;        // the policy the middle layer's tensors are listed under
  Recompute layer_policy = Recompute::kNone;  // the one the layers' groups count their storages under
  bool shared_saved = false;  // some layer runs normally: the shared storages its ops save are kept
  bool shared_kept = false;   // some layer is checkpointed: the shared checkpoint inputs are kept
  bool partial = false;       // full recomputation of only the first N layers of each chunk
  std::array<int64_t, std::size(kLayerGroups)> layer_groups{};  // Σ over layers, by kLayerGroups
  int64_t embedding = 0;
  int64_t head_loss = 0;
  int64_t shared = 0;
  int64_t layers_total = 0;
  int64_t first_stage_layers_in_flight = 0;
  int64_t zero3_layer_params = 0;  // Ψ of the largest layer per rank, when the ZeRO-3 transient exists
  int64_t zero3_bytes = -1;        // -1: no ZeRO-3 transient
  int64_t logits_grad = -1;        // -1: the peak stage is not the last
  int64_t dequantized_weight = -1;  // -1: no 4-bit base (finetune.h)
  Fsdp2Transient fsdp2;             // framework torchtitan: FSDP2's unsharded parameters and gradients
  int64_t offload_working_set = -1;  // -1: no activation offloading (offload.h)
  // --cpu-offloading-num-layers (cpu_offloading.h); layers_gpu -1: off.
  int64_t cpu_offload_layers_gpu = -1;   // the decoder layers' saved bytes on the GPU at the peak step
  int64_t cpu_offload_layers_host = 0;   // the offloaded layers' own storages in host memory
  int64_t cpu_offload_shared_host = 0;   // storages every layer saves (RoPE freqs), copied once per offloaded layer
  int64_t cpu_offload_peak_step = 0;     // the layer at which the GPU part peaks
  int64_t cpu_offload_kept_per_layer = 0;  // what an offloaded middle-kind layer leaves on the GPU
  int64_t accumulated_grad = -1;     // -1: no AccumulateGrad transient (grad_accum.h)
  int64_t fp8_weight_elements = 0;   // the peak stage's TE linear weight elements per TP rank (te_rules.h)
  int64_t fp8_weight_copies = 0;     // and its fp8 weight copies, one fp32 scale_inv each (te_rules.h)
  StageParams stage;               // the peak stage's parameters
  FinetuneStatic finetune;         // static memory by weight tensor, when Prepared::shape_static
  std::vector<StageTotals> stages;  // every stage's GPU (Report::stages)
  // The peak stage as the step's timeline lays it out (engine/timeline.h): its chunks'
  // micro-batches in flight, the saved bytes they hold (and what stays on the GPU of them under
  // offloading), the recomputation plan, and its transients as largest_transient compares them.
  std::vector<int64_t> peak_counts;
  int64_t peak_in_flight = 0, peak_on_gpu = 0;
  RecomputePlan plan{};
  std::vector<NamedTransient> peak_transients;
  static constexpr bool kRecords = true;
};
struct NullSink {
  static constexpr bool kRecords = false;
};

/// Micro-batches in flight on pipeline `rank` for each of its `vpp` model chunks, at the step of
/// Megatron's schedule (megatron/core/pipeline_parallel/schedules.py) where they hold the most bytes;
/// `chunk_bytes[j]` is what one micro-batch keeps on chunk j (embedding / head included).
/// 1F1B (forward_backward_pipelining_without_interleaving): rank r holds min(pp − r, M).
/// Interleaved (forward_backward_pipelining_with_interleaving): warm-up w = (pp−r−1)·2 + (vpp−1)·G
/// forwards, G the micro-batch group (pp unless ParallelLayout::microbatch_group; all M·vpp when w
/// reaches that), then each steady step k runs forward w + k and backward k; virtual micro-batch i
/// is chunk (i mod G·vpp)/G in forward and vpp − 1 minus that in backward (get_schedule_table; the
/// last group m mod G when not 0). Every steady step holds w + 1
/// chunk-micro-batches, but which chunks repeats with period pp·vpp: e.g. rank 0 at pp 4, vpp 2,
/// M 8 holds 7 + 4 after the warm-up and 8 + 3 one step later (measured by
/// validation/pipeline_validation.py), so the step with the most bytes is searched. With uniform
/// layers rank 0 holds pp·vpp + pp − 1 chunk-micro-batches, L/pp·(pp + (pp−1)/vpp) layers:
/// Korthikanti's factor 1 + (p−1)/(p·v).
/// `step` is scratch of vpp entries. evaluate() runs this one: it walks the steady steps run by run
/// (O(vpp), see engine.cc) instead of step by step.
void in_flight_per_chunk(const ParallelLayout& p, int64_t rank, const int64_t* chunk_bytes, int64_t* counts,
                         int64_t* step);
/// The same by definition: every steady step's counts and bytes computed afresh, the first step
/// with the most bytes kept, O(pp·vpp²). explain() runs this one, and fast_path_test compares them.
void in_flight_per_chunk_reference(const ParallelLayout& p, int64_t rank, const int64_t* chunk_bytes,
                                   int64_t* counts, int64_t* step);

/// The whole accounting of one layout: checks, activations per stage, static memory per stage,
/// transients, the peak; it sequences the stages of engine/stages/. Returns false when a check
/// fails (the Reporter has the error).
template <typename Reporter, typename Sink>
bool account(const Prepared& p, const Layout& l, Totals& t, Reporter& reporter, Sink& sink);

/// Builds the full report from the same numbers (report.cc).
TrainingEstimate describe(const Prepared& p, const Layout& l, const Totals& t, const RecordingSink& rec);

}  // namespace actmem::detail
