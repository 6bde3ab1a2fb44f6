// A tiny text-table helper (after ccache's util::TextTable): rows of cells, columns padded to
// their widest cell, numbers right-aligned.
#pragma once

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
  std::string render(const std::string& indent = "  ") const;

 private:
  std::vector<std::vector<Cell>> rows_;
};

/// 70553706496 -> "70,553,706,496": exact counts stay readable.
std::string group_digits(long long n);

}  // namespace actmem
