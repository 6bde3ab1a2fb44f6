// Options by name: one table mapping each training option's name (seq_len, tp, recompute, ...) onto
// the Workload and Layout field it sets, for front ends that receive options as name/value pairs
// (Python keyword arguments, training config files) rather than as typed command-line flags.
// Names are the CLI's flags with '_' for '-' (--seq-len is seq_len; --zero is zero). Values are
// parsed with the enum name tables (options.h), parse_dtype() and parse_size(); ranges are checked
// later, once, by check_options(). Errors name the option as `@name` (expected.h).
//
//   TrainingSettings s;
//   set_training_option(s, "tp", int64_t{8});            // s.layout.parallel.tp == 8
//   set_training_option(s, "recompute", "selective");   // s.layout.recompute == Recompute::kSelective
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "policies/options.h"
#include "util/expected.h"

namespace actmem {

/// An option's value as a front end received it: a flag, a whole number, a real number or text.
using OptionValue = std::variant<bool, int64_t, double, std::string>;

/// The sequence length a front end assumes when none is given (the seed card's 70B at 8k).
inline constexpr int64_t kDefaultSeqLen = 8192;

/// A training job's options, filled by name. grad_dtype follows weight_dtype until it is set itself.
struct TrainingSettings {
  Workload workload;
  Layout layout = [] {
    Layout l;
    l.seq_len = kDefaultSeqLen;
    return l;
  }();
  bool grad_dtype_set = false;
};

/// What kind of value an option takes (for help texts and type errors).
enum class OptionKind { kFlag, kCount, kReal, kText, kSize };

struct OptionInfo {
  std::string_view name;  // "seq_len"
  OptionKind kind;
  std::string_view help;
};

/// Every training option, in the CLI's order. Example: training_options()[0].name == "seq_len".
std::span<const OptionInfo> training_options();

/// Sets one option. An unknown name is ErrorKind::kUnknownName (with "did you mean"); a value of the
/// wrong kind or spelling is kInvalid / kUnknownName, with the option as the error's field.
/// Example: set_training_option(s, "zero", int64_t{3}) sets s.layout.zero_stage = 3.
Expected<void> set_training_option(TrainingSettings& settings, std::string_view name, const OptionValue& value);

/// The value as a short text for messages: true, 8192, 0.1, 'selective'.
std::string describe_option_value(const OptionValue& value);

/// An option's value as the kind it must be, or "@name VALUE: expected ..." (for other option tables).
Expected<int64_t> option_count(std::string_view name, const OptionValue& value);
Expected<double> option_real(std::string_view name, const OptionValue& value);  // a whole number is a real
Expected<bool> option_flag(std::string_view name, const OptionValue& value);
Expected<std::string> option_text(std::string_view name, const OptionValue& value);

}  // namespace actmem
