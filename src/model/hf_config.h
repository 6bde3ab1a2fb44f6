// Reads a HuggingFace config.json into a ModelSpec. Architecture traits (norm kind, fused
// projections, biases, MoE/MLA style, default values of absent keys) come from one table keyed
// by model_type (arch.h); key spellings and their aliases are data too.
#pragma once

#include <string>
#include <string_view>

#include "actmem/expected.h"
#include "model/model_spec.h"

namespace actmem {

/// Parses config.json text. `display_name` is kept in ModelSpec::name.
/// Example: parse_hf_config(R"({"model_type":"llama","hidden_size":4096,...})", "my.json").
Expected<ModelSpec> parse_hf_config(std::string_view json_text, std::string display_name);

/// Reads and parses a config.json file; errors name the file and the field.
Expected<ModelSpec> load_hf_config(const std::string& path);

}  // namespace actmem
