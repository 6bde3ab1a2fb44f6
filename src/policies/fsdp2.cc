#include "policies/fsdp2.h"

namespace actmem {

Fsdp2Transient fsdp2_transient(int64_t block_params, int64_t head_params) {
  Fsdp2Transient t;
  t.block_params = block_params;
  t.head_params = head_params;
  t.gathered_blocks = Bytes{checked_mul(block_params, 2 * 2)};
  t.head_unsharded = Bytes{checked_mul(head_params, 2)};
  t.block_grads = Bytes{checked_mul(block_params, 4)};
  return t;
}

BytesPerParam fsdp2_bytes_per_param(Optimizer optimizer) {
  Workload w;
  w.weight_dtype = DType::kFP32;  // the sharded parameters: fp32 (param_dtype bf16 is the all-gather's)
  w.grad_dtype = DType::kFP32;    // reduce_dtype fp32: gradients reduce-scattered into fp32 shards
  w.optimizer = optimizer;
  w.precision = Precision::kMixed;  // fp32 parameters: bytes_per_param adds no master copy
  return bytes_per_param(w);
}

}  // namespace actmem
