#include "serve/serve_vllm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "serve/vllm.h"

namespace actmem {

namespace {

/// vLLM v0.19's budget and block count on every pipeline rank (serve/vllm.h).
Expected<VllmCapacity> vllm_capacity(const ModelSpec& model, const ServeReport& serving, Bytes total, double util,
                                     std::optional<Bytes> kv_cache_memory) {
  const VllmOptions& v = *serving.vllm;
  const KvCacheLayout& layout = serving.kv.layout;
  VllmCapacity c;
  c.requested = Bytes{static_cast<int64_t>(std::ceil(static_cast<double>(total.count()) * util))};
  c.max_model_len = serving.kv.context_len;
  c.kv_given = kv_cache_memory.has_value();
  auto groups = vllm_kv_groups(model, layout.block_size, c.max_model_len, v.max_num_batched_tokens, v.hybrid_kv_cache);
  if (!groups) return groups.error();
  c.groups = std::move(*groups);
  c.page_bytes = checked_mul(checked_mul(layout.block_size, layout.values_per_token_per_layer), layout.element_bytes);
  std::vector<const ServeReport*> ranks;
  if (serving.stages.empty())
    ranks.push_back(&serving);
  else
    for (const auto& s : serving.stages) ranks.push_back(&s);
  c.num_gpu_blocks = INT64_MAX;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const ServeReport& r = *ranks[i];
    VllmRankBudget b;
    b.pp_rank = static_cast<int64_t>(i);
    b.first_layer = r.first_layer;
    b.num_layers = r.num_layers;
    b.weights = r.weights_bytes();
    b.activation = r.activation_bytes();
    b.non_torch = r.non_torch_bytes();
    b.available = kv_cache_memory ? *kv_cache_memory : c.requested - b.weights - b.activation - b.non_torch;
    b.group_layers = vllm_rank_group_layers(c.groups, r.first_layer, r.num_layers);
    b.num_blocks = std::max<int64_t>(0, b.available.count()) / c.page_bytes / b.group_layers;
    c.num_gpu_blocks = std::min(c.num_gpu_blocks, b.num_blocks);
    // check_enough_kv_cache_memory (KCU): every layer's pages for one request of max_model_len.
    int64_t need = 0;
    for (const auto& t : c.groups.types)
      for (int64_t l : t.layers)
        if (l >= r.first_layer && l < r.first_layer + r.num_layers) need = checked_add(need, t.pages_per_request);
    b.request_bytes = Bytes{checked_mul(need, c.page_bytes)};
    c.request_bytes = std::max(c.request_bytes, b.request_bytes);
    c.ranks.push_back(b);
  }
  c.kv_tokens = checked_mul(c.num_gpu_blocks / c.groups.num_groups, layout.block_size);
  c.max_concurrency = static_cast<double>(c.num_gpu_blocks) / static_cast<double>(c.groups.pages_per_request);
  return c;
}

}  // namespace

Expected<void> check_vllm_context(const ModelSpec& model, const ServeOptions& options) {
  if (!options.vllm) return {};
  const int64_t derived = vllm_derived_max_len(model);
  if (derived > 0 && options.context_len > derived)
    return Error{ErrorKind::kIncompatible, "context_len",
                 fmt::format("@context_len {}: vLLM refuses it, the model's derived max_model_len is {} "
                             "(max_position_embeddings{}); use @context_len <= {}",
                             options.context_len, derived,
                             model.derived_max_len > 0 ? " × its RoPE scaling factor" : "", derived)};
  return {};
}

