#include "util/json_text.h"

#include <nlohmann/json.hpp>

namespace actmem {

std::string one_line(std::string_view text, size_t max_len) {
  std::string out;
  for (char c : text.substr(0, max_len)) out.push_back(static_cast<unsigned char>(c) < 0x20 ? ' ' : c);
  if (text.size() > max_len) out += "...";
  return out;
}

std::string describe_json(const nlohmann::json& v) {
  if (v.is_object() || v.is_array()) return std::string{v.type_name()};
  const std::string dumped = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (v.is_string()) return "string " + one_line(dumped, 40);
  return one_line(dumped, 40);
}

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string_view text = e.what();
  if (auto close = text.find("] "); text.starts_with("[json.exception") && close != std::string_view::npos)
    text.remove_prefix(close + 2);
  return one_line(text, 160);
}

}  // namespace actmem
