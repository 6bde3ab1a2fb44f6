// DeepSpeed config JSON (deepspeed/runtime/config.py, zero/config.py) -> actmem's training options.
// It holds no architecture: the model comes from --model. Keys are dotted paths
// ("zero_optimization.stage"); "auto" values (set by the HF Trainer) are named, not guessed.
#include <cctype>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/training_config.h"
#include "util/spellcheck.h"

namespace actmem {

namespace {

enum class Use { kRead, kNoEffect, kNotModelled, kSection };

struct KeyRule {
  std::string_view path;
  Use use;
  std::string_view why = "";
};

constexpr KeyRule kKeys[] = {
    {"train_micro_batch_size_per_gpu", Use::kRead}, {"zero_optimization", Use::kSection},
    {"zero_optimization.stage", Use::kRead}, {"zero_optimization.offload_optimizer", Use::kSection},
    {"zero_optimization.offload_optimizer.device", Use::kRead},
    {"zero_optimization.offload_optimizer.pin_memory", Use::kNoEffect},
    {"zero_optimization.offload_optimizer.nvme_path", Use::kNoEffect},
    {"zero_optimization.offload_optimizer.buffer_count", Use::kNoEffect},
    {"zero_optimization.offload_optimizer.ratio", Use::kNotModelled, "a partial optimizer offload"},
    {"zero_optimization.offload_param", Use::kSection}, {"zero_optimization.offload_param.device", Use::kRead},
    {"zero_optimization.offload_param.pin_memory", Use::kNoEffect},
    {"zero_optimization.offload_param.nvme_path", Use::kNoEffect},
    {"zero_optimization.overlap_comm", Use::kNotModelled, "overlapped communication's extra buckets"},
    {"zero_optimization.contiguous_gradients", Use::kNotModelled, "the contiguous gradient buffer's copy"},
    {"zero_optimization.reduce_bucket_size", Use::kNotModelled, "the gradient reduction bucket"},
    {"zero_optimization.allgather_bucket_size", Use::kNotModelled, "the parameter all-gather bucket"},
    {"zero_optimization.allgather_partitions", Use::kNoEffect}, {"zero_optimization.reduce_scatter", Use::kNoEffect},
    {"zero_optimization.sub_group_size", Use::kNotModelled, "optimizer step sub-groups (fp32 gradient copies of one group)"},
    {"zero_optimization.stage3_prefetch_bucket_size", Use::kNotModelled, "prefetched parameters beyond one layer"},
    {"zero_optimization.stage3_param_persistence_threshold", Use::kNotModelled,
     "small parameters kept whole on every GPU"},
    {"zero_optimization.stage3_max_live_parameters", Use::kNotModelled, "gathered parameters alive at once"},
    {"zero_optimization.stage3_max_reuse_distance", Use::kNotModelled, "gathered parameters kept for reuse"},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", Use::kNoEffect},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", Use::kNoEffect},
    {"zero_optimization.round_robin_gradients", Use::kNoEffect},
    {"fp16", Use::kSection}, {"fp16.enabled", Use::kRead}, {"fp16.loss_scale", Use::kNoEffect},
    {"fp16.loss_scale_window", Use::kNoEffect}, {"fp16.initial_scale_power", Use::kNoEffect},
    {"fp16.hysteresis", Use::kNoEffect}, {"fp16.min_loss_scale", Use::kNoEffect}, {"fp16.auto_cast", Use::kNoEffect},
    {"bf16", Use::kSection}, {"bf16.enabled", Use::kRead},
    {"data_types", Use::kSection}, {"data_types.grad_accum_dtype", Use::kRead},
    {"optimizer", Use::kSection}, {"optimizer.type", Use::kRead}, {"optimizer.params", Use::kNoEffect},
    {"scheduler", Use::kNoEffect}, {"steps_per_print", Use::kNoEffect}, {"wall_clock_breakdown", Use::kNoEffect},
    {"gradient_clipping", Use::kNoEffect}, {"train_batch_size", Use::kNoEffect},
    {"gradient_accumulation_steps", Use::kNoEffect}, {"zero_allow_untested_optimizer", Use::kNoEffect},
    {"zero_force_ds_cpu_optimizer", Use::kNoEffect}, {"prescale_gradients", Use::kNoEffect},
    {"gradient_predivide_factor", Use::kNoEffect}, {"tensorboard", Use::kNoEffect}, {"wandb", Use::kNoEffect},
    {"flops_profiler", Use::kNoEffect}, {"comms_logger", Use::kNoEffect},
    {"activation_checkpointing", Use::kSection},
    {"activation_checkpointing.partition_activations", Use::kNotModelled, "checkpoints partitioned over TP ranks"},
    {"activation_checkpointing.cpu_checkpointing", Use::kNotModelled, "checkpoints moved to CPU memory"},
    {"activation_checkpointing.contiguous_memory_optimization", Use::kNoEffect},
    {"activation_checkpointing.number_checkpoints", Use::kNoEffect},
    {"activation_checkpointing.synchronize_checkpoint_boundary", Use::kNoEffect},
    {"activation_checkpointing.profile", Use::kNoEffect},
};

const KeyRule* find_key(std::string_view path) {
  for (const auto& k : kKeys)
    if (k.path == path) return &k;
  return nullptr;
}

bool is_false(const nlohmann::json& v) {
  return (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>() == "none") ||
         (v.is_number() && v == 0);
}

}  // namespace

