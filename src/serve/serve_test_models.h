// Hand-built ModelSpecs for the serving tests, from each model's published config.json, so the
// tests do not depend on the preset loader. Test-only (included by *_test.cc).
#pragma once

#include "model/model_spec.h"
#include "model/test_models.h"  // dense(): one Llama-like fixture builder

namespace actmem::testing {

/// A Llama-style dense model (test_models.h's dense()) with the config's max_position_embeddings.
inline ModelSpec llama_like(const char* name, int64_t h, int64_t layers, int64_t heads, int64_t kv_heads,
                            int64_t ffn, int64_t vocab, int64_t max_positions) {
  ModelSpec m = dense(name, h, layers, heads, kv_heads, ffn, vocab);
  m.max_positions = max_positions;
  return m;
}

/// meta-llama/Meta-Llama-3-8B config.json.
inline ModelSpec llama_3_8b() { return llama_like("llama-3-8b", 4096, 32, 32, 8, 14336, 128256, 8192); }

/// meta-llama/Llama-3.1-70B config.json.
inline ModelSpec llama_3_1_70b() { return llama_like("llama-3.1-70b", 8192, 80, 64, 8, 28672, 128256, 131072); }

/// mistralai/Mistral-7B-v0.1 config.json: sliding_window 4096 on every layer.
inline ModelSpec mistral_7b_v01() {
  ModelSpec m = llama_like("mistral-7b-v0.1", 4096, 32, 32, 8, 14336, 32000, 32768);
  m.model_type = "mistral";
  for (auto& l : m.layers) l.sliding_window = 4096;
  return m;
}

/// google/gemma-2-9b config.json: head_dim 256, sliding_window 4096 on even layers (HF Gemma2:
/// is_sliding = not layer_idx % 2), tied embeddings, sandwich norms.
inline ModelSpec gemma_2_9b() {
  ModelSpec m = llama_like("gemma-2-9b", 3584, 42, 16, 8, 14336, 256000, 8192);
  m.model_type = "gemma2";
  m.head_dim = 256;
  m.tied_embeddings = true;
  m.sandwich_norms = true;
  m.act = ActFn::kGeluTanh;
  for (size_t i = 0; i < m.layers.size(); ++i) m.layers[i].sliding_window = i % 2 == 0 ? 4096 : 0;
  return m;
}

// deepseek_v3() comes from test_models.h.

}  // namespace actmem::testing
