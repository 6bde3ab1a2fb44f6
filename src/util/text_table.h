// A tiny text-table helper (after ccache's util::TextTable): rows of cells, columns padded to
// their widest cell, numbers right-aligned.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace actmem {

class TextTable {
 public:
  struct Cell {
    std::string text;
    bool right = false;  // right-align (numbers)
  };
  /// Example: t.add_row({{"Weights"}, {"131.42", true}}); t.render() == "Weights  131.42\n".
  void add_row(std::vector<Cell> cells) { rows_.push_back(std::move(cells)); }
  /// A horizontal rule across the table's full width.
  void add_rule() { rows_.push_back({}); }
  /// Wrap column `column`'s cells at `width` display columns (at spaces); a wrapped cell continues
  /// on the next lines with the other columns blank, so a table fits a 100-column terminal.
  void set_max_width(std::size_t column, std::size_t width);
  std::string render(const std::string& indent = "  ") const;

 private:
  std::vector<std::vector<Cell>> rows_;
  std::vector<std::size_t> max_widths_;  // 0 = no limit
};

/// `text` word-wrapped at `width` display columns; the first line keeps the text's leading spaces,
/// lines after it start with `hanging`. Example: wrap("note: a b c", 9, "  ") == "note: a b\n  c";
/// wrap("    a b c", 7, "      ") == "    a b\n      c".
std::string wrap(const std::string& text, std::size_t width, const std::string& hanging);

/// 70553706496 -> "70,553,706,496": exact counts stay readable.
std::string group_digits(long long n);

}  // namespace actmem
