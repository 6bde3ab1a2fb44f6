// Megatron-LM arguments (megatron/training/arguments.py) -> a model and actmem's training options.
// The shell handling is what launch scripts need (VAR=..., arrays, ${VAR[@]}, $((a*b)), line
// continuations, comments, quotes: config/shell_words.h, arrays here); it is not a shell.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "config/megatron_model.h"   // read_megatron_model: the model parts of the arguments
#include "config/megatron_reader.h"  // Arg, Reader
#include "config/shell_words.h"      // tokenize, expand
#include "config/training_config.h"
#include "policies/options.h"  // default_grad_dtype
#include "util/dtype.h"
#include "util/spellcheck.h"

namespace actmem {

namespace {

using megatron::Arg;
using megatron::kMaxCount;
using megatron::Reader;
using shell::expand;
using shell::is_name;
using shell::Token;
using shell::tokenize;
using shell::Vars;

/// The script's `--flag value...` arguments in order, variables expanded; `vars_out` (if given)
/// receives the script's variables (the environment it exports: CUBLAS_WORKSPACE_CONFIG, ...).
std::vector<Arg> arguments(std::string_view text, Vars* vars_out = nullptr) {
  Vars vars;
  std::vector<Token> words;  // command words, expanded
  auto lines = tokenize(text);
  for (std::size_t li = 0; li < lines.size(); ++li) {
    auto& toks = lines[li];
    std::size_t k = 0;
    if (k < toks.size() && toks[k].text == "export") ++k;
    const auto eq = k < toks.size() ? toks[k].text.find('=') : std::string::npos;
    if (k < toks.size() && eq != std::string::npos && is_name(toks[k].text.substr(0, eq))) {
      const std::string name = toks[k].text.substr(0, eq);
      std::string first = toks[k].text.substr(eq + 1);
      if (first.rfind("(", 0) == 0) {  // NAME=( a b c ), possibly over several lines
        std::vector<Token> items;
        first.erase(0, 1);
        std::vector<Token> rest{{first, toks[k].line}};
        rest.insert(rest.end(), toks.begin() + static_cast<std::ptrdiff_t>(k) + 1, toks.end());
        bool closed = false;
        while (true) {
          for (auto& t : rest) {
            std::string s = t.text;
            // The closing parenthesis is one without its opening one ($((a*b)) is balanced).
            if (!s.empty() && s.back() == ')' && std::count(s.begin(), s.end(), ')') > std::count(s.begin(), s.end(), '(')) {
              s.pop_back();
              closed = true;
            }
            if (!s.empty())
              for (auto& e : expand({s, t.line}, vars)) items.push_back(e);
            if (closed) break;
          }
          if (closed || li + 1 >= lines.size()) break;
          rest = lines[++li];
        }
        vars[name] = items;
      } else {
        vars[name] = expand({first, toks[k].line}, vars);
      }
      continue;
    }
    for (; k < toks.size(); ++k)
      for (auto& e : expand(toks[k], vars)) words.push_back(e);
  }
  std::vector<Arg> args;
  bool in_values = false;
  for (const auto& w : words) {
    if (w.text.rfind("--", 0) == 0 && w.text.size() > 2) {
      Arg a;
      a.line = w.line;
      const auto eq = w.text.find('=');
      a.flag = w.text.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq != std::string::npos) a.values.push_back(w.text.substr(eq + 1));
      args.push_back(std::move(a));
      in_values = true;
    } else if (w.text == "|" || w.text == ";" || w.text == "&&" || w.text.find('>') != std::string::npos) {
      in_values = false;  // the command ended
    } else if (in_values && !args.empty()) {
      args.back().values.push_back(w.text);
    }
  }
  if (vars_out) *vars_out = std::move(vars);
  return args;
}

// What actmem does with each Megatron argument (config/megatron_arguments.inc: every argument of
// Megatron-LM's arguments.py). Model and layout arguments are read; the rest are either without
// effect on memory (logging, data, learning rate), memory effects actmem does not model (named in a
// warning), or launcher arguments.
enum class Use { kRead, kNoEffect, kNotModelled, kLauncher };

struct ArgRule {
  std::string_view flag;  // without the leading dashes
  std::string_view dest;  // argparse's destination (aliases share it)
  Use use;
  std::string_view why;  // for kNotModelled: what actmem leaves out
};

constexpr ArgRule kRules[] = {
#define MEGATRON_ARG(flag, dest, use, why) {flag, dest, Use::use, why},
#include "config/megatron_arguments.inc"
#undef MEGATRON_ARG
};

/// The rule of `flag`, by binary search over the rules sorted once by flag: a script has tens of
/// flags and Megatron-LM about a thousand (a linear scan was most of the fuzz target's time).
const ArgRule* find_rule(std::string_view flag) {
  static const std::vector<const ArgRule*> sorted = [] {
    std::vector<const ArgRule*> v;
    for (const auto& r : kRules) v.push_back(&r);
    std::stable_sort(v.begin(), v.end(), [](const ArgRule* a, const ArgRule* b) { return a->flag < b->flag; });
    return v;
  }();
  auto it = std::lower_bound(sorted.begin(), sorted.end(), flag,
                             [](const ArgRule* r, std::string_view f) { return r->flag < f; });
  return it != sorted.end() && (*it)->flag == flag ? *it : nullptr;
}

}  // namespace

