// torchtitan TOML job configs (torchtitan/config/job_config.py) -> a model and actmem's training options.
// Read with Debian's toml++ (libtomlplusplus-dev). torchtitan moved from TOML files to Python config
// registries in Feb 2026 (pytorch/torchtitan #2386); the keys and defaults here are those of the last
// TOML release line, job_config.py @ 238fa9953e4aec2a62582121564273d7cbb1e9f1 (2026-02-23).
//
// Keys absent from a file take torchtitan's own defaults (local_batch_size 8, seq_len 2048,
// activation_checkpoint selective "2", data_parallel_shard_degree -1 ...), each echoed as such.
#include <charconv>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>  // Debian libtomlplusplus-dev: the TOML parser, with each value's line

#include "config/training_config.h"
#include "model/hf_config.h"
#include "util/spellcheck.h"

namespace actmem {
namespace {

// kRead: read below. kNoEffect: no effect on the memory of a training step. kNotModelled: a memory
// effect actmem leaves out, warned about when set to anything but its off value. kSection: a table
// whose keys are checked one by one. kFreeSection: a table none of whose keys changes GPU memory
// (logging, checkpoint files, validation runs, communication timeouts), read as a whole.
enum class Use { kRead, kNoEffect, kNotModelled, kSection, kFreeSection };

struct KeyRule {
  std::string_view path;
  Use use;
  std::string_view why = "";
};

constexpr KeyRule kKeys[] = {
    {"job", Use::kFreeSection}, {"profiling", Use::kFreeSection}, {"metrics", Use::kFreeSection},
    {"lr_scheduler", Use::kFreeSection}, {"checkpoint", Use::kFreeSection}, {"validation", Use::kFreeSection},
    {"comm", Use::kFreeSection}, {"memory_estimation", Use::kFreeSection}, {"debug", Use::kFreeSection},
    {"fault_tolerance", Use::kFreeSection},
    {"model", Use::kSection}, {"model.name", Use::kRead}, {"model.flavor", Use::kRead},
    {"model.hf_assets_path", Use::kNoEffect}, {"model.tokenizer_path", Use::kNoEffect},
    {"model.converters", Use::kRead}, {"model.print_after_conversion", Use::kNoEffect},
    {"optimizer", Use::kSection}, {"optimizer.name", Use::kRead}, {"optimizer.lr", Use::kNoEffect},
    {"optimizer.eps", Use::kNoEffect}, {"optimizer.beta1", Use::kNoEffect}, {"optimizer.beta2", Use::kNoEffect},
    {"optimizer.weight_decay", Use::kNoEffect}, {"optimizer.implementation", Use::kNoEffect},
    {"optimizer.early_step_in_backward", Use::kRead},
    {"training", Use::kSection}, {"training.local_batch_size", Use::kRead}, {"training.batch_size", Use::kRead},
    {"training.global_batch_size", Use::kNoEffect},  // gradient accumulation: the peak is one micro-batch's
    {"training.seq_len", Use::kRead}, {"training.dtype", Use::kRead}, {"training.mixed_precision_param", Use::kRead},
    {"training.mixed_precision_reduce", Use::kRead}, {"training.enable_cpu_offload", Use::kRead},
    {"training.max_norm", Use::kNoEffect}, {"training.steps", Use::kNoEffect}, {"training.dataset", Use::kNoEffect},
    {"training.dataset_path", Use::kNoEffect}, {"training.gc_freq", Use::kNoEffect}, {"training.gc_debug", Use::kNoEffect},
    {"training.dataloader", Use::kFreeSection}, {"training.seed", Use::kNoEffect},
    {"training.deterministic", Use::kNoEffect},
    {"parallelism", Use::kSection}, {"parallelism.data_parallel_replicate_degree", Use::kRead},
    {"parallelism.data_parallel_shard_degree", Use::kRead}, {"parallelism.fsdp_reshard_after_forward", Use::kRead},
    {"parallelism.tensor_parallel_degree", Use::kRead},
    {"parallelism.disable_loss_parallel", Use::kNotModelled, "the whole logits gathered on each TP rank"},
    {"parallelism.enable_async_tensor_parallel", Use::kNotModelled, "async TP's symmetric-memory buffers"},
    {"parallelism.pipeline_parallel_degree", Use::kRead}, {"parallelism.pipeline_parallel_schedule", Use::kRead},
    {"parallelism.pipeline_parallel_schedule_csv", Use::kNotModelled, "a pipeline schedule from a file"},
    {"parallelism.pipeline_parallel_microbatch_size", Use::kRead},
    {"parallelism.pipeline_parallel_layers_per_stage", Use::kRead},
    {"parallelism.pipeline_parallel_first_stage_less_layers", Use::kRead},
    {"parallelism.pipeline_parallel_last_stage_less_layers", Use::kRead},
    {"parallelism.pipeline_parallel_split_points", Use::kNotModelled, "a pipeline split by module names"},
    {"parallelism.module_fqns_per_model_part", Use::kNotModelled, "a pipeline split by module names"},
    {"parallelism.pipeline_parallel_expert_parallel_overlap", Use::kNoEffect},
    {"parallelism.context_parallel_degree", Use::kRead}, {"parallelism.context_parallel_load_balancer", Use::kNoEffect},
    {"parallelism.context_parallel_rotate_method", Use::kNoEffect},
    {"parallelism.expert_parallel_degree", Use::kRead},
    {"parallelism.expert_tensor_parallel_degree", Use::kRead},
    {"parallelism.expert_parallel_comm_backend", Use::kNoEffect},
    {"activation_checkpoint", Use::kSection}, {"activation_checkpoint.mode", Use::kRead},
    {"activation_checkpoint.selective_ac_option", Use::kRead}, {"activation_checkpoint.memory_budget", Use::kNoEffect},
    {"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", Use::kNoEffect},
    {"activation_checkpoint.early_stop", Use::kNoEffect},
    {"activation_checkpoint.visualize_memory_budget_pareto", Use::kNoEffect},
    {"activation_checkpoint.preserve_rng_state", Use::kNoEffect},
    {"activation_checkpoint.determinism_check", Use::kNoEffect}, {"activation_checkpoint.debug", Use::kNoEffect},
    {"compile", Use::kSection},
    {"compile.enable", Use::kNotModelled, "torch.compile's fused kernels save other tensors than eager PyTorch"},
    {"compile.components", Use::kNoEffect}, {"compile.backend", Use::kNoEffect},
    // quantize.*: read through model.converters; these tune a converter that is on.
    {"quantize", Use::kSection}, {"quantize.linear", Use::kSection}, {"quantize.grouped_mm", Use::kSection},
    {"quantize.linear.float8", Use::kSection},
    {"quantize.linear.float8.enable_fsdp_float8_all_gather", Use::kNotModelled,
     "FSDP all-gathers float8 weights (the gathered copies are half the bf16 size)"},
    {"quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", Use::kNoEffect},
    {"quantize.linear.float8.recipe_name", Use::kNoEffect}, {"quantize.linear.float8.filter_fqns", Use::kNoEffect},
    {"quantize.linear.float8.emulate", Use::kNoEffect},
    {"quantize.linear.mx", Use::kFreeSection}, {"quantize.grouped_mm.float8", Use::kFreeSection},
    {"quantize.grouped_mm.mx", Use::kFreeSection},
    {"experimental", Use::kSection},
    {"experimental.custom_import", Use::kNotModelled, "a custom module imported into the job"},
    {"experimental.custom_args_module", Use::kNoEffect},
};

const KeyRule* find_key(std::string_view path) {
  for (const auto& k : kKeys)
    if (k.path == path) return &k;
  return nullptr;
}

/// A TOML value as the file spells it: 8, "selective", ["float8"].
std::string toml_text(const toml::node& node) {
  if (const auto* s = node.as_string()) return fmt::format("\"{}\"", s->get());
  std::ostringstream out;
  node.visit([&out](const auto& v) { out << v; });
  return out.str();
}

bool is_off(const toml::node& node) {
  if (auto b = node.value<bool>()) return !*b;
  if (auto s = node.value<std::string>()) return s->empty();
  if (const auto* n = node.as_integer()) return n->get() == 0;  // as_*, not value<int64_t>(): see count()
  if (const auto* f = node.as_floating_point()) return f->get() == 0;
  if (const auto* a = node.as_array()) return a->empty();
  return false;
}

/// torchtitan's llama3 flavors: torchtitan/models/llama3/__init__.py `llama3_args`
/// @ 238fa9953e4aec2a62582121564273d7cbb1e9f1, TransformerModelArgs defaults from
/// models/llama3/model/args.py (vocab_size 128256, multiple_of 256, norm_eps 1e-5, n_kv_heads = n_heads).
struct Llama3Flavor {
  std::string_view name;
  int64_t dim, n_layers, n_heads, n_kv_heads, vocab_size;
  double ffn_dim_multiplier;  // 0: None
  int64_t multiple_of;
  std::string_view attn_type;
};

constexpr Llama3Flavor kLlama3Flavors[] = {
    {"debugmodel", 256, 6, 16, 16, 2048, 0, 256, "sdpa"},
    {"debugmodel_flex_attn", 256, 6, 16, 16, 2048, 0, 256, "flex"},
    {"debugmodel_varlen_attn", 256, 6, 16, 16, 2048, 0, 256, "varlen"},
    {"8B", 4096, 32, 32, 8, 128256, 1.3, 1024, "sdpa"},
    {"8B_flex", 4096, 32, 32, 8, 128256, 1.3, 1024, "flex"},
    {"8B_varlen", 4096, 32, 32, 8, 128256, 1.3, 1024, "varlen"},
    {"70B", 8192, 80, 64, 8, 128256, 1.3, 4096, "sdpa"},
    {"405B", 16384, 126, 128, 8, 128256, 1.2, 4096, "sdpa"},
};

/// FeedForward's hidden size (models/llama3/model/model.py l.332-336): from 4·dim, int(2·x/3), then
/// int(ffn_dim_multiplier·x), rounded up to a multiple of multiple_of.
int64_t llama3_ffn_hidden(const Llama3Flavor& f) {
  int64_t hidden = 4 * f.dim;
  hidden = static_cast<int64_t>(2.0 * static_cast<double>(hidden) / 3.0);
  if (f.ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(f.ffn_dim_multiplier * static_cast<double>(hidden));
  return f.multiple_of * ((hidden + f.multiple_of - 1) / f.multiple_of);
}

class TomlReader {
 public:
  explicit TomlReader(std::string name) : name_(std::move(name)) {}

  void keep(const std::string& path, const toml::node& node) { read_[path] = &node; }
  bool has(const std::string& path) const { return read_.count(path) > 0; }
  int line(const toml::node& node) const { return static_cast<int>(node.source().begin.line); }
  std::string where(const std::string& path, const toml::node& node) const {
    return fmt::format("{} = {} ({}:{})", path, toml_text(node), name_, line(node));
  }
  std::string where(const std::string& path) const { return where(path, *read_.at(path)); }
  const std::string& name() const { return name_; }

  Expected<int64_t> count(const std::string& path) const {
    // toml++'s value<int64_t>() casts a float, undefined past int64 (fuzzed: seq_len = -2.9e21).
    const auto* v = read_.at(path)->as_integer();
    if (!v) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a whole number", where(path))};
    return v->get();
  }
  Expected<std::string> text(const std::string& path) const {
    const auto* n = read_.at(path);
    if (n->is_integer()) return std::to_string(*n->value<int64_t>());  // selective_ac_option = 2
    if (!n->is_string()) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a string", where(path))};
    return *n->value<std::string>();
  }
  Expected<bool> flag(const std::string& path) const {
    const auto* n = read_.at(path);
    if (!n->is_boolean()) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected true or false", where(path))};
    return *n->value<bool>();
  }
  Expected<std::vector<std::string>> texts(const std::string& path) const {
    std::vector<std::string> out;
    const auto* a = read_.at(path)->as_array();
    if (!a) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a list of strings", where(path))};
    for (const auto& e : *a) {
      if (!e.is_string()) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a list of strings", where(path))};
      out.push_back(*e.value<std::string>());
    }
    return out;
  }

 private:
  std::string name_;
  std::map<std::string, const toml::node*> read_;
};

#define ACTMEM_TRY(var, expr)           \
  auto var##_r = (expr);                \
  if (!var##_r) return var##_r.error(); \
  auto var = *var##_r

}  // namespace

Expected<TrainingConfig> read_torchtitan_toml(std::string_view text, const std::string& name) {
  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return Error{ErrorKind::kConfig, "",
                 fmt::format("{}:{}: not TOML: {}", name, e.source().begin.line, std::string(e.description()))};
  }
  TrainingConfig cfg;
  cfg.format = "torchtitan";
  TomlReader in(name);
  std::vector<std::string_view> known;
  for (const auto& k : kKeys) known.push_back(k.path);

  // Every key must be known (or sit in a table that has no memory effect).
  std::vector<std::pair<std::string, const toml::node*>> todo;
  for (auto&& [k, v] : root) todo.emplace_back(std::string(k.str()), &v);
  for (std::size_t i = 0; i < todo.size(); ++i) {
    const auto [path, node] = todo[i];
    const KeyRule* rule = find_key(path);
    if (!rule) {
      auto guess = closest_name(path, known);
      return Error{ErrorKind::kConfig, "",
                   fmt::format("{}: unknown torchtitan key \"{}\"{}; actmem cannot tell whether it changes memory "
                               "(remove it from the file, or give the job as actmem flags)",
                               in.where(path, *node), path,
                               guess ? fmt::format(" (did you mean \"{}\"?)", *guess) : "")};
    }
    if (rule->use == Use::kSection) {
      const auto* t = node->as_table();
      if (!t) return Error{ErrorKind::kConfig, "", fmt::format("{}: expected a table [{}]", in.where(path, *node), path)};
      for (auto&& [k, v] : *t) todo.emplace_back(path + "." + std::string(k.str()), &v);
    } else if (rule->use == Use::kRead) {
      in.keep(path, *node);
    } else if (rule->use == Use::kNotModelled && !is_off(*node)) {
      cfg.warnings.push_back(fmt::format("{}: not modelled: {}", in.where(path, *node), rule->why));
    }
  }
  auto set = [&cfg](std::string option, OptionValue value, std::string source) {
    cfg.settings.push_back({std::move(option), std::move(value), std::move(source)});
  };
  auto given_or_default = [&](const std::string& path, std::string_view default_text) {
    return in.has(path) ? in.where(path)
                        : fmt::format("torchtitan's default {} = {} (not in {})", path, default_text, name);
  };

  // Model.
  std::string model_name = "llama3", flavor = "debugmodel";
  if (in.has("model.name")) {
    ACTMEM_TRY(n, in.text("model.name"));
    model_name = n;
  }
  if (in.has("model.flavor")) {
    ACTMEM_TRY(f, in.text("model.flavor"));
    flavor = f;
  }
  int64_t seq = 2048;
  if (in.has("training.seq_len")) {
    ACTMEM_TRY(s, in.count("training.seq_len"));
    seq = s;
  }
  set("seq_len", seq, given_or_default("training.seq_len", "2048"));
  const Llama3Flavor* arch = nullptr;
  if (model_name == "llama3")
    for (const auto& f : kLlama3Flavors)
      if (f.name == flavor) arch = &f;
  const std::string model_src = fmt::format("{}, {}", given_or_default("model.name", "\"llama3\""),
                                            given_or_default("model.flavor", "\"debugmodel\""));
  std::string attn_type = "sdpa";
  if (arch) {
    attn_type = arch->attn_type;
    const int64_t ffn = llama3_ffn_hidden(*arch);
    cfg.model_from.push_back(model_src);
    cfg.model_from.push_back(fmt::format(
        "torchtitan llama3_args[\"{}\"] (torchtitan/models/llama3/__init__.py @ 238fa99): dim {}, n_layers {}, "
        "n_heads {}, n_kv_heads {}, vocab_size {}{}, multiple_of {}",
        arch->name, arch->dim, arch->n_layers, arch->n_heads, arch->n_kv_heads, arch->vocab_size,
        arch->ffn_dim_multiplier > 0 ? fmt::format(", ffn_dim_multiplier {}", arch->ffn_dim_multiplier) : "",
        arch->multiple_of));
    cfg.model_from.push_back(fmt::format("FFN hidden {} = multiple_of {} rounding of {}int(2·4·{}/3) (model.py FeedForward)",
                                         ffn, arch->multiple_of,
                                         arch->ffn_dim_multiplier > 0 ? fmt::format("{}·", arch->ffn_dim_multiplier) : "",
                                         arch->dim));
    cfg.model_from.push_back("RMSNorm, SwiGLU, RoPE, no biases, untied output layer: HF llama layout");
    const nlohmann::json hf = {{"model_type", "llama"}, {"hidden_size", arch->dim},
                               {"num_attention_heads", arch->n_heads}, {"num_key_value_heads", arch->n_kv_heads},
                               {"num_hidden_layers", arch->n_layers}, {"intermediate_size", ffn},
                               {"max_position_embeddings", seq}, {"vocab_size", arch->vocab_size},
                               {"hidden_act", "silu"}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0},
                               {"tie_word_embeddings", false}, {"attention_dropout", 0.0}, {"torch_dtype", "bfloat16"}};
    auto model = parse_hf_config(hf.dump(), fmt::format("torchtitan {} {}", model_name, flavor));
    if (!model) return Error{ErrorKind::kConfig, "", fmt::format("{}: {}", name, model.error().message)};
    cfg.model = std::move(*model);
  } else {
    std::vector<std::string_view> flavors;
    for (const auto& f : kLlama3Flavors) flavors.push_back(f.name);
    cfg.model_from.push_back(fmt::format("{}: actmem knows torchtitan's llama3 flavors ({}); give this model with --model",
                                         model_src, fmt::join(flavors, ", ")));
  }
  if (attn_type == "sdpa")
    set("attention", std::string("flash"),
        fmt::format("attn_type \"sdpa\" of llama3 {}: torchtitan's SDPA runs the cuDNN/flash kernels, causal, no mask",
                    flavor));
  else
    set("attention", std::string("flash"),
        fmt::format("attn_type \"{}\" of llama3 {}: a fused kernel, no s×s tensor", attn_type, flavor));
  set("hidden_dropout", 0.0, "torchtitan's llama3 has no dropout");
  set("attention_dropout", 0.0, "torchtitan's llama3 has no dropout");

