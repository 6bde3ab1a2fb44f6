// Serving (inference) memory per GPU: weights (quantized or not, sharded by TP), KV cache,
// the activation workspace of one forward pass, and a non-torch allowance; then capacity on a GPU
// the way vLLM budgets it. Public entry points: estimate_serving() and estimate_capacity().
//
// Weights. Linear layers (attention and MLP projections, experts, MLA projections) take the weight
// dtype; with int4/int8 they carry group-wise scales, one per `group` input columns per output row,
// in the scale dtype (fp16 by default), plus zero points at the weight's bit width when asymmetric;
// with fp8 one fp32 scale per tensor by default. Embeddings, the LM head, norms, biases and MoE
// routers stay in the base dtype, as AWQ, GPTQ and vLLM's fp8 leave them. Under TP, column-parallel
// rows and row-parallel columns are split (rounded up), KV projections are split by KV head with at
// least one head per rank, vocabularies are split, the rest (norms, MLA down-projections, routers)
// is whole on every rank. vLLM's vocabulary padding to a multiple of 64 is not counted.
//
// Activation workspace. Inference keeps nothing for backward, so the peak is the largest set of
// tensors alive at once inside one forward pass of P tokens (P = prefill chunk; the whole context
// of one sequence when unchunked), per GPU, in the activation dtype e:
//   attention   residual + normed input (2·P·h) + q, k, v + attention output; without flash
//               attention also the fp32 scores and the probabilities, (a/tp)·P·T·(4 + e)
//               (MLA: the latent and rope key of P tokens and K, V of the whole context decompressed)
//   dense MLP   residual + normed input + gate|up output (2·f/tp) + activation output (f/tp)
//   MoE         residual + normed input + per routed copy (k of them): gate|up, activation, expert output;
//               and the router's fp32 logits
//   LM head     the b sampled positions only: hidden, logits in e, logits upcast to fp32 (n·V·(e + 4))
// The workspace is the largest of these; layers run one after another and free their tensors.
// Measured engines profile more (CUDA graphs, sampler warm-up): `activation_peak` replaces the model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/breakdown.h"
#include "util/bytes.h"
#include "util/dtype.h"
#include "actmem/expected.h"
#include "serve/kv_cache.h"
#include "serve/vllm.h"
#include "model/model_spec.h"

namespace actmem {

/// Weight quantization of the linear layers.
struct WeightQuantOptions {
  std::optional<DType> dtype;       // unset: the base dtype (no quantization)
  std::optional<int64_t> group_size;  // input columns per scale; 0 = one scale per output row;
                                      // unset: 128 for int4/int8, one scale per tensor for fp8
  std::optional<DType> scale_dtype;   // unset: fp16 for int4/int8, fp32 for fp8
  bool zero_points = false;           // asymmetric int4/int8: a zero point per scale at the weight's bits
};

/// Default allowance for memory outside PyTorch's allocator that grows while serving (cuBLAS
/// workspaces, NCCL buffers, CUDA graph pools). vLLM measures 0.10 GiB (A100, TP 1) to 1.79 GiB
/// (H100, vllm PR #10511); pass a measured value when one is known.
inline constexpr Bytes kDefaultNonTorch{int64_t{512} << 20};

struct ServeOptions {
  int64_t context_len = 0;  // T: tokens per sequence (prompt + generated)
  int64_t batch = 1;        // b: concurrent sequences
  int64_t tp = 1;
  std::optional<DType> dtype;  // base/activation dtype; unset: the model's (fp32 models run in fp16, as vLLM does)
  WeightQuantOptions weights;
  KvCacheOptions kv;          // kv.tp is overwritten by tp; kv.dtype is the cache type (vLLM "auto": serving_dtype)
  int64_t prefill_chunk = 0;  // P: tokens per forward pass; 0 = the whole context of one sequence
  bool flash_attention = true;
  std::optional<Bytes> activation_peak;  // measured peak: replaces the modelled workspace
  std::optional<Bytes> non_torch;        // unset: kDefaultNonTorch (vLLM: vllm_non_torch)
  // Set: vLLM v0.19's start-up profile (serve/vllm.h), every field resolved (no 0 = default left):
  // the forward pass is vllm->max_num_batched_tokens tokens (prefill_chunk must be 0), the sampler
  // warm-up runs on the last of vllm->pp pipeline ranks, and capacity cuts KV blocks per layer group.
  std::optional<VllmOptions> vllm;
};

struct ServeReport {
  DType base_dtype = DType::kBF16;
  DType weight_dtype = DType::kBF16;
  bool mxfp4_experts = false;  // quant_method mxfp4: the routed experts only (weight_dtype is their 4-bit storage)
  Breakdown memory;      // per GPU: weights, kv_cache, activation_workspace, non_torch
  Breakdown weights;     // per GPU, one term per tensor kind (and its scales)
  KvCacheReport kv;
  Breakdown activation;  // the candidate peaks; the largest is memory's activation_workspace
  std::vector<std::string> notes;
  std::vector<std::string> warnings;  // what was read and is not modelled (config.json's quantization_config)
  // vLLM with pp > 1: one report per pipeline rank (its layers, weights, KV, profile peak); the
  // fields above are then the rank whose total is largest. Empty otherwise.
  std::vector<ServeReport> stages;
  int64_t first_layer = 0;  // this report's layers: [first_layer, first_layer + num_layers)
  int64_t num_layers = 0;
  std::optional<VllmOptions> vllm;  // the vLLM settings it was profiled with

