#include "model/quant_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/hf_config.h"

namespace actmem {
namespace {

CheckpointQuant read(const char* text) {
  auto q = read_quantization_config(nlohmann::json::parse(text), "config.json");
  EXPECT_TRUE(q.has_value()) << (q ? "" : q.error().message);
  EXPECT_TRUE(q && q->has_value());
  return q && *q ? **q : CheckpointQuant{};
}

std::string error_of(const char* text) {
  auto q = read_quantization_config(nlohmann::json::parse(text), "config.json");
  EXPECT_FALSE(q.has_value());
  return q ? "" : q.error().message;
}

// RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8 config.json (llm-compressor W8A8): int8
// weights, one fp32 scale per output channel (vLLM compressed_tensors_w8a8_int8.py
// ChannelQuantScaleParameter, torch.float32), lm_head ignored.
TEST(QuantConfig, CompressedTensorsW8A8Int8) {
  const CheckpointQuant q = read(R"({"quantization_config": {"quant_method": "compressed-tensors",
    "format": "int-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true, "dynamic": false},
    "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": true, "dynamic": true}}},
    "ignore": ["lm_head"]}})");
  EXPECT_EQ(q.method, "compressed-tensors");
  EXPECT_EQ(q.weight, DType::kINT8);
  EXPECT_EQ(q.group_size, 0);
  EXPECT_EQ(q.scale_dtype, DType::kFP32);
  EXPECT_FALSE(q.zero_points);
  EXPECT_FALSE(q.lm_head_quantized);
  EXPECT_TRUE(q.warnings.empty());
  EXPECT_EQ(q.summary, "compressed-tensors int8, one scale per output row (fp32)");
}

// RedHatAI/Mistral-Small-3.1-24B-Instruct-2503-quantized.w8a8: the vision tower and projector
// are in `ignore`, so they stay bf16.
TEST(QuantConfig, IgnoredVisionTower) {
  const CheckpointQuant q = read(R"({"quantization_config": {"quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int",
    "strategy": "channel", "symmetric": true}}},
    "ignore": ["lm_head", "re:vision_tower.*", "re:multi_modal_projector.*"]}})");
  EXPECT_FALSE(q.vision_quantized);
  EXPECT_FALSE(q.lm_head_quantized);
}

// W8A16 int8 (no input_activations): vLLM's wNa16 scheme, scales in the model dtype
// (compressed_tensors.py _is_wNa16_group_channel), not W8A8's fp32.
TEST(QuantConfig, CompressedTensorsW8A16Int8) {
  const CheckpointQuant q = read(R"({"quantization_config": {"quant_method": "compressed-tensors",
    "format": "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "int", "strategy": "group", "group_size": 128, "symmetric": true}}},
    "ignore": ["lm_head"]}})");
  EXPECT_EQ(q.weight, DType::kINT8);
  EXPECT_EQ(q.group_size, 128);
  EXPECT_FALSE(q.scale_dtype.has_value());
}

// RedHatAI/Qwen2.5-7B-Instruct-FP8-dynamic: fp8 weights per output channel, fp32 scales.
TEST(QuantConfig, CompressedTensorsFp8Dynamic) {
  const CheckpointQuant q = read(R"({"quantization_config": {"quant_method": "compressed-tensors",
    "format": "float-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true}}},
    "ignore": ["lm_head"]}})");
  EXPECT_EQ(q.weight, DType::kFP8);
  EXPECT_EQ(q.group_size, 0);
  EXPECT_EQ(q.scale_dtype, DType::kFP32);
}

// compressed-tensors W4A16 (llm-compressor's GPTQ recipe, e.g. RedHatAI/...-quantized.w4a16):
// packed int4, scales in the model dtype per 128 input columns.
TEST(QuantConfig, CompressedTensorsW4A16Group) {
  const CheckpointQuant q = read(R"({"quantization_config": {"quant_method": "compressed-tensors",
    "format": "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": false,
    "actorder": "group"}}}, "ignore": ["lm_head"]}})");
  EXPECT_EQ(q.weight, DType::kINT4);
  EXPECT_EQ(q.group_size, 128);
  EXPECT_FALSE(q.scale_dtype.has_value());  // the model's dtype
  EXPECT_TRUE(q.zero_points);
  ASSERT_EQ(q.warnings.size(), 1u);
  EXPECT_NE(q.warnings[0].find("g_idx"), std::string::npos);
}

// deepseek-ai/DeepSeek-V3 config.json: fp8 e4m3 with one fp32 scale per 128×128 block
// (vLLM fp8.py: weight_scale_inv of shape ⌈out/128⌉ × ⌈in/128⌉).
TEST(QuantConfig, Fp8BlockWise) {
  const CheckpointQuant q = read(R"({"quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
    "quant_method": "fp8", "weight_block_size": [128, 128]}})");
  EXPECT_EQ(q.weight, DType::kFP8);
  EXPECT_EQ(q.block_rows, 128);
  EXPECT_EQ(q.group_size, 128);
  EXPECT_EQ(q.summary, "fp8 fp8, one scale per 128×128 block (fp32)");
}