Expected<TrainingConfig> read_deepspeed_config(std::string_view text, const std::string& name) {
  auto root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  if (root.is_discarded() || !root.is_object())
    return Error{ErrorKind::kConfig, "", fmt::format("{}: not a JSON object (a DeepSpeed config is one)", name)};
  TrainingConfig cfg;
  cfg.format = "deepspeed";
  std::vector<std::string_view> known;
  for (const auto& k : kKeys) known.push_back(k.path);
  auto where = [&](const std::string& path, const nlohmann::json& v) {
    return fmt::format("\"{}\": {} ({})", path, v.dump(), name);
  };

  // Every key must be known; collect the ones actmem reads.
  std::map<std::string, nlohmann::json> read;
  std::vector<std::pair<std::string, const nlohmann::json*>> todo;
  for (auto it = root.begin(); it != root.end(); ++it) todo.emplace_back(it.key(), &it.value());
  for (std::size_t i = 0; i < todo.size(); ++i) {
    const auto [path, value] = todo[i];
    const KeyRule* rule = find_key(path);
    if (!rule) {
      auto guess = closest_name(path, known);
      return Error{ErrorKind::kConfig, "",
                   fmt::format("{}: unknown DeepSpeed key \"{}\"{}; actmem cannot tell whether it changes memory "
                               "(remove it from the file, or give the job as actmem flags)",
                               where(path, *value), path, guess ? fmt::format(" (did you mean \"{}\"?)", *guess) : "")};
    }
    if (rule->use == Use::kSection && value->is_object()) {
      for (auto it = value->begin(); it != value->end(); ++it) todo.emplace_back(path + "." + it.key(), &it.value());
    } else if (rule->use == Use::kRead) {
      if (value->is_string() && value->get<std::string>() == "auto")
        cfg.warnings.push_back(fmt::format("{}: \"auto\" is filled in by the HF Trainer; not read (give the value as "
                                           "an actmem flag)",
                                           where(path, *value)));
      else
        read[path] = *value;
    } else if (rule->use == Use::kNotModelled && !is_false(*value)) {
      cfg.warnings.push_back(fmt::format("{}: not modelled: {}", where(path, *value), rule->why));
    }
  }
  auto set = [&](std::string option, OptionValue value, std::string source) {
    cfg.settings.push_back({std::move(option), std::move(value), std::move(source)});
  };
  auto count = [&](const std::string& path) -> Expected<int64_t> {
    const auto& v = read.at(path);
    if (!v.is_number_integer())
      return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a whole number", where(path, v))};
    return v.get<int64_t>();
  };
  auto flag = [&](const std::string& path) -> Expected<bool> {
    const auto& v = read.at(path);
    if (!v.is_boolean()) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected true or false", where(path, v))};
    return v.get<bool>();
  };
  auto text_of = [&](const std::string& path) -> Expected<std::string> {
    const auto& v = read.at(path);
    if (!v.is_string()) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a string", where(path, v))};
    return v.get<std::string>();
  };

  if (read.count("train_micro_batch_size_per_gpu")) {
    auto b = count("train_micro_batch_size_per_gpu");
    if (!b) return b.error();
    set("micro_batch", *b, where("train_micro_batch_size_per_gpu", read["train_micro_batch_size_per_gpu"]));
  }
  int64_t stage = 0;
  if (read.count("zero_optimization.stage")) {
    auto s = count("zero_optimization.stage");
    if (!s) return s.error();
    stage = *s;
    set("zero", *s, where("zero_optimization.stage", read["zero_optimization.stage"]));
  }
  if (read.count("zero_optimization.offload_optimizer.device")) {
    auto d = text_of("zero_optimization.offload_optimizer.device");
    if (!d) return d.error();
    const auto src = where("zero_optimization.offload_optimizer.device", read["zero_optimization.offload_optimizer.device"]);
    if (*d == "cpu" || *d == "nvme") set("offload_optimizer", true, src);
    else if (*d != "none")
      return Error{ErrorKind::kConfig, "", fmt::format("{}: use cpu, nvme or none", src)};
    if (*d == "nvme") cfg.warnings.push_back(src + ": NVMe offload counted as host memory");
  }
  if (read.count("zero_optimization.offload_param.device")) {
    auto d = text_of("zero_optimization.offload_param.device");
    if (!d) return d.error();
    if (*d != "none")
      cfg.warnings.push_back(fmt::format("{}: not modelled: ZeRO-3 parameter offload (actmem keeps the weight shards on "
                                         "the GPU)",
                                         where("zero_optimization.offload_param.device",
                                               read["zero_optimization.offload_param.device"])));
  }
  // Precision: fp16 or bf16 mixed precision (16-bit weights, gradients and activations; fp32 master
  // and Adam state), else fp32.
  bool fp16 = false, bf16 = false;
  if (read.count("fp16.enabled")) {
    auto e = flag("fp16.enabled");
    if (!e) return e.error();
    fp16 = *e;
  }
  if (read.count("bf16.enabled")) {
    auto e = flag("bf16.enabled");
    if (!e) return e.error();
    bf16 = *e;
  }
  if (fp16 && bf16) return Error{ErrorKind::kConfig, "", name + ": fp16 and bf16 are both enabled; DeepSpeed takes one"};
  const bool precision_auto = !read.count("fp16.enabled") && !read.count("bf16.enabled") &&
                              (root.contains("fp16") || root.contains("bf16"));
  if (!precision_auto) {
    const std::string dtype = fp16 ? "fp16" : bf16 ? "bf16" : "fp32";
    const std::string src = fp16   ? where("fp16.enabled", read["fp16.enabled"])
                            : bf16 ? where("bf16.enabled", read["bf16.enabled"])
                                   : fmt::format("neither fp16 nor bf16 enabled ({})", name);
    set("dtype", dtype, src);
    set("weight_dtype", dtype, src);
  }
  if (read.count("data_types.grad_accum_dtype")) {
    auto g = text_of("data_types.grad_accum_dtype");
    if (!g) return g.error();
    set("grad_dtype", *g, where("data_types.grad_accum_dtype", read["data_types.grad_accum_dtype"]));
  }
  if (read.count("optimizer.type")) {
    auto t = text_of("optimizer.type");
    if (!t) return t.error();
    std::string lower = *t;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const auto src = where("optimizer.type", read["optimizer.type"]);
    if (lower == "adam" || lower == "adamw" || lower == "fusedadam" || lower == "cpuadam") set("optimizer", std::string("adamw"), src);
    else if (lower == "sgd") set("optimizer", std::string("sgd"), src);
    else cfg.warnings.push_back(src + ": not modelled; counted as AdamW (fp32 master + 2 states)");
  }
  if (stage > 0)
    cfg.warnings.push_back(fmt::format("{}: ZeRO shards over the data-parallel GPUs, which a DeepSpeed config does not "
                                       "name; give --dp (default 1: nothing sharded)",
                                       name));
  cfg.model_from.push_back("a DeepSpeed config has no architecture: give --model");
  return cfg;
}

}  // namespace actmem
