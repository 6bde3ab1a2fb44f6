#include "parallel.h"

#include <numeric>  // std::gcd
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model_spec.h"

namespace actmem {

namespace {

// Largest degree we suggest in an error message; the list is a hint, not a limit.
constexpr int64_t kMaxSuggested = 128;

// Does `tp` shard the model's heads? KV heads either divide evenly (kv % tp == 0) or, when there are
// fewer KV heads than ranks, are replicated: each rank holds one KV head, which needs tp % kv == 0.
// Megatron-LM itself asserts num_query_groups % tp == 0; vLLM and TransformerEngine-based stacks
// replicate, and we follow them so that e.g. Llama-3-70B (kv = 8) at tp = 16 is still estimable.
bool tp_fits(const ModelSpec& model, int64_t tp) {
  if (model.num_heads % tp != 0) return false;
  if (!model.mla && model.num_kv_heads % tp != 0 && tp % model.num_kv_heads != 0) return false;
  for (const auto& layer : model.layers)
    if (!layer.moe && layer.ffn % tp != 0) return false;
  if (model.moe && model.moe->expert_ffn % tp != 0) return false;
  if (model.moe && model.moe->shared_ffn % tp != 0) return false;
  return true;
}

std::string suggestions(int64_t limit, auto&& fits) {
  std::vector<std::string> ok;
  for (int64_t v = 1; v <= limit && v <= kMaxSuggested; ++v)
    if (fits(v)) ok.push_back(std::to_string(v));
  if (ok.empty()) return "1";
  std::string out;
  for (size_t i = 0; i < ok.size(); ++i) out += (i ? ", " : "") + ok[i];
  return out;
}

Expected<void> check_at_least_one(const char* flag, int64_t v) {
  if (v < 1) return Error{fmt::format("{} {}: must be at least 1", flag, v)};
  return {};
}

}  // namespace

Expected<void> validate_layout(const ModelSpec& model, const ParallelLayout& layout) {
  const struct {
    const char* flag;
    int64_t value;
  } degrees[] = {{"--dp", layout.dp}, {"--tp", layout.tp}, {"--pp", layout.pp},
                 {"--vpp", layout.vpp}, {"--cp", layout.cp}, {"--ep", layout.ep}};
  for (const auto& d : degrees)
    if (auto r = check_at_least_one(d.flag, d.value); !r) return r;
  if (layout.num_micro_batches < 0)
    return Error{fmt::format("--num-micro-batches {}: must be >= 0 (0 = as many as the schedule holds)",
                             layout.num_micro_batches)};

  if (!tp_fits(model, layout.tp)) {
    std::string why;
    if (model.num_heads % layout.tp != 0)
      why = fmt::format("num_attention_heads ({}) is not divisible by {}", model.num_heads, layout.tp);
    else if (!model.mla && model.num_kv_heads % layout.tp != 0 && layout.tp % model.num_kv_heads != 0)
      why = fmt::format("num_key_value_heads ({}) neither divides nor is divisible by {}", model.num_kv_heads,
                        layout.tp);
    else
      why = fmt::format("an FFN intermediate size is not divisible by {}", layout.tp);
    return Error{fmt::format("--tp {}: {}; valid --tp values: {}", layout.tp, why,
                             suggestions(model.num_heads, [&](int64_t t) { return tp_fits(model, t); }))};
  }
  if (layout.sp && layout.tp == 1)
    return Error{"--sp needs tensor parallelism: sequence parallelism splits what TP replicates; use --tp 2 or more"};

  const int64_t stages = layout.pp * layout.vpp;
  if (model.num_layers % stages != 0)
    return Error{fmt::format("--pp {} --vpp {}: num_hidden_layers ({}) is not divisible by pp·vpp = {}; valid --pp "
                             "values with --vpp {}: {}",
                             layout.pp, layout.vpp, model.num_layers, stages, layout.vpp,
                             suggestions(model.num_layers, [&](int64_t p) {
                               // the interleaved schedule itself needs pp >= 2
                               return model.num_layers % (p * layout.vpp) == 0 && (layout.vpp == 1 || p > 1);
                             }))};
  if (layout.vpp > 1 && layout.pp == 1)
    return Error{fmt::format("--vpp {}: the interleaved schedule needs pipeline parallelism; use --pp 2 or more, or "
                             "--vpp 1",
                             layout.vpp)};
  if (layout.vpp > 1 && layout.num_micro_batches > 0 && layout.num_micro_batches % layout.pp != 0)
    return Error{fmt::format("--num-micro-batches {}: the interleaved schedule needs a multiple of --pp ({}); e.g. {}",
                             layout.num_micro_batches, layout.pp,
                             (layout.num_micro_batches / layout.pp + 1) * layout.pp)};

  if (layout.ep > 1) {
    if (!model.is_moe())
      return Error{fmt::format("--ep {}: the model has no routed experts; use --ep 1", layout.ep)};
    if (model.moe->num_experts % layout.ep != 0)
      return Error{fmt::format("--ep {}: num_experts ({}) is not divisible by {}; valid --ep values: {}", layout.ep,
                               model.moe->num_experts, layout.ep,
                               suggestions(model.moe->num_experts,
                                           [&](int64_t e) { return model.moe->num_experts % e == 0; }))};
  }
  return {};
}

Expected<void> validate_sequence(int64_t seq_len, const ParallelLayout& layout) {
  if (seq_len < 1) return Error{fmt::format("--seq-len {}: must be at least 1", seq_len)};
  if (layout.cp > 1 && seq_len % (2 * layout.cp) != 0)
    return Error{fmt::format("--cp {}: load-balanced causal context parallelism cuts the sequence into 2·cp = {} "
                             "chunks, but --seq-len {} is not divisible by {}; e.g. --seq-len {}",
                             layout.cp, 2 * layout.cp, seq_len, 2 * layout.cp,
                             (seq_len / (2 * layout.cp) + 1) * 2 * layout.cp)};
  const int64_t local = seq_len / layout.cp;
  if (layout.sp && local % layout.tp != 0)
    return Error{fmt::format("--sp with --tp {}: each rank's sequence ({}) must be divisible by tp; e.g. --seq-len {}",
                             layout.tp, local, (local / layout.tp + 1) * layout.tp * layout.cp)};
  return {};
}

}  // namespace actmem
