// ConfigReader: reads a config.json's keys by their spellings across HF config classes, from a
// multimodal wrapper's text_config, the wrapper itself, or the config class's defaults, checking
// JSON type and range and naming the key in every Error. Internal to the HF config reader
// (hf_config.cc and the family readers beside it).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actmem/expected.h"
#include "util/json_text.h"

namespace actmem::hf_detail {

using json = nlohmann::json;

/// One config value and its spellings across HF config classes; the first present one wins.
struct Key {
  std::array<std::string_view, 4> spellings;
  bool wrapper_fallback = false;  // also looked up at the top level of a multimodal wrapper
};

inline std::string describe(const json& v) { return describe_json(v); }

/// Looks keys up in a config object: in `text_config` for multimodal wrappers, then (for a few
/// keys) in the wrapper, then in the config class's defaults. Every accessor checks the JSON type
/// and the range and names the key in its Error.
class ConfigReader {
 public:
  struct Found {
    std::string name;  // as written, with "text_config." when nested
    const json* value;
  };

  ConfigReader(const json& config, const json* wrapper, const json* class_defaults, std::string source)
      : config_(config), wrapper_(wrapper), class_defaults_(class_defaults), source_(std::move(source)) {}

  /// The first spelling present (null values included); nullopt when absent.
  std::optional<Found> find(const Key& key) const {
    const std::string_view prefix = wrapper_ ? "text_config." : "";
    if (auto f = find_in(config_, key, prefix)) return f;
    if (key.wrapper_fallback && wrapper_)
      if (auto f = find_in(*wrapper_, key, "")) return f;
    if (class_defaults_)
      if (auto f = find_in(*class_defaults_, key, prefix)) return f;
    return std::nullopt;
  }

  Error error(const std::string& message) const { return Error{fmt::format("{}: {}", source_, message)}; }

  /// nullopt when absent or null (HF's None).
  Expected<std::optional<int64_t>> optional_int(const Key& key, int64_t min, int64_t max) const {
    auto f = find(key);
    if (!f || f->value->is_null()) return std::optional<int64_t>{};
    auto v = to_int(*f);
    if (!v) return v.error();
    if (*v < min) {
      return error(min == 1 ? fmt::format("'{}' must be a positive integer, got {}", f->name, *v)
                            : fmt::format("'{}' must be at least {}, got {}", f->name, min, *v));
    }
    if (*v > max)
      return error(fmt::format("'{}' = {} is absurdly large (limit {}); check the config", f->name, *v, max));
    return std::optional<int64_t>{*v};
  }

  Expected<int64_t> required_int(const Key& key, int64_t min, int64_t max) const {
    auto v = optional_int(key, min, max);
    if (!v) return v.error();
    if (!*v) return error(fmt::format("missing required key '{}'; add it as an integer", key.spellings[0]));
    return **v;
  }

  Expected<int64_t> int_or(const Key& key, int64_t fallback, int64_t min, int64_t max) const {
    auto v = optional_int(key, min, max);
    if (!v) return v.error();
    return v->value_or(fallback);
  }

  /// Absent or null give `fallback`.
  Expected<double> double_or(const Key& key, double fallback, double min, double max) const {
    auto f = find(key);
    if (!f || f->value->is_null()) return fallback;
    if (!f->value->is_number())
      return error(fmt::format("'{}' must be a number, got {}", f->name, describe(*f->value)));
    const double v = f->value->get<double>();  // is_number(): cannot throw
    if (!(v >= min && v <= max))
      return error(fmt::format("'{}' = {} is out of range; expected a number in [{}, {}]", f->name, v, min, max));
    return v;
  }

  Expected<bool> bool_or(const Key& key, bool fallback) const {
    auto f = find(key);
    if (!f || f->value->is_null()) return fallback;
    if (!f->value->is_boolean())
      return error(fmt::format("'{}' must be true or false, got {}", f->name, describe(*f->value)));
    return f->value->get<bool>();
  }

  Expected<std::optional<std::string>> optional_string(const Key& key) const {
    auto f = find(key);
    if (!f || f->value->is_null()) return std::optional<std::string>{};
    if (!f->value->is_string())
      return error(fmt::format("'{}' must be a string, got {}", f->name, describe(*f->value)));
    return std::optional<std::string>{f->value->get<std::string>()};
  }

  /// An integer from a JSON number of any kind (HF writes some as 4096.0); never throws.
  Expected<int64_t> to_int(const Found& f) const {
    const json& v = *f.value;
    // Unsigned first: nlohmann's get_ptr<number_integer_t*> also answers for unsigned values.
    if (const auto* u = v.get_ptr<const json::number_unsigned_t*>()) {
      if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return error(fmt::format("'{}' = {} is too large for a size", f.name, *u));
      return static_cast<int64_t>(*u);
    }
    if (const auto* i = v.get_ptr<const json::number_integer_t*>()) return static_cast<int64_t>(*i);
    if (const auto* d = v.get_ptr<const json::number_float_t*>()) {
      if (!std::isfinite(*d) || *d != std::trunc(*d))
        return error(fmt::format("'{}' must be an integer, got {}", f.name, *d));
      if (std::fabs(*d) > 9.0e18) return error(fmt::format("'{}' = {} is too large for a size", f.name, *d));
      return static_cast<int64_t>(*d);
    }
    return error(fmt::format("'{}' must be an integer, got {}", f.name, describe(v)));
  }

 private:
  static std::optional<Found> find_in(const json& object, const Key& key, std::string_view prefix) {
    for (std::string_view name : key.spellings) {
      if (name.empty()) break;
      if (auto it = object.find(std::string{name}); it != object.end())
        return Found{fmt::format("{}{}", prefix, name), &*it};
    }
    return std::nullopt;
  }

  const json& config_;
  const json* wrapper_;
  const json* class_defaults_;
  std::string source_;
};

}  // namespace actmem::hf_detail
