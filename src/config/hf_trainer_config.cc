// HF TrainingArguments-style YAML configs, as axolotl and LLaMA-Factory write them -> actmem's
// training options, and a model when the file's model id matches a preset. Read with Debian's
// yaml-cpp (libyaml-cpp-dev). Sources of the keys and defaults:
//   axolotl  src/axolotl/utils/schemas/config.py, loaders/model.py (bnb_4bit_use_double_quant True, l.718)
//            @ 067b021c8b87a9e5e380b9173c704cf7340e30f5;
//   LLaMA-Factory  src/llamafactory/hparams/{model,finetuning,data}_args.py @ 000526908ae92cc1567130559f04a3436855e0cd
//            (gradient checkpointing on unless disable_gradient_checkpointing; double_quantization True;
//            lora_rank 8, lora_target "all");
//   transformers  TrainingArguments (per_device_train_batch_size 8, optim "adamw_torch", OptimizerNames).
// A `deepspeed:` path is read by the DeepSpeed reader (deepspeed_config.cc) and its settings added.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>  // TrainingArguments' JSON form, and a deepspeed dict handed to the DeepSpeed reader
#include <yaml-cpp/yaml.h>  // Debian libyaml-cpp-dev: the YAML parser, with each node's line

#include "config/training_config.h"
#include "config/yaml_values.h"
#include "model/presets.h"
#include "policies/finetune.h"  // kLora* target bits, lora_targets_name()
#include "util/spellcheck.h"

