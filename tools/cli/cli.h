// Command-line front end. Each subcommand registers its flags on a CLI::App and returns the
// function to run once parsed; the table in cli.cc lists them. Exit codes: 0 ok, 2 bad input.
#pragma once

namespace actmem::cli {

int run(int argc, char** argv);

}  // namespace actmem::cli
