#include "util/bytes.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "actmem/expected.h"

namespace actmem {

namespace {
std::string format_scaled(Bytes b, double base, const char* const* units, int n_units) {
  double v = static_cast<double>(b.count());
  int i = 0;
  while (std::fabs(v) >= base && i + 1 < n_units) {
    v /= base;
    ++i;
  }
  if (i == 0) return fmt::format("{} {}", b.count(), units[0]);
  return fmt::format("{:.2f} {}", v, units[i]);
}
}  // namespace

std::string format_binary(Bytes b) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return format_scaled(b, 1024.0, units, 6);
}

std::string format_decimal(Bytes b) {
  static const char* const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  return format_scaled(b, 1000.0, units, 6);
}

Expected<Bytes> parse_size(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  double value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value) || value <= 0)
    return Error{fmt::format("size '{}': expected a positive number with a unit, e.g. 80GiB or 141GB", text)};
  std::string unit;
  for (const char* p = end; *p; ++p)
    if (!std::isspace(static_cast<unsigned char>(*p))) unit += static_cast<char>(std::tolower(*p));
  struct UnitRow {
    const char* name;
    double factor;
  };
  static const UnitRow table[] = {
      {"", 1},        {"b", 1},          {"kb", 1e3},         {"mb", 1e6},
      {"gb", 1e9},    {"tb", 1e12},      {"kib", 1024.0},     {"mib", 1048576.0},
      {"gib", 1073741824.0}, {"tib", 1099511627776.0}, {"k", 1024.0}, {"m", 1048576.0},
      {"g", 1073741824.0},   {"t", 1099511627776.0},
  };
  for (const auto& row : table) {
    if (unit == row.name) {
      double bytes = value * row.factor;
      if (bytes >= 9.2e18) return Error{fmt::format("size '{}' is too large", text)};
      if (bytes < 1.0 || (row.factor == 1 && value != std::floor(value)))
        return Error{fmt::format("size '{}' is not a whole number of bytes; give a unit, e.g. {}GiB", text, value)};
      return Bytes{static_cast<int64_t>(std::llround(bytes))};
    }
  }
  return Error{fmt::format("size '{}': unknown unit '{}'; use B, KB, MB, GB, TB (decimal) or KiB, MiB, GiB, TiB (binary)",
                           text, unit)};
}

}  // namespace actmem
