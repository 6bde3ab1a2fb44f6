#include "config/training_config.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace actmem {

Expected<void> apply_training_config(const TrainingConfig& config, TrainingSettings& settings) {
  for (const auto& s : config.settings)
    if (auto ok = set_training_option(settings, s.option, s.value); !ok)
      return Error{ok.error().kind, ok.error().field, fmt::format("{}: {}", s.source, ok.error().message)};
  return {};
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
