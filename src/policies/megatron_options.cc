#include "policies/megatron_options.h"

#include <array>
#include <utility>

#include <fmt/format.h>

namespace actmem {

namespace {
// TransformerConfig.recompute_modules choices (megatron/core/transformer/transformer_config.py
// l.560-582), in its order.
constexpr std::array<std::pair<std::string_view, unsigned>, 7> kModules{{{"core_attn", kRecomputeCoreAttn},
                                                                        {"moe_act", kRecomputeMoeAct},
                                                                        {"layernorm", kRecomputeLayernorm},
                                                                        {"mla_up_proj", kRecomputeMlaUpProj},
                                                                        {"mlp", kRecomputeMlp},
                                                                        {"moe", kRecomputeMoe},
                                                                        {"shared_experts", kRecomputeSharedExperts}}};
}  // namespace

Expected<unsigned> parse_recompute_modules(std::string_view text) {
  unsigned bits = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find_first_of(", ", start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    if (!item.empty()) {
      unsigned bit = 0;
      for (const auto& [name, b] : kModules)
        if (name == item) bit = b;
      if (bit == 0)
        return Error{ErrorKind::kUnknownName, "recompute_modules",
                     fmt::format("@recompute_modules: unknown module '{}'; use a comma-separated subset of "
                                 "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts",
                                 item)};
      bits |= bit;
    }
    start = end + 1;
  }
  if (bits == 0)
    return Error{ErrorKind::kInvalid, "recompute_modules",
                 "@recompute_modules is empty; name at least one module (Megatron's default is core_attn)"};
  return bits;
}

std::string recompute_modules_name(unsigned bits) {
  std::string out;
  for (const auto& [name, b] : kModules) {
    if (!(bits & b)) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

}  // namespace actmem