namespace actmem {

namespace {

enum class Use { kRead, kNoEffect, kNotModelled };

struct KeyRule {
  std::string_view key;
  Use use;
  std::string_view why = "";
};

// Top-level keys (both dialects and TrainingArguments share one namespace of names). kNoEffect:
// data, logging, schedules, saving, hub, evaluation. gradient_accumulation_steps is read (--grad-accum:
// the peak is one micro-batch's, plus AccumulateGrad's transient from the second on; grad_accum.h).
constexpr KeyRule kKeys[] = {
    // Model.
    {"base_model", Use::kRead}, {"model_name_or_path", Use::kRead}, {"base_model_config", Use::kNoEffect},
    {"model_type", Use::kNoEffect}, {"tokenizer_type", Use::kNoEffect}, {"tokenizer_config", Use::kNoEffect},
    {"trust_remote_code", Use::kNoEffect}, {"is_llama_derived_model", Use::kNoEffect}, {"hub_model_id", Use::kNoEffect},
    {"template", Use::kNoEffect}, {"chat_template", Use::kNoEffect}, {"special_tokens", Use::kNoEffect},
    {"tokens", Use::kNoEffect}, {"resize_vocab", Use::kNotModelled, "a resized vocabulary"},
    // Method.
    {"stage", Use::kRead}, {"do_train", Use::kNoEffect}, {"finetuning_type", Use::kRead}, {"adapter", Use::kRead},
    {"lora_model_dir", Use::kNoEffect}, {"lora_r", Use::kRead}, {"lora_rank", Use::kRead}, {"lora_alpha", Use::kNoEffect},
    {"lora_dropout", Use::kRead}, {"lora_target_linear", Use::kRead}, {"lora_target_modules", Use::kRead},
    {"lora_target", Use::kRead}, {"lora_fan_in_fan_out", Use::kNoEffect},
    {"lora_modules_to_save", Use::kNotModelled, "modules trained in full beside the adapters (their gradients and "
                                                "optimizer state)"},
    {"additional_target", Use::kNotModelled, "modules trained in full beside the adapters (their gradients and "
                                             "optimizer state)"},
    {"use_dora", Use::kNotModelled, "DoRA's magnitude vectors and weight-norm activations"},
    {"use_rslora", Use::kNoEffect}, {"pissa_init", Use::kNoEffect},
    {"load_in_8bit", Use::kRead}, {"load_in_4bit", Use::kRead}, {"quantization_bit", Use::kRead},
    {"quantization_method", Use::kRead}, {"quantization_type", Use::kRead}, {"double_quantization", Use::kRead},
    {"bnb_4bit_use_double_quant", Use::kRead},
    // Data and logging.
    {"datasets", Use::kNoEffect}, {"dataset", Use::kNoEffect}, {"test_datasets", Use::kNoEffect},
    {"dataset_dir", Use::kNoEffect}, {"dataset_prepared_path", Use::kNoEffect}, {"val_set_size", Use::kNoEffect},
    {"val_size", Use::kNoEffect}, {"max_samples", Use::kNoEffect}, {"overwrite_cache", Use::kNoEffect},
    {"preprocessing_num_workers", Use::kNoEffect}, {"dataloader_num_workers", Use::kNoEffect},
    {"dataset_processes", Use::kNoEffect}, {"shuffle_merged_datasets", Use::kNoEffect},
    {"output_dir", Use::kNoEffect}, {"overwrite_output_dir", Use::kNoEffect}, {"logging_steps", Use::kNoEffect},
    {"save_steps", Use::kNoEffect}, {"saves_per_epoch", Use::kNoEffect}, {"save_only_model", Use::kNoEffect},
    {"save_first_step", Use::kNoEffect}, {"plot_loss", Use::kNoEffect}, {"report_to", Use::kNoEffect},
    {"wandb_project", Use::kNoEffect}, {"wandb_entity", Use::kNoEffect}, {"wandb_watch", Use::kNoEffect},
    {"wandb_name", Use::kNoEffect}, {"wandb_log_model", Use::kNoEffect}, {"run_name", Use::kNoEffect},
    {"resume_from_checkpoint", Use::kNoEffect}, {"ddp_timeout", Use::kNoEffect}, {"seed", Use::kNoEffect},
    {"eval_dataset", Use::kNoEffect}, {"per_device_eval_batch_size", Use::kNoEffect}, {"eval_strategy", Use::kNoEffect},
    {"eval_steps", Use::kNoEffect}, {"evals_per_epoch", Use::kNoEffect}, {"eval_sample_packing", Use::kNoEffect},
    {"early_stopping_patience", Use::kNoEffect}, {"strict", Use::kNoEffect}, {"debug", Use::kNoEffect},
    {"local_rank", Use::kNoEffect},
    // Schedule.
    {"num_epochs", Use::kNoEffect}, {"num_train_epochs", Use::kNoEffect}, {"max_steps", Use::kNoEffect},
    {"learning_rate", Use::kNoEffect}, {"lr_scheduler", Use::kNoEffect}, {"lr_scheduler_type", Use::kNoEffect},
    {"warmup_ratio", Use::kNoEffect}, {"warmup_steps", Use::kNoEffect}, {"weight_decay", Use::kNoEffect},
    {"max_grad_norm", Use::kNoEffect}, {"gradient_accumulation_steps", Use::kRead},
    // Memory.
    {"sequence_len", Use::kRead}, {"cutoff_len", Use::kRead}, {"max_seq_length", Use::kRead},
    {"sample_packing", Use::kNoEffect},  // packed to sequence_len: the same (b, s) shape
    {"pad_to_sequence_len", Use::kNoEffect}, {"packing", Use::kNoEffect}, {"neat_packing", Use::kNoEffect},
    {"micro_batch_size", Use::kRead}, {"per_device_train_batch_size", Use::kRead},
    {"optimizer", Use::kRead}, {"optim", Use::kRead}, {"bf16", Use::kRead}, {"fp16", Use::kRead},
    {"pure_bf16", Use::kRead}, {"tf32", Use::kNoEffect},
    {"bfloat16", Use::kNotModelled, "the model loaded in bf16 without autocast"},
    {"float16", Use::kNotModelled, "the model loaded in fp16 without autocast"},
    {"gradient_checkpointing", Use::kRead}, {"disable_gradient_checkpointing", Use::kRead},
    {"gradient_checkpointing_kwargs", Use::kRead},
    {"attn_implementation", Use::kRead}, {"flash_attention", Use::kRead}, {"sdp_attention", Use::kRead},
    {"flash_attn", Use::kRead}, {"xformers_attention", Use::kRead},
    {"deepspeed", Use::kRead}, {"fsdp", Use::kRead}, {"fsdp_config", Use::kRead},
    {"torch_compile", Use::kNotModelled, "torch.compile's fused kernels save other tensors than eager PyTorch"},
    {"liger_rope", Use::kNotModelled, "Liger's fused kernels"}, {"liger_rms_norm", Use::kNotModelled, "Liger's fused kernels"},
    {"liger_glu_activation", Use::kNotModelled, "Liger's fused kernels"},
    {"liger_fused_linear_cross_entropy", Use::kNotModelled, "Liger's fused loss (no full logits)"},
    {"enable_liger_kernel", Use::kNotModelled, "Liger's fused kernels and loss"},
    {"use_unsloth", Use::kNotModelled, "Unsloth's kernels and offloaded checkpoints"},
    {"use_unsloth_gc", Use::kNotModelled, "Unsloth's offloaded checkpoints"},
    {"upcast_layernorm", Use::kNotModelled, "fp32 layer norms"},
    {"plugins", Use::kNotModelled, "axolotl plugins"},
    // TrainingArguments' own fields as its to_dict() / to_json_string() writes them (transformers
    // training_args.py, 4.2x-4.57; Seq2SeqTrainingArguments' generation fields too): every field is
    // in the dump, most with their defaults.
    {"per_gpu_train_batch_size", Use::kRead}, {"adafactor", Use::kRead},
    {"do_eval", Use::kNoEffect}, {"do_predict", Use::kNoEffect}, {"evaluation_strategy", Use::kNoEffect},
    {"prediction_loss_only", Use::kNoEffect}, {"per_gpu_eval_batch_size", Use::kNoEffect},
    {"eval_accumulation_steps", Use::kNoEffect}, {"eval_delay", Use::kNoEffect},
    {"torch_empty_cache_steps", Use::kNoEffect}, {"adam_beta1", Use::kNoEffect}, {"adam_beta2", Use::kNoEffect},
    {"adam_epsilon", Use::kNoEffect}, {"lr_scheduler_kwargs", Use::kNoEffect}, {"log_level", Use::kNoEffect},
    {"log_level_replica", Use::kNoEffect}, {"log_on_each_node", Use::kNoEffect}, {"logging_dir", Use::kNoEffect},
    {"logging_strategy", Use::kNoEffect}, {"logging_first_step", Use::kNoEffect},
    {"logging_nan_inf_filter", Use::kNoEffect}, {"save_strategy", Use::kNoEffect}, {"save_total_limit", Use::kNoEffect},
    {"save_safetensors", Use::kNoEffect}, {"save_on_each_node", Use::kNoEffect},
    {"restore_callback_states_from_checkpoint", Use::kNoEffect}, {"use_mps_device", Use::kNoEffect},
    {"data_seed", Use::kNoEffect}, {"jit_mode_eval", Use::kNoEffect}, {"use_ipex", Use::kNoEffect},
    {"fp16_opt_level", Use::kNoEffect}, {"half_precision_backend", Use::kNoEffect}, {"bf16_full_eval", Use::kNoEffect},
    {"fp16_full_eval", Use::kNoEffect}, {"ddp_backend", Use::kNoEffect}, {"tpu_num_cores", Use::kNoEffect},
    {"tpu_metrics_debug", Use::kNoEffect}, {"xpu_backend", Use::kNoEffect}, {"dataloader_drop_last", Use::kNoEffect},
    {"dataloader_prefetch_factor", Use::kNoEffect}, {"dataloader_pin_memory", Use::kNoEffect},
    {"dataloader_persistent_workers", Use::kNoEffect}, {"past_index", Use::kNoEffect}, {"disable_tqdm", Use::kNoEffect},
    {"remove_unused_columns", Use::kNoEffect}, {"label_names", Use::kNoEffect},
    {"load_best_model_at_end", Use::kNoEffect}, {"metric_for_best_model", Use::kNoEffect},
    {"greater_is_better", Use::kNoEffect}, {"ignore_data_skip", Use::kNoEffect},
    {"fsdp_min_num_params", Use::kNoEffect}, {"fsdp_transformer_layer_cls_to_wrap", Use::kNoEffect},
    {"accelerator_config", Use::kNoEffect}, {"optim_args", Use::kNoEffect}, {"group_by_length", Use::kNoEffect},
    {"length_column_name", Use::kNoEffect}, {"ddp_find_unused_parameters", Use::kNoEffect},
    {"ddp_broadcast_buffers", Use::kNoEffect}, {"skip_memory_metrics", Use::kNoEffect},
    {"use_legacy_prediction_loop", Use::kNoEffect}, {"push_to_hub", Use::kNoEffect}, {"hub_strategy", Use::kNoEffect},
    {"hub_token", Use::kNoEffect}, {"hub_private_repo", Use::kNoEffect}, {"hub_always_push", Use::kNoEffect},
    {"hub_revision", Use::kNoEffect}, {"include_inputs_for_metrics", Use::kNoEffect},
    {"include_for_metrics", Use::kNoEffect}, {"eval_do_concat_batches", Use::kNoEffect},
    {"fp16_backend", Use::kNoEffect}, {"push_to_hub_model_id", Use::kNoEffect},
    {"push_to_hub_organization", Use::kNoEffect}, {"push_to_hub_token", Use::kNoEffect},
    {"mp_parameters", Use::kNoEffect}, {"full_determinism", Use::kNoEffect}, {"ray_scope", Use::kNoEffect},
    {"include_tokens_per_second", Use::kNoEffect}, {"include_num_input_tokens_seen", Use::kNoEffect},
    {"batch_eval_metrics", Use::kNoEffect}, {"eval_on_start", Use::kNoEffect}, {"eval_use_gather_object", Use::kNoEffect},
    {"average_tokens_across_devices", Use::kNoEffect}, {"dispatch_batches", Use::kNoEffect},
    {"split_batches", Use::kNoEffect}, {"sortish_sampler", Use::kNoEffect}, {"predict_with_generate", Use::kNoEffect},
    {"generation_max_length", Use::kNoEffect}, {"generation_num_beams", Use::kNoEffect},
    {"generation_config", Use::kNoEffect}, {"liger_kernel_config", Use::kNoEffect}, {"project", Use::kNoEffect},
    {"trackio_space_id", Use::kNoEffect},
    {"sharded_ddp", Use::kNotModelled, "fairscale's sharded DDP (give --zero 1 or 2 for its sharded optimizer state)"},
    {"no_cuda", Use::kNotModelled, "training on the CPU"}, {"use_cpu", Use::kNotModelled, "training on the CPU"},
    {"torchdynamo", Use::kNotModelled, "torch.compile's fused kernels save other tensors than eager PyTorch"},
    {"torch_compile_backend", Use::kNotModelled, "torch.compile's fused kernels save other tensors than eager PyTorch"},
    {"torch_compile_mode", Use::kNotModelled, "torch.compile's fused kernels save other tensors than eager PyTorch"},
    {"auto_find_batch_size", Use::kNotModelled, "the Trainer halves the batch after an out-of-memory error; counted at "
                                                "the batch given"},
    {"label_smoothing_factor", Use::kNotModelled, "the label smoother's fp32 log-softmax over the logits"},
    {"neftune_noise_alpha", Use::kNotModelled, "NEFTune's noised copy of the embedding output"},
    {"optim_target_modules", Use::kNotModelled, "GaLore / APOLLO projections of the targeted modules"},
    {"ddp_bucket_cap_mb", Use::kNotModelled, "DDP's gradient buckets"},
    {"parallelism_config", Use::kNotModelled, "accelerate's ParallelismConfig (its TP / CP / sharding sizes)"},
    {"use_liger_kernel", Use::kNotModelled, "Liger's fused kernels and loss"},
};

const KeyRule* find_key(std::string_view key) {
  for (const auto& k : kKeys)
    if (k.key == key) return &k;
  return nullptr;
}

/// A YAML value as the file spells it: 4096, true, [q_proj, v_proj].
std::string yaml_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsNull()) return "null";
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

bool is_off(const YAML::Node& node) {
  if (node.IsNull()) return true;
  if (node.IsSequence() || node.IsMap()) return node.size() == 0;
  const std::string& s = node.Scalar();
  return s.empty() || s == "false" || s == "False" || s == "0" || s == "0.0" || s == "null";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

class YamlReader {
 public:
  explicit YamlReader(std::string name) : name_(std::move(name)) {}
  void keep(const std::string& key, YAML::Node node) { read_[key] = std::move(node); }
  bool has(const std::string& key) const { return read_.count(key) > 0; }
  std::string where(const std::string& key, const YAML::Node& node) const {
    return fmt::format("{}: {} ({}:{})", key, yaml_text(node), name_, node.Mark().line + 1);
  }
  std::string where(const std::string& key) const { return where(key, read_.at(key)); }
  const std::string& name() const { return name_; }

  Expected<int64_t> count(const std::string& key) const {
    int64_t v = 0;
    if (!YAML::convert<int64_t>::decode(read_.at(key), v) || v < 0)
      return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a whole number", where(key))};
    return v;
  }
  Expected<double> real(const std::string& key) const {
    double v = 0;
    if (!YAML::convert<double>::decode(read_.at(key), v))
      return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a number", where(key))};
    return v;
  }
  Expected<bool> flag(const std::string& key) const {
    bool v = false;
    if (!YAML::convert<bool>::decode(read_.at(key), v))
      return Error{ErrorKind::kConfig, "", fmt::format("{}: expected true or false", where(key))};
    return v;
  }
  Expected<std::string> text(const std::string& key) const {
    const auto& n = read_.at(key);
    if (!n.IsScalar()) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a single value", where(key))};
    return n.Scalar();
  }
  const YAML::Node& node(const std::string& key) const { return read_.at(key); }

 private:
  std::string name_;
  std::map<std::string, YAML::Node> read_;
};

#define ACTMEM_TRY(var, expr)           \
  auto var##_r = (expr);                \
  if (!var##_r) return var##_r.error(); \
  auto var = *var##_r

/// The preset whose config.json is the model's, by the repo's name: "NousResearch/Meta-Llama-3-8B"
/// and "meta-llama/Meta-Llama-3-8B-Instruct" are llama-3-8b (a chat or instruct tune keeps its
/// base's architecture). Presets name their source as "huggingface.co/ORG/NAME config.json".
std::optional<std::string> preset_for_repo(const std::string& repo) {
  std::string name = lower(repo.substr(repo.rfind('/') == std::string::npos ? 0 : repo.rfind('/') + 1));
  std::vector<std::string> candidates{name};
  for (std::string_view suffix : {"-instruct", "-chat", "-hf", "-it", "-base"})
    if (name.size() > suffix.size() && name.ends_with(suffix)) candidates.push_back(name.substr(0, name.size() - suffix.size()));
  for (const auto& p : list_presets()) {
    const std::string source(p.source);
    if (source.rfind("huggingface.co/", 0) != 0) continue;
    const auto end = source.find(' ');
    const std::string path = source.substr(0, end);
    const std::string preset_repo = lower(path.substr(path.rfind('/') + 1));
    for (const auto& c : candidates)
      if (c == preset_repo) return std::string(p.name);
  }
  return std::nullopt;
}

/// A target module name as actmem's LoRA target: q_proj -> q, ..., down_proj -> down.
std::optional<unsigned> lora_target_bit(std::string_view module) {
  static constexpr std::pair<std::string_view, unsigned> kNames[] = {
      {"q_proj", kLoraQ},       {"k_proj", kLoraK},   {"v_proj", kLoraV},     {"o_proj", kLoraO},
      {"gate_proj", kLoraGate}, {"up_proj", kLoraUp}, {"down_proj", kLoraDown}};
  for (const auto& [n, bit] : kNames)
    if (n == module) return bit;
  return std::nullopt;
}

/// HF OptimizerNames (transformers/training_args.py) as actmem's optimizers.
std::optional<std::string> optimizer_for(const std::string& optim) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"adamw_torch", "adamw"},           {"adamw_torch_fused", "adamw"},     {"adamw_hf", "adamw"},
      {"adamw_apex_fused", "adamw"},      {"adamw_torch_xla", "adamw"},       {"adamw_anyprecision", "adamw"},
      {"adamw_bnb_8bit", "adamw-8bit"},   {"adamw_8bit", "adamw-8bit"},       {"paged_adamw_32bit", "paged-adamw"},
      {"paged_adamw", "paged-adamw"},     {"paged_adamw_8bit", "paged-adamw-8bit"}, {"adafactor", "adafactor"},
      {"sgd", "sgd-nomomentum"},  // TrainingArguments' "sgd" is torch.optim.SGD with its default momentum 0
  };
  for (const auto& [n, o] : kNames)
    if (n == optim) return std::string(o);
  return std::nullopt;
}

