// Error values for anything a user can get wrong (flags, config files, presets).
// Library code returns Expected<T>; only main() turns an Error into an exit code.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <variant>

namespace actmem {

/// What kind of mistake an Error reports, for front ends that react differently (a web form marks
/// the field, Python raises ValueError for all of them).
enum class ErrorKind {
  kInvalid,       // a value out of its range or malformed (--seq-len 0, "80GX")
  kUnknownName,   // a name not in a table (preset, GPU, framework, model_type)
  kIncompatible,  // values that do not go together (TP not dividing the heads, --cp with eager)
  kConfig,        // a config.json that is malformed or inconsistent
  kOverflow,      // sizes beyond 64-bit arithmetic
};

/// A one-line message that says what was wrong and what would be right, with the kind and the
/// option (`field`, e.g. "tp") at fault. Options are written `@tp` inside the message; each front end
/// spells them its own way (the CLI as --tp, Python as tp=): see render_message().
///   Error{ErrorKind::kIncompatible, "tp", "@tp 3: num_attention_heads (64) is not divisible by 3; ..."}
struct Error {
  ErrorKind kind = ErrorKind::kInvalid;
  std::string field;    // the option at fault ("tp", "seq_len"); empty when it is a file or a name
  std::string message;  // with @option references

  Error() = default;
  explicit Error(std::string text) : message(std::move(text)) {}
  Error(ErrorKind k, std::string f, std::string text) : kind(k), field(std::move(f)), message(std::move(text)) {}
};

/// The message with every `@option` written by `spell` (e.g. "tp" -> "--tp"). An '@' not followed
/// by a lower-case letter stays as it is.
template <typename Spell>
std::string render_message(const std::string& message, Spell&& spell) {
  std::string out;
  out.reserve(message.size() + 16);
  for (std::size_t i = 0; i < message.size(); ++i) {
    if (message[i] == '@' && i + 1 < message.size() && message[i + 1] >= 'a' && message[i + 1] <= 'z') {
      std::size_t j = i + 1;
      while (j < message.size() && ((message[j] >= 'a' && message[j] <= 'z') || message[j] == '_' ||
                                    (message[j] >= '0' && message[j] <= '9')))
        ++j;
      out += spell(message.substr(i + 1, j - i - 1));
      i = j - 1;
    } else {
      out += message[i];
    }
  }
  return out;
}

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
