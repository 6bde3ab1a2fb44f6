// OptionValue as text and JSON, the names of the option table's kinds, scopes and groups, and the
// table as JSON (option_table.h declares them; the table itself is option_table.cc).
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "policies/option_table.h"

namespace actmem {

namespace {

bool parse_whole(const std::string& text, int64_t& out) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, out);
  return ec == std::errc{} && ptr == end && !text.empty();
}

}  // namespace

std::string_view option_kind_name(OptionKind kind) {
  switch (kind) {
    case OptionKind::kFlag: return "flag";
    case OptionKind::kCount: return "count";
    case OptionKind::kReal: return "real";
    case OptionKind::kText: return "text";
    case OptionKind::kSize: return "size";
  }
  return "?";
}

std::string_view option_scope_name(OptionScope scope) {
  return scope == OptionScope::kWorkload ? "workload" : "layout";
}

std::string_view option_group_name(OptionGroup group) {
  switch (group) {
    case OptionGroup::kJob: return "Job";
    case OptionGroup::kParallel: return "Parallelism";
    case OptionGroup::kRecompute: return "Recomputation";
    case OptionGroup::kPrecision: return "Precision and optimizer";
    case OptionGroup::kFineTuning: return "Fine-tuning";
    case OptionGroup::kMemory: return "Memory switches";
    case OptionGroup::kHf: return "HF transformers";
    case OptionGroup::kMegatron: return "Megatron-core";
    case OptionGroup::kMoeRouter: return "Megatron MoE router";
  }
  return "?";
}

OptionValue option_value_from_text(OptionKind kind, const std::string& text) {
  if (kind == OptionKind::kCount) {
    int64_t n = 0;
    if (parse_whole(text, n)) return n;
  } else if (kind == OptionKind::kReal) {
    int64_t n = 0;
    if (parse_whole(text, n)) return n;
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end);
    if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(d)) return d;
  }
  return text;
}

nlohmann::json option_value_json(const OptionValue& value) {
  return std::visit([](const auto& v) { return nlohmann::json(v); }, value);
}

std::string describe_option_value(const OptionValue& value) {
  struct Describe {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t n) const { return std::to_string(n); }
    std::string operator()(double d) const {  // 2.0, not 2: a real where a count was due
      std::string text = fmt::format("{}", d);
      if (text.find_first_of(".eni") == std::string::npos) text += ".0";
      return text;
    }
    std::string operator()(const std::string& s) const { return "'" + s + "'"; }
  };
  return std::visit(Describe{}, value);
}

nlohmann::json options_json(const TrainingSettings& settings) {
  static const TrainingSettings kDefaults;
  auto out = nlohmann::json::array();
  for (const auto& spec : training_options()) {
    nlohmann::json frameworks = nlohmann::json::array();
    for (const auto f : {Framework::kHF, Framework::kMegatron, Framework::kTorchtitan})
      if (spec.applies_to(f)) frameworks.push_back(kFrameworkNames.name(f));
    const auto default_value = spec.get(kDefaults.workload, kDefaults.layout);
    const auto value = spec.get(settings.workload, settings.layout);
    out.push_back({{"name", spec.name},
                   {"kind", option_kind_name(spec.kind)},
                   {"scope", option_scope_name(spec.scope)},
                   {"group", option_group_name(spec.group)},
                   {"frameworks", frameworks},
                   {"advanced", spec.advanced},
                   {"help", spec.help},
                   {"example", spec.example},
                   {"default", default_value ? option_value_json(*default_value) : nlohmann::json()},
                   {"default_text", option_default_text(spec)},
                   {"choices", option_choices(spec)},
                   {"min", spec.has_range() ? nlohmann::json(spec.min) : nlohmann::json()},
                   {"max", spec.max == spec.max ? nlohmann::json(spec.max) : nlohmann::json()},
                   {"value", value ? option_value_json(*value) : nlohmann::json()}});
  }
  return out;
}

}  // namespace actmem
