// --grad-accum N: gradient accumulation over N micro-batches per optimizer step (HF Trainer's and
// torchtune's gradient_accumulation_steps; with a pipeline the micro-batches of a step are
// --num-micro-batches instead).
//
// What it changes: nothing per micro-batch in the activations (each micro-batch's saved tensors are
// freed by its own backward before the next forward), and the gradients term was always counted as
// the persistent buffer it becomes. The one real addition, modelled here: from the second
// micro-batch on, torch's AccumulateGrad (torch/csrc/autograd/functions/accumulate_grad.h,
// accumulateGrad: `variable_grad += new_grad` when .grad is defined) adds each freshly computed
// gradient into .grad in place, so one parameter's new gradient exists beside the full .grad
// buffer: a transient of one (the largest trainable) parameter in the gradient dtype. In the first
// micro-batch the new gradient is stolen into .grad instead (no copy).
// Where it does not apply: Megatron-LM accumulates weight gradients straight into main_grad
// (gradient_accumulation_fusion, on by default); DeepSpeed ZeRO-2 reduce-scatters every micro-batch
// into the partitioned gradient (counted 1/dp), each gradient passing through its ipg bucket (not
// modelled); torchtitan's FSDP2 reduce-scatters every micro-batch into the sharded fp32 gradient.
// torchtune refuses it with optimizer_in_bwd (recipes/full_finetune_single_device.py: "Gradient
// accumulation is not supported with optimizer in bwd").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/weight_tensors.h"
#include "policies/options.h"

namespace actmem {

/// Bytes of one GPU's largest trainable parameter gradient (its TP shard) while AccumulateGrad adds
/// it into .grad, or -1 where no such transient exists (grad_accum 1, ZeRO-2+, megatron, torchtitan).
/// Example: Llama-3-8B (untied LM head V·h = 128256·4096), bf16 gradients: 1,050,673,152.
int64_t accumulated_grad_bytes(const std::vector<WeightTensor>& tensors, const Workload& w, const Layout& l);

/// What explain says about --grad-accum: what it changes and what it does not.
std::vector<std::string> grad_accum_notes(const Workload& w, const Layout& l);

}  // namespace actmem

namespace actmem::detail {

constexpr int64_t kMaxGradAccum = int64_t{1} << 20;

/// --grad-accum against the other options; a Reporter as in layout_checks.h.
template <typename Reporter>
bool check_grad_accum(const Workload& w, const Layout& l, Reporter& r) {
  if (l.grad_accum == 1) return true;
  if (l.grad_accum < 1 || l.grad_accum > kMaxGradAccum)
    return r.fail(ErrorKind::kInvalid, "grad_accum", [&] {
      return fmt::format("@grad_accum {} is out of range; use 1..{} (micro-batches per optimizer step)", l.grad_accum,
                         kMaxGradAccum);
    });
  if (l.parallel.pp > 1)
    return r.fail(ErrorKind::kIncompatible, "grad_accum", [&] {
      return fmt::format("@grad_accum {}: with a pipeline the micro-batches of a step are @num_micro_batches; "
                         "give @num_micro_batches {} instead",
                         l.grad_accum, l.grad_accum);
    });
  if (w.optimizer_in_backward)
    return r.fail(ErrorKind::kIncompatible, "grad_accum", [] {
      return std::string("@grad_accum: the optimizer step in backward frees each gradient after its update, so "
                         "nothing accumulates (torchtune refuses the two together); drop one");
    });
  return true;
}

}  // namespace actmem::detail
