// Static memory of fine-tuning setups whose bytes depend on each weight tensor's shape, not on
// the parameter count alone: LoRA / QLoRA (frozen base weights in their storage, adapters per
// targeted linear), Adafactor (factored second moments: a row and a column vector per matrix),
// bitsandbytes' paged optimizers (which state lives in unified memory) and the optimizer step in
// backward (one parameter's gradient at a time). The shapes are weight_tensors.h's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>  // check_finetune's messages

#include "model/weight_tensors.h"
#include "policies/options.h"
#include "policies/static_memory.h"  // StageStatic
#include "report/breakdown.h"
#include "util/bytes.h"
#include "actmem/expected.h"

namespace actmem {

/// The linear layers a LoRA adapter can sit beside, by the names PEFT's target_modules use.
enum LoraTarget : unsigned {
  kLoraQ = 1u << 0,     // q_proj
  kLoraK = 1u << 1,     // k_proj
  kLoraV = 1u << 2,     // v_proj
  kLoraO = 1u << 3,     // o_proj
  kLoraGate = 1u << 4,  // gate_proj
  kLoraUp = 1u << 5,    // up_proj
  kLoraDown = 1u << 6,  // down_proj
  kLoraAll = (1u << 7) - 1,
};

/// "q,k,v,o,gate,up,down" (any subset, comma-separated) or "all".
/// Example: parse_lora_targets("q,v").value() == (kLoraQ | kLoraV).
Expected<unsigned> parse_lora_targets(std::string_view text);
/// The inverse: lora_targets_name(kLoraQ | kLoraV) == "q,v".
std::string lora_targets_name(unsigned targets);

/// Whether a weight tensor gets an adapter: a kLinear matrix named `…q_proj` etc. (PEFT matches
/// target_modules by the module name's suffix). Routed experts are not targeted: PEFT cannot wrap
/// experts held as fused 3-D parameters; where each expert is its own nn.Linear modules, PEFT's
/// suffix match would wrap every expert too, which is not modelled.
bool lora_targets(const WeightTensor& t, unsigned targets);
/// The @lora_targets a model has: those of `targets` that name at least one of its linears (a
/// fused qkv / gate_up projection counts for its parts), and those that name none. PEFT adapts the
/// modules a target matches and raises ("Target modules ... not found in the base model") only when
/// none matches: so an error here only then, and the targets that match nothing are `unmatched`
/// (said in the LoRA note; `all` means what the model has and leaves none unmatched). Example:
/// Phi-2's MLP is fc1/fc2, not gated: resolve_lora_targets(phi2_tensors, false, false, kLoraGate)
/// is an error naming gate, and with kLoraQ | kLoraGate it keeps q with gate unmatched.
struct LoraTargets {
  unsigned targets = 0, unmatched = 0;
};
Expected<LoraTargets> resolve_lora_targets(const std::vector<WeightTensor>& tensors, bool fused_qkv,
                                           bool fused_gate_up, unsigned targets);

/// Whether a workload's static memory needs the weight shapes (finetune_static) rather than
/// bytes per parameter (static_memory.h).
bool needs_weight_shapes(const Workload& w);

/// Bytes of one frozen base matrix of rows × cols stored as `base` (bitsandbytes):
///   nf4 (Linear4bit, Params4bit): ⌈n/2⌉ (two 4-bit codes a byte) + 4·⌈n/64⌉ (fp32 absmax per
///       64-weight block); with double quantization the absmax is 8-bit, 1·⌈n/64⌉, plus an fp32
///       scale per 256 absmax blocks, 4·⌈⌈n/64⌉/256⌉, plus the fp32 offset (4)
///       (functional.quantize_4bit: blocksize=64, quantize_blockwise(absmax, blocksize=256)).
///   int8 (Linear8bitLt, Int8Params): n (int8 CB) + 4·rows (fp32 SCB, one scale per output row).
///   bf16/fp16/fp32: n · element size.
/// Example: a Llama-3-8B q_proj (4096 × 4096) in nf4 is 8,388,608 + 1,048,576 bytes.
int64_t base_matrix_bytes(int64_t rows, int64_t cols, BaseWeights base, bool double_quant);

/// Static memory of one GPU before ZeRO sharding, summed over weight tensors at tensor parallelism tp.
struct FinetuneStatic {
  int64_t trainable = 0;        // trainable parameters (adapters under LoRA, else all)
  int64_t frozen = 0;           // frozen parameters (the LoRA base model)
  int64_t adapter_params = 0;   // of trainable: LoRA A and B
  int64_t largest_trainable = 0;  // the largest trainable tensor (optimizer step in backward)
  Bytes frozen_weights;         // in their storage: quantized codes + block scales, or 16-bit
  Bytes quant_scales;           // of frozen_weights: absmax / SCB scales
  Bytes trainable_weights;
  Bytes gradients;              // every trainable gradient, or the largest one (step in backward)
  Bytes master;                 // fp32 master copies (mixed precision, 16-bit trainable weights)
  Bytes state;                  // moments, momentum, factored or 8-bit state (+ its block absmax)
  Bytes paged_state;            // of state: bitsandbytes paged buffers, in unified memory
  Bytes optimizer() const { return master + state; }
};

/// Example: Llama-3-8B, LoRA r 16 on all seven projections: 1,310,720 trainable parameters per
/// layer, 41,943,040 in all (PEFT's print_trainable_parameters gives the same).
FinetuneStatic finetune_static(const std::vector<WeightTensor>& tensors, const Workload& w, int64_t tp);

/// One GPU's bytes after ZeRO over `dp`: optimizer state sharded from stage 1, gradients from 2
/// (stage 3 is refused by check_finetune); offloaded optimizer state moves to cpu_optimizer.
StageStatic finetune_stage_static(const FinetuneStatic& s, int zero_stage, bool offload, int64_t dp);

/// The terms of the static part (weights, gradients, optimizer) with their formulas, for a GPU
/// holding `s` sharded to `weights`, `gradients`, `optimizer` bytes.
std::vector<Term> describe_finetune_static(const FinetuneStatic& s, const Workload& w, int zero_stage, int64_t dp,
                                           bool offload, Bytes weights, Bytes gradients, Bytes optimizer);

/// The transient of a 4-bit base: bitsandbytes' MatMul4Bit dequantizes the whole weight to the
/// compute dtype (here the activation dtype `e`) in forward and again in backward, one linear at a
/// time: e · rows · cols of the largest quantized linear. -1 when the base is not nf4.
/// Example: Llama-3-8B in nf4, bf16: 2 · 14336 · 4096 = 117,440,512 (gate, up or down).
int64_t dequantized_weight_bytes(const std::vector<WeightTensor>& tensors, const Workload& w, int64_t tp);

/// The fine-tuning settings in a line, "" when every one is the default (full fine-tuning,
/// mixed precision). Example: ", LoRA r=16 on q,v (nf4 base, fp32 adapters)".
std::string finetune_summary(const Workload& w);

/// What a reader should know about the fine-tuning rules applied (where paged state is counted,
/// which tensors stay unquantized, what the activations do not yet model).
std::vector<std::string> finetune_notes(const FinetuneStatic& s, const Workload& w);

}  // namespace actmem

