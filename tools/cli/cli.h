// Command-line front end. Each subcommand registers its flags on a CLI::App and returns the
// function to run once parsed; the table in cli.cc lists them. Exit codes: 0 ok, 2 bad input.
#pragma once

#include <string>

#include "api/library.h"
#include "plan_cli.h"  // FitFlags

namespace actmem::cli {

int run(int argc, char** argv);

/// The CLI's spelling of a library option (Error messages write `@seq_len`): --seq-len; zero_stage is --zero.
std::string flag_of(const std::string& field);
/// One error line on stderr, options spelled as flags (--seq-len); returns 2.
int report_error(const Error& e);

/// `actmem estimate` flags given as one string (`plan --from "--model llama-3-70b --tp 8"`): the
/// model prepared, the layout, and the GPU flags among them.
struct EstimateArgs {
  PreparedModel model;
  Layout layout;
  FitFlags fit;
};
Expected<EstimateArgs> parse_estimate_args(const std::string& args);

}  // namespace actmem::cli
