// One name table per enum: the spelling a person types and reads, in both directions, and the
// error for a spelling that is not in the table (with "did you mean"). Every enum that a user
// names (framework, attention, recomputation, optimizer, ...) has exactly one such table.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "actmem/expected.h"

namespace actmem {

template <typename E>
struct NameRow {
  E value;
  std::string_view name;
};

/// Example: kRecomputeNames.parse("full").value() == Recompute::kFull;
/// kRecomputeNames.name(Recompute::kFull) == "full".
template <typename E, std::size_t N>
struct NameTable {
  std::string_view what;   // "recomputation", for the error message
  std::string_view field;  // the option it belongs to ("recompute"), named in errors
  std::array<NameRow<E>, N> rows;

  constexpr std::string_view name(E value) const {
    for (const auto& r : rows)
      if (r.value == value) return r.name;
    return "?";
  }
  /// "a, b, c": every valid spelling, in table order.
  std::string valid() const {
    std::string out;
    for (const auto& r : rows) {
      if (!out.empty()) out += ", ";
      out += r.name;
    }
    return out;
  }
  Expected<E> parse(std::string_view text) const {
    for (const auto& r : rows)
      if (r.name == text) return r.value;
    return Error{ErrorKind::kUnknownName, std::string(field),
                 "unknown " + std::string(what) + " '" + std::string(text) + "'; valid values: " + valid()};
  }
};

}  // namespace actmem
