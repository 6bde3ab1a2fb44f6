#include "util/bytes.h"

#include <gtest/gtest.h>

#include "actmem/expected.h"

namespace actmem {
namespace {

TEST(Bytes, CheckedArithmeticThrowsOnOverflow) {
  EXPECT_EQ((Bytes{3} * 4).count(), 12);
  EXPECT_THROW(Bytes{int64_t{1} << 62} * 4, OverflowError);
  EXPECT_THROW(Bytes{INT64_MAX} + Bytes{1}, OverflowError);
}

TEST(Bytes, FormatsBinaryAndDecimalUnitsApart) {
  EXPECT_EQ(format_binary(Bytes{96}), "96 B");
  EXPECT_EQ(format_binary(Bytes{int64_t{128} * 1024}), "128.00 KiB");
  EXPECT_EQ(format_binary(Bytes{int64_t{1} << 30}), "1.00 GiB");
  EXPECT_EQ(format_decimal(Bytes{1'120'000'000'000}), "1.12 TB");
  EXPECT_EQ(fmt::format("{}", Bytes{1024}), "1.00 KiB");
}

// ccache-style parse_size: binary and decimal units are different numbers.
TEST(Bytes, ParseSize) {
  EXPECT_EQ(parse_size("80GiB").value(), Bytes{85'899'345'920});
  EXPECT_EQ(parse_size("80 GB").value(), Bytes{80'000'000'000});
  EXPECT_EQ(parse_size("141e9").value(), Bytes{141'000'000'000});
  EXPECT_EQ(parse_size("0.10GiB").value(), Bytes{107'374'182});
  EXPECT_FALSE(parse_size("80 parsecs").has_value());
  EXPECT_FALSE(parse_size("-1GB").has_value());
  EXPECT_FALSE(parse_size("GB").has_value());
  EXPECT_FALSE(parse_size("1e30GB").has_value());
  EXPECT_FALSE(parse_size("0.4").has_value());  // a fraction of a byte: the unit was forgotten
  EXPECT_EQ(parse_size("4096").value(), Bytes{4096});
}

TEST(Bytes, CeilDiv) {
  EXPECT_EQ(ceil_div(10, 3), 4);
  EXPECT_EQ(ceil_div(9, 3), 3);
  EXPECT_EQ(ceil_div(INT64_MAX, 16), INT64_MAX / 16 + 1);  // no overflow in a + b - 1
}

}  // namespace
}  // namespace actmem
