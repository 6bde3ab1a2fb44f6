#include "serve_cli.h"

#include "cli.h"  // flag_of: how the CLI spells a library option

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "actmem/actmem.h"


namespace actmem::cli {

namespace {

/// Flags as typed; turned into ServeOptions once the model is known ("auto" dtypes depend on it).
struct ServeFlags {
  std::string model;
  int64_t context_len = 0;
  int64_t batch = 1;
  int64_t tp = 1;
  std::string dtype = "auto";
  std::string weight_dtype = "auto";
  std::optional<int64_t> quant_group_size;
  std::string quant_scale_dtype = "auto";
  bool quant_zero_point = false;
  std::string kv_dtype = "auto";
  int64_t block_size = 16;
  std::string mla_cache = "latent";
  int64_t prefill_chunk = 0;
  std::string attention = "flash";
  std::string activation_peak;
  std::string non_torch_memory;
  std::string gpu;
  std::string gpu_memory;
  double gpu_memory_utilization = 0.9;
  bool json = false;
  bool explain = false;
};

Expected<std::optional<DType>> optional_dtype(const std::string& flag, const std::string& text) {
  if (text == "auto") return std::optional<DType>{};
  auto d = parse_dtype(text);
  if (!d) return Error{fmt::format("{} {}: {}", flag, text, d.error().message)};
  return std::optional<DType>{*d};
}

Expected<std::optional<Bytes>> optional_size(const std::string& flag, const std::string& text) {
  if (text.empty()) return std::optional<Bytes>{};
  auto b = parse_size(text);
  if (!b) return Error{fmt::format("{}: {}", flag, b.error().message)};
  return std::optional<Bytes>{*b};
}

Expected<ServeResult> run_serve(const ServeFlags& f) {
  auto model = load_model(f.model);
  if (!model) return Error{fmt::format("--model {}: {}", f.model, model.error().message)};

  if (!(f.gpu_memory_utilization > 0.0 && f.gpu_memory_utilization <= 1.0))
    return Error{fmt::format("--gpu-memory-utilization {}: must be in (0, 1], e.g. 0.9", f.gpu_memory_utilization)};
  ServeOptions o;
  o.context_len = f.context_len;
  o.batch = f.batch;
  o.tp = f.tp;
  o.prefill_chunk = f.prefill_chunk;
  auto dtype = optional_dtype("--dtype", f.dtype);
  if (!dtype) return dtype.error();
  o.dtype = *dtype;
  auto weight_dtype = optional_dtype("--weight-dtype", f.weight_dtype);
  if (!weight_dtype) return weight_dtype.error();
  o.weights.dtype = *weight_dtype;
  o.weights.group_size = f.quant_group_size;
  auto scale_dtype = optional_dtype("--quant-scale-dtype", f.quant_scale_dtype);
  if (!scale_dtype) return scale_dtype.error();
  o.weights.scale_dtype = *scale_dtype;
  o.weights.zero_points = f.quant_zero_point;
  auto kv_dtype = optional_dtype("--kv-dtype", f.kv_dtype);
  if (!kv_dtype) return kv_dtype.error();
  o.kv.dtype = kv_dtype->value_or(serving_dtype(*model, o.dtype, o.weights.dtype));
  o.kv.block_size = f.block_size;
  auto mla = kMlaCacheNames.parse(f.mla_cache);
  if (!mla) return mla.error();
  o.kv.mla_layout = *mla;
  if (f.attention != "flash" && f.attention != "eager")
    return Error{fmt::format("--attention {}: use flash (no score matrix) or eager", f.attention)};
  o.flash_attention = f.attention == "flash";
  auto peak = optional_size("--activation-peak", f.activation_peak);
  if (!peak) return peak.error();
  o.activation_peak = *peak;
  auto non_torch = optional_size("--non-torch-memory", f.non_torch_memory);
  if (!non_torch) return non_torch.error();
  o.non_torch = *non_torch;

  auto serving = estimate_serving(*model, o);
  if (!serving) return serving.error();
  ServeResult result{model->name, std::move(*serving), std::nullopt, ""};

  if (!f.gpu.empty() && !f.gpu_memory.empty())
    return Error{"--gpu and --gpu-memory: give one; --gpu-memory overrides the catalog, so drop --gpu"};
  std::optional<Bytes> gpu_memory;
  if (!f.gpu.empty()) {
    auto gpu = find_gpu(f.gpu);
    if (!gpu) return gpu.error();
    gpu_memory = gpu->total;
    result.gpu_name = std::string(gpu->name);
  } else if (!f.gpu_memory.empty()) {
    auto size = optional_size("--gpu-memory", f.gpu_memory);
    if (!size) return size.error();
    gpu_memory = *size;
    if (**size < Bytes{int64_t{1} << 30})
      return Error{fmt::format("--gpu-memory {}: less than 1 GiB, which no GPU this tool plans for has; give a unit, "
                               "e.g. {}GiB",
                               f.gpu_memory, f.gpu_memory)};
    result.gpu_name = "custom";
  }
  if (gpu_memory) {
    auto capacity = estimate_capacity(*model, result.serving, {*gpu_memory, f.gpu_memory_utilization});
    if (!capacity) return capacity.error();
    result.capacity = std::move(*capacity);
  }
  return result;
}

}  // namespace

std::function<int()> add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* sub = app.add_subcommand("serve", "Inference memory per GPU: weights, KV cache, workspace; GPU capacity");
  sub->add_option("--model", flags->model, "Preset name or path to config.json")->required();
  sub->add_option("--context-len", flags->context_len, "Tokens per sequence (prompt + generated)")->required();
  sub->add_option("--batch", flags->batch, "Concurrent sequences")->capture_default_str();
  sub->add_option("--tp", flags->tp, "Tensor-parallel degree")->capture_default_str();
  sub->add_option("--dtype", flags->dtype, "Activation/base dtype: auto, bf16, fp16, fp32")->capture_default_str();
  sub->add_option("--weight-dtype", flags->weight_dtype, "Linear-layer weights: auto, bf16, fp16, fp8, int8, int4")
      ->capture_default_str();
  sub->add_option("--quant-group-size", flags->quant_group_size,
                  "Input columns per scale (int4/int8 default 128; 0 = per output row; fp8 default per tensor)");
  sub->add_option("--quant-scale-dtype", flags->quant_scale_dtype, "Scale dtype: auto (fp16; fp32 for fp8), fp16, bf16, fp32")
      ->capture_default_str();
  sub->add_flag("--quant-zero-point", flags->quant_zero_point, "Asymmetric quantization: count zero points");
  sub->add_option("--kv-dtype", flags->kv_dtype, "KV cache dtype: auto, bf16, fp16, fp8, int8")->capture_default_str();
  sub->add_option("--block-size", flags->block_size, "Paged KV block in tokens (0 = contiguous)")->capture_default_str();
  sub->add_option("--mla-cache", flags->mla_cache, "MLA cache: latent (vLLM, SGLang) or decompressed (HF)")
      ->capture_default_str();
  sub->add_option("--prefill-chunk", flags->prefill_chunk, "Tokens per forward pass (0 = a whole context)")
      ->capture_default_str();
  sub->add_option("--attention", flags->attention, "flash or eager (eager keeps the score matrix)")->capture_default_str();
  sub->add_option("--activation-peak", flags->activation_peak, "Measured activation peak, e.g. 9.37GiB (replaces the model)");
  sub->add_option("--non-torch-memory", flags->non_torch_memory, "Measured non-torch memory, e.g. 0.10GiB (default 512MiB)");
  sub->add_option("--gpu", flags->gpu, "GPU from the catalog, e.g. h100-80gb");
  sub->add_option("--gpu-memory", flags->gpu_memory, "GPU memory as cudaMemGetInfo reports it, e.g. 79.2GiB");
  sub->add_option("--gpu-memory-utilization", flags->gpu_memory_utilization, "Share of GPU memory to use (vLLM)")
      ->capture_default_str();
  sub->add_flag("--json", flags->json, "Print JSON");
  sub->add_flag("--explain", flags->explain, "Show every term's formula and values, weight tensors, KV groups");
  return [flags] {
    auto result = run_serve(*flags);
    if (!result) {
      fmt::print(stderr, "actmem: {}\n", render_message(result.error().message, flag_of));
      return 2;
    }
    if (flags->json)
      fmt::print("{}\n", serve_json(*result).dump(2));
    else
      fmt::print("{}", serve_table(*result, flags->explain));
    return 0;
  };
}

}  // namespace actmem::cli
