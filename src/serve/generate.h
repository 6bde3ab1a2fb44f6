// Generation with HF transformers' generate() (not a serving engine): the per-GPU peak of one
// model.generate(input_ids, max_new_tokens=N) call on b prompts of P tokens, greedy or sampling,
// one GPU, the default DynamicCache. Public entry point: estimate_generate().
//
// Symbols: b prompts, P prompt tokens, N new tokens, L layers, a heads, kv KV heads, d head dim,
// h hidden, f MLP width, V vocabulary, e bytes of the model dtype. The last forward pass is the
// decode step that feeds token P+N-1 (the N-th new token is sampled and never fed back), so the
// cache ends holding T = P + N - 1 tokens per sequence (N = 1: the prefill only, T = P).
//
// DynamicCache (transformers src/transformers/cache_utils.py, DynamicLayer.update):
//   self.keys = torch.cat([self.keys, key_states], dim=-2); then the same for self.values.
// Per layer K and V of shape (b, kv, t, d) in the model dtype; each decode step allocates a new
// tensor of t+1 tokens while the old one of t is still referenced, so at the last layer of the
// last step one old K (or V) of T-1 tokens coexists with the whole cache: b·kv·(T-1)·d·e.
// (K is reassigned, freeing its old tensor, before V is concatenated: one tensor, not two.)
//
// Prefill (one forward pass of b·P tokens, the cache of P tokens filled layer by layer):
//   weights + KV(P) + the largest block workspace:
//   attention   residual + normed input (2·b·P·h·e) + q (b·P·a·d·e) + k, v (2·b·P·kv·d·e) + output
//               (b·P·a·d·e); eager attention (eager_attention_forward: matmul, softmax in fp32,
//               .to(dtype)) also holds the scores in e, their fp32 softmax and its cast back to e
//               at once: b·a·P·P·(2e+4); sdpa (memory-efficient / flash kernels) and flash_attention_2
//               hold no P×P matrix
//   MLP         residual + normed input + gate|up (2·b·P·f·e, gated) + activation (b·P·f·e)
//   LM head     the last position only: generate() asks for logits_to_keep = 1 (transformers >= 4.45,
//               `num_logits_to_keep` then `logits_to_keep` in LlamaForCausalLM.forward), b·V·e, and
//               GenerationMixin._sample copies them to fp32: b·V·4
// Decode (last step, one token per sequence): weights + KV(T) + max(one old K of T-1 tokens,
// the LM head's b·h·e + b·V·(e+4)). Peak = max(prefill, decode).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_spec.h"
#include "report/breakdown.h"
#include "util/bytes.h"
#include "util/dtype.h"
#include "actmem/expected.h"
#include "util/names.h"

namespace actmem {

/// HF attn_implementation.
enum class GenerateAttention { kEager, kSdpa, kFlash };

inline constexpr NameTable<GenerateAttention, 3> kGenerateAttentionNames{
    "attention implementation (HF attn_implementation)",
    "attention",
    {{{GenerateAttention::kEager, "eager"}, {GenerateAttention::kSdpa, "sdpa"}, {GenerateAttention::kFlash, "flash"}}}};

struct GenerateOptions {
  int64_t prompt_len = 0;   // P
  int64_t new_tokens = 0;   // N (max_new_tokens)
  int64_t batch = 1;        // b
  std::optional<DType> dtype;  // unset: the config's torch_dtype (fp32 models stay fp32 in HF)
  GenerateAttention attention = GenerateAttention::kSdpa;
};

struct GenerateReport {
  DType dtype = DType::kBF16;
  int64_t prompt_len = 0, new_tokens = 0, batch = 1;
  int64_t final_tokens = 0;   // T = P + N - 1: tokens the cache holds after the last forward pass
  Breakdown prefill;          // weights, KV of P tokens, the workspace peak
  Breakdown decode;           // weights, KV of T tokens, the last step's transient
  Breakdown workspace;        // prefill workspace candidates (largest wins)
  std::string peak_phase;     // "prefill" or "decode"
  std::vector<std::string> notes;

  Bytes weights_bytes() const { return prefill.find("weights")->bytes; }
  Bytes prefill_bytes() const { return prefill.total(); }
  Bytes decode_bytes() const { return decode.total(); }
  Bytes peak() const { return prefill_bytes() < decode_bytes() ? decode_bytes() : prefill_bytes(); }
};

/// Example: Llama-3-8B bf16, P 4096, N 512, b 1: decode KV = 2·32·8·128·4607·2 bytes.
Expected<GenerateReport> estimate_generate(const ModelSpec& model, const GenerateOptions& options);

/// JSON (README "actmem serve --generate").
nlohmann::json generate_json(const std::string& model_name, const GenerateReport& report);
/// A readable table; explain adds every term's formula.
std::string generate_table(const std::string& model_name, const GenerateReport& report, bool explain);

}  // namespace actmem
