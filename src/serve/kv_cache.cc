#include "serve/kv_cache.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace actmem {

namespace {

struct MlaLayoutRow {
  MlaCacheLayout layout;
  const char* name;
};
constexpr std::array<MlaLayoutRow, 2> kMlaLayouts{{
    {MlaCacheLayout::kLatent, "latent"},
    {MlaCacheLayout::kDecompressed, "decompressed"},
}};

/// Cache element types an engine actually offers; int4 and the integer/bool types are not.
Expected<int64_t> cache_element_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFP32:
    case DType::kBF16:
    case DType::kFP16:
    case DType::kFP8:
    case DType::kINT8:
      return int64_t{dtype_bytes(dtype)};
    default:
      return Error{fmt::format("@kv_dtype {}: not a KV cache type; use bf16, fp16, fp8, int8 or fp32",
                               dtype_name(dtype))};
  }
}

/// The per-token, per-layer factors (after TP) of one attention layer, without e and L.
struct PerLayerFactors {
  std::vector<Factor> factors;
  int64_t values = 0;
};

Expected<PerLayerFactors> per_layer_factors(const ModelSpec& model, const KvCacheOptions& options) {
  const int64_t tp = options.tp;
  if (model.mla) {
    const MlaSpec& mla = *model.mla;
    if (options.mla_layout == MlaCacheLayout::kLatent) {
      const int64_t width = mla.kv_lora_rank + mla.qk_rope_head_dim;
      return PerLayerFactors{{{"(r_kv+d_rope)", width}}, width};
    }
    if (model.num_heads % tp != 0)
      return Error{fmt::format("@tp {}: num_attention_heads ({}) is not divisible by it; pick a TP that divides it",
                               tp, model.num_heads)};
    const int64_t heads = model.num_heads / tp;
    const int64_t width = mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim;
    std::string heads_symbol = tp == 1 ? "a" : "(a/tp)";
    return PerLayerFactors{{{heads_symbol, heads}, {"(d_nope+d_rope+d_v)", width}}, heads * width};
  }
  const int64_t kv = model.num_kv_heads;
  if (kv % tp != 0 && tp % kv != 0)
    return Error{fmt::format("@tp {}: num_key_value_heads ({}) neither divides nor is divisible by it; "
                             "pick a TP that divides {} or a multiple of it",
                             tp, kv, kv)};
  // kv < tp: each rank keeps one KV head (vLLM replicates them tp/kv times).
  const int64_t heads = model.kv_heads_per_rank(tp);
  std::string heads_symbol = tp == 1 ? "kv" : (kv >= tp ? "(kv/tp)" : "1");
  return PerLayerFactors{{{"2", 2}, {heads_symbol, heads}, {"d", model.head_dim}}, 2 * heads * model.head_dim};
}

}  // namespace

Expected<MlaCacheLayout> parse_mla_cache_layout(const std::string& text) {
  for (const auto& row : kMlaLayouts)
    if (text == row.name) return row.layout;
  return Error{fmt::format("@mla_cache '{}': use latent (vLLM, SGLang) or decompressed (HF transformers)", text)};
}

const char* mla_cache_layout_name(MlaCacheLayout layout) {
  for (const auto& row : kMlaLayouts)
    if (row.layout == layout) return row.name;
  return "?";
}

int64_t KvCacheLayout::tokens_held(const KvLayerGroup& group, int64_t tokens) const {
  const int64_t held = group.window > 0 ? std::min(tokens, group.window) : tokens;
  return block_size > 0 ? checked_mul(ceil_div(held, block_size), block_size) : held;
}

Bytes KvCacheLayout::per_sequence(int64_t tokens) const {
  Bytes sum{0};
  for (const auto& g : groups) sum += g.per_token.bytes * tokens_held(g, tokens);
  return sum;
}

