// Hand-built ModelSpec fixtures for unit tests (until presets land, and for paper models that
// have no config.json). Each fixture names where its numbers come from.
#pragma once

#include <string>

#include "model/model_spec.h"

namespace actmem::testing {

inline ModelSpec dense(std::string name, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                       int64_t ffn, int64_t vocab) {
  ModelSpec m;
  m.name = name;
  m.model_type = "llama";
  m.hidden = hidden;
  m.num_layers = layers;
  m.num_heads = heads;
  m.num_kv_heads = kv_heads;
  m.head_dim = hidden / heads;
  m.vocab = vocab;
  m.max_positions = 4096;
  m.layers.assign(static_cast<size_t>(layers), LayerSpec{false, ffn, 0});
  return m;
}

/// Llama-2-70B config.json: h 8192, L 80, a 64, kv 8, f 28672, V 32000.
inline ModelSpec llama_2_70b() { return dense("llama-2-70b", 8192, 80, 64, 8, 28672, 32000); }

/// Llama-3-70B config.json: as Llama-2-70B with V 128256.
inline ModelSpec llama_3_70b() { return dense("llama-3-70b", 8192, 80, 64, 8, 28672, 128256); }

/// A small Llama-like model for hand computation: h 64, L 4, a 4, kv 2, f 160, V 100.
inline ModelSpec tiny_llama() { return dense("tiny-llama", 64, 4, 4, 2, 160, 100); }

/// Korthikanti et al. 2022's GPT: LayerNorm, 4h GeLU MLP, MHA, learned positions, dropout 0.1.
inline ModelSpec paper_gpt(std::string name, int64_t hidden, int64_t heads, int64_t layers, int64_t vocab = 51200) {
  ModelSpec m = dense(std::move(name), hidden, layers, heads, heads, 4 * hidden, vocab);
  m.model_type = "gpt2";
  m.norm = NormKind::kLayerNorm;
  m.norm_bias = true;
  m.gated_mlp = false;
  m.act = ActFn::kGelu;
  m.fused_qkv = true;
  m.learned_positions = true;
  m.tied_embeddings = true;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  m.embedding_dropout = 0.1;
  return m;
}

/// GPT-2 small config.json: h 768, L 12, a 12, V 50257, n_positions 1024, gelu_new, dropout 0.1.
inline ModelSpec gpt2_small() {
  ModelSpec m = paper_gpt("gpt2", 768, 12, 12, 50257);
  m.act = ActFn::kGeluNew;
  m.max_positions = 1024;
  return m;
}

/// Mixtral-8x7B config.json: h 4096, L 32, a 32, kv 8, 8 experts top-2, expert f 14336, V 32000.
inline ModelSpec mixtral_8x7b() {
  ModelSpec m = dense("mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000);
  m.model_type = "mixtral";
  m.moe = MoeSpec{8, 2, 14336, 0, false, false, 0.0};
  for (auto& l : m.layers) l.moe = true;
  return m;
}

/// DeepSeek-V3 config.json: h 7168, L 61 (first 3 dense, f 18432), a 128, MLA (q rank 1536, kv rank 512,
/// nope 128, rope 64, v 128), 256 routed experts top-8 of f 2048, 1 shared expert, V 129280.
inline ModelSpec deepseek_v3() {
  ModelSpec m = dense("deepseek-v3", 7168, 61, 128, 128, 18432, 129280);
  m.model_type = "deepseek_v3";
  m.head_dim = 192;  // qk_nope_head_dim + qk_rope_head_dim
  m.max_positions = 163840;
  m.mla = MlaSpec{1536, 512, 128, 64, 128};
  m.moe = MoeSpec{256, 8, 2048, 2048, false, true, 0.0};
  for (size_t i = 3; i < m.layers.size(); ++i) m.layers[i].moe = true;
  return m;
}

}  // namespace actmem::testing
