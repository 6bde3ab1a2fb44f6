// Training configs as input: a job users already have (a Megatron-LM launch script or argument line)
// read into what actmem needs: a model (when the config describes the architecture) and training
// options by name (option_table.h). Every setting read is kept with where it came from, so a front
// end can echo it; settings actmem cannot honour become warnings; arguments actmem does not know
// are errors (it cannot tell whether they change memory).
//
//   auto cfg = read_training_config(text, "train_gpt3_175b.sh").value();
//   TrainingSettings s;
//   for (const auto& r : cfg.settings) set_training_option(s, r.option, r.value);
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/model_spec.h"
#include "policies/option_table.h"
#include "actmem/expected.h"

namespace actmem {

/// One training option read from a config: `tp = 8` from `--tensor-model-parallel-size 8` at line 47.
struct ConfigSetting {
  std::string option;  // option_table.h name ("tp")
  OptionValue value;
  std::string source;  // what the config said, and where: "--tensor-model-parallel-size 8 (line 47)"
};

struct TrainingConfig {
  std::string format;                 // "megatron", "deepspeed", "torchtitan", "axolotl", "llama-factory", "hf-trainer"
  std::optional<ModelSpec> model;     // when the config gives the architecture
  std::vector<std::string> model_from;  // how the architecture was read, one line per fact
  std::vector<ConfigSetting> settings;
  std::vector<std::string> warnings;  // settings actmem cannot honour, each named
};

/// An option given beside the config (a flag after --from, a keyword beside from_config=): the
/// value computed with, and how the front end spells it ("--micro-batch 2", "micro_batch=2").
struct OptionOverride {
  std::string option;  // option_table.h name
  OptionValue value;
  std::string given;
};

/// Marks in `config.settings` each setting an override replaces: its value becomes the override's
/// and its source "<origin> (<given>), over <value> <- <what the file said>", so the echo (stderr,
/// JSON config.settings) shows what was computed with. `origin` names the front end ("the command
/// line", "the keywords"). A setting the file gave twice (gradient_checkpointing, then fsdp_config)
/// is kept once, its source naming both.
void mark_overrides(TrainingConfig& config, const std::vector<OptionOverride>& overrides, std::string_view origin);

/// A Megatron-LM argument line or launch script (bash: VAR=..., arrays, ${VAR[@]}, line
/// continuations, torchrun's --nproc_per_node/--nnodes for the data-parallel size).
/// `name` labels the model and the sources. Example: the argument line "--num-layers 2 --hidden-size 64
/// --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --vocab-size 1000" gives
/// a GPT model with h = 64 and settings seq_len = 128.
Expected<TrainingConfig> read_megatron_args(std::string_view text, const std::string& name);

/// A DeepSpeed config JSON: ZeRO stage, offload, micro-batch, precision, optimizer. No model.
Expected<TrainingConfig> read_deepspeed_config(std::string_view json_text, const std::string& name);

/// A torchtitan job config (TOML, torchtitan/config/job_config.py): model name and flavor (llama3's
/// "debugmodel", "8B", "70B", "405B" are known), parallelism.*, activation_checkpoint.*, training.*.
/// Keys it leaves out take torchtitan's defaults, echoed as such.
Expected<TrainingConfig> read_torchtitan_toml(std::string_view text, const std::string& name);

/// An HF TrainingArguments-style YAML as axolotl and LLaMA-Factory write it (per_device_train_batch_size
/// or micro_batch_size, gradient_checkpointing, bf16, optim, adapter lora/qlora, deepspeed JSON path).
/// The model is matched to a preset by its repo name (base_model / model_name_or_path) when it can be.
/// `name` is the file's path: a deepspeed path is looked up beside it too.
Expected<TrainingConfig> read_hf_training_yaml(std::string_view text, const std::string& name);

/// HF TrainingArguments as JSON: what TrainingArguments.to_dict() / to_json_string() writes (every
/// field, most at their defaults) and what HfArgumentParser.parse_json_file reads. The same keys,
/// rules and echo as read_hf_training_yaml; `deepspeed` may be a path or the config as a dict.
/// TrainingArguments holds no model and no sequence length: give --model and --seq-len.
Expected<TrainingConfig> read_hf_training_json(std::string_view json_text, const std::string& name);

/// A config file by its extension and content: .toml (torchtitan), .yaml/.yml (axolotl, LLaMA-Factory),
/// a JSON object (TrainingArguments when it has per_device_train_batch_size, output_dir, optim, ...;
/// else a DeepSpeed config), else a
/// Megatron-LM launch script or argument line.
Expected<TrainingConfig> load_training_config(const std::string& path);

/// Sets the config's options on `settings` (a front end then sets its own on top). An option the
/// library refuses is reported with the config line it came from.
Expected<void> apply_training_config(const TrainingConfig& config, TrainingSettings& settings);

/// The echo: {format, settings: [{option, value, source}], model_from: [...], warnings: [...]}.
nlohmann::json training_config_json(const TrainingConfig& config);

}  // namespace actmem
