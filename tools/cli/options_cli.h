// `actmem options`: the training options from the library's table (option_table.h): a listing,
// the options reference docs/options.md (--markdown), or the table as JSON (--json) with each
// option's value under the flags given (`actmem options --json --tp 8`: what --tp 8 sets).
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace actmem::cli {

std::function<int()> add_options_command(CLI::App& app);

/// docs/options.md, as `actmem options --markdown` prints it.
std::string options_markdown();

}  // namespace actmem::cli
