// Inside the `vllm serve` reader (vllm_command.h), shared by its two halves: vllm_command.cc parses
// the line into Given arguments, vllm_command_read.cc turns each read one into the ServeRequest.
// Not a public header.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "serve/vllm_command.h"
#include "actmem/expected.h"

namespace actmem::vllm_args {

// The kinds and uses of src/serve/vllm_arguments.inc (its header comment says what each means).
enum class Kind { kValue, kValues, kFlag, kNegFlag, kOptionalValue, kPositional };
enum class Use { kRead, kNoEffect, kNotModelled };

/// One row of vllm_arguments.inc: flag without its dashes, argparse's dest, kind, use, and for
/// kNotModelled the memory effect left out.
struct ArgRow {
  std::string_view flag;
  std::string_view dest;
  Kind kind;
  Use use;
  std::string_view why;
};

/// Every row of the table, in its order.
std::span<const ArgRow> rows();

/// The option as typed: "--tensor-parallel-size", "-tp" (a short alias), "--no-enable-prefix-caching".
std::string spelling(const ArgRow& row);

/// One argument of the line as parsed.
struct Given {
  const ArgRow* row = nullptr;
  std::string written;              // the option as written (after vLLM's '_' -> '-'): "--max-num-seq", "-tp"
  std::string key;                  // a dotted JSON sub-key: "cudagraph_mode" of -cc.cudagraph_mode=FULL
  std::vector<std::string> values;  // none for flags
  int line = 0;
  std::string file;                 // a --config YAML's name when it came from there

  std::string option() const;  // written, with .key if any
  /// "--tensor-parallel-size 2 (serve.sh:3)", "-cc.cudagraph_mode=FULL (serve.sh:4)".
  std::string source(const std::string& where) const;
};

/// What the read arguments leave for finish().
struct ReadState {
  bool model_given = false;            // the front end serves its own model (no checkpoint check)
  std::string quantization;            // --quantization's method ("fp8", "awq_marlin", ...); empty: not given
  std::string quantization_source;     // where it was given
  bool batched_tokens = false;         // --max-num-batched-tokens given
  std::string chunked_prefill_off;     // the source of --no-enable-chunked-prefill
  std::vector<std::string> cuda_graphs;  // sources of --enforce-eager, -cc, capture sizes
};

/// A kRead argument into `command` (settings, request, notes, warnings); `where` is "serve.sh:3".
Expected<void> read_argument(const Given& given, const std::string& where, VllmCommand& command, ReadState& state);

/// What needs every argument first: the CUDA-graph note, context_from_model, the checkpoint's quantization.
void finish(VllmCommand& command, const ReadState& state);

}  // namespace actmem::vllm_args
