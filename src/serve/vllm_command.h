// A `vllm serve` command line (vLLM v0.19.0) as input: `actmem serve --from FILE` reads the line a
// user already runs and serves the estimate it describes. The arguments are vLLM's own, parsed as
// its FlexibleArgumentParser does (validation/notes/vllm_019_arguments.md): `--flag value` and
// `--flag=value`, '_' for '-' in long names, unique prefixes (`--max-num-seq`), short aliases
// (-tp -pp -dp -q ...), nargs="+" lists, --no- forms, dotted JSON sub-keys (-cc.cudagraph_mode=FULL),
// -O<n>; the last of a repeated argument wins. Every argument is one of src/serve/vllm_arguments.inc:
// the read ones fill a ServeRequest (each with a setting that says where it came from), the ones
// without memory effect are listed in `ignored`, the ones whose memory effect actmem does not model
// become warnings; an unknown one is an error with "did you mean".
//
//   auto cmd = read_vllm_command("vllm serve llama --tensor-parallel-size 2 --max-model-len 8k", "/models").value();
//   cmd.request.tp == 2; cmd.request.context_len == 8000; cmd.model_config == "/models/llama/config.json"
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/training_config.h"  // ConfigSetting: {option, value, source}
#include "model/model_spec.h"
#include "serve/serve_request.h"
#include "actmem/expected.h"

namespace actmem {

/// An environment variable the command runs with (an `export` line or a `KEY=VALUE` prefix) that
/// changes vLLM's start-up memory (the notes' list; vllm/envs.py).
struct VllmEnv {
  std::string name;
  std::string value;
  std::string source;  // "VLLM_USE_FLASHINFER_SAMPLER=1 (serve.sh:2)"
};

struct VllmCommand {
  std::string entrypoint;    // "vllm serve", "python -m vllm.entrypoints.openai.api_server", ...
  std::string model;         // as written (the positional MODEL or --model)
  std::string model_source;  // "vllm serve MODEL (serve.sh:3)"
  std::string model_config;  // the config.json it names (a folder's config.json; relative: against base_dir)
  ServeRequest request;      // vllm_version "0.19"; every field the line sets has a setting
  bool context_from_model = false;  // no --max-model-len (or -1/auto): vLLM derives it from the model
  std::vector<ConfigSetting> settings;  // serve options read: {"tp", 2, "--tensor-parallel-size 2 (serve.sh:3)"}
  std::vector<VllmEnv> env;
  std::vector<std::string> ignored;   // arguments without memory effect, as written, without values
  std::vector<std::string> warnings;  // memory effects not modelled, each naming its argument
  std::vector<std::string> notes;     // read, with no effect on the estimate, and why
};

/// The one `vllm serve` command of `text` (a script or a single line): `vllm serve MODEL ...`,
/// `python -m vllm.entrypoints.openai.api_server --model X ...` or `python -m
/// vllm.entrypoints.cli.main serve MODEL ...`, after any KEY=VALUE prefixes; `export` lines and
/// shell variables as config/shell_words.h reads them. `name` labels the sources ("serve.sh:3";
/// empty: "line 3"). The model must be a config.json or a folder holding one (a Hugging Face hub id
/// is an error asking for the path) unless `model_given` (the front end has its own model).
Expected<VllmCommand> read_vllm_command(std::string_view text, std::string_view base_dir, std::string_view name = "",
                                        bool model_given = false);

/// read_vllm_command on a file: its folder is the base for relative model paths, its path the name.
Expected<VllmCommand> load_vllm_command(const std::string& path, bool model_given = false);

/// Options given beside the line (flags after --from, keywords beside from_config=) win over the
/// line's: each is set on the request, and a setting it replaces takes its value and the source
/// "<origin> (<given>), over <value> <- <the line's source>" (mark_overrides() for training configs).
/// An override of context_len clears context_from_model. Errors name the override.
Expected<void> apply_vllm_overrides(VllmCommand& command, const std::vector<OptionOverride>& overrides,
                                    std::string_view origin);

/// With context_from_model: vLLM's max_model_len when the line gives none, the model's derived
/// length (max_position_embeddings, x the RoPE scaling factor where vLLM applies it), set on the
/// request with its setting. Example: Llama-3.1-8B-Instruct: context_len 131072.
Expected<void> apply_vllm_model_context(VllmCommand& command, const ModelSpec& model);

/// The echo, as estimate's "config": {format "vllm", entrypoint, model, model_config, settings:
/// [{option, value, source}], env, ignored, warnings, notes}.
nlohmann::json vllm_command_json(const VllmCommand& command);

}  // namespace actmem
