#include "model/quant_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "util/json_text.h"

namespace actmem {
namespace {

using json = nlohmann::json;

/// Typed access to one quantization_config object; every error names the key path.
class QuantReader {
 public:
  QuantReader(const json& object, std::string path, std::string source)
      : object_(object), path_(std::move(path)), source_(std::move(source)) {}

  /// The object at `key` (already checked to be one), its errors named by the longer path.
  QuantReader child(const json& object, const std::string& key) const {
    return QuantReader(object, path_ + "." + key, source_);
  }

  Error error(const std::string& key, const std::string& what) const {
    return Error{fmt::format("{}: '{}.{}' {}", source_, path_, key, what)};
  }
  const json* find(const std::string& key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  Expected<std::optional<int64_t>> integer(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::optional<int64_t>{};
    if (!v->is_number_integer()) return error(key, fmt::format("must be an integer, got {}", describe_json(*v)));
    const int64_t n = v->get<int64_t>();
    if (n < -1 || n > (int64_t{1} << 20)) return error(key, fmt::format("= {} is out of range", n));
    return std::optional<int64_t>{n};
  }
  Expected<bool> boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) return error(key, fmt::format("must be true or false, got {}", describe_json(*v)));
    return v->get<bool>();
  }
  Expected<std::string> string(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::string{};
    if (!v->is_string()) return error(key, fmt::format("must be a string, got {}", describe_json(*v)));
    return v->get<std::string>();
  }
  /// A list of strings (a single string is read as a list of one).
  Expected<std::vector<std::string>> strings(const std::string& key) const {
    std::vector<std::string> out;
    const json* v = find(key);
    if (!v) return out;
    if (v->is_string()) return std::vector<std::string>{v->get<std::string>()};
    if (!v->is_array()) return error(key, fmt::format("must be a list of names, got {}", describe_json(*v)));
    for (const json& e : *v) {
      if (!e.is_string()) return error(key, fmt::format("must be a list of names, got an element {}", describe_json(e)));
      out.push_back(e.get<std::string>());
    }
    return out;
  }