std::optional<std::filesystem::path> find_beside(const std::string& file, const std::string& config_path) {
  namespace fs = std::filesystem;
  const fs::path given(file);
  const fs::path dir = fs::path(config_path).parent_path();
  for (const fs::path& p : {given, dir / given, dir / given.filename()}) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
  }
  return std::nullopt;
}

}  // namespace

namespace {

Expected<TrainingConfig> read_yaml(const YAML::Node& root, const std::string& name);

}  // namespace

Expected<TrainingConfig> read_hf_training_json(std::string_view text, const std::string& name) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Error{ErrorKind::kConfig, "", fmt::format("{}: not a JSON object of TrainingArguments", name)};
  // JSON is YAML 1.2's flow style: yaml-cpp reads it with each value's line (tab indentation, compact
  // separators and \/ escapes included).
  try {
    return read_yaml(YAML::Load(std::string(text)), name);
  } catch (const YAML::Exception& e) {
    return Error{ErrorKind::kConfig, "",
                 fmt::format("{}:{}: not JSON of the expected shape: {}", name, e.mark.line + 1, e.msg)};
  }
}

Expected<TrainingConfig> read_hf_training_yaml(std::string_view text, const std::string& name) {
  // yaml-cpp throws on a value of another shape than asked (a list where a name belongs): one line.
  try {
    return read_yaml(YAML::Load(std::string(text)), name);
  } catch (const YAML::Exception& e) {
    return Error{ErrorKind::kConfig, "", fmt::format("{}:{}: not YAML of the expected shape: {}", name, e.mark.line + 1,
                                                     e.msg)};
  }
}