  if (in.has("model.converters")) {
    ACTMEM_TRY(list, in.texts("model.converters"));
    for (const auto& c : list) {
      if (c == "float8" || c == "quantize.linear.float8")
        cfg.warnings.push_back(fmt::format("{}: not modelled: float8 linears (torchao Float8Linear save their bf16 "
                                           "input, so activations are counted in bf16; the float8 casts of weights "
                                           "and inputs are transients not counted)",
                                           in.where("model.converters")));
      else
        cfg.warnings.push_back(fmt::format("{}: not modelled: the model converter \"{}\"", in.where("model.converters"), c));
    }
  }

  // Parallel layout.
  int64_t tp = 1, pp = 1, cp = 1, ep = 1, replicate = 1, shard = -1;
  const struct {
    const char* path;
    const char* option;
    int64_t* keep;
  } degrees[] = {{"parallelism.tensor_parallel_degree", "tp", &tp},
                 {"parallelism.pipeline_parallel_degree", "pp", &pp},
                 {"parallelism.context_parallel_degree", "cp", &cp},
                 {"parallelism.expert_parallel_degree", "ep", &ep}};
  for (const auto& d : degrees) {
    if (!in.has(d.path)) continue;
    ACTMEM_TRY(v, in.count(d.path));
    if (v < 1)  // layers / pp below would divide by zero (found by the fuzzer)
      return Error{ErrorKind::kConfig, d.option,
                   fmt::format("{}: a parallel degree is a whole number >= 1 (1: not split)", in.where(d.path))};
    if (d.keep) *d.keep = v;
    set(d.option, v, in.where(d.path));
  }
  if (in.has("parallelism.expert_tensor_parallel_degree")) {
    ACTMEM_TRY(etp, in.count("parallelism.expert_tensor_parallel_degree"));
    if (etp != 1)
      cfg.warnings.push_back(fmt::format("{}: not modelled: expert weights sharded by their own TP degree",
                                         in.where("parallelism.expert_tensor_parallel_degree")));
  }
  if (tp > 1)  // apply_tp: SequenceParallel on the norms (models/llama3/infra/parallelize.py l.181-233)
    set("sp", true, in.where("parallelism.tensor_parallel_degree") +
                        ": torchtitan's TP shards the norms by sequence (SequenceParallel)");
  if (in.has("parallelism.data_parallel_replicate_degree")) {
    ACTMEM_TRY(r, in.count("parallelism.data_parallel_replicate_degree"));
    replicate = r;
  }
  if (in.has("parallelism.data_parallel_shard_degree")) {
    ACTMEM_TRY(s, in.count("parallelism.data_parallel_shard_degree"));
    shard = s;
  }
  const std::string shard_src = given_or_default("parallelism.data_parallel_shard_degree", "-1");
  const std::string replicate_src = given_or_default("parallelism.data_parallel_replicate_degree", "1");
  if (shard < -1 || shard == 0 || replicate < 1)
    return Error{ErrorKind::kConfig, "",
                 fmt::format("{}, {}: use a degree >= 1 (or -1 for the shard degree)", shard_src, replicate_src)};
  // FSDP's reshard_after_forward: "default" is `not pp_enabled` (parallelize.py l.319-327). Without
  // resharding the gathered weights stay between forward and backward, as under ZeRO-2.
  std::string reshard = "default";
  if (in.has("parallelism.fsdp_reshard_after_forward")) {
    ACTMEM_TRY(r, in.text("parallelism.fsdp_reshard_after_forward"));
    reshard = r;
  }
  if (reshard != "default" && reshard != "always" && reshard != "never")
    return Error{ErrorKind::kConfig, "",
                 fmt::format("{}: use default, always or never", in.where("parallelism.fsdp_reshard_after_forward"))};
  const bool reshards = reshard == "always" || (reshard == "default" && pp == 1);
  const int64_t fsdp_stage = reshards ? 3 : 2;
  const std::string reshard_src =
      reshard == "default" ? fmt::format("fsdp_reshard_after_forward \"default\" with pp {}", pp)
                           : in.where("parallelism.fsdp_reshard_after_forward");
  if (shard == -1) {
    set("zero", fsdp_stage,
        fmt::format("{}: FSDP ({})", shard_src, reshards ? "weights resharded after forward" : reshard_src));
    cfg.warnings.push_back(fmt::format("{}: FSDP over the GPUs left after tp·pp·cp·replicate, a number the file does "
                                       "not hold; give --dp N (default 1: nothing sharded)",
                                       shard_src));
  } else if (shard > 1) {
    set("zero", fsdp_stage,
        fmt::format("{}: FSDP ({})", shard_src, reshards ? "weights resharded after forward" : reshard_src));
    set("dp", shard, shard_src + (replicate > 1 ? ": the sharding group of HSDP" : ""));
    if (replicate > 1)
      cfg.warnings.push_back(fmt::format("{}: HSDP's {} replicas of each shard group do not change the memory of a GPU; "
                                         "counted as FSDP over dp {}",
                                         replicate_src, replicate, shard));
  } else if (replicate > 1) {
    set("dp", replicate, replicate_src + ": DDP (no sharding)");
  }
  if (cp > 1 && shard != 1)
    cfg.warnings.push_back(fmt::format("{}: not modelled: FSDP shards over data_parallel_shard_degree × cp (the "
                                       "dp_shard_cp mesh); actmem shards over dp only",
                                       in.where("parallelism.context_parallel_degree")));
  if (!reshards && shard != 1)
    cfg.warnings.push_back(fmt::format("{}: weights kept gathered from forward to backward: counted as ZeRO-2 (whole "
                                       "weights in the weight dtype, where FSDP keeps bf16 copies)",
                                       reshard_src));

