// The arguments of a Megatron-LM launch line as the readers see them (config/megatron_args.cc
// parses the shell; config/megatron_model.cc reads the model parts): each flag once (argparse: the
// last one wins), with its values and the line it was written on, for messages that say where.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "actmem/expected.h"

namespace actmem::megatron {

struct Arg {
  std::string flag;  // without the leading dashes
  std::vector<std::string> values;
  int line = 0;
};

constexpr int64_t kMaxCount = (int64_t{1} << 31) - 1;

class Reader {
 public:
  Reader(std::vector<Arg> args, std::string name) : name_(std::move(name)) {
    for (auto& a : args) args_[a.flag] = std::move(a);  // argparse: the last one wins
  }

  bool has(std::string_view flag) const { return args_.count(std::string(flag)) > 0; }
  std::string where(std::string_view flag) const {
    const auto& a = args_.at(std::string(flag));
    std::string text = "--" + a.flag;
    for (const auto& v : a.values) text += " " + v;
    return fmt::format("{} ({}:{})", text, name_, a.line);
  }
  Expected<std::string> text(std::string_view flag) const {
    const auto& a = args_.at(std::string(flag));
    if (a.values.empty()) return Error{ErrorKind::kConfig, "", fmt::format("{}: --{} needs a value", where(flag), flag)};
    return a.values.front();
  }
  const std::vector<std::string>& values(std::string_view flag) const { return args_.at(std::string(flag)).values; }
  Expected<int64_t> count(std::string_view flag) const {
    auto t = text(flag);
    if (!t) return t.error();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(t->data(), t->data() + t->size(), v);
    if (ec != std::errc{} || end != t->data() + t->size())
      return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a whole number, got '{}'", where(flag), *t)};
    // Every count Megatron takes fits 31 bits; the bound keeps the products below inside int64.
    if (v < 0 || v > kMaxCount)
      return Error{ErrorKind::kConfig, "", fmt::format("{}: {} is out of range; use 0..{}", where(flag), v, kMaxCount)};
    return v;
  }
  Expected<double> real(std::string_view flag) const {
    auto t = text(flag);
    if (!t) return t.error();
    char* end = nullptr;
    const double v = std::strtod(t->c_str(), &end);
    if (end == t->c_str() || *end != '\0')
      return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a number, got '{}'", where(flag), *t)};
    return v;
  }
  const std::map<std::string, Arg>& all() const { return args_; }
  const std::string& name() const { return name_; }

 private:
  std::map<std::string, Arg> args_;
  std::string name_;
};

/// `auto var = expr` for an Expected, returning its error.
#define ACTMEM_TRY(var, expr)        \
  auto var##_r = (expr);             \
  if (!var##_r) return var##_r.error(); \
  auto var = *var##_r


}  // namespace actmem::megatron
