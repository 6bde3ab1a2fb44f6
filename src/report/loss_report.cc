#include "report/loss_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "policies/loss_impl.h"
#include "util/bytes.h"
#include "util/text_table.h"  // group_digits

namespace actmem::detail {

Term describe_loss_transient(const Workload& w, int64_t s, int64_t b, int64_t hidden, int64_t vocab) {
  const int64_t e = dtype_bytes(w.dtype);
  Term t;
  if (w.loss == LossImpl::kFusedLinearCE) {
    const int64_t rows = s * b;
    const int64_t c = liger_chunk_rows(rows, hidden, vocab);
    t.key = "fused_linear_ce_chunk";
    t.label = "fused linear cross entropy (Liger): one chunk of logits + fp32 per-row losses + target mask";
    t.formula = "e·c·V + 4·s·b + s·b, c = min(next_pow2(⌈s·b/⌈V/h⌉⌉), s·b)";
    t.substituted = fmt::format("{}·{}·{} + 5·{} (c = {})", e, c, vocab, rows, c);
    t.bytes = Bytes{loss_transient_bytes(w, s, b, hidden, vocab)};
    t.note = "Liger fused_linear_cross_entropy_forward: inc_factor = ⌈V/H⌉, chunk_size = next_power_of_2(⌈BT/inc_factor⌉)";
    return t;
  }
  const int64_t n = w.loss_chunks;
  const int64_t last = (s / n) * b;
  const int64_t first = ceil_div(s, n) * b;
  const int64_t forward = e * s * b * vocab + (e == 4 ? 0 : 4 * last * vocab);
  const int64_t backward = std::max(8 * last * vocab, 8 * first * vocab - 4 * last * vocab);
  t.key = "chunked_loss";
  t.label = fmt::format("chunked loss ({} chunks): {}", n,
                        forward >= backward ? "forward holds every logit chunk + one chunk's fp32 upcast"
                                            : "backward: one chunk's fp32 d(log-probs) + fp32 d(logits)");
  t.formula = e == 4 ? "max(e·s·b·V, 8·r_last·V, 8·r_first·V − 4·r_last·V), r = rows of a chunk × b"
                     : "max(e·s·b·V + 4·r_last·V, 8·r_last·V, 8·r_first·V − 4·r_last·V), r = rows of a chunk × b";
  t.substituted = fmt::format("max({}, {}) (r_last = {}, r_first = {})", group_digits(forward), group_digits(backward),
                              last, first);
  t.bytes = Bytes{loss_transient_bytes(w, s, b, hidden, vocab)};
  t.note = "torchtune CEWithChunkedOutputLoss in eager mode; the recipe deletes the logits before backward";
  return t;
}

std::string loss_note(const Workload& w, int64_t hidden, int64_t vocab) {
  if (w.loss == LossImpl::kFusedLinearCE)
    return fmt::format("loss fused-linear-ce (Liger): no logits are kept; forward saves d(input) and{}, "
                       "computing the logits ⌈s·b/⌈V/h⌉⌉ rows at a time (⌈V/h⌉ = {}, rounded to a power of 2)",
                       w.lora.enabled() ? " (frozen LM head) no d(weight)" : " d(lm_head.weight)",
                       ceil_div(vocab, hidden));
  return fmt::format("loss chunked:{} (torchtune CEWithChunkedOutputLoss, eager): every chunk's fp32 "
                     "log-softmax stays saved (the same bytes as the full loss); the fp32 upcast exists for "
                     "one chunk at a time",
                     w.loss_chunks);
}

}  // namespace actmem::detail
