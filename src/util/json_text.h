// JSON values and parse errors as text for one-line error messages (config readers).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>  // json::exception is a member of the complete type

namespace actmem {

/// Bounded length, no control characters. Example: one_line("a\nb") == "a b".
std::string one_line(std::string_view text, size_t max_len = 80);

/// What a wrong value was: "string \"abc\"", "array", "-5".
std::string describe_json(const nlohmann::json& v);

/// nlohmann's message less its "[json.exception.parse_error.101] " prefix, on one line.
std::string json_error_text(const nlohmann::json::exception& e);

}  // namespace actmem
