// PYTORCH_CUDA_ALLOC_CONF as pytorch/pytorch c10/core/AllocatorConfig.cpp @065861fb parses it
// (AllocatorConfig::lexArgs, parseArgs): the options of the native caching allocator
// (caching_allocator.h) that change device memory, and the request rounding they set (round_size).
#include "runtime/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
#include <stdexcept>

namespace actmem {

namespace {

constexpr int64_t kLargeBuffer = 20 << 20;  // max_split_size_mb's minimum is kLargeBuffer in MB
constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kMinBlockSize = 512;  // every size is rounded to at least 512 bytes

int64_t log2_floor(int64_t v) { return 63 - std::countl_zero(static_cast<uint64_t>(v)); }
bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/// roundup_power2_next_division: the next of `divisions` equal steps between two powers of two.
int64_t roundup_power2_next_division(int64_t size, int64_t divisions) {
  if (power_of_two(size)) return size;
  const int64_t floor = int64_t{1} << log2_floor(size);
  const int64_t step = floor >> log2_floor(divisions);
  if (step == 0) return floor << 1;
  const int64_t rounded = size & ~(step - 1);
  return rounded == size ? size : rounded + step;
}

// --- PYTORCH_CUDA_ALLOC_CONF (AllocatorConfig::lexArgs / parseArgs) ---

std::vector<std::string> lex(std::string_view text) {
  std::vector<std::string> tokens;
  std::string buf;
  for (char c : text) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!buf.empty()) tokens.push_back(std::move(buf)), buf.clear();
      tokens.emplace_back(1, c);
    } else if (c != ' ') {
      buf += c;
    }
  }
  if (!buf.empty()) tokens.push_back(std::move(buf));
  return tokens;
}

struct ConfigParser {
  const std::vector<std::string>& t;
  std::size_t i = 0;
  Error error(const std::string& what) const {
    return Error{ErrorKind::kInvalid, "alloc_conf",
                 "@alloc_conf: " + what + " (PYTORCH_CUDA_ALLOC_CONF is key:value pairs separated by commas, "
                                          "e.g. expandable_segments:True,max_split_size_mb:128)"};
  }
  bool token(const char* s) const { return i < t.size() && t[i] == s; }
  std::optional<Error> expect(const char* s) {
    if (!token(s)) return error(fmt_expected(s));
    ++i;
    return std::nullopt;
  }
  std::string fmt_expected(const char* s) const {
    return std::string("expected '") + s + "'" + (i < t.size() ? " before '" + t[i] + "'" : " at the end");
  }
  Expected<int64_t> integer(const std::string& key) {
    if (i >= t.size()) return error(key + " needs a value");
    const std::string& s = t[i++];
    int64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9' || v > (std::numeric_limits<int64_t>::max() - 9) / 10)
        return error(key + " '" + s + "' is not a non-negative integer");
      v = v * 10 + (c - '0');
    }
    if (s.empty()) return error(key + " needs a value");
    return v;
  }
  Expected<bool> boolean(const std::string& key) {
    if (i < t.size() && (t[i] == "True" || t[i] == "False")) return t[i++] == "True";
    return error(key + " takes True or False");
  }
};

/// parseRoundUpPower2Divisions: one value for every interval, or [MB:divisions, ..., >:divisions].
std::optional<Error> parse_divisions(ConfigParser& p, std::array<int64_t, AllocatorConfig::kIntervals>& out) {
  const std::string key = "roundup_power2_divisions";
  if (!p.token("[")) {
    auto v = p.integer(key);
    if (!v) return v.error();
    if (!power_of_two(*v)) return p.error(key + " " + std::to_string(*v) + " is not a power of 2");
    out.fill(*v);
    return std::nullopt;
  }
  ++p.i;
  bool first = true;
  std::size_t last_index = 0;
  while (p.i < p.t.size() && p.t[p.i] != "]") {
    const std::string interval = p.t[p.i++];
    if (auto e = p.expect(":")) return e;
    auto v = p.integer(key);
    if (!v) return v.error();
    if (*v != 0 && !power_of_two(*v)) return p.error(key + " " + std::to_string(*v) + " is not a power of 2 or 0");
    if (interval == ">") {
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(last_index), out.end(), *v);
    } else {
      int64_t mb = 0;
      for (char c : interval) {
        if (c < '0' || c > '9' || mb > (int64_t{1} << 40))
          return p.error(key + " interval '" + interval + "' is not a number of MB");
        mb = mb * 10 + (c - '0');
      }
      if (!power_of_two(mb)) return p.error(key + " interval " + interval + " is not a power of 2 (in MB)");
      const std::size_t index = std::min<std::size_t>(static_cast<std::size_t>(log2_floor(mb)), out.size() - 1);
      if (first) std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(index), *v), first = false;
      out[index] = *v;
      last_index = index;
    }
    if (!p.token("]"))
      if (auto e = p.expect(",")) return e;
  }
  if (auto e = p.expect("]")) return e;
  return std::nullopt;
}

}  // namespace

