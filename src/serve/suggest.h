// What to change when a vLLM request does not fit: like llama.cpp's --fit, each `vllm serve` flag
// that alone makes `batch` requests of the context fit on the GPU, found by running the same
// estimate with that flag changed (nothing here is a rule of its own: every figure is serve()'s).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "serve/serve_render.h"

namespace actmem {

struct ServeRequest;

using ServeRunner = std::function<Expected<ServeResult>(const ServeRequest&)>;

/// For a vLLM capacity that does not fit (`result.capacity->fits` false), the changes of one flag
/// each that fit, tried in this order: --max-model-len (the longest that fits), --max-num-seqs
/// (a smaller sampler warm-up), --gpu-memory-utilization (the least that fits, up to 0.99),
/// --kv-cache-dtype fp8, --tensor-parallel-size (the first of 2×, 4×, 8× today's that the model
/// takes and that fits). A flag that cannot make it fit is left out. Empty when it fits or without
/// vLLM's rules.
/// Example: Llama-3-8B, 64 requests of 8192 tokens on one H100 at 0.9 gives --max-model-len 6928 first.
std::vector<ServeSuggestion> suggest_vllm_flags(const ServeRequest& request, const ServeResult& result,
                                                const ServeRunner& run);

}  // namespace actmem
