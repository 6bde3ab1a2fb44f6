// Renderers for `actmem serve`: a readable table and JSON. They only print what serve.h computed.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/serve.h"

namespace actmem {

/// What one `serve` run produced; `capacity` is set when a GPU (or its memory) was given.
struct ServeResult {
  std::string model_name;
  ServeReport serving;
  std::optional<CapacityReport> capacity;
  std::string gpu_name;  // catalog name, or "custom" for --gpu-memory
};

/// Example: serve_json(r)["kv_cache"]["per_token_bytes"] == 131072 for llama-3-8b in bf16.
nlohmann::json serve_json(const ServeResult& result);

/// Terms with GiB and exact bytes, then KV per token/sequence, capacity and notes.
std::string serve_table(const ServeResult& result, bool explain = false);

}  // namespace actmem