Expected<AllocatorConfig> AllocatorConfig::parse(std::string_view text) {
  AllocatorConfig c;
  c.text = std::string(text);
  const std::vector<std::string> tokens = lex(text);
  ConfigParser p{tokens};
  while (p.i < tokens.size()) {
    const std::string key = tokens[p.i++];
    if (auto e = p.expect(":")) return *e;
    if (key == "max_split_size_mb" || key == "max_non_split_rounding_mb") {
      auto v = p.integer(key);
      if (!v) return v.error();
      if (*v < kLargeBuffer / kMiB) return p.error(key + " " + std::to_string(*v) + " is below its minimum of 20");
      const int64_t bytes = *v > (std::numeric_limits<int64_t>::max() >> 20) ? std::numeric_limits<int64_t>::max()
                                                                              : *v << 20;
      (key == "max_split_size_mb" ? c.max_split_size : c.max_non_split_rounding) = bytes;
    } else if (key == "garbage_collection_threshold") {
      if (p.i >= tokens.size()) return p.error(key + " needs a value");
      const std::string& s = tokens[p.i++];
      std::size_t used = 0;
      double v = 0;
      try {
        v = std::stod(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != s.size() || !(v > 0 && v < 1)) return p.error(key + " '" + s + "' is not in (0.0, 1.0)");
      c.garbage_collection_threshold = v;
    } else if (key == "roundup_power2_divisions") {
      if (auto e = parse_divisions(p, c.roundup_power2_divisions)) return *e;
    } else if (key == "expandable_segments") {
      auto v = p.boolean(key);
      if (!v) return v.error();
      c.expandable_segments = *v;
    } else if (key == "backend") {
      if (p.token("native")) {
        ++p.i;
      } else {
        return Error{ErrorKind::kInvalid, "alloc_conf",
                     "@alloc_conf: backend " + (p.i < tokens.size() ? tokens[p.i] : std::string("(none)")) +
                         ": actmem models the native caching allocator only (backend:native); cudaMallocAsync "
                         "pools memory in the driver, which it cannot model"};
      }
    } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
               key == "pinned_use_background_threads" || key == "graph_capture_record_stream_reuse") {
      auto v = p.boolean(key);  // host-side or locking behaviour: no device bytes change
      if (!v) return v.error();
    } else if (key == "pinned_num_register_threads" || key == "pinned_reserve_segment_size_mb") {
      auto v = p.integer(key);  // pinned host memory: not device memory
      if (!v) return v.error();
    } else {
      return p.error("unknown option '" + key + "'");
    }
    if (p.i < tokens.size())
      if (auto e = p.expect(",")) return *e;
  }
  return c;
}

int64_t AllocatorConfig::divisions(int64_t size) const {
  const int64_t index = std::clamp<int64_t>(log2_floor(size) - log2_floor(kMiB), 0, kIntervals - 1);
  return roundup_power2_divisions[static_cast<std::size_t>(index)];
}


/// round_size (CUDACachingAllocator.cpp @001074d2).
int64_t rounded_size(int64_t bytes, const AllocatorConfig& config) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  const int64_t divisions = config.divisions(bytes);
  if (divisions > 1 && bytes > kMinBlockSize * divisions) return roundup_power2_next_division(bytes, divisions);
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

}  // namespace actmem
