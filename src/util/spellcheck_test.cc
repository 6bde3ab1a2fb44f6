#include "util/spellcheck.h"

#include <array>

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(SpellcheckTest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("llama3", "llama-3"), 1);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("abc", ""), 3);
  // Bounded: exact up to the limit, limit + 1 past it (kitten -> sitting is 3 edits).
  EXPECT_EQ(bounded_edit_distance("kitten", "sitting", 3), 3);
  EXPECT_EQ(bounded_edit_distance("kitten", "sitting", 1), 2);
  EXPECT_EQ(bounded_edit_distance("llama3", "gpt2", 1), 2);
}

TEST(SpellcheckTest, ClosestName) {
  constexpr std::array<std::string_view, 3> names{"llama", "gpt2", "gemma2"};
  EXPECT_EQ(closest_name("lama", names), "llama");
  EXPECT_EQ(closest_name("gemma", names), "gemma2");
  EXPECT_EQ(closest_name("transformer-xl", names), std::nullopt);
  constexpr std::array<std::string_view, 3> gpus{"h100-80gb", "h200-141gb", "a100-40gb"};
  EXPECT_EQ(closest_name("h100", gpus), "h100-80gb");  // a prefix of a longer name
  EXPECT_EQ(closest_name("h1", gpus), std::nullopt);   // too short to mean one
}

}  // namespace
}  // namespace actmem