 private:
  const json& object_;
  std::string path_;
  std::string source_;
};

bool names_lm_head(const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (n.find("lm_head") != std::string::npos) return true;
  return false;
}

bool names_vision(const std::vector<std::string>& names) {
  for (const auto& n : names)
    for (const char* part : {"vision", "multi_modal_projector", "mm_projector", "visual"})
      if (n.find(part) != std::string::npos) return true;
  return false;
}

std::string scale_text(const CheckpointQuant& q) {
  const std::string dtype = q.scale_dtype ? std::string(dtype_name(*q.scale_dtype)) : "the model dtype";
  if (q.group_size > 0 && q.block_rows > 0)
    return fmt::format("one scale per {}×{} block ({})", q.block_rows, q.group_size, dtype);
  if (q.group_size > 0) return fmt::format("one scale per {} input columns ({})", q.group_size, dtype);
  if (q.group_size == 0) return fmt::format("one scale per output row ({})", dtype);
  return fmt::format("one scale per tensor ({})", dtype);
}

/// A compressed-tensors group's `weights` scheme: bits and type, scale strategy, symmetry.
Expected<void> read_weights_scheme(const QuantReader& w, CheckpointQuant& q) {
  auto bits = w.integer("num_bits");
  auto type = w.string("type");
  auto strategy = w.string("strategy");
  auto group_size = w.integer("group_size");
  auto symmetric = w.boolean("symmetric", true);
  auto actorder = w.string("actorder");
  if (!bits) return bits.error();
  if (!type) return type.error();
  if (!strategy) return strategy.error();
  if (!group_size) return group_size.error();
  if (!symmetric) return symmetric.error();
  if (!actorder) return actorder.error();
  const int64_t n = bits->value_or(8);
  const std::string kind = type->empty() ? "int" : *type;
  if (n == 8 && kind == "int") q.weight = DType::kINT8;
  else if (n == 8 && kind == "float") q.weight = DType::kFP8;
  else if (n == 4 && kind == "int") q.weight = DType::kINT4;
  if (!q.weight) {
    q.warnings.push_back(fmt::format("compressed-tensors weights of {} bits, type {} (e.g. NVFP4) are not modelled: "
                                     "weights counted unquantized; give --weight-dtype", n, kind));
    return {};
  }
  q.scale_dtype = n == 8 ? std::optional<DType>{DType::kFP32} : std::nullopt;
  q.zero_points = !*symmetric;
  const std::string s = strategy->empty() ? "tensor" : *strategy;
  if (s == "channel") {
    q.group_size = 0;
  } else if (s == "group") {
    if (!*group_size || **group_size <= 0) return w.error("group_size", "must be a positive integer for strategy group");
    q.group_size = **group_size;
  } else if (s == "tensor") {
    q.group_size = -1;
  } else if (s == "block") {
    const json* block = w.find("block_structure");
    if (!block || !block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
        !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0)
      return w.error("block_structure", "must be two positive integers, e.g. [128, 128]");
    q.block_rows = (*block)[0].get<int64_t>();
    q.group_size = (*block)[1].get<int64_t>();
  } else {
    return w.error("strategy", fmt::format("'{}' is not one of channel, group, tensor, block", s));
  }
  if (*actorder == "group" || *actorder == "weight")
    q.warnings.push_back("compressed-tensors actorder: the int32 g_idx per input column of each linear layer "
                         "is not counted");
  return {};
}

/// compressed-tensors (llm-compressor): the first config group's `weights` scheme
/// (quantization/compressed_tensors/schemes: w8a8_int8, w8a8_fp8 and w8a16_fp8 keep fp32
/// scales; wNa16 packs int4/int8 with scales in the model dtype and, when asymmetric, packed
/// zero points at the weight's bits).
Expected<void> read_compressed_tensors(const QuantReader& r, CheckpointQuant& q) {
  const json* groups = r.find("config_groups");
  if (!groups) {
    q.warnings.push_back("quantization_config (compressed-tensors) has no config_groups: weights counted unquantized");
    return {};
  }
  if (!groups->is_object() || groups->empty())
    return r.error("config_groups", "must be an object of quantization groups");
  auto fmt_name = r.string("format");
  if (!fmt_name) return fmt_name.error();
  if (fmt_name->find("sparse") != std::string::npos || fmt_name->find("24") != std::string::npos)
    q.warnings.push_back(fmt::format("compressed-tensors format '{}' (2:4 sparse) is counted dense", *fmt_name));

  const auto first = groups->begin();
  const std::string& group_name = first.key();
  const json& group = first.value();
  if (!group.is_object()) return r.error("config_groups." + group_name, "must be an object");
  if (groups->size() > 1)
    q.warnings.push_back(fmt::format("compressed-tensors: {} config_groups; every linear layer is counted with "
                                     "the scheme of '{}'", groups->size(), group_name));
  const QuantReader g = r.child(group, "config_groups." + group_name);
  auto targets = g.strings("targets");
  if (!targets) return targets.error();
  bool linear = targets->empty();
  for (const auto& t : *targets) linear = linear || t == "Linear";
  if (!linear)
    q.warnings.push_back(fmt::format("compressed-tensors targets [{}]: counted as every linear layer",
                                     fmt::join(*targets, ", ")));
  auto wit = group.find("weights");
  if (wit == group.end() || wit->is_null()) {
    q.warnings.push_back("compressed-tensors group without a weights scheme: weights counted unquantized");
    return {};
  }
  if (!wit->is_object()) return g.error("weights", "must be an object");
  const QuantReader w = g.child(*wit, "weights");
  if (auto ok = read_weights_scheme(w, q); !ok || !q.weight) return ok;
  // W8A8 (int8 or fp8 with input_activations) and fp8 W8A16 keep fp32 scales; int W8A16 / W4A16
  // are the wNa16 scheme, scales in the model dtype (compressed_tensors.py _is_wNa16_group_channel).
  const auto acts = group.find("input_activations");
  const bool w8a8 = acts != group.end() && !acts->is_null();
  if (q.weight == DType::kINT8 && !w8a8) q.scale_dtype.reset();
  auto ignore = r.strings("ignore");
  if (!ignore) return ignore.error();
  q.lm_head_quantized = !names_lm_head(*ignore);
  q.vision_quantized = !names_vision(*ignore);
  if (r.find("kv_cache_scheme"))
    q.warnings.push_back("quantization_config.kv_cache_scheme: the checkpoint's KV-cache scales apply only with "
                         "--kv-cache-dtype fp8; the cache dtype is the flag's");
  return {};
}

/// vLLM's fp8 checkpoints (quantization/fp8.py Fp8LinearMethod): fp8 weights, fp32
/// weight_scale_inv per weight_block_size block, else one fp32 scale per (fused) tensor.
Expected<void> read_fp8(const QuantReader& r, CheckpointQuant& q) {
  q.weight = DType::kFP8;
  q.scale_dtype = DType::kFP32;
  q.group_size = -1;
  if (const json* block = r.find("weight_block_size")) {
    if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
        !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0)
      return r.error("weight_block_size", "must be two positive integers, e.g. [128, 128]");
    q.block_rows = (*block)[0].get<int64_t>();
    q.group_size = (*block)[1].get<int64_t>();
  }
  std::vector<std::string> skipped;
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    auto names = r.strings(key);
    if (!names) return names.error();
    skipped.insert(skipped.end(), names->begin(), names->end());
  }
  q.vision_quantized = !names_vision(skipped);
  return {};
}

