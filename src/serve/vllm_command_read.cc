// What each read (kRead) argument of a `vllm serve` line sets (vllm_command.h): the serve options
// of the request, each with its source; and what it cannot change, as notes and warnings. Values
// are parsed as vLLM's argparse types parse them (vllm/engine/arg_utils.py, "AU").
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join
#include <nlohmann/json.hpp>

#include "serve/vllm_command_args.h"

namespace actmem::vllm_args {

namespace {

struct Ctx {
  const Given& given;
  const std::string& where;
  VllmCommand& cmd;
  ReadState& state;

  std::string source() const { return given.source(where); }
  const std::string& value() const { return given.values.front(); }
  Error bad(std::string_view expected) const {
    return Error{ErrorKind::kConfig, "", fmt::format("{}: {}", source(), expected)};
  }
  void warn(std::string_view what) const { cmd.warnings.push_back(fmt::format("{}: not modelled: {}", source(), what)); }
  void ignore() const { cmd.ignored.push_back(fmt::format("{} ({})", given.option(), where)); }
};

/// One serve option set, with where it came from; the library's refusal names the line.
Expected<void> set(Ctx& c, std::string option, OptionValue value) {
  if (auto ok = set_serve_option(c.cmd.request, option, value); !ok)
    return Error{ok.error().kind, option, fmt::format("{}: {}", c.source(), ok.error().message)};
  c.cmd.settings.push_back({std::move(option), std::move(value), c.source()});
  return {};
}

std::optional<int64_t> whole(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

/// vLLM's human_readable_int (AU:2320-2382): k m g t are powers of 1000 and take decimals (25.6k is
/// 25600), K M G T powers of 1024 and whole numbers only (1K is 1024); else a plain integer.
std::optional<int64_t> human_int(std::string_view s) {
  if (s.empty()) return std::nullopt;
  const std::string_view units = "kmgtKMGT";
  const auto unit = units.find(s.back());
  if (unit == std::string_view::npos) return whole(s);
  const std::string_view number = s.substr(0, s.size() - 1);
  const int power = static_cast<int>(unit % 4) + 1;
  if (number.empty() || number.find_first_not_of("0123456789.") != std::string_view::npos ||
      !std::isdigit(static_cast<unsigned char>(number.front())) ||
      !std::isdigit(static_cast<unsigned char>(number.back())) ||
      std::count(number.begin(), number.end(), '.') > 1)
    return std::nullopt;
  if (unit >= 4) {  // binary: int(number) * 1024^power
    auto n = whole(number);
    if (!n || *n > (int64_t{1} << (62 - 10 * power))) return std::nullopt;
    return *n << (10 * power);
  }
  const double v = std::strtod(std::string(number).c_str(), nullptr) * std::pow(1000.0, power);  // int(float(x) * 1000^p)
  if (!(v < 9.2e18)) return std::nullopt;
  return static_cast<int64_t>(v);
}

Expected<void> read_count(Ctx& c, std::string_view option) {
  auto n = whole(c.value());
  if (!n || *n < 1) return c.bad("expected a whole number of at least 1");
  return set(c, std::string(option), *n);
}

Expected<void> read_tokens(Ctx& c, std::string_view option) {
  auto n = human_int(c.value());
  if (!n || *n < 1) return c.bad("expected a whole number of at least 1, or 8k (8000), 8K (8192)");
  c.state.batched_tokens = true;
  return set(c, std::string(option), *n);
}

/// --kv-cache-memory-bytes: a human-readable int of bytes (AU:354-364); the profile still runs and
/// utilization is not used (v1/worker/gpu_worker.py:367-385).
Expected<void> read_kv_bytes(Ctx& c, std::string_view option) {
  auto n = human_int(c.value());
  if (!n || *n < 0) return c.bad("expected a number of bytes, e.g. 40000000000, 40g (40·1000³) or 40G (40·1024³)");
  if (*n == 0) {  // falsy: vLLM profiles as without it (`if kv_cache_memory_bytes := ...`)
    c.ignore();
    return {};
  }
  return set(c, std::string(option), *n);
}

Expected<void> read_real(Ctx& c, std::string_view option) {
  char* end = nullptr;
  const double v = std::strtod(c.value().c_str(), &end);
  if (c.value().empty() || *end != '\0' || !std::isfinite(v)) return c.bad("expected a number, e.g. 0.9");
  return set(c, std::string(option), v);
}

/// --max-model-len: a human-readable int, or -1/auto: fit to memory (AU:320-325).
Expected<void> read_max_model_len(Ctx& c, std::string_view option) {
  std::string lower = c.value();
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (lower == "auto" || lower == "-1") {
    c.warn("vLLM fits max_model_len to the memory left; actmem takes the model's own max_model_len (give "
           "--context-len to choose one)");
    return {};
  }
  auto n = human_int(c.value());
  if (!n || *n < 1) return c.bad("expected a whole number, 32k (32000), 32K (32768), -1 or auto");
  return set(c, std::string(option), *n);
}

/// --dtype: vLLM's choices (config/model.py:141) as actmem's dtypes.
Expected<void> read_dtype(Ctx& c, std::string_view option) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"auto", "auto"}, {"half", "fp16"}, {"float16", "fp16"}, {"bfloat16", "bf16"}, {"float", "fp32"}, {"float32", "fp32"}};
  for (const auto& [vllm, ours] : kNames)
    if (c.value() == vllm) return set(c, std::string(option), std::string(ours));
  return c.bad("vLLM takes auto, half, float16, bfloat16, float or float32");
}