namespace {

/// Appends one reading to cfg.settings: set(option, value, where it came from).
struct Setter {
  TrainingConfig& cfg;
  void operator()(std::string option, OptionValue value, std::string source) const {
    cfg.settings.push_back({std::move(option), std::move(value), std::move(source)});
  }
};

/// Interleaved pipeline: N layers per virtual stage is L / (pp · N) virtual stages per rank.
template <typename Set>
Expected<void> read_virtual_stages(const Reader& in, int64_t pp, Set& set) {
  if (in.has("num-layers-per-virtual-pipeline-stage")) {
    ACTMEM_TRY(per_stage, in.count("num-layers-per-virtual-pipeline-stage"));
    if (!in.has("num-layers"))
      return Error{ErrorKind::kConfig, "", fmt::format("{}: needs --num-layers to give the virtual stages",
                                                       in.where("num-layers-per-virtual-pipeline-stage"))};
    ACTMEM_TRY(layers, in.count("num-layers"));
    if (per_stage < 1 || layers % (pp * per_stage) != 0)
      return Error{ErrorKind::kConfig, "", fmt::format("{}: {} layers do not split into pp {} x {} layers per virtual stage",
                                                       in.where("num-layers-per-virtual-pipeline-stage"), layers, pp,
                                                       per_stage)};
    set("vpp", layers / (pp * per_stage),
        fmt::format("{} layers / (pp {} x {}) from {}", layers, pp, per_stage,
                    in.where("num-layers-per-virtual-pipeline-stage")));
  }
  if (in.has("num-virtual-stages-per-pipeline-rank")) {
    ACTMEM_TRY(v, in.count("num-virtual-stages-per-pipeline-rank"));
    set("vpp", v, in.where("num-virtual-stages-per-pipeline-rank"));
  }
  return {};
}

/// Megatron's own uneven splits. --account-for-embedding/loss-in-pipeline-split count the embedding
/// (loss) as a layer: n = (L + 1 [+ 1]) / pp layers per stage, the first (last) stage's first (last)
/// virtual stage building one fewer (transformer_block.py get_num_layers_to_build l.147-203 at
/// d98e8a64). Without interleaving that is first (last) stage layers n − 1; with it, and with a
/// --pipeline-model-parallel-layout string, a per-chunk split actmem does not build: refused by name.
template <typename Set>
Expected<void> read_split_accounting(const Reader& in, int64_t pp, Set& set) {
  if (in.has("pipeline-model-parallel-layout"))
    return Error{ErrorKind::kConfig, "pipeline_model_parallel_layout",
                 fmt::format("{}: a custom pipeline layout (layers per virtual stage) is not modelled; give an "
                             "uneven split as --first-stage-layers / --last-stage-layers (without interleaving)",
                             in.where("pipeline-model-parallel-layout"))};
  const bool embedding = in.has("account-for-embedding-in-pipeline-split");
  const bool loss = in.has("account-for-loss-in-pipeline-split");
  if (!embedding && !loss) return {};
  const char* flag = embedding ? "account-for-embedding-in-pipeline-split" : "account-for-loss-in-pipeline-split";
  ACTMEM_TRY(layers, in.count("num-layers"));
  const int64_t counted = layers + (embedding ? 1 : 0) + (loss ? 1 : 0);
  if (pp < 1 || counted % pp != 0)
    return Error{ErrorKind::kConfig, "pp", fmt::format("{}: {} layers with the embedding/loss counted do not split "
                                                       "over pp {} (Megatron asserts the same)",
                                                       in.where(flag), counted, pp)};
  if (in.has("num-layers-per-virtual-pipeline-stage") || in.has("num-virtual-stages-per-pipeline-rank"))
    return Error{ErrorKind::kConfig, "vpp",
                 fmt::format("{} with the interleaved schedule: the first (last) model chunk holds one layer fewer "
                             "than the others, a per-chunk split that is not modelled; drop the virtual stages or the "
                             "flag",
                             in.where(flag))};
  const int64_t per_stage = counted / pp;
  if (per_stage < 2)  // a first (last) stage of the embedding (loss) alone: no layer to give the split
    return Error{ErrorKind::kConfig, "pp", fmt::format("{}: {} layers with the embedding/loss counted leave a stage "
                                                       "without transformer layers over pp {}, which is not modelled",
                                                       in.where(flag), counted, pp)};
  if (embedding) set("first_stage_layers", per_stage - 1, fmt::format("{} layers / pp {} − 1 from {}", counted, pp,
                                                                       in.where("account-for-embedding-in-pipeline-split")));
  if (loss) set("last_stage_layers", per_stage - 1, fmt::format("{} layers / pp {} − 1 from {}", counted, pp,
                                                                 in.where("account-for-loss-in-pipeline-split")));
  return {};
}

/// TP, PP, CP, EP, SP, virtual stages, sequence and micro-batch; dp and micro-batches per step from the launcher.
Expected<void> read_parallel(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  // Parallel layout.
  int64_t tp = 1, pp = 1, cp = 1;
  const struct {
    std::string_view flag;
    std::string_view option;
    int64_t* keep;
  } counts[] = {{"tensor-model-parallel-size", "tp", &tp},   {"pipeline-model-parallel-size", "pp", &pp},
                {"context-parallel-size", "cp", &cp},        {"expert-model-parallel-size", "ep", nullptr},
                {"seq-length", "seq_len", nullptr},          {"micro-batch-size", "micro_batch", nullptr},
                {"microbatch-group-size-per-virtual-pipeline-stage", "microbatch_group", nullptr},
                {"expert-tensor-parallel-size", "etp", nullptr}};
  for (const auto& c : counts) {
    if (!in.has(c.flag)) continue;
    ACTMEM_TRY(v, in.count(c.flag));
    if (c.keep) *c.keep = v;
    set(std::string(c.option), v, in.where(c.flag));
  }
  if (in.has("sequence-parallel")) {
    if (tp > 1)
      set("sp", true, in.where("sequence-parallel"));
    else  // as Megatron does (arguments.py: "Disabling sequence parallelism because tensor model parallelism is disabled")
      cfg.warnings.push_back(fmt::format("{}: ignored with tp 1, as Megatron ignores it", in.where("sequence-parallel")));
  }

  if (auto vpp = read_virtual_stages(in, pp, set); !vpp) return vpp.error();
  if (pp > 1)
    if (auto split = read_split_accounting(in, pp, set); !split) return split.error();

  // Data parallelism: the launcher's GPUs over tp·pp·cp (Megatron's world size rule).
  std::optional<int64_t> dp;
  const char* nproc = in.has("nproc-per-node") ? "nproc-per-node" : "nproc_per_node";
  if (in.has(nproc)) {
    ACTMEM_TRY(per_node, in.count(nproc));
    int64_t nodes = 1;
    if (in.has("nnodes")) {
      ACTMEM_TRY(n, in.count("nnodes"));
      nodes = n;
    }
    const int64_t world = per_node * nodes;
    const std::string src = in.where(nproc) + (in.has("nnodes") ? ", " + in.where("nnodes") : "");
    const int64_t model_parallel = tp * pp > kMaxCount ? 0 : tp * pp * cp;  // 0: more GPUs than any launcher has
    if (model_parallel > 0 && world > 0 && world % model_parallel == 0) {  // 0 GPUs (--nproc_per_node 0): no dp
      dp = world / model_parallel;
      set("dp", *dp, fmt::format("{} GPUs / (tp {} x pp {} x cp {}) from {}", world, tp, pp, cp, src));
    } else {
      cfg.warnings.push_back(fmt::format("{}: {} GPUs cannot hold tp {} x pp {} x cp {}; data parallelism not read "
                                         "(give --dp)",
                                         src, world, tp, pp, cp));
    }
  }
  if (in.has("global-batch-size")) {
    ACTMEM_TRY(global, in.count("global-batch-size"));
    int64_t micro = 1;
    if (in.has("micro-batch-size")) {
      ACTMEM_TRY(m, in.count("micro-batch-size"));
      micro = m;
    }
    if (dp && *dp > 0 && micro > 0 && *dp <= kMaxCount && global % (micro * *dp) == 0) {
      set("num_micro_batches", global / (micro * *dp),
          fmt::format("global batch {} / (micro-batch {} x dp {}) from {}", global, micro, *dp,
                      in.where("global-batch-size")));
    } else {
      cfg.warnings.push_back(fmt::format("{}: micro-batches per step not read (needs the data-parallel size from "
                                         "torchrun's --nproc_per_node/--nnodes); actmem assumes as many as the "
                                         "pipeline holds",
                                         in.where("global-batch-size")));
    }
  }

  return {};
}

/// Recomputation, precision, the distributed optimizer, the attention backend, dropout.
/// The layer spec (--transformer-impl; Megatron-LM's default is transformer_engine, actmem's local:
/// read only when given, or implied by --fp8-format, which needs TE) and its core attention
/// (--attention-backend: unfused and local are eager, the others flash; the local spec is always
/// eager: its DotProductAttention takes no backend). Under the TE spec unfused is
/// TE's UnfusedDotProductAttention (language_module.py l.141-144 @d98e8a64, NVTE_UNFUSED_ATTN=1).
Expected<void> read_layer_spec(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  std::string impl;
  if (in.has("transformer-impl")) {
    ACTMEM_TRY(t, in.text("transformer-impl"));
    impl = t;
  } else if (in.has("fp8-format")) {
    impl = "transformer_engine";
  }
  if (impl == "local") {  // LocalSpecProvider.core_attention is DotProductAttention, whatever the backend
    set("attention", std::string("eager"),
        in.where("transformer-impl") + ": the local spec's core attention is Megatron's DotProductAttention "
                                       "(models/backends.py LocalSpecProvider), unfused");
  } else if (in.has("attention-backend")) {
    ACTMEM_TRY(b, in.text("attention-backend"));
    if (b == "local" && impl == "transformer_engine")  // arguments.py l.436-437 @d98e8a64
      return Error{ErrorKind::kConfig, "",
                   fmt::format("{}: Megatron refuses --attention-backend local without --spec local "
                               "(arguments.py l.436-437); under --transformer-impl transformer_engine use "
                               "--attention-backend unfused (TE's unfused attention)",
                               in.where("attention-backend"))};
    if (b == "unfused" || b == "local") set("attention", std::string("eager"), in.where("attention-backend"));
    else set("attention", std::string("flash"), in.where("attention-backend"));
  } else if (in.has("use-flash-attn")) {
    set("attention", std::string("flash"), in.where("use-flash-attn"));
  }
  if (in.has("transformer-impl"))
    set("transformer_impl", impl, in.where("transformer-impl"));
  else if (!impl.empty())
    set("transformer_impl", impl,
        in.where("fp8-format") + ": fp8 runs in TE modules (Megatron's default --transformer-impl)");
  else  // TransformerConfig.transformer_impl (transformer_config.py l.1314 at d98e8a64)
    set("transformer_impl", std::string("transformer_engine"), "Megatron's default (no --transformer-impl)");
  // --moe-grouped-gemm: TransformerEngineSpecProvider.grouped_mlp_modules builds TEGroupedMLP
  // (extensions/transformer_engine_spec_provider.py l.75-85); the local spec's SequentialMLP
  // ignores it (models/backends.py l.133-142), as does a model without experts.
  if (in.has("moe-grouped-gemm") && impl != "local" && in.has("num-experts"))
    set("moe_grouped_gemm", true, in.where("moe-grouped-gemm"));
  return {};
}

/// The optimizer: Megatron's distributed optimizer (ZeRO-1), its instances, Adam or SGD.
Expected<void> read_optimizer(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  // Megatron-FSDP (--use-megatron-fsdp, --use-custom-fsdp before 2025-08): its
  // --data-parallel-sharding-strategy (default optim_grads_params, arguments.py l.3190) shards the
  // optimizer state, then the gradients, then the parameters over dp·cp: ZeRO 1, 2, 3.
  const char* fsdp = in.has("use-megatron-fsdp") ? "use-megatron-fsdp" : in.has("use-custom-fsdp") ? "use-custom-fsdp" : nullptr;
  if (fsdp) {
    std::string strategy = "optim_grads_params", src = in.where(fsdp) + ": Megatron-FSDP's default sharding, "
                                                                         "optim_grads_params";
    if (in.has("data-parallel-sharding-strategy")) {
      ACTMEM_TRY(st, in.text("data-parallel-sharding-strategy"));
      strategy = st;
      src = in.where("data-parallel-sharding-strategy") + " (Megatron-FSDP)";
    }
    const int64_t stage = strategy == "no_shard" ? 0 : strategy == "optim" ? 1 : strategy == "optim_grads" ? 2 : 3;
    if (stage == 3 && strategy != "optim_grads_params")
      return Error{ErrorKind::kConfig, "", fmt::format("{}: unknown sharding strategy; Megatron takes no_shard, optim, "
                                                       "optim_grads or optim_grads_params",
                                                       in.where("data-parallel-sharding-strategy"))};
    set("zero", stage, src + ": optimizer state" + (stage >= 2 ? ", gradients" : "") + (stage >= 3 ? ", parameters" : "") +
                           (stage > 0 ? " sharded over dp" : " not sharded"));
  } else if (in.has("use-distributed-optimizer")) {
    set("zero", int64_t{1}, in.where("use-distributed-optimizer") + ": optimizer state and fp32 master sharded over dp");
  }
  if (in.has("num-distributed-optimizer-instances")) {  // parallel_state.py l.924-929: dp·cp / N per instance
    ACTMEM_TRY(n, in.count("num-distributed-optimizer-instances"));
    set("distributed_optimizer_instances", n, in.where("num-distributed-optimizer-instances"));
  }
  if (in.has("optimizer")) {
    ACTMEM_TRY(o, in.text("optimizer"));
    if (o == "adam") {
      set("optimizer", std::string("adamw"), in.where("optimizer"));
    } else if (o == "sgd") {
      set("optimizer", std::string("sgd"), in.where("optimizer"));
    } else if (o == "muon" || o == "dist_muon") {
      set("optimizer", std::string("muon"), in.where("optimizer"));
      // arguments.py l.1725-1736: muon + distributed optimizer (or dist_muon) is the layer-wise one.
      if (o == "dist_muon" || in.has("use-distributed-optimizer"))
        cfg.warnings.push_back(fmt::format(
            "{}: Megatron's layer-wise distributed optimizer gives each DP rank whole 2-D weights for Muon; "
            "counted as an even 1/dp share of their state",
            in.where("optimizer")));
      if (o == "dist_muon" && !in.has("use-distributed-optimizer"))
        set("zero", int64_t{1}, in.where("optimizer") + ": dist_muon is muon with the distributed optimizer");
    } else {
      cfg.warnings.push_back(fmt::format("{}: optimizer '{}' not modelled; counted as AdamW", in.where("optimizer"), o));
    }
  }
  return {};
}

/// The MoE dispatcher and TopKRouter's options, each read only when given (unset: the model's
/// routing), and Megatron's default aux-loss coefficient.
Expected<void> read_moe_router(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  if (in.has("moe-token-dispatcher-type")) {  // allgather (default) or alltoall; flex is refused
    ACTMEM_TRY(d, in.text("moe-token-dispatcher-type"));
    set("moe_token_dispatcher", d, in.where("moe-token-dispatcher-type"));
  }
  for (const char* flag : {"moe-router-score-function", "moe-router-load-balancing-type", "moe-router-dtype"})
    if (in.has(flag)) {
      ACTMEM_TRY(v, in.text(flag));
      std::string option(flag);
      std::replace(option.begin(), option.end(), '-', '_');
      set(option, v, in.where(flag));
    }
  for (const char* flag : {"moe-router-num-groups", "moe-router-group-topk"})
    if (in.has(flag)) {
      ACTMEM_TRY(v, in.count(flag));
      std::string option(flag);
      std::replace(option.begin(), option.end(), '-', '_');
      set(option, v, in.where(flag));
    }
  for (const char* flag : {"moe-router-topk-scaling-factor", "moe-aux-loss-coeff", "moe-z-loss-coeff"})
    if (in.has(flag)) {
      ACTMEM_TRY(v, in.real(flag));
      std::string option(flag);
      std::replace(option.begin(), option.end(), '-', '_');
      set(option, v, in.where(flag));
    }
  // arguments.py l.3536 @d98e8a64: --moe-aux-loss-coeff defaults to 0.0, and router.py
  // is_aux_loss_enabled (l.403-408) computes no aux loss then: a launch line without it has none.
  if (in.has("num-experts") && !in.has("moe-aux-loss-coeff"))
    set("moe_aux_loss_coeff", 0.0, "Megatron's default (no --moe-aux-loss-coeff): no aux loss");
  if (in.has("moe-router-enable-expert-bias"))
    set("moe_router_enable_expert_bias", true, in.where("moe-router-enable-expert-bias"));
  return {};
}

/// --recompute-granularity / -method / -num-layers.
Expected<void> read_recompute(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  // Recomputation: Megatron's uniform method checkpoints every N layers, block recomputes the first N.
  if (in.has("recompute-granularity")) {
    ACTMEM_TRY(g, in.text("recompute-granularity"));
    set("recompute", g, in.where("recompute-granularity"));
    if (g == "full" && in.has("recompute-num-layers")) {
      ACTMEM_TRY(n, in.count("recompute-num-layers"));
      std::string method = "uniform";
      if (in.has("recompute-method")) {
        ACTMEM_TRY(m, in.text("recompute-method"));
        method = m;
      }
      if (method == "block")
        set("recompute_layers", n, in.where("recompute-num-layers") + ", --recompute-method block");
      else if (method == "uniform")
        set("checkpoint_every", n, in.where("recompute-num-layers") + ", --recompute-method uniform");
      else
        return Error{ErrorKind::kConfig, "", fmt::format("{}: use uniform or block", in.where("recompute-method"))};
    }
  }
  return {};
}

/// --recompute-modules and its deprecated alias --moe-layer-recompute.
Expected<void> read_recompute_modules(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  std::string modules;  // nargs='*': one value per module
  if (in.has("recompute-modules"))
    for (const auto& v : in.values("recompute-modules")) modules += (modules.empty() ? "" : ",") + v;
  if (in.has("moe-layer-recompute")) {
    // Deprecated alias (transformer_config.py l.2014-2025): recompute_granularity becomes selective
    // and "moe" joins recompute_modules (default ["core_attn"]); refused with granularity full.
    const std::string src = in.where("moe-layer-recompute") + ": --recompute-modules moe (its deprecated alias)";
    if (in.has("recompute-granularity")) {
      ACTMEM_TRY(g, in.text("recompute-granularity"));
      if (g == "full")
        return Error{ErrorKind::kConfig, "",
                     fmt::format("{}: Megatron refuses --moe-layer-recompute with --recompute-granularity full "
                                 "(transformer_config.py l.2019-2022); drop one",
                                 in.where("moe-layer-recompute"))};
    } else {
      set("recompute", std::string("selective"), src);
    }
    if (!in.has("recompute-modules")) modules = "core_attn";
    bool has_moe = false;
    for (std::size_t start = 0; start <= modules.size();) {
      const std::size_t end = std::min(modules.find(',', start), modules.size());
      has_moe = has_moe || modules.substr(start, end - start) == "moe";
      start = end + 1;
    }
    if (!has_moe) modules += ",moe";
    set("recompute_modules", modules, src);
  } else if (in.has("recompute-modules")) {
    set("recompute_modules", modules, in.where("recompute-modules"));
  }
  return {};
}

/// --bf16 / --fp16 and the gradient dtype that follows from them.
void read_precision(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  // Precision: with bf16 Megatron accumulates and all-reduces gradients in fp32 (arguments.py sets
  // accumulate_allreduce_grads_in_fp32); fp16 keeps them in fp16 unless asked.
  std::string dtype = "fp32";
  std::string dtype_src = fmt::format("no --bf16/--fp16 ({})", in.name());
  if (in.has("bf16")) {
    dtype = "bf16";
    dtype_src = in.where("bf16");
  } else if (in.has("fp16")) {
    dtype = "fp16";
    dtype_src = in.where("fp16");
  }
  set("dtype", dtype, dtype_src);
  set("weight_dtype", dtype, dtype_src);
  if (dtype == "bf16" && in.has("grad-reduce-in-bf16"))
    set("grad_dtype", std::string("bf16"), in.where("grad-reduce-in-bf16"));
  else if (dtype == "bf16")  // echoed with its reason; the rule's home is default_grad_dtype (options.h)
    set("grad_dtype", std::string(dtype_name(default_grad_dtype(Framework::kMegatron, DType::kBF16))),
        dtype_src + ": Megatron accumulates bf16 gradients in fp32");
  else if (dtype == "fp16" && in.has("accumulate-allreduce-grads-in-fp32"))
    set("grad_dtype", std::string("fp32"), in.where("accumulate-allreduce-grads-in-fp32"));
}

/// TE fp8: --fp8-format turns it on; --fp8-recipe defaults to delayed (transformer_config.py l.594).
/// --fp8-param-gather (fp8 weights, te_rules.h): read with the per-tensor recipes, else warned.
Expected<void> read_fp8(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  std::string recipe = "delayed";
  if (in.has("fp8-format")) {
    std::string src = in.where("fp8-format") + ": Megatron's default --fp8-recipe delayed";
    if (in.has("fp8-recipe")) {
      ACTMEM_TRY(r, in.text("fp8-recipe"));
      recipe = r;
      src = in.where("fp8-recipe");
    }
    set("fp8", recipe, src);
  }
  if (!in.has("fp8-param-gather")) return {};
  const bool fsdp = in.has("use-megatron-fsdp") || in.has("use-custom-fsdp");  // its own fp8 shards
  if (in.has("fp8-format") && (recipe == "delayed" || recipe == "tensorwise") && !fsdp)
    set("fp8_param_gather", true, in.where("fp8-param-gather"));
  else
    cfg.warnings.push_back(fmt::format("{}: not modelled {}: fp8 primary weights in place of the bf16 ones",
                                       in.where("fp8-param-gather"),
                                       fsdp                    ? std::string("under Megatron-FSDP")
                                       : in.has("fp8-format") ? "with --fp8-recipe " + recipe
                                                              : std::string("without --fp8-format")));
  return {};
}

Expected<void> read_training(const Reader& in, TrainingConfig& cfg) {
  const Setter set{cfg};
  if (auto r = read_recompute(in, cfg); !r) return r.error();
  read_precision(in, cfg);
  if (auto opt = read_optimizer(in, cfg); !opt) return opt.error();
  if (auto spec = read_layer_spec(in, cfg); !spec) return spec.error();
  if (auto fp8 = read_fp8(in, cfg); !fp8) return fp8.error();
  if (auto router = read_moe_router(in, cfg); !router) return router.error();
  if (in.has("cpu-offloading-num-layers")) {  // Megatron's cpu_offloading follows from it (arguments.py l.1950)
    ACTMEM_TRY(n, in.count("cpu-offloading-num-layers"));
    if (n > 0) set("cpu_offloading_num_layers", n, in.where("cpu-offloading-num-layers"));
  }
  for (const auto& [flag, option] : {std::pair{"activation-func-fp8-input-store", "activation_func_fp8_input_store"},
                                     {"deterministic-mode", "deterministic"}})
    if (in.has(flag)) set(option, true, in.where(flag));
  if (in.has("disable-parameter-transpose-cache") && in.has("fp8-format"))  // te_rules.h; no effect without fp8
    set("disable_parameter_transpose_cache", true, in.where("disable-parameter-transpose-cache"));
  if (auto r = read_recompute_modules(in, cfg); !r) return r.error();
  // Megatron's dropout defaults are 0.1 (arguments.py); llama-style recipes set 0.
  for (const auto& [flag, option] : {std::pair{"hidden-dropout", "hidden_dropout"}, {"attention-dropout", "attention_dropout"}}) {
    if (in.has(flag)) {
      ACTMEM_TRY(p, in.real(flag));
      set(option, p, in.where(flag));
    } else {
      set(option, 0.1, fmt::format("Megatron's default (no --{})", flag));
    }
  }

  return {};
}

}  // namespace

