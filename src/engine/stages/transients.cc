// Transients: tensors that exist for part of the step, each a real tensor size. They do not
// coincide (the logits gradient at the start of backward on the last stage, a ZeRO-3 gather around
// each layer, a recomputed segment, ...), so only the largest is in a stage's peak; torchtitan's
// FSDP2 unsharded working set is present whenever a block runs and comes on top. Their checks:
// check_loss, check_grad_accum (checks.cc). Their explanation: report.cc describe_transients.
#include "engine/stages/account.h"

namespace actmem::detail {

namespace {

/// The loss's backward on the last stage: the logits-sized buffers, or what --loss chunked / fused
/// keeps (loss_impl.h); -1 for an encoder head without vocabulary-sized logits.
Bytes logits_grad_bytes(const Account& a) {
  const ModelSpec& m = a.p.model;
  const Workload& w = a.w;
  const bool titan = w.framework == Framework::kTorchtitan;
  const int64_t s_local = a.l.seq_len / a.par.cp;
  const int64_t v_local = ceil_div(m.vocab, a.par.tp);
  // torchtitan's train.py (forward_backward_step) deletes pred before loss.backward(): HF's loss
  // transient without the held logits.
  // An encoder's MLM loss does not upcast: d(log-probs), d(logits) and the held logits, all e bytes.
  // Megatron: the logits (forward) or their gradient (backward) in the activation dtype beside the
  // saved fp32 softmax, which the backward overwrites in place (report.cc logits_grad_term).
  const int per_element = m.encoder                       ? 3 * dtype_bytes(w.dtype)
                          : w.framework == Framework::kHF ? 8 + dtype_bytes(w.dtype)
                          : titan                         ? 8
                                                          : dtype_bytes(w.dtype);
  // An encoder's classifier or pooler has b·n logits, not s·b·V: no vocabulary-sized transient.
  const bool vocab_logits = !m.encoder || m.head == EncoderHead::kMaskedLM;
  if (!vocab_logits) return Bytes{-1};
  if (w.loss != LossImpl::kFull)  // chunked or fused (loss_impl.h)
    return Bytes{loss_transient_bytes(w, s_local, a.l.micro_batch, m.hidden, v_local)};
  return Bytes{checked_mul(checked_mul(checked_mul(per_element, s_local), a.l.micro_batch), v_local)};
}

}  // namespace

void account_transients(Account& a) {
  const Workload& w = a.w;
  const ParallelLayout& par = a.par;
  const ParamCounts& params = a.p.params;
  const bool titan = w.framework == Framework::kTorchtitan;
  Transients& tr = a.tr;
  // A ZeRO-3 gathered layer: parameters, current + prefetched, and its full gradient.
  const int wb = dtype_bits(w.weight_dtype) / 8;
  const int gb = dtype_bits(w.grad_dtype) / 8;
  // Sharded over dp·cp (static_memory.cc): a gather whenever that group is larger than one rank.
  tr.zero3 = !titan && a.l.zero_stage == 3 && par.dp * par.cp > 1 ? Bytes{checked_mul(a.largest_layer, 2 * wb + gb)}
                                                                   : Bytes{-1};
  // torchtitan: FSDP2's unsharded parameters and gradients (fsdp2.h), present whenever a block
  // runs, so added to the largest of the other transients rather than competing with them.
  const int64_t head_params =
      ceil_div(params.lm_head > 0 ? params.lm_head : params.embedding, par.tp) + params.lm_head_bias + params.final_norm;
  tr.fsdp2 = titan ? fsdp2_transient(a.largest_layer, head_params) : Fsdp2Transient{};
  tr.recompute = a.t.recompute_peak > 0 ? Bytes{a.t.recompute_peak} : Bytes{-1};
  tr.logits_grad = logits_grad_bytes(a);
  // A 4-bit base dequantizes one linear's weight at a time (finetune.h), on every stage.
  tr.dequantized = Bytes{a.p.shape_static ? dequantized_weight_bytes(a.p.tensors, w, par.tp) : -1};
  // Gradient accumulation: one parameter's new gradient beside .grad (grad_accum.h).
  tr.accumulated_grad = Bytes{a.l.grad_accum > 1 ? accumulated_grad_bytes(a.p.tensors, w, a.l) : -1};
  if (!a.rec) return;
  a.rec->zero3_layer_params = a.largest_layer;
  a.rec->zero3_bytes = tr.zero3.count();
  a.rec->dequantized_weight = tr.dequantized.count();
  a.rec->fsdp2 = tr.fsdp2;
  a.rec->accumulated_grad = tr.accumulated_grad.count();
}

Bytes largest_transient(const Account& a, bool last) {
  const Transients& tr = a.tr;
  Bytes peak{-1};
  for (Bytes x : {tr.zero3, tr.recompute, last ? tr.logits_grad : Bytes{-1}, tr.dequantized, tr.offload_working_set,
                  tr.accumulated_grad})
    if (x > peak) peak = x;
  return (peak < Bytes{0} ? Bytes{0} : peak) + tr.fsdp2.total();
}

void list_transients(const Account& a, bool last, std::vector<NamedTransient>& out) {
  const Transients& tr = a.tr;
  out.clear();
  const std::pair<const char*, Bytes> all[] = {
      {"loss backward: logits-sized buffers", last ? tr.logits_grad : Bytes{-1}},
      {"ZeRO-3: gathered layer and its gradient", tr.zero3},
      {"recomputed segment rerun", tr.recompute},
      {"4-bit base: dequantized linear weight", tr.dequantized},
      {"offloaded activations brought back", tr.offload_working_set},
      {"gradient accumulation: new gradient", tr.accumulated_grad}};
  for (const auto& [name, bytes] : all)
    if (bytes >= Bytes{0}) out.push_back({name, bytes.count()});
}

}  // namespace actmem::detail
