#include "util/spellcheck.h"

#include <algorithm>
#include <array>
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
  const size_t n = a.size(), m = b.size();
  if (limit < 0) limit = static_cast<int>(n + m);  // no limit: a band as wide as the table, never capped
  // Bounded (Ukkonen's band): a cell with |i - j| > limit costs more than `limit`, so only the
  // diagonal band of width 2·limit + 1 is computed and every value is capped at limit + 1. A fuzzed
  // unknown Megatron flag is checked against ~1,000 names: the band is what keeps that fast.
  const int cap = limit + 1;
  const size_t k = static_cast<size_t>(limit);
  if ((n > m ? n - m : m - n) > k) return cap;
  for (size_t j = 0; j <= m; ++j) row[j] = std::min(static_cast<int>(j), cap);
  for (size_t i = 1; i <= n; ++i) {
    const size_t lo = i > k ? i - k : 1;
    const size_t hi = std::min(m, i + k);
    int diagonal = row[lo - 1];
    row[lo - 1] = lo == 1 ? std::min(static_cast<int>(i), cap) : cap;  // left of the band: too far
    int row_min = row[lo - 1];
    for (size_t j = lo; j <= hi; ++j) {
      const int above = row[j];
      row[j] = std::min(std::min(std::min(above, row[j - 1]) + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)), cap);
      diagonal = above;
      row_min = std::min(row_min, row[j]);
    }
    if (row_min >= cap) return cap;  // no later row gets below its minimum
  }
  return row[m];
}

std::optional<std::string_view> closest_name(std::string_view name, std::span<const std::string_view> candidates) {
  // Names longer than any candidate by far are not typos; also bounds the work on fuzzed input.
  if (name.size() > 256) return std::nullopt;
  // A typo is a few edits (a third of the name, 2 to 6): more is another name, and the cap keeps a
  // long fuzzed word from costing a full table against each of 900 Megatron flags.
  const int max_distance = std::clamp<int>(static_cast<int>(name.size()) / 3, 2, 6);
  std::optional<std::string_view> best;
  int best_distance = max_distance + 1;
  // The bag distance (characters one has that the other lacks, the larger side) bounds the edit
  // distance from below, as the length difference does: most candidates are skipped without the
  // table. Characters are counted in 64 bins (c mod 64): merging bins only lowers the bound.
  std::array<int, 64> name_bins{};
  for (unsigned char ch : name) ++name_bins[ch & 63];
  for (std::string_view c : candidates) {
    const size_t gap = c.size() > name.size() ? c.size() - name.size() : name.size() - c.size();
    if (gap >= static_cast<size_t>(best_distance)) continue;
    std::array<int, 64> bins = name_bins;
    for (unsigned char ch : c) --bins[ch & 63];
    int only_name = 0, only_candidate = 0;
    for (int v : bins) (v > 0 ? only_name : only_candidate) += v > 0 ? v : -v;
    if (std::max(only_name, only_candidate) >= best_distance) continue;
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
