// How long one training step of a layout takes, from the FLOPs the engine counts (Totals) and the
// bytes each collective moves, over the links it really crosses. Every term is a formula over
// plain numbers, kept in StepTime so that explain_step_time() prints `formula = values = seconds`
// from the same numbers step_time() ranks by (no second model for the explanation).
//
// The model, per GPU and per optimizer step (global batch B sequences of s tokens, micro-batch b,
// N = dp·tp·pp·cp GPUs, m = B/(dp·b) micro-batches per pipeline):
//   compute  = (3·F + R)·(B/b) / N / (peak · efficiency) · imbalance
//              F, R: Totals.forward_flops, recompute_flops; imbalance: Totals.stage_imbalance, the
//              busiest pipeline stage's work over the average stage's (uneven stages, the LM head)
//   tp       = m · L_stage · n_ar · 2(t−1)/t · s/cp·b·h·bytes / bw(tp)   n_ar = 4 (+2 under full recompute)
//   cp       = m · L_stage · max(0, 3(c−1)·KV block / bw(cp) − attention core time)  (ring, overlapped)
//   ep       = m · (MoE layers/pp) · 4 · (e−1)/e · s/cp·b·k·h·bytes / bw(ep)       (not overlapped)
//   pp p2p   = m · 2·v · s/cp·b·h·bytes (/t with sp) / bw(pp)
//   bubble   = (p−1)/(v·m) · (compute + tp + cp + ep)
//   dp       = max(0, gradient collectives − backward of one micro-batch) (ZeRO 0-2, overlapped with
//              the last backward); ZeRO-3: per micro-batch max(0, 2 all-gathers + reduce-scatter −
//              compute of that micro-batch) (prefetched)
//   offload  = Ψ_shard·(grad + weight bytes) / PCIe + Ψ_shard·28 bytes / (host memory bandwidth / G)
// L_stage: the layers of the largest pipeline stage (L/pp when even).
// Ranks are placed in Megatron's default order tp-cp-ep-dp-pp (tp fastest): a group of size g and
// stride k stays inside a node when g·k <= gpus per node, else it runs at the inter-node bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/prepared.h"
#include "serve/gpu_catalog.h"  // GpuSpec

