// Built-in models by name (`--model llama-3-70b`). Each preset is the model's config.json as
// published (or, for paper models, as the paper's table gives it), read by the same parser.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "actmem/expected.h"
#include "model/model_spec.h"

namespace actmem {

struct PresetInfo {
  std::string_view name;         // "llama-3-70b"
  std::string_view description;  // "Meta Llama 3 70B"
  std::string_view source;       // where the numbers come from
};

const std::vector<PresetInfo>& list_presets();

/// Example: load_preset("llama-3-70b")->hidden == 8192. An unknown name gets "did you mean ...?".
Expected<ModelSpec> load_preset(std::string_view name);

/// A path (exists, or ends in .json) is read as config.json; anything else is a preset name.
Expected<ModelSpec> load_model(const std::string& name_or_path);

}  // namespace actmem
