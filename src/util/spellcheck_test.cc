#include "util/spellcheck.h"

#include <array>
#include <random>
#include <string>
#include <vector>
#include <algorithm>

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(SpellcheckTest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("llama3", "llama-3"), 1);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("abc", ""), 3);
  // Bounded: exact up to the limit, limit + 1 past it (kitten -> sitting is 3 edits).
  EXPECT_EQ(bounded_edit_distance("kitten", "sitting", 3), 3);
  EXPECT_EQ(bounded_edit_distance("kitten", "sitting", 1), 2);
  EXPECT_EQ(bounded_edit_distance("llama3", "gpt2", 1), 2);
}

// The bounded distance is the full one capped at limit + 1, for every limit: checked on random
// strings over a small alphabet (many near matches) against the whole table (Wagner-Fischer).
TEST(SpellcheckTest, BoundedEqualsCappedFullDistance) {
  std::mt19937 rng(20261203);
  auto word = [&] {
    std::string w(rng() % 12, 'a');
    for (char& c : w) c = static_cast<char>('a' + rng() % 3);
    return w;
  };
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string a = word(), b = word();
    const int full = edit_distance(a, b);
    for (int limit = 0; limit <= 7; ++limit)
      ASSERT_EQ(bounded_edit_distance(a, b, limit), std::min(full, limit + 1)) << a << " / " << b << " limit " << limit;
  }
}

// closest_name() skips candidates by lower bounds only: on random names it picks what a scan of
// every candidate with the whole table picks (the first at the least distance, within the cap).
TEST(SpellcheckTest, ClosestNameEqualsFullScan) {
  std::mt19937 rng(7);
  auto word = [&] {
    std::string w(3 + rng() % 14, 'a');
    for (char& c : w) c = static_cast<char>('a' + rng() % 4);
    return w;
  };
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::string> words;
    for (int i = 0; i < 40; ++i) words.push_back(word());
    const std::vector<std::string_view> names(words.begin(), words.end());
    const std::string name = word();
    const int cap = std::clamp<int>(static_cast<int>(name.size()) / 3, 2, 6);
    std::optional<std::string_view> want;
    int want_distance = cap + 1;
    for (std::string_view c : names)
      if (const int d = edit_distance(name, c); d < want_distance) {
        want = c;
        want_distance = d;
      }
    if (want) {
      EXPECT_EQ(closest_name(name, names), want) << name;
    }
  }
}

TEST(SpellcheckTest, ClosestName) {
  constexpr std::array<std::string_view, 3> names{"llama", "gpt2", "gemma2"};
  EXPECT_EQ(closest_name("lama", names), "llama");
  EXPECT_EQ(closest_name("gemma", names), "gemma2");
  EXPECT_EQ(closest_name("transformer-xl", names), std::nullopt);
  constexpr std::array<std::string_view, 3> gpus{"h100-80gb", "h200-141gb", "a100-40gb"};
  EXPECT_EQ(closest_name("h100", gpus), "h100-80gb");  // a prefix of a longer name
  EXPECT_EQ(closest_name("h1", gpus), std::nullopt);   // too short to mean one
  // The bag-distance filter skips only what is too far: anagrams are near in characters but two
  // swaps away, and the nearest of several close names still wins.
  constexpr std::array<std::string_view, 3> flags{"seq-length", "tensor-model-parallel-size",
                                                  "pipeline-model-parallel-size"};
  EXPECT_EQ(closest_name("seq-lenght", flags), "seq-length");
  EXPECT_EQ(closest_name("tensor-modle-parallel-size", flags), "tensor-model-parallel-size");
  EXPECT_EQ(closest_name("pipline-model-parallel-size", flags), "pipeline-model-parallel-size");
}

}  // namespace
}  // namespace actmem
