// `vllm serve` command lines -> a ServeRequest (vllm_command.h): finding the command in a script,
// vLLM's argument parsing, the environment, the model path. What each argument read sets is
// vllm_command_read.cc.
#include "serve/vllm_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join
#include <nlohmann/json.hpp>

#include "config/shell_words.h"
#include "config/yaml_values.h"
#include "serve/vllm.h"
#include "serve/vllm_command_args.h"
#include "util/spellcheck.h"

namespace actmem {

namespace vllm_args {

const ArgRow kArgs[] = {
#define VLLM_ARG(flag, dest, kind, use, why) {flag, dest, Kind::kind, Use::use, why},
#include "serve/vllm_arguments.inc"
#undef VLLM_ARG
};

std::span<const ArgRow> rows() { return kArgs; }

std::string spelling(const ArgRow& r) {
  if (r.kind == Kind::kPositional) return std::string(r.flag);
  std::string long_name(r.dest);
  std::replace(long_name.begin(), long_name.end(), '_', '-');
  // A short alias (-tp, -q, -cc) is neither the dest's own --name nor its --no- form.
  const bool is_short = r.flag != long_name && r.flag != "no-" + long_name;
  return (is_short ? "-" : "--") + std::string(r.flag);
}

std::string Given::option() const { return key.empty() ? written : written + "." + key; }

std::string Given::source(const std::string& where) const {
  std::string text = option();
  if (!key.empty() && !values.empty()) return fmt::format("{}={} ({})", text, values.front(), where);
  for (const auto& v : values) text += " " + v;
  return fmt::format("{} ({})", text, where);
}

}  // namespace vllm_args

namespace {

using shell::Token;
using vllm_args::ArgRow;
using vllm_args::Given;
using vllm_args::Kind;
using vllm_args::Use;

std::string where_of(std::string_view name, int line) {
  return name.empty() ? fmt::format("line {}", line) : fmt::format("{}:{}", name, line);
}
/// A word's or an argument's place: its --config YAML's line, else the command file's.
template <typename T>
std::string where_of(std::string_view name, const T& t) {
  return where_of(t.file.empty() ? name : std::string_view(t.file), t.line);
}

Error config_error(std::string message) { return Error{ErrorKind::kConfig, "", std::move(message)}; }

// ---- Finding the command -------------------------------------------------------------------

struct Found {
  std::string entrypoint;
  bool serve = true;  // the serve subcommand (positional MODEL) or the api_server module (--model)
  int line = 0;
  std::vector<Token> args;
  std::vector<Token> env;  // NAME=VALUE words: the exports before it, then its own prefixes
};

bool is_assignment(std::string_view w) {
  const auto eq = w.find('=');
  return eq != std::string_view::npos && eq > 0 && shell::is_name(w.substr(0, eq));
}

/// A shell operator or redirection: the command's arguments end there.
bool ends_command(std::string_view w) {
  if (w == "|" || w == "||" || w == "&&" || w == ";" || w == "&") return true;
  const auto redirect = w.find_first_not_of("0123456789&");
  return redirect != std::string_view::npos && (w[redirect] == '>' || w[redirect] == '<') &&
         redirect == w.find_first_of("<>");
}

/// The words of a vLLM entry point at words[i] (0: none): `vllm serve`, `python -m
/// vllm.entrypoints.openai.api_server`, `python -m vllm.entrypoints.cli.main serve`.
std::size_t entry_words(const std::vector<Token>& w, std::size_t i, Found& f) {
  auto at = [&](std::size_t k) { return i + k < w.size() ? std::string_view(w[i + k].text) : std::string_view(); };
  const std::string_view program = at(0).substr(at(0).rfind('/') == std::string_view::npos ? 0 : at(0).rfind('/') + 1);
  if (program == "vllm" && at(1) == "serve") {
    f.entrypoint = "vllm serve";
    return 2;
  }
  if (!program.starts_with("python") || at(1) != "-m") return 0;
  if (at(2) == "vllm.entrypoints.openai.api_server") {
    f.entrypoint = fmt::format("{} -m vllm.entrypoints.openai.api_server", program);
    f.serve = false;
    return 3;
  }
  if (at(2) == "vllm.entrypoints.cli.main" && at(3) == "serve") {
    f.entrypoint = fmt::format("{} -m vllm.entrypoints.cli.main serve", program);
    return 4;
  }
  return 0;
}

/// The one vLLM command of the script, with the variables and exports written before it.
Expected<Found> find_command(std::string_view text, std::string_view name) {
  shell::Vars vars;
  std::vector<Token> exported;
  std::optional<Found> found;
  for (const auto& toks : shell::tokenize(text)) {
    const bool is_export = !toks.empty() && toks[0].text == "export";
    std::size_t k = is_export ? 1 : 0;
    std::vector<Token> assigned;
    for (; k < toks.size() && is_assignment(toks[k].text); ++k) {
      const auto eq = toks[k].text.find('=');
      std::string value;
      for (const auto& e : shell::expand({toks[k].text.substr(eq + 1), toks[k].line}, vars))
        value += (value.empty() ? "" : " ") + e.text;
      vars[toks[k].text.substr(0, eq)] = {{value, toks[k].line}};
      assigned.push_back({toks[k].text.substr(0, eq + 1) + value, toks[k].line});
    }
    if (is_export) exported.insert(exported.end(), assigned.begin(), assigned.end());
    if (is_export || k == toks.size()) continue;
    std::vector<Token> words;
    for (; k < toks.size(); ++k)
      for (auto& e : shell::expand(toks[k], vars)) words.push_back(std::move(e));
    for (std::size_t i = 0; i < words.size(); ++i) {
      Found f;
      const std::size_t n = entry_words(words, i, f);
      if (n == 0) {
        if (is_assignment(words[i].text)) assigned.push_back(words[i]);  // env NAME=VALUE vllm serve ...
        continue;
      }
      if (found)
        return config_error(fmt::format("{}: a second vLLM command (the first is at {}); actmem reads one, so keep "
                                        "one in the file",
                                        where_of(name, words[i].line), where_of(name, found->line)));
      f.line = words[i].line;
      f.env = exported;
      f.env.insert(f.env.end(), assigned.begin(), assigned.end());
      for (std::size_t j = i + n; j < words.size() && !ends_command(words[j].text); ++j) f.args.push_back(words[j]);
      found = std::move(f);
      break;
    }
  }
  if (!found)
    return config_error(fmt::format("{}: no vLLM command found (looked for `vllm serve MODEL ...`, `python -m "
                                    "vllm.entrypoints.openai.api_server --model X ...` and `python -m "
                                    "vllm.entrypoints.cli.main serve MODEL ...`)",
                                    name.empty() ? "the text" : name));
  return *found;
}

// ---- vLLM's argument parsing (vllm/utils/argparse_utils.py, then argparse) --------------------

/// argparse reads a word as an option when it starts with '-', is not a negative number (the
/// parser has no option that looks like one) and has no space.
bool is_option_word(std::string_view w) {
  if (w.size() < 2 || w[0] != '-' || w.find(' ') != std::string_view::npos) return false;
  const std::string_view rest = w.substr(1);
  const bool number = rest.find_first_not_of("0123456789.") == std::string_view::npos &&
                      rest.find_first_of("0123456789") != std::string_view::npos &&
                      std::count(rest.begin(), rest.end(), '.') <= 1;
  return !number;
}

/// FlexibleArgumentParser's first rewrite (AP:245-281): in `serve`, the line's first --model moves to
/// the positional slot, before a --config file is expanded (so a YAML's `model:` stays an option).
void move_model(std::vector<Token>& in, bool serve, std::vector<std::string>& notes, std::string_view name) {
  if (!serve) return;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const bool bare = in[i].text == "--model" && i + 1 < in.size();
    if (!bare && !in[i].text.starts_with("--model=")) continue;
    Token model{bare ? in[i + 1].text : in[i].text.substr(8), in[i].line, in[i].file};
    notes.push_back(fmt::format("--model {} ({}): vLLM moves it to `serve MODEL` (deprecated there; "
                                "vllm/utils/argparse_utils.py)",
                                model.text, where_of(name, model)));
    in.erase(in.begin() + static_cast<std::ptrdiff_t>(i), in.begin() + static_cast<std::ptrdiff_t>(i + (bare ? 2 : 1)));
    in.insert(in.begin(), model);
    return;
  }
}

/// The rewrites after --config (AP:300-356): '_' becomes '-' in long names (up to a '.', before
/// '='); --help=X is --help; -O<n>, -O=<n> and -O <n> are --optimization-level <n>.
std::vector<Token> normalise(const std::vector<Token>& in) {
  std::vector<Token> out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    Token t = in[i];
    if (t.text.starts_with("--")) {
      const std::size_t end = std::min(t.text.find('.'), t.text.find('='));
      std::replace(t.text.begin(), t.text.begin() + static_cast<std::ptrdiff_t>(std::min(end, t.text.size())), '_', '-');
      if (t.text.starts_with("--help=")) t.text = "--help";
    } else if (t.text.starts_with("-O") && t.text.size() > 2) {
      out.push_back({"--optimization-level", t.line, t.file});
      t.text = t.text.substr(t.text[2] == '=' ? 3 : 2);
    } else if (t.text == "-O" && i + 1 < in.size() && in[i + 1].text.size() == 1 && in[i + 1].text[0] >= '0' &&
               in[i + 1].text[0] <= '3') {
      t.text = "--optimization-level";
    }
    out.push_back(std::move(t));
  }
  return out;
}

