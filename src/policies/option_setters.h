// The setters and getters of the option table's text options that parse their value by a rule of
// their own (option_table.cc lists them): torchtitan's selective_ac_option, Megatron's
// recompute_modules and expert bias, PYTORCH_CUDA_ALLOC_CONF. Each error names its option.
#pragma once

#include <optional>
#include <string_view>

#include "policies/option_table.h"

namespace actmem::detail {

Expected<void> set_selective_ac(TrainingSettings& s, std::string_view n, const OptionValue& v);
std::optional<OptionValue> get_selective_ac(const Workload& w, const Layout& l);
Expected<void> set_recompute_modules(TrainingSettings& s, std::string_view n, const OptionValue& v);
std::optional<OptionValue> get_recompute_modules(const Workload& w, const Layout& l);
Expected<void> set_expert_bias(TrainingSettings& s, std::string_view n, const OptionValue& v);
std::optional<OptionValue> get_expert_bias(const Workload& w, const Layout& l);
/// Example: set_alloc_conf(s, "alloc_conf", OptionValue{std::string("expandable_segments:True")}).
Expected<void> set_alloc_conf(TrainingSettings& s, std::string_view n, const OptionValue& v);

}  // namespace actmem::detail