namespace actmem::detail {

/// The fine-tuning options against each other and the layout; a Reporter as in layout_checks.h.
/// The shape-dependent rules are written for one pipeline stage without expert parallelism, and
/// for the ZeRO stages whose sharding they describe.
template <typename Reporter>
bool check_finetune(const Workload& w, const Layout& l, Reporter& r) {
  const LoraOptions& lora = w.lora;
  if (lora.rank < 0 || lora.rank > 65536)
    return r.fail(ErrorKind::kInvalid, "lora_rank",
                  [&] { return fmt::format("@lora_rank {} is out of range; use 1..65536 (0 = no LoRA)", lora.rank); });
  if (!lora.enabled() && (lora.targets != 0 || lora.dropout != 0.0))
    return r.fail(ErrorKind::kIncompatible, lora.targets != 0 ? "lora_targets" : "lora_dropout", [] {
      return std::string("@lora_targets and @lora_dropout shape LoRA adapters; give @lora_rank (e.g. 16)");
    });
  if (lora.enabled()) {
    if (lora.targets == 0 || (lora.targets & ~unsigned{kLoraAll}) != 0)
      return r.fail(ErrorKind::kInvalid, "lora_targets", [] {
        return std::string("@lora_targets names no layer; use a subset of q,k,v,o,gate,up,down or all");
      });
    if (!(lora.dropout >= 0.0 && lora.dropout < 1.0))
      return r.fail(ErrorKind::kInvalid, "lora_dropout",
                    [&] { return fmt::format("@lora_dropout {} must be in [0, 1)", lora.dropout); });
    if (lora.adapter_dtype != DType::kBF16 && lora.adapter_dtype != DType::kFP16 && lora.adapter_dtype != DType::kFP32)
      return r.fail(ErrorKind::kInvalid, "adapter_dtype", [&] {
        return fmt::format("@adapter_dtype {}: adapters train in bf16, fp16 or fp32", dtype_name(lora.adapter_dtype));
      });
  } else if (lora.base == BaseWeights::kInt8 || lora.base == BaseWeights::kNF4) {
    return r.fail(ErrorKind::kIncompatible, "base_weight_dtype", [&] {
      return fmt::format("@base_weight_dtype {}: quantized base weights are frozen and train only through adapters; "
                         "give @lora_rank (e.g. 16)",
                         kBaseWeightNames.name(lora.base));
    });
  }
  if (lora.double_quant && lora.base != BaseWeights::kNF4)
    return r.fail(ErrorKind::kIncompatible, "double_quant", [] {
      return std::string("@double_quant quantizes nf4 block scales; use it with @base_weight_dtype nf4");
    });
  if (!needs_weight_shapes(w)) return true;
  const char* what = lora.enabled() ? "LoRA" : w.frozen_layers != 0 ? "frozen layers"
                     : w.freeze_embeddings ? "a frozen embedding"
                     : w.optimizer_in_backward ? "the optimizer step in backward"
                                                                       : kOptimizerNames.name(w.optimizer).data();
  if (l.parallel.pp > 1)
    return r.fail(ErrorKind::kIncompatible, "pp", [&] {
      return fmt::format("@pp {}: {} is modelled for one pipeline stage; use @pp 1", l.parallel.pp, what);
    });
  if (l.parallel.ep > 1)
    return r.fail(ErrorKind::kIncompatible, "ep", [&] {
      return fmt::format("@ep {}: {} is modelled without expert parallelism; use @ep 1", l.parallel.ep, what);
    });
  // Adafactor factors whole matrices: ZeRO and FSDP1 flatten parameters (nothing left to factor).
  // The step in backward frees each gradient after its own update, which a sharded optimizer does not do.
  const int max_zero = w.optimizer == Optimizer::kAdafactor || w.optimizer_in_backward ? 0 : 2;
  // LoRA under ZeRO-3 (DeepSpeed stage3.py / partition_parameters.py): the frozen base is partitioned
  // too and gathered module by module (how many at once: stage3_prefetch_bucket_size,
  // stage3_max_live_parameters); parameters under stage3_param_persistence_threshold (the HF Trainer
  // sets 10·hidden, transformers integrations/deepspeed.py trainer_config_finalize) stay whole on every
  // GPU, which at small ranks is most LoRA matrices (Llama-3-8B at r 8: 11 of 14 per layer under
  // 40,960); a 4-bit base partitions only with bnb_4bit_quant_storage. None of that is modelled or
  // measured for adapters.
  if (lora.enabled() && l.zero_stage == 3 && max_zero == 2)
    return r.fail(ErrorKind::kIncompatible, "zero_stage", [] {
      return std::string(
          "@zero_stage 3: LoRA under ZeRO-3 is not modelled: ZeRO-3 partitions the frozen base across the "
          "data-parallel GPUs and gathers it layer by layer (how many layers at once is set by "
          "stage3_prefetch_bucket_size and stage3_max_live_parameters), and keeps parameters smaller than "
          "stage3_param_persistence_threshold (10·hidden under the HF Trainer, which at small ranks is most LoRA "
          "matrices) whole on every GPU; use @zero_stage 2, which counts the frozen base whole on each GPU where ZeRO-3 holds 1/dp of it "
          "plus the gathered layers: an upper bound for the weights");
    });
  if (l.zero_stage > max_zero)
    return r.fail(ErrorKind::kIncompatible, "zero_stage", [&] {
      return fmt::format("@zero_stage {}: {} is modelled up to ZeRO-{}; use @zero_stage {}", l.zero_stage, what,
                         max_zero, max_zero);
    });
  return true;
}

/// LoRA against the model and framework: adapters are modelled as PEFT places them on separate
/// HF projections; one adapter on a fused qkv_proj / gate_up_proj (GPT-2, GPT-NeoX, Phi-3) or on
/// Megatron's fused linear_qkv / linear_fc1 has other shapes and saves, not modelled yet.
template <typename Reporter>
bool check_finetune_model(bool fused_qkv, bool fused_gate_up, const Workload& w, Reporter& r) {
  if (!w.lora.enabled()) return true;
  if (w.framework == Framework::kMegatron)
    return r.fail(ErrorKind::kIncompatible, "framework", [] {
      return std::string("@framework megatron: LoRA is modelled as PEFT applies it to HF models; use @framework hf");
    });
  const unsigned qkv = kLoraQ | kLoraK | kLoraV;
  const unsigned gate_up = kLoraGate | kLoraUp;
  const bool on_fused_qkv = fused_qkv && (w.lora.targets & qkv);
  const bool on_fused_gate_up = fused_gate_up && (w.lora.targets & gate_up);
  const unsigned rest = w.lora.targets & ~(on_fused_qkv ? qkv : 0u) & ~(on_fused_gate_up ? gate_up : 0u);
  if (on_fused_qkv || on_fused_gate_up)
    return r.fail(ErrorKind::kIncompatible, "lora_targets", [&] {
      return fmt::format("@lora_targets {}: this model fuses {} into one projection, and an adapter on a fused "
                         "projection is not modelled yet; target {}",
                         lora_targets_name(w.lora.targets), on_fused_qkv ? "q, k and v" : "gate and up",
                         rest ? lora_targets_name(rest) : std::string("o or down"));
    });
  return true;
}

}  // namespace actmem::detail