namespace actmem {

/// Fraction of the dense bf16 tensor peak a training step's kernels reach (GEMMs, attention,
/// element-wise). An assumption, overridable (--compute-efficiency): Narayanan et al. 2021 (SC21,
/// "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM") report 44-52%
/// of the A100 peak end to end, communication and pipeline bubble included (Table 1); Dubey et al.
/// 2024 (Llama 3, Table 4) 38-43% BF16 MFU on H100. 0.55 is the kernels' share before those
/// overheads, chosen so the Narayanan Table 1 rows come out within ±25% (planner_test.cc).
inline constexpr double kDefaultComputeEfficiency = 0.55;
/// Fraction of a link's peak a NCCL collective reaches (bus bandwidth / link peak). Assumption,
/// overridable (--collective-efficiency): nccl-tests all_reduce_perf reports bus bandwidths of
/// roughly 75-85% of the NVLink peak on DGX A100/H100 for large messages.
inline constexpr double kDefaultCollectiveEfficiency = 0.8;
/// Per-GPU inter-node bandwidth, one direction: DGX H100 has eight 400 Gb/s ConnectX-7 NICs for 8
/// GPUs (NVIDIA DGX H100 user guide) -> 400 Gb/s = 50 GB/s per GPU. DGX A100 (Narayanan et al. 2021
/// §5: "eight NVIDIA Mellanox 200Gbps HDR Infiniband HCAs") is 25 GB/s per GPU.
inline constexpr double kDefaultInterNodeBandwidth = 50e9;
/// Host link for optimizer offload: PCIe Gen4 x16 is 32 GB/s per direction (PCI-SIG); ~25 GB/s
/// achieved for pinned copies.
inline constexpr double kDefaultHostBandwidth = 25e9;

/// Host memory bandwidth the CPU optimizer step streams through under optimizer offload, shared by
/// the node's GPUs: DGX H100 has two Xeon 8480C with 8 channels of DDR5-4800 each, 614 GB/s peak
/// (NVIDIA DGX H100 user guide; Intel ark); half of it is assumed reached. CPU Adam reads and
/// writes the fp32 master weight and both moments and reads the gradient: ~28 bytes per parameter.
inline constexpr double kDefaultHostMemoryBandwidth = 300e9;
inline constexpr double kCpuAdamBytesPerParam = 28;

/// The machine a step runs on.
struct Cluster {
  double peak_flops = 0;            // dense bf16 tensor peak of one GPU, FLOP/s (GpuSpec::bf16_flops)
  double intra_node_bandwidth = 0;  // per GPU, one direction, bytes/s (GpuSpec::link_bandwidth)
  double inter_node_bandwidth = kDefaultInterNodeBandwidth;
  double host_bandwidth = kDefaultHostBandwidth;
  double host_memory_bandwidth = kDefaultHostMemoryBandwidth;  // per node
  double compute_efficiency = kDefaultComputeEfficiency;
  double collective_efficiency = kDefaultCollectiveEfficiency;
  int64_t gpus_per_node = 8;
};
/// The cluster of `gpus_per_node` GPUs of a catalog entry, every other figure at its default.
/// Example: cluster_for(*find_gpu("h100-80gb")).intra_node_bandwidth == 450e9.
Cluster cluster_for(const GpuSpec& gpu, int64_t gpus_per_node = 8);

/// One step's time and the numbers every term was computed from (seconds, bytes, FLOPs).
struct StepTime {
  // Inputs as the terms see them.
  int64_t gpus = 0, num_micro_batches = 0, layers_per_stage = 0, moe_layers_per_stage = 0;
  double global_batch = 0;      // sequences
  double hw_flops_per_gpu = 0;  // (3F + R)·(B/b)/N: what the GPU executes, recomputation included
  double model_flops_per_gpu = 0;  // 3F·(B/b)/N: what MFU counts
  double achievable = 0;        // peak · efficiency
  double stage_imbalance = 1;   // the busiest stage's work / the average stage's (Totals)
  double tp_message = 0, cp_block = 0, ep_message = 0, pp_message = 0, dp_bytes = 0;  // bytes
  double tp_bw = 0, cp_bw = 0, ep_bw = 0, pp_bw = 0, dp_bw = 0;                         // effective, bytes/s
  int tp_allreduces = 0;        // per layer per micro-batch
  double attention_core = 0;    // seconds, one layer, one micro-batch (what the CP ring hides behind)
  double dp_comm_total = 0;     // before overlap
  double dp_overlap = 0;        // the compute it hides behind

  // The terms (seconds).
  double compute = 0, tp = 0, cp = 0, ep = 0, pp_p2p = 0, bubble = 0, dp = 0, offload = 0;
  double total = 0;

  double tokens_per_s_per_gpu = 0;
  double mfu = 0;               // model FLOPs / (time · peak)
  double tflops_per_gpu = 0;    // hardware FLOPs (recomputation included) / time, in TFLOP/s
};

/// The step time of a layout the engine evaluated (`t` from evaluate()); `global_batch` in
/// sequences. `model` may be null (a parameter-count-only model: no FLOPs, so no compute term).
/// A cluster without speeds (peak or bandwidth 0) gives every term 0. Never allocates.
/// Example: Llama-3-8B, seq 4096, tp 4 pp 2 dp 2, B 16 on H100s: m = 8 and the bubble is 1/8 of
/// the busy time (planner_test.cc, TimeModel.TermsByHand).
StepTime step_time(const ModelSpec* model, const Workload& workload, const Layout& layout, const Totals& t,
                   int64_t global_batch, const Cluster& cluster) noexcept;

/// One line of the explanation: `label: formula = values = seconds`.
struct TimeTerm {
  std::string label;
  std::string formula;
  std::string values;
  double seconds = 0;
};
/// The terms of `st` (as step_time() computed them), for `actmem plan --explain` and the JSON.
std::vector<TimeTerm> explain_step_time(const StepTime& st, const Layout& layout, const Cluster& cluster);

}  // namespace actmem
