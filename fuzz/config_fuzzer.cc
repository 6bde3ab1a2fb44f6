// libFuzzer target: a config.json (and a Megatron-LM script, a DeepSpeed config, a torchtitan TOML) must give a model
// or an Error on any input, never crash, throw, or hit UB; and every model it gives must prepare and evaluate a layout (or refuse it with an
// Error) without overflow. Uses the public API only.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/library.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The training-config readers take the same bytes: a Megatron-LM script, a DeepSpeed JSON, a
  // torchtitan TOML (pipeline_parallel_degree = 0 divided by zero there before it was refused).
  for (auto config : {actmem::read_megatron_args(text, "fuzz.sh"), actmem::read_deepspeed_config(text, "fuzz.json"),
                      actmem::read_torchtitan_toml(text, "fuzz.toml")}) {
    if (!config) continue;
    actmem::TrainingSettings settings;
    if (!actmem::apply_training_config(*config, settings)) continue;
    (void)actmem::training_config_json(*config).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (config->model) {
      auto p = actmem::prepare(*config->model, settings.workload);
      if (p) (void)actmem::explain(*p, settings.layout);
    }
  }
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
