// vLLM's start-up memory accounting, as v0.19.0 computes and logs it: what `actmem serve` predicts
// under `--vllm-version 0.19` (the default). Each rule is read from vLLM's source at upstream main
// 8b141ed8c328ef42ff9deeb3d6e26ea63b9550c1 (2026-04-02, the day before v0.19.0; the file:line tags
// of the v0.19.0 logs match it) and written out with worked records in
// validation/notes/vllm_019_memory.md. GMR = vllm/v1/worker/gpu_model_runner.py, GW = gpu_worker.py,
// KCU = vllm/v1/core/kv_cache_utils.py, KCI = vllm/v1/kv_cache_interface.py, WU = vllm/v1/worker/utils.py.
//
// The worker's budget (GW:366-421, WU:408-421):
//   requested   ⌈total × gpu_memory_utilization⌉
//   available   requested − weights ("Model loading took") − torch peak increase of the profile run
//               − non-torch increase (CUDA graphs are not deducted: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0)
// The profile run (GMR:5726-5800) is one eager forward of max_num_batched_tokens tokens split into
// n = min(max_num_seqs, max_num_batched_tokens) requests, then on the last pipeline rank a sampler
// warm-up over those n requests with logits over the whole vocabulary (not divided by TP: the
// logits are all-gathered). KV blocks are then cut per layer group (KCU:959-1078) and the
// concurrency is blocks over the pages one request of max_model_len needs (KCU:802-820).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "report/breakdown.h"
#include "serve/kv_cache.h"
#include "util/bytes.h"
#include "actmem/expected.h"
#include "util/names.h"

