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

// issue 20, item 8: explain indents each term's formula line by four columns under its label; when
// that line wraps, its first line lost the four columns (it started at column 0).
TEST(TextTable, WrapKeepsTheFirstLinesIndentation) {
  EXPECT_EQ(wrap("    a b c", 7, "      "), "    a b\n      c");
  const std::string line = "    " + std::string("Ψ_gpu · (4 (fp32 master) + 4 + 4) ") + std::string(90, 'x');
  const std::string out = wrap(line, 100, "        ");
  EXPECT_EQ(out.rfind("    Ψ_gpu · (4 (fp32 master) + 4 + 4)\n        xxx", 0), 0u) << out;
  // Every line fits 100 display columns, and every line after the first has the hanging indent.
  const std::string many = "  " + [] {
    std::string s;
    for (int i = 0; i < 60; ++i) s += "word" + std::to_string(i) + " ";
    return s;
  }();
  const std::string w = wrap(many, 100, "      ");
  size_t start = 0;
  int lines = 0;
  while (start <= w.size()) {
    size_t end = w.find('\n', start);
    if (end == std::string::npos) end = w.size();
    const std::string l = w.substr(start, end - start);
    EXPECT_LE(l.size(), 100u) << l;
    EXPECT_EQ(l.rfind(lines == 0 ? "  word0 " : "      word", 0), 0u) << l;
    ++lines;
    start = end + 1;
  }
  EXPECT_GT(lines, 2);
}

TEST(TextTable, GroupsDigits) {
  EXPECT_EQ(group_digits(70553706496), "70,553,706,496");
  EXPECT_EQ(group_digits(999), "999");
  EXPECT_EQ(group_digits(-1000), "-1,000");
}

}  // namespace
}  // namespace actmem