/// GPTQ (quantization/gptq.py, gptq_marlin.py): packed int4/int8, scales in the model dtype per
/// group (group_size -1: per output row); Marlin, which vLLM picks for symmetric 4/8-bit on
/// sm80+, drops the zero points, and keeps g_idx only with desc_act.
Expected<void> read_gptq(const QuantReader& r, CheckpointQuant& q) {
  auto bits = r.integer("bits");
  auto group = r.integer("group_size");
  auto sym = r.boolean("sym", true);
  auto desc_act = r.boolean("desc_act", false);
  auto lm_head = r.boolean("lm_head", false);
  if (!bits) return bits.error();
  if (!group) return group.error();
  if (!sym) return sym.error();
  if (!desc_act) return desc_act.error();
  if (!lm_head) return lm_head.error();
  const int64_t n = bits->value_or(4);
  if (n == 4) q.weight = DType::kINT4;
  else if (n == 8) q.weight = DType::kINT8;
  else {
    q.warnings.push_back(fmt::format("gptq with {} bits is not modelled: weights counted unquantized", n));
    return {};
  }
  const int64_t g = group->value_or(128);
  if (g == 0 || g < -1) return r.error("group_size", fmt::format("= {}: use a positive group or -1", g));
  q.group_size = g == -1 ? 0 : g;
  q.zero_points = !*sym;
  q.lm_head_quantized = *lm_head;
  if (*desc_act) q.warnings.push_back("gptq desc_act: g_idx and its sort indices (int32 per input column of each "
                                      "linear layer) are not counted");
  return {};
}

/// AWQ (quantization/awq.py, awq_marlin.py): packed int4, scales in the model dtype and zero
/// points per group.
Expected<void> read_awq(const QuantReader& r, CheckpointQuant& q) {
  const char* group_key = r.find("q_group_size") ? "q_group_size" : "group_size";
  auto bits = r.integer(r.find("w_bit") ? "w_bit" : "bits");
  auto group = r.integer(group_key);
  auto zero = r.boolean("zero_point", true);
  if (!bits) return bits.error();
  if (!group) return group.error();
  if (!zero) return zero.error();
  if (bits->value_or(4) != 4) {
    q.warnings.push_back(fmt::format("awq with {} bits is not modelled: weights counted unquantized", **bits));
    return {};
  }
  const int64_t g = group->value_or(128);
  if (g <= 0 && g != -1) return r.error(group_key, fmt::format("= {}: use a positive group or -1", g));
  q.weight = DType::kINT4;
  q.group_size = g == -1 ? 0 : g;
  q.zero_points = *zero;
  auto skipped = r.strings("modules_to_not_convert");
  if (!skipped) return skipped.error();
  q.vision_quantized = !names_vision(*skipped);
  return {};
}

