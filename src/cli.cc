#include "cli.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "presets.h"

namespace actmem::cli {

int run(int argc, char** argv) {
  CLI::App app{"actmem: GPU memory of transformer training and serving, tensor by tensor"};
  app.require_subcommand(1);
  auto* models = app.add_subcommand("models", "List the built-in model presets");
  models->callback([] {
    for (const auto& p : list_presets()) fmt::print("{:<20} {}\n", p.name, p.description);
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}

}  // namespace actmem::cli
