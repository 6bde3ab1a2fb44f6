#include "util/json_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace actmem {
namespace {

TEST(JsonText, OneLineAndDescribe) {
  EXPECT_EQ(one_line("a\nb\tc"), "a b c");
  EXPECT_EQ(one_line("abcdef", 3), "abc...");
  EXPECT_EQ(describe_json(nlohmann::json::parse(R"("abc")")), "string \"abc\"");
  EXPECT_EQ(describe_json(nlohmann::json::parse("[1, 2]")), "array");
  EXPECT_EQ(describe_json(nlohmann::json::parse("-5")), "-5");
}

TEST(JsonText, ParseErrorWithoutItsPrefix) {
  try {
    (void)nlohmann::json::parse("{");
    FAIL() << "parsed";
  } catch (const nlohmann::json::exception& e) {
    EXPECT_EQ(json_error_text(e),
              "parse error at line 1, column 2: syntax error while parsing object key - unexpected end of input; "
              "expected string literal");
  }
}

}  // namespace
}  // namespace actmem
