#include "serve/serve_render.h"

#include <fmt/format.h>

#include "report/render.h"  // term_json, render_terms: the same rendering as estimate
#include "util/text_table.h"

namespace actmem {

namespace {

/// The `vllm` block: the lines of vLLM's start-up log (serve/vllm.h), the first worker's where
/// ranks differ, then every rank.
nlohmann::json vllm_json(const ServeResult& r) {
  const VllmOptions& v = *r.serving.vllm;
  nlohmann::json vj = {{"version", "0.19"},
                       {"max_num_batched_tokens", v.max_num_batched_tokens},
                       {"max_num_seqs", v.max_num_seqs},
                       {"pp", v.pp},
                       {"dp", v.dp},
                       {"hybrid_kv_cache", v.hybrid_kv_cache},
                       {"cuda_graph_bytes", nullptr},
                       {"kv_cache_memory_fit_bytes", nullptr}};
  if (r.capacity && r.capacity->vllm) {
    const VllmCapacity& c = *r.capacity->vllm;
    const VllmRankBudget& first = c.ranks.front();  // the log's EngineCore / Worker_PP0 lines
    vj["weights_bytes"] = first.weights.count();
    vj["activation_bytes"] = first.activation.count();
    vj["non_torch_bytes"] = first.non_torch.count();
    vj["requested_bytes"] = c.requested.count();
    vj["kv_cache_bytes"] = first.available.count();
    vj["num_gpu_blocks"] = c.num_gpu_blocks;
    vj["kv_tokens"] = c.kv_tokens;
    vj["max_concurrency"] = c.max_concurrency;
    vj["max_model_len"] = c.max_model_len;
    vj["request_bytes"] = c.request_bytes.count();
    nlohmann::json types = nlohmann::json::array();
    for (const auto& t : c.groups.types)
      types.push_back({{"kind", t.kind}, {"window", t.window}, {"layers", t.layers.size()}, {"groups", t.groups},
                       {"pages_per_request", t.pages_per_request}});
    vj["kv_groups"] = {{"group_size", c.groups.group_size}, {"num_groups", c.groups.num_groups},
                       {"padding_layers", c.groups.padding_layers}, {"page_bytes", c.page_bytes},
                       {"pages_per_request", c.groups.pages_per_request}, {"types", types}};
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& b : c.ranks)
      ranks.push_back({{"pp_rank", b.pp_rank}, {"first_layer", b.first_layer}, {"num_layers", b.num_layers},
                       {"weights_bytes", b.weights.count()}, {"activation_bytes", b.activation.count()},
                       {"non_torch_bytes", b.non_torch.count()}, {"kv_cache_bytes", b.available.count()},
                       {"group_layers", b.group_layers}, {"num_gpu_blocks", b.num_blocks}});
    vj["ranks"] = ranks;
  }
  return vj;
}

}  // namespace

nlohmann::json serve_json(const ServeResult& r) {
  const ServeReport& s = r.serving;
  const KvCacheReport& kv = s.kv;
  nlohmann::json j;
  j["model"] = r.model_name;
  j["context_len"] = kv.context_len;
  j["batch"] = kv.batch;
  j["dtype"] = std::string(dtype_name(s.base_dtype));
  j["weight_dtype"] = s.mxfp4_experts ? std::string("mxfp4") : std::string(dtype_name(s.weight_dtype));
  j["kv_cache"] = {{"per_token_bytes", kv.layout.per_token.count()},
                   {"per_sequence_bytes", kv.per_sequence.count()},
                   {"total_bytes", kv.total.count()},
                   {"values_per_token_per_layer", kv.layout.values_per_token_per_layer},
                   {"element_bytes", kv.layout.element_bytes},
                   {"block_size", kv.layout.block_size},
                   {"terms", terms_json(kv.breakdown)}};
  j["memory"] = {{"weights_bytes", s.weights_bytes().count()},
                 {"kv_cache_bytes", s.kv_bytes().count()},
                 {"activation_bytes", s.activation_bytes().count()},
                 {"non_torch_bytes", s.non_torch_bytes().count()},
                 {"total_bytes", s.total().count()},
                 {"terms", terms_json(s.memory)}};
  j["weights"] = {{"total_bytes", s.weights_bytes().count()}, {"terms", terms_json(s.weights)}};
  j["activation"] = {{"candidates", terms_json(s.activation)}};
  if (r.capacity) {
    const CapacityReport& c = *r.capacity;
    j["capacity"] = {{"gpu", r.gpu_name},
                     {"gpu_memory_bytes", c.gpu_memory.count()},
                     {"utilization", c.utilization},
                     {"usable_bytes", c.usable.count()},
                     {"kv_budget_bytes", c.kv_budget.count()},
                     {"kv_blocks", c.kv_blocks},
                     {"kv_tokens", c.kv_tokens},
                     {"max_sequences", c.max_sequences},
                     {"max_context_len", c.max_context_len},
                     {"context_limited_by_model", c.context_limited_by_model},
                     {"fits", c.fits},
                     {"terms", terms_json(c.budget)}};
  }
  if (s.vllm) j["vllm"] = vllm_json(r);
  j["suggestions"] = nlohmann::json::array();
  for (const auto& g : r.suggestions)
    j["suggestions"].push_back({{"flag", g.flag}, {"option", g.option}, {"value", g.value},
                                {"max_concurrency", g.concurrency}, {"effect", g.effect}});
  j["notes"] = s.notes;
  j["warnings"] = s.warnings;
  return j;
}

