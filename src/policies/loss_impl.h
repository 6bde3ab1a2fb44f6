// How the LM head and the loss are computed in training (--loss): the one switch that decides
// whether the s·b·V logits ever exist at once. Three implementations fine-tuners use:
//
//   full             HF ForCausalLMLoss: logits for every position, upcast to fp32, cross entropy.
//   chunked:N        torchtune CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py):
//                    the model's output projection on N chunks of the hidden states
//                    (`h.tensor_split(N, dim=1)`, TransformerDecoder.chunked_output), each chunk
//                    upcast to fp32 by `compute_cross_entropy` (`logits.float()`), in eager mode.
//   fused-linear-ce  Liger's LigerFusedLinearCrossEntropyFunction (src/liger_kernel/ops/
//                    fused_linear_cross_entropy.py): the logits are computed chunk by chunk in
//                    forward, the cross-entropy kernel writes d(logits) into the chunk in place, and
//                    d(input) and d(lm_head.weight) are accumulated right there; forward saves only
//                    those two gradients (ctx.save_for_backward(grad_input, grad_weight, grad_bias)).
//
// What each keeps (measured: validation/loss_validation.py):
//   full             saved: fp32 log-softmax 4·s·b·V + int64 targets 8·s·b (op_graph.cc build_head);
//                    transient `logits_grad` (8+e)·s·b·V (report.cc, validation/loss_transient.py).
//   chunked:N        saved: the same bytes as full (every chunk's fp32 log-softmax stays saved until
//                    its backward; the linear keeps its input chunk); transient `chunked_loss`: the
//                    largest moment of forward (all N bf16 logit chunks, held by the recipe until
//                    `del logits`, + one chunk's fp32 upcast) or backward (one chunk's fp32
//                    d(log-probs) + fp32 d(logits), the logits already deleted).
//   fused-linear-ce  saved: grad_input e·s·b·h and, when the LM head is trained, grad_weight
//                    e_w·V·h (a gradient-sized buffer from forward to backward); no logits, no
//                    targets. Transient `fused_linear_ce_chunk`: one chunk of logits e·c·V (the
//                    kernel's gradient is written into it) + the fp32 per-row losses 4·s·b + the
//                    bool target mask s·b.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "actmem/expected.h"
#include "policies/options.h"

namespace actmem {

/// Parses --loss: "full", "chunked" (torchtune's default num_output_chunks = 8), "chunked:N",
/// "fused-linear-ce". Example: parse_loss("chunked:16")->chunks == 16.
struct LossChoice {
  LossImpl impl = LossImpl::kFull;
  int64_t chunks = kDefaultLossChunks;
};
Expected<LossChoice> parse_loss(std::string_view text);
/// "full", "chunked:8", "fused-linear-ce": the text parse_loss() reads back.
std::string loss_name(LossImpl impl, int64_t chunks);

/// Liger's chunk of rows (fused_linear_cross_entropy_forward): inc_factor = ⌈V / H⌉ (chunk_mem_const
/// 1), chunk_size = min(next_power_of_2(⌈BT / inc_factor⌉), BT), BT = s·b rows, H hidden, V vocab.
/// Example: BT 8192, H 4096, V 128256 -> inc 32, chunk 256.
int64_t liger_chunk_rows(int64_t rows, int64_t hidden, int64_t vocab);

/// The loss transient of a non-full loss (bytes, no strings: evaluate()'s hot path).
/// `s` the local sequence (s/cp), `b` micro-batch, `e` activation bytes.
int64_t loss_transient_bytes(const Workload& w, int64_t s, int64_t b, int64_t hidden, int64_t vocab);

namespace detail {

/// The switch's checks: a transformers/torchtune/Liger loss (framework hf, the 4.57 layout, no
/// tensor parallelism: neither splits the vocabulary), 1 ≤ N ≤ s/cp chunks.
template <typename Reporter>
bool check_loss(const Workload& w, const Layout& l, Reporter& r) {
  if (w.loss == LossImpl::kFull) return true;
  if (w.framework != Framework::kHF)
    return r.fail(ErrorKind::kIncompatible, "loss", [&] {
      return fmt::format("@loss {} is a transformers/torchtune/Liger loss; with @framework {} use @loss full",
                         loss_name(w.loss, w.loss_chunks), kFrameworkNames.name(w.framework));
    });
  if (w.hf_version == HfVersion::k4_44)
    return r.fail(ErrorKind::kIncompatible, "loss", [&] {
      return fmt::format("@loss {} is modeled on the 4.57 / 5 layout (no shifted copy of the logits); use @hf_version 5",
                         loss_name(w.loss, w.loss_chunks));
    });
  if (l.parallel.tp > 1)
    return r.fail(ErrorKind::kIncompatible, "loss", [&] {
      return fmt::format("@loss {} does not split the vocabulary over tensor-parallel ranks; use @tp 1 or @loss full",
                         loss_name(w.loss, w.loss_chunks));
    });
  const int64_t s_local = l.seq_len / l.parallel.cp;
  if (w.loss == LossImpl::kChunked && (w.loss_chunks < 1 || w.loss_chunks > s_local))
    return r.fail(ErrorKind::kInvalid, "loss", [&] {
      return fmt::format("@loss chunked:{}: the number of chunks must be 1..{} (the sequence per rank)", w.loss_chunks,
                         s_local);
    });
  return true;
}

}  // namespace detail
}  // namespace actmem
