#include "training.h"

#include <algorithm>

#include <fmt/format.h>

namespace actmem {

namespace {

void add_static_terms(TrainingEstimate& e) {
  for (const auto& t : e.static_memory.breakdown.terms) e.memory.add(t);
}

// The transients of a step that are not saved activations: each is a real tensor size; only the
// largest is added to the peak, since they do not coincide (the logits gradient exists at the start
// of backward on the last stage, a ZeRO-3 gather around each layer).
Breakdown transients_for_stage(const TrainingEstimate& e, const ModelSpec& model, const TrainingOptions& o,
                               int64_t stage) {
  const auto& par = o.static_options.parallel;
  const auto& act = o.activation;
  Breakdown b;
  b.title = "Transients of the step (largest one counted in the peak)";
  if (o.static_options.zero_stage == 3 && par.dp > 1) {
    // ZeRO-3 / FSDP FULL_SHARD all-gathers one layer's parameters before use and keeps the next one
    // prefetched (FSDP's default backward prefetch, DeepSpeed's prefetch bucket); in backward the
    // layer's full gradient exists until it is reduce-scattered.
    int64_t largest = 0;
    for (const auto& l : e.params.layers) largest = std::max(largest, l.per_rank(par.tp, par.ep));
    const int wb = dtype_bits(o.static_options.weight_dtype) / 8;
    const int gb = dtype_bits(o.static_options.grad_dtype) / 8;
    Term t = product_term("zero3_gathered_layer",
                          "ZeRO-3 gathered layer: parameters (current + prefetched) and full gradient",
                          {{"Ψ_layer", largest}, {"(2·e_w + e_g)", 2 * wb + gb}}, Exactness::kAllowance);
    t.note = "tensor sizes are exact; the prefetch depth (one layer) is FSDP's default";
    b.add(t);
  }
  if (e.activations && e.activations->recompute_peak > Bytes{0}) {
    // Backward re-runs one recomputed segment's forward; its activations live until that segment's
    // backward is done, on top of everything still saved.
    Term t;
    t.key = "recompute_segment";
    t.label = fmt::format("Recomputed segment re-run in backward ({} recomputation)", recompute_name(act.recompute));
    t.formula = "activations of one segment − what it keeps saved";
    t.substituted = format_binary(e.activations->recompute_peak);
    t.bytes = e.activations->recompute_peak;
    b.add(t);
  }
  if (e.activations && stage == par.pp - 1) {
    const int64_t s_local = act.seq_len / std::max<int64_t>(par.cp, 1);
    const int64_t v_local = ceil_div(model.vocab, par.tp);
    if (act.framework == Framework::kHF) {
      // HF's loss upcasts the logits and runs log_softmax + nll_loss. In backward, while
      // LogSoftmaxBackward runs, the nll gradient (fp32, dense s·b·V) and d(logits) (fp32) exist
      // together, beside the logits the caller still holds in `outputs.logits` (e bytes each).
      // Measured on CPU with the profiler's allocation timeline: validation/loss_transient.py.
      const int64_t e_bytes = dtype_bytes(act.dtype);
      Term t = product_term("logits_grad",
                            "loss backward: fp32 d(log-probs) + fp32 d(logits) + the logits the caller holds",
                            {{"(8+e)", 8 + e_bytes}, {"s/cp", s_local}, {"b", act.micro_batch}, {"V/tp", v_local}});
      t.note = "HF Trainer drops outputs.logits before backward: then e·s·b·V less";
      b.add(t);
    } else {
      // Megatron's vocab-parallel cross entropy writes its gradient in place into the saved fp32
      // softmax; around it live the logits in the activation dtype or, in backward, their gradient.
      // Whether the fp32 upcast is a separate copy depends on the Megatron version: a 4-byte buffer
      // covers both, so this term is an allowance.
      Term t = product_term("logits_grad", "logits-sized buffer around the fused cross entropy (last stage)",
                            {{"4", 4}, {"s/cp", s_local}, {"b", act.micro_batch}, {"V/tp", v_local}},
                            Exactness::kAllowance);
      t.note = "Megatron-version dependent: the fp32 upcast of the logits or the gradient of the logits";
      b.add(t);
    }
  }
  return b;
}

const Term* largest_term(const Breakdown& b) {
  const Term* peak = nullptr;
  for (const auto& t : b.terms)
    if (!peak || t.bytes > peak->bytes) peak = &t;
  return peak;
}

void add_peak_transient(TrainingEstimate& e) {
  if (const Term* peak = largest_term(e.transients)) {
    e.peak_transient_key = peak->key;
    Term p = *peak;
    p.key = "transient";
    p.label = "Largest transient: " + peak->label;
    e.memory.add(p);
  }
}

void add_reserve(TrainingEstimate& e, Bytes reserve) {
  Term t;
  t.key = "reserve";
  t.label = "Reserve: CUDA context and allocator slack (--reserve)";
  t.formula = "--reserve";
  t.substituted = format_binary(reserve);
  t.bytes = reserve;
  t.exactness = Exactness::kAllowance;
  e.memory.add(t);
}

}  // namespace

Expected<TrainingEstimate> estimate_training(const ModelSpec& model, TrainingOptions options) {
  if (auto v = model.validate(); !v) return v.error();
  options.activation.parallel = options.static_options.parallel;
  if (auto v = validate_layout(model, options.static_options.parallel); !v) return v.error();
  try {
    TrainingEstimate e;
    e.params = count_params(model);
    auto act = estimate_activations(model, options.activation);
    if (!act) return act.error();
    e.activations = std::move(act.value());

    // The peak GPU is the pipeline stage whose static part + activations in flight + largest
    // transient is largest: the first stage holds the most micro-batches, the last the LM head.
    const int64_t pp = options.static_options.parallel.pp;
    Bytes best_peak{-1};
    for (int64_t stage = 0; stage < pp; ++stage) {
      auto st = compute_static_memory(e.params, options.static_options, stage);
      if (!st) return st.error();
      const Bytes act_bytes = e.activations->in_flight_by_stage.at(static_cast<size_t>(stage));
      Breakdown transients = transients_for_stage(e, model, options, stage);
      const Term* peak = largest_term(transients);
      const Bytes stage_peak = st->total() + act_bytes + (peak ? peak->bytes : Bytes{0});
      if (stage_peak > best_peak) {
        best_peak = stage_peak;
        e.static_memory = std::move(st.value());
        e.transients = std::move(transients);
      }
    }

    e.memory.title = pp > 1 ? fmt::format("Peak memory per GPU (pipeline stage {} of {}, the most loaded)",
                                          e.static_memory.stage.stage + 1, pp)
                            : "Peak memory per GPU";
    add_static_terms(e);
    Term a;
    a.key = "activations";
    a.label = pp > 1 ? "Saved activations in flight on this stage" : "Saved activations (one micro-batch)";
    a.formula = "Σ saved tensors (see activations)";
    a.substituted = fmt::format("{} per layer; {} for one micro-batch of the whole model",
                                format_binary(e.activations->per_layer), format_binary(e.activations->total));
    a.bytes = e.activations->in_flight_by_stage.at(static_cast<size_t>(e.static_memory.stage.stage));
    e.memory.add(a);
    add_peak_transient(e);
    add_reserve(e, options.reserve);
    e.notes.push_back(
        "gradients are counted as a persistent buffer (Megatron's grad buffer, DeepSpeed's partitions, DDP "
        "buckets); a single-GPU loop that sets gradients to None between steps peaks lower, by up to the "
        "gradient term");
    return e;
  } catch (const OverflowError&) {
    return Error{"the estimate overflowed 64-bit arithmetic; check --seq-len, --micro-batch and the model sizes"};
  }
}

Expected<TrainingEstimate> estimate_training_params_only(int64_t params, TrainingOptions options) {
  if (params <= 0) return Error{fmt::format("--params {} must be a positive parameter count, e.g. 7.5e9", params)};
  const auto& par = options.static_options.parallel;
  if (par.cp > 1 || par.ep > 1 || par.sp)
    return Error{"--params gives no architecture: --cp, --ep and --sp need a model (--model)"};
  try {
    TrainingEstimate e;
    e.param_only = true;
    e.params = param_only_counts(params, par.pp);
    auto st = compute_static_memory(e.params, options.static_options);
    if (!st) return st.error();
    e.static_memory = std::move(st.value());
    e.memory.title = "Peak memory per GPU";
    add_static_terms(e);
    add_reserve(e, options.reserve);
    e.notes.push_back("--params: a parameter count alone gives static memory; activations need an architecture (--model)");
    return e;
  } catch (const OverflowError&) {
    return Error{"the estimate overflowed 64-bit arithmetic; --params is absurd"};
  }
}

}  // namespace actmem