/// --kv-cache-dtype (config/cache.py:57): the fp8 formats are one byte each.
Expected<void> read_kv_dtype(Ctx& c, std::string_view option) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"auto", "auto"}, {"bfloat16", "bf16"}, {"fp8", "fp8"}, {"fp8_e4m3", "fp8"}, {"fp8_e5m2", "fp8"}, {"fp8_inc", "fp8"}};
  for (const auto& [vllm, ours] : kNames)
    if (c.value() == vllm) return set(c, std::string(option), std::string(ours));
  c.warn(fmt::format("KV cache dtype {}; the KV cache is counted as auto (the model dtype)", c.value()));
  return {};
}

/// --quantization/-q: fp8 is vLLM's online fp8 (per-tensor scales), the weights actmem counts as
/// fp8; another method is compared with the checkpoint's own quantization_config in finish().
Expected<void> read_quantization(Ctx& c, std::string_view option) {
  if (c.value().empty() || c.value() == "None") {  // AU:146-152: None
    c.ignore();
    return {};
  }
  c.state.quantization = c.value();
  c.state.quantization_source = c.source();
  if (c.value() == "fp8") return set(c, std::string(option), std::string("fp8"));
  return {};  // the method of a quantized checkpoint: its config.json says what is stored
}

Expected<void> read_flag(Ctx& c, std::string_view option) {
  return set(c, std::string(option), c.given.row->kind == Kind::kFlag);
}

Expected<void> read_cuda_graphs(Ctx& c, std::string_view) {
  c.state.cuda_graphs.push_back(c.source());
  return {};
}

/// --enable-prefix-caching, --enable-chunked-prefill: the scheduler's; no start-up memory.
Expected<void> read_scheduling(Ctx& c, std::string_view) {
  if (c.given.row->dest == "enable_chunked_prefill" && c.given.row->kind == Kind::kNegFlag)
    c.state.chunked_prefill_off = c.source();
  c.cmd.notes.push_back(fmt::format("{}: read; the scheduler's choice, no effect on start-up memory", c.source()));
  return {};
}

Expected<void> read_no_effect(Ctx& c, std::string_view) {
  c.ignore();
  return {};
}

/// Read but not modelled yet: `why` is the warning (for flags, only the positive form).
Expected<void> read_unmodelled(Ctx& c, std::string_view why) {
  const Kind kind = c.given.row->kind;
  const std::string v = c.given.values.empty() ? std::string() : c.value();
  const bool default_value = kind == Kind::kFlag ? false
                             : kind == Kind::kNegFlag
                                 ? true
                                 : v == "{}" || v.empty() ||
                                       (c.given.row->dest == "cpu_offload_gb" && std::strtod(v.c_str(), nullptr) == 0.0);
  if (default_value) c.ignore();
  else c.warn(why);
  return {};
}

/// --performance-mode (config/vllm.py:328): throughput doubles the unset batch defaults.
Expected<void> read_performance_mode(Ctx& c, std::string_view) {
  if (c.value() == "throughput")
    c.warn("vLLM doubles its default max_num_batched_tokens and max_num_seqs (engine/arg_utils.py:2058-2139); give "
           "--max-num-batched-tokens and --max-num-seqs");
  else if (c.value() == "interactivity")
    c.state.cuda_graphs.push_back(c.source());  // finer CUDA-graph capture sizes only
  else
    c.ignore();
  return {};
}

using Reader = Expected<void> (*)(Ctx&, std::string_view);

struct Rule {
  std::string_view dest;
  Reader read;
  std::string_view option;  // the serve option set; for read_unmodelled the warning
};

