#include "params.h"

#include "bytes.h"  // checked_mul, checked_add: counts of absurd configs must not wrap

namespace actmem {

namespace {

int64_t mul(std::initializer_list<int64_t> factors) {
  int64_t r = 1;
  for (int64_t f : factors) r = checked_mul(r, f);
  return r;
}

/// One norm over `width` features: a weight, plus a bias for LayerNorm with bias.
int64_t norm_params(const ModelSpec& m, int64_t width) { return m.norm_bias ? mul({2, width}) : width; }

/// Attention weights of one layer (shapes as in the HF modeling files). Fused projections
/// (GPT-2 c_attn, NeoX query_key_value, Phi-3 qkv_proj) hold the same elements as separate ones.
void count_attention(const ModelSpec& m, LayerParams& p) {
  const int64_t h = m.hidden;
  if (m.mla) {
    // DeepSeek-V3 (modeling_deepseek_v3.py): the down-projections and their norms are small and
    // replicated under TP; the up-projections and o_proj are split by heads.
    const MlaSpec& a = *m.mla;
    const int64_t heads = m.num_heads;
    if (a.q_lora_rank > 0) {
      p.replicated = checked_add(p.replicated, mul({h, a.q_lora_rank}));          // q_a_proj
      p.replicated = checked_add(p.replicated, a.q_lora_rank);                   // q_a_layernorm
      p.attention = checked_add(p.attention, mul({a.q_lora_rank, heads, a.qk_head_dim()}));  // q_b_proj
    } else {
      p.attention = checked_add(p.attention, mul({h, heads, a.qk_head_dim()}));  // q_proj
    }
    p.replicated = checked_add(p.replicated, mul({h, checked_add(a.kv_lora_rank, a.qk_rope_head_dim)}));
    p.replicated = checked_add(p.replicated, a.kv_lora_rank);  // kv_a_layernorm
    p.attention = checked_add(p.attention,
                              mul({a.kv_lora_rank, heads, checked_add(a.qk_nope_head_dim, a.v_head_dim)}));
    p.attention = checked_add(p.attention, mul({heads, a.v_head_dim, h}));  // o_proj
    return;
  }
  const int64_t kv_out = checked_add(m.kv_dim(), m.v_dim());
  p.attention = checked_add(mul({h, m.q_dim()}), mul({m.attn_out_dim(), h}));
  p.kv_projection = mul({h, kv_out});
  p.kv_heads = m.num_kv_heads;
  if (m.qkv_bias) {  // column-parallel: split with the weight
    p.attention = checked_add(p.attention, m.q_dim());
    p.kv_projection = checked_add(p.kv_projection, kv_out);
  }
  if (m.o_bias) p.replicated = checked_add(p.replicated, h);        // row-parallel: added after the reduce
  if (m.qk_norm) p.replicated = checked_add(p.replicated, mul({2, m.head_dim}));  // q_norm, k_norm
}

/// An MLP of intermediate size `ffn`: weights, and the column-parallel biases (up/gate).
int64_t mlp_weights(const ModelSpec& m, int64_t ffn) {
  const int64_t matrices = m.gated_mlp ? 3 : 2;
  int64_t n = mul({matrices, m.hidden, ffn});
  if (m.mlp_bias) n = checked_add(n, mul({matrices - 1, ffn}));
  return n;
}

}  // namespace

int64_t LayerParams::per_rank(int64_t tp, int64_t ep) const {
  // K/V split by heads: each rank keeps max(1, kv/tp) heads' worth.
  const int64_t kv = kv_heads > 0 ? checked_mul(kv_projection / kv_heads, kv_heads_per_rank(kv_heads, tp)) : 0;
  return checked_add(checked_add(ceil_div(attention, tp), kv),
                     checked_add(checked_add(ceil_div(dense_mlp, tp), ceil_div(shared_experts, tp)),
                                 checked_add(replicated, ceil_div(ceil_div(routed_experts, ep), tp))));
}

int64_t ParamCounts::total() const {
  int64_t n = checked_add(checked_add(embedding, lm_head), checked_add(lm_head_bias, final_norm));
  for (const auto& l : layers)
    for (int64_t part : {l.attention, l.kv_projection, l.dense_mlp, l.routed_experts, l.shared_experts, l.replicated})
      n = checked_add(n, part);
  return n;
}

int64_t ParamCounts::non_embedding() const { return checked_sub(total(), checked_add(embedding, lm_head)); }

int64_t ParamCounts::active() const {
  int64_t n = total();
  for (const auto& l : layers)
    if (l.routed_experts > 0) n = checked_add(checked_sub(n, l.routed_experts), routed_active_per_layer);
  return n;
}

ParamCounts count_params(const ModelSpec& m) {
  ParamCounts c;
  const int64_t h = m.hidden;
  c.embedding = mul({m.vocab, h});
  if (m.learned_positions) c.embedding = checked_add(c.embedding, mul({m.max_positions, h}));
  c.lm_head = m.tied_embeddings ? 0 : mul({m.vocab, h});
  c.lm_head_bias = m.lm_head_bias ? m.vocab : 0;
  c.final_norm = norm_params(m, h);

  const int norms_per_layer = m.sandwich_norms ? 4 : 2;
  if (m.moe) {
    const MoeSpec& e = *m.moe;
    c.routed_active_per_layer = mul({e.experts_per_token, 3, h, e.expert_ffn});
  }
  c.layers.reserve(m.layers.size());
  for (const LayerSpec& spec : m.layers) {
    LayerParams p;
    count_attention(m, p);
    p.replicated = checked_add(p.replicated, mul({norms_per_layer, norm_params(m, h)}));
    if (spec.moe && m.moe) {
      // Routed experts are gated MLPs (w1/w2/w3) without biases in every supported MoE family.
      const MoeSpec& e = *m.moe;
      p.routed_experts = mul({e.num_experts, 3, h, e.expert_ffn});
      p.replicated = checked_add(p.replicated, mul({e.num_experts, h}));  // router
      if (e.router_bias) p.replicated = checked_add(p.replicated, e.num_experts);
      if (e.shared_ffn > 0) p.shared_experts = mul({3, h, e.shared_ffn});
      if (e.shared_expert_gate) p.replicated = checked_add(p.replicated, h);  // Linear(h, 1)
    } else {
      p.dense_mlp = mlp_weights(m, spec.ffn);
      if (m.mlp_bias) p.replicated = checked_add(p.replicated, h);  // down-projection bias, row-parallel
    }
    c.layers.push_back(p);
  }
  return c;
}

}  // namespace actmem