/// The row of an option as written: exact, else argparse's matches (allow_abbrev): a unique prefix
/// of a long option; for one dash, `-X` with its value attached (`-qfp8`) or a prefix (`-t` is -tp).
Expected<const ArgRow*> match_option(const std::string& option, std::string& attached, const std::string& where) {
  std::vector<const ArgRow*> hits;
  for (const auto& r : vllm_args::rows()) {
    if (r.kind == Kind::kPositional) continue;
    const std::string s = vllm_args::spelling(r);
    if (s == option) return &r;
    if (s.starts_with(option)) hits.push_back(&r);
  }
  if (!option.starts_with("--") && option.size() > 2) {
    for (const auto& r : vllm_args::rows())
      if (r.kind != Kind::kPositional && vllm_args::spelling(r) == option.substr(0, 2)) {
        hits.push_back(&r);
        attached = option.substr(2);
      }
  }
  if (hits.size() == 1) return hits.front();
  if (hits.size() > 1) {
    std::vector<std::string> names;
    for (const auto* h : hits) names.push_back(vllm_args::spelling(*h));
    return config_error(fmt::format("{} ({}): ambiguous, vLLM refuses it: it could be {}; write the option out",
                                    option, where, fmt::join(names, ", ")));
  }
  std::vector<std::string> spelled;
  for (const auto& r : vllm_args::rows())
    if (r.kind != Kind::kPositional) spelled.push_back(vllm_args::spelling(r));
  const std::vector<std::string_view> known(spelled.begin(), spelled.end());
  auto guess = closest_name(option, known);
  return config_error(fmt::format("{} ({}): not an argument of vLLM 0.19's `vllm serve`{}; actmem cannot tell what "
                                  "it does to memory (remove it, or give the job as actmem flags)",
                                  option, where, guess ? fmt::format(" (did you mean {}?)", *guess) : ""));
}

