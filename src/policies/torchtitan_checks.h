// What framework torchtitan models, checked once: its Llama 3 block (model.py) with its
// activation checkpointing and FSDP2 over data parallelism. Everything else is refused with the
// option at fault rather than estimated with rules that do not hold.
#pragma once

#include <string>

#include <fmt/format.h>

#include "actmem/expected.h"
#include "model/model_spec.h"
#include "policies/options.h"

namespace actmem::detail {

/// The model and workload: a Llama-3-shaped dense model (RMSNorm, RoPE, SwiGLU, GQA), sdpa/flash
/// attention, AdamW with mixed precision, full fine-tuning.
inline Expected<void> check_torchtitan_workload(const ModelSpec& m, const Workload& w) {
  if (w.framework != Framework::kTorchtitan) return {};
  const bool llama_block = !m.moe && !m.mla && m.norm == NormKind::kRMSNorm && m.gated_mlp && m.act == ActFn::kSilu &&
                           !m.learned_positions && !m.qk_norm && !m.sandwich_norms && !m.parallel_residual &&
                           !m.shared_input_norm && !m.post_norms_only && !m.qk_norm_full_width &&
                           !m.kv_copied_in_split && !m.kv_expanded_in_split &&
                           m.rotary_fraction == 1.0 &&
                           // nn.Linear(bias=False) throughout: a bias turns a 3-D linear into aten.addmm,
                           // which _op_sac_save_list does not hold (its mm counting would differ)
                           !m.qkv_bias && !m.o_bias && !m.mlp_bias && !m.lm_head_bias && !m.norm_bias;
  if (!llama_block)
    return Error{ErrorKind::kIncompatible, "framework",
                 fmt::format("@framework torchtitan follows torchtitan's Llama 3 block (RMSNorm, RoPE on the whole "
                             "head, SwiGLU, dense, no biases); model_type '{}' is not one; use @framework hf or "
                             "megatron",
                             m.model_type)};
  if (w.attention == AttentionImpl::kEager)
    return Error{ErrorKind::kIncompatible, "attention",
                 "@attention eager: torchtitan's Attention runs sdpa (flash/cuDNN kernels) or flex, never an eager "
                 "s×s softmax; use @attention flash or sdpa"};
  if (w.lora.enabled())
    return Error{ErrorKind::kIncompatible, "lora_rank", "@lora_rank: torchtitan trains all weights; drop @lora_rank"};
  if (w.freeze_embeddings)
    return Error{ErrorKind::kIncompatible, "freeze_embeddings",
                 "@freeze_embeddings: torchtitan trains all weights (its FSDP2 terms assume every parameter has a "
                 "gradient and AdamW state); drop @freeze_embeddings"};
  if (w.optimizer != Optimizer::kAdamW)
    return Error{ErrorKind::kIncompatible, "optimizer",
                 fmt::format("@optimizer {}: torchtitan builds torch.optim AdamW (or Adam, the same state); use "
                             "@optimizer adamw",
                             kOptimizerNames.name(w.optimizer))};
  if (w.precision != Precision::kMixed || w.optimizer_in_backward)
    return Error{ErrorKind::kIncompatible, "precision",
                 "@precision pure / @optimizer_in_backward: torchtitan keeps fp32 FSDP2 shards and steps after "
                 "backward; use @precision mixed"};
  return {};
}

/// The layout: data parallelism only (FSDP2 over dp), torchtitan's selective_ac_option.
template <typename Reporter>
bool check_torchtitan_layout(const Workload& w, const Layout& l, Reporter& r) {
  if (l.selective_ac_every < 0)
    return r.fail(ErrorKind::kInvalid, "selective_ac_option", [&] {
      return fmt::format("@selective_ac_option {}: use op or a layer period N >= 1", l.selective_ac_every);
    });
  if (l.selective_ac_every > 0 && (w.framework != Framework::kTorchtitan || l.recompute != Recompute::kSelective))
    return r.fail(ErrorKind::kIncompatible, "selective_ac_option", [] {
      return std::string("@selective_ac_option N is torchtitan's per-layer selective checkpointing; use it with "
                         "@framework torchtitan and @recompute selective");
    });
  if (w.framework != Framework::kTorchtitan) return true;
  const auto& p = l.parallel;
  if (p.tp > 1 || p.pp > 1 || p.cp > 1 || p.ep > 1)
    return r.fail(ErrorKind::kIncompatible, "tp", [] {
      return std::string("@framework torchtitan is modeled with FSDP2 over @dp only; @tp, @pp, @cp and @ep are not "
                         "modeled for it yet");
    });
  if (p.dp < 2)
    return r.fail(ErrorKind::kIncompatible, "dp", [] {
      return std::string("@dp 1 with @framework torchtitan: torchtitan applies FSDP2 (fully_shard with bf16 "
                         "param_dtype) only when the data-parallel shard group is > 1; one GPU trains fp32 "
                         "parameters under torch.autocast (maybe_enable_amp), which saves other tensors and is "
                         "not modeled; use @dp 2 or more");
    });
  if (l.zero_stage != 0 && l.zero_stage != 3)
    return r.fail(ErrorKind::kIncompatible, "zero_stage", [&] {
      return fmt::format("@zero_stage {}: torchtitan shards parameters, gradients and optimizer state with FSDP2 "
                         "(ZeRO-3's sharding); leave @zero_stage unset or 3",
                         l.zero_stage);
    });
  if (l.offload_optimizer)
    return r.fail(ErrorKind::kIncompatible, "offload_optimizer", [] {
      return std::string("@offload_optimizer: torchtitan's FSDP2 CPUOffloadPolicy is not modeled; drop it");
    });
  if (l.recompute == Recompute::kFull && (l.recompute_layers >= 0 || l.checkpoint_every > 0))
    return r.fail(ErrorKind::kIncompatible, "recompute_layers", [] {
      return std::string("@recompute_layers / @checkpoint_every are Megatron's methods; torchtitan's full mode wraps "
                         "every block; for every N-th block use @recompute selective with @selective_ac_option N");
    });
  return true;
}

}  // namespace actmem::detail
