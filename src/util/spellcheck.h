// "did you mean ...?" for unknown names (model types, presets), as ninja's SpellcheckString does.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace actmem {

/// Levenshtein distance. Example: edit_distance("llama3", "llama-3") == 1.
int edit_distance(std::string_view a, std::string_view b);

/// The same, but stops once every way on is longer than `limit` and returns limit + 1 then
/// (limit < 0: no limit). Example: bounded_edit_distance("llama3", "gpt2", 1) == 2.
int bounded_edit_distance(std::string_view a, std::string_view b, int limit);

/// The candidate closest to `name` if it is close enough to be a likely typo (distance at most
/// |name|/3, at least 2 and at most 6); nullopt otherwise. Example: closest_name("lama", {"llama","gpt2"}) == "llama".
std::optional<std::string_view> closest_name(std::string_view name, std::span<const std::string_view> candidates);

}  // namespace actmem