// Every kRead dest of vllm_arguments.inc but the model (vllm_command.cc reads it).
constexpr Rule kRules[] = {
    {"tensor_parallel_size", read_count, "tp"},
    {"pipeline_parallel_size", read_count, "pp"},
    {"data_parallel_size", read_count, "dp"},
    {"max_model_len", read_max_model_len, "context_len"},
    {"gpu_memory_utilization", read_real, "gpu_memory_utilization"},
    {"dtype", read_dtype, "dtype"},
    {"kv_cache_dtype", read_kv_dtype, "kv_dtype"},
    {"quantization", read_quantization, "weight_dtype"},
    {"max_num_batched_tokens", read_tokens, "max_num_batched_tokens"},
    {"max_num_seqs", read_count, "max_num_seqs"},
    {"block_size", read_count, "block_size"},
    {"disable_hybrid_kv_cache_manager", read_flag, "disable_hybrid_kv_cache_manager"},
    {"enforce_eager", read_cuda_graphs, ""},
    {"compilation_config", read_cuda_graphs, ""},
    {"cudagraph_capture_sizes", read_cuda_graphs, ""},
    {"max_cudagraph_capture_size", read_cuda_graphs, ""},
    {"enable_prefix_caching", read_scheduling, ""},
    {"enable_chunked_prefill", read_scheduling, ""},
    {"performance_mode", read_performance_mode, ""},
    {"tokenizer", read_no_effect, ""},
    {"served_model_name", read_no_effect, ""},
    {"trust_remote_code", read_no_effect, ""},
    {"kv_cache_memory_bytes", read_kv_bytes, "kv_cache_memory"},
    {"cpu_offload_gb", read_unmodelled,
     "that many GiB of weights stay in CPU memory (UVA), so fewer weight bytes on the GPU and a larger KV cache"},
    {"hf_overrides", read_unmodelled, "changes to config.json's fields (the shapes may differ from the file's)"},
    {"limit_mm_per_prompt", read_unmodelled, "multimodal items per prompt (the encoder's share of the profile run)"},
    {"disable_sliding_window", read_unmodelled,
     "sliding-window layers run as full attention, and the window bounds max_model_len (config/model.py "
     "_get_and_verify_max_len)"},
};

/// --quantization beside the checkpoint's own quantization_config, which vLLM loads as it is
/// stored (the model reader counts it, model/quant_config.h). vLLM refuses a method that is not
/// the checkpoint's or one of its kernels (config/model.py _verify_quantization): gptq_marlin for
/// gptq, awq_marlin for awq.
void check_checkpoint(VllmCommand& cmd, const ReadState& state) {
  std::string method;
  if (std::ifstream f(cmd.model_config); f) {
    const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("quantization_config") && j["quantization_config"].is_object() &&
        j["quantization_config"].contains("quant_method") && j["quantization_config"]["quant_method"].is_string())
      method = j["quantization_config"]["quant_method"].get<std::string>();
  }
  const std::string& given = state.quantization;
  if (given.empty() || (given == "fp8" && method.empty())) return;
  if (method.empty()) {
    cmd.warnings.push_back(fmt::format("{}: not modelled: weights quantized by vLLM's {} method at load; they are "
                                       "counted in the model dtype unless --weight-dtype is given",
                                       state.quantization_source, given));
    return;
  }
  if (given == "fp8") {  // a quantized checkpoint: what it stores, not vLLM's online fp8
    cmd.request.weight_dtype = "auto";
    std::erase_if(cmd.settings, [](const ConfigSetting& s) { return s.option == "weight_dtype"; });
  }
  if (given.starts_with(method)) {
    cmd.notes.push_back(fmt::format("{}: the checkpoint's own method; what is stored comes from {}'s "
                                    "quantization_config",
                                    state.quantization_source, cmd.model_config));
  } else {
    cmd.warnings.push_back(fmt::format("{} is not the checkpoint's quant_method {} ({}): vLLM refuses a method the "
                                       "checkpoint was not stored in; actmem counts what the checkpoint stores",
                                       state.quantization_source, method, cmd.model_config));
  }
}

}  // namespace

Expected<void> read_argument(const Given& given, const std::string& where, VllmCommand& command, ReadState& state) {
  Ctx c{given, where, command, state};
  for (const auto& r : kRules)
    if (r.dest == given.row->dest) return r.read(c, r.option);
  c.ignore();  // a kRead row the rules do not name: nothing it changes is modelled
  return {};
}

void finish(VllmCommand& command, const ReadState& state) {
  const bool graphs_deducted = std::any_of(command.env.begin(), command.env.end(), [](const VllmEnv& e) {
    return e.name == "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" && e.value == "1";
  });
  if (!state.cuda_graphs.empty() && !graphs_deducted)
    command.notes.push_back(fmt::format(
        "{}: read; CUDA graphs: no effect on the estimate, vLLM 0.19 does not deduct their memory from the KV "
        "budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0; v1/worker/gpu_worker.py:376-381)",
        fmt::join(state.cuda_graphs, ", ")));
  if (!state.chunked_prefill_off.empty() && !state.batched_tokens)
    command.warnings.push_back(fmt::format(
        "{}: not modelled: without chunked prefill vLLM raises max_num_batched_tokens to max_model_len when that is "
        "larger (engine/arg_utils.py:2214-2280); give --max-num-batched-tokens",
        state.chunked_prefill_off));
  command.context_from_model = std::none_of(command.settings.begin(), command.settings.end(),
                                            [](const ConfigSetting& s) { return s.option == "context_len"; });
  if (!state.model_given && !command.model_config.empty())
    check_checkpoint(command, state);
  else if (!state.quantization.empty() && state.quantization != "fp8")  // the model came from --model
    command.warnings.push_back(fmt::format("{}: not modelled: weights quantized by vLLM's {} method at load; they "
                                           "are counted as --model's config.json stores them unless --weight-dtype "
                                           "is given",
                                           state.quantization_source, state.quantization));
}

}  // namespace actmem::vllm_args
