#include "util/dtype.h"

#include <array>

namespace actmem {

namespace {
struct DTypeRow {
  DType type;
  std::string_view name;
  int bits;
};
// One name table; aliases below map torch spellings onto these.
constexpr std::array<DTypeRow, 10> kDTypes{{
    {DType::kFP32, "fp32", 32},
    {DType::kBF16, "bf16", 16},
    {DType::kFP16, "fp16", 16},
    {DType::kFP8, "fp8", 8},
    {DType::kINT8, "int8", 8},
    {DType::kINT4, "int4", 4},
    {DType::kINT64, "int64", 64},
    {DType::kBool, "bool", 8},
    {DType::kINT32, "int32", 32},  // index tensors (grouped_mm offsets)
    {DType::kFP64, "fp64", 64},    // Megatron --moe-router-dtype fp64 (router logits and probs)
}};
struct Alias {
  std::string_view alias;
  DType type;
};
constexpr std::array<Alias, 10> kAliases{{
    {"float32", DType::kFP32},
    {"float", DType::kFP32},
    {"bfloat16", DType::kBF16},
    {"float16", DType::kFP16},
    {"half", DType::kFP16},
    {"float8_e4m3fn", DType::kFP8},
    {"float8_e5m2", DType::kFP8},
    {"fp8_e4m3", DType::kFP8},
    {"fp8_e5m2", DType::kFP8},
    {"long", DType::kINT64},
}};
const DTypeRow& row(DType t) {
  for (const auto& r : kDTypes)
    if (r.type == t) return r;
  return kDTypes[0];
}
}  // namespace

int dtype_bits(DType t) { return row(t).bits; }
int dtype_bytes(DType t) { return row(t).bits % 8 == 0 ? row(t).bits / 8 : 0; }
std::string_view dtype_name(DType t) { return row(t).name; }

Expected<DType> parse_dtype(std::string_view text) {
  for (const auto& r : kDTypes)
    if (r.name == text) return r.type;
  for (const auto& a : kAliases)
    if (a.alias == text) return a.type;
  return Error{fmt::format("unknown dtype '{}'; use one of fp32, bf16, fp16, fp8, int8, int4", text)};
}

}  // namespace actmem