Expected<void> check_vllm_options(const ModelSpec& model, const ServeOptions& options) {
  if (!options.vllm) return {};
  const VllmOptions& v = *options.vllm;
  if (options.prefill_chunk > 0)
    return Error{ErrorKind::kIncompatible, "prefill_chunk",
                 "@prefill_chunk: vLLM's profile pass is @max_num_batched_tokens tokens; give that instead, or "
                 "@vllm_version none for an engine-agnostic forward pass"};
  if (!options.flash_attention)
    return Error{ErrorKind::kIncompatible, "attention",
                 "@attention eager: vLLM has no eager score matrix (its backends are fused kernels); drop it, or "
                 "@vllm_version none"};
  if (v.max_num_batched_tokens < 1 || v.max_num_batched_tokens > (int64_t{1} << 24) || v.max_num_seqs < 1 ||
      v.max_num_seqs > (int64_t{1} << 20))
    return Error{ErrorKind::kInvalid, "max_num_batched_tokens",
                 fmt::format("@max_num_batched_tokens {} / @max_num_seqs {}: use 1..16777216 tokens and 1..1048576 "
                             "sequences",
                             v.max_num_batched_tokens, v.max_num_seqs)};
  if (v.pp < 1 || v.pp > model.num_layers)
    return Error{ErrorKind::kIncompatible, "pp",
                 fmt::format("@pp {}: must be 1..{} (num_hidden_layers); vLLM gives each rank at least one layer",
                             v.pp, model.num_layers)};
  if (v.dp < 1 || v.dp > (int64_t{1} << 14))
    return Error{ErrorKind::kInvalid, "dp", fmt::format("@dp {}: must be 1..16384", v.dp)};
  return {};
}

void subtract_from_budget(Breakdown& budget, const ServeReport& serving) {
  for (const char* key : {"weights", "activation_workspace", "non_torch"}) {
    Term t = *serving.memory.find(key);
    t.label = "minus " + t.label;
    t.bytes = Bytes{0} - t.bytes;
    budget.add(std::move(t));
  }
}

Expected<void> apply_vllm_capacity(CapacityReport& c, const ModelSpec& model, const ServeReport& serving,
                                   const CapacityOptions& options) {
  auto v = vllm_capacity(model, serving, options.gpu_memory, options.utilization, options.kv_cache_memory);
  if (!v) return v.error();
  const auto binding = std::min_element(v->ranks.begin(), v->ranks.end(), [](const auto& x, const auto& y) {
    return x.num_blocks < y.num_blocks;
  });
  c.usable = v->requested;
  c.budget.terms.clear();
  c.budget.title = serving.stages.empty()
                       ? "KV cache budget per GPU (vLLM 0.19)"
                       : fmt::format("KV cache budget per GPU (vLLM 0.19; pipeline rank {}, the fewest blocks)",
                                     binding->pp_rank);
  const ServeReport& rank = serving.stages.empty() ? serving : serving.stages[binding - v->ranks.begin()];
  if (options.kv_cache_memory) {  // the profile still runs; utilization is not used (GW:367-385)
    c.budget.add(Term{"kv_cache_memory", "given: --kv-cache-memory-bytes (utilization not used)", "given",
                      format_binary(*options.kv_cache_memory), *options.kv_cache_memory});
    // What the fullest rank holds (the last has the LM head and the sampler) with the given cache.
    int64_t fullest = 0;
    for (const auto& b : v->ranks)
      fullest = std::max(fullest, b.weights.count() + b.activation.count() + b.non_torch.count());
    c.usable = Bytes{checked_add(fullest, options.kv_cache_memory->count())};
  } else {
    c.budget.add(Term{"usable", "requested: ⌈GPU memory × utilization⌉", "⌈M·u⌉",
                      fmt::format("⌈{} × {}⌉", options.gpu_memory.count(), options.utilization), v->requested});
    subtract_from_budget(c.budget, rank);
  }
  c.kv_budget = binding->available;
  c.kv_blocks = v->num_gpu_blocks;
  c.kv_tokens = v->kv_tokens;
  c.max_sequences = static_cast<int64_t>(std::floor(v->max_concurrency));
  // check_enough_kv_cache_memory: every rank must hold one request of max_model_len of its own layers.
  const bool room = std::all_of(v->ranks.begin(), v->ranks.end(),
                                [](const VllmRankBudget& r) { return r.available >= r.request_bytes; });
  c.fits = room && v->max_concurrency >= static_cast<double>(serving.kv.batch);
  // Given KV bytes are allocated whatever the GPU holds: past its memory, the allocation fails.
  if (options.kv_cache_memory && c.usable > options.gpu_memory) c.fits = false;
  c.vllm = std::move(*v);
  return {};
}

}  // namespace actmem