Expected<KvCacheLayout> kv_cache_layout(const ModelSpec& model, const KvCacheOptions& options) {
  if (options.tp < 1) return Error{fmt::format("@tp {}: must be at least 1", options.tp)};
  if (options.block_size < 0)
    return Error{fmt::format("@block_size {}: must be a positive number of tokens (vLLM uses 16), or 0 for none",
                             options.block_size)};
  auto element = cache_element_bytes(options.dtype);
  if (!element) return element.error();
  auto per_layer = per_layer_factors(model, options);
  if (!per_layer) return per_layer.error();

  try {
    KvCacheLayout layout;
    layout.element_bytes = *element;
    layout.block_size = options.block_size;
    layout.values_per_token_per_layer = per_layer->values;

    // Group layers by window; most models have one group, Gemma 2 and Qwen2 (max_window_layers) two.
    std::vector<std::pair<int64_t, int64_t>> counts;  // (window, layers)
    for (const auto& l : model.layers) {
      auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == l.sliding_window; });
      if (it == counts.end())
        counts.emplace_back(l.sliding_window, 1);
      else
        ++it->second;
    }
    for (const auto& [window, num_layers] : counts) {
      std::vector<Factor> factors = per_layer->factors;
      factors.push_back({"e", *element});
      factors.push_back({counts.size() == 1 ? "L" : (window ? "L_swa" : "L_global"), num_layers});
      std::string label = window ? fmt::format("KV of {} sliding-window layers (window {}), one token", num_layers, window)
                                 : fmt::format("KV of {} global-attention layers, one token", num_layers);
      KvLayerGroup group{window, num_layers,
                         product_term(window ? fmt::format("kv_cache.per_token.window_{}", window)
                                             : std::string("kv_cache.per_token.global"),
                                      std::move(label), factors)};
      layout.per_token += group.per_token.bytes;
      layout.groups.push_back(std::move(group));
    }

    if (model.mla)
      layout.notes.push_back(options.mla_layout == MlaCacheLayout::kLatent
                                 ? "MLA latent cache (vLLM, SGLang): kv_lora_rank + qk_rope_head_dim values per token "
                                   "per layer, whole on every TP rank"
                                 : "MLA decompressed cache (HF transformers): per-head K (nope+rope) and V after "
                                   "kv_b_proj");
    else if (model.num_kv_heads < options.tp)
      layout.notes.push_back(fmt::format("{} KV heads < tp {}: each rank keeps one KV head (replicated {}x)",
                                         model.num_kv_heads, options.tp, options.tp / model.num_kv_heads));
    if (options.block_size > 0)
      layout.notes.push_back(fmt::format(
          "paged: each sequence rounds each layer group's tokens up to blocks of {} (vLLM/SGLang paged attention)",
          options.block_size));
    return layout;
  } catch (const OverflowError&) {
    return Error{"KV cache size overflowed int64; check the model's sizes"};
  }
}

Expected<KvCacheReport> estimate_kv_cache(const ModelSpec& model, const KvCacheOptions& options, int64_t context_len,
                                          int64_t batch) {
  if (context_len < 1) return Error{fmt::format("@context_len {}: must be at least 1 token", context_len)};
  if (batch < 1) return Error{fmt::format("@batch {}: must be at least 1 sequence", batch)};
  auto layout = kv_cache_layout(model, options);
  if (!layout) return layout.error();
  try {
    KvCacheReport report;
    report.context_len = context_len;
    report.batch = batch;
    report.breakdown.title = "KV cache";
    for (const auto& g : layout->groups) {
      // The group's per-token bytes, then the tokens it holds and the batch.
      const std::string per_token_formula = g.per_token.formula;
      const int64_t held = layout->tokens_held(g, context_len);
      std::string tokens_symbol = "T";
      if (g.window > 0 && layout->block_size > 0)
        tokens_symbol = "⌈min(T,W)/B⌉·B";
      else if (g.window > 0)
        tokens_symbol = "min(T,W)";
      else if (layout->block_size > 0)
        tokens_symbol = "⌈T/B⌉·B";
      Term t = product_term(g.window ? fmt::format("kv_cache.window_{}", g.window) : std::string("kv_cache.global"),
                            g.window ? fmt::format("KV cache, sliding-window layers (W = {})", g.window)
                                     : std::string("KV cache, global-attention layers"),
                            {{"(" + per_token_formula + ")", g.per_token.bytes.count()},
                             {tokens_symbol, held},
                             {"b", batch}});
      t.substituted = fmt::format("({}) × {} × {}", g.per_token.substituted, held, batch);
      report.breakdown.add(std::move(t));
    }
    report.per_sequence = layout->per_sequence(context_len);
    report.total = report.per_sequence * batch;
    report.layout = std::move(*layout);
    return report;
  } catch (const OverflowError&) {
    return Error{fmt::format("KV cache of {} sequences of {} tokens overflowed int64; check @batch and @context_len",
                             batch, context_len)};
  }
}

}  // namespace actmem
