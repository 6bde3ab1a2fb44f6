// Element types of weights, gradients, optimizer state, activations and KV cache.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "actmem/expected.h"

namespace actmem {

enum class DType { kFP32, kBF16, kFP16, kFP8, kINT8, kINT4, kINT64, kBool, kINT32, kFP64 };

/// Size of one element in bits (int4 is 4): weight sizes of packed types need bits.
int dtype_bits(DType t);
/// Size of one element in bytes for byte-addressable types; int4 has no whole-byte size and
/// returns 0 here: use dtype_bits() and round up per tensor.
int dtype_bytes(DType t);
/// "bf16", "fp32", ...  Example: dtype_name(DType::kBF16) == "bf16".
std::string_view dtype_name(DType t);
/// Accepts our names and the torch spellings found in config.json ("bfloat16", "float32", "float16", "half").
Expected<DType> parse_dtype(std::string_view text);

}  // namespace actmem

template <>
struct fmt::formatter<actmem::DType> : fmt::formatter<std::string_view> {
  auto format(actmem::DType t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(actmem::dtype_name(t), ctx);
  }
};
