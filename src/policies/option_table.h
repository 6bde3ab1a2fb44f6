// The training options' one home: a table with one OptionSpec per option (seq_len, tp, recompute,
// ...): its name, kind, scope, group, the frameworks it applies to, its range, its help text, an
// example value, and how to set and read back the Workload / Layout field behind it. Every front end
// reads this table: the CLI builds its flags from it (tools/cli/cli.cc), the Python module takes
// its keywords from it, the web page builds its form from options_json(), the training-config
// readers (--from) set options through it, and docs/options.md is generated from it
// (`actmem options --markdown`). Defaults are not written here: an option's default is what its
// getter reads from a default-constructed TrainingSettings (the struct initializers, options.h).
//
// Names are the CLI's flags with '_' for '-' (--seq-len is seq_len; --zero is zero). Values are
// parsed with the enum name tables (options.h), parse_dtype() and parse_size(); ranges are checked
// later, once, by check_options(). Help texts and errors name options as `@name` (expected.h), which
// each front end spells its own way (--seq-len, seq_len=).
//
//   TrainingSettings s;
//   set_training_option(s, "tp", int64_t{8});            // s.layout.parallel.tp == 8
//   set_training_option(s, "recompute", "selective");   // s.layout.recompute == Recompute::kSelective
//   get_training_option(s, "tp");                        // OptionValue{int64_t{8}}
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>  // options_json(): the table as the web page and `actmem options --json` read it

#include "policies/options.h"
#include "actmem/expected.h"
#include "actmem/values.h"  // OptionValue

namespace actmem {

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
/// "flag", "count", "real", "text", "size".
std::string_view option_kind_name(OptionKind kind);

/// The other option tables (plan, serve, machine): a name, a kind and a help text.
struct OptionInfo {
  std::string_view name;  // "seq_len"
  OptionKind kind;
  std::string_view help;
};

std::string describe_option_value(const OptionValue& value);

/// A number as such a table's options print it: 8, 0.05, 50.0.
template <typename T>
std::string number_shown(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return describe_option_value(OptionValue{static_cast<double>(v)});
  else
    return std::to_string(v);
}

/// A struct field's value as help shows it for such a table's option: a number, a name; nothing
/// for a switch (off) or an unset optional, nor for a plain zero (derived: "searched", "from the GPU").
template <typename T>
std::string default_shown(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return "";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (requires { v.has_value(); }) {
    return v ? number_shown(*v) : "";
  } else {
    return v == 0 ? "" : number_shown(v);
  }
}

/// Which half of the settings an option sets: the workload (what a model is prepared for) or the
/// layout (what one evaluation binds; the planner searches these). options.h says why they differ.
enum class OptionScope { kWorkload, kLayout };
std::string_view option_scope_name(OptionScope scope);  // "workload", "layout"

/// Where an option sits in help screens, docs/options.md and the web form, in this order.
enum class OptionGroup { kJob, kParallel, kRecompute, kPrecision, kFineTuning, kMemory, kHf, kMegatron, kMoeRouter };
/// "Job", "Parallelism", ...: the heading of a group.
std::string_view option_group_name(OptionGroup group);

/// The frameworks an option applies to, as bits of 1 << Framework.
inline constexpr unsigned framework_bit(Framework f) { return 1u << static_cast<unsigned>(f); }
inline constexpr unsigned kAllFrameworks =
    framework_bit(Framework::kHF) | framework_bit(Framework::kMegatron) | framework_bit(Framework::kTorchtitan);

/// One training option. `get` returns nullopt where the value is unset (taken from the model, or
/// derived), which `default_note` then describes.
struct OptionSpec {
  std::string_view name;  // "seq_len": the Python keyword; the CLI's flag is --seq-len
  OptionKind kind;
  OptionScope scope;
  OptionGroup group;
  unsigned frameworks = kAllFrameworks;
  bool advanced = false;        // folded away in the web form
  std::string_view help;        // one sentence, options as @name
  std::string_view example;     // a non-default value as typed on the command line ("4096", "selective", "true")
  std::string_view default_note;  // what an unset default means ("from config.json"); empty: the value says it
  // The range check_options() holds a number to, where the table owns it (NaN: none). Other numbers
  // are checked against the model (packed_docs, frozen_layers, ...) by the stage that uses them.
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
  Expected<void> (*set)(TrainingSettings&, std::string_view name, const OptionValue&);
  std::optional<OptionValue> (*get)(const Workload&, const Layout&);
  std::string (*choices)() = nullptr;  // the valid spellings of a named option (option_choices())

  bool has_range() const { return min == min; }  // not NaN
  bool applies_to(Framework f) const { return (frameworks & framework_bit(f)) != 0; }
};

/// Every training option, grouped (OptionGroup order). Example: training_options()[0].name == "seq_len".
std::span<const OptionSpec> training_options();
/// The option of that name, or nullptr.
const OptionSpec* find_training_option(std::string_view name);

/// Sets one option. An unknown name is ErrorKind::kUnknownName (with "did you mean"); a value of the
/// wrong kind or spelling is kInvalid / kUnknownName, with the option as the error's field.
/// Example: set_training_option(s, "zero", int64_t{3}) sets s.layout.zero_stage = 3.
Expected<void> set_training_option(TrainingSettings& settings, std::string_view name, const OptionValue& value);
/// The value an option has in `settings`, as set_training_option() takes it back (nullopt: unset).
/// Example: get_training_option(TrainingSettings{}, "seq_len") == OptionValue{int64_t{8192}}.
std::optional<OptionValue> get_training_option(const TrainingSettings& settings, std::string_view name);

/// The option's default, as text for help screens and docs: "8192", "hf", "off", "from config.json"
/// (options as @name); `defaults`: a front end's own (the planner's framework), else the table's.
std::string option_default_text(const OptionSpec& spec, const TrainingSettings& defaults = {});
/// The valid spellings of a named option ("none, selective, full"), empty for others.
std::string option_choices(const OptionSpec& spec);

/// The table as JSON, one object per option: name, kind, scope, group, frameworks, advanced, help
/// (with @name references), example, default (the value or null), default_text, choices, min, max,
/// and value: the option's value in `settings`. Example: options_json()[0]["name"] == "seq_len".
nlohmann::json options_json(const TrainingSettings& settings = {});

/// The value as a short text for messages: true, 8192, 0.1, 'selective'.
std::string describe_option_value(const OptionValue& value);
/// The value as a JSON value (true, 8192, 0.1, "selective").
nlohmann::json option_value_json(const OptionValue& value);

/// An option's value as the kind it must be, or "@name VALUE: expected ..." (for other option tables).
Expected<int64_t> option_count(std::string_view name, const OptionValue& value);
Expected<double> option_real(std::string_view name, const OptionValue& value);  // a whole number is a real
Expected<bool> option_flag(std::string_view name, const OptionValue& value);
Expected<std::string> option_text(std::string_view name, const OptionValue& value);

/// Text as a front end received it (a command-line word) as the value `kind` takes: "8" is a count
/// for kCount, "0.1" a real for kReal; text that is not one stays text, for the setter to refuse
/// with its own message ("@tp 'x': expected a whole number"). Flags are not parsed here.
OptionValue option_value_from_text(OptionKind kind, const std::string& text);

}  // namespace actmem
