// Megatron-core's mixed-precision optimizers give their fp32 main parameters fp32 gradients with
// `main_param.grad = model_param.main_grad.float()` (Float16OptimizerWithFloat16Params, optimizer.py
// l.1092-1105 at d98e8a64; the DistributedOptimizer does the same per shard). `.float()` returns the
// buffer itself when the gradient buffer is fp32 (bf16 training: Megatron accumulates in fp32), and a
// new fp32 copy when it is 16-bit (--fp16 without --accumulate-allreduce-grads-in-fp32,
// --grad-reduce-in-bf16). That copy, 4 bytes per parameter the optimizer holds (sharded as its
// state), stays until the next step's optimizer.zero_grad() in train_step, before the forward: in
// torch.cuda.memory_allocated() after the step (Megatron's mem-allocated-bytes), not in the peak of
// the forward and backward. Checked on Megatron-LM's CI fp16 records (validation/megatron_ci_validation.py).
#pragma once

#include "policies/options.h"

namespace actmem {

/// Framework megatron, fp32 master weights (precision mixed, 16-bit weights) and a 16-bit gradient
/// buffer: the step leaves an fp32 copy of the gradients. Bytes per optimizer-sharded parameter.
int grad_copy_bytes_after_step(const Workload& workload);

}  // namespace actmem
