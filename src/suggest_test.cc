#include "suggest.h"

#include <gtest/gtest.h>

#include "text_table.h"

namespace actmem {
namespace {

TEST(Suggest, EditDistance) {
  EXPECT_EQ(edit_distance("llama3-70b", "llama-3-70b"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("ABC", "abc"), 0u);
}

TEST(Suggest, ClosestMatchOnlyForTypos) {
  const std::vector<std::string> names{"estimate", "serve", "models", "explain"};
  EXPECT_EQ(closest_match("estimat", names), "estimate");
  EXPECT_EQ(closest_match("srve", names), "serve");
  EXPECT_EQ(closest_match("banana-split", names), std::nullopt);
}

TEST(TextTable, AlignsColumns) {
  TextTable t;
  t.add_row({{"Weights"}, {"1.00", true}});
  t.add_row({{"Optimizer"}, {"12.00", true}});
  EXPECT_EQ(t.render(""), "Weights     1.00\nOptimizer  12.00\n");
  EXPECT_EQ(group_digits(70553706496), "70,553,706,496");
  EXPECT_EQ(group_digits(999), "999");
}

}  // namespace
}  // namespace actmem
