// libFuzzer target: parse_hf_config must return a ModelSpec or an Error on any input, never
// crash, throw, or hit UB; and every spec it returns must be countable without overflow.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hf_config.h"
#include "params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = actmem::parse_hf_config(text, "fuzz.json");
  if (spec) {
    const actmem::ParamCounts counts = actmem::count_params(*spec);
    (void)counts.total();
    (void)counts.active();
    (void)counts.non_embedding();
  }
  return 0;
}
