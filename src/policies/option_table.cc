#include "policies/option_table.h"

#include <array>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "policies/finetune.h"  // parse_lora_targets, kLoraQ
#include "policies/loss_impl.h"  // parse_loss
#include "util/spellcheck.h"

namespace actmem {

namespace {

Error wrong_kind(std::string_view name, std::string_view expected, const OptionValue& value) {
  return Error{ErrorKind::kInvalid, std::string(name),
               fmt::format("@{} {}: expected {}", name, describe_option_value(value), expected)};
}

constexpr auto as_count = option_count;
constexpr auto as_real = option_real;
constexpr auto as_flag = option_flag;
constexpr auto as_text = option_text;

/// A dtype option, with the CLI's message ("--dtype: unknown dtype ...").
Expected<DType> as_dtype(std::string_view name, const OptionValue& v) {
  auto text = as_text(name, v);
  if (!text) return text.error();
  auto d = parse_dtype(*text);
  if (!d) return Error{ErrorKind::kUnknownName, std::string(name), fmt::format("@{}: {}", name, d.error().message)};
  return *d;
}

/// An enum option through its name table (options.h): the table's own message.
template <typename E, std::size_t N>
Expected<E> as_name(const NameTable<E, N>& table, std::string_view name, const OptionValue& v) {
  auto text = as_text(name, v);
  if (!text) return text.error();
  return table.parse(*text);
}

using Setter = Expected<void> (*)(TrainingSettings&, std::string_view, const OptionValue&);

struct Row {
  OptionInfo info;
  Setter set;
};

// Sets `field` from a converted value; the converter's error passes through.
#define ACTMEM_SET(convert, field)                                                     \
  [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> { \
    auto x = convert(n, v);                                                            \
    if (!x) return x.error();                                                          \
    s.field = *x;                                                                      \
    return {};                                                                         \
  }
#define ACTMEM_SET_NAME(table, field)                                                  \
  [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> { \
    auto x = as_name(table, n, v);                                                     \
    if (!x) return x.error();                                                          \
    s.field = *x;                                                                      \
    return {};                                                                         \
  }

const std::array kRows{
    Row{{"seq_len", OptionKind::kCount, "sequence length s"}, ACTMEM_SET(as_count, layout.seq_len)},
    Row{{"micro_batch", OptionKind::kCount, "micro-batch size b"}, ACTMEM_SET(as_count, layout.micro_batch)},
    Row{{"dtype", OptionKind::kText, "activation dtype: bf16, fp16, fp32"}, ACTMEM_SET(as_dtype, workload.dtype)},
    Row{{"framework", OptionKind::kText, "save rules: hf (transformers eager), megatron or torchtitan (its Llama 3 + FSDP2)"},
        ACTMEM_SET_NAME(kFrameworkNames, workload.framework)},
    Row{{"hf_version", OptionKind::kText, "transformers code layout for --framework hf: 5, 4.57 or 4.44"},
        ACTMEM_SET_NAME(kHfVersionNames, workload.hf_version)},
    Row{{"transformer_impl", OptionKind::kText,
         "with --framework megatron: local (default) or transformer_engine (Megatron-LM's --transformer-impl)"},
        ACTMEM_SET_NAME(kTransformerImplNames, workload.megatron.impl)},
    Row{{"fp8", OptionKind::kText,
         "with --transformer-impl transformer_engine: none, delayed, tensorwise, mxfp8 or blockwise (Megatron's "
         "--fp8-recipe)"},
        ACTMEM_SET_NAME(kFp8RecipeNames, workload.megatron.fp8)},
    Row{{"fp8_gpu", OptionKind::kText,
         "with --fp8: hopper (default) or blackwell: whether TE's per-tensor fp8 weight copies keep a separate "
         "transpose"},
        ACTMEM_SET_NAME(kFp8GpuNames, workload.megatron.fp8_gpu)},
    Row{{"disable_parameter_transpose_cache", OptionKind::kFlag,
         "with --fp8 delayed|tensorwise: TE quantizes the weights each micro-batch and saves the copies for "
         "backward instead of caching them (Megatron's flag)"},
        ACTMEM_SET(as_flag, workload.megatron.no_transpose_cache)},
    Row{{"activation_func_fp8_input_store", OptionKind::kFlag, "with --fp8: the SwiGLU input kept in fp8 (e4m3)"},
        ACTMEM_SET(as_flag, workload.megatron.fp8_act_input_store)},
    Row{{"no_rope_fusion", OptionKind::kFlag,
         "with --framework megatron and an MLA model: Megatron's --no-rope-fusion (the unfused RoPE keeps cos/sin)"},
        ACTMEM_SET(as_flag, workload.megatron.no_rope_fusion)},
    Row{{"recompute_modules", OptionKind::kText,
         "with --framework megatron --recompute selective: core_attn (default), layernorm, mlp, moe_act, moe, "
         "shared_experts, mla_up_proj (comma-separated)"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto text = as_text(n, v);
          if (!text) return text.error();
          auto bits = parse_recompute_modules(*text);
          if (!bits) return bits.error();
          s.workload.megatron.recompute_modules = *bits;
          return {};
        }},
    Row{{"moe_token_dispatcher", OptionKind::kText,
         "with --framework megatron: allgather (default) or alltoall (Megatron's --moe-token-dispatcher-type)"},
        ACTMEM_SET_NAME(kMoeDispatcherNames, workload.megatron.dispatcher)},
    Row{{"moe_router_score_function", OptionKind::kText,
         "with --framework megatron: softmax or sigmoid (default: the model's; DeepSeek-V3 sigmoid)"},
        ACTMEM_SET_NAME(kMoeScoreFunctionNames, workload.megatron.router.score)},
    Row{{"moe_router_enable_expert_bias", OptionKind::kFlag,
         "with --framework megatron: the router's expert bias (default: the model's; DeepSeek-V3 on)"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto x = as_flag(n, v);
          if (!x) return x.error();
          s.workload.megatron.router.expert_bias = *x ? 1 : 0;
          return {};
        }},
    Row{{"moe_router_num_groups", OptionKind::kCount,
         "with --framework megatron: expert groups for group-limited routing (0: none; default: the model's)"},
        ACTMEM_SET(as_count, workload.megatron.router.num_groups)},
    Row{{"moe_router_group_topk", OptionKind::kCount,
         "with --framework megatron: groups kept per token in group-limited routing"},
        ACTMEM_SET(as_count, workload.megatron.router.group_topk)},
    Row{{"moe_router_topk_scaling_factor", OptionKind::kReal,
         "with --framework megatron: scales the top-k probs (saves nothing more; read for completeness)"},
        ACTMEM_SET(as_real, workload.megatron.router.topk_scaling_factor)},
    Row{{"moe_router_load_balancing_type", OptionKind::kText,
         "with --framework megatron: aux_loss, seq_aux_loss, global_aux_loss or none (default: the model's)"},
        ACTMEM_SET_NAME(kMoeLoadBalancingNames, workload.megatron.router.load_balancing)},
    Row{{"moe_aux_loss_coeff", OptionKind::kReal,
         "with --framework megatron: the aux-loss coefficient; 0 skips the aux loss (default: nonzero)"},
        ACTMEM_SET(as_real, workload.megatron.router.aux_loss_coeff)},
    Row{{"moe_z_loss_coeff", OptionKind::kReal, "with --framework megatron: the router z-loss coefficient (0: none)"},
        ACTMEM_SET(as_real, workload.megatron.router.z_loss_coeff)},
    Row{{"moe_router_dtype", OptionKind::kText,
         "with --framework megatron: fp32 or fp64 router logits and probs (default: the input dtype)"},
        ACTMEM_SET_NAME(kMoeRouterDtypeNames, workload.megatron.router.dtype)},
    Row{{"experts_impl", OptionKind::kText, "with hf_version 5: MoE experts as grouped_mm, eager or batched_mm"},
        ACTMEM_SET_NAME(kExpertsImplNames, workload.experts_impl)},
    Row{{"attention", OptionKind::kText, "eager, sdpa or flash"}, ACTMEM_SET_NAME(kAttentionNames, workload.attention)},
    Row{{"recompute", OptionKind::kText, "none, selective or full"}, ACTMEM_SET_NAME(kRecomputeNames, layout.recompute)},
    Row{{"recompute_layers", OptionKind::kCount, "with recompute full: recompute only N layers per stage"},
        ACTMEM_SET(as_count, layout.recompute_layers)},
    Row{{"checkpoint_every", OptionKind::kCount, "with recompute full: keep a checkpoint every k layers"},
        ACTMEM_SET(as_count, layout.checkpoint_every)},
    Row{{"selective_ac_option", OptionKind::kText,
         "with framework torchtitan and recompute selective: op (per-op SAC) or N (every N-th block checkpointed)"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto text = as_text(n, v);
          if (!text) return text.error();
          if (*text == "op") {
            s.layout.selective_ac_every = 0;
            return {};
          }
          int64_t every = 0;
          for (char ch : *text) {
            if (ch < '0' || ch > '9' || every > (int64_t{1} << 40))
              return Error{ErrorKind::kInvalid, std::string(n),
                           fmt::format("@{} '{}': use op or a layer period N >= 1 (torchtitan's selective_ac_option)",
                                       n, *text)};
            every = every * 10 + (ch - '0');
          }
          if (text->empty() || every < 1)
            return Error{ErrorKind::kInvalid, std::string(n),
                         fmt::format("@{} '{}': use op or a layer period N >= 1 (torchtitan's selective_ac_option)", n,
                                     *text)};
          s.layout.selective_ac_every = every;
          return {};
        }},
    Row{{"hidden_dropout", OptionKind::kReal, "hidden dropout p (default: from config.json)"},
        ACTMEM_SET(as_real, workload.hidden_dropout)},
    Row{{"attention_dropout", OptionKind::kReal, "attention dropout p (default: from config.json)"},
        ACTMEM_SET(as_real, workload.attention_dropout)},
    Row{{"weight_dtype", OptionKind::kText, "bf16, fp16 or fp32"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto d = as_dtype(n, v);
          if (!d) return d.error();
          s.workload.weight_dtype = *d;
          if (!s.grad_dtype_set) s.workload.grad_dtype = *d;  // gradients follow the weights by default
          return {};
        }},
    Row{{"grad_dtype", OptionKind::kText, "gradient dtype: bf16/fp16 or fp32 accumulation (default: weights')"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto d = as_dtype(n, v);
          if (!d) return d.error();
          s.workload.grad_dtype = *d;
          s.grad_dtype_set = true;
          return {};
        }},
    Row{{"optimizer", OptionKind::kText, "adamw, adamw-8bit or sgd"}, ACTMEM_SET_NAME(kOptimizerNames, workload.optimizer)},
    Row{{"zero", OptionKind::kCount, "ZeRO stage 0-3 over dp (FSDP full shard = 3)"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto x = as_count(n, v);
          if (!x) return x.error();
          // check_options() owns the range (0..3); this says the same for a value no int holds.
          if (*x < std::numeric_limits<int>::min() || *x > std::numeric_limits<int>::max())
            return Error{ErrorKind::kInvalid, "zero_stage", fmt::format("@zero_stage {} is out of range; use 0..3", *x)};
          s.layout.zero_stage = static_cast<int>(*x);
          return {};
        }},
    Row{{"offload_optimizer", OptionKind::kFlag, "optimizer state and fp32 master in CPU memory"},
        ACTMEM_SET(as_flag, layout.offload_optimizer)},
    Row{{"dp", OptionKind::kCount, "data-parallel size"}, ACTMEM_SET(as_count, layout.parallel.dp)},
    Row{{"tp", OptionKind::kCount, "tensor-parallel size"}, ACTMEM_SET(as_count, layout.parallel.tp)},
    Row{{"sp", OptionKind::kFlag, "sequence parallelism (with tp)"}, ACTMEM_SET(as_flag, layout.parallel.sp)},
    Row{{"pp", OptionKind::kCount, "pipeline-parallel size"}, ACTMEM_SET(as_count, layout.parallel.pp)},
    Row{{"vpp", OptionKind::kCount, "virtual stages per rank (interleaved 1F1B)"}, ACTMEM_SET(as_count, layout.parallel.vpp)},
    Row{{"cp", OptionKind::kCount, "context-parallel size"}, ACTMEM_SET(as_count, layout.parallel.cp)},
    Row{{"ep", OptionKind::kCount, "expert-parallel size"}, ACTMEM_SET(as_count, layout.parallel.ep)},
    Row{{"num_micro_batches", OptionKind::kCount, "micro-batches per pipeline flush"},
        ACTMEM_SET(as_count, layout.parallel.num_micro_batches)},
    Row{{"first_stage_layers", OptionKind::kCount, "uneven pipeline: layers on the first stage"},
        ACTMEM_SET(as_count, layout.parallel.first_stage_layers)},
    Row{{"last_stage_layers", OptionKind::kCount, "uneven pipeline: layers on the last stage"},
        ACTMEM_SET(as_count, layout.parallel.last_stage_layers)},
    // Fine-tuning (finetune.h): precision, the optimizer step in backward, LoRA / QLoRA.
    Row{{"precision", OptionKind::kText, "mixed (fp32 master and state) or pure (all in the weight dtype)"},
        ACTMEM_SET_NAME(kPrecisionNames, workload.precision)},
    Row{{"optimizer_in_backward", OptionKind::kFlag, "each gradient freed after its optimizer step (torchtune)"},
        ACTMEM_SET(as_flag, workload.optimizer_in_backward)},
    Row{{"lora_rank", OptionKind::kCount, "LoRA rank r (0 = full fine-tuning)"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto x = as_count(n, v);
          if (!x) return x.error();
          s.workload.lora.rank = *x;
          if (*x > 0 && s.workload.lora.targets == 0) s.workload.lora.targets = kLoraQ | kLoraV;  // PEFT's default for Llama
          return {};
        }},
    Row{{"lora_targets", OptionKind::kText, "q,k,v,o,gate,up,down or all (default q,v)"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto text = as_text(n, v);
          if (!text) return text.error();
          auto targets = parse_lora_targets(*text);
          if (!targets) return targets.error();
          s.workload.lora.targets = *targets;
          return {};
        }},
    Row{{"lora_dropout", OptionKind::kReal, "LoRA dropout p"}, ACTMEM_SET(as_real, workload.lora.dropout)},
    Row{{"base_weight_dtype", OptionKind::kText, "frozen base: bf16, fp16, fp32, int8 or nf4"},
        ACTMEM_SET_NAME(kBaseWeightNames, workload.lora.base)},
    Row{{"double_quant", OptionKind::kFlag, "nf4: quantize the absmax too (bnb_4bit_use_double_quant)"},
        ACTMEM_SET(as_flag, workload.lora.double_quant)},
    Row{{"adapter_dtype", OptionKind::kText, "LoRA adapter dtype (PEFT default fp32)"},
        ACTMEM_SET(as_dtype, workload.lora.adapter_dtype)},
    // Memory switches (loss_impl.h): how the LM head and the loss run.
    Row{{"loss", OptionKind::kText, "full, chunked[:N] (torchtune) or fused-linear-ce (Liger)"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          auto text = as_text(n, v);
          if (!text) return text.error();
          auto choice = parse_loss(*text);
          if (!choice) return choice.error();
          s.workload.loss = choice->impl;
          s.workload.loss_chunks = choice->chunks;
          return {};
        }},
    Row{{"freeze_embeddings", OptionKind::kFlag, "the input embedding (and a tied LM head) frozen"},
        ACTMEM_SET(as_flag, workload.freeze_embeddings)},
    Row{{"frozen_layers", OptionKind::kCount, "the first N decoder layers frozen (requires_grad False)"},
        ACTMEM_SET(as_count, workload.frozen_layers)},
    Row{{"packed_docs", OptionKind::kCount,
         "framework hf: N documents per row of seq_len tokens, position ids restarting per document (0 = unpacked)"},
        ACTMEM_SET(as_count, workload.packed_docs)},
    Row{{"grad_accum", OptionKind::kCount, "gradient accumulation: micro-batches per optimizer step (no pipeline)"},
        ACTMEM_SET(as_count, layout.grad_accum)},
    Row{{"head", OptionKind::kText, "encoders (bert, roberta): mlm, classifier[:N] or none (default: architectures)"},
        ACTMEM_SET(as_text, workload.head)},
    Row{{"offload_activations", OptionKind::kFlag, "saved activations in CPU memory (torchtune OffloadActivations)"},
        ACTMEM_SET(as_flag, layout.offload_activations)},
    Row{{"cpu_offloading_num_layers", OptionKind::kCount,
         "megatron: the first N layers' saved activations in CPU memory (TE cpu_offload; 0 = off)"},
        ACTMEM_SET(as_count, layout.cpu_offloading_num_layers)},
    Row{{"reserve", OptionKind::kSize, "CUDA context + allocator slack allowance, e.g. 2GiB (or bytes)"},
        [](TrainingSettings& s, std::string_view n, const OptionValue& v) -> Expected<void> {
          if (const auto* bytes = std::get_if<int64_t>(&v)) {
            s.layout.reserve = Bytes{*bytes};
            return {};
          }
          auto text = as_text(n, v);
          if (!text) return wrong_kind(n, "a size like 2GiB or a number of bytes", v);
          if (*text == "0") {
            s.layout.reserve = Bytes{0};
            return {};
          }
          auto size = parse_size(*text);
          if (!size) return Error{ErrorKind::kInvalid, std::string(n), fmt::format("@{}: {}", n, size.error().message)};
          s.layout.reserve = *size;
          return {};
        }},
};

#undef ACTMEM_SET
#undef ACTMEM_SET_NAME

const std::array<OptionInfo, kRows.size()> kInfos = [] {
  std::array<OptionInfo, kRows.size()> infos{};
  for (std::size_t i = 0; i < kRows.size(); ++i) infos[i] = kRows[i].info;
  return infos;
}();

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

std::span<const OptionInfo> training_options() { return kInfos; }

Expected<void> set_training_option(TrainingSettings& settings, std::string_view name, const OptionValue& value) {
  for (const auto& row : kRows)
    if (row.info.name == name) return row.set(settings, name, value);
  std::vector<std::string_view> names;
  for (const auto& row : kRows) names.push_back(row.info.name);
  auto guess = closest_name(name, names);
  return Error{ErrorKind::kUnknownName, std::string(name),
               fmt::format("unknown option @{}{}", name, guess ? fmt::format("; did you mean @{}?", *guess) : "")};
}

std::string describe_option_value(const OptionValue& value) {
  struct Describe {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t n) const { return std::to_string(n); }
    std::string operator()(double d) const {  // 2.0, not 2: a real where a count was due
      std::string text = fmt::format("{}", d);
      if (text.find_first_of(".eni") == std::string::npos) text += ".0";
      return text;
    }
    std::string operator()(const std::string& s) const { return "'" + s + "'"; }
  };
  return std::visit(Describe{}, value);
}

}  // namespace actmem
