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

void TextTable::set_max_width(std::size_t column, std::size_t width) {
  if (max_widths_.size() <= column) max_widths_.resize(column + 1, 0);
  max_widths_[column] = width;
}

namespace {
// Splits `text` at spaces into lines of at most `width` display columns (a longer word stands alone).
std::vector<std::string> wrap_lines(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && display_width(line) + 1 + display_width(word) > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  lines.push_back(line);
  return lines;
}
}  // namespace

std::string wrap(const std::string& text, std::size_t width, const std::string& hanging) {
  if (display_width(text) <= width) return text;
  // The first line keeps its own indentation (an indented term under its heading): split the
  // leading spaces off, wrap the words at what is left of the width, and put them back.
  const size_t lead = std::min(text.find_first_not_of(' '), text.size());
  const auto first = wrap_lines(text.substr(lead), width - std::min(width - 1, lead));
  // Lines after the first are shorter by the hanging indent: wrap the rest again at that width.
  std::string rest;
  for (size_t i = 1; i < first.size(); ++i) rest += (i > 1 ? " " : "") + first[i];
  std::string out = text.substr(0, lead) + first[0];
  if (!rest.empty())
    for (const auto& l : wrap_lines(rest, width - std::min(width - 1, display_width(hanging)))) out += "\n" + hanging + l;
  return out;
}

std::string TextTable::render(const std::string& indent) const {
  // Wrap the cells of limited columns into continuation rows first.
  std::vector<std::vector<Cell>> rows;
  for (const auto& row : rows_) {
    std::vector<std::vector<std::string>> parts(row.size());
    size_t height = 1;
    for (size_t i = 0; i < row.size(); ++i) {
      const size_t limit = i < max_widths_.size() ? max_widths_[i] : 0;
      if (limit > 0) {
        // Continuation lines are indented by two columns, so a wrapped cell reads as one.
        parts[i] = wrap_lines(row[i].text, limit);
        if (parts[i].size() > 1) {
          std::string rest;
          for (size_t j = 1; j < parts[i].size(); ++j) rest += (j > 1 ? " " : "") + parts[i][j];
          parts[i].resize(1);
          for (auto& l : wrap_lines(rest, limit > 2 ? limit - 2 : limit)) parts[i].push_back("  " + l);
        }
      } else {
        parts[i] = {row[i].text};
      }
      height = std::max(height, parts[i].size());
    }
    if (row.empty()) {
      rows.push_back(row);
      continue;
    }
    for (size_t h = 0; h < height; ++h) {
      std::vector<Cell> line(row.size());
      for (size_t i = 0; i < row.size(); ++i) line[i] = {h < parts[i].size() ? parts[i][h] : "", row[i].right};
      rows.push_back(std::move(line));
    }
  }
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], display_width(row[i].text));
  }
  size_t total = 0;
  for (size_t w : widths) total += w;
  total += widths.empty() ? 0 : 2 * (widths.size() - 1);
  std::string out;
  for (const auto& row : rows) {
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
