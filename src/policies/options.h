// What a user chooses about a training job, in two parts:
//   Workload  decides the shape of the accounting (which tensors exist): framework, attention
//             kernel, dtypes, dropout, optimizer. A model is prepared once per workload.
//   Layout    binds the numbers: sequence, micro-batch, the parallel degrees, recomputation, ZeRO.
//             Evaluating a layout is cheap; the planner evaluates millions.
// Each enum has one name table (names.h) that every front end parses and prints with.
#pragma once

#include <cstdint>
#include <optional>

#include "util/bytes.h"
#include "util/dtype.h"
#include "actmem/expected.h"
#include "util/names.h"
#include "policies/megatron_options.h"
#include "policies/parallel.h"

namespace actmem {

// kTorchtitan: torchtitan's own Llama 3 module code (torchtitan/models/llama3/model/model.py) with
// its activation checkpointing (torchtitan/distributed/activation_checkpoint.py) and FSDP2
// (fully_shard with MixedPrecisionPolicy(param bf16, reduce fp32)); rules: src/tensors/torchtitan.h.
enum class Framework { kHF, kMegatron, kTorchtitan };
enum class AttentionImpl { kEager, kSdpa, kFlash };
enum class Recompute { kNone, kSelective, kFull };
// kAdamW8bit/kPagedAdamW*: bitsandbytes (AdamW8bit, PagedAdamW, PagedAdamW8bit); kAdafactor:
// transformers' Adafactor (factored second moments, no first moment by default); kSGD: torch.optim.SGD
// with momentum, kSGDPlain: without (no state); kMuon: Megatron's Muon (emerging_optimizers: one
// momentum buffer for 2-D weights, Adam for the rest). Rules and sources: static_memory.cc, finetune.cc.
enum class Optimizer { kAdamW, kAdamW8bit, kSGD, kPagedAdamW, kPagedAdamW8bit, kAdafactor, kSGDPlain, kMuon };
// kMixed: an fp32 master copy and fp32 optimizer state beside 16-bit weights (Megatron, DeepSpeed,
// the default). kPure: no master copy, optimizer state in the weight dtype (torchtune's dtype=bf16,
// LitGPT's "bf16-true").
enum class Precision { kMixed, kPure };
// Frozen base weights of a LoRA fine-tune: kept as they are, or quantized by bitsandbytes
// (int8: LLM.int8() Linear8bitLt; nf4: QLoRA Linear4bit).
enum class BaseWeights { kBF16, kFP16, kFP32, kInt8, kNF4 };
/// Which transformers release the hf rules follow: the code layouts save differently
/// (validation/EXPECTED.md, "transformers versions"). 4.57 is the 4.5x layout every hf rule is
/// measured against; 4.44 differs in the loss (s−1 shifted rows); 5 in the MoE experts (fused 3-D
/// weights run by the experts implementation, ExpertsImpl).
enum class HfVersion { k4_44, k4_57, k5 };
/// transformers 5 `experts_implementation` (integrations/moe.py ExpertsInterface): the fused 3-D
/// expert weights run as a per-expert loop, one grouped GEMM (the default, modeling_utils.py
/// get_correct_experts_implementation) or batched GEMMs over gathered per-row weight copies.
enum class ExpertsImpl { kGroupedMm, kEager, kBatchedMm };
/// How the LM head and loss run (--loss; policies/loss_impl.h): HF's full fp32 logits, torchtune's
/// chunked output, Liger's fused linear cross entropy.
enum class LossImpl { kFull, kChunked, kFusedLinearCE };
inline constexpr int64_t kDefaultLossChunks = 8;  // torchtune CEWithChunkedOutputLoss(num_output_chunks=8)

inline constexpr NameTable<Framework, 3> kFrameworkNames{
    "framework",
    "framework",
    {{{Framework::kHF, "hf"}, {Framework::kMegatron, "megatron"}, {Framework::kTorchtitan, "torchtitan"}}}};
inline constexpr NameTable<AttentionImpl, 3> kAttentionNames{
    "attention implementation",
    "attention",
    {{{AttentionImpl::kEager, "eager"}, {AttentionImpl::kSdpa, "sdpa"}, {AttentionImpl::kFlash, "flash"}}}};
inline constexpr NameTable<Recompute, 3> kRecomputeNames{
    "recomputation",
    "recompute",
    {{{Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}}}};
inline constexpr NameTable<Optimizer, 8> kOptimizerNames{
    "optimizer",
    "optimizer",
    {{{Optimizer::kAdamW, "adamw"},
      {Optimizer::kAdamW8bit, "adamw-8bit"},
      {Optimizer::kSGD, "sgd"},
      {Optimizer::kPagedAdamW, "paged-adamw"},
      {Optimizer::kPagedAdamW8bit, "paged-adamw-8bit"},
      {Optimizer::kAdafactor, "adafactor"},
      {Optimizer::kSGDPlain, "sgd-nomomentum"},
      {Optimizer::kMuon, "muon"}}}};
inline constexpr NameTable<Precision, 2> kPrecisionNames{
    "precision", "precision", {{{Precision::kMixed, "mixed"}, {Precision::kPure, "pure"}}}};
inline constexpr NameTable<BaseWeights, 5> kBaseWeightNames{"base weight dtype",
                                                            "base_weight_dtype",
                                                            {{{BaseWeights::kBF16, "bf16"},
                                                              {BaseWeights::kFP16, "fp16"},
                                                              {BaseWeights::kFP32, "fp32"},
                                                              {BaseWeights::kInt8, "int8"},
                                                              {BaseWeights::kNF4, "nf4"}}}};

/// LoRA (PEFT's lora.Linear, torchtune's LoRALinear): the base model frozen, adapters A (r × in)
/// and B (out × r) beside each targeted linear layer are the only trainable parameters.
struct LoraOptions {
  int64_t rank = 0;         // r; 0 = no LoRA (full fine-tuning)
  unsigned targets = 0;     // bits of LoraTarget (finetune.h); 0 with rank > 0 = an error
  double dropout = 0.0;     // lora_dropout p (activations only)
  BaseWeights base = BaseWeights::kBF16;
  bool double_quant = false;          // nf4: bnb_4bit_use_double_quant (8-bit absmax)
  DType adapter_dtype = DType::kFP32; // PEFT upcasts adapters to fp32 (autocast_adapter_dtype=True)
  // Targets named that match no projection of the model (prepare() sets it from
  // resolve_lora_targets, finetune.h): adapted nowhere, as PEFT does, and said in a note.
  unsigned unmatched = 0;
  bool enabled() const { return rank > 0; }
};

inline constexpr NameTable<HfVersion, 3> kHfVersionNames{
    "transformers version",
    "hf_version",
    {{{HfVersion::k4_44, "4.44"}, {HfVersion::k4_57, "4.57"}, {HfVersion::k5, "5"}}}};
inline constexpr NameTable<ExpertsImpl, 3> kExpertsImplNames{
    "experts implementation",
    "experts_impl",
    {{{ExpertsImpl::kGroupedMm, "grouped_mm"},
      {ExpertsImpl::kEager, "eager"},
      {ExpertsImpl::kBatchedMm, "batched_mm"}}}};

/// The gradients' dtype when none is given: the weights', except under Megatron-LM, which
/// accumulates and all-reduces a bf16 model's gradients in fp32 (megatron/training/arguments.py:
/// --bf16 sets accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16). The option table
/// (set_training_option: framework, weight_dtype) and the planner apply it; a Workload built by hand
/// keeps what it is given.
constexpr DType default_grad_dtype(Framework framework, DType weight_dtype) {
  return framework == Framework::kMegatron && weight_dtype == DType::kBF16 ? DType::kFP32 : weight_dtype;
}

/// What is fixed for a prepared model.
struct Workload {
  Framework framework = Framework::kHF;
  AttentionImpl attention = AttentionImpl::kFlash;
  DType dtype = DType::kBF16;               // activations
  std::optional<double> hidden_dropout;     // unset = from the model (config.json)
  std::optional<double> attention_dropout;  // unset = from the model
  DType weight_dtype = DType::kBF16;
  DType grad_dtype = DType::kBF16;          // bf16 gives the classic 16 bytes/param; fp32 accumulation 18
  Optimizer optimizer = Optimizer::kAdamW;
  HfVersion hf_version = HfVersion::k5;  // framework hf: the transformers code layout (the current major)
  ExpertsImpl experts_impl = ExpertsImpl::kGroupedMm;  // hf_version 5: how the fused experts run
  Precision precision = Precision::kMixed;
  bool optimizer_in_backward = false;  // torchtune optimizer_in_bwd: each gradient freed after its step
  LoraOptions lora;
  LossImpl loss = LossImpl::kFull;           // --loss (loss_impl.h)
  int64_t loss_chunks = kDefaultLossChunks;  // with kChunked: N
  // The input embedding frozen (`get_input_embeddings().requires_grad_(False)`; a tied LM head with
  // it): no gradient or optimizer state for it, and no saves for its backward (op_graph.cc).
  bool freeze_embeddings = false;
  // framework megatron: --transformer-impl, --fp8-recipe, --recompute-modules (megatron_options.h)
  MegatronOptions megatron;
  // The first N decoder layers frozen (`for p in model.layers[i].parameters(): p.requires_grad_(False)`,
  // i < N): no gradient or optimizer state for them, and what autograd still saves depends on whether
  // their input needs a gradient (policies/frozen_layers.h; validation/notes/frozen-layers.md).
  int64_t frozen_layers = 0;
  // Packed rows (padding-free packing, DataCollatorWithFlattening): N documents of s/N tokens in each
  // row of s tokens, position_ids restarting at 0 per document; 0 = unpacked rows. framework hf only
  // (policies/packed_docs.h; validation/notes/packed-sequences.md).
  int64_t packed_docs = 0;
  // Encoders (bert, roberta): the head, "mlm", "classifier[:N]" or "none" (model/encoder_head.h),
  // applied by prepare(); empty = what the config's `architectures` names.
  std::string head;
  // PYTORCH_CUDA_ALLOC_CONF as the job sets it (runtime/caching_allocator.h AllocatorConfig::parse):
  // what the step's timeline is replayed under for its reserved memory; empty = PyTorch's defaults.
  std::string alloc_conf;
};

/// What one evaluation binds.
struct Layout {
  int64_t seq_len = 0;      // s
  int64_t micro_batch = 1;  // b
  ParallelLayout parallel;
  Recompute recompute = Recompute::kNone;
  int64_t recompute_layers = -1;  // with kFull: only this many layers per pipeline chunk; -1 = all
  int64_t checkpoint_every = 0;   // with kFull: a checkpoint every k layers (0 = every layer)
  // framework torchtitan with kSelective: torchtitan's selective_ac_option. 0 = "op" (per-op SAC:
  // the _save_list op outputs kept, every second mm recomputed); N >= 1 = every N-th block wrapped
  // in full activation checkpointing, the others saving everything (_apply_layer_sac).
  int64_t selective_ac_every = 0;
  int zero_stage = 0;             // 0..3; FSDP FULL_SHARD is stage 3, SHARD_GRAD_OP stage 2
  bool offload_optimizer = false; // optimizer state (and fp32 master weights) in CPU memory
  bool offload_activations = false;  // torchtune OffloadActivations: saved tensors in host memory (offload.h)
  int64_t cpu_offloading_num_layers = 0;  // framework megatron: TE cpu_offload of the first N layers (cpu_offloading.h)
  Bytes reserve{0};               // CUDA context + allocator slack: an allowance
  int64_t grad_accum = 1;         // micro-batches per optimizer step without a pipeline (grad_accum.h)
};

/// Ranges of every number a user sets, checked by the library (so every front end gets the same
/// answer). Beyond them it is a typo, not a job; they also keep products inside int64.
namespace limits {
constexpr int64_t kMaxSeqLen = int64_t{1} << 24;
constexpr int64_t kMaxMicroBatch = int64_t{1} << 20;
constexpr int64_t kMaxDp = int64_t{1} << 20;
constexpr int64_t kMaxTp = int64_t{1} << 14;
constexpr int64_t kMaxPp = int64_t{1} << 14;
constexpr int64_t kMaxVpp = int64_t{1} << 10;
constexpr int64_t kMaxCp = int64_t{1} << 14;
constexpr int64_t kMaxEp = int64_t{1} << 14;
constexpr int64_t kMaxMicroBatches = int64_t{1} << 20;
// The interleaved schedule's micro-batch group (Megatron uses pp or a little more): bounds its walk.
constexpr int64_t kMaxMicroBatchGroup = int64_t{1} << 12;
}  // namespace limits

/// The checks that need no model: ranges of the numbers, dtypes training can keep, dropout in
/// [0, 1). Example: check_options({}, {.seq_len = 0}).error().message == "@seq_len 0 is out of range; use 1..16777216".
Expected<void> check_options(const Workload& workload, const Layout& layout);

}  // namespace actmem