/// The values an option takes from the words after it, by its kind (argparse's nargs).
Expected<void> take_values(Given& g, const std::vector<Token>& w, std::size_t& i, std::optional<std::string> explicit_value,
                           const std::string& where) {
  const auto next_is_value = [&] { return i + 1 < w.size() && !is_option_word(w[i + 1].text); };
  switch (g.row->kind) {
    case Kind::kFlag:
    case Kind::kNegFlag:
      if (explicit_value)
        return config_error(fmt::format("{}={} ({}): {} takes no value (vLLM: ignored explicit argument)", g.written,
                                        *explicit_value, where, g.written));
      return {};
    case Kind::kValue:
      if (explicit_value) g.values.push_back(*explicit_value);
      else if (next_is_value()) g.values.push_back(w[++i].text);
      else return config_error(fmt::format("{} ({}): expected one value", g.written, where));
      return {};
    case Kind::kOptionalValue:
      if (explicit_value) g.values.push_back(*explicit_value);
      else if (next_is_value()) g.values.push_back(w[++i].text);
      return {};
    case Kind::kValues:
      if (explicit_value) g.values.push_back(*explicit_value);
      while (!explicit_value && next_is_value()) g.values.push_back(w[++i].text);
      if (g.values.empty()) return config_error(fmt::format("{} ({}): expected at least one value", g.written, where));
      return {};
    case Kind::kPositional:
      break;
  }
  return {};
}

