#include "policies/option_table.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "model/model_spec.h"   // limits::kMaxLayers (the pipeline stage sizes)
#include "policies/finetune.h"  // parse_lora_targets, lora_targets_name, kLoraQ
#include "policies/loss_impl.h"  // parse_loss, loss_name
#include "policies/option_setters.h"  // the setters of text options parsed by their own rules
#include "util/spellcheck.h"

namespace actmem {

namespace {

using detail::get_expert_bias, detail::get_recompute_modules, detail::get_selective_ac, detail::set_alloc_conf,
    detail::set_expert_bias, detail::set_recompute_modules, detail::set_selective_ac;

Error wrong_kind(std::string_view name, std::string_view expected, const OptionValue& value) {
  return Error{ErrorKind::kInvalid, std::string(name),
               fmt::format("@{} {}: expected {}", name, describe_option_value(value), expected)};
}

/// A dtype option, with the CLI's message ("--dtype: unknown dtype ...").
Expected<DType> as_dtype(std::string_view name, const OptionValue& v) {
  auto text = option_text(name, v);
  if (!text) return text.error();
  auto d = parse_dtype(*text);
  if (!d) return Error{ErrorKind::kUnknownName, std::string(name), fmt::format("@{}: {}", name, d.error().message)};
  return *d;
}

// ---- how an option reaches its field -------------------------------------------------------------
// A field is a captureless lambda (w, l) -> field&, written by WORKLOAD(member) / LAYOUT(member); the
// templates below turn it into the setter and getter of one kind. The scope comes with the field.

using Setter = Expected<void> (*)(TrainingSettings&, std::string_view, const OptionValue&);
using Getter = std::optional<OptionValue> (*)(const Workload&, const Layout&);

struct Access {
  OptionKind kind;
  OptionScope scope;
  Setter set;
  Getter get;
  std::string (*choices)() = nullptr;
};

#define WORKLOAD_FIELD(member) [](auto& w, auto&) -> auto& { return w.member; }
#define LAYOUT_FIELD(member) [](auto&, auto& l) -> auto& { return l.member; }
#define WORKLOAD(member) OptionScope::kWorkload, WORKLOAD_FIELD(member)
#define LAYOUT(member) OptionScope::kLayout, LAYOUT_FIELD(member)

template <auto Field>
Expected<void> set_count(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto x = option_count(n, v);
  if (!x) return x.error();
  Field(s.workload, s.layout) = *x;
  return {};
}
template <auto Field>
std::optional<OptionValue> get_count(const Workload& w, const Layout& l) {
  return OptionValue{int64_t{Field(w, l)}};
}
/// A count whose negative value means "the model's" (Megatron's router options).
template <auto Field>
std::optional<OptionValue> get_count_or_unset(const Workload& w, const Layout& l) {
  if (Field(w, l) < 0) return std::nullopt;
  return OptionValue{int64_t{Field(w, l)}};
}
template <OptionScope S, auto Field>
constexpr Access count() { return {OptionKind::kCount, S, set_count<Field>, get_count<Field>}; }
template <OptionScope S, auto Field>
constexpr Access count_or_unset() { return {OptionKind::kCount, S, set_count<Field>, get_count_or_unset<Field>}; }

template <auto Field>
Expected<void> set_real(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto x = option_real(n, v);
  if (!x) return x.error();
  Field(s.workload, s.layout) = *x;
  return {};
}
/// A real that is either a std::optional (unset: from the model) or negative when unset.
template <auto Field>
std::optional<OptionValue> get_real(const Workload& w, const Layout& l) {
  const auto& x = Field(w, l);
  if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::optional<double>>) {
    if (!x) return std::nullopt;
    return OptionValue{*x};
  } else {
    if (x < 0) return std::nullopt;
    return OptionValue{double{x}};
  }
}
template <OptionScope S, auto Field>
constexpr Access real() { return {OptionKind::kReal, S, set_real<Field>, get_real<Field>}; }

template <auto Field>
Expected<void> set_flag(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto x = option_flag(n, v);
  if (!x) return x.error();
  Field(s.workload, s.layout) = *x;
  return {};
}
template <auto Field>
std::optional<OptionValue> get_flag(const Workload& w, const Layout& l) {
  return OptionValue{bool{Field(w, l)}};
}
template <OptionScope S, auto Field>
constexpr Access flag() { return {OptionKind::kFlag, S, set_flag<Field>, get_flag<Field>}; }

/// An enum through its name table (options.h): the table's own message. A value the table does not
/// name (MoeScoreFunction::kModel, ...) reads back as unset: the model's.
template <auto Field, const auto& Table>
Expected<void> set_name(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto text = option_text(n, v);
  if (!text) return text.error();
  auto x = Table.parse(*text);
  if (!x) return x.error();
  Field(s.workload, s.layout) = *x;
  return {};
}
template <auto Field, const auto& Table>
std::optional<OptionValue> get_name(const Workload& w, const Layout& l) {
  const std::string_view name = Table.name(Field(w, l));
  if (name == "?") return std::nullopt;
  return OptionValue{std::string(name)};
}
template <const auto& Table>
std::string valid_names() {
  return Table.valid();
}
template <OptionScope S, auto Field, const auto& Table>
constexpr Access named() {
  return {OptionKind::kText, S, set_name<Field, Table>, get_name<Field, Table>, valid_names<Table>};
}

std::string training_dtypes() { return "bf16, fp16, fp32"; }
template <auto Field>
Expected<void> set_dtype(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto d = as_dtype(n, v);
  if (!d) return d.error();
  Field(s.workload, s.layout) = *d;
  return {};
}
template <auto Field>
std::optional<OptionValue> get_dtype(const Workload& w, const Layout& l) {
  return OptionValue{std::string(dtype_name(Field(w, l)))};
}
template <OptionScope S, auto Field>
constexpr Access dtype() { return {OptionKind::kText, S, set_dtype<Field>, get_dtype<Field>, training_dtypes}; }

/// Free text (the encoder head, parsed when the model is prepared); empty reads back as unset.
template <auto Field>
Expected<void> set_text(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto x = option_text(n, v);
  if (!x) return x.error();
  Field(s.workload, s.layout) = *x;
  return {};
}
template <auto Field>
std::optional<OptionValue> get_text(const Workload& w, const Layout& l) {
  if (Field(w, l).empty()) return std::nullopt;
  return OptionValue{Field(w, l)};
}
template <OptionScope S, auto Field>
constexpr Access text() { return {OptionKind::kText, S, set_text<Field>, get_text<Field>}; }

// ---- the options whose setting is more than one field ----------------------------------------------

Expected<void> set_weight_dtype(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto d = as_dtype(n, v);
  if (!d) return d.error();
  s.workload.weight_dtype = *d;
  if (!s.grad_dtype_set) s.workload.grad_dtype = default_grad_dtype(s.workload.framework, *d);
  return {};
}

Expected<void> set_framework(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto ok = set_name<WORKLOAD_FIELD(framework), kFrameworkNames>(s, n, v);
  if (ok && !s.grad_dtype_set) s.workload.grad_dtype = default_grad_dtype(s.workload.framework, s.workload.weight_dtype);
  return ok;
}

Expected<void> set_grad_dtype(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto d = as_dtype(n, v);
  if (!d) return d.error();
  s.workload.grad_dtype = *d;
  s.grad_dtype_set = true;
  return {};
}

Expected<void> set_zero(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto x = option_count(n, v);
  if (!x) return x.error();
  // check_options() owns the range (0..3); this says the same for a value no int holds.
  if (*x < std::numeric_limits<int>::min() || *x > std::numeric_limits<int>::max())
    return Error{ErrorKind::kInvalid, "zero_stage", fmt::format("@zero_stage {} is out of range; use 0..3", *x)};
  s.layout.zero_stage = static_cast<int>(*x);
  return {};
}

Expected<void> set_lora_rank(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto x = option_count(n, v);
  if (!x) return x.error();
  s.workload.lora.rank = *x;
  if (*x > 0 && s.workload.lora.targets == 0) s.workload.lora.targets = kLoraQ | kLoraV;  // PEFT's default for Llama
  return {};
}

Expected<void> set_lora_targets(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto text = option_text(n, v);
  if (!text) return text.error();
  auto targets = parse_lora_targets(*text);
  if (!targets) return targets.error();
  s.workload.lora.targets = *targets;
  return {};
}
std::optional<OptionValue> get_lora_targets(const Workload& w, const Layout&) {
  if (w.lora.targets == 0) return std::nullopt;
  return OptionValue{lora_targets_name(w.lora.targets)};
}

Expected<void> set_loss(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  auto text = option_text(n, v);
  if (!text) return text.error();
  auto choice = parse_loss(*text);
  if (!choice) return choice.error();
  s.workload.loss = choice->impl;
  s.workload.loss_chunks = choice->chunks;
  return {};
}
std::optional<OptionValue> get_loss(const Workload& w, const Layout&) {
  return OptionValue{loss_name(w.loss, w.loss_chunks)};
}

Expected<void> set_reserve(TrainingSettings& s, std::string_view n, const OptionValue& v) {
  if (const auto* bytes = std::get_if<int64_t>(&v)) {
    s.layout.reserve = Bytes{*bytes};
    return {};
  }
  auto text = option_text(n, v);
  if (!text) return wrong_kind(n, "a size like 2GiB or a number of bytes", v);
  if (*text == "0") {
    s.layout.reserve = Bytes{0};
    return {};
  }
  auto size = parse_size(*text);
  if (!size) return Error{ErrorKind::kInvalid, std::string(n), fmt::format("@{}: {}", n, size.error().message)};
  s.layout.reserve = *size;
  return {};
}
std::optional<OptionValue> get_reserve(const Workload&, const Layout& l) { return OptionValue{l.reserve.count()}; }

std::string lora_target_names() { return "q, k, v, o, gate, up, down (comma-separated) or all"; }
std::string loss_names() { return "full, chunked[:N], fused-linear-ce"; }
std::string recompute_module_names() {
  return "core_attn, layernorm, mlp, moe_act, moe, shared_experts, mla_up_proj (comma-separated)";
}

// ---- the table ---------------------------------------------------------------------------------------

/// What a row may say beyond its name, group, field and help.
struct Details {
  unsigned frameworks = kAllFrameworks;
  bool advanced = false;
  std::string_view default_note;
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
};

constexpr unsigned kHfOnly = framework_bit(Framework::kHF);
constexpr unsigned kMegatronOnly = framework_bit(Framework::kMegatron);
constexpr unsigned kTorchtitanOnly = framework_bit(Framework::kTorchtitan);

constexpr OptionSpec row(std::string_view name, OptionGroup group, Access a, std::string_view help,
                         std::string_view example, Details d = {}) {
  OptionSpec s{name, a.kind, a.scope, group, d.frameworks, d.advanced, help, example, d.default_note,
               d.min, d.max, a.set, a.get};
  s.choices = a.choices;
  return s;
}

constexpr auto kJob = OptionGroup::kJob;
constexpr auto kParallel = OptionGroup::kParallel;
constexpr auto kRecomputeGroup = OptionGroup::kRecompute;
constexpr auto kPrecisionGroup = OptionGroup::kPrecision;
constexpr auto kFineTuning = OptionGroup::kFineTuning;
constexpr auto kMemory = OptionGroup::kMemory;
constexpr auto kHfGroup = OptionGroup::kHf;
constexpr auto kMegatronGroup = OptionGroup::kMegatron;
constexpr auto kRouter = OptionGroup::kMoeRouter;

const std::array kSpecs{
    // Job: what every estimate states.
    row("seq_len", kJob, count<LAYOUT(seq_len)>(), "sequence length s (tokens per row)", "4096",
        {.min = 1, .max = static_cast<double>(limits::kMaxSeqLen)}),
    row("micro_batch", kJob, count<LAYOUT(micro_batch)>(), "micro-batch size b (rows per forward)", "2",
        {.min = 1, .max = static_cast<double>(limits::kMaxMicroBatch)}),
    row("framework", kJob, {OptionKind::kText, OptionScope::kWorkload, set_framework,
                            get_name<WORKLOAD_FIELD(framework), kFrameworkNames>, valid_names<kFrameworkNames>},
        "whose save rules: hf (transformers eager), megatron (Megatron-core) or torchtitan (its Llama 3 with FSDP2)",
        "megatron"),
    row("attention", kJob, named<WORKLOAD(attention), kAttentionNames>(), "the attention kernel", "sdpa"),
    row("dtype", kJob, dtype<WORKLOAD(dtype)>(), "activation dtype", "fp32"),
    row("recompute", kJob, named<LAYOUT(recompute), kRecomputeNames>(),
        "activation recomputation: none, selective (the framework's) or full (every layer's input kept)", "full"),
    row("optimizer", kJob, named<WORKLOAD(optimizer), kOptimizerNames>(),
        "the optimizer, whose state the static memory holds", "sgd"),
    row("zero", kJob, {OptionKind::kCount, OptionScope::kLayout, set_zero, get_count<LAYOUT_FIELD(zero_stage)>},
        "ZeRO stage over @dp: 1 shards optimizer state, 2 also gradients, 3 also weights (FSDP full shard)", "3",
        {.min = 0, .max = 3}),
    row("reserve", kJob, {OptionKind::kSize, OptionScope::kLayout, set_reserve, get_reserve},
        "CUDA context and allocator slack allowance, e.g. 2GiB (or a number of bytes)", "2GiB", {.min = 0}),
    row("alloc_conf", kJob,
        {OptionKind::kText, OptionScope::kWorkload, set_alloc_conf, get_text<WORKLOAD_FIELD(alloc_conf)>},
        "PYTORCH_CUDA_ALLOC_CONF for the reserved-memory replay of the step", "expandable_segments:True",
        {.advanced = true, .default_note = "PyTorch's defaults"}),
    // Parallelism.
    row("dp", kParallel, count<LAYOUT(parallel.dp)>(), "data-parallel size", "8",
        {.min = 1, .max = static_cast<double>(limits::kMaxDp)}),
    row("tp", kParallel, count<LAYOUT(parallel.tp)>(), "tensor-parallel size", "2",
        {.min = 1, .max = static_cast<double>(limits::kMaxTp)}),
    row("sp", kParallel, flag<LAYOUT(parallel.sp)>(), "sequence parallelism (with @tp 2 or more)", "true"),
    row("pp", kParallel, count<LAYOUT(parallel.pp)>(), "pipeline-parallel size", "2",
        {.min = 1, .max = static_cast<double>(limits::kMaxPp)}),
    row("vpp", kParallel, count<LAYOUT(parallel.vpp)>(), "virtual stages per pipeline rank (interleaved 1F1B)", "2",
        {.min = 1, .max = static_cast<double>(limits::kMaxVpp)}),
    row("cp", kParallel, count<LAYOUT(parallel.cp)>(), "context-parallel size", "2",
        {.min = 1, .max = static_cast<double>(limits::kMaxCp)}),
    row("ep", kParallel, count<LAYOUT(parallel.ep)>(), "expert-parallel size", "2",
        {.min = 1, .max = static_cast<double>(limits::kMaxEp)}),
    row("etp", kParallel, count<LAYOUT(parallel.etp)>(),
        "megatron MoE: the routed experts' tensor-parallel size (--expert-tensor-parallel-size; 0: tp)", "1",
        {.frameworks = kMegatronOnly, .advanced = true, .min = 0, .max = static_cast<double>(limits::kMaxTp)}),
    row("distributed_optimizer_instances", kParallel, count<LAYOUT(parallel.optimizer_instances)>(),
        "megatron with @zero 1: the optimizer state sharded over dp·cp / N (--num-distributed-optimizer-instances)", "2",
        {.frameworks = kMegatronOnly, .advanced = true, .min = 1, .max = static_cast<double>(limits::kMaxDp)}),
    row("num_micro_batches", kParallel, count<LAYOUT(parallel.num_micro_batches)>(),
        "micro-batches per pipeline flush (0: as many as the schedule holds)", "8",
        {.min = 0, .max = static_cast<double>(limits::kMaxMicroBatches)}),
    row("microbatch_group", kParallel, count<LAYOUT(parallel.microbatch_group)>(),
        "interleaved schedule: contiguous micro-batches per virtual stage (Megatron's "
        "--microbatch-group-size-per-virtual-pipeline-stage; 0: pp)",
        "5", {.frameworks = kMegatronOnly, .advanced = true, .min = 0, .max = static_cast<double>(limits::kMaxMicroBatchGroup)}),
    row("first_stage_layers", kParallel, count<LAYOUT(parallel.first_stage_layers)>(),
        "uneven pipeline: layers on the first stage (Megatron's --decoder-first-pipeline-num-layers; 0: even)", "4",
        {.advanced = true, .min = 0, .max = static_cast<double>(limits::kMaxLayers)}),
    row("last_stage_layers", kParallel, count<LAYOUT(parallel.last_stage_layers)>(),
        "uneven pipeline: layers on the last stage (Megatron's --decoder-last-pipeline-num-layers; 0: even)", "4",
        {.advanced = true, .min = 0, .max = static_cast<double>(limits::kMaxLayers)}),
    row("grad_accum", kParallel, count<LAYOUT(grad_accum)>(),
        "gradient accumulation: micro-batches per optimizer step (without a pipeline)", "4"),
    // Recomputation details.
    row("recompute_layers", kRecomputeGroup, count_or_unset<LAYOUT(recompute_layers)>(),
        "with @recompute full: recompute only N layers per pipeline stage", "2",
        {.advanced = true, .default_note = "all"}),
    row("checkpoint_every", kRecomputeGroup, count<LAYOUT(checkpoint_every)>(),
        "with @recompute full: keep a checkpoint every k layers (0: every layer)", "2", {.advanced = true}),
    row("selective_ac_option", kRecomputeGroup,
        {OptionKind::kText, OptionScope::kLayout, set_selective_ac, get_selective_ac},
        "torchtitan with @recompute selective: op (per-op SAC) or N (every N-th block checkpointed)", "2",
        {.frameworks = kTorchtitanOnly, .advanced = true}),
    row("recompute_modules", kRecomputeGroup,
        {OptionKind::kText, OptionScope::kWorkload, set_recompute_modules, get_recompute_modules,
         recompute_module_names},
        "megatron with @recompute selective: the modules recomputed", "core_attn,mlp",
        {.frameworks = kMegatronOnly, .advanced = true}),
    // Precision and the optimizer's memory.
    row("weight_dtype", kPrecisionGroup, {OptionKind::kText, OptionScope::kWorkload, set_weight_dtype,
                                          get_dtype<WORKLOAD_FIELD(weight_dtype)>, training_dtypes},
        "the weights' dtype", "fp32"),
    row("grad_dtype", kPrecisionGroup, {OptionKind::kText, OptionScope::kWorkload, set_grad_dtype,
                                        get_dtype<WORKLOAD_FIELD(grad_dtype)>, training_dtypes},
        "gradient dtype (fp32: fp32 accumulation)", "fp32",
        {.default_note = "the weights'; fp32 for bf16 weights under @framework megatron, as Megatron-LM does"}),
    row("precision", kPrecisionGroup, named<WORKLOAD(precision), kPrecisionNames>(),
        "mixed (fp32 master weights and fp32 optimizer state) or pure (all in the weight dtype)", "pure"),
    row("offload_optimizer", kPrecisionGroup, flag<LAYOUT(offload_optimizer)>(),
        "optimizer state and fp32 master weights in CPU memory", "true"),
    row("optimizer_in_backward", kPrecisionGroup, flag<WORKLOAD(optimizer_in_backward)>(),
        "step each parameter in backward, freeing its gradient (torchtune's optimizer_in_bwd)", "true",
        {.advanced = true}),
    // Fine-tuning.
    row("lora_rank", kFineTuning, {OptionKind::kCount, OptionScope::kWorkload, set_lora_rank,
                                   get_count<WORKLOAD_FIELD(lora.rank)>},
        "LoRA rank r (0: full fine-tuning)", "16"),
    row("lora_targets", kFineTuning, {OptionKind::kText, OptionScope::kWorkload, set_lora_targets, get_lora_targets,
                                      lora_target_names},
        "the layers LoRA adapts", "q,k,v,o", {.default_note = "q,v with @lora_rank"}),
    row("lora_dropout", kFineTuning, real<WORKLOAD(lora.dropout)>(), "LoRA dropout p", "0.05"),
    row("base_weight_dtype", kFineTuning, named<WORKLOAD(lora.base), kBaseWeightNames>(),
        "the frozen LoRA base weights (int8, nf4: bitsandbytes)", "nf4"),
    row("double_quant", kFineTuning, flag<WORKLOAD(lora.double_quant)>(),
        "nf4 with 8-bit block scales (bnb_4bit_use_double_quant)", "true", {.advanced = true}),
    row("adapter_dtype", kFineTuning, dtype<WORKLOAD(lora.adapter_dtype)>(),
        "LoRA adapter dtype (PEFT: fp32, torchtune: bf16)", "bf16", {.advanced = true}),
    row("freeze_embeddings", kFineTuning, flag<WORKLOAD(freeze_embeddings)>(),
        "the input embedding (and a tied LM head) frozen", "true", {.advanced = true}),
    row("frozen_layers", kFineTuning, count<WORKLOAD(frozen_layers)>(),
        "the first N decoder layers frozen (requires_grad False)", "2", {.advanced = true}),
    row("head", kFineTuning, text<WORKLOAD(head)>(), "encoders (bert, roberta): mlm, classifier[:N] or none",
        "classifier:3", {.advanced = true, .default_note = "what the config's architectures name"}),
    // Memory switches.
    row("loss", kMemory, {OptionKind::kText, OptionScope::kWorkload, set_loss, get_loss, loss_names},
        "the LM head and loss: full fp32 logits, torchtune's chunked output (N = 8) or Liger's fused linear CE",
        "chunked:4"),
    row("offload_activations", kMemory, flag<LAYOUT(offload_activations)>(),
        "saved activations in CPU memory (torchtune activation offloading)", "true"),
    row("cpu_offloading_num_layers", kMemory, count<LAYOUT(cpu_offloading_num_layers)>(),
        "megatron: the first N layers' saved activations in CPU memory (TE cpu_offload; 0: off)", "2",
        {.frameworks = kMegatronOnly, .advanced = true}),
    row("packed_docs", kMemory, count<WORKLOAD(packed_docs)>(),
        "hf: N documents packed in each row of @seq_len tokens, padding-free (0: unpacked)", "4",
        {.frameworks = kHfOnly, .advanced = true}),
    row("hidden_dropout", kMemory, real<WORKLOAD(hidden_dropout)>(), "hidden dropout p", "0.1",
        {.advanced = true, .default_note = "from config.json"}),
    row("attention_dropout", kMemory, real<WORKLOAD(attention_dropout)>(), "attention dropout p", "0.1",
        {.advanced = true, .default_note = "from config.json"}),
    // HF transformers.
    row("hf_version", kHfGroup, named<WORKLOAD(hf_version), kHfVersionNames>(),
        "hf: the transformers code layout the rules follow", "4.57", {.frameworks = kHfOnly, .advanced = true}),
    row("experts_impl", kHfGroup, named<WORKLOAD(experts_impl), kExpertsImplNames>(),
        "hf with @hf_version 5: how the MoE experts run", "eager", {.frameworks = kHfOnly, .advanced = true}),
    // Megatron-core.
    row("transformer_impl", kMegatronGroup, named<WORKLOAD(megatron.impl), kTransformerImplNames>(),
        "megatron: the layer spec (Megatron-LM's --transformer-impl)", "transformer_engine",
        {.frameworks = kMegatronOnly, .advanced = true}),
    row("fp8", kMegatronGroup, named<WORKLOAD(megatron.fp8), kFp8RecipeNames>(),
        "with @transformer_impl transformer_engine: the TE fp8 recipe (Megatron's --fp8-recipe)", "delayed",
        {.frameworks = kMegatronOnly, .advanced = true}),
    row("fp8_gpu", kMegatronGroup, named<WORKLOAD(megatron.fp8_gpu), kFp8GpuNames>(),
        "the GPU generation: cuBLAS workspace sizes; with @fp8 whether TE's fp8 copies keep a transpose", "ampere",
        {.frameworks = kMegatronOnly, .advanced = true}),
    row("cublas_workspace_config", kMegatronGroup, text<WORKLOAD(megatron.cublas_workspace_config)>(),
        "CUBLAS_WORKSPACE_CONFIG: PyTorch's cuBLAS workspace per handle (two: forward and backward threads)",
        ":4096:8", {.frameworks = kMegatronOnly, .advanced = true, .default_note = "PyTorch's default for @fp8_gpu"}),
    row("disable_parameter_transpose_cache", kMegatronGroup, flag<WORKLOAD(megatron.no_transpose_cache)>(),
        "with @fp8 delayed or tensorwise: TE quantizes the weights each micro-batch and saves the copies",
        "true", {.frameworks = kMegatronOnly, .advanced = true}),
    row("deterministic", kMegatronGroup, flag<WORKLOAD(megatron.deterministic)>(),
        "Megatron's --deterministic-mode (torch deterministic algorithms): with MoE, from @megatron_core 0.15 "
        "the unpermute's index_add_ keeps each layer's expert output for backward",
        "true", {.frameworks = kMegatronOnly, .advanced = true}),
    row("megatron_core", kMegatronGroup, named<WORKLOAD(megatron.core), kMegatronCoreNames>(),
        "the Megatron-core release the rules follow (0.15: 0.15 and later, to main at d98e8a64; 0.14: up to 0.14)",
        "0.14", {.frameworks = kMegatronOnly, .advanced = true}),
    row("fp8_param_gather", kMegatronGroup, flag<WORKLOAD(megatron.fp8_param_gather)>(),
        "with @fp8 delayed or tensorwise: the TE linears' weights are fp8, no cached copy (--fp8-param-gather)",
        "true", {.frameworks = kMegatronOnly, .advanced = true}),
    row("activation_func_fp8_input_store", kMegatronGroup, flag<WORKLOAD(megatron.fp8_act_input_store)>(),
        "with @fp8: the SwiGLU input kept in fp8 (Megatron's flag)", "true",
        {.frameworks = kMegatronOnly, .advanced = true}),
    row("no_rope_fusion", kMegatronGroup, flag<WORKLOAD(megatron.no_rope_fusion)>(),
        "megatron, MLA models: the unfused RoPE keeps cos and sin (Megatron's --no-rope-fusion)", "true",
        {.frameworks = kMegatronOnly, .advanced = true}),
    row("moe_grouped_gemm", kMegatronGroup, flag<WORKLOAD(megatron.moe_grouped_gemm)>(),
        "megatron, MoE, TE spec: the experts' grouped GEMM and its cuBLAS workspaces (--moe-grouped-gemm)", "true",
        {.frameworks = kMegatronOnly, .advanced = true}),
    // Megatron-core's MoE dispatcher and TopKRouter.
    row("moe_token_dispatcher", kRouter, named<WORKLOAD(megatron.dispatcher), kMoeDispatcherNames>(),
        "megatron: the MoE token dispatcher (Megatron's --moe-token-dispatcher-type)", "alltoall",
        {.frameworks = kMegatronOnly, .advanced = true}),
    row("moe_router_score_function", kRouter, named<WORKLOAD(megatron.router.score), kMoeScoreFunctionNames>(),
        "megatron: the router's score function", "sigmoid",
        {.frameworks = kMegatronOnly, .advanced = true, .default_note = "the model's"}),
    row("moe_router_enable_expert_bias", kRouter,
        {OptionKind::kFlag, OptionScope::kWorkload, set_expert_bias, get_expert_bias},
        "megatron: the router's expert bias", "true",
        {.frameworks = kMegatronOnly, .advanced = true, .default_note = "the model's"}),
    row("moe_router_num_groups", kRouter, count_or_unset<WORKLOAD(megatron.router.num_groups)>(),
        "megatron: expert groups for group-limited routing (0: none)", "8",
        {.frameworks = kMegatronOnly, .advanced = true, .default_note = "the model's"}),
    row("moe_router_group_topk", kRouter, count_or_unset<WORKLOAD(megatron.router.group_topk)>(),
        "megatron: groups kept per token in group-limited routing", "4",
        {.frameworks = kMegatronOnly, .advanced = true, .default_note = "the model's"}),
    row("moe_router_topk_scaling_factor", kRouter, real<WORKLOAD(megatron.router.topk_scaling_factor)>(),
        "megatron: scales the top-k probs (saves nothing more; read for completeness)", "2.5",
        {.frameworks = kMegatronOnly, .advanced = true, .default_note = "the model's"}),
    row("moe_router_load_balancing_type", kRouter,
        named<WORKLOAD(megatron.router.load_balancing), kMoeLoadBalancingNames>(), "megatron: which aux loss (or sinkhorn routing, none)",
        "seq_aux_loss", {.frameworks = kMegatronOnly, .advanced = true, .default_note = "the model's"}),
    row("moe_aux_loss_coeff", kRouter, real<WORKLOAD(megatron.router.aux_loss_coeff)>(),
        "megatron: the aux-loss coefficient; 0 skips the aux loss", "0",
        {.frameworks = kMegatronOnly, .advanced = true, .default_note = "a nonzero one"}),
    row("moe_z_loss_coeff", kRouter, real<WORKLOAD(megatron.router.z_loss_coeff)>(),
        "megatron: the router z-loss coefficient (0: none)", "0.001", {.frameworks = kMegatronOnly, .advanced = true}),
    row("moe_router_dtype", kRouter, named<WORKLOAD(megatron.router.dtype), kMoeRouterDtypeNames>(),
        "megatron: the router logits' and probs' dtype", "fp32",
        {.frameworks = kMegatronOnly, .advanced = true, .default_note = "the input dtype"}),
};

#undef WORKLOAD
#undef LAYOUT
#undef WORKLOAD_FIELD
#undef LAYOUT_FIELD

}  // namespace

