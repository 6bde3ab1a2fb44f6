// libFuzzer target: a config.json must give a model or an Error on any input, never crash, throw,
// or hit UB; and every model it gives must prepare and evaluate a layout (or refuse it with an
// Error) without overflow. Uses the public API only.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "actmem/actmem.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = actmem::parse_hf_config(text, "fuzz.json");
  if (!spec) return 0;
  auto prepared = actmem::prepare(*spec, {});
  if (!prepared) return 0;
  actmem::Totals totals;
  actmem::Layout layout;
  layout.seq_len = 4096;
  layout.parallel = {.dp = 8, .tp = 2, .sp = true, .pp = 2};
  (void)actmem::evaluate(*prepared, layout, totals);
  (void)actmem::explain(*prepared, layout);
  return 0;
}
