// The model of a Megatron-LM launch line, composed from its switches the way Megatron-core composes
// GPTModel: each switch sets one ModelSpec part (norm, MLP activation, position encoding, biases,
// attention kind, qk-norm, MoE layout, MLA), so every combination Megatron builds is one ModelSpec.
//
//   --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention
//   --num-query-groups 8 --vocab-size 131072 ...   -> LayerNorm, GeLU, learned positions, biases, 8 KV heads
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "config/megatron_reader.h"
#include "config/training_config.h"
#include "actmem/expected.h"

namespace actmem {

/// Reads the model arguments into cfg.model, and how each part was read into cfg.model_from.
/// Without --hidden-size the arguments are a layout only: no model, no error.
Expected<void> read_megatron_model(const megatron::Reader& in, TrainingConfig& cfg);

namespace megatron {

/// --moe-layer-freq (arguments.py moe_freq_type, gpt_layer_specs.py): an integer N (layer i has
/// routed experts when i % N == 0), or a Python list expression of L 0/1 values (_eval_pattern:
/// integers, lists, `+`, `*`, parentheses). Example: moe_layer_pattern("([0]*3+[1]*5)", 8) is
/// three dense layers, then five MoE layers.
Expected<std::vector<bool>> moe_layer_pattern(std::string_view text, int64_t num_layers);

/// --no-rope-freq (transformer_config.py __post_init__): an integer N, ([0]*(N-1) + [1]) repeated
/// (L must be a multiple of N), or a list of L 0/1 values; 1 is a layer without RoPE.
Expected<std::vector<bool>> no_rope_pattern(std::string_view text, int64_t num_layers);

}  // namespace megatron
}  // namespace actmem