namespace {

Expected<TrainingConfig> read_yaml(const YAML::Node& root, const std::string& name) {
  if (!root.IsMap())
    return Error{ErrorKind::kConfig, "", fmt::format("{}: not a YAML mapping of training settings", name)};
  TrainingConfig cfg;
  YamlReader in(name);
  std::vector<std::string_view> known;
  for (const auto& k : kKeys) known.push_back(k.key);
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    const KeyRule* rule = find_key(key);
    if (!rule) {
      auto guess = closest_name(key, known);
      return Error{ErrorKind::kConfig, "",
                   fmt::format("{}: unknown key \"{}\"{}; actmem cannot tell whether it changes memory (remove it from "
                               "the file, or give the job as actmem flags)",
                               in.where(key, it->second), key, guess ? fmt::format(" (did you mean \"{}\"?)", *guess) : "")};
    }
    if (rule->use == Use::kRead && !it->second.IsNull()) in.keep(key, it->second);
    else if (rule->use == Use::kNotModelled && !is_off(it->second))
      cfg.warnings.push_back(fmt::format("{}: not modelled: {}", in.where(key, it->second), rule->why));
  }
  const bool axolotl = in.has("base_model") || in.has("adapter") || in.has("micro_batch_size") || in.has("sequence_len");
  const bool factory = !axolotl && (in.has("stage") || in.has("finetuning_type") || in.has("cutoff_len"));
  cfg.format = axolotl ? "axolotl" : factory ? "llama-factory" : "hf-trainer";
  auto set = [&cfg](std::string option, OptionValue value, std::string source) {
    cfg.settings.push_back({std::move(option), std::move(value), std::move(source)});
  };
  // A true/false key, false when absent; a value that is neither is an error.
  auto on = [&in](const std::string& key) -> Expected<bool> { return in.has(key) ? in.flag(key) : Expected<bool>(false); };
  auto fixed = [&](std::string_view what) { return fmt::format("{}'s default {} (not in {})", cfg.format, what, name); };
  set("framework", std::string("hf"), fmt::format("{} trains transformers models ({})", cfg.format, name));
  bool on_load_in_4bit = false, on_load_in_8bit = false, on_lora_target_linear = false, on_flash_attention = false,
       on_xformers_attention = false, on_sdp_attention = false;
  for (auto [key, keep] : {std::pair{"load_in_4bit", &on_load_in_4bit}, std::pair{"load_in_8bit", &on_load_in_8bit},
                           std::pair{"lora_target_linear", &on_lora_target_linear},
                           std::pair{"flash_attention", &on_flash_attention},
                           std::pair{"xformers_attention", &on_xformers_attention},
                           std::pair{"sdp_attention", &on_sdp_attention}}) {
    ACTMEM_TRY(v, on(key));
    *keep = v;
  }

