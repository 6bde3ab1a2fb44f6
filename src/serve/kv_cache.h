// KV cache: the keys and values an inference engine keeps for every token of every sequence it
// serves, per GPU. Public entry points: kv_cache_layout() (what one token costs, layer group by
// layer group) and estimate_kv_cache() (a batch of sequences at a context length).
//
// Symbols: e bytes per cache element, L layers, kv KV heads, d head dim, a attention heads,
// T tokens held per sequence, b sequences, B paged block size, tp tensor-parallel degree.
//   standard / GQA / MQA   2·(kv/tp)·d·e per token per layer (kv/tp is at least 1: when kv < tp
//                          each rank keeps one head, replicated tp/kv times, as vLLM does)
//   MLA latent (vLLM, SGLang)   (kv_lora_rank + qk_rope_head_dim)·e per token per layer, the same
//                          on every TP rank (the latent has no head axis to split)
//   MLA decompressed (HF transformers DynamicCache)   K (a/tp)·(nope+rope) + V (a/tp)·v_head
// Sliding-window layers hold min(T, window) tokens; with paging each sequence rounds each layer
// group's tokens up to whole blocks of B.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/breakdown.h"
#include "util/bytes.h"
#include "util/dtype.h"
#include "actmem/expected.h"
#include "util/names.h"
#include "model/model_spec.h"

namespace actmem {

/// How an MLA model (DeepSeek-V2/V3) caches attention state.
enum class MlaCacheLayout {
  kLatent,        // the compressed kv latent plus the shared rope key (vLLM, SGLang)
  kDecompressed,  // per-head K and V after kv_b_proj (HF transformers)
};

inline constexpr NameTable<MlaCacheLayout, 2> kMlaCacheNames{
    "MLA cache layout (latent: vLLM, SGLang; decompressed: HF transformers)",
    "mla_cache",
    {{{MlaCacheLayout::kLatent, "latent"}, {MlaCacheLayout::kDecompressed, "decompressed"}}}};

struct KvCacheOptions {
  DType dtype = DType::kBF16;  // cache element type: fp32, bf16, fp16, fp8 or int8
  int64_t block_size = 0;      // paged attention block in tokens; 0 = contiguous, no rounding
  int64_t tp = 1;              // tensor-parallel degree: KV heads are split over ranks
  MlaCacheLayout mla_layout = MlaCacheLayout::kLatent;
};

/// Layers that hold the same number of tokens (same window) and cost the same per token.
struct KvLayerGroup {
  int64_t window = 0;      // 0 = global attention (holds the whole context)
  int64_t num_layers = 0;
  Term per_token;          // one token, all layers of the group, per GPU
};

/// What one token costs, per GPU, independent of context length and batch.
struct KvCacheLayout {
  std::vector<KvLayerGroup> groups;  // in order of first appearance
  int64_t values_per_token_per_layer = 0;  // elements of one token in one layer (per GPU)
  int64_t element_bytes = 0;               // e
  int64_t block_size = 0;                  // B (0 = not paged)
  Bytes per_token;                         // every layer, one token (as if no window applied)
  std::vector<std::string> notes;

  /// Bytes one sequence of `tokens` holds: windows applied, each group rounded up to blocks.
  /// Example: llama_3_8b bf16, 1024 tokens, B = 16: 1024 · 131072 = 134217728.
  Bytes per_sequence(int64_t tokens) const;
  /// Tokens of one layer group one sequence holds: min(tokens, window), rounded up to blocks.
  int64_t tokens_held(const KvLayerGroup& group, int64_t tokens) const;
};

/// Example: kv_cache_layout(llama_3_8b, {})->per_token == Bytes{131072}.
Expected<KvCacheLayout> kv_cache_layout(const ModelSpec& model, const KvCacheOptions& options);

struct KvCacheReport {
  KvCacheLayout layout;
  int64_t context_len = 0;   // T
  int64_t batch = 0;         // b
  Bytes per_sequence;        // one sequence at T
  Bytes total;               // b sequences
  Breakdown breakdown;       // one term per layer group: its tokens held × its per-token bytes × b
};

/// Example: estimate_kv_cache(llama_3_1_70b, {.dtype = DType::kFP16}, 128000, 1)->total.gib() == 39.0625.
Expected<KvCacheReport> estimate_kv_cache(const ModelSpec& model, const KvCacheOptions& options,
                                          int64_t context_len, int64_t batch);

}  // namespace actmem
