// libFuzzer targets, one per reader (ACTMEM_FUZZ_READER picks it, CMakeLists.txt builds each): the
// reader alone, so that each input costs microseconds, not an engine run (config_fuzzer.cc is the
// engine target). Any input must give a value or an Error: never a crash, a throw, a hang or UB.
// The JSON echo of what was read is built too, as --from prints it. Uses the public API only.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/library.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
#if ACTMEM_FUZZ_READER == 1
  (void)actmem::parse_hf_config(text, "fuzz.json");
  return 0;
#elif ACTMEM_FUZZ_READER == 6
  // The model's path is not checked (model_given): the reader alone, no filesystem.
  auto command = actmem::read_vllm_command(text, "", "fuzz.sh", true);
  if (command) (void)actmem::vllm_command_json(*command).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
#elif ACTMEM_FUZZ_READER == 7
  // The first line a PYTORCH_CUDA_ALLOC_CONF, the rest a trace; replayed on a 1 GiB device.
  const std::size_t eol = text.find('\n');
  auto conf = actmem::AllocatorConfig::parse(text.substr(0, eol == std::string_view::npos ? text.size() : eol));
  auto trace = actmem::parse_allocator_trace(std::string(eol == std::string_view::npos ? "" : text.substr(eol + 1)));
  if (conf && trace) (void)actmem::replay_trace(*trace, *conf, {.capacity = int64_t{1} << 30, .total = int64_t{1} << 30});
  return 0;
#else
#if ACTMEM_FUZZ_READER == 2
  auto config = actmem::read_megatron_args(text, "fuzz.sh");
#elif ACTMEM_FUZZ_READER == 3
  auto config = actmem::read_deepspeed_config(text, "fuzz.json");
#elif ACTMEM_FUZZ_READER == 4
  auto config = actmem::read_torchtitan_toml(text, "fuzz.toml");
#elif ACTMEM_FUZZ_READER == 5
  auto config = actmem::read_hf_training_yaml(text, "fuzz.yaml");
#else
#error "ACTMEM_FUZZ_READER: 1 config.json, 2 Megatron-LM arguments, 3 DeepSpeed JSON, 4 torchtitan TOML, 5 HF YAML, 6 vllm serve, 7 allocator trace"
#endif
  if (!config) return 0;
  actmem::TrainingSettings settings;
  (void)actmem::apply_training_config(*config, settings);
  (void)actmem::training_config_json(*config).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
#endif
}
