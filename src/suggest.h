// "Did you mean ...?" for names a user types (presets, model types, subcommands, flag values).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actmem {

/// Levenshtein distance, case-insensitive. Example: edit_distance("llama3-70b", "llama-3-70b") == 1.
size_t edit_distance(std::string_view a, std::string_view b);

/// The closest candidate within a distance that still looks like a typo (a third of the length,
/// at least 2), or nothing. Example: closest_match("estimat", {"estimate","serve"}) == "estimate".
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace actmem
