#include "serve/serve_render.h"

#include <fmt/format.h>

#include "report/render.h"  // term_json, render_terms: the same rendering as estimate
#include "util/text_table.h"

namespace actmem {


nlohmann::json serve_json(const ServeResult& r) {
  const ServeReport& s = r.serving;
  const KvCacheReport& kv = s.kv;
  nlohmann::json j;
  j["model"] = r.model_name;
  j["context_len"] = kv.context_len;
  j["batch"] = kv.batch;
  j["dtype"] = std::string(dtype_name(s.base_dtype));
  j["weight_dtype"] = std::string(dtype_name(s.weight_dtype));
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
  j["notes"] = s.notes;
  return j;
}

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
  }
  for (const auto& n : s.notes) out += wrap("note: " + n, 100, "      ") + "\n";  // a 100-column terminal
  if (!explain) out += "\n(--explain shows every weight tensor, KV layer group and workspace candidate with its formula)\n";
  return out;
}

}  // namespace actmem
