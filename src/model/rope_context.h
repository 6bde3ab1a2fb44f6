// config.json's RoPE block (rope_parameters / rope_scaling): the partial rotary factor it may hold
// and the context length its scaling extends the model to, as vLLM derives max_model_len.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/model_spec.h"
#include "actmem/expected.h"

namespace actmem {

/// max_position_embeddings (yarn: original_max_position_embeddings) times the factor, except su,
/// longrope, llama3 and gemma3, whose positions already include it (vllm/config/model.py:2100-2132
/// @8b141ed8c); 0 when the block does not extend the context.
/// Example: {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768} gives 131072.
int64_t rope_extended_context(const nlohmann::json& rope, const ModelSpec& spec);

/// Reads the block named `name`: sets spec.derived_max_len and returns its partial_rotary_factor
/// (rotary_default when it has none); an error text (without the file, values as `describe` puts
/// them) when it is malformed.
Expected<double> read_rope_block(const nlohmann::json& rope, std::string_view name, double rotary_default,
                                 ModelSpec& spec, std::string (*describe)(const nlohmann::json&));

}  // namespace actmem
