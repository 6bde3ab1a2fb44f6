#include "util/dtype.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_bytes(DType::kBF16), 2);
  EXPECT_EQ(dtype_bytes(DType::kFP32), 4);
  EXPECT_EQ(dtype_bits(DType::kINT4), 4);
  EXPECT_EQ(dtype_bytes(DType::kINT4), 0);
  EXPECT_EQ(dtype_name(DType::kFP8), "fp8");
}

TEST(DType, ParsesTorchSpellings) {
  EXPECT_EQ(parse_dtype("bfloat16").value(), DType::kBF16);
  EXPECT_EQ(parse_dtype("float16").value(), DType::kFP16);
  EXPECT_EQ(parse_dtype("float32").value(), DType::kFP32);
  EXPECT_EQ(parse_dtype("fp8").value(), DType::kFP8);
  auto bad = parse_dtype("bf17");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("bf16"), std::string::npos);
}

}  // namespace
}  // namespace actmem