struct Parsed {
  std::vector<Given> given;         // in argparse's order: the dotted sub-keys last, as vLLM appends them
  std::optional<Token> positional;  // MODEL
};

Expected<Parsed> parse_arguments(const std::vector<Token>& w, std::string_view name) {
  Parsed p;
  std::vector<Given> dotted;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::string& text = w[i].text;
    const std::string where = where_of(name, w[i]);
    if (!is_option_word(text)) {
      if (p.positional)
        return config_error(fmt::format("{} ({}): a second positional argument after the model {}; vLLM refuses it "
                                        "(unrecognized arguments)",
                                        text, where, p.positional->text));
      p.positional = w[i];
      continue;
    }
    const auto eq = text.find('=');
    std::string option = text.substr(0, eq);
    std::optional<std::string> explicit_value;
    if (eq != std::string::npos) explicit_value = text.substr(eq + 1);
    Given g;
    g.line = w[i].line;
    g.file = w[i].file;
    const auto dot = option.find('.');
    if (dot != std::string::npos) {  // NAME.k1.k2=VALUE: one key of NAME's JSON (AP:302-356)
      g.key = option.substr(dot + 1);
      option.resize(dot);
      if (!explicit_value && i + 1 < w.size()) explicit_value = w[++i].text;
      if (!explicit_value) return config_error(fmt::format("{} ({}): expected a value", text, where));
    }
    std::string attached;
    auto row = match_option(option, attached, where);
    if (!row) return row.error();
    g.row = *row;
    g.written = option;
    if (!attached.empty()) {
      g.written = vllm_args::spelling(**row);
      explicit_value = attached;
    }
    if (!g.key.empty()) {
      g.values.push_back(*explicit_value);
      dotted.push_back(std::move(g));
      continue;
    }
    if (auto ok = take_values(g, w, i, explicit_value, where); !ok) return ok.error();
    p.given.push_back(std::move(g));
  }
  p.given.insert(p.given.end(), dotted.begin(), dotted.end());
  return p;
}

/// The last of each destination (argparse: the last one wins; --x then --no-x is --no-x), in order.
std::vector<Given> last_of_each(std::vector<Given> given) {
  std::vector<Given> out;
  for (std::size_t i = 0; i < given.size(); ++i) {
    const bool later = std::any_of(given.begin() + static_cast<std::ptrdiff_t>(i) + 1, given.end(), [&](const Given& g) {
      return g.row->dest == given[i].row->dest && g.key == given[i].key;
    });
    if (!later) out.push_back(std::move(given[i]));
  }
  return out;
}

// ---- The environment (validation/notes/vllm_019_arguments.md; vllm/envs.py) -----------------

struct EnvRule {
  std::string_view name;  // a trailing '*' matches a prefix
  std::string_view default_value;  // empty: any value is other than the default
  std::string_view effect;
};

