#include "util/spellcheck.h"

#include <algorithm>
#include <vector>

namespace actmem {

int edit_distance(std::string_view a, std::string_view b) {
  // One row of the dynamic-programming table; inputs are short names.
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string_view> closest_name(std::string_view name, std::span<const std::string_view> candidates) {
  // Names longer than any candidate by far are not typos; also bounds the work on fuzzed input.
  if (name.size() > 256) return std::nullopt;
  const int max_distance = std::max<int>(2, static_cast<int>(name.size()) / 3);
  std::optional<std::string_view> best;
  int best_distance = max_distance + 1;
  for (std::string_view c : candidates) {
    const int d = edit_distance(name, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  // A short form of a longer name ("h100" for "h100-80gb"): the shortest candidate it begins.
  if (!best && name.size() >= 3)
    for (std::string_view c : candidates)
      if (c.substr(0, name.size()) == name && (!best || c.size() < best->size())) best = c;
  return best;
}

}  // namespace actmem