Expected<int64_t> option_count(std::string_view name, const OptionValue& v) {
  if (const auto* n = std::get_if<int64_t>(&v)) return *n;
  return wrong_kind(name, "a whole number", v);
}

Expected<double> option_real(std::string_view name, const OptionValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* n = std::get_if<int64_t>(&v)) return static_cast<double>(*n);
  return wrong_kind(name, "a number", v);
}

Expected<bool> option_flag(std::string_view name, const OptionValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return wrong_kind(name, "true or false", v);
}

Expected<std::string> option_text(std::string_view name, const OptionValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return wrong_kind(name, "text in quotes", v);
}

std::span<const OptionSpec> training_options() { return kSpecs; }

const OptionSpec* find_training_option(std::string_view name) {
  for (const auto& spec : kSpecs)
    if (spec.name == name) return &spec;
  return nullptr;
}

Expected<void> set_training_option(TrainingSettings& settings, std::string_view name, const OptionValue& value) {
  if (const auto* spec = find_training_option(name)) return spec->set(settings, name, value);
  std::vector<std::string_view> names;
  for (const auto& spec : kSpecs) names.push_back(spec.name);
  auto guess = closest_name(name, names);
  return Error{ErrorKind::kUnknownName, std::string(name),
               fmt::format("unknown option @{}{}", name, guess ? fmt::format("; did you mean @{}?", *guess) : "")};
}

std::optional<OptionValue> get_training_option(const TrainingSettings& settings, std::string_view name) {
  const auto* spec = find_training_option(name);
  if (!spec) return std::nullopt;
  return spec->get(settings.workload, settings.layout);
}

std::string option_default_text(const OptionSpec& spec, const TrainingSettings& defaults) {
  if (!spec.default_note.empty()) return std::string(spec.default_note);
  const auto value = spec.get(defaults.workload, defaults.layout);
  if (!value) return "unset";
  if (const auto* text = std::get_if<std::string>(&*value)) return *text;
  if (const auto* on = std::get_if<bool>(&*value)) return *on ? "on" : "off";
  return describe_option_value(*value);
}

std::string option_choices(const OptionSpec& spec) { return spec.choices ? spec.choices() : std::string(); }

}  // namespace actmem
