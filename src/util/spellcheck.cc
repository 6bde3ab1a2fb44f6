#include "util/spellcheck.h"

#include <algorithm>
#include <vector>

namespace actmem {

int edit_distance(std::string_view a, std::string_view b) { return bounded_edit_distance(a, b, -1); }

int bounded_edit_distance(std::string_view a, std::string_view b, int limit) {
  // One row of the dynamic-programming table; inputs are short names, so the row lives on the stack
  // (a vector per call made the Megatron reader's 900-flag "did you mean" 100 ms under ASan).
  constexpr size_t kStack = 128;
  int stack_row[kStack];
  std::vector<int> heap_row;
  int* row = stack_row;
  if (b.size() + 1 > kStack) {
    heap_row.resize(b.size() + 1);
    row = heap_row.data();
  }
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    int row_min = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min(std::min(row[j], row[j - 1]) + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1));
      diagonal = above;
      row_min = std::min(row_min, row[j]);
    }
    if (limit >= 0 && row_min > limit) return limit + 1;  // no later row gets below its minimum
  }
  return row[b.size()];
}

std::optional<std::string_view> closest_name(std::string_view name, std::span<const std::string_view> candidates) {
  // Names longer than any candidate by far are not typos; also bounds the work on fuzzed input.
  if (name.size() > 256) return std::nullopt;
  // A typo is a few edits (a third of the name, 2 to 6): more is another name, and the cap keeps a
  // long fuzzed word from costing a full table against each of 900 Megatron flags.
  const int max_distance = std::clamp<int>(static_cast<int>(name.size()) / 3, 2, 6);
  std::optional<std::string_view> best;
  int best_distance = max_distance + 1;
  for (std::string_view c : candidates) {
    // The length difference bounds the distance from below: most candidates are skipped unread.
    const size_t gap = c.size() > name.size() ? c.size() - name.size() : name.size() - c.size();
    if (gap >= static_cast<size_t>(best_distance)) continue;
    const int d = bounded_edit_distance(name, c, best_distance - 1);
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
