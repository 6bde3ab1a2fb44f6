// The library's option table (option_table.h) as CLI11 flags: one flag per training option, its
// help line, type and default from the table, its text converted by the option's kind and set
// through the table once parsed. And CLI11's parse errors in actmem's words.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "api/library.h"

namespace actmem::cli {

/// One training option as a flag: the text given (or the switch).
struct TableFlag {
  const OptionSpec* spec = nullptr;
  std::string text;
  bool on = false;
  const CLI::Option* option = nullptr;
  bool given() const { return option->count() > 0; }
  /// The text as the option's kind: "8" a count for --tp, "0.1" a real, a switch true.
  OptionValue value() const;
};

/// Every training option as a flag (--seq-len, --tp, ...), in help groups named by the table's.
struct TableFlags {
  std::vector<TableFlag> flags;  // CLI11 keeps pointers into it: sized once, before any flag is added
};

/// Adds every table option to `cmd`. Example: add_table_flags(cmd, t) adds --seq-len INT [8192].
/// `only`: just the options of that scope (`plan` takes the workload's); `defaults`: the defaults
/// the help shows (a command's own, as plan's framework).
void add_table_flags(CLI::App* cmd, TableFlags& t, std::optional<OptionScope> only = std::nullopt,
                     const TrainingSettings& defaults = {});

/// The flags given, set through the table in its order on top of `in` (the defaults, or what a
/// --from file set: a flag not given leaves its value standing). The first bad value is the error.
Expected<TrainingSettings> to_settings(const TableFlags& t, TrainingSettings in = {});

/// A small table's options (plan_options(), machine_options()) as flags, each set by name through
/// `set` as CLI11 parses it, so that a bad value is a parse error in the table's words ("--max-tp
/// 'two': expected a whole number"). `shown(name)`: the default help shows ("" for none).
using SetByName = std::function<Expected<void>(std::string_view name, const OptionValue& value)>;
void add_info_flags(CLI::App* cmd, std::span<const OptionInfo> infos, SetByName set,
                    std::string (*shown)(std::string_view name));

/// An option's help line as --help prints it: options as flags, the valid names, a default that is
/// not a value ("default: from config.json"), wrapped to the description column.
std::string flag_help(const OptionSpec& spec);

/// A parse error as one line: a repeated flag is named with its values ("--seq-len given twice (4096
/// and 8192); give it once"); any other error is CLI11's text.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e);

}  // namespace actmem::cli