  // The framework: torchtitan's own save rules (--framework torchtitan: its Llama 3 module code,
  // AC modes and FSDP2) where actmem models the layout, FSDP over data parallelism alone;
  // otherwise transformers' Llama rules, the nearest (validation/notes/fidelity-research.md, C).
  const bool titan = tp == 1 && pp == 1 && cp == 1 && ep == 1 && replicate == 1 && shard != 1 && reshards;
  if (titan) {
    set("framework", std::string("torchtitan"),
        fmt::format("torchtitan ({}): its Llama 3 save rules and FSDP2 over the shard group", name));
  } else {
    set("framework", std::string("hf"), fmt::format("torchtitan ({}): counted with transformers' Llama save rules", name));
    cfg.warnings.push_back(fmt::format("{}: torchtitan's own rules are modelled for FSDP alone (no TP, PP, CP, EP, "
                                       "replication or kept-gathered weights); this job is counted with "
                                       "transformers' Llama rules (framework hf): torch's nn.RMSNorm and the complex "
                                       "RoPE save a little less",
                                       name));
  }

  // Batch: a local batch per GPU; with PP it is cut into micro-batches of pipeline_parallel_microbatch_size.
  const std::string batch_key = in.has("training.local_batch_size") ? "training.local_batch_size" : "training.batch_size";
  int64_t local = 8;
  if (in.has(batch_key)) {
    ACTMEM_TRY(b, in.count(batch_key));
    local = b;
  }
  const std::string local_src = given_or_default(batch_key, "8");
  if (pp > 1) {
    int64_t micro = 1;
    if (in.has("parallelism.pipeline_parallel_microbatch_size")) {
      ACTMEM_TRY(m, in.count("parallelism.pipeline_parallel_microbatch_size"));
      micro = m;
    }
    const std::string micro_src = given_or_default("parallelism.pipeline_parallel_microbatch_size", "1");
    if (micro < 1 || local % micro != 0)
      return Error{ErrorKind::kConfig, "", fmt::format("{}: {} does not split into micro-batches of {}", local_src,
                                                       local, micro)};
    set("micro_batch", micro, micro_src);
    set("num_micro_batches", local / micro, fmt::format("local batch {} / micro-batch {} from {}", local, micro, local_src));
    std::string schedule = "1F1B";
    if (in.has("parallelism.pipeline_parallel_schedule")) {
      ACTMEM_TRY(s, in.text("parallelism.pipeline_parallel_schedule"));
      schedule = s;
    }
    const std::string schedule_src = given_or_default("parallelism.pipeline_parallel_schedule", "\"1F1B\"");
    const bool looped = schedule.find("Interleaved") != std::string::npos || schedule == "ZBVZeroBubble" ||
                        schedule == "DualPipeV" || schedule == "LoopedBFS";
    if (schedule == "GPipe")
      cfg.warnings.push_back(schedule_src + ": not modelled: GPipe keeps every micro-batch's activations; counted as 1F1B");
    if (looped) {
      if (in.has("parallelism.pipeline_parallel_layers_per_stage") && arch) {
        ACTMEM_TRY(per_stage, in.count("parallelism.pipeline_parallel_layers_per_stage"));
        if (per_stage < 1 || arch->n_layers % (pp * per_stage) != 0)
          return Error{ErrorKind::kConfig, "",
                       fmt::format("{}: {} layers do not split into pp {} x {} layers per stage",
                                   in.where("parallelism.pipeline_parallel_layers_per_stage"), arch->n_layers, pp,
                                   per_stage)};
        set("vpp", arch->n_layers / (pp * per_stage),
            fmt::format("{} layers / (pp {} x {}) from {}, {}", arch->n_layers, pp, per_stage,
                        in.where("parallelism.pipeline_parallel_layers_per_stage"), schedule_src));
      } else {
        cfg.warnings.push_back(schedule_src + ": the stages per rank of a looped schedule are not read (no "
                                              "parallelism.pipeline_parallel_layers_per_stage); give --vpp");
      }
    } else if (schedule != "1F1B" && schedule != "GPipe") {
      cfg.warnings.push_back(schedule_src + ": not modelled; counted as 1F1B");
    }
    for (const char* key : {"parallelism.pipeline_parallel_first_stage_less_layers",
                            "parallelism.pipeline_parallel_last_stage_less_layers"})
      cfg.warnings.push_back(fmt::format("{}: not modelled: the embedding and output stages' shorter share of "
                                           "layers; counted as an even split",
                                           given_or_default(key, "1")));
  } else {
    set("micro_batch", local, local_src);
  }

