#include "util/text_table.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(TextTable, AlignsColumns) {
  TextTable t;
  t.add_row({{"Weights"}, {"1.00", true}});
  t.add_row({{"Optimizer"}, {"12.00", true}});
  EXPECT_EQ(t.render(""), "Weights     1.00\nOptimizer  12.00\n");
}

// A 100-column terminal: a long label wraps under itself, the numbers stay on the first line.
TEST(TextTable, WrapsALimitedColumn) {
  TextTable t;
  t.set_max_width(0, 12);
  t.add_row({{"Largest transient: loss backward"}, {"9.79", true}});
  EXPECT_EQ(t.render(""), "Largest       9.79\n  transient:\n  loss\n  backward\n");
}

TEST(TextTable, WrapKeepsShortTextAndHangsTheRest) {
  EXPECT_EQ(wrap("note: short", 100, "      "), "note: short");
  EXPECT_EQ(wrap("note: a b c", 9, "  "), "note: a b\n  c");
  EXPECT_EQ(wrap("Σ·× Σ·× Σ·×", 7, ""), "Σ·× Σ·×\nΣ·×");  // display width counts code points
}

TEST(TextTable, GroupsDigits) {
  EXPECT_EQ(group_digits(70553706496), "70,553,706,496");
  EXPECT_EQ(group_digits(999), "999");
  EXPECT_EQ(group_digits(-1000), "-1,000");
}

}  // namespace
}  // namespace actmem
