#include "serve_cli.h"

#include <charconv>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "api/library.h"
#include "cli.h"  // flag_of: how the CLI spells a library option

namespace actmem::cli {

namespace {

/// Flags as typed: the library's ServeRequest (serve_request.h), resolved against the model by serve().
struct ServeFlags {
  std::string model;
  ServeRequest request;
  bool json = false;
  bool explain = false;
  // --generate: HF generate() instead of a serving engine (serve/generate.h).
  bool generate = false;
  int64_t prompt_len = 0;
  int64_t new_tokens = 0;
  CLI::Option* attention = nullptr;
  CLI::Option* context_len = nullptr;
  std::string from;             // a `vllm serve` command line or script (serve/vllm_command.h)
  const CLI::App* app = nullptr;  // to tell the flags given from their defaults
};

/// `actmem serve --generate`: the request's batch, dtype and attention; its own prompt and new tokens.
Expected<GenerateReport> run_generate(const ServeFlags& f, std::string& model_name) {
  if (!f.from.empty())
    return Error{"--from reads a `vllm serve` line; --generate is HF generate(), not a serving engine: drop one"};
  if (f.model.empty()) return Error{"--model is required (a preset name or a config.json path)"};
  if (f.context_len->count() > 0)
    return Error{"--context-len does not apply to --generate; give --prompt-len and --new-tokens"};
  if (f.request.tp != 1) return Error{"--generate runs on one GPU; drop --tp"};
  auto model = load_model(f.model);
  if (!model) return Error{fmt::format("--model {}: {}", f.model, model.error().message)};
  model_name = model->name;
  GenerateOptions o;
  o.prompt_len = f.prompt_len;
  o.new_tokens = f.new_tokens;
  o.batch = f.request.batch;
  if (f.request.dtype != "auto") {
    auto d = parse_dtype(f.request.dtype);
    if (!d) return Error{fmt::format("--dtype {}: {}", f.request.dtype, d.error().message)};
    o.dtype = *d;
  }
  if (f.attention->count() > 0) {
    auto a = kGenerateAttentionNames.parse(f.request.attention);
    if (!a) return Error{fmt::format("--attention {}: use eager, sdpa or flash", f.request.attention)};
    o.attention = *a;
  }
  return estimate_generate(*model, o);
}

/// The serve flags given explicitly, as overrides of a --from line's settings (a flag given wins).
std::vector<OptionOverride> given_flags(const CLI::App& sub) {
  std::vector<OptionOverride> out;
  for (const auto& info : serve_options()) {
    const std::string flag = flag_of(std::string(info.name));
    const CLI::Option* o = sub.get_option_no_throw(flag);
    if (!o || o->count() == 0) continue;
    if (info.kind == OptionKind::kFlag) {
      out.push_back({std::string(info.name), true, flag});
      continue;
    }
    const std::string text = o->as<std::string>();
    OptionValue value = text;  // text and sizes as typed; counts and reals as numbers (CLI11 checked them)
    int64_t n = 0;
    if (info.kind == OptionKind::kCount && std::from_chars(text.data(), text.data() + text.size(), n).ec == std::errc{})
      value = n;
    if (info.kind == OptionKind::kReal) value = std::strtod(text.c_str(), nullptr);
    out.push_back({std::string(info.name), value, flag + " " + text});
  }
  return out;
}

/// --from FILE, echoed on stderr as estimate --from echoes its file: the settings read, with where
/// each came from (or the flag that replaced it), the environment, notes, and the warnings.
void print_from(const ServeFlags& f, const VllmCommand& c, const std::string& model) {
  fmt::print(stderr, "actmem: read from {} (vllm):\n", f.from);
  if (f.model.empty()) fmt::print(stderr, "  --model {}  <- {}\n", model, c.model_source);
  for (const auto& s : c.settings)
    fmt::print(stderr, "  {} {}  <- {}\n", flag_of(s.option), describe_option_value(s.value), s.source);
  for (const auto& e : c.env) fmt::print(stderr, "  environment: {}\n", e.source);
  for (const auto& n : c.notes) fmt::print(stderr, "  note: {}\n", n);
  if (!c.ignored.empty()) fmt::print(stderr, "  no memory effect: {}\n", fmt::join(c.ignored, ", "));
  if (!f.model.empty() && !c.model.empty())
    fmt::print(stderr, "actmem: warning: the model comes from --model; {} is not used\n", c.model_source);
  for (const auto& w : c.warnings) fmt::print(stderr, "actmem: warning: {}\n", w);
}

/// The flags' job, or with --from the line's under the flags given; `from` receives the line read.
Expected<ServeResult> run_serve(const ServeFlags& f, std::optional<VllmCommand>& from) {
  if (f.model.empty() && f.from.empty())
    return Error{"--model is required (a preset name or a config.json path), or --from FILE (a `vllm serve` line)"};
  if (f.from.empty() && f.context_len->count() == 0)
    return Error{"--context-len is required (tokens per sequence), or use --generate"};
  std::string name = f.model;
  if (!f.from.empty()) {
    auto read = load_vllm_command(f.from, !f.model.empty());
    if (!read) return read.error();
    if (auto ok = apply_vllm_overrides(*read, given_flags(*f.app), "the command line"); !ok) return ok.error();
    from = std::move(*read);
    if (name.empty()) name = from->model_config;
  }
  auto model = load_model(name);
  if (!model)
    return Error{fmt::format("{}: {}", f.model.empty() ? from->model_source : "--model " + f.model, model.error().message)};
  if (!from) return serve(*model, f.request);
  if (auto ok = apply_vllm_model_context(*from, *model); !ok) return ok.error();
  print_from(f, *from, name);
  return serve(*model, from->request);
}

/// vLLM's own settings: the version whose rules apply, the profile's batch, PP/DP, the KV manager.
void add_vllm_flags(CLI::App& sub, ServeRequest& request) {
  sub.add_option("--vllm-version", request.vllm_version,
                  "vLLM whose start-up rules apply: 0.19, or none (engine-agnostic:\n--prefill-chunk forward, 512 MiB non-torch)")
      ->capture_default_str();
  sub.add_option("--max-num-batched-tokens", request.max_num_batched_tokens,
                  "vLLM: tokens of the profile forward pass (default: 8192 on\nH100-class GPUs, else 2048)");
  sub.add_option("--max-num-seqs", request.max_num_seqs,
                  "vLLM: requests of the sampler warm-up (default: 1024 on\nH100-class GPUs, else 256)");
  sub.add_option("--pp", request.pp, "vLLM pipeline-parallel ranks")->capture_default_str();
  sub.add_option("--dp", request.dp, "vLLM data-parallel replicas (per-GPU memory unchanged)")->capture_default_str();
  sub.add_flag("--disable-hybrid-kv-cache-manager", request.disable_hybrid_kv_cache_manager,
                "vLLM: sliding-window layers kept as full ones (one KV group)");
  sub.add_option("--kv-cache-memory", request.kv_cache_memory,
                 "vLLM --kv-cache-memory-bytes: KV cache per GPU, e.g. 40GiB\n(--gpu-memory-utilization then unused)");
}

}  // namespace

std::function<int()> add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* sub = app.add_subcommand("serve", "Inference memory per GPU as vLLM 0.19 budgets it; --from vllm serve");
  flags->app = sub;
  sub->add_option("--model", flags->model, "Preset name or path to config.json (required unless --from)");
  sub->add_option("--from", flags->from,
                  "A `vllm serve` command line or script (vLLM 0.19) to read; flags given\nbeside it win")
      ->type_name("FILE");
  flags->context_len = sub->add_option("--context-len", flags->request.context_len,
                                       "Tokens per sequence (prompt + generated); required unless --generate");
  sub->add_option("--batch", flags->request.batch, "Concurrent sequences")->capture_default_str();
  sub->add_option("--tp", flags->request.tp, "Tensor-parallel degree")->capture_default_str();
  sub->add_option("--dtype", flags->request.dtype, "Activation/base dtype: auto, bf16, fp16, fp32")->capture_default_str();
  sub->add_option("--weight-dtype", flags->request.weight_dtype, "Linear-layer weights: auto, bf16, fp16, fp8, int8, int4")
      ->capture_default_str();
  sub->add_option("--quant-group-size", flags->request.quant_group_size,
                  "Input columns per scale (int4/int8 default 128; 0 = per output row;\nfp8 default per tensor)");
  sub->add_option("--quant-scale-dtype", flags->request.quant_scale_dtype, "Scale dtype: auto (fp16; fp32 for fp8), fp16, bf16, fp32")
      ->capture_default_str();
  sub->add_flag("--quant-zero-point", flags->request.quant_zero_point, "Asymmetric quantization: count zero points");
  sub->add_option("--kv-dtype", flags->request.kv_dtype, "KV cache dtype: auto, bf16, fp16, fp8, int8")->capture_default_str();
  sub->add_option("--block-size", flags->request.block_size, "Paged KV block in tokens (0 = contiguous)")->capture_default_str();
  sub->add_option("--mla-cache", flags->request.mla_cache, "MLA cache: latent (vLLM, SGLang) or decompressed (HF)")
      ->capture_default_str();
  sub->add_option("--prefill-chunk", flags->request.prefill_chunk, "--vllm-version none: tokens per forward pass (0 = a whole\ncontext); vLLM: --max-num-batched-tokens")
      ->capture_default_str();
  flags->attention = sub->add_option("--attention", flags->request.attention,
                                     "flash or eager (eager keeps the score matrix);\n--generate: eager, sdpa (default) or flash")
                         ->capture_default_str();
  sub->add_option("--activation-peak", flags->request.activation_peak, "Measured activation peak, e.g. 9.37GiB (replaces the model)");
  sub->add_option("--non-torch-memory", flags->request.non_torch_memory,
                  "Measured non-torch memory, e.g. 0.10GiB (default: vLLM 0.19's\nmeasured increase; 512MiB with --vllm-version none)");
  sub->add_option("--gpu", flags->request.gpu, "GPU from the catalog, e.g. h100-80gb");
  sub->add_option("--gpu-memory", flags->request.gpu_memory, "GPU memory as cudaMemGetInfo reports it, e.g. 79.2GiB");
  sub->add_option("--gpu-memory-utilization", flags->request.gpu_memory_utilization, "Share of GPU memory to use (vLLM)")
      ->capture_default_str();
  add_vllm_flags(*sub, flags->request);
  sub->add_flag("--generate", flags->generate, "HF generate() on one GPU: weights + DynamicCache + prefill workspace");
  sub->add_option("--prompt-len", flags->prompt_len, "--generate: prompt tokens per sequence");
  sub->add_option("--new-tokens", flags->new_tokens, "--generate: max_new_tokens");
  sub->add_flag("--json", flags->json, "Print JSON");
  sub->add_flag("--explain", flags->explain, "Show every term's formula and values, weight tensors, KV groups");
  return [flags] {
    if (flags->generate) {
      std::string name;
      auto report = run_generate(*flags, name);
      if (!report) {
        fmt::print(stderr, "actmem: {}\n", render_message(report.error().message, flag_of));
        return 2;
      }
      if (flags->json)
        fmt::print("{}\n", generate_json(name, *report).dump(2));
      else
        fmt::print("{}", generate_table(name, *report, flags->explain));
      return 0;
    }
    if (flags->prompt_len != 0 || flags->new_tokens != 0) {
      fmt::print(stderr, "actmem: --prompt-len and --new-tokens apply to --generate; add --generate\n");
      return 2;
    }
    std::optional<VllmCommand> from;
    auto result = run_serve(*flags, from);
    if (!result) {
      fmt::print(stderr, "actmem: {}\n", render_message(result.error().message, flag_of));
      return 2;
    }
    for (const auto& w : result->serving.warnings) fmt::print(stderr, "actmem: warning: {}\n", w);
    if (flags->json) {
      auto j = serve_json(*result);
      if (from) j["config"] = vllm_command_json(*from);  // as estimate --from adds its file's
      fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("{}", serve_table(*result, flags->explain));
    }
    return 0;
  };
}

}  // namespace actmem::cli
