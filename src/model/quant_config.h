// A checkpoint's own weight quantization: config.json's `quantization_config`, read as vLLM
// v0.19 loads it (vllm/model_executor/layers/quantization/, commit 8b141ed8c). One home for what
// each quant_method stores per linear layer; serve (serve/serve.cc) applies it unless flags say
// otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/dtype.h"
#include "actmem/expected.h"

namespace actmem {

struct CheckpointQuant {
  std::string method;          // quant_method as written: "compressed-tensors", "gptq", "awq", "fp8", ...
  std::optional<DType> weight; // storage of the quantized linear layers (int4, int8, fp8); unset: not modelled
  int64_t group_size = 0;      // > 0: input columns per scale; 0: one per output row; -1: one per tensor
  int64_t block_rows = 0;      // > 0 with group_size > 0: one scale per block_rows × group_size block
  std::optional<DType> scale_dtype;  // unset: the model's dtype (GPTQ, AWQ, compressed-tensors wNa16)
  bool zero_points = false;    // asymmetric: a zero point per scale at the weight's bits
  bool lm_head_quantized = false;  // the lm_head is not in the ignore list (actmem keeps it unquantized)
  bool vision_quantized = false;   // a multimodal wrapper's vision tower and projector are quantized too
  // quant_method mxfp4 (gpt-oss): only the routed experts are quantized (vLLM's Mxfp4MoEMethod; every
  // linear layer stays in the model dtype), held in the layout of serve/vllm.h vllm_mxfp4_experts.
  bool mxfp4_experts = false;
  std::string summary;             // one line: "compressed-tensors int8, one scale per output row (fp32)"
  std::vector<std::string> warnings;  // what vLLM stores that actmem does not count, one line each

  friend bool operator==(const CheckpointQuant&, const CheckpointQuant&) = default;
};

/// Reads `quantization_config` of a config.json root (nullopt when absent or null). A method or
/// scheme actmem does not model gives a CheckpointQuant without `weight` and a warning; a field of
/// the wrong type is an Error naming it.
/// Example: {"quant_method":"compressed-tensors","config_groups":{"group_0":{"targets":["Linear"],
///   "weights":{"num_bits":8,"type":"int","strategy":"channel","symmetric":true}}},"ignore":["lm_head"]}
///   -> weight int8, group_size 0, scale fp32.
Expected<std::optional<CheckpointQuant>> read_quantization_config(const nlohmann::json& root,
                                                                  const std::string& source);

}  // namespace actmem
