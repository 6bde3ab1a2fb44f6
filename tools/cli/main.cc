// actmem command line: a thin layer over the library. Subcommands live in a table (cli.h).
#include "cli.h"

int main(int argc, char** argv) { return actmem::cli::run(argc, argv); }