  // The model: a preset matched by the repo's name, or a local directory's config.json.
  const std::string model_key = in.has("base_model") ? "base_model" : "model_name_or_path";
  if (in.has(model_key)) {
    ACTMEM_TRY(repo, in.text(model_key));
    const std::filesystem::path local = std::filesystem::path(repo) / "config.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(local, ec)) {
      auto m = load_model(local.string());
      if (!m) return Error{ErrorKind::kConfig, "", fmt::format("{}: {}", in.where(model_key), m.error().message)};
      cfg.model = std::move(*m);
      cfg.model_from.push_back(fmt::format("{}: {}", in.where(model_key), local.string()));
    } else if (auto preset = preset_for_repo(repo)) {
      auto m = load_model(*preset);
      if (!m) return m.error();
      m->name = *preset;
      cfg.model = std::move(*m);
      cfg.model_from.push_back(fmt::format("{}: the preset {} by the repo's name (give --model config.json for the "
                                           "exact file)",
                                           in.where(model_key), *preset));
    } else {
      cfg.model_from.push_back(fmt::format("{}: no preset has this repo's name; give --model PRESET|config.json",
                                           in.where(model_key)));
    }
  } else {
    cfg.model_from.push_back(fmt::format("{} names no model (base_model / model_name_or_path); give --model", name));
  }

  if (in.has("stage")) {
    ACTMEM_TRY(stage, in.text("stage"));
    if (stage != "sft" && stage != "pt")
      cfg.warnings.push_back(fmt::format("{}: not modelled: the {} stage's extra models and batches (reference or "
                                         "reward model, paired samples); counted as supervised fine-tuning",
                                         in.where("stage"), stage));
  }

  // Sequence and batch.
  for (const char* key : {"sequence_len", "cutoff_len", "max_seq_length"}) {
    if (!in.has(key)) continue;
    ACTMEM_TRY(s, in.count(key));
    set("seq_len", s, in.where(key) + (std::string_view(key) == "sequence_len" ? "" : ": the longest sample; shorter "
                                                                                       "batches are padded to their "
                                                                                       "longest"));
    break;
  }
  if (!in.has("sequence_len") && !in.has("cutoff_len") && !in.has("max_seq_length"))
    cfg.warnings.push_back(fmt::format("{}: no sequence length ({}); give --seq-len", name,
                                       cfg.format == "hf-trainer" ? "TrainingArguments holds none: the data sets it"
                                                                  : "sequence_len / cutoff_len"));
  if (in.has("per_gpu_train_batch_size")) {
    // TrainingArguments.train_batch_size: per_gpu_train_batch_size (deprecated) or per_device_train_batch_size.
    ACTMEM_TRY(b, in.count("per_gpu_train_batch_size"));
    set("micro_batch", b, in.where("per_gpu_train_batch_size") + ": the deprecated name, which the Trainer takes first");
  } else if (in.has("micro_batch_size") || in.has("per_device_train_batch_size")) {
    const std::string key = in.has("micro_batch_size") ? "micro_batch_size" : "per_device_train_batch_size";
    ACTMEM_TRY(b, in.count(key));
    set("micro_batch", b, in.where(key));
  } else {
    const int64_t b = axolotl ? 1 : 8;  // axolotl's micro_batch_size default 1; TrainingArguments' 8
    set("micro_batch", b, fixed(axolotl ? "micro_batch_size 1" : "per_device_train_batch_size 8"));
  }
  // Gradient accumulation: TrainingArguments.gradient_accumulation_steps (axolotl and LLaMA-Factory
  // pass the same key on), micro-batches per optimizer step. Echoed only when the file gives it.
  if (in.has("gradient_accumulation_steps")) {
    ACTMEM_TRY(n, in.count("gradient_accumulation_steps"));
    set("grad_accum", n, in.where("gradient_accumulation_steps"));
  }

  // Precision: bf16 / fp16 autocast; "auto" (axolotl) is bf16 where the GPU has it (Ampere and newer).
  std::string dtype = "fp32";
  std::string dtype_src = fmt::format("no bf16 / fp16 ({})", name);
  for (const char* key : {"bf16", "fp16"}) {
    if (!in.has(key)) continue;
    ACTMEM_TRY(t, in.text(key));
    if (t == "auto") {
      if (std::string_view(key) == "bf16") {
        dtype = "bf16";
        dtype_src = in.where(key) + ": bf16 on Ampere and newer GPUs";
      }
      continue;
    }
    ACTMEM_TRY(enabled, in.flag(key));
    if (enabled) {
      dtype = key;
      dtype_src = in.where(key);
      break;
    }
  }
  set("dtype", dtype, dtype_src);

  // Method: LoRA / QLoRA (adapters over a frozen base) or full fine-tuning.
  std::string method = "full";
  std::string method_src = fixed("full fine-tuning (no adapter)");
  if (in.has("adapter")) {
    ACTMEM_TRY(a, in.text("adapter"));
    method = a;
    method_src = in.where("adapter");
  } else if (in.has("finetuning_type")) {
    ACTMEM_TRY(f, in.text("finetuning_type"));
    method = f;
    method_src = in.where("finetuning_type");
  } else if (factory) {
    method = "lora";
    method_src = fixed("finetuning_type lora");
  }
  if (method != "full" && method != "lora" && method != "qlora")
    return Error{ErrorKind::kConfig, "", fmt::format("{}: actmem models lora, qlora and full fine-tuning", method_src)};
  // The frozen base: 8-bit or 4-bit bitsandbytes, else the 16-bit dtype.
  std::string base;
  std::string base_src;
  if (on_load_in_4bit) {
    base = "nf4";
    base_src = in.where("load_in_4bit");
  } else if (on_load_in_8bit) {
    base = "int8";
    base_src = in.where("load_in_8bit");
  } else if (in.has("quantization_bit")) {
    ACTMEM_TRY(bits, in.count("quantization_bit"));
    std::string quant_method = "bnb";
    if (in.has("quantization_method")) {
      ACTMEM_TRY(qm, in.text("quantization_method"));
      quant_method = qm;
    }
    if (quant_method != "bnb" || (bits != 4 && bits != 8))
      cfg.warnings.push_back(fmt::format("{}: not modelled: {}-bit {} quantization; the base counted in {}",
                                         in.where("quantization_bit"), bits, quant_method, dtype));
    else {
      base = bits == 4 ? "nf4" : "int8";
      base_src = in.where("quantization_bit") + (in.has("quantization_method") ? ", " + in.where("quantization_method") : "") +
                 (in.has("quantization_type") ? ", " + in.where("quantization_type") + " (fp4 and nf4 store alike)" : "");
    }
  }
  if (method == "qlora" && base != "nf4")
    return Error{ErrorKind::kConfig, "", fmt::format("{}: qlora needs load_in_4bit: true", method_src)};
  if (method == "full") {
    if (!base.empty())
      return Error{ErrorKind::kConfig, "", fmt::format("{}: a quantized base trains only with an adapter", base_src)};
    // Trainable parameters: LLaMA-Factory casts them to fp32 unless pure_bf16; the HF Trainer's
    // autocast computes in bf16 over fp32 weights. axolotl loads the model in the 16-bit dtype.
    bool pure = false;
    if (in.has("pure_bf16")) {
      ACTMEM_TRY(p, in.flag("pure_bf16"));
      pure = p;
    }
    if (pure) {
      set("weight_dtype", std::string("bf16"), in.where("pure_bf16"));
      set("precision", std::string("pure"), in.where("pure_bf16"));
    } else if (axolotl) {
      set("weight_dtype", dtype, dtype_src + ": axolotl loads the model in this dtype");
      if (dtype != "fp32") set("precision", std::string("pure"), dtype_src + ": the optimizer updates the 16-bit weights");
      cfg.warnings.push_back(dtype_src + ": axolotl's full fine-tune counted as pure 16-bit training (no fp32 master)");
    } else {
      set("weight_dtype", std::string("fp32"), fmt::format("{}: trainable parameters in fp32, computed in {}", method_src, dtype));
    }
  } else {
    int64_t rank = 8;
    std::string rank_src = fixed("lora_rank 8");
    for (const char* key : {"lora_r", "lora_rank"}) {
      if (!in.has(key)) continue;
      ACTMEM_TRY(r, in.count(key));
      rank = r;
      rank_src = in.where(key);
    }
    if (axolotl && !in.has("lora_r"))
      return Error{ErrorKind::kConfig, "", fmt::format("{}: lora_r is missing (axolotl requires it)", method_src)};
    set("lora_rank", rank, method_src + ", " + rank_src);
    // Targets: axolotl's lora_target_linear / lora_target_modules; LLaMA-Factory's lora_target ("all").
    unsigned targets = 0;
    std::string targets_src;
    std::vector<std::string> modules;
    if (on_lora_target_linear) {
      targets = kLoraAll;
      targets_src = in.where("lora_target_linear");
    }
    if (in.has("lora_target_modules")) {
      const auto& node = in.node("lora_target_modules");
      if (node.IsSequence())
        for (const auto& m : node) modules.push_back(m.as<std::string>());
      else
        modules.push_back(node.as<std::string>());
      targets_src += (targets_src.empty() ? "" : ", ") + in.where("lora_target_modules");
    }
    if (in.has("lora_target")) {
      ACTMEM_TRY(t, in.text("lora_target"));
      if (t == "all") {
        targets = kLoraAll;
      } else {
        std::stringstream ss(t);
        for (std::string m; std::getline(ss, m, ',');) modules.push_back(m.substr(m.find_first_not_of(' ')));
      }
      targets_src = in.where("lora_target");
    } else if (factory && targets == 0 && modules.empty()) {
      targets = kLoraAll;
      targets_src = fixed("lora_target all");
    }
    for (const auto& m : modules) {
      if (auto bit = lora_target_bit(m)) targets |= *bit;
      else
        cfg.warnings.push_back(fmt::format("{}: not modelled: a LoRA adapter on \"{}\"", targets_src, m));
    }
    if (targets == 0)
      return Error{ErrorKind::kConfig, "",
                   fmt::format("{}: no LoRA target modules (lora_target_linear / lora_target_modules)", method_src)};
    set("lora_targets", lora_targets_name(targets), targets_src);
    if (in.has("lora_dropout")) {
      ACTMEM_TRY(p, in.real("lora_dropout"));
      set("lora_dropout", p, in.where("lora_dropout"));
    }
    if (!base.empty()) {
      set("base_weight_dtype", base, base_src);
      if (base == "nf4") {
        bool dq = true;  // axolotl loaders/model.py l.718; LLaMA-Factory double_quantization = True
        std::string dq_src = fixed("bnb_4bit_use_double_quant true");
        for (const char* key : {"bnb_4bit_use_double_quant", "double_quantization"}) {
          if (!in.has(key)) continue;
          ACTMEM_TRY(d, in.flag(key));
          dq = d;
          dq_src = in.where(key);
        }
        set("double_quant", dq, dq_src);
      }
    } else {  // both tools load the model in the compute dtype (torch_dtype)
      set("base_weight_dtype", dtype, dtype_src + ": the frozen base loaded in the compute dtype");
    }
  }

  // Recomputation: gradient_checkpointing (LLaMA-Factory: on unless disable_gradient_checkpointing).
  bool checkpointing = factory;
  std::string gc_src = factory ? fixed("gradient checkpointing on (disable_gradient_checkpointing false)")
                               : fixed("gradient_checkpointing false");
  if (in.has("gradient_checkpointing")) {
    ACTMEM_TRY(t, in.text("gradient_checkpointing"));
    checkpointing = t != "false" && t != "False";  // axolotl also takes "unsloth" / "offload"
    gc_src = in.where("gradient_checkpointing");
    if (t == "unsloth" || t == "offload")
      cfg.warnings.push_back(gc_src + ": not modelled: checkpoints offloaded to CPU memory; counted on the GPU");
  } else if (in.has("disable_gradient_checkpointing")) {
    ACTMEM_TRY(d, in.flag("disable_gradient_checkpointing"));
    checkpointing = !d;
    gc_src = in.where("disable_gradient_checkpointing");
  }
  if (checkpointing && in.has("gradient_checkpointing_kwargs") && in.node("gradient_checkpointing_kwargs").IsMap()) {
    // Passed to torch.utils.checkpoint: use_reentrant picks the autograd.Function or the saved-tensor
    // hooks implementation; both keep only each layer's input.
    const auto& kw = in.node("gradient_checkpointing_kwargs");
    for (auto it = kw.begin(); it != kw.end(); ++it) {
      const std::string k = it->first.as<std::string>();
      if (k != "use_reentrant" && k != "preserve_rng_state" && k != "determinism_check" && k != "debug")
        cfg.warnings.push_back(fmt::format("{}: not modelled: torch.utils.checkpoint's {}",
                                           in.where("gradient_checkpointing_kwargs"), k));
    }
    gc_src += ", " + in.where("gradient_checkpointing_kwargs") + ": either way each layer keeps only its input";
  }
  set("recompute", std::string(checkpointing ? "full" : "none"), gc_src);

  // Attention kernel.
  std::string attention = "sdpa";
  std::string attention_src = fixed("attention: transformers' sdpa");
  if (in.has("attn_implementation")) {
    ACTMEM_TRY(a, in.text("attn_implementation"));
    attention = a == "flash_attention_2" || a == "flash_attention_3" ? "flash" : a == "eager" ? "eager" : "sdpa";
    attention_src = in.where("attn_implementation");
  } else if (on_flash_attention) {
    attention = "flash";
    attention_src = in.where("flash_attention");
  } else if (on_xformers_attention) {
    attention = "flash";
    attention_src = in.where("xformers_attention") + ": a fused kernel, saved as flash attention's";
  } else if (on_sdp_attention) {
    attention_src = in.where("sdp_attention");
  } else if (in.has("flash_attn")) {
    ACTMEM_TRY(a, in.text("flash_attn"));
    attention = a == "fa2" || a == "fa3" ? "flash" : a == "disabled" ? "eager" : "sdpa";
    attention_src = in.where("flash_attn") + (a == "auto" ? ": transformers' choice, sdpa" : "");
  }
  set("attention", attention, attention_src);

  // Optimizer (TrainingArguments.optim; axolotl's `optimizer`).
  const std::string optim_key = in.has("optimizer") ? "optimizer" : "optim";
  std::string optim = "adamw_torch";
  std::string optim_src = fixed("optim adamw_torch");
  if (in.has(optim_key)) {
    ACTMEM_TRY(o, in.text(optim_key));
    optim = lower(o);
    optim_src = in.where(optim_key);
  }
  if (in.has("adafactor")) {  // TrainingArguments.__post_init__: adafactor=True sets optim to "adafactor"
    ACTMEM_TRY(a, in.flag("adafactor"));
    if (a) {
      optim = "adafactor";
      optim_src = in.where("adafactor");
    }
  }
  if (auto o = optimizer_for(optim)) set("optimizer", *o, optim_src);
  else cfg.warnings.push_back(optim_src + ": not modelled; counted as AdamW");

  // Sharding: a DeepSpeed config (read by the DeepSpeed reader) or FSDP.
  if (in.has("deepspeed")) {
    // TrainingArguments.deepspeed: a JSON file's path, or the config itself as a dict.
    std::string ds_text;
    std::string ds_name;
    if (in.node("deepspeed").IsMap()) {
      ds_text = yaml_to_json(in.node("deepspeed")).dump();
      ds_name = fmt::format("{}:{}", name, in.node("deepspeed").Mark().line + 1);
    } else {
      ACTMEM_TRY(path, in.text("deepspeed"));
      auto file = find_beside(path, name);
      if (!file)
        return Error{ErrorKind::kConfig, "",
                     fmt::format("{}: the DeepSpeed config is not there (looked as given and beside {}); give it with "
                                 "--from FILE.json --model ...",
                                 in.where("deepspeed"), name)};
      std::ifstream f(*file);
      std::stringstream ss;
      ss << f.rdbuf();
      ds_text = ss.str();
      ds_name = file->string();
    }
    auto ds = read_deepspeed_config(ds_text, ds_name);
    if (!ds) return Error{ErrorKind::kConfig, "", fmt::format("{}: {}", in.where("deepspeed"), ds.error().message)};
    for (auto& s : ds->settings) {
      // The YAML's own dtype and batch stand; DeepSpeed's "auto" takes them from the TrainingArguments.
      if (s.option == "dtype" || s.option == "weight_dtype" || s.option == "micro_batch") continue;
      s.source += " via " + in.where("deepspeed");
      cfg.settings.push_back(std::move(s));
    }
    for (auto& w : ds->warnings)
      if (w.find("\"auto\" is filled in by the HF Trainer") == std::string::npos) cfg.warnings.push_back(std::move(w));
  }
  // TrainingArguments.fsdp: "full_shard auto_wrap" (a string), a list, or true; "" / [] / false is off,
  // and then the Trainer ignores fsdp_config (which to_dict() writes with its defaults). axolotl: a
  // list, or fsdp_config alone.
  std::string options;
  if (in.has("fsdp")) {
    const auto& node = in.node("fsdp");
    if (node.IsSequence())
      for (const auto& o : node) options += o.as<std::string>() + " ";
    else if (const std::string v = lower(node.as<std::string>()); v != "false")
      options = v == "true" ? "full_shard" : v;
  }
  if (!options.empty() || (axolotl && in.has("fsdp_config") && !is_off(in.node("fsdp_config")))) {
    bool offload = options.find("offload") != std::string::npos;
    std::string strategy = options.find("shard_grad_op") != std::string::npos ? "shard_grad_op" : "full_shard";
    const std::string src = in.has("fsdp") ? in.where("fsdp") : in.where("fsdp_config");
    if (in.has("fsdp_config") && in.node("fsdp_config").IsMap()) {
      const auto& c = in.node("fsdp_config");
      for (auto it = c.begin(); it != c.end(); ++it) {
        const std::string k = it->first.as<std::string>();
        const std::string v = it->second.IsScalar() ? lower(it->second.Scalar()) : "";
        if (k == "fsdp_offload_params" || k == "offload_params") offload = offload || v == "true";
        else if (k == "fsdp_sharding_strategy" || k == "sharding_strategy")
          strategy = v == "shard_grad_op" || v == "2" ? "shard_grad_op" : v == "no_shard" || v == "3" ? "no_shard" : strategy;
        else if (k == "reshard_after_forward" || k == "fsdp_reshard_after_forward")
          strategy = v == "false" ? "shard_grad_op" : strategy;
        else if ((k == "xla" || k == "xla_fsdp_v2") && v == "true")
          cfg.warnings.push_back(fmt::format("fsdp_config.{}: true ({}): not modelled: XLA's FSDP (TPUs)", k, name));
        else if (k == "fsdp_activation_checkpointing" || k == "activation_checkpointing") {
          if (v == "true") set("recompute", std::string("full"), fmt::format("fsdp_config.{}: true ({})", k, name));
        } else if (k != "fsdp_version" && k != "version" && k != "fsdp_state_dict_type" && k != "state_dict_type" &&
                   k != "fsdp_transformer_layer_cls_to_wrap" && k != "transformer_layer_cls_to_wrap" &&
                   k != "fsdp_auto_wrap_policy" && k != "auto_wrap_policy" && k != "fsdp_cpu_ram_efficient_loading" &&
                   k != "cpu_ram_efficient_loading" && k != "fsdp_use_orig_params" && k != "use_orig_params" &&
                   k != "fsdp_sync_module_states" && k != "sync_module_states" && k != "fsdp_backward_prefetch" &&
                   k != "backward_prefetch" && k != "fsdp_forward_prefetch" && k != "forward_prefetch" &&
                   k != "min_num_params" && k != "fsdp_min_num_params" && k != "xla" && k != "xla_fsdp_v2" &&
                   k != "xla_fsdp_grad_ckpt" && k != "xla_fsdp_settings" &&
                   k != "fsdp_limit_all_gathers" && k != "limit_all_gathers")
          return Error{ErrorKind::kConfig, "",
                       fmt::format("fsdp_config.{}: {} ({}:{}): unknown FSDP setting; actmem cannot tell whether it "
                                   "changes memory (remove it from the file, or give the job as actmem flags)",
                                   k, yaml_text(it->second), name, it->second.Mark().line + 1)};
      }
    }
    if (strategy != "no_shard") {
      set("zero", int64_t{strategy == "full_shard" ? 3 : 2}, src + ": FSDP " + strategy);
      cfg.warnings.push_back(src + ": FSDP shards over the data-parallel GPUs, which the file does not name; give --dp");
    }
    if (offload) {
      set("offload_optimizer", true, src + ": FSDP CPU offload");
      cfg.warnings.push_back(src + ": FSDP's CPU offload moves parameters and gradients too; actmem moves only the "
                                   "optimizer state");
    }
  }
  return cfg;
}

}  // namespace

#undef ACTMEM_TRY

}  // namespace actmem