// TheBloke/Llama-2-7B-GPTQ: 4 bits, group 128, symmetric (Marlin keeps no zero points).
TEST(QuantConfig, Gptq) {
  const CheckpointQuant q = read(R"({"quantization_config": {"bits": 4, "group_size": 128, "damp_percent": 0.01,
    "desc_act": false, "sym": true, "true_sequential": true, "quant_method": "gptq"}})");
  EXPECT_EQ(q.weight, DType::kINT4);
  EXPECT_EQ(q.group_size, 128);
  EXPECT_FALSE(q.zero_points);
  EXPECT_TRUE(q.warnings.empty());
  // group_size -1 is one scale per output row.
  EXPECT_EQ(read(R"({"quantization_config": {"bits": 8, "group_size": -1, "quant_method": "gptq"}})").group_size, 0);
}

// TheBloke/Llama-2-7B-AWQ: 4 bits, group 128, zero points.
TEST(QuantConfig, Awq) {
  const CheckpointQuant q =
      read(R"({"quantization_config": {"quant_method": "awq", "zero_point": true, "group_size": 128, "bits": 4,
    "version": "gemm"}})");
  EXPECT_EQ(q.weight, DType::kINT4);
  EXPECT_EQ(q.group_size, 128);
  EXPECT_TRUE(q.zero_points);
}

// unsloth/...-bnb-4bit: NF4 in blocks of 64, absmax 8-bit under double quantization.
TEST(QuantConfig, BitsAndBytesNf4) {
  const CheckpointQuant q = read(R"({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true,
    "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true, "llm_int8_skip_modules": null}})");
  EXPECT_EQ(q.weight, DType::kINT4);
  EXPECT_EQ(q.group_size, 64);
  EXPECT_EQ(q.scale_dtype, DType::kINT8);
  EXPECT_EQ(q.warnings.size(), 1u);
}

TEST(QuantConfig, UnmodelledFormatsWarn) {
  // NVFP4 (compressed-tensors 4-bit float) and an unknown method: weights unquantized, a warning.
  const CheckpointQuant nvfp4 = read(R"({"quantization_config": {"quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
    "strategy": "tensor_group", "group_size": 16}}}}})");
  EXPECT_FALSE(nvfp4.weight.has_value());
  ASSERT_EQ(nvfp4.warnings.size(), 1u);
  EXPECT_NE(nvfp4.warnings[0].find("not modelled"), std::string::npos);
  const CheckpointQuant hqq = read(R"({"quantization_config": {"quant_method": "hqq"}})");
  EXPECT_FALSE(hqq.weight.has_value());
  EXPECT_NE(hqq.warnings.at(0).find("'hqq' is not modelled"), std::string::npos);
}

TEST(QuantConfig, AbsentIsNullopt) {
  auto q = read_quantization_config(nlohmann::json::parse(R"({"model_type": "llama"})"), "config.json");
  ASSERT_TRUE(q.has_value());
  EXPECT_FALSE(q->has_value());
}

TEST(QuantConfig, MalformedFieldsNameThePath) {
  EXPECT_EQ(error_of(R"({"quantization_config": 5})"), "config.json: 'quantization_config' must be an object, got 5");
  EXPECT_EQ(error_of(R"({"quantization_config": {"quant_method": "compressed-tensors", "config_groups":
    {"g": {"weights": {"num_bits": "8"}}}}})"),
            "config.json: 'quantization_config.config_groups.g.weights.num_bits' must be an integer, got string \"8\"");
  EXPECT_EQ(error_of(R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}})"),
            "config.json: 'quantization_config.weight_block_size' must be two positive integers, e.g. [128, 128]");
  EXPECT_EQ(error_of(R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 0}})"),
            "config.json: 'quantization_config.group_size' = 0: use a positive group or -1");
}

// The model reader keeps it on the ModelSpec, from the root of a multimodal wrapper too.
TEST(QuantConfig, ReadWithTheModel) {
  auto spec = parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256,
    "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": true}})",
                              "tiny.json");
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  ASSERT_TRUE(spec->quant.has_value());
  EXPECT_EQ(spec->quant->group_size, 32);
  auto bad = parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256, "quantization_config": []})",
                             "tiny.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "tiny.json: 'quantization_config' must be an object, got array");
}

// openai/gpt-oss-20b's quantization_config: vLLM's Mxfp4Config quantizes the fused MoE layers
// only (quantization/mxfp4.py l.68-80 @2a69949bd, v0.19.0), e2m1 values with one e8m0 scale per 32.
TEST(QuantConfig, Mxfp4QuantizesTheExpertsOnly) {
  const CheckpointQuant q = read(R"({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert":
    ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}})");
  EXPECT_EQ(q.method, "mxfp4");
  EXPECT_TRUE(q.mxfp4_experts);
  EXPECT_EQ(q.group_size, 32);
  EXPECT_FALSE(q.lm_head_quantized);
  ASSERT_EQ(q.warnings.size(), 1u);  // the layout is Hopper's
  EXPECT_NE(q.warnings[0].find("Hopper"), std::string::npos);
}

}  // namespace
}  // namespace actmem