namespace {

/// vLLM's own start-up lines, as it would print them (gpu_worker.py, kv_cache_utils.py @8b141ed8c),
/// one figure per line and wrapped for a 100-column terminal.
std::string vllm_log_lines(const VllmCapacity& c, int64_t block_size) {
  auto gib = [](Bytes b) { return fmt::format("{:.2f} GiB", static_cast<double>(b.count()) / (1 << 30)); };
  auto line = [](const std::string& indent, const std::string& text) {
    return wrap(indent + text, 100, indent + "  ") + "\n";
  };
  std::string out = "\nvLLM 0.19 start-up log, predicted:\n";
  const bool ranks = c.ranks.size() > 1;
  const std::string indent = ranks ? "    " : "  ";
  for (const auto& b : c.ranks) {
    if (ranks)
      out += fmt::format("  PP{} (layers {}..{}), {} blocks:\n", b.pp_rank, b.first_layer,
                         b.first_layer + b.num_layers - 1, b.num_blocks);
    out += line(indent, fmt::format("Model loading took {}", gib(b.weights)));
    out += line(indent, fmt::format("torch peak memory increase {}; non-torch forward increase memory {}",
                                    gib(b.activation), gib(b.non_torch)));
    out += line(indent, c.kv_given ? fmt::format("reserved {} memory for KV Cache as specified by "
                                                 "kv_cache_memory_bytes config",
                                                 gib(b.available))
                                   : fmt::format("Available KV cache memory: {} (requested {})", gib(b.available),
                                                 gib(c.requested)));
  }
  out += line("  ", fmt::format("GPU KV cache size: {} tokens (num_gpu_blocks {}, blocks of {} tokens)",
                                group_digits(c.kv_tokens), c.num_gpu_blocks, block_size));
  out += line("  ", fmt::format("Maximum concurrency for {} tokens per request: {:.2f}x", group_digits(c.max_model_len),
                                c.max_concurrency));
  std::string groups;
  for (const auto& t : c.groups.types)
    groups += fmt::format("{}{} {}{} layers in {} group{}", groups.empty() ? "" : ", ", t.layers.size(), t.kind,
                          t.window ? fmt::format(" ({})", t.window) : "", t.groups, t.groups > 1 ? "s" : "");
  out += line("  ", fmt::format("KV groups: {}; {} layers per group{}", groups, c.groups.group_size,
                                c.groups.padding_layers ? fmt::format(", {} padding layer{}", c.groups.padding_layers,
                                                                      c.groups.padding_layers > 1 ? "s" : "")
                                                        : ""));
  out += line("  ", fmt::format("pages per request: {} = {}", c.groups.formula, c.groups.pages_per_request));
  return out;
}

}  // namespace

std::string serve_table(const ServeResult& r, bool explain) {
  const ServeReport& s = r.serving;
  const KvCacheReport& kv = s.kv;
  std::string out = fmt::format("Model      {}\nWorkload   {} sequence(s) × {} tokens\n\n", r.model_name, kv.batch,
                                kv.context_len);
  out += render_terms(s.memory, true, explain);
  out += fmt::format("\nKV cache   {} B ({}) per token, {} B ({}) per sequence\n", group_digits(kv.layout.per_token.count()),
                     format_binary(kv.layout.per_token), group_digits(kv.per_sequence.count()),
                     format_binary(kv.per_sequence));
  if (explain) {
    out += "\n" + render_terms(kv.breakdown, false, true);
    out += "\n" + render_terms(s.weights, true, true);
    out += "\n" + render_terms(s.activation, false, true);
  }
  if (r.capacity) {
    const CapacityReport& c = *r.capacity;
    out += "\n" + render_terms(c.budget, true, explain);
    out += fmt::format("\nCapacity on {} ({} B, utilization {}):\n", r.gpu_name, group_digits(c.gpu_memory.count()),
                       c.utilization);
    if (kv.layout.block_size > 0)
      out += fmt::format("  KV blocks of {} tokens: {} ({} tokens)\n", kv.layout.block_size, c.kv_blocks, c.kv_tokens);
    else
      out += fmt::format("  KV tokens: {}\n", c.kv_tokens);
    out += fmt::format("  max sequences of {} tokens: {}\n", kv.context_len, c.max_sequences);
    out += fmt::format("  max context for {} sequence(s): {}{}\n", kv.batch, c.max_context_len,
                       c.context_limited_by_model ? " (the model's max_position_embeddings)" : "");
    out += fmt::format("  requested batch fits: {}\n", c.fits ? "yes" : "no");
    if (c.vllm) out += vllm_log_lines(*c.vllm, kv.layout.block_size);
  }
  if (!r.suggestions.empty()) {
    out += fmt::format("\nTo fit {} request(s) of {} tokens, change one flag of the `vllm serve` line:\n", kv.batch,
                       group_digits(kv.context_len));
    for (const auto& g : r.suggestions) out += fmt::format("  {:<32} {}\n", g.flag, g.effect);
  }
  for (const auto& n : s.notes) out += wrap("note: " + n, 100, "      ") + "\n";  // a 100-column terminal
  if (!explain) out += "\n(--explain shows every weight tensor, KV layer group and workspace candidate with its formula)\n";
  return out;
}

}  // namespace actmem
