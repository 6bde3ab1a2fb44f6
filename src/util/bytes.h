// Bytes: a strong type for memory sizes with checked arithmetic.
// Every size actmem prints is a Bytes; an overflow throws OverflowError, which the
// public entry points turn into an Error (a silent wrap-around would be a wrong number).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace actmem {

/// Thrown by checked arithmetic; caught at the library boundary and reported as an Error.
struct OverflowError : std::overflow_error {
  using std::overflow_error::overflow_error;
};

/// a*b, a+b on int64 with overflow detection. Example: checked_mul(1 << 20, 1 << 20) == 1 << 40.
inline int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw OverflowError("size arithmetic overflowed int64");
  return r;
}
inline int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw OverflowError("size arithmetic overflowed int64");
  return r;
}
inline int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) throw OverflowError("size arithmetic overflowed int64");
  return r;
}

/// A byte count. Bytes{3} * 4 == Bytes{12}; Bytes{1} << 30 prints as "1.00 GiB".
class Bytes {
 public:
  constexpr Bytes() = default;
  constexpr explicit Bytes(int64_t n) : n_(n) {}
  constexpr int64_t count() const { return n_; }

  friend Bytes operator+(Bytes a, Bytes b) { return Bytes{checked_add(a.n_, b.n_)}; }
  friend Bytes operator-(Bytes a, Bytes b) { return Bytes{checked_sub(a.n_, b.n_)}; }
  friend Bytes operator*(Bytes a, int64_t k) { return Bytes{checked_mul(a.n_, k)}; }
  friend Bytes operator*(int64_t k, Bytes a) { return Bytes{checked_mul(a.n_, k)}; }
  Bytes& operator+=(Bytes o) { return *this = *this + o; }
  Bytes& operator-=(Bytes o) { return *this = *this - o; }
  friend constexpr auto operator<=>(Bytes, Bytes) = default;

  double gib() const { return static_cast<double>(n_) / (1024.0 * 1024.0 * 1024.0); }
  double gb() const { return static_cast<double>(n_) / 1e9; }

 private:
  int64_t n_ = 0;
};

/// Exact integer division a/b rounded up (a >= 0, b > 0), without overflow near INT64_MAX;
/// for sharding (ceil(V/tp)) and paged blocks. Example: ceil_div(10, 3) == 4.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

/// "70.00 GiB", "512.0 MiB", "96 B": binary units, as nvidia-smi and PyTorch report.
std::string format_binary(Bytes b);
/// "75.16 GB": decimal units, as vendors and papers quote.
std::string format_decimal(Bytes b);

/// Parses "80GiB", "80 GB", "141e9", "512MiB" (binary vs decimal units kept apart).
/// Example: parse_size("80GiB") == Bytes{85899345920}.
struct Error;
template <typename T>
class Expected;
Expected<Bytes> parse_size(const std::string& text);

}  // namespace actmem

/// fmt::format("{}", Bytes{1024}) == "1.00 KiB"
template <>
struct fmt::formatter<actmem::Bytes> : fmt::formatter<std::string> {
  auto format(actmem::Bytes b, format_context& ctx) const {
    return fmt::formatter<std::string>::format(actmem::format_binary(b), ctx);
  }
};