  Bytes weights_bytes() const;
  Bytes kv_bytes() const { return kv.total; }
  Bytes activation_bytes() const;
  Bytes non_torch_bytes() const;
  Bytes total() const { return memory.total(); }
};

/// vLLM's dtype "auto": the given dtype, else a 16/32-bit weight dtype, else the config's torch_dtype,
/// with fp32 models served in fp16 (vllm/config.py _get_and_verify_dtype).
/// Example: serving_dtype(gpt2 /* float32 */, {}, {}) == DType::kFP16.
DType serving_dtype(const ModelSpec& model, std::optional<DType> dtype, std::optional<DType> weight_dtype);

/// Example: estimate_serving(llama_3_8b, {.context_len = 8192, .batch = 4})->weights_bytes() == Bytes{16060522496}.
Expected<ServeReport> estimate_serving(const ModelSpec& model, const ServeOptions& options);

struct CapacityOptions {
  Bytes gpu_memory;               // total as cudaMemGetInfo reports it (gpu_catalog.h or --gpu-memory)
  double utilization = 0.9;       // vLLM --gpu-memory-utilization
  // vLLM --kv-cache-memory-bytes: the KV cache of every worker, as given; the profile still runs,
  // utilization is not used (v1/worker/gpu_worker.py:367-385 @8b141ed8c).
  std::optional<Bytes> kv_cache_memory;
};

/// One vLLM worker's KV budget (GW:387-421): available = requested − weights − peak − non-torch.
struct VllmRankBudget {
  int64_t pp_rank = 0;
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  Bytes weights, activation, non_torch;
  Bytes available;           // "Available KV cache memory"
  int64_t group_layers = 0;  // layers one block spans on this rank
  int64_t num_blocks = 0;    // ⌊available / page / group_layers⌋ (KCU:851)
  Bytes request_bytes;       // KV one request of max_model_len needs in this rank's layers
};

/// What vLLM v0.19 logs after profiling: blocks are the least over the ranks (KCU:1602-1613).
struct VllmCapacity {
  Bytes requested;  // ⌈total × utilization⌉ (WU:408-410)
  bool kv_given = false;  // --kv-cache-memory-bytes: available is the given bytes, requested unused
  std::vector<VllmRankBudget> ranks;
  VllmKvGroups groups;
  int64_t page_bytes = 0;      // one layer, one block: B·(values per token per layer)·e
  int64_t num_gpu_blocks = 0;  // "num_gpu_blocks is: N"
  int64_t kv_tokens = 0;       // "GPU KV cache size: N tokens" = ⌊blocks / groups⌋·B (KCU:1300-1319)
  double max_concurrency = 0;  // "Maximum concurrency for T tokens per request: X" (KCU:802-820)
  int64_t max_model_len = 0;
  Bytes request_bytes;         // the largest of the ranks' request_bytes
};

/// vLLM's budget: usable = total × utilization; KV budget = usable − weights − activation peak −
/// non-torch; blocks = ⌊KV budget / (B · per-token KV)⌋ (vllm/worker/worker.py determine_num_available_blocks).
struct CapacityReport {
  Bytes gpu_memory;
  double utilization = 0;
  Bytes usable;
  Bytes kv_budget;              // may be negative: the model does not fit
  int64_t kv_blocks = 0;        // with paging: whole blocks of B tokens over all layers
  int64_t kv_tokens = 0;        // tokens the budget holds (blocks × B when paged)
  int64_t max_sequences = 0;    // sequences of T tokens at once
  int64_t max_context_len = 0;  // longest T for b sequences at once (0: not even one token)
  bool context_limited_by_model = false;  // max_context_len stopped at the model's max_positions
  bool fits = false;            // the requested batch and context fit in `usable`
  Breakdown budget;             // usable, then what is taken out of it
  std::optional<VllmCapacity> vllm;  // vLLM's own figures, as its start-up log prints them
};

/// Example: Llama-3-8B on 39.50 GiB at 0.9 with 9.37 GiB activation and 0.10 GiB non-torch: 5694 blocks of 16.
Expected<CapacityReport> estimate_capacity(const ModelSpec& model, const ServeReport& serving,
                                           const CapacityOptions& options);

}  // namespace actmem
