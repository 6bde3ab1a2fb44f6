#include "serve/serve_request.h"

#include <array>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "serve/gpu_catalog.h"
#include "serve/serve.h"
#include "serve/suggest.h"
#include "util/spellcheck.h"

namespace actmem {

namespace {

/// "auto" or a dtype; the message names the option: "@kv_dtype x: unknown dtype ...".
Expected<std::optional<DType>> optional_dtype(std::string_view field, const std::string& text) {
  if (text == "auto") return std::optional<DType>{};
  auto d = parse_dtype(text);
  if (!d) return Error{ErrorKind::kUnknownName, std::string(field), fmt::format("@{} {}: {}", field, text, d.error().message)};
  return std::optional<DType>{*d};
}

Expected<std::optional<Bytes>> optional_size(std::string_view field, const std::string& text) {
  if (text.empty()) return std::optional<Bytes>{};
  auto b = parse_size(text);
  if (!b) return Error{ErrorKind::kInvalid, std::string(field), fmt::format("@{}: {}", field, b.error().message)};
  return std::optional<Bytes>{*b};
}

using Setter = Expected<void> (*)(ServeRequest&, std::string_view, const OptionValue&);

struct Row {
  OptionInfo info;
  Setter set;
};

#define ACTMEM_SET(convert, field)                                                 \
  [](ServeRequest& r, std::string_view n, const OptionValue& v) -> Expected<void> { \
    auto x = convert(n, v);                                                        \
    if (!x) return x.error();                                                      \
    r.field = *x;                                                                  \
    return {};                                                                     \
  }
// A size: text as parse_size() reads it ("80GiB"), or a number of bytes.
#define ACTMEM_SET_SIZE(field)                                                     \
  [](ServeRequest& r, std::string_view n, const OptionValue& v) -> Expected<void> { \
    if (const auto* bytes = std::get_if<int64_t>(&v)) {                            \
      r.field = std::to_string(*bytes);                                            \
      return {};                                                                   \
    }                                                                              \
    auto x = option_text(n, v);                                                    \
    if (!x) return x.error();                                                      \
    r.field = *x;                                                                  \
    return {};                                                                     \
  }

const std::array kRows{
    Row{{"context_len", OptionKind::kCount, "tokens per sequence (prompt + generated); required"},
        ACTMEM_SET(option_count, context_len)},
    Row{{"batch", OptionKind::kCount, "concurrent sequences"}, ACTMEM_SET(option_count, batch)},
    Row{{"tp", OptionKind::kCount, "tensor-parallel degree"}, ACTMEM_SET(option_count, tp)},
    Row{{"dtype", OptionKind::kText, "activation/base dtype: auto, bf16, fp16, fp32"}, ACTMEM_SET(option_text, dtype)},
    Row{{"weight_dtype", OptionKind::kText, "linear-layer weights: auto, bf16, fp16, fp8, int8, int4"},
        ACTMEM_SET(option_text, weight_dtype)},
    Row{{"quant_group_size", OptionKind::kCount, "input columns per scale (0 = per output row)"},
        ACTMEM_SET(option_count, quant_group_size)},
    Row{{"quant_scale_dtype", OptionKind::kText, "scale dtype: auto, fp16, bf16, fp32"},
        ACTMEM_SET(option_text, quant_scale_dtype)},
    Row{{"quant_zero_point", OptionKind::kFlag, "asymmetric quantization: count zero points"},
        ACTMEM_SET(option_flag, quant_zero_point)},
    Row{{"kv_dtype", OptionKind::kText, "KV cache dtype: auto, bf16, fp16, fp8, int8"}, ACTMEM_SET(option_text, kv_dtype)},
    Row{{"block_size", OptionKind::kCount, "paged KV block in tokens (0 = contiguous)"}, ACTMEM_SET(option_count, block_size)},
    Row{{"mla_cache", OptionKind::kText, "MLA cache: latent (vLLM, SGLang) or decompressed (HF)"},
        ACTMEM_SET(option_text, mla_cache)},
    Row{{"prefill_chunk", OptionKind::kCount, "tokens per forward pass (0 = a whole context)"},
        ACTMEM_SET(option_count, prefill_chunk)},
    Row{{"attention", OptionKind::kText, "flash or eager (eager keeps the score matrix)"}, ACTMEM_SET(option_text, attention)},
    Row{{"activation_peak", OptionKind::kSize, "measured activation peak, e.g. 9.37GiB (replaces the model)"},
        ACTMEM_SET_SIZE(activation_peak)},
    Row{{"non_torch_memory", OptionKind::kSize, "measured non-torch memory, e.g. 0.10GiB (default 512MiB)"},
        ACTMEM_SET_SIZE(non_torch_memory)},
    Row{{"gpu", OptionKind::kText, "GPU from the catalog, e.g. h100-80gb"}, ACTMEM_SET(option_text, gpu)},
    Row{{"gpu_memory", OptionKind::kSize, "GPU memory as cudaMemGetInfo reports it, e.g. 79.2GiB"},
        ACTMEM_SET_SIZE(gpu_memory)},
    Row{{"gpu_memory_utilization", OptionKind::kReal, "share of GPU memory to use (vLLM)"},
        ACTMEM_SET(option_real, gpu_memory_utilization)},
    Row{{"vllm_version", OptionKind::kText, "vLLM whose start-up rules apply: 0.19, or none (engine-agnostic)"},
        ACTMEM_SET(option_text, vllm_version)},
    Row{{"max_num_batched_tokens", OptionKind::kCount, "vLLM: tokens of the profile pass (0 = its default for the GPU)"},
        ACTMEM_SET(option_count, max_num_batched_tokens)},
    Row{{"max_num_seqs", OptionKind::kCount, "vLLM: sequences of the sampler warm-up (0 = its default for the GPU)"},
        ACTMEM_SET(option_count, max_num_seqs)},
    Row{{"pp", OptionKind::kCount, "vLLM pipeline-parallel ranks"}, ACTMEM_SET(option_count, pp)},
    Row{{"dp", OptionKind::kCount, "vLLM data-parallel replicas (each GPU's memory unchanged)"},
        ACTMEM_SET(option_count, dp)},
    Row{{"disable_hybrid_kv_cache_manager", OptionKind::kFlag,
         "vLLM: sliding-window layers kept as full ones (one KV group)"},
        ACTMEM_SET(option_flag, disable_hybrid_kv_cache_manager)},
    Row{{"kv_cache_memory", OptionKind::kSize,
         "vLLM: KV cache bytes per GPU, as --kv-cache-memory-bytes (utilization then unused)"},
        ACTMEM_SET_SIZE(kv_cache_memory)},
};

#undef ACTMEM_SET
#undef ACTMEM_SET_SIZE

const std::array<OptionInfo, kRows.size()> kInfos = [] {
  std::array<OptionInfo, kRows.size()> infos{};
  for (std::size_t i = 0; i < kRows.size(); ++i) infos[i] = kRows[i].info;
  return infos;
}();

/// The GPU named by @gpu or sized by @gpu_memory (neither: no capacity).
struct ResolvedGpu {
  std::optional<Bytes> memory;
  std::optional<GpuSpec> spec;
  std::string name;  // catalog name, "custom", or empty
};

Expected<ResolvedGpu> resolve_gpu(const ServeRequest& f) {
  ResolvedGpu g;
  if (!f.gpu.empty() && !f.gpu_memory.empty())
    return Error{ErrorKind::kIncompatible, "gpu_memory",
                 "@gpu and @gpu_memory: give one; @gpu_memory overrides the catalog, so drop @gpu"};
  if (!f.gpu.empty()) {
    auto gpu = find_gpu(f.gpu);
    if (!gpu) return gpu.error();
    g.memory = gpu->total;
    g.name = std::string(gpu->name);
    g.spec = *gpu;
  } else if (!f.gpu_memory.empty()) {
    auto size = optional_size("gpu_memory", f.gpu_memory);
    if (!size) return size.error();
    g.memory = *size;
    if (**size < Bytes{int64_t{1} << 30})
      return Error{ErrorKind::kInvalid, "gpu_memory",
                   fmt::format("@gpu_memory {}: less than 1 GiB, which no GPU this tool plans for has; give a unit, "
                               "e.g. {}GiB",
                               f.gpu_memory, f.gpu_memory)};
    g.name = "custom";
  }

  return g;
}

/// vLLM's settings with their defaults for the GPU (none under @vllm_version none); returns the
/// notes saying which defaults applied.
Expected<std::vector<std::string>> apply_vllm_request(ServeOptions& o, const ServeRequest& f,
                                                      const std::optional<GpuSpec>& gpu_spec) {
  std::vector<std::string> notes;
  auto version = kVllmVersionNames.parse(f.vllm_version);
  if (!version) return version.error();
  if (*version == VllmVersion::kNone) {
    for (const auto& [name, set] : {std::pair{"max_num_batched_tokens", f.max_num_batched_tokens != 0},
                                    std::pair{"max_num_seqs", f.max_num_seqs != 0}, std::pair{"pp", f.pp != 1},
                                    std::pair{"dp", f.dp != 1},
                                    std::pair{"disable_hybrid_kv_cache_manager", f.disable_hybrid_kv_cache_manager}})
      if (set)
        return Error{ErrorKind::kIncompatible, name,
                     fmt::format("@{} is a vLLM setting; drop it, or drop @vllm_version none", name)};
  } else {
    const VllmBatchDefaults defaults = vllm_batch_defaults(gpu_spec ? &*gpu_spec : nullptr);
    VllmOptions v;
    v.max_num_batched_tokens = f.max_num_batched_tokens ? f.max_num_batched_tokens : defaults.max_num_batched_tokens;
    v.max_num_seqs = f.max_num_seqs ? f.max_num_seqs : defaults.max_num_seqs;
    v.pp = f.pp;
    v.dp = f.dp;
    v.hybrid_kv_cache = !f.disable_hybrid_kv_cache_manager;
    v.gpu_sms = gpu_spec ? gpu_spec->sms : 0;
    o.vllm = v;
    std::vector<std::string> defaulted;
    if (!f.max_num_batched_tokens) defaulted.push_back(fmt::format("max_num_batched_tokens {}", v.max_num_batched_tokens));
    if (!f.max_num_seqs) defaulted.push_back(fmt::format("max_num_seqs {}", v.max_num_seqs));
    if (!defaulted.empty())
      notes.push_back(fmt::format("{}: vLLM's default{} for `vllm serve` ({}; vllm/engine/arg_utils.py:2087-2107)",
                                  fmt::join(defaulted, " and "), defaulted.size() > 1 ? "s" : "", defaults.rule));
    if (v.dp > 1)
      notes.push_back(fmt::format(
          "dp {}: each data-parallel replica holds its own weights and KV cache; the figures are per GPU", v.dp));
  }
  return notes;
}

}  // namespace

std::span<const OptionInfo> serve_options() { return kInfos; }

Expected<void> set_serve_option(ServeRequest& request, std::string_view name, const OptionValue& value) {
  for (const auto& row : kRows)
    if (row.info.name == name) return row.set(request, name, value);
  std::vector<std::string_view> names;
  for (const auto& row : kRows) names.push_back(row.info.name);
  auto guess = closest_name(name, names);
  return Error{ErrorKind::kUnknownName, std::string(name),
               fmt::format("unknown option @{}{}", name, guess ? fmt::format("; did you mean @{}?", *guess) : "")};
}

Expected<ServeResult> serve_once(const ModelSpec& model, const ServeRequest& f) {
  if (!(f.gpu_memory_utilization > 0.0 && f.gpu_memory_utilization <= 1.0))
    return Error{ErrorKind::kInvalid, "gpu_memory_utilization",
                 fmt::format("@gpu_memory_utilization {}: must be in (0, 1], e.g. 0.9", f.gpu_memory_utilization)};
  ServeOptions o;
  o.context_len = f.context_len;
  o.batch = f.batch;
  o.tp = f.tp;
  o.prefill_chunk = f.prefill_chunk;
  auto dtype = optional_dtype("dtype", f.dtype);
  if (!dtype) return dtype.error();
  o.dtype = *dtype;
  auto weight_dtype = optional_dtype("weight_dtype", f.weight_dtype);
  if (!weight_dtype) return weight_dtype.error();
  o.weights.dtype = *weight_dtype;
  o.weights.group_size = f.quant_group_size;
  auto scale_dtype = optional_dtype("quant_scale_dtype", f.quant_scale_dtype);
  if (!scale_dtype) return scale_dtype.error();
  o.weights.scale_dtype = *scale_dtype;
  o.weights.zero_points = f.quant_zero_point;
  auto kv_dtype = optional_dtype("kv_dtype", f.kv_dtype);
  if (!kv_dtype) return kv_dtype.error();
  o.kv.dtype = kv_dtype->value_or(serving_dtype(model, o.dtype, o.weights.dtype));
  o.kv.block_size = f.block_size;
  auto mla = kMlaCacheNames.parse(f.mla_cache);
  if (!mla) return mla.error();
  o.kv.mla_layout = *mla;
  if (f.attention != "flash" && f.attention != "eager")
    return Error{ErrorKind::kUnknownName, "attention",
                 fmt::format("@attention {}: use flash (no score matrix) or eager", f.attention)};
  o.flash_attention = f.attention == "flash";
  auto peak = optional_size("activation_peak", f.activation_peak);
  if (!peak) return peak.error();
  o.activation_peak = *peak;
  auto non_torch = optional_size("non_torch_memory", f.non_torch_memory);
  if (!non_torch) return non_torch.error();
  o.non_torch = *non_torch;

  auto gpu = resolve_gpu(f);
  if (!gpu) return gpu.error();
  const std::optional<Bytes> gpu_memory = gpu->memory;
  const std::optional<GpuSpec>& gpu_spec = gpu->spec;
  const std::string& gpu_name = gpu->name;
  auto vllm_notes = apply_vllm_request(o, f, gpu_spec);
  if (!vllm_notes) return vllm_notes.error();

  auto serving = estimate_serving(model, o);
  if (!serving) return serving.error();
  ServeResult result{model.name, std::move(*serving), std::nullopt, gpu_name};
  for (auto& n : *vllm_notes) result.serving.notes.push_back(std::move(n));
  auto kv_memory = optional_size("kv_cache_memory", f.kv_cache_memory);
  if (!kv_memory) return kv_memory.error();
  if (*kv_memory && !gpu_memory)
    result.serving.warnings.push_back("kv_cache_memory sizes the KV cache on a GPU, and no GPU is named: not used "
                                      "(give --gpu or --gpu-memory for the capacity)");
  if (gpu_memory) {
    auto capacity =
        estimate_capacity(model, result.serving, {*gpu_memory, f.gpu_memory_utilization, *kv_memory});
    if (!capacity) return capacity.error();
    result.capacity = std::move(*capacity);
  }
  return result;
}

Expected<ServeResult> serve(const ModelSpec& model, const ServeRequest& request) {
  auto result = serve_once(model, request);
  if (result && result->capacity && !result->capacity->fits)
    result->suggestions = suggest_vllm_flags(
        request, *result, [&model](const ServeRequest& changed) { return serve_once(model, changed); });
  return result;
}

}  // namespace actmem
