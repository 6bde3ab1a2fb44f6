// What Megatron-core's pipeline schedules leave allocated after a step: on every model chunk that
// receives its input from another rank (all of a rank's chunks but the first stage's first), the
// last micro-batch's received activation stays referenced by the model, TransformerBlock.input_tensor
// (megatron/core/transformer/transformer_block.py, set_input_tensor; set before each forward by
// schedules.py forward_step), and carries its gradient, which backward_step's x.retain_grad() keeps
// on it (schedules.py l.555-591 at d98e8a64). Two tensors of the P2P shape each: (s/cp, b, h),
// s/(cp·tp) with sequence parallelism, in the pipeline dtype (the params dtype). They are dropped at
// the next step's first forward of the chunk, so they are part of torch.cuda.memory_allocated()
// after the step (Megatron's mem-allocated-bytes), not of the step's peak, where the chunk's newest
// input is still in flight. Checked on Megatron-LM's CI records (validation/megatron_ci_validation.py):
// 7B, pp 4 with 8 chunks per rank, s 8192: 1,024 MiB of the 1,031 MiB left after the optimizer state.
#pragma once

#include <cstdint>

#include "policies/options.h"

namespace actmem {

struct PipelineInputsKept {
  int64_t chunks = 0;        // model chunks on this rank that receive their input
  int64_t tensor_bytes = 0;  // one received activation (its gradient is as large)
  int64_t total() const { return 2 * chunks * tensor_bytes; }
};

/// Framework megatron with pp > 1 (zero otherwise). Example: pp 4, vpp 1, s 1024, b 4, h 512, bf16, on
/// rank 3: 1 chunk of 4 MiB, 8 MiB kept.
PipelineInputsKept pipeline_inputs_kept(const Workload& workload, const Layout& layout, int64_t hidden, int64_t rank);

}  // namespace actmem
