#include "util/text_table.h"

#include <algorithm>

#include <fmt/format.h>

namespace actmem {

namespace {
// Display width of UTF-8 text: count code points, not bytes ("·" and "×" are one column).
size_t display_width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80 ? 1 : 0;
  return w;
}
}  // namespace

std::string TextTable::render(const std::string& indent) const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], display_width(row[i].text));
  }
  size_t total = 0;
  for (size_t w : widths) total += w;
  total += widths.empty() ? 0 : 2 * (widths.size() - 1);
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    if (row.empty()) {
      for (size_t i = 0; i < total; ++i) line += "─";
      out += line + "\n";
      continue;
    }
    for (size_t i = 0; i < row.size(); ++i) {
      const size_t pad = widths[i] - display_width(row[i].text);
      if (i) line += "  ";
      if (row[i].right) line += std::string(pad, ' ');
      line += row[i].text;
      if (!row[i].right && i + 1 < row.size()) line += std::string(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string group_digits(long long n) {
  std::string digits = fmt::format("{}", n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace actmem