  // Activation checkpointing (torchtitan/distributed/activation_checkpoint.py): full wraps every
  // block; selective "N" wraps every N-th block in full AC; selective "op" saves the outputs of
  // chosen ops (odd-numbered matmuls, attention) and recomputes the rest.
  std::string mode = "selective";
  if (in.has("activation_checkpoint.mode")) {
    ACTMEM_TRY(m, in.text("activation_checkpoint.mode"));
    mode = m;
  }
  const std::string mode_src = given_or_default("activation_checkpoint.mode", "\"selective\"");
  if (mode == "none") {
    set("recompute", std::string("none"), mode_src);
  } else if (mode == "full") {
    set("recompute", std::string("full"), mode_src);
  } else if (mode == "selective") {
    std::string option = "2";
    if (in.has("activation_checkpoint.selective_ac_option")) {
      ACTMEM_TRY(o, in.text("activation_checkpoint.selective_ac_option"));
      option = o;
    }
    const std::string option_src = given_or_default("activation_checkpoint.selective_ac_option", "\"2\"");
    if (option != "op") {  // a layer period N >= 1
      int64_t every = 0;
      const auto [end, ec] = std::from_chars(option.data(), option.data() + option.size(), every);
      if (ec != std::errc{} || end != option.data() + option.size() || every < 1)
        return Error{ErrorKind::kConfig, "", fmt::format("{}: use \"op\" or a whole number N >= 1 (every N-th layer "
                                                         "checkpointed)",
                                                         option_src)};
    }
    if (titan) {  // torchtitan's own modes (--selective-ac-option): per op, or every N-th block
      set("recompute", std::string("selective"), mode_src);
      set("selective_ac_option", option, option_src);
    } else if (option == "op") {
      set("recompute", std::string("selective"), mode_src + ", " + option_src);
      cfg.warnings.push_back(fmt::format("{}: not modelled: torchtitan's per-op policy (outputs of every other matmul "
                                         "and of attention saved, the rest recomputed); counted as selective "
                                         "recomputation (the attention core rerun), an upper bound",
                                         option_src));
    } else {
      int64_t every = 0;
      const auto [end, ec] = std::from_chars(option.data(), option.data() + option.size(), every);
      if (ec != std::errc{} || end != option.data() + option.size() || every < 1)
        return Error{ErrorKind::kConfig, "", fmt::format("{}: use \"op\" or a whole number N >= 1 (every N-th layer "
                                                         "checkpointed)",
                                                         option_src)};
      // A global counter from 1: layer i (1-based) is wrapped when i % N == 0, so floor(n / N) of a
      // chunk's n layers are recomputed; the total saved is that of recomputing those first.
      const int64_t layers = arch ? arch->n_layers : 0;
      set("recompute", std::string("full"), mode_src + ", " + option_src);
      if (every > 1 && !arch) {
        cfg.warnings.push_back(fmt::format("{}: every {}-th layer checkpointed, but the model's layer count is not "
                                           "known here; counted as every layer recomputed (give --recompute-layers "
                                           "L/{})",
                                           option_src, every, every));
      } else if (every > 1) {
        const int64_t per_chunk = layers / pp;
        set("recompute_layers", per_chunk / every,
            fmt::format("every {}-th of {} layers per stage checkpointed: {} layers recomputed, from {}", every, per_chunk,
                        per_chunk / every, option_src));
        if (layers % pp != 0 || per_chunk % every != 0)
          cfg.warnings.push_back(fmt::format("{}: {} layers over pp {} do not split evenly; counted as {} recomputed "
                                             "layers per stage",
                                             option_src, layers, pp, per_chunk / every));
      }
    }
  } else if (mode == "memory_budget") {
    set("recompute", std::string("none"), mode_src);
    cfg.warnings.push_back(mode_src + ": not modelled: the compiler's memory-budget partitioner; counted as no "
                                      "recomputation, an upper bound");
  } else {
    return Error{ErrorKind::kConfig, "", fmt::format("{}: use none, selective, full or memory_budget", mode_src)};
  }

