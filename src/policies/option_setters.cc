// The option table's text options with parsing rules of their own (option_setters.h).
#include "policies/option_setters.h"

#include <fmt/format.h>

#include "policies/megatron_options.h"  // parse_recompute_modules, recompute_modules_name
#include "runtime/caching_allocator.h"  // AllocatorConfig::parse (@alloc_conf)

namespace actmem::detail {

Expected<void> set_selective_ac(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto text = option_text(n, v);
  if (!text) return text.error();
  if (*text == "op") {
    s.layout.selective_ac_every = 0;
    return {};
  }
  int64_t every = 0;
  bool ok = !text->empty();
  for (char ch : *text) {
    if (ch < '0' || ch > '9' || every > (int64_t{1} << 40)) {
      ok = false;
      break;
    }
    every = every * 10 + (ch - '0');
  }
  if (!ok || every < 1)
    return Error{ErrorKind::kInvalid, std::string(n),
                 fmt::format("@{} '{}': use op or a layer period N >= 1 (torchtitan's selective_ac_option)", n, *text)};
  s.layout.selective_ac_every = every;
  return {};
}
std::optional<OptionValue> get_selective_ac(const Workload&, const Layout& l) {
  return OptionValue{l.selective_ac_every == 0 ? std::string("op") : std::to_string(l.selective_ac_every)};
}

Expected<void> set_recompute_modules(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto text = option_text(n, v);
  if (!text) return text.error();
  auto bits = parse_recompute_modules(*text);
  if (!bits) return bits.error();
  s.workload.megatron.recompute_modules = *bits;
  return {};
}
std::optional<OptionValue> get_recompute_modules(const Workload& w, const Layout&) {
  return OptionValue{recompute_modules_name(w.megatron.recompute_modules)};
}

Expected<void> set_expert_bias(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto x = option_flag(n, v);
  if (!x) return x.error();
  s.workload.megatron.router.expert_bias = *x ? 1 : 0;
  return {};
}
std::optional<OptionValue> get_expert_bias(const Workload& w, const Layout&) {
  if (w.megatron.router.expert_bias < 0) return std::nullopt;
  return OptionValue{w.megatron.router.expert_bias > 0};
}

/// PYTORCH_CUDA_ALLOC_CONF: checked when set, so that a bad setting fails with its option named.
Expected<void> set_alloc_conf(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto text = option_text(n, v);
  if (!text) return text.error();
  if (auto c = AllocatorConfig::parse(*text); !c) {  // "@alloc_conf: why" with the value quoted
    std::string why = c.error().message;
    if (why.rfind("@alloc_conf: ", 0) == 0) why.erase(0, 13);
    return Error{ErrorKind::kInvalid, std::string(n), fmt::format("@{} '{}': {}", n, *text, why)};
  }
  s.workload.alloc_conf = *text;
  return {};
}

}  // namespace actmem::detail