Expected<TrainingConfig> read_megatron_args(std::string_view text, const std::string& name) {
  Vars vars;
  Reader in(arguments(text, &vars), name);
  TrainingConfig cfg;
  cfg.format = "megatron";
  // The environment the script sets that changes memory: PyTorch's cuBLAS workspace per handle.
  if (auto it = vars.find("CUBLAS_WORKSPACE_CONFIG"); it != vars.end() && it->second.size() == 1)
    cfg.settings.push_back({"cublas_workspace_config", it->second.front().text,
                            fmt::format("CUBLAS_WORKSPACE_CONFIG={} ({}:{})", it->second.front().text, name,
                                        it->second.front().line)});
  // Every argument must be one of Megatron-LM's (megatron_arguments.inc): an unknown one is a typo or
  // another script's, and actmem cannot place it.
  for (const auto& [flag, arg] : in.all()) {
    const ArgRule* rule = find_rule(flag);
    if (!rule) {
      std::vector<std::string_view> known;
      for (const auto& r : kRules) known.push_back(r.flag);
      auto guess = closest_name(flag, known);
      return Error{ErrorKind::kConfig, "",
                   fmt::format("{}: unknown Megatron-LM argument --{}{}; Megatron-LM has no such argument, so actmem "
                               "cannot tell whether it changes memory (remove it from the file, or give the job as "
                               "actmem flags)",
                               in.where(flag), flag, guess ? fmt::format(" (did you mean --{}?)", *guess) : "")};
    }
    if (rule->use == Use::kNotModelled)
      cfg.warnings.push_back(fmt::format("{}: not modelled: {}", in.where(flag), rule->why));
  }

  cfg.settings.push_back({"framework", std::string("megatron"), fmt::format("Megatron-LM ({})", name)});

  for (auto read : {read_parallel, read_training, read_megatron_model})
    if (auto ok = read(in, cfg); !ok) return ok.error();
  return cfg;
}

}  // namespace actmem
