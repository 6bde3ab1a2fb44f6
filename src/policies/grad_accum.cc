#include "policies/grad_accum.h"

#include "policies/finetune.h"  // finetune_static: the largest trainable tensor
#include "util/dtype.h"

namespace actmem {

namespace {
/// Whether .grad is the accumulation buffer that AccumulateGrad adds into (accumulated_grad_bytes).
bool accumulates_into_dot_grad(const Workload& w, const Layout& l) {
  return l.grad_accum > 1 && w.framework == Framework::kHF && l.zero_stage <= 1 && !w.optimizer_in_backward;
}
}  // namespace

int64_t accumulated_grad_bytes(const std::vector<WeightTensor>& tensors, const Workload& w, const Layout& l) {
  if (!accumulates_into_dot_grad(w, l) || tensors.empty()) return -1;
  // finetune_static knows which tensors train (LoRA adapters, frozen embedding and layers) and the
  // largest one's elements per TP rank.
  const FinetuneStatic s = finetune_static(tensors, w, l.parallel.tp);
  const DType grad = w.lora.enabled() ? w.lora.adapter_dtype : w.grad_dtype;
  return checked_mul(s.largest_trainable, dtype_bits(grad) / 8);
}

std::vector<std::string> grad_accum_notes(const Workload& w, const Layout& l) {
  std::vector<std::string> notes;
  if (l.grad_accum <= 1) return notes;
  notes.push_back(fmt::format(
      "gradient accumulation over {} micro-batches: activations, weights, optimizer state and the gradient buffer "
      "are per micro-batch and unchanged (each micro-batch's saved tensors are freed by its backward; the gradients "
      "term is the persistent buffer it accumulates into); the loss is scaled by 1/{} (or by the step's token "
      "count, HF Trainer's num_items_in_batch): a scalar",
      l.grad_accum, l.grad_accum));
  if (accumulates_into_dot_grad(w, l))
    notes.push_back("from the second micro-batch on, AccumulateGrad adds each new gradient into .grad in place "
                    "(torch accumulate_grad.h): one parameter's new gradient is a transient of backward "
                    "(accumulated_grad)");
  else if (w.framework == Framework::kMegatron)
    notes.push_back("Megatron-LM accumulates weight gradients straight into the fp32 main_grad buffer "
                    "(gradient_accumulation_fusion): no per-parameter transient");
  else if (w.framework == Framework::kTorchtitan)
    notes.push_back("torchtitan (FSDP2) reduce-scatters every micro-batch's gradients into the sharded fp32 gradient: "
                    "no extra buffer beyond the unsharded gradient already counted");
  else if (l.zero_stage >= 2)
    notes.push_back("ZeRO-2/3: every micro-batch's gradients are reduce-scattered into the partitioned gradient "
                    "(counted 1/dp); each new gradient passes through DeepSpeed's ipg bucket (reduce_bucket_size), "
                    "which is not modelled");
  return notes;
}

}  // namespace actmem
