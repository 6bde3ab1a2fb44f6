// Error values for anything a user can get wrong (flags, config files, presets).
// Library code returns Expected<T>; only main() turns an Error into an exit code.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace actmem {

/// A one-line message that names the field and the fix, e.g.
/// `Error{"--tp 3: num_attention_heads (64) is not divisible by 3; pick a TP that divides it"}`.
struct Error {
  std::string message;
};

/// Minimal std::expected stand-in (C++20 has none): holds a T or an Error.
///   Expected<int> r = parse_int("12"); if (!r) return r.error();
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Expected(Error error) : v_(std::move(error)) {}        // NOLINT
  explicit operator bool() const { return v_.index() == 0; }
  bool has_value() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Expected<void>: success or an Error.
template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  explicit operator bool() const { return ok_; }
  bool has_value() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace actmem
