#include "serve/vllm.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "model/arch.h"
#include "serve/gpu_catalog.h"

namespace actmem {

VllmBatchDefaults vllm_batch_defaults(const GpuSpec* gpu) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  if (gpu && gpu->total.count() >= 70 * kGiB && std::string_view(gpu->name).find("a100") == std::string_view::npos)
    return {8192, 1024, fmt::format("{}: >= 70 GiB and not an A100", gpu->name)};
  return {2048, 256, gpu ? fmt::format("{}: under 70 GiB or an A100", gpu->name) : std::string("no GPU named")};
}

std::vector<int64_t> vllm_pp_partition(int64_t num_layers, int64_t pp) {
  pp = std::max<int64_t>(pp, 1);
  std::vector<int64_t> parts(static_cast<size_t>(pp), num_layers / pp);
  const int64_t remaining = num_layers % pp;
  for (int64_t i = 2; i < remaining + 2; ++i) ++parts[parts.size() - static_cast<size_t>(i)];
  return parts;
}

Term vllm_sampler_warmup(const ModelSpec& m, int64_t n, int64_t tokens, int64_t e, int64_t sms) {
  int64_t pow2 = 1;
  while (pow2 < n) pow2 *= 2;
  const int64_t rows = sms > 0 ? std::min(pow2, sms) : pow2;
  const int64_t e_logits = e >= 4 ? 0 : e;
  Term t = sum_term("activation.sampler", "sampler warm-up: n requests, logits over the whole vocabulary",
                    {{{"n", n}, {"V", m.vocab}, {e_logits ? "(e+12)" : "12", e_logits + 12}},
                     {{"R", rows}, {"V", m.vocab}, {"4", 4}},
                     {{"T", tokens}, {"h", m.hidden}, {"e", e}},
                     {{"2", 2}, {"n", n}, {"h", m.hidden}, {"e", e}}});
  t.note = fmt::format("R = min(next_pow2(n), SMs) = {}{}", rows, sms > 0 ? "" : " (SMs unknown: name a --gpu)");
  return t;
}

std::optional<Term> vllm_rope_cache(const ModelSpec& m, int64_t e) {
  if (!m.has_rope()) return std::nullopt;
  const ArchTraits* row = arch_row(m.model_type);
  const bool fp32 = row && row->vllm_rope_fp32;
  if (fp32) e = 4;
  const auto& rs = m.rope_scaling;
  const int64_t max_pos = m.max_positions;
  std::vector<Factor> rows{{"max_pos", max_pos}};
  std::string how = "max_position_embeddings";
  if ((rs.type == "linear" || rs.type == "dynamic") && rs.factor > 1.0) {
    rows = {{"max_pos·factor", static_cast<int64_t>(static_cast<double>(max_pos) * rs.factor)}};
    how = fmt::format("{} scaling: max_position_embeddings × {}", rs.type, rs.factor);
  } else if (rs.type == "yarn" || rs.type == "deepseek_yarn") {
    const int64_t original = rs.original_max_positions > 0 ? rs.original_max_positions : max_pos;
    rows = {{"orig·factor", static_cast<int64_t>(static_cast<double>(original) * rs.factor)}};
    how = fmt::format("yarn: original_max_position_embeddings {} × {}", original, rs.factor);
  } else if ((rs.type == "longrope" || rs.type == "su") && rs.original_max_positions > 0) {
    rows = {{"orig+max_pos", rs.original_max_positions + max_pos}};
    how = "longrope: the short and the long table";
  }
  const int64_t rotary = m.mla ? m.mla->qk_rope_head_dim
                               : static_cast<int64_t>(static_cast<double>(m.head_dim) * m.rotary_fraction);
  std::vector<std::vector<Factor>> tables;
  tables.push_back(rows);
  tables.back().push_back({"rotary_dim", rotary});
  tables.back().push_back({"e", e});
  bool sliding = false;
  for (const auto& l : m.layers) sliding = sliding || l.sliding_window > 0;
  if (hf_quirks(m).local_rope_and_mask && sliding) {  // Gemma 3: rope_local_base_freq, unscaled
    tables.push_back({{"max_pos", max_pos}, {"rotary_dim", rotary}, {"e", e}});
    how += "; Gemma 3's sliding layers: a second table, unscaled";
  }
  Term t = sum_term("weights.rope_cache", "RoPE cos/sin cache (a buffer, whole on every rank)", tables);
  t.note = fp32 ? how + "; fp32: the model file builds it so" : how;
  return t;
}

