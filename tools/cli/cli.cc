#include "cli.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "actmem/actmem.h"
#include "serve_cli.h"

namespace actmem::cli {

namespace {

constexpr const char* kDefaultModel = "llama-3-70b";  // the seed card's 70B at 8k

/// Raw flag values, parsed into library options by to_training_options().
struct TrainingFlags {
  std::string model = kDefaultModel;
  std::string params;  // "7.5e9": a parameter-count-only model
  int64_t seq_len = kDefaultSeqLen;
  int64_t micro_batch = 1;
  std::string dtype = "bf16";
  std::string framework = "hf";
  std::string hf_version = "5";
  std::string experts_impl = "grouped_mm";
  std::string transformer_impl;   // --framework megatron (megatron_options.h); empty = local
  std::string fp8;                // empty = none
  std::string fp8_gpu;            // empty = hopper
  bool disable_parameter_transpose_cache = false;
  bool activation_func_fp8_input_store = false;
  bool no_rope_fusion = false;
  std::string recompute_modules;  // empty = core_attn
  std::string moe_token_dispatcher;  // empty = allgather
  // Megatron TopKRouter (empty / unset = the model's): policies/megatron_options.h MoeRouterOptions
  std::string moe_router_score_function, moe_router_load_balancing_type, moe_router_dtype;
  bool moe_router_enable_expert_bias = false;
  std::optional<int64_t> moe_router_num_groups, moe_router_group_topk;
  std::optional<double> moe_router_topk_scaling_factor, moe_aux_loss_coeff, moe_z_loss_coeff;
  std::string attention = "flash";
  std::string recompute = "none";
  int64_t recompute_layers = -1;
  int64_t checkpoint_every = 0;
  std::string selective_ac_option = "op";
  std::optional<double> hidden_dropout;
  std::optional<double> attention_dropout;
  std::string weight_dtype = "bf16";
  std::string grad_dtype;  // default: the weight dtype
  std::string optimizer = "adamw";
  int zero = 0;
  bool offload_optimizer = false;
  // Fine-tuning (README "Fine-tuning"): precision, the step in backward, LoRA / QLoRA.
  std::string precision = "mixed";
  bool optimizer_in_backward = false;
  int64_t lora_rank = 0;
  std::string lora_targets;  // default: q,v (PEFT's and torchtune's default for Llama)
  std::optional<double> lora_dropout;
  std::string base_weight_dtype = "bf16";
  bool double_quant = false;
  std::string adapter_dtype = "fp32";
  std::string loss;  // memory switches (README "Memory switches"); empty = full
  bool offload_activations = false;
  std::optional<int64_t> cpu_offloading_num_layers;
  bool freeze_embeddings = false;
  std::optional<int64_t> frozen_layers;
  std::optional<int64_t> packed_docs;
  std::optional<int64_t> grad_accum;
  std::string head;  // encoders: mlm, classifier[:N] or none (default: the config's architectures)
  ParallelLayout parallel;
  std::string reserve = "0";
  bool json = false;
  FitFlags fit;  // --gpu / --gpu-memory: the fit verdict (plan_cli.h)
  std::string from;                           // a training config (Megatron-LM launch script)
  const CLI::Option* model_option = nullptr;  // to tell an explicit --model from the default
  const CLI::App* command = nullptr;          // with --from, only the flags given override the file
};

void add_training_flags(CLI::App* cmd, TrainingFlags& f) {
  f.model_option =
      cmd->add_option("--model", f.model, "config.json path or preset name (actmem models)")->capture_default_str();
  cmd->add_option("--params", f.params, "parameter count only, e.g. 7.5e9 (static memory, no activations)");
  cmd->add_option("--seq-len", f.seq_len, "sequence length s")->capture_default_str();
  cmd->add_option("--micro-batch", f.micro_batch, "micro-batch size b")->capture_default_str();
  cmd->add_option("--dtype", f.dtype, "activation dtype: bf16, fp16, fp32")->capture_default_str();
  cmd->add_option("--framework", f.framework, "save rules: hf (transformers eager), megatron or torchtitan")->capture_default_str();
  cmd->add_option("--hf-version", f.hf_version, "with --framework hf: transformers code layout, 5, 4.57 or 4.44")
      ->capture_default_str();
  cmd->add_option("--experts-impl", f.experts_impl,
                  "with --hf-version 5: MoE experts: grouped_mm, eager or batched_mm")
      ->capture_default_str();
  cmd->add_option("--transformer-impl", f.transformer_impl,
                  "with --framework megatron: local (default) or transformer_engine (TE)");
  cmd->add_option("--fp8", f.fp8,
                  "TE fp8 recipe: delayed, tensorwise, mxfp8 or blockwise");
  cmd->add_option("--fp8-gpu", f.fp8_gpu, "with --fp8: hopper (default) or blackwell (TE's fp8 weight copies)");
  cmd->add_flag("--disable-parameter-transpose-cache", f.disable_parameter_transpose_cache,
                "with --fp8: weight copies saved per micro-batch");
  cmd->add_flag("--activation-func-fp8-input-store", f.activation_func_fp8_input_store,
                "with --fp8: keep the SwiGLU input in fp8 (Megatron's flag)");
  cmd->add_flag("--no-rope-fusion", f.no_rope_fusion,
                "megatron, MLA models: unfused RoPE (cos/sin per call)");
  cmd->add_option("--recompute-modules", f.recompute_modules,
                  "megatron, --recompute selective: core_attn (default), layernorm, mlp,\n"
                  "moe_act, moe, shared_experts, mla_up_proj");
  cmd->add_option("--moe-token-dispatcher", f.moe_token_dispatcher,
                  "with --framework megatron: allgather (default) or alltoall");
  cmd->add_option("--moe-router-score-function", f.moe_router_score_function,
                  "with --framework megatron: softmax or sigmoid (default: the model's)");
  cmd->add_flag("--moe-router-enable-expert-bias", f.moe_router_enable_expert_bias,
                "with --framework megatron: the router's expert bias");
  cmd->add_option("--moe-router-num-groups", f.moe_router_num_groups, "with --framework megatron: expert groups");
  cmd->add_option("--moe-router-group-topk", f.moe_router_group_topk, "with --framework megatron: groups kept");
  cmd->add_option("--moe-router-topk-scaling-factor", f.moe_router_topk_scaling_factor,
                  "with --framework megatron: top-k prob scaling (saves nothing)");
  cmd->add_option("--moe-router-load-balancing-type", f.moe_router_load_balancing_type,
                  "megatron: aux_loss, seq_aux_loss, global_aux_loss or none");
  cmd->add_option("--moe-aux-loss-coeff", f.moe_aux_loss_coeff, "with --framework megatron: 0 skips the aux loss");
  cmd->add_option("--moe-z-loss-coeff", f.moe_z_loss_coeff, "with --framework megatron: router z-loss");
  cmd->add_option("--moe-router-dtype", f.moe_router_dtype, "with --framework megatron: fp32 or fp64");
  cmd->add_option("--attention", f.attention, "eager, sdpa or flash")->capture_default_str();
  cmd->add_option("--recompute", f.recompute, "none, selective or full")->capture_default_str();
  cmd->add_option("--recompute-layers", f.recompute_layers, "with --recompute full: recompute only N layers per stage");
  cmd->add_option("--checkpoint-every", f.checkpoint_every, "with --recompute full: keep a checkpoint every k layers");
  cmd->add_option("--selective-ac-option", f.selective_ac_option,
                  "torchtitan, --recompute selective: op (per-op SAC) or N (N-th blocks)")
      ->capture_default_str();
  cmd->add_option("--hidden-dropout", f.hidden_dropout, "hidden dropout p (default: from config.json)");
  cmd->add_option("--attention-dropout", f.attention_dropout, "attention dropout p (default: from config.json)");
  cmd->add_option("--weight-dtype", f.weight_dtype, "bf16, fp16 or fp32")->capture_default_str();
  cmd->add_option("--grad-dtype", f.grad_dtype, "gradient dtype: bf16/fp16 or fp32 accumulation (default: weights')");
  cmd->add_option("--optimizer", f.optimizer, "adamw, adamw-8bit or sgd")->capture_default_str();
  cmd->add_option("--zero", f.zero, "ZeRO stage 0-3 over --dp (FSDP full shard = 3)")->capture_default_str();
  cmd->add_flag("--offload-optimizer", f.offload_optimizer, "optimizer state and fp32 master in CPU memory");
  cmd->add_option("--precision", f.precision, "mixed (fp32 master + fp32 state) or pure (no master; weight dtype)")
      ->capture_default_str();
  cmd->add_flag("--optimizer-in-backward", f.optimizer_in_backward, "step each parameter in backward, freeing its gradient");
  cmd->add_option("--lora-rank", f.lora_rank, "LoRA rank r (0 = full fine-tuning)")->capture_default_str();
  cmd->add_option("--lora-targets", f.lora_targets, "LoRA layers: subset of q,k,v,o,gate,up,down or all (default q,v)");
  cmd->add_option("--lora-dropout", f.lora_dropout, "LoRA dropout p");
  cmd->add_option("--base-weight-dtype", f.base_weight_dtype, "frozen LoRA base: bf16, fp16, fp32, int8 or nf4")
      ->capture_default_str();
  cmd->add_flag("--double-quant", f.double_quant, "nf4 with 8-bit block scales (bnb_4bit_use_double_quant)");
  cmd->add_option("--adapter-dtype", f.adapter_dtype, "LoRA adapter dtype (PEFT: fp32, torchtune: bf16)")
      ->capture_default_str();
  cmd->add_flag("--freeze-embeddings", f.freeze_embeddings, "the input embedding (and a tied LM head) frozen");
  cmd->add_option("--frozen-layers", f.frozen_layers, "the first N decoder layers frozen (requires_grad False)");
  cmd->add_option("--packed-docs", f.packed_docs,
                  "hf: N documents packed in each row of --seq-len tokens (padding-free)");
  cmd->add_option("--grad-accum", f.grad_accum, "gradient accumulation: micro-batches per optimizer step (no pipeline)");
  cmd->add_option("--head", f.head, "bert/roberta head: mlm, classifier[:N], none (default: architectures)");
  cmd->add_flag("--offload-activations", f.offload_activations,
                "saved activations in CPU memory (torchtune activation offloading)");
  cmd->add_option("--cpu-offloading-num-layers", f.cpu_offloading_num_layers,
                  "megatron: first N layers' activations in CPU memory");
  cmd->add_option("--loss", f.loss, "full (default), chunked[:N] (torchtune, N=8), fused-linear-ce (Liger)");
  cmd->add_option("--dp", f.parallel.dp, "data-parallel size")->capture_default_str();
  cmd->add_option("--tp", f.parallel.tp, "tensor-parallel size")->capture_default_str();
  cmd->add_flag("--sp", f.parallel.sp, "sequence parallelism (with --tp)");
  cmd->add_option("--pp", f.parallel.pp, "pipeline-parallel size")->capture_default_str();
  cmd->add_option("--vpp", f.parallel.vpp, "virtual stages per rank (interleaved 1F1B)")->capture_default_str();
  cmd->add_option("--cp", f.parallel.cp, "context-parallel size")->capture_default_str();
  cmd->add_option("--ep", f.parallel.ep, "expert-parallel size")->capture_default_str();
  cmd->add_option("--num-micro-batches", f.parallel.num_micro_batches, "micro-batches per pipeline flush");
  cmd->add_option("--first-stage-layers", f.parallel.first_stage_layers,
                  "uneven pipeline: layers on the first stage\n(Megatron's --decoder-first-pipeline-num-layers)");
  cmd->add_option("--last-stage-layers", f.parallel.last_stage_layers,
                  "uneven pipeline: layers on the last stage\n(Megatron's --decoder-last-pipeline-num-layers)");
  cmd->add_option("--reserve", f.reserve, "CUDA context + allocator slack allowance, e.g. 2GiB")->capture_default_str();
  cmd->add_flag("--json", f.json, "machine-readable output");
  add_fit_flags(cmd, f.fit);
  cmd->add_option("--from", f.from, "a training config to read: a Megatron-LM launch script or argument\n"
                  "line, a DeepSpeed JSON, a torchtitan TOML, an axolotl or LLaMA-Factory\nYAML");
  f.command = cmd;
}

Expected<int64_t> parse_count(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 1 || v > 1e15 || v != std::floor(v))
    return Error{fmt::format("{} '{}': expected a positive whole count like 7.5e9", flag, text)};
  return static_cast<int64_t>(v);
}

int fail(const Error& e) {
  fmt::print(stderr, "actmem: {}\n", render_message(e.message, flag_of));
  return 2;
}

using TrainingInputs = TrainingSettings;

/// The flags, by name, through the library's option table (option_table.h), which the Python module
/// shares. Text options go first, in the order their errors were always reported.
Expected<TrainingInputs> to_inputs(const TrainingFlags& f, TrainingInputs in = {}) {
  std::vector<std::pair<std::string_view, OptionValue>> named = {
      {"dtype", f.dtype}, {"weight_dtype", f.weight_dtype}};
  if (!f.grad_dtype.empty()) named.emplace_back("grad_dtype", f.grad_dtype);
  named.insert(named.end(), {{"framework", f.framework},
                             {"hf_version", f.hf_version},
                             {"experts_impl", f.experts_impl},
                             {"attention", f.attention},
                             {"recompute", f.recompute},
                             {"optimizer", f.optimizer},
                             {"reserve", f.reserve},
                             {"seq_len", f.seq_len},
                             {"micro_batch", f.micro_batch},
                             {"recompute_layers", f.recompute_layers},
                             {"checkpoint_every", f.checkpoint_every},
                             {"selective_ac_option", f.selective_ac_option},
                             {"zero", int64_t{f.zero}},
                             {"offload_optimizer", f.offload_optimizer},
                             {"dp", f.parallel.dp},
                             {"tp", f.parallel.tp},
                             {"sp", f.parallel.sp},
                             {"pp", f.parallel.pp},
                             {"vpp", f.parallel.vpp},
                             {"cp", f.parallel.cp},
                             {"ep", f.parallel.ep},
                             {"num_micro_batches", f.parallel.num_micro_batches},
                             {"first_stage_layers", f.parallel.first_stage_layers},
                             {"last_stage_layers", f.parallel.last_stage_layers}});
  named.insert(named.end(), {{"precision", f.precision},
                             {"optimizer_in_backward", f.optimizer_in_backward},
                             {"lora_rank", f.lora_rank},
                             {"base_weight_dtype", f.base_weight_dtype},
                             {"double_quant", f.double_quant},
                             {"adapter_dtype", f.adapter_dtype}});
  if (!f.lora_targets.empty()) named.emplace_back("lora_targets", f.lora_targets);
  if (!f.transformer_impl.empty()) named.emplace_back("transformer_impl", f.transformer_impl);
  if (!f.fp8.empty()) named.emplace_back("fp8", f.fp8);
  if (!f.fp8_gpu.empty()) named.emplace_back("fp8_gpu", f.fp8_gpu);
  if (f.disable_parameter_transpose_cache)
    named.emplace_back("disable_parameter_transpose_cache", f.disable_parameter_transpose_cache);
  if (f.activation_func_fp8_input_store)
    named.emplace_back("activation_func_fp8_input_store", f.activation_func_fp8_input_store);
  if (!f.recompute_modules.empty()) named.emplace_back("recompute_modules", f.recompute_modules);
  if (f.no_rope_fusion) named.emplace_back("no_rope_fusion", f.no_rope_fusion);
  if (!f.moe_token_dispatcher.empty()) named.emplace_back("moe_token_dispatcher", f.moe_token_dispatcher);
  if (!f.moe_router_score_function.empty())
    named.emplace_back("moe_router_score_function", f.moe_router_score_function);
  if (f.moe_router_enable_expert_bias) named.emplace_back("moe_router_enable_expert_bias", true);
  if (f.moe_router_num_groups) named.emplace_back("moe_router_num_groups", *f.moe_router_num_groups);
  if (f.moe_router_group_topk) named.emplace_back("moe_router_group_topk", *f.moe_router_group_topk);
  if (f.moe_router_topk_scaling_factor)
    named.emplace_back("moe_router_topk_scaling_factor", *f.moe_router_topk_scaling_factor);
  if (!f.moe_router_load_balancing_type.empty())
    named.emplace_back("moe_router_load_balancing_type", f.moe_router_load_balancing_type);
  if (f.moe_aux_loss_coeff) named.emplace_back("moe_aux_loss_coeff", *f.moe_aux_loss_coeff);
  if (f.moe_z_loss_coeff) named.emplace_back("moe_z_loss_coeff", *f.moe_z_loss_coeff);
  if (!f.moe_router_dtype.empty()) named.emplace_back("moe_router_dtype", f.moe_router_dtype);
  if (f.lora_dropout) named.emplace_back("lora_dropout", *f.lora_dropout);
  if (!f.loss.empty()) named.emplace_back("loss", f.loss);
  if (!f.head.empty()) named.emplace_back("head", f.head);
  if (f.offload_activations) named.emplace_back("offload_activations", f.offload_activations);
  if (f.cpu_offloading_num_layers) named.emplace_back("cpu_offloading_num_layers", *f.cpu_offloading_num_layers);
  if (f.freeze_embeddings) named.emplace_back("freeze_embeddings", f.freeze_embeddings);
  if (f.frozen_layers) named.emplace_back("frozen_layers", *f.frozen_layers);
  if (f.packed_docs) named.emplace_back("packed_docs", *f.packed_docs);
  if (f.grad_accum) named.emplace_back("grad_accum", *f.grad_accum);
  if (f.hidden_dropout) named.emplace_back("hidden_dropout", *f.hidden_dropout);
  if (f.attention_dropout) named.emplace_back("attention_dropout", *f.attention_dropout);
  for (const auto& [name, value] : named) {
    if (!f.from.empty() && f.command->get_option(flag_of(std::string(name)))->count() == 0)
      continue;  // the config file's value (or the default) stands
    if (auto ok = set_training_option(in, name, value); !ok) return ok.error();
  }
  return in;
}

enum class TrainingOutput { kTable, kExplain };

/// The flags' model prepared for their workload (--params or --model).
Expected<PreparedModel> prepare_flags(const TrainingFlags& f, const Workload& workload,
                                      const std::optional<ModelSpec>& from_config = std::nullopt) {
  if (!f.params.empty()) {
    if (f.model_option && f.model_option->count() > 0)
      return Error{"--params and --model both describe the model; give one (--params for static memory only, "
                   "--model for everything)"};
    auto n = parse_count("--params", f.params);
    if (!n) return n.error();
    return prepare_params_only(*n, workload);
  }
  if (from_config && f.model_option->count() == 0) return prepare(*from_config, workload);
  auto loaded = load_model(f.model);
  if (!loaded) return loaded.error();
  loaded->name = f.model;
  return prepare(*loaded, workload);
}

/// A flag given beside --from overrides the file (to_inputs sets it on top): the echo (stderr and the
/// JSON `config.settings`) shows the value computed with, says it came from the command line, and
/// keeps what the file said. A value is typed by its option's kind, as the flag would have set it.
void mark_overrides(const TrainingFlags& f, TrainingConfig& config) {
  std::vector<ConfigSetting> kept;
  for (auto& s : config.settings) {
    const std::string flag = flag_of(s.option);
    const CLI::Option* opt = f.command->get_option_no_throw(flag);
    if (opt == nullptr || opt->count() == 0) {
      kept.push_back(std::move(s));
      continue;
    }
    const std::string over = fmt::format("{} <- {}", describe_option_value(s.value), s.source);
    auto earlier = std::find_if(kept.begin(), kept.end(), [&](const ConfigSetting& k) { return k.option == s.option; });
    if (earlier != kept.end() && earlier->source.rfind("the command line", 0) == 0) {
      earlier->source += "; over " + over;  // the file set it twice (gradient_checkpointing, then fsdp_config)
      continue;
    }
    const auto results = opt->results();
    const std::string given = results.empty() ? std::string() : results.back();
    OptionKind kind = OptionKind::kText;
    for (const auto& info : training_options())
      if (info.name == s.option) kind = info.kind;
    OptionValue value = given;
    char* end = nullptr;
    if (kind == OptionKind::kFlag) {
      value = given != "false" && given != "0";
    } else if (kind == OptionKind::kCount) {
      const long long n = std::strtoll(given.c_str(), &end, 10);
      if (!given.empty() && *end == '\0') value = int64_t{n};
    } else if (kind == OptionKind::kReal) {
      const double d = std::strtod(given.c_str(), &end);
      if (!given.empty() && *end == '\0') value = d;
    }
    s.value = std::move(value);
    s.source = fmt::format("the command line ({}{}), over {}", flag, kind == OptionKind::kFlag ? "" : " " + given, over);
    kept.push_back(std::move(s));
  }
  config.settings = std::move(kept);
}

/// --from FILE: the file's settings, echoed on stderr with where each came from, and its warnings.
Expected<TrainingConfig> read_from(const TrainingFlags& f, TrainingInputs& base) {
  auto config = load_training_config(f.from);
  if (!config) return config.error();
  if (auto ok = apply_training_config(*config, base); !ok) return ok.error();
  mark_overrides(f, *config);
  fmt::print(stderr, "actmem: read from {} ({}):\n", f.from, config->format);
  for (const auto& s : config->settings)
    fmt::print(stderr, "  {} {}  <- {}\n", flag_of(s.option), describe_option_value(s.value), s.source);
  for (const auto& m : config->model_from) fmt::print(stderr, "  model: {}\n", m);
  for (const auto& w : config->warnings) fmt::print(stderr, "actmem: warning: {}\n", w);
  return config;
}

int run_training(const TrainingFlags& f, TrainingOutput output) {
  TrainingInputs base;
  std::optional<TrainingConfig> config;
  if (!f.from.empty()) {
    auto read = read_from(f, base);
    if (!read) return fail(read.error());
    config = std::move(*read);
    const bool model_given = f.model_option->count() > 0 || !f.params.empty();
    if (!config->model && !model_given)
      return fail(Error{fmt::format("{} does not describe the model ({}); add --model PRESET|config.json", f.from,
                                    config->model_from.empty() ? "no --num-layers/--hidden-size"
                                                               : config->model_from.back())});
    if (config->model && model_given)
      fmt::print(stderr, "actmem: warning: the model comes from --model/--params; the architecture in {} is not used\n",
                 f.from);
  }
  auto inputs = to_inputs(f, base);
  if (!inputs) return fail(inputs.error());
  if (auto ok = check_options(inputs->workload, inputs->layout); !ok) return fail(ok.error());
  auto prepared = prepare_flags(f, inputs->workload, config ? config->model : std::nullopt);
  if (!prepared) return fail(prepared.error());
  auto report = explain(*prepared, inputs->layout);
  if (!report) return fail(report.error());
  // A Megatron-LM job: Megatron's own theoretical memory report beside actmem's (megatron_theory.h).
  const std::vector<std::string> comparison = config ? megatron_theory_lines(*config, *report) : std::vector<std::string>{};
  if (f.fit.given()) {  // the fit verdict, only when a GPU is given (the outputs without one stay as they were)
    nlohmann::json extra = nlohmann::json::object();
    if (config) extra["config"] = training_config_json(*config);
    if (!comparison.empty()) extra["megatron_theory"] = megatron_theory_json(*config, *report);
    const int code = print_with_fit(*prepared, *report, f.fit, f.json,
                                    f.json ? std::string()
                                    : output == TrainingOutput::kExplain ? render_explain(*report)
                                                                         : render_table(*report),
                                    extra);
    if (code == 0 && !f.json && !comparison.empty()) fmt::print("\n{}\n", fmt::join(comparison, "\n"));
    return code;
  }
  if (f.json) {
    auto j = report_json(*report);
    if (config) j["config"] = training_config_json(*config);  // a file's bytes need not be UTF-8: replace
    if (!comparison.empty()) j["megatron_theory"] = megatron_theory_json(*config, *report);
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (output == TrainingOutput::kExplain) {
    fmt::print("{}", render_explain(*report));
  } else {
    fmt::print("{}", render_table(*report));
  }
  if (!f.json && !comparison.empty()) fmt::print("\n{}\n", fmt::join(comparison, "\n"));
  return 0;
}

using Runner = std::function<int()>;

Runner add_estimate(CLI::App& app) {
  auto flags = std::make_shared<TrainingFlags>();
  auto* cmd = app.add_subcommand("estimate", "Peak training memory per GPU: static + activations + transients");
  add_training_flags(cmd, *flags);
  return [flags] { return run_training(*flags, TrainingOutput::kTable); };
}

Runner add_explain(CLI::App& app) {
  auto flags = std::make_shared<TrainingFlags>();
  auto* cmd = app.add_subcommand("explain", "The estimate's derivation, term by term: formula = values = bytes");
  add_training_flags(cmd, *flags);
  return [flags] { return run_training(*flags, TrainingOutput::kExplain); };
}

Runner add_models(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("models", "List the built-in model presets");
  cmd->add_flag("--json", *json, "machine-readable output");
  return [json] {
    if (*json) {
      auto arr = nlohmann::json::array();
      for (const auto& p : list_presets())
        arr.push_back({{"name", p.name}, {"description", p.description}, {"source", p.source}});
      fmt::print("{}\n", arr.dump(2));
      return 0;
    }
    TextTable t;
    for (const auto& p : list_presets()) t.add_row({{std::string(p.name)}, {std::string(p.description)}});
    fmt::print("{}", t.render(""));
    return 0;
  };
}

// The subcommand table (ninja style): name → registration.
struct Command {
  const char* name;
  Runner (*add)(CLI::App&);
};
const Command kCommands[] = {
    {"estimate", add_estimate},
    {"explain", add_explain},
    {"models", add_models},
    {"plan", add_plan_command},
    {"serve", add_serve_command},
};

}  // namespace

std::string flag_of(const std::string& field) {
  if (field == "zero_stage") return "--zero";
  std::string flag = "--" + field;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

int report_error(const Error& e) { return fail(e); }

Expected<EstimateArgs> parse_estimate_args(const std::string& args) {
  CLI::App app{"estimate flags"};
  TrainingFlags f;
  add_training_flags(&app, f);
  try {
    app.parse(args, false);
  } catch (const CLI::ParseError& e) {
    return Error{fmt::format("--from: {}", e.what())};
  }
  auto inputs = to_inputs(f);
  if (!inputs) return inputs.error();
  if (auto ok = check_options(inputs->workload, inputs->layout); !ok) return ok.error();
  auto prepared = prepare_flags(f, inputs->workload);
  if (!prepared) return prepared.error();
  return EstimateArgs{*prepared, inputs->layout, f.fit};
}

int run(int argc, char** argv) {
  CLI::App app{"actmem: GPU memory of transformer training and serving, tensor by tensor"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "actmem 0.1.0");
  std::vector<std::pair<CLI::App*, Runner>> runners;
  std::vector<std::string_view> names;
  for (const auto& c : kCommands) {
    Runner r = c.add(app);
    runners.emplace_back(app.get_subcommand(c.name), std::move(r));
    names.emplace_back(c.name);
  }
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    bool known = false;
    for (const auto& n : names) known = known || n == word;
    if (!known) {
      auto guess = closest_name(word, names);
      fmt::print(stderr, "actmem: unknown command '{}'{}; commands: {}\n", word,
                 guess ? fmt::format("; did you mean '{}'?", *guess) : "", fmt::join(names, ", "));
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    fmt::print(stderr, "actmem: {}\n", e.what());
    return 2;
  }
  for (auto& [sub, runner] : runners)
    if (sub->parsed()) return runner();
  return 2;
}

}  // namespace actmem::cli
