// How a training job is laid out over GPUs; shared by static memory and activations.
#pragma once

#include <cstdint>
#include <string>

#include "actmem/expected.h"

namespace actmem {

struct ModelSpec;

/// Data (dp), tensor (tp, with sequence parallelism sp), pipeline (pp, with vpp virtual stages
/// per rank for the interleaved schedule), context (cp) and expert (ep) parallel degrees.
struct ParallelLayout {
  int64_t dp = 1;
  int64_t tp = 1;
  bool sp = false;
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t cp = 1;
  int64_t ep = 1;
  // Megatron --expert-tensor-parallel-size: the routed experts' own TP degree. MoE parallel folding
  // builds the expert grid etp × ep × expert-dp from the same tp × cp × dp ranks (parallel_state.py
  // l.870-880 at d98e8a64: expert_data_parallel_size = world / (etp · ep · pp)). 0 = tp.
  int64_t etp = 0;
  int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  /// The ranks that hold the same expert shard, over which ZeRO / the distributed optimizer shard
  /// the experts: tp·cp·dp / (ep·etp) (Megatron's expt_dp group).
  int64_t expert_dp() const {
    const int64_t grid = ep * expert_tp();
    return grid > 0 && tp * cp * dp >= grid ? tp * cp * dp / grid : 1;
  }
  int64_t num_micro_batches = 0;  // per pipeline flush; 0 = as many as the schedule can hold (>= pp)
  // The interleaved schedule's contiguous micro-batches per virtual stage (Megatron
  // --microbatch-group-size-per-virtual-pipeline-stage, schedules.py get_schedule_table): pp..m; 0 = pp.
  int64_t microbatch_group = 0;
  int64_t microbatch_group_or_pp() const { return microbatch_group > 0 ? microbatch_group : pp; }
  // Uneven pipeline stages (Megatron --decoder-first/last-pipeline-num-layers): layers on the first
  // and last stage; 0 = the even share. The other stages split the rest evenly. Needs vpp = 1.
  int64_t first_stage_layers = 0;
  int64_t last_stage_layers = 0;
  // Megatron --num-distributed-optimizer-instances N: the distributed optimizer (ZeRO-1) shards its
  // state over dp / N ranks, N copies across the data-parallel group (parallel_state.py l.924-929).
  int64_t optimizer_instances = 1;
};

/// Checks the layout against the model: heads and KV heads divisible by tp, layers by pp·vpp,
/// experts by ep, and so on. The Error names the flag and a value that would work.
/// KV heads fewer than tp are replicated (each rank holds one; needs tp % kv == 0), as vLLM and
/// TransformerEngine do; Megatron-LM proper asserts kv % tp == 0.
/// Example: validate_layout(llama_3_70b, {.tp = 3}).error().message names --tp and the valid values.
Expected<void> validate_layout(const ModelSpec& model, const ParallelLayout& layout);

/// Why the experts' grid (ep × expert TP) does not fit in tp × cp × dp. Example (tp 1, dp 2, ep 4):
/// "@ep 4 must divide cp·dp = 2: expert parallelism is carved out of the data- and context-parallel
/// ranks (with @etp, of tensor-parallel ranks too)".
std::string expert_grid_message(const ParallelLayout& layout);

/// Checks the sequence length against the layout: cp needs seq % (2·cp) == 0 (load-balanced causal
/// context parallelism cuts the sequence into 2·cp chunks), sp needs (seq / cp) % tp == 0.
Expected<void> validate_sequence(int64_t seq_len, const ParallelLayout& layout);

}  // namespace actmem
