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
void add_transients(TrainingEstimate& e, const ModelSpec& model, const TrainingOptions& o) {
  const auto& par = o.static_options.parallel;
  const auto& act = o.activation;
  e.transients.title = "Transients of the step (largest one counted in the peak)";
  if (o.static_options.zero_stage == 3 && par.dp > 1) {
    // ZeRO-3 / FSDP FULL_SHARD all-gathers one layer's parameters before use and keeps the next one
    // prefetched (FSDP's default backward prefetch, DeepSpeed's prefetch bucket); in backward the
    // layer's full gradient exists until it is reduce-scattered.
    int64_t largest = 0;
    for (const auto& l : e.params.layers) {
      const int64_t shard = ceil_div(l.attention, par.tp) + ceil_div(l.dense_mlp, par.tp) +
                            ceil_div(l.shared_experts, par.tp) + l.replicated +
                            ceil_div(ceil_div(l.routed_experts, par.ep), par.tp);
      largest = std::max(largest, shard);
    }
    const int wb = dtype_bits(o.static_options.weight_dtype) / 8;
    const int gb = dtype_bits(o.static_options.grad_dtype) / 8;
    Term t = product_term("zero3_gathered_layer", "ZeRO-3 gathered layer: parameters (current + prefetched) and full gradient",
                          {{"Ψ_layer", largest}, {"(2·e_w + e_g)", 2 * wb + gb}}, Exactness::kAllowance);
    t.note = "tensor sizes are exact; the prefetch depth (one layer) is FSDP's default";
    e.transients.add(t);
  }
  if (e.activations) {
    // Cross entropy's backward materialises d(logits) in fp32 on the last stage, V split by TP.
    const int64_t s_local = act.seq_len / std::max<int64_t>(par.cp, 1);
    Term t = product_term("logits_grad", "fp32 gradient of the logits (start of backward, last stage)",
                          {{"4", 4}, {"s/cp", s_local}, {"b", act.micro_batch}, {"V/tp", ceil_div(model.vocab, par.tp)}});
    e.transients.add(t);
  }
  const Term* peak = nullptr;
  for (const auto& t : e.transients.terms)
    if (!peak || t.bytes > peak->bytes) peak = &t;
  if (peak) {
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
    auto st = compute_static_memory(e.params, options.static_options);
    if (!st) return st.error();
    e.static_memory = std::move(st.value());
    auto act = estimate_activations(model, options.activation);
    if (!act) return act.error();
    e.activations = std::move(act.value());

    e.memory.title = "Peak memory per GPU";
    add_static_terms(e);
    Term a;
    a.key = "activations";
    a.label = "Saved activations in flight (most loaded pipeline stage)";
    a.formula = "see activations";
    a.substituted = fmt::format("{} per layer; {} for one micro-batch of the whole model",
                                format_binary(e.activations->per_layer), format_binary(e.activations->total));
    a.bytes = e.activations->in_flight;
    e.memory.add(a);
    add_transients(e, model, options);
    add_reserve(e, options.reserve);
    if (options.static_options.parallel.pp > 1)
      e.notes.push_back(
          "with PP, static memory is the most loaded stage's and activations the most loaded stage's in flight; "
          "when these are different stages the total is an upper bound");
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
