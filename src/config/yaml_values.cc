#include "config/yaml_values.h"

#include <array>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace actmem {
namespace {

/// PyYAML's (YAML 1.1) booleans, which yaml.safe_load reads as True/False.
std::optional<bool> yaml11_bool(const YAML::Node& node) {
  if (!node.IsScalar() || node.Tag() == "!") return std::nullopt;
  static constexpr std::array<std::string_view, 9> kTrue{"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static constexpr std::array<std::string_view, 9> kFalse{"false", "False", "FALSE", "no", "No", "NO",
                                                          "off", "Off", "OFF"};
  const std::string& s = node.Scalar();
  for (auto t : kTrue)
    if (s == t) return true;
  for (auto f : kFalse)
    if (s == f) return false;
  return std::nullopt;
}

/// Python's str() of a safe_load scalar, as far as vLLM's parser can tell: the text, None for null.
std::string scalar_text(const YAML::Node& node) {
  if (node.IsNull()) return "None";
  if (node.IsScalar()) return node.Scalar();
  return yaml_to_json(node).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

nlohmann::json yaml_to_json(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = node.begin(); it != node.end(); ++it) out[it->first.as<std::string>()] = yaml_to_json(it->second);
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : node) out.push_back(yaml_to_json(v));
    return out;
  }
  if (!node.IsScalar()) return nullptr;
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") return s;  // quoted
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  if (s == "null" || s == "~") return nullptr;
  int64_t i = 0;
  if (YAML::convert<int64_t>::decode(node, i)) return i;
  double d = 0;
  if (YAML::convert<double>::decode(node, d)) return d;
  return s;
}

Expected<std::vector<shell::Token>> vllm_config_arguments(const std::string& path, const std::string& display) {
  const auto dot = path.rfind('.');
  const std::string ext = dot == std::string::npos ? std::string() : path.substr(dot + 1);
  if (ext != "yaml" && ext != "yml")
    return Error{ErrorKind::kConfig, "",
                 fmt::format("--config {}: vLLM takes a .yaml or .yml file here, not '{}' (argparse_utils.py:541)",
                             display, ext)};
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return Error{ErrorKind::kConfig, "", fmt::format("--config {}: cannot read the file", display)};
  } catch (const YAML::Exception& e) {
    return Error{ErrorKind::kConfig, "",
                 fmt::format("{}:{}: malformed YAML: {}", display, e.mark.line + 1, e.msg)};
  }
  if (!root.IsMap())
    return Error{ErrorKind::kConfig, "",
                 fmt::format("--config {}: expected a mapping of vllm serve arguments (key: value)", display)};
  std::vector<shell::Token> out;
  try {
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node key_node = it->first;  // copies: `it->` is a proxy that dies with the statement
      const YAML::Node value = it->second;
      const std::string key = key_node.as<std::string>();
      const int line = key_node.Mark().line + 1;
      auto word = [&](std::string text) { out.push_back({std::move(text), line, display}); };
      if (auto b = yaml11_bool(value)) {
        if (*b) word("--" + key);
      } else if (value.IsSequence()) {
        if (value.size() == 0) continue;
        word("--" + key);
        for (const auto& item : value) word(scalar_text(item));
      } else if (value.IsMap()) {
        word("--" + key);
        word(yaml_to_json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      } else {
        word("--" + key);
        word(scalar_text(value));
      }
    }
  } catch (const YAML::Exception& e) {
    return Error{ErrorKind::kConfig, "", fmt::format("{}:{}: {}", display, e.mark.line + 1, e.msg)};
  }
  return out;
}

}  // namespace actmem
