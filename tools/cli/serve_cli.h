// `actmem serve`: serving memory per GPU and, with a GPU, how many sequences or how long a context fit.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace actmem::cli {

/// Registers the `serve` subcommand on `app` and returns its runner, to be called when it was
/// parsed. The runner prints a table (or --json) and returns 0, or prints one error line and returns 2.
/// Example: actmem serve --model llama-3-8b --context-len 8192 --batch 4 --gpu h100-80gb --json
std::function<int()> add_serve_command(CLI::App& app);

}  // namespace actmem::cli
