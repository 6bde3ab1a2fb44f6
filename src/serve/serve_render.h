// Renderers for `actmem serve`: a readable table and JSON. They only print what serve.h computed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/serve.h"

namespace actmem {

/// One `vllm serve` flag that alone makes a request fit (serve/suggest.h).
struct ServeSuggestion {
  std::string flag;        // the `vllm serve` flag and its value: "--max-model-len 6928"
  std::string option;      // the actmem option it sets: "context_len"
  std::string value;       // "6928"
  double concurrency = 0;  // vLLM's "Maximum concurrency" with it (requests of its max_model_len)
  std::string effect;      // one line: "54.22x -> 64.11x requests of 6,928 tokens"
};

/// What one `serve` run produced; `capacity` is set when a GPU (or its memory) was given.
struct ServeResult {
  std::string model_name;
  ServeReport serving;
  std::optional<CapacityReport> capacity;
  std::string gpu_name;  // catalog name, or "custom" for --gpu-memory
  std::vector<ServeSuggestion> suggestions;  // when the capacity does not fit (vLLM's rules)
};

/// Example: serve_json(r)["kv_cache"]["per_token_bytes"] == 131072 for llama-3-8b in bf16.
nlohmann::json serve_json(const ServeResult& result);

/// Terms with GiB and exact bytes, then KV per token/sequence, capacity and notes.
std::string serve_table(const ServeResult& result, bool explain = false);

}  // namespace actmem