namespace {
int64_t round_up(int64_t x, int64_t multiple) { return checked_mul(ceil_div(x, multiple), multiple); }
}  // namespace

std::vector<Term> vllm_mxfp4_experts(const ModelSpec& m, int64_t tp, int64_t layers) {
  const MoeSpec& moe = *m.moe;
  const int64_t h = m.hidden;
  const int64_t f = round_up(ceil_div(moe.expert_ffn, tp), 64);
  const Factor n{"n", checked_mul(layers, moe.num_experts)};
  const Factor fr{"f_r", f};
  std::vector<Term> terms;
  auto add = [&](const char* key, const char* label, std::vector<Factor> product) {
    terms.push_back(sum_term(fmt::format("weights.mlp.experts.{}", key), label, {std::move(product)}));
  };
  add("w13", "experts w13 = gate|up (mxfp4 e2m1, Hopper layout)",
      {n, {"⌈h/2⌉₆₄", round_up(ceil_div(h, 2), 64)}, {"⌈2·f_r⌉₆₄", round_up(2 * f, 64)}});
  add("w2", "experts w2 = down (mxfp4 e2m1, Hopper layout)",
      {n, {"⌈f_r/2⌉₆₄", round_up(ceil_div(f, 2), 64)}, {"⌈h⌉₆₄", round_up(h, 64)}});
  add("w13.scales", "experts w13 scales (e8m0, as loaded)", {n, {"2·f_r", 2 * f}, {"⌈h/32⌉", ceil_div(h, 32)}});
  add("w2.scales", "experts w2 scales (e8m0, as loaded)", {n, {"h", h}, {"⌈f_r/32⌉", ceil_div(f, 32)}});
  add("w13.scales_swizzled", "experts w13 scales (e8m0, Hopper layout copy)",
      {n, {"⌈2·f_r⌉₂₅₆", round_up(2 * f, 256)}, {"⌈h/32⌉₂", round_up(ceil_div(h, 32), 2)}});
  add("w2.scales_swizzled", "experts w2 scales (e8m0, Hopper layout copy)",
      {n, {"⌈h⌉₂₅₆", round_up(h, 256)}, {"⌈f_r/32⌉₂", round_up(ceil_div(f, 32), 2)}});
  add("w13.bias", "experts w13 bias (fp32)", {n, {"2·f_r", 2 * f}, {"4", 4}});
  add("w2.bias", "experts w2 bias (fp32)", {n, {"h", h}, {"4", 4}});
  terms.front().note = fmt::format("f_r = ⌈f_e/tp⌉ rounded up to 64 = {} (vLLM TRITON mxfp4 backend on Hopper)", f);
  return terms;
}

Term vllm_non_torch(int64_t tp, int64_t pp) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  // The logs' medians per class, in MiB: 0.25 GiB at TP 1 (0.24-0.27 on 20 of 22 runs), 0.07 on PP
  // ranks with TP 1 (2 runs), 2.07-2.17 GiB with TP >= 2 (9 runs).
  const int64_t mib = tp >= 2 ? 2150 : (pp >= 2 ? 72 : 256);
  Term t{"non_torch",
         tp >= 2 ? "non-torch increase (TP >= 2: NCCL buffers)"
                 : (pp >= 2 ? "non-torch increase (pipeline rank, TP 1)" : "non-torch increase (one GPU)"),
         "measured allowance", fmt::format("{} MiB", mib), Bytes{mib * kMiB}, Exactness::kAllowance,
         "measured in vLLM v0.19.0 logs on H100-80GB (validation/notes/vllm_019_memory.md §2; with TP, the lazily "
         "set-up buffers of the profile's all-reduces); the CUDA context and NCCL communicators made before the "
         "baseline snapshot are outside the budget"};
  return t;
}