constexpr EnvRule kEnvRules[] = {
    {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "0",
     "1 subtracts the profiled CUDA-graph memory from the KV budget (envs.py:1693-1695; gpu_worker.py:376-381)"},
    {"VLLM_USE_FLASHINFER_SAMPLER", "", "FlashInfer's sampler instead of the native top-k/top-p: another warm-up peak"},
    {"VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", "", "FlashInfer attention and MLA workspace (394 MiB by default)"},
    {"VLLM_MLA_DISABLE", "0", "MLA off: the KV cache holds full K/V heads"},
    {"VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0",
     "--max-model-len above the model's own limit, which actmem refuses as vLLM does by default"},
    {"VLLM_PP_LAYER_PARTITION", "", "uneven layers per pipeline rank"},
    {"VLLM_USE_V2_MODEL_RUNNER", "0", "another model runner (other buffers and profile)"},
    {"VLLM_ALLREDUCE_USE_SYMM_MEM", "1", "TP all-reduce through torch symmetric memory (its buffers)"},
    {"VLLM_USE_NCCL_SYMM_MEM", "0", "NCCL's symmetric-memory allocator (all-reduce buffers)"},
    {"VLLM_ALLREDUCE_USE_FLASHINFER", "0", "FlashInfer all-reduce (its workspace)"},
    {"VLLM_DISABLE_PYNCCL", "0", "no pynccl communicator (its buffers)"},
    {"VLLM_DEEPEP_BUFFER_SIZE_MB", "1024", "DeepEP NVL/RDMA buffers (EP all-to-all)"},
    {"VLLM_MOE_DP_CHUNK_SIZE", "256", "MoE DP/EP chunk buffers"},
    {"VLLM_ENABLE_MOE_DP_CHUNK", "1", "MoE DP/EP chunk buffers"},
    {"VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "163840", "NVFP4 MoE blockscale buffer"},
    {"VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", "512", "sparse-MLA indexer prefill logits"},
    {"VLLM_USE_DEEP_GEMM", "1", "GEMM kernel choice (workspaces, weight layout)"},
    {"VLLM_MOE_USE_DEEP_GEMM", "", "MoE kernel choice (workspaces, weight layout)"},
    {"VLLM_USE_FLASHINFER_MOE_*", "0", "MoE kernel choice (workspaces, weight layout)"},
    {"VLLM_MXFP4_USE_MARLIN", "", "MXFP4 kernel choice (weight layout)"},
    {"VLLM_BATCH_INVARIANT", "0", "batch-invariant kernels (and no symmetric-memory all-reduce)"},
    {"VLLM_WEIGHT_OFFLOADING_DISABLE_UVA", "0", "how --cpu-offload-gb weights are reached"},
    {"VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY", "0", "how --cpu-offload-gb weights are reached"},
    {"VLLM_USE_SIMPLE_KV_OFFLOAD", "0", "the KV offload path"},
    {"PYTORCH_CUDA_ALLOC_CONF", "", "the caching allocator's behaviour (reserved against allocated memory)"},
};

/// The rule for a variable, or null when it has no memory effect (CUDA_VISIBLE_DEVICES, HF_TOKEN, ...).
const EnvRule* env_rule(std::string_view var) {
  const auto rule = std::find_if(std::begin(kEnvRules), std::end(kEnvRules), [&](const EnvRule& r) {
    return r.name.ends_with('*') ? var.starts_with(r.name.substr(0, r.name.size() - 1)) : var == r.name;
  });
  return rule == std::end(kEnvRules) ? nullptr : &*rule;
}

/// The memory-relevant variables kept; those set off their default are warnings (not modelled).
void read_env(const std::vector<Token>& env, std::string_view name, VllmCommand& cmd) {
  std::map<std::string, VllmEnv> last;  // a prefix after an export wins
  std::vector<std::string> order;
  for (const auto& t : env) {
    const auto eq = t.text.find('=');
    const std::string var = t.text.substr(0, eq);
    if (!env_rule(var)) continue;
    if (!last.count(var)) order.push_back(var);
    last[var] = {var, t.text.substr(eq + 1), fmt::format("{} ({})", t.text, where_of(name, t.line))};
  }
  for (const auto& var : order) {
    const VllmEnv& e = last[var];
    cmd.env.push_back(e);
    const EnvRule* rule = env_rule(var);
    if (e.value != rule->default_value) cmd.warnings.push_back(fmt::format("{}: not modelled: {}", e.source, rule->effect));
  }
}

// ---- The model ------------------------------------------------------------------------------

/// The config.json the model names: a file, or a folder holding config.json; relative against base_dir.
Expected<void> resolve_model(VllmCommand& cmd, std::string_view base_dir, bool model_given) {
  namespace fs = std::filesystem;
  if (cmd.model.empty()) {
    if (model_given) return {};
    return config_error(fmt::format("{}: no model on the line (vLLM's default is the hub id Qwen/Qwen3-0.6B); give "
                                    "the path of its config.json on the line, or --model beside --from",
                                    cmd.entrypoint));
  }
  const fs::path written(cmd.model);
  const fs::path path =
      (written.is_relative() && !base_dir.empty() ? fs::path(base_dir) / written : written).lexically_normal();
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    cmd.model_config = path.string();
  } else if (fs::is_directory(path, ec)) {
    if (!fs::is_regular_file(path / "config.json", ec))
      return config_error(fmt::format("{}: the folder {} has no config.json", cmd.model_source, path.string()));
    cmd.model_config = (path / "config.json").string();
  } else if (model_given) {
    return {};
  } else if (cmd.model.find('$') != std::string::npos) {
    return config_error(fmt::format("{}: a shell variable the file does not set; set it in the file, or give --model "
                                    "beside --from",
                                    cmd.model_source));
  } else if (written.is_relative() && !cmd.model.starts_with(".") &&
             std::count(cmd.model.begin(), cmd.model.end(), '/') <= 1) {  // org/name, as the hub names models
    return config_error(fmt::format("{}: {} is a Hugging Face hub id with no local folder of that name ({}); actmem "
                                    "does not download models: give the path of the model's config.json (or of a "
                                    "folder holding it) on the line, or --model PATH beside --from",
                                    cmd.model_source, cmd.model, path.string()));
  } else {
    return config_error(fmt::format("{}: no such file or folder ({})", cmd.model_source, path.string()));
  }
  return {};
}