namespace actmem {

struct GpuSpec;

/// Whose start-up rules `serve` applies: vLLM v0.19, or none (an engine-agnostic forward workspace
/// of --prefill-chunk tokens, a fixed non-torch allowance, ⌊total × utilization⌋, one block pool).
enum class VllmVersion { kV0_19, kNone };

inline constexpr NameTable<VllmVersion, 2> kVllmVersionNames{
    "vLLM version (0.19: its start-up profile and KV rules; none: engine-agnostic)",
    "vllm_version",
    {{{VllmVersion::kV0_19, "0.19"}, {VllmVersion::kNone, "none"}}}};

/// The scheduler settings vLLM profiles with, as resolved (vllm_batch_defaults fills the unset ones).
struct VllmOptions {
  int64_t max_num_batched_tokens = 0;  // tokens of the profile forward pass; 0: vLLM's default
  int64_t max_num_seqs = 0;            // requests of the sampler warm-up; 0: vLLM's default
  int64_t pp = 1;                      // pipeline ranks (--pipeline-parallel-size)
  int64_t dp = 1;                      // data-parallel replicas: each holds its own copy; per GPU unchanged
  bool hybrid_kv_cache = true;         // false: --disable-hybrid-kv-cache-manager (every layer a full one)
  int64_t gpu_sms = 0;                 // the GPU's SMs (the sampler's scratch rows); 0: not known
};

/// vLLM's scheduler defaults for `vllm serve` (UsageContext.OPENAI_API_SERVER), by GPU
/// (vllm/engine/arg_utils.py:2087-2107 @8b141ed8c): a GPU of >= 70 GiB that is not an A100 gets
/// 8192 batched tokens and 1024 sequences, any other 2048 and 256 (also when no GPU is named: vLLM's
/// own fallback when it cannot query the device, :2076-2082).
struct VllmBatchDefaults {
  int64_t max_num_batched_tokens = 0;
  int64_t max_num_seqs = 0;
  std::string rule;  // which branch applied, for the notes
};
VllmBatchDefaults vllm_batch_defaults(const GpuSpec* gpu);

/// vLLM's derived max_model_len (vllm/config/model.py:2058-2132): max_position_embeddings, times
/// the RoPE scaling factor where vLLM applies it (model/rope_context.h); 0: the config gives none.
inline int64_t vllm_derived_max_len(const ModelSpec& model) {
  return model.derived_max_len > 0 ? model.derived_max_len : model.max_positions;
}

/// The routed experts of `layers` MoE layers under quant_method mxfp4, as vLLM v0.19.0 (2a69949bd)
/// holds them after loading on Hopper with its TRITON backend (triton_kernels v3.6.0, 7c56a5e40):
///  - f_r = ⌈f_e/tp⌉ rounded up to 64 (fused_moe/oracle/mxfp4.py:376-400); h is not padded;
///  - values (e2m1, two per byte) of w13 (2·f_r × h) and w2 (h × f_r), swizzled into the Hopper
///    value layout, which pads both axes of the transposed tensor to 64 (hopper_value.py:127-134);
///    the loaded originals are deleted (oracle/mxfp4.py:721-754);
///  - e8m0 scales, one per 32 input values: the loaded ones stay on the layer and the swizzled
///    copies (rows to 256, scale columns to 2: hopper_scale.py:27-50) live in the precision config
///    (quantization/mxfp4.py:299-312);
///  - biases in fp32 (the bf16 originals replaced: model_executor/utils.py:47-77).
/// Example: gpt-oss-20b at tp 1: 24·32 experts, 11,010,539,520 B.
std::vector<Term> vllm_mxfp4_experts(const ModelSpec& m, int64_t tp, int64_t layers);

/// Layers per pipeline rank (vllm/distributed/utils.py get_pp_indices, l.95-135 @8b141ed8c): L / pp
/// each, and the remainder one by one to the ranks before the last, from the second-to-last down.
/// Example: vllm_pp_partition(32, 3) == {11, 11, 10}; vllm_pp_partition(30, 4) == {7, 8, 8, 7}.
std::vector<int64_t> vllm_pp_partition(int64_t num_layers, int64_t pp);

/// The sampler warm-up's live set on the last rank (GMR:5560-5637, vllm/v1/sample/sampler.py:91,
/// ops/topk_topp_sampler.py:112, :334-346, ops/topk_topp_triton.py:1013-1019):
///   n·V·(e' + 4 + 4 + 4)   logits in the model dtype (e' = e; 0 when e = 4, the fp32 cast is the
///                          same tensor), their fp32 copy, softmax probabilities, the exponential q
///   R·V·4                  the Triton top-k/top-p scratch rows, R = min(next_pow2(n), SMs)
///   T·h·e + 2·n·h·e        the forward's hidden states, the sampled rows and their rand_like
/// Example: Llama-3.1-8B bf16, n 1024, T 8192, 132 SMs: 1,990,283,264 B (1.854 GiB; the log: 1.89).
Term vllm_sampler_warmup(const ModelSpec& model, int64_t n, int64_t tokens, int64_t element_bytes, int64_t sms);

/// RoPE's cos/sin caches, which "Model loading took" counts beside the weights: get_rope builds one
/// [rows, rotary_dim] buffer in the model dtype per distinct RoPE configuration, shared by the layers
/// and whole on every rank (vllm/model_executor/layers/rotary_embedding/__init__.py:27-79, base.py:57-92
/// @8b141ed8c). rows = max_position_embeddings, × factor for linear and dynamic scaling
/// (linear_scaling_rope.py:85-95), original_max_position_embeddings × factor for yarn, original +
/// max_position_embeddings for longrope (short and long tables); rotary_dim = d·rotary fraction (MLA:
/// the RoPE head dim). Gemma 3's sliding layers rotate with a base of their own: a second, unscaled
/// table. None without RoPE. `element_bytes`: the model dtype's (serve passes it; gpt-oss, not yet
/// read, builds its table in fp32).
/// Example: Llama-3.1-8B bf16: 131072·128·2 = 33,554,432 B (32 MiB).
std::optional<Term> vllm_rope_cache(const ModelSpec& model, int64_t element_bytes);

/// Memory outside torch that grows during the profile run (the log's "non-torch forward increase").
/// vLLM measures it (MemorySnapshot, vllm/utils/mem_utils.py:92-132, :264-274); its source does not
/// size it, so this is the measured allowance of the v0.19.0 logs on H100-80GB (35 runs): 0.25 GiB
/// on one GPU, 0.07 GiB on a pipeline rank without TP, 2.1 GiB with TP >= 2 (NCCL's lazily set-up
/// buffers of the first large all-reduces). The context, NCCL communicators and custom all-reduce
/// buffers made before the baseline snapshot (GW:263-283) are outside the budget.
Term vllm_non_torch(int64_t tp, int64_t pp);

/// How v0.19 cuts the KV cache into layer groups (KCU:1222-1262, :959-1078).
struct VllmKvType {
  std::string kind;        // "full", "sliding_window", "chunked_local"
  int64_t window = 0;      // window or chunk in tokens (0: full)
  std::vector<int64_t> layers;  // model layer indices of this type
  int64_t groups = 0;      // ⌈layers / group_size⌉
  int64_t pages_per_request = 0;  // blocks one request of max_model_len holds in one group (KCI:170-329)
};
struct VllmKvGroups {
  std::vector<VllmKvType> types;
  int64_t group_size = 0;      // layers per group (tensors shared across groups)
  int64_t num_groups = 0;      // Σ types' groups
  int64_t padding_layers = 0;  // "Add N padding layers" (KCU:1057-1071)
  int64_t pages_per_request = 0;  // Σ over groups
  bool hybrid = false;         // more than one attention type
  std::string formula;         // pages per request, in symbols
};

/// Example: gemma-3-4b (5 full, 29 sliding 1024), B 16, max_model_len 8192, 8192 batched tokens:
/// group_size 5, 7 groups, 1 padding layer, 512 + 6·513 = 3590 pages per request.
Expected<VllmKvGroups> vllm_kv_groups(const ModelSpec& model, int64_t block_size, int64_t max_model_len,
                                      int64_t max_num_batched_tokens, bool hybrid_kv_cache);

/// Layers of the busiest group on one pipeline rank: how many layers a block of that rank spans.
int64_t vllm_rank_group_layers(const VllmKvGroups& groups, int64_t first_layer, int64_t num_layers);

}  // namespace actmem
