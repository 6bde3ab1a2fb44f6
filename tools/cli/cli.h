// Command-line front end. Each subcommand registers its flags on a CLI::App and returns the
// function to run once parsed; the table in cli.cc lists them. Exit codes: 0 ok, 2 bad input.
#pragma once

#include <string>

namespace actmem::cli {

int run(int argc, char** argv);

/// The CLI's spelling of a library option (Error messages write `@seq_len`): --seq-len; zero_stage is --zero.
std::string flag_of(const std::string& field);

}  // namespace actmem::cli
