#include "serve/suggest.h"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "serve/serve_request.h"
#include "util/text_table.h"  // group_digits

namespace actmem {
namespace {

struct Tried {
  bool fits = false;
  double concurrency = 0;
};

std::optional<Tried> attempt(const ServeRunner& run, const ServeRequest& r) {
  auto result = run(r);
  if (!result || !result->capacity || !result->capacity->vllm) return std::nullopt;
  return Tried{result->capacity->fits, result->capacity->vllm->max_concurrency};
}

ServeSuggestion make(std::string flag, std::string option, std::string value, double before, const Tried& t,
                     int64_t context) {
  return {fmt::format("{} {}", flag, value), std::move(option), value, t.concurrency,
          fmt::format("{:.2f}x -> {:.2f}x requests of {} tokens", before, t.concurrency, group_digits(context))};
}

/// The longest context that fits (fits is monotone in it: fewer pages per request, same budget).
std::optional<ServeSuggestion> shorter_context(const ServeRequest& base, double before, const ServeRunner& run) {
  ServeRequest r = base;
  int64_t lo = 0, hi = base.context_len - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    r.context_len = mid;
    auto t = attempt(run, r);
    if (t && t->fits)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo < 1) return std::nullopt;
  r.context_len = lo;
  auto t = attempt(run, r);
  if (!t || !t->fits) return std::nullopt;
  return make("--max-model-len", "context_len", std::to_string(lo), before, *t, lo);
}

/// The largest max_num_seqs below today's that fits, halving (a smaller sampler warm-up).
std::optional<ServeSuggestion> fewer_seqs(const ServeRequest& base, const ServeResult& now, double before,
                                          const ServeRunner& run) {
  if (!now.serving.vllm) return std::nullopt;
  ServeRequest r = base;
  for (int64_t n = now.serving.vllm->max_num_seqs / 2; n >= std::max<int64_t>(base.batch, 8); n /= 2) {
    r.max_num_seqs = n;
    if (auto t = attempt(run, r); t && t->fits)
      return make("--max-num-seqs", "max_num_seqs", std::to_string(n), before, *t, base.context_len);
  }
  return std::nullopt;
}

/// The least utilization, in hundredths up to 0.99, that fits.
std::optional<ServeSuggestion> more_memory(const ServeRequest& base, double before, const ServeRunner& run) {
  if (!base.kv_cache_memory.empty()) return std::nullopt;  // utilization is not used then
  ServeRequest r = base;
  int64_t lo = static_cast<int64_t>(std::floor(base.gpu_memory_utilization * 100.0 + 1e-9)) + 1, hi = 99;
  if (lo > hi) return std::nullopt;
  r.gpu_memory_utilization = static_cast<double>(hi) / 100.0;
  if (auto t = attempt(run, r); !t || !t->fits) return std::nullopt;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    r.gpu_memory_utilization = static_cast<double>(mid) / 100.0;
    if (auto t = attempt(run, r); t && t->fits)
      hi = mid;
    else
      lo = mid + 1;
  }
  r.gpu_memory_utilization = static_cast<double>(lo) / 100.0;
  auto t = attempt(run, r);
  if (!t || !t->fits) return std::nullopt;
  return make("--gpu-memory-utilization", "gpu_memory_utilization", fmt::format("{:.2f}", r.gpu_memory_utilization),
              before, *t, base.context_len);
}

std::optional<ServeSuggestion> fp8_cache(const ServeRequest& base, double before, const ServeRunner& run) {
  if (base.kv_dtype == "fp8") return std::nullopt;
  ServeRequest r = base;
  r.kv_dtype = "fp8";
  auto t = attempt(run, r);
  if (!t || !t->fits) return std::nullopt;
  return make("--kv-cache-dtype", "kv_dtype", "fp8", before, *t, base.context_len);
}

/// The first of 2·tp, 4·tp, 8·tp that the model takes (serve() refuses the rest) and that fits.
std::optional<ServeSuggestion> wider_tp(const ServeRequest& base, double before, const ServeRunner& run) {
  ServeRequest r = base;
  for (int64_t tp = base.tp * 2; tp <= base.tp * 8; tp *= 2) {
    r.tp = tp;
    if (auto t = attempt(run, r); t && t->fits)
      return make("--tensor-parallel-size", "tp", std::to_string(tp), before, *t, base.context_len);
  }
  return std::nullopt;
}

}  // namespace

std::vector<ServeSuggestion> suggest_vllm_flags(const ServeRequest& request, const ServeResult& result,
                                                const ServeRunner& run) {
  std::vector<ServeSuggestion> out;
  if (!result.capacity || !result.capacity->vllm || result.capacity->fits) return out;
  const double before = result.capacity->vllm->max_concurrency;
  for (auto s : {shorter_context(request, before, run), fewer_seqs(request, result, before, run),
                 more_memory(request, before, run), fp8_cache(request, before, run), wider_tp(request, before, run)})
    if (s) out.push_back(std::move(*s));
  return out;
}

}  // namespace actmem
