#include "config/training_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace actmem {

Expected<TrainingConfig> load_training_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Error{ErrorKind::kConfig, "", fmt::format("{}: cannot read the file", path)};
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  auto ends_with = [&path](std::string_view ext) { return path.size() >= ext.size() && path.ends_with(ext); };
  if (ends_with(".toml")) return read_torchtitan_toml(text, path);
  if (ends_with(".yaml") || ends_with(".yml")) return read_hf_training_yaml(text, path);
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    // TrainingArguments' own fields; a DeepSpeed config has none of them at its top level.
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object())
      for (const char* key : {"per_device_train_batch_size", "per_gpu_train_batch_size", "output_dir", "optim",
                              "gradient_checkpointing", "learning_rate", "num_train_epochs", "model_name_or_path"})
        if (j.contains(key)) return read_hf_training_json(text, path);
    return read_deepspeed_config(text, path);
  }
  if (first != std::string::npos && text[first] == '[') return read_torchtitan_toml(text, path);  // a TOML table
  return read_megatron_args(text, path);
}


Expected<void> apply_training_config(const TrainingConfig& config, TrainingSettings& settings) {
  for (const auto& s : config.settings)
    if (auto ok = set_training_option(settings, s.option, s.value); !ok)
      return Error{ok.error().kind, ok.error().field, fmt::format("{}: {}", s.source, ok.error().message)};
  return {};
}

void mark_overrides(TrainingConfig& config, const std::vector<OptionOverride>& overrides, std::string_view origin) {
  std::vector<ConfigSetting> kept;
  for (auto& s : config.settings) {
    auto given = std::find_if(overrides.begin(), overrides.end(), [&](const OptionOverride& o) { return o.option == s.option; });
    if (given == overrides.end()) {
      kept.push_back(std::move(s));
      continue;
    }
    const std::string over = fmt::format("{} <- {}", describe_option_value(s.value), s.source);
    auto earlier = std::find_if(kept.begin(), kept.end(), [&](const ConfigSetting& k) { return k.option == s.option; });
    if (earlier != kept.end() && earlier->source.rfind(origin, 0) == 0) {
      earlier->source += "; over " + over;
      continue;
    }
    s.value = given->value;
    s.source = fmt::format("{} ({}), over {}", origin, given->given, over);
    kept.push_back(std::move(s));
  }
  config.settings = std::move(kept);
}

nlohmann::json training_config_json(const TrainingConfig& config) {
  nlohmann::json settings = nlohmann::json::array();
  for (const auto& s : config.settings) {
    nlohmann::json value;
    std::visit([&](const auto& v) { value = v; }, s.value);
    settings.push_back({{"option", s.option}, {"value", value}, {"source", s.source}});
  }
  return {{"format", config.format},
          {"settings", settings},
          {"model_from", config.model_from},
          {"warnings", config.warnings}};
}

}  // namespace actmem