/// The model of the line: under `serve` the positional MODEL, which entrypoints/cli/serve.py:45
/// copies over any --model; under api_server --model (its positional is accepted and never read).
void take_model(const Found& f, const Parsed& p, std::string_view name, VllmCommand& cmd) {
  if (f.serve && p.positional) {
    cmd.model = p.positional->text;
    cmd.model_source = fmt::format("{} {} ({})", f.entrypoint, cmd.model,
                                   p.positional->file.empty() ? where_of(name, f.line) : where_of(name, *p.positional));
  } else if (p.positional) {
    cmd.warnings.push_back(fmt::format("{} ({}): the api_server never reads a positional model; it serves --model",
                                       p.positional->text, where_of(name, *p.positional)));
  }
  for (const auto& g : p.given) {
    if (g.row->dest != "model") continue;
    if (f.serve && p.positional) {
      cmd.notes.push_back(fmt::format("{}: vLLM serves the positional model {} instead (entrypoints/cli/serve.py:45)",
                                      g.source(where_of(name, g)), p.positional->text));
      continue;
    }
    cmd.model = g.values.front();
    cmd.model_source = g.source(where_of(name, g));
  }
}

/// `--config FILE` (exactly that word, as vLLM looks for it): the YAML's arguments in its place,
/// ahead of the rest so that the line's own arguments win (argparse_utils.py:298-299, :443-523).
Expected<void> expand_config(std::vector<Token>& args, std::string_view base_dir, std::string_view name,
                             std::vector<std::string>& notes) {
  const auto is_config = [](const Token& t) { return t.text == "--config"; };
  const auto n = std::count_if(args.begin(), args.end(), is_config);
  if (n == 0) return {};
  const auto at = std::find_if(args.begin(), args.end(), is_config);
  if (n > 1) return config_error(fmt::format("--config ({}): more than one config file; vLLM refuses it", where_of(name, *at)));
  if (at + 1 == args.end())
    return config_error(fmt::format("--config ({}): no config file follows it; vLLM refuses it", where_of(name, *at)));
  const std::string file = (at + 1)->text;
  std::filesystem::path path(file);
  if (path.is_relative() && !base_dir.empty()) path = std::filesystem::path(base_dir) / path;
  auto words = vllm_config_arguments(path.string(), file);
  if (!words) return words.error();
  notes.push_back(fmt::format("--config {} ({}): its {} words read in its place, before the line's own arguments, "
                              "which win (vllm/utils/argparse_utils.py:443-523)",
                              file, where_of(name, *at), words->size()));
  args.erase(at, at + 2);
  // Ahead of everything but a leading positional MODEL (vLLM keeps `serve MODEL` first).
  const auto insert = !args.empty() && !is_option_word(args.front().text) ? 1 : 0;
  args.insert(args.begin() + insert, words->begin(), words->end());
  return {};
}

}  // namespace