/// bitsandbytes (quantization/bitsandbytes.py): 4-bit NF4/FP4 in blocks of 64 with an fp32
/// absmax each (8-bit absmax with double quantization), or LLM.int8 rows with an fp32 scale.
Expected<void> read_bitsandbytes(const QuantReader& r, CheckpointQuant& q) {
  auto four = r.boolean("load_in_4bit", false);
  auto eight = r.boolean("load_in_8bit", false);
  auto dq = r.boolean("bnb_4bit_use_double_quant", false);
  if (!four) return four.error();
  if (!eight) return eight.error();
  if (!dq) return dq.error();
  if (*four) {
    q.weight = DType::kINT4;
    q.group_size = 64;
    q.scale_dtype = *dq ? DType::kINT8 : DType::kFP32;
    if (*dq) q.warnings.push_back("bitsandbytes double quantization: the fp32 scale of each 256 absmax values "
                                  "is not counted");
  } else if (*eight) {
    q.weight = DType::kINT8;
    q.group_size = 0;
    q.scale_dtype = DType::kFP32;
  } else {
    q.warnings.push_back("bitsandbytes without load_in_4bit or load_in_8bit: weights counted unquantized");
  }
  auto skipped = r.strings("llm_int8_skip_modules");
  if (!skipped) return skipped.error();
  q.vision_quantized = !names_vision(*skipped);
  return {};
}

/// mxfp4 (gpt-oss; vllm/model_executor/layers/quantization/mxfp4.py @2a69949bd, v0.19.0): e2m1
/// values, two per byte, with one e8m0 (1-byte) scale per 32 along the input. Mxfp4Config gives
/// linear layers UnquantizedLinearMethod (l.68-80) and the fused MoE layers Mxfp4MoEMethod, so only
/// the routed experts are quantized, whatever modules_to_not_convert lists.
Expected<void> read_mxfp4(const QuantReader&, CheckpointQuant& q) {
  q.weight = DType::kINT4;  // 4-bit storage
  q.group_size = 32;
  q.scale_dtype = DType::kFP8;  // e8m0: one byte
  q.mxfp4_experts = true;
  q.warnings.push_back("mxfp4: the experts are counted as vLLM 0.19's Triton kernels lay them out on Hopper "
                       "(H100/H200); on other GPUs vLLM picks another MoE backend (FlashInfer on Blackwell, Marlin "
                       "on Ampere) whose padding is not modelled");
  return {};
}

}  // namespace

Expected<std::optional<CheckpointQuant>> read_quantization_config(const json& root, const std::string& source) {
  auto it = root.find("quantization_config");
  if (it == root.end() || it->is_null()) return std::optional<CheckpointQuant>{};
  if (!it->is_object())
    return Error{fmt::format("{}: 'quantization_config' must be an object, got {}", source, describe_json(*it))};
  const QuantReader r(*it, "quantization_config", source);
  CheckpointQuant q;
  auto method = r.string("quant_method");
  if (!method) return method.error();
  q.method = method->empty() ? std::string{"unnamed"} : *method;
  Expected<void> read;
  if (q.method == "compressed-tensors") read = read_compressed_tensors(r, q);
  else if (q.method == "fp8") read = read_fp8(r, q);
  else if (q.method == "gptq") read = read_gptq(r, q);
  else if (q.method == "awq") read = read_awq(r, q);
  else if (q.method == "bitsandbytes") read = read_bitsandbytes(r, q);
  else if (q.method == "mxfp4") read = read_mxfp4(r, q);
  else
    q.warnings.push_back(fmt::format("quantization_config.quant_method '{}' is not modelled: weights counted "
                                     "unquantized; give --weight-dtype (int4, int8, fp8)", q.method));
  if (!read) return read.error();
  if (q.mxfp4_experts) {
    q.summary = "mxfp4: routed experts in e2m1 (4 bits), one e8m0 scale per 32 input columns; the rest "
                "unquantized";
  } else if (q.weight) {
    q.summary = fmt::format("{} {}, {}{}", q.method, dtype_name(*q.weight), scale_text(q),
                            q.zero_points ? ", zero points" : "");
    if (q.lm_head_quantized)
      q.warnings.push_back(fmt::format("{}: the checkpoint quantizes lm_head too; actmem counts it unquantized",
                                       q.method));
  }
  return std::optional<CheckpointQuant>{std::move(q)};
}

}  // namespace actmem