  // Precision (training.dtype, mixed_precision_param/reduce; job_config.py Training): FSDP2 keeps the
  // sharded parameters, gradients and AdamW state in training.dtype (float32 by default: no separate
  // master copy) and computes in mixed_precision_param.
  std::string train_dtype = "float32", param_dtype = "bfloat16", reduce_dtype = "float32";
  for (auto [path, keep] : {std::pair{"training.dtype", &train_dtype}, std::pair{"training.mixed_precision_param", &param_dtype},
                            std::pair{"training.mixed_precision_reduce", &reduce_dtype}}) {
    if (!in.has(path)) continue;
    ACTMEM_TRY(t, in.text(path));
    if (t != "float32" && t != "bfloat16")
      return Error{ErrorKind::kConfig, "", fmt::format("{}: use bfloat16 or float32", in.where(path))};
    *keep = t;
  }
  auto short_dtype = [](const std::string& t) { return std::string(t == "bfloat16" ? "bf16" : "fp32"); };
  set("dtype", short_dtype(param_dtype), given_or_default("training.mixed_precision_param", "\"bfloat16\""));
  const std::string train_src = given_or_default("training.dtype", "\"float32\"");
  set("weight_dtype", short_dtype(train_dtype), train_src);
  if (train_dtype == "bfloat16") {
    set("precision", std::string("pure"), train_src + ": no fp32 copy; AdamW state in bf16");
    set("grad_dtype", std::string("bf16"), train_src);
  } else {
    set("grad_dtype", std::string("fp32"),
        fmt::format("{}, {}", train_src, given_or_default("training.mixed_precision_reduce", "\"float32\"")));
  }
  if (in.has("training.enable_cpu_offload")) {
    ACTMEM_TRY(off, in.flag("training.enable_cpu_offload"));
    if (off) {
      set("offload_optimizer", true, in.where("training.enable_cpu_offload"));
      cfg.warnings.push_back(in.where("training.enable_cpu_offload") +
                             ": FSDP's CPU offload moves the parameters and gradients too; actmem moves only the "
                             "optimizer state and fp32 master");
    }
  }

  // Optimizer (components/optimizer.py: "Adam" and "AdamW" keep two fp32 moments).
  std::string optimizer = "AdamW";
  if (in.has("optimizer.name")) {
    ACTMEM_TRY(o, in.text("optimizer.name"));
    optimizer = o;
  }
  const std::string optimizer_src = given_or_default("optimizer.name", "\"AdamW\"");
  if (optimizer == "AdamW" || optimizer == "Adam")
    set("optimizer", std::string("adamw"), optimizer_src);
  else
    cfg.warnings.push_back(optimizer_src + ": not modelled; counted as AdamW");
  if (in.has("optimizer.early_step_in_backward")) {
    ACTMEM_TRY(early, in.flag("optimizer.early_step_in_backward"));
    if (early) set("optimizer_in_backward", true, in.where("optimizer.early_step_in_backward"));
  }
  return cfg;
}

#undef ACTMEM_TRY

}  // namespace actmem