Expected<VllmCommand> read_vllm_command(std::string_view text, std::string_view base_dir, std::string_view name,
                                        bool model_given) {
  auto found = find_command(text, name);
  if (!found) return found.error();
  VllmCommand cmd;
  cmd.entrypoint = found->entrypoint;
  read_env(found->env, name, cmd);
  move_model(found->args, found->serve, cmd.notes, name);
  if (auto ok = expand_config(found->args, base_dir, name, cmd.notes); !ok) return ok.error();
  auto parsed = parse_arguments(normalise(found->args), name);
  if (!parsed) return parsed.error();
  take_model(*found, *parsed, name, cmd);
  if (auto ok = resolve_model(cmd, base_dir, model_given); !ok) return ok.error();
  vllm_args::ReadState state;
  state.model_given = model_given;
  for (const auto& g : last_of_each(std::move(parsed->given))) {
    const std::string where = where_of(name, g);
    if (g.row->dest == "model") continue;
    if (g.row->use == Use::kNoEffect) {
      if (g.row->dest == "config")
        cmd.warnings.push_back(fmt::format("{}: vLLM reads a config file only as the two words `--config FILE` "
                                           "(vllm/utils/argparse_utils.py:298); written so, its arguments are not read",
                                           g.source(where)));
      else
        cmd.ignored.push_back(fmt::format("{} ({})", g.option(), where));
    } else if (g.row->use == Use::kNotModelled) {
      cmd.warnings.push_back(fmt::format("{}: not modelled: {}", g.source(where), g.row->why));
    } else if (auto ok = vllm_args::read_argument(g, where, cmd, state); !ok) {
      return ok.error();
    }
  }
  vllm_args::finish(cmd, state);
  return cmd;
}

Expected<VllmCommand> load_vllm_command(const std::string& path, bool model_given) {
  std::ifstream f(path);
  if (!f) return config_error(fmt::format("{}: cannot read the file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return read_vllm_command(ss.str(), std::filesystem::path(path).parent_path().string(), path, model_given);
}

Expected<void> apply_vllm_overrides(VllmCommand& command, const std::vector<OptionOverride>& overrides,
                                    std::string_view origin) {
  for (const auto& o : overrides) {
    if (auto ok = set_serve_option(command.request, o.option, o.value); !ok)
      return Error{ok.error().kind, o.option, fmt::format("{} ({}): {}", origin, o.given, ok.error().message)};
    if (o.option == "context_len") command.context_from_model = false;
    for (auto& s : command.settings) {
      if (s.option != o.option) continue;
      s.source = fmt::format("{} ({}), over {} <- {}", origin, o.given, describe_option_value(s.value), s.source);
      s.value = o.value;
    }
  }
  return {};
}

Expected<void> apply_vllm_model_context(VllmCommand& command, const ModelSpec& model) {
  if (!command.context_from_model) return {};
  const int64_t derived = vllm_derived_max_len(model);
  if (derived <= 0)
    return Error{ErrorKind::kConfig, "context_len",
                 fmt::format("{}: no --max-model-len, and {} gives no max_position_embeddings to derive vLLM's from; "
                             "give @context_len",
                             command.model_source, model.name)};
  command.request.context_len = derived;
  command.settings.push_back(
      {"context_len", derived,
       fmt::format("the model's max_model_len (no --max-model-len: vLLM derives it from config.json{}, "
                   "config/model.py:182)",
                   model.derived_max_len > 0 ? ", max_position_embeddings x its RoPE scaling factor" : "")});
  command.context_from_model = false;
  return {};
}

nlohmann::json vllm_command_json(const VllmCommand& c) {
  nlohmann::json settings = nlohmann::json::array();
  for (const auto& s : c.settings) {
    nlohmann::json value;
    std::visit([&](const auto& v) { value = v; }, s.value);
    settings.push_back({{"option", s.option}, {"value", value}, {"source", s.source}});
  }
  nlohmann::json env = nlohmann::json::array();
  for (const auto& e : c.env) env.push_back({{"name", e.name}, {"value", e.value}, {"source", e.source}});
  return {{"format", "vllm"},     {"entrypoint", c.entrypoint}, {"model", c.model},
          {"model_source", c.model_source}, {"model_config", c.model_config}, {"settings", settings},
          {"env", env},           {"ignored", c.ignored},       {"warnings", c.warnings},
          {"notes", c.notes}};
}

}  // namespace actmem
