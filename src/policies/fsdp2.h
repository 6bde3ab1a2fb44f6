// FSDP2 (torch.distributed.fsdp.fully_shard) memory as torchtitan applies it: apply_fsdp() in
// torchtitan/models/llama3/infra/parallelize.py (v0.2.2) shards the embedding, each transformer
// block and the [norm, output] group as separate units over the dp_shard mesh, with
// MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) (job_config.py defaults
// mixed_precision_param = "bfloat16", mixed_precision_reduce = "float32").
//
// Persistent, sharded over dp (Ψ = the stage's parameters per TP rank):
//   parameters  fp32 DTensor shards (the model is built in fp32): 4·Ψ/dp
//   gradients   fp32 shards (reduce-scattered in reduce_dtype):    4·Ψ/dp
//   AdamW       exp_avg + exp_avg_sq like the fp32 parameters:     8·Ψ/dp (no separate master copy)
// Transient, unsharded (Fsdp2Transient):
//   two blocks all-gathered in bf16: the one running and the next one, which FSDP2 prefetches
//   (implicit forward prefetch; backward prefetch of one unit, docs/fsdp.md), 2·2·Ψ_block;
//   the [norm, output] group, which torchtitan does not reshard after forward
//   (reshard_after_forward = policy == "always", "as an optimization ... FSDP would prefetch them
//   immediately after the forward pass"): 2·Ψ_head from the end of forward through its backward;
//   one block's gradients before reduce-scatter, in reduce_dtype fp32: 4·Ψ_block.
#pragma once

#include <cstdint>

#include "util/bytes.h"
#include "policies/options.h"
#include "policies/static_memory.h"

namespace actmem {

struct Fsdp2Transient {
  int64_t block_params = 0;  // Ψ_block: the largest transformer block's parameters on one TP rank
  int64_t head_params = 0;   // Ψ_head: the [norm, output] unit's parameters on one TP rank
  Bytes gathered_blocks{0};  // 2 (bf16) · 2 blocks · Ψ_block
  Bytes head_unsharded{0};   // 2 (bf16) · Ψ_head
  Bytes block_grads{0};      // 4 (fp32) · Ψ_block
  bool present() const { return block_params > 0; }
  Bytes total() const { return gathered_blocks + head_unsharded + block_grads; }
};

/// Example: fsdp2_transient(218'112'000, 525'340'672).total() == 8·Ψ_block + 2·Ψ_head.
Fsdp2Transient fsdp2_transient(int64_t block_params, int64_t head_params);

/// The sharded state per parameter: fp32 parameters (4), fp32 gradients (4), the optimizer's state
/// in fp32 beside fp32 parameters (AdamW: 4 + 4), with no master copy.
BytesPerParam fsdp2_bytes_per_param(Optimizer optimizer);

}  // namespace actmem
