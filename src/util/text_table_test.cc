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

TEST(TextTable, GroupsDigits) {
  EXPECT_EQ(group_digits(70553706496), "70,553,706,496");
  EXPECT_EQ(group_digits(999), "999");
  EXPECT_EQ(group_digits(-1000), "-1,000");
}

}  // namespace
}  // namespace actmem