namespace {

/// Blocks one request of max_model_len holds in a group of this type (KCI:170-178, :291-303, :310-329).
int64_t pages_for(const std::string& kind, int64_t window, int64_t block, int64_t max_len, int64_t batched) {
  if (kind == "sliding_window") return ceil_div(std::min(window - 1 + batched, max_len), block) + 1;
  if (kind == "chunked_local") return ceil_div(std::min(window + batched, max_len), block);
  return ceil_div(max_len, block);
}

}  // namespace

Expected<VllmKvGroups> vllm_kv_groups(const ModelSpec& m, int64_t block, int64_t max_len, int64_t batched,
                                      bool hybrid_kv_cache) {
  if (block < 1)
    return Error{ErrorKind::kInvalid, "block_size",
                 fmt::format("@block_size {}: vLLM pages the KV cache; use 16 (its default) or another block size",
                             block)};
  VllmKvGroups g;
  std::map<std::pair<std::string, int64_t>, size_t> index;  // (kind, window) -> types[i]
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& l = m.layers[i];
    std::string kind = "full";
    int64_t window = 0;
    if (hybrid_kv_cache && l.sliding_window > 0) {
      kind = "sliding_window";
      window = l.sliding_window;
    } else if (hybrid_kv_cache && l.attention_chunk > 0) {
      kind = "chunked_local";
      window = l.attention_chunk;
    }
    auto [it, added] = index.emplace(std::make_pair(kind, window), g.types.size());
    if (added) g.types.push_back({kind, window, {}, 0, 0});
    g.types[it->second].layers.push_back(static_cast<int64_t>(i));
  }
  // One type: one group of every layer (_get_kv_cache_groups_uniform_spec). Several: the smallest
  // type's count, or the largest when it is under 1.5x the smallest (KCU:1042-1055).
  int64_t lo = INT64_MAX, hi = 0;
  for (const auto& t : g.types) {
    lo = std::min<int64_t>(lo, static_cast<int64_t>(t.layers.size()));
    hi = std::max<int64_t>(hi, static_cast<int64_t>(t.layers.size()));
  }
  g.hybrid = g.types.size() > 1;
  g.group_size = !g.hybrid ? hi : (2 * hi < 3 * lo ? hi : lo);
  for (auto& t : g.types) {
    const auto n = static_cast<int64_t>(t.layers.size());
    t.groups = ceil_div(n, g.group_size);
    g.padding_layers += t.groups * g.group_size - n;
    t.pages_per_request = pages_for(t.kind, t.window, block, max_len, batched);
    g.num_groups += t.groups;
    g.pages_per_request += t.groups * t.pages_per_request;
    if (!g.formula.empty()) g.formula += " + ";
    const std::string pages =
        t.kind == "sliding_window"
            ? fmt::format("(⌈min({}−1+{}, {})/{}⌉+1)", t.window, batched, max_len, block)
            : (t.kind == "chunked_local" ? fmt::format("⌈min({}+{}, {})/{}⌉", t.window, batched, max_len, block)
                                         : fmt::format("⌈{}/{}⌉", max_len, block));
    g.formula += fmt::format("{}·{}", t.groups, pages);
  }
  return g;
}

int64_t vllm_rank_group_layers(const VllmKvGroups& g, int64_t first, int64_t count) {
  // Group i of a type holds that type's layers[i::groups] (KCU:1072-1077); a block spans one layer
  // of each group's rank-local share, so the busiest group decides (at least 1).
  int64_t most = 0;
  for (const auto& t : g.types)
    for (int64_t i = 0; i < t.groups; ++i) {
      int64_t here = 0;
      for (size_t j = static_cast<size_t>(i); j < t.layers.size(); j += static_cast<size_t>(t.groups))
        if (t.layers[j] >= first && t.layers[j] < first + count) ++here;
      most = std::max(most, here);
    }
  return std::max<int64_t>(most, 1);
}

}  // namespace actmem
