#include "model/rope_context.h"

#include <string>

#include <fmt/format.h>

namespace actmem {

int64_t rope_extended_context(const nlohmann::json& rp, const ModelSpec& spec) {
  auto text = [&](const char* key) {
    return rp.contains(key) && rp[key].is_string() ? rp[key].get<std::string>() : std::string();
  };
  const std::string type = rp.contains("rope_type") ? text("rope_type") : text("type");
  if (type == "su" || type == "longrope" || type == "llama3" || spec.model_type.find("gemma3") != std::string::npos)
    return 0;
  if (!rp.contains("factor") || !rp["factor"].is_number()) return 0;
  const double factor = rp["factor"].get<double>();
  if (!(factor >= 1.0 && factor <= 1024.0)) return 0;
  double base = static_cast<double>(spec.max_positions);
  if (type == "yarn" && rp.contains("original_max_position_embeddings") &&
      rp["original_max_position_embeddings"].is_number_integer())
    base = static_cast<double>(rp["original_max_position_embeddings"].get<int64_t>());
  return static_cast<int64_t>(base * factor);
}

Expected<double> read_rope_block(const nlohmann::json& rope, std::string_view name, double rotary_default,
                                 ModelSpec& spec, std::string (*describe)(const nlohmann::json&)) {
  if (!rope.is_object())
    return Error{fmt::format("'{}' must be an object or null, got {}", name, describe(rope))};
  double rotary = rotary_default;
  if (auto it = rope.find("partial_rotary_factor"); it != rope.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0.0 && it->get<double>() <= 1.0))
      return Error{fmt::format("'{}.partial_rotary_factor' must be a number in (0, 1], got {}", name,
                               describe(*it))};
    rotary = it->get<double>();
  }
  spec.derived_max_len = rope_extended_context(rope, spec);
  auto text = [&](const char* key) {
    auto it = rope.find(key);
    return it != rope.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  spec.rope_scaling.type = rope.contains("rope_type") ? text("rope_type") : text("type");
  if (spec.rope_scaling.type == "default") spec.rope_scaling.type.clear();
  if (auto it = rope.find("factor"); it != rope.end() && it->is_number() && it->get<double>() >= 1.0 &&
                                     it->get<double>() <= 1024.0)
    spec.rope_scaling.factor = it->get<double>();
  if (auto it = rope.find("original_max_position_embeddings");
      it != rope.end() && it->is_number_integer() && it->get<int64_t>() > 0 && it->get<int64_t>() <= (int64_t{1} << 34))
    spec.rope_scaling.original_max_positions = it->get<int64_t>();
  return rotary;
}

}  // namespace actmem
