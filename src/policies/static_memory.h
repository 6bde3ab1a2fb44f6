// Static training memory per GPU: weights, gradients and optimizer state, which depend on the
// parameters only (not on sequence or batch), sharded by TP, PP, EP and ZeRO/FSDP over DP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/breakdown.h"
#include "policies/options.h"
#include "policies/parallel.h"
#include "model/params.h"

namespace actmem {

/// Bytes per parameter of each part, before sharding, from the workload's weight_dtype,
/// grad_dtype, optimizer and precision (kPure: no fp32 master, moments in the weight dtype).
/// Example: mixed-precision AdamW (bf16 weights and grads): 2 + 2 + 12 = 16; pure bf16: 2 + 2 + 4 = 8.
/// Adafactor's state depends on the shapes (finetune.h): here only its master copy.
struct BytesPerParam {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;  // fp32 master copy (when weights are not fp32) + moments (+ 8-bit block scales)
  std::string optimizer_formula;  // "4 (fp32 master) + 4 (m) + 4 (v)"
  // Muon: the 2-D weights' state (master + one momentum buffer); optimizer is then the scalar
  // parameters' (Adam). Negative for every other optimizer: all parameters at optimizer.
  double optimizer_matrix = -1;
  std::string optimizer_matrix_formula;
  bool split_matrix() const { return optimizer_matrix >= 0; }
};
BytesPerParam bytes_per_param(const Workload& workload);

/// Parameters one GPU of pipeline stage `stage` holds, after TP/EP sharding (before ZeRO).
struct StageParams {
  int64_t stage = 0;
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  int64_t dense = 0;   // sharded over the data-parallel group by ZeRO
  int64_t expert = 0;  // routed-expert parameters, sharded over the expert-data-parallel group (dp/ep)
  // Of dense and expert, what Megatron's Muon leaves to its scalar optimizer (Adam): 1-D tensors, the
  // word embedding and the output layer (emerging_optimizers.py _is_nonlinear_or_embedding: the
  // tables language_module.py marks is_embedding_or_output_parameter; a learned position table is
  // 2-D and unmarked, so Muon's). The rest are the 2-D weights Muon orthogonalizes.
  int64_t dense_scalar = 0;
  int64_t expert_scalar = 0;
  int64_t total() const { return dense + expert; }
};

/// The parameters each pipeline stage holds: its model chunks' layers (PipelineSplit: even, or
/// uneven first/last stages; chunk j·pp + r on rank r with vpp > 1), the embedding on the first
/// stage, the LM head on the last. The layout must be checked (check_parallel).
std::vector<StageParams> stage_params(const ParamCounts& counts, const ParallelLayout& layout);

/// Adds what a stage holds besides its layers: the embedding on the first stage, the LM head (a
/// second copy of a tied embedding when pp > 1), its bias and the final norm on the last.
void add_embedding_and_head(StageParams& stage, const ParamCounts& counts, int64_t tp, int64_t pp);

/// Bytes per GPU of one stage's parameters: each part sharded over the data-parallel group (routed
/// experts over dp/ep) once ZeRO reaches it (optimizer at stage 1, gradients at 2, weights at 3).
/// Example: 7.5e9 parameters, ZeRO-3 over dp 64, mixed-precision AdamW: 16·Ψ/N_d = 1.875 GB per GPU.
struct StageStatic {
  Bytes weights;
  Bytes gradients;
  Bytes optimizer;      // on the GPU
  Bytes cpu_optimizer;  // offloaded to host memory
  Bytes total() const { return weights + gradients + optimizer; }
};
StageStatic stage_static_bytes(const StageParams& stage, const BytesPerParam& per, int zero_stage, bool offload,
                               const ParallelLayout& parallel);

struct StaticMemory {
  StageParams stage;        // the most loaded stage (largest static bytes per GPU)
  int64_t num_stages = 1;
  Bytes weights;            // per GPU
  Bytes gradients;
  Bytes optimizer;
  Bytes cpu_optimizer;      // with offload: what moved to host memory
  Bytes total() const { return weights + gradients + optimizer; }
  Breakdown breakdown;      // the terms above with formulas
};

/// Fills m.breakdown: the weights, gradients and optimizer terms with their formulas and values
/// (dtypes and optimizer from the workload; ZeRO stage, offload and parallel degrees from the layout).
void describe_static(StaticMemory& m, const BytesPerParam& per, const Workload& workload, const Layout& layout,
                     int64_t fp8_weights = 0);

/// A ParamCounts for a parameter-count-only model (`--params 7.5e9`): nothing is known of its
/// structure, so all parameters are TP-splittable and spread over `pp` equal pseudo-layers.
ParamCounts param_only_counts(int64_t params, int64_t pp);

}  // namespace actmem
