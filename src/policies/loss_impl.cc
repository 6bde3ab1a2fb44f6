#include "policies/loss_impl.h"

#include <algorithm>
#include <charconv>

#include "util/bytes.h"  // checked arithmetic

namespace actmem {

Expected<LossChoice> parse_loss(std::string_view text) {
  if (text == "full") return LossChoice{LossImpl::kFull, kDefaultLossChunks};
  if (text == "fused-linear-ce") return LossChoice{LossImpl::kFusedLinearCE, kDefaultLossChunks};
  if (text == "chunked") return LossChoice{LossImpl::kChunked, kDefaultLossChunks};
  constexpr std::string_view kPrefix = "chunked:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = text.substr(kPrefix.size());
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec == std::errc() && end == digits.data() + digits.size() && n >= 1 && n <= limits::kMaxSeqLen)
      return LossChoice{LossImpl::kChunked, n};
    return Error{ErrorKind::kInvalid, "loss",
                 fmt::format("@loss '{}': the number of chunks must be a whole number 1..{}, e.g. chunked:8", text,
                             limits::kMaxSeqLen)};
  }
  return Error{ErrorKind::kUnknownName, "loss",
               fmt::format("@loss '{}': use full, chunked, chunked:N or fused-linear-ce", text)};
}

std::string loss_name(LossImpl impl, int64_t chunks) {
  switch (impl) {
    case LossImpl::kFull: return "full";
    case LossImpl::kChunked: return fmt::format("chunked:{}", chunks);
    case LossImpl::kFusedLinearCE: return "fused-linear-ce";
  }
  return "full";
}

int64_t liger_chunk_rows(int64_t rows, int64_t hidden, int64_t vocab) {
  const int64_t inc_factor = ceil_div(vocab, hidden);
  const int64_t per = ceil_div(rows, inc_factor);
  int64_t pow2 = 1;
  while (pow2 < per) pow2 *= 2;  // triton.next_power_of_2
  return std::min(pow2, rows);
}

int64_t loss_transient_bytes(const Workload& w, int64_t s, int64_t b, int64_t hidden, int64_t vocab) {
  const int64_t e = dtype_bytes(w.dtype);
  if (w.loss == LossImpl::kFusedLinearCE) {
    // One chunk of logits (the kernel writes d(logits) into it), loss_1d fp32 (BT) and the bool
    // target mask (BT), all freed before forward returns.
    const int64_t rows = checked_mul(s, b);
    const int64_t c = liger_chunk_rows(rows, hidden, vocab);
    return checked_add(checked_mul(checked_mul(e, c), vocab), checked_mul(5, rows));
  }
  if (w.loss == LossImpl::kChunked) {
    // tensor_split: the first s mod N chunks have ⌈s/N⌉ rows, the rest ⌊s/N⌋ (per sequence, × b).
    const int64_t n = w.loss_chunks;
    const int64_t last = checked_mul(s / n, b);
    const int64_t first = checked_mul(ceil_div(s, n), b);
    // Forward, at the last chunk's log_softmax: all N logit chunks (e·s·b·V) + its fp32 upcast
    // (none when the activations already are fp32: .float() returns the tensor itself).
    const int64_t upcast = e == 4 ? 0 : checked_mul(4 * last, vocab);
    const int64_t forward = checked_add(checked_mul(checked_mul(e, checked_mul(s, b)), vocab), upcast);
    // Backward, chunks in reverse: the last chunk's fp32 d(log-probs) + fp32 d(logits); a larger
    // first chunk after the last chunk's saved log-softmax (4·rows·V) was freed.
    const int64_t backward = std::max(checked_mul(8 * last, vocab),
                                      checked_mul(8 * first, vocab) - checked_mul(4 * last, vocab));
    return std::max(forward, backward);
  }
  return 0;
}

}  // namespace actmem
