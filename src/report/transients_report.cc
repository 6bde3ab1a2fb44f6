#include "report/transients_report.h"

#include <string>
#include <utility>

#include <fmt/format.h>

#include "report/loss_report.h"     // the loss backward's transient
#include "report/offload_report.h"  // --offload-activations: the working set brought back
#include "util/text_table.h"        // group_digits

namespace actmem::detail {

namespace {

/// The loss backward's transient on the last stage, as the framework runs it.
Term logits_grad_term(const Prepared& p, const Layout& o) {
  const auto& par = o.parallel;
  const Workload& w = p.workload;
  const int64_t s_local = o.seq_len / std::max<int64_t>(par.cp, 1);
  const int64_t v_local = ceil_div(p.model.vocab, par.tp);
  if (w.loss != LossImpl::kFull) return describe_loss_transient(w, s_local, o.micro_batch, p.model.hidden, v_local);
  if (w.framework == Framework::kTorchtitan) {
    // cross_entropy_loss upcasts and runs log_softmax + nll_loss like HF's (measured there by
    // validation/loss_transient.py); train.py forward_backward_step does `del pred` before
    // loss.backward(), so no logits are held beside the two fp32 gradients.
    return product_term("logits_grad", "loss backward: fp32 d(log-probs) + fp32 d(logits) (train.py deletes pred)",
                        {{"8", 8}, {"s", s_local}, {"b", o.micro_batch}, {"V", v_local}});
  }
  if (p.model.encoder) {
    // BertForMaskedLM's CrossEntropyLoss on the scores as they are (no upcast): while
    // LogSoftmaxBackward runs, d(log-probs) and d(logits) in the activation dtype beside the
    // logits the caller holds. By analogy with the measured decoder loss, not measured itself.
    const int64_t e_bytes = dtype_bytes(w.dtype);
    Term l = product_term("logits_grad",
                          "MLM loss backward: d(log-probs) + d(logits) + the logits the caller holds (no upcast)",
                          {{"3·e", 3 * e_bytes}, {"s", s_local}, {"b", o.micro_batch}, {"V", v_local}});
    l.note = "not measured (validation covers the saved tensors); HF Trainer drops outputs.logits: e·s·b·V less";
    return l;
  }
  if (w.framework == Framework::kHF) {
    // HF's loss upcasts the logits and runs log_softmax + nll_loss. In backward, while
    // LogSoftmaxBackward runs, the nll gradient (fp32, dense s·b·V) and d(logits) (fp32) exist
    // together, beside the logits the caller still holds in `outputs.logits` (e bytes each).
    // Measured on CPU with the profiler's allocation timeline: validation/loss_transient.py.
    const int64_t e_bytes = dtype_bytes(w.dtype);
    Term l = product_term("logits_grad",
                          "loss backward: fp32 d(log-probs) + fp32 d(logits) + the logits the caller holds",
                          {{"(8+e)", 8 + e_bytes}, {"s/cp", s_local}, {"b", o.micro_batch}, {"V/tp", v_local}});
    l.note = "HF Trainer drops outputs.logits before backward: then e·s·b·V less";
    return l;
  }
  // Megatron-LM @d98e8a64 tensor_parallel/cross_entropy.py: .float() (l.25) is the fp32 softmax saved (l.181) while the
  // caller holds the logits; backward is in place (l.88-116), then cast to e bytes: e·s·b·V beside it, either way.
  const int64_t e_bytes = dtype_bytes(w.dtype);
  Term l = product_term("logits_grad", "logits (forward) or their gradient (backward) beside the fp32 softmax",
                        {{"e", e_bytes}, {"s/cp", s_local}, {"b", o.micro_batch}, {"V/tp", v_local}});
  l.note = "vocab_parallel_cross_entropy keeps one fp32 copy, the saved softmax (loss.softmax); its backward is in "
           "place";
  return l;
}

/// A transient recorded as its bytes alone.
Term bytes_term(const char* key, std::string label, const char* formula, int64_t bytes) {
  Term d;
  d.key = key;
  d.label = std::move(label);
  d.formula = formula;
  d.substituted = fmt::format("{} B", group_digits(bytes));
  d.bytes = Bytes{bytes};
  return d;
}

}  // namespace

/// The transients of the peak stage, each a real tensor size; only the largest is in the peak,
/// since they do not coincide (the logits gradient exists at the start of backward on the last
/// stage, a ZeRO-3 gather around each layer).
Breakdown describe_transients(const Prepared& p, const Layout& o, const Totals& t, const RecordingSink& rec) {
  const Workload& w = p.workload;
  Breakdown b;
  b.title = "Transients of the step (largest one counted in the peak)";
  if (rec.zero3_bytes >= 0) {
    // ZeRO-3 / FSDP FULL_SHARD all-gathers one layer's parameters before use and keeps the next one
    // prefetched (FSDP's default backward prefetch, DeepSpeed's prefetch bucket); in backward the
    // layer's full gradient exists until it is reduce-scattered.
    const int wb = dtype_bits(w.weight_dtype) / 8;
    const int gb = dtype_bits(w.grad_dtype) / 8;
    Term z = product_term("zero3_gathered_layer",
                          "ZeRO-3 gathered layer: parameters (current + prefetched) and full gradient",
                          {{"Ψ_layer", rec.zero3_layer_params}, {"(2·e_w + e_g)", 2 * wb + gb}}, Exactness::kAllowance);
    z.note = "tensor sizes are exact; the prefetch depth (one layer) is FSDP's default";
    b.add(z);
  }
  if (t.recompute_peak > 0) {
    // Backward re-runs one recomputed segment's forward; its activations live until that segment's
    // backward is done, on top of everything still saved.
    Term r;
    r.key = "recompute_segment";
    r.label = fmt::format("Recomputed segment re-run in backward ({} recomputation)", kRecomputeNames.name(o.recompute));
    r.formula = "activations of one segment − what it keeps saved";
    r.substituted = format_binary(Bytes{t.recompute_peak});
    r.bytes = Bytes{t.recompute_peak};
    b.add(r);
  }
  if (rec.logits_grad >= 0) b.add(logits_grad_term(p, o));
  // bitsandbytes MatMul4Bit: F.dequantize_4bit(W).to(x.dtype) in forward, and again in backward
  // for the input's gradient; one linear at a time, freed after its matmul.
  if (rec.dequantized_weight >= 0)
    b.add(bytes_term("dequantized_weight", "nf4 base: the largest linear dequantized for its matmul (forward and backward)",
                     "e · rows · cols (largest quantized linear)", rec.dequantized_weight));
  if (rec.offload_working_set >= 0) b.add(offload_working_set_term(rec.offload_working_set, o.recompute));
  // torch AccumulateGrad (accumulate_grad.h): `variable_grad += new_grad` from the second micro-batch on.
  if (rec.accumulated_grad >= 0)
    b.add(bytes_term("accumulated_grad",
                     fmt::format("gradient accumulation ({} micro-batches): the largest parameter's new gradient, "
                                 "added into .grad in place",
                                 o.grad_accum),
                     "Ψ_largest trainable tensor (per TP rank) · e_g", rec.accumulated_grad));
  return b;
}

/// The largest transient (the first of equals), as account() chose it.
void add_peak_transient(TrainingEstimate& e) {
  const Term* peak = nullptr;
  for (const auto& term : e.transients.terms)
    if (!peak || term.bytes > peak->bytes) peak = &term;
  if (!peak) return;
  e.peak_transient_key = peak->key;
  Term pt = *peak;
  pt.key = "transient";
  pt.label = "Largest transient: " + peak->label;
  e.memory.add(pt);
}

}  // namespace actmem::detail
