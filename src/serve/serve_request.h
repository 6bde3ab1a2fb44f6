// A serving job as a user states it: the `actmem serve` options with their "auto" and unset
// values, resolved against the model by serve() (vLLM's dtype rules, then capacity on a GPU when
// one is named). Every front end (CLI flags, Python keywords) fills a ServeRequest and calls
// serve(), so they give the same numbers and the same messages. Options are named as the CLI's
// flags with '_' for '-' (--kv-dtype is kv_dtype); errors write them `@kv_dtype`.
//
//   ServeRequest r;
//   set_serve_option(r, "context_len", int64_t{8192});
//   auto result = serve(load_model("llama-3-8b").value(), r);  // result->serving.total()
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "model/model_spec.h"
#include "policies/option_table.h"  // OptionValue, OptionInfo
#include "serve/serve_render.h"     // ServeResult
#include "actmem/expected.h"

namespace actmem {

struct ServeRequest {
  int64_t context_len = 0;  // required: tokens per sequence (prompt + generated)
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
  std::string activation_peak;   // a size, e.g. 9.37GiB; empty: modelled
  std::string non_torch_memory;  // a size; empty: kDefaultNonTorch
  std::string gpu;               // catalog name; empty: no capacity
  std::string gpu_memory;        // a size; empty: no capacity (or the catalog's)
  double gpu_memory_utilization = 0.9;
  // vLLM's start-up rules (serve/vllm.h): "0.19" (the default) or "none" (engine-agnostic).
  std::string vllm_version = "0.19";
  int64_t max_num_batched_tokens = 0;  // 0: vLLM's default for the GPU (8192 on H100-class, else 2048)
  int64_t max_num_seqs = 0;            // 0: vLLM's default for the GPU (1024 on H100-class, else 256)
  int64_t pp = 1;                      // vLLM pipeline ranks
  int64_t dp = 1;                      // vLLM data-parallel replicas (per-GPU memory unchanged)
  bool disable_hybrid_kv_cache_manager = false;
  std::string kv_cache_memory;         // vLLM --kv-cache-memory-bytes, a size; empty: profiled
};

/// The serving estimate and, with gpu or gpu_memory, the capacity. result.model_name is model.name.
/// When the request does not fit, result.suggestions holds the vLLM flags that would make it fit
/// (serve/suggest.h: up to ~30 more evaluations).
Expected<ServeResult> serve(const ModelSpec& model, const ServeRequest& request);

/// serve() without the suggestions: one evaluation, for sweeps that call it many times.
Expected<ServeResult> serve_once(const ModelSpec& model, const ServeRequest& request);

/// Every serve option, in the CLI's order. Example: serve_options()[0].name == "context_len".
std::span<const OptionInfo> serve_options();

/// Sets one option by name; unknown names get "did you mean". Sizes take text ("80GiB") or bytes.
Expected<void> set_serve_option(ServeRequest& request, std::string_view name, const OptionValue& value);

}  // namespace actmem
