// HF families whose modeling code saves other tensors than Llama's: hand-computed bytes from
// validation/EXPECTED.md (sections "Norms", "Attention", "MLP", "Outside the layers"), each for the
// config of a validation case, so the same numbers are also the measured ones
// (validation/run_validation.py, case named in each test). Sources of the save behaviour: HF
// transformers modeling_gemma.py / modeling_gemma2.py (GemmaRMSNorm, softcapping),
// modeling_qwen3.py (q_norm/k_norm), modeling_phi3.py (qkv_proj, gate_up_proj),
// modeling_gpt_neox.py (query_key_value, partial rotary, parallel residual), modeling_qwen2_moe.py
// (Qwen2MoeSparseMoeBlock: shared expert with a sigmoid gate), modeling_deepseek_v3.py
// (DeepseekV3Attention: multi-head latent attention; DeepseekV3TopkRouter / DeepseekV3MoE).
#include <string>

#include <gtest/gtest.h>

#include "tensors/activation.h"
#include "engine/engine_test_util.h"
#include "model/hf_config.h"

namespace actmem {
namespace {

ModelSpec config(const std::string& json) {
  auto m = parse_hf_config(json, "test.json");
  EXPECT_TRUE(m) << (m ? "" : m.error().message);
  return m ? *m : ModelSpec{};
}

ActivationReport run(const ModelSpec& m, int64_t s, int64_t b, DType dtype, AttentionImpl attention,
                     double hidden_dropout = 0.0, double attention_dropout = 0.0) {
  Workload w;
  w.dtype = dtype;
  w.attention = attention;
  w.hidden_dropout = hidden_dropout;
  w.attention_dropout = attention_dropout;
  w.hf_version = HfVersion::k4_57;  // the measured 4.57 cases (transformers 5: run_hf below)
  Layout l;
  l.seq_len = s;
  l.micro_batch = b;
  auto r = testing::activations_for_test(m, w, l);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? *r : ActivationReport{};
}

int64_t layer_bytes_named(const ActivationReport& r, const std::string& prefix) {
  int64_t sum = 0;
  for (const auto& t : r.tensors)
    if (t.region == "layer" && t.name.rfind(prefix, 0) == 0) sum += t.bytes.count();
  return sum;
}

constexpr const char* kGemma2 = R"({"model_type": "gemma2", "hidden_size": 336, "num_hidden_layers": 2,
  "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 56, "intermediate_size": 900,
  "vocab_size": 1013, "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh",
  "query_pre_attn_scalar": 64, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
  "sliding_window": 4096, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";

// Case gemma2-hf-eager-none-bf16-softcap.
TEST(ActivationHfFamilies, Gemma2EagerSoftcapSandwichNorms) {
  const int64_t s = 45, b = 3, h = 336, a = 6, d = 56, f = 900, V = 1013, e = 2, T = s * b;
  auto r = run(config(kGemma2), s, b, DType::kBF16, AttentionImpl::kEager);
  // Gemma RMSNorm, 4 per layer: fp32 x, fp32 rsqrt, fp32 normalized x, fp32 (1 + w) (h values).
  const int64_t gemma_norm = 4 * T * h + 4 * T + 4 * T * h + 4 * h;
  // Two of the four norms feed linears (q/k/v, gate/up); the post norms feed residual adds.
  const int64_t norms = 4 * gemma_norm + 2 * e * T * h;
  // q after RoPE, k and v repeated to a heads; tanh of the softcap (act dtype), fp32 softmax,
  // probabilities cast to bf16; o_proj input.
  const int64_t attention = 3 * e * T * a * d + e * b * a * s * s + 4 * b * a * s * s + e * b * a * s * s + e * T * a * d;
  const int64_t mlp = 4 * e * T * f;  // gelu(tanh) in and out, up, down input
  EXPECT_EQ(r.per_layer.count(), norms + attention + mlp);
  EXPECT_EQ(r.per_layer.count(), 3266976);  // measured
  EXPECT_EQ(layer_bytes_named(r, "attn.softcap_tanh"), e * b * a * s * s);
  // Outside: ids, cos+sin, final Gemma norm, LM head input, logit softcap tanh (bf16), fp32
  // log-softmax, targets.
  EXPECT_EQ(r.total.count(), 2 * r.per_layer.count() + 8 * T + 2 * e * s * d + gemma_norm + e * T * h + e * T * V +
                                 4 * T * V + 8 * T);
  EXPECT_EQ(r.total.count(), 7822206);  // measured
}

// Case gemma-hf-flash-none-fp32: with e = 4 the fp32 copy of x is x itself, and the normalized x
// (fp32) and the norm's output (the (1 + w) product) are two storages.
TEST(ActivationHfFamilies, GemmaFlashFp32Norms) {
  const int64_t s = 41, b = 2, h = 320, a = 5, kv = 1, d = 72, f = 880, e = 4, T = s * b;
  auto r = run(config(R"({"model_type": "gemma", "hidden_size": 320, "num_hidden_layers": 2,
      "num_attention_heads": 5, "num_key_value_heads": 1, "head_dim": 72, "intermediate_size": 880,
      "vocab_size": 1009, "hidden_activation": "gelu_pytorch_tanh", "torch_dtype": "float32"})"),
               s, b, DType::kFP32, AttentionImpl::kFlash);
  const int64_t gemma_norm = 4 * T * h + 4 * T + 4 * T * h + 4 * h;
  const int64_t flash = e * T * a * d + 2 * e * T * kv * d + 4 * b * a * s + e * T * a * d;  // q, k, v, lse, out
  EXPECT_EQ(r.per_layer.count(), 2 * gemma_norm + 2 * e * T * h + flash + 4 * e * T * f);
  EXPECT_EQ(r.per_layer.count(), 2072568);  // measured
  EXPECT_EQ(r.total.count(), 4817504);      // measured (tied head, no softcap in Gemma 1)
  EXPECT_EQ(layer_bytes_named(r, "attn_norm.one_plus_weight"), 4 * h);
}

constexpr const char* kPhi3 = R"({"model_type": "phi3", "hidden_size": 320, "num_hidden_layers": 2,
  "num_attention_heads": 5, "num_key_value_heads": 5, "intermediate_size": 900, "vocab_size": 1009,
  "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16"})";

// Cases phi3-hf-eager-none-bf16-mha and phi3-hf-flash-none-bf16-mha: with a = kv, eager matmul copies
// the strided v slice (the fused qkv_proj output is not kept); flash keeps v as a view, so the whole
// qkv_proj output stays alive.
TEST(ActivationHfFamilies, Phi3FusedQkvEagerCopiesFlashKeepsStorage) {
  const int64_t b = 3, h = 320, a = 5, d = 64, f = 900, e = 2;
  const ModelSpec m = config(kPhi3);
  {
    const int64_t s = 37, T = s * b;
    auto r = run(m, s, b, DType::kBF16, AttentionImpl::kEager);
    const int64_t norms = 2 * (4 * T * h + 4 * T + e * T * h + e * T * h);
    const int64_t attention = 3 * e * T * a * d + 4 * b * a * s * s + e * b * a * s * s + e * T * a * d;
    // Phi3MLP: gate_up output (2f, silu's input is a view of it), silu output, product.
    EXPECT_EQ(r.per_layer.count(), norms + attention + 4 * e * T * f);
    EXPECT_EQ(r.per_layer.count(), 1775778);  // measured
    EXPECT_EQ(layer_bytes_named(r, "attn.qkv"), 0);
    EXPECT_EQ(layer_bytes_named(r, "attn.v_copy"), e * T * a * d);
  }
  {
    const int64_t s = 41, T = s * b;
    auto r = run(m, s, b, DType::kBF16, AttentionImpl::kFlash);
    EXPECT_EQ(layer_bytes_named(r, "attn.qkv"), e * T * 3 * a * d);
    EXPECT_EQ(r.per_layer.count(), 1991124);  // measured
  }
}

// Case phi3-hf-eager-none-bf16-drop (resid_pdrop = embd_pdrop = 0.1): Phi3DecoderLayer drops the
// attention and MLP outputs (resid_attn_dropout / resid_mlp_dropout: a bool mask each), but Phi3Model
// applies no embedding dropout (4.44 builds embed_dropout and never calls it; 4.48+ modeling_phi3.py
// has none), so the embedding keeps only its ids, whatever embd_pdrop or --hidden-dropout say.
TEST(ActivationHfFamilies, Phi3DropsResidualsNotEmbeddings) {
  const int64_t s = 33, b = 3, h = 320, T = s * b;
  const ModelSpec m = config(kPhi3);
  auto drop = run(m, s, b, DType::kBF16, AttentionImpl::kEager, 0.1);
  auto none = run(m, s, b, DType::kBF16, AttentionImpl::kEager, 0.0);
  EXPECT_EQ(drop.per_layer.count(), none.per_layer.count() + 2 * T * h);
  EXPECT_EQ(drop.per_layer.count(), 1635282);  // measured
  EXPECT_EQ(drop.embedding.count(), 8 * T);
  EXPECT_EQ(drop.total.count(), 3933996);  // measured (an embedding mask would add T·h = 31,680)
}

// Case gpt_neox-hf-eager-none-bf16-drop: LayerNorm (input + fp32 mean, rstd), parallel residual
// (both norms read the layer input: one storage), fused per-head query_key_value, exact GeLU,
// hidden dropout after attention, after the MLP and on the embeddings, partial rotary tables.
TEST(ActivationHfFamilies, GptNeoxParallelResidualDropout) {
  const int64_t s = 37, b = 3, h = 320, a = 5, d = 64, f = 1280, V = 1003, e = 2, T = s * b, rot = 16;
  auto r = run(config(R"({"model_type": "gpt_neox", "hidden_size": 320, "num_hidden_layers": 2,
      "num_attention_heads": 5, "intermediate_size": 1280, "vocab_size": 1003, "rotary_pct": 0.25,
      "use_parallel_residual": true, "hidden_act": "gelu", "torch_dtype": "bfloat16"})"),
               s, b, DType::kBF16, AttentionImpl::kEager, 0.1, 0.1);
  const int64_t norms = e * T * h + 8 * T + 8 * T + e * T * h;  // shared input, 2× stats, one output
  const int64_t attention = e * T * h + 3 * e * T * a * d + 4 * b * a * s * s + b * a * s * s + e * b * a * s * s +
                            e * T * a * d;  // norm2's output, q, k, v copy, softmax, mask, dropout out, context
  const int64_t mlp = 2 * e * T * f + 2 * T * h;  // gelu input and output; two dropout masks
  EXPECT_EQ(r.per_layer.count(), norms + attention + mlp);
  EXPECT_EQ(r.per_layer.count(), 1282161);  // measured
  EXPECT_EQ(r.shared.count(), 2 * e * s * rot);
  EXPECT_EQ(r.total.count(), 2 * r.per_layer.count() + 8 * T + T * h + 2 * e * s * rot + e * T * h + 8 * T + e * T * h +
                                 4 * T * V + 8 * T);
  EXPECT_EQ(r.total.count(), 3192286);  // measured
}

// Case qwen3-hf-eager-none-bf16-gqa: q_norm / k_norm are Llama RMSNorms over head_dim; RoPE keeps
// nothing of their outputs.
TEST(ActivationHfFamilies, Qwen3QkNorm) {
  const int64_t s = 37, b = 3, a = 10, kv = 2, d = 40, e = 2, T = s * b;
  auto r = run(config(R"({"model_type": "qwen3", "hidden_size": 320, "num_hidden_layers": 2,
      "num_attention_heads": 10, "num_key_value_heads": 2, "head_dim": 40, "intermediate_size": 864,
      "vocab_size": 1009, "torch_dtype": "bfloat16"})"),
               s, b, DType::kBF16, AttentionImpl::kEager);
  EXPECT_EQ(layer_bytes_named(r, "attn.q_norm") + layer_bytes_named(r, "attn.k_norm"),
            4 * T * a * d + 4 * T * a + e * T * a * d + 4 * T * kv * d + 4 * T * kv + e * T * kv * d);
  EXPECT_EQ(r.per_layer.count(), 2263068);  // measured
}

// Cases qwen3_moe-hf-eager-none-bf16 (norm_topk_prob true) and qwen3_moe-hf-eager-none-bf16-nonorm:
// without the in-place `weights /= weights.sum(-1)` nothing keeps the fp32 top-k weights (topk keeps
// only its indices) nor the row sums (EXPECTED.md, "hf Mixtral / Qwen3-MoE MoE").
TEST(ActivationHfFamilies, Qwen3MoeNormTopkProb) {
  const std::string base = R"({"model_type": "qwen3_moe", "hidden_size": 320, "num_hidden_layers": 2,
      "num_attention_heads": 6, "num_key_value_heads": 6, "head_dim": 48, "intermediate_size": 640,
      "moe_intermediate_size": 160, "num_experts": 5, "num_experts_per_tok": 3, "vocab_size": 1009,
      "torch_dtype": "bfloat16", )";
  const int64_t s = 29, b = 2, k = 3, T = s * b;
  auto normalized = run(config(base + R"("norm_topk_prob": true})"), s, b, DType::kBF16, AttentionImpl::kEager);
  auto plain = run(config(base + R"("norm_topk_prob": false})"), s, b, DType::kBF16, AttentionImpl::kEager);
  EXPECT_EQ(normalized.per_layer.count() - plain.per_layer.count(), 4 * T * k + 4 * T);
  EXPECT_EQ(plain.per_layer.count(), 1257324);  // measured
  // Absent key: the Qwen3MoeConfig default, false.
  auto absent = run(config(base + R"("mlp_only_layers": []})"), s, b, DType::kBF16, AttentionImpl::kEager);
  EXPECT_EQ(absent.per_layer.count(), plain.per_layer.count());
}

// Case qwen2_moe-hf-eager-none-bf16: Qwen2 attention (GQA 10:2, eager), the Mixtral-style expert loop
// without top-k normalization (the Qwen2MoeConfig default), and the shared expert scaled by
// sigmoid(shared_expert_gate(x)): that mul keeps the sigmoid output (T·1) and the shared expert's
// output (T·h). Layer 2 is in mlp_only_layers: a dense SwiGLU of intermediate_size.
TEST(ActivationHfFamilies, Qwen2MoeSharedExpertAndDenseLayer) {
  const int64_t s = 37, b = 3, h = 320, a = 10, d = 32, V = 1009, e = 2, T = s * b;
  const int64_t E = 4, k = 2, f = 176, fs = 400, fd = 600;
  auto r = run(config(R"({"model_type": "qwen2_moe", "hidden_size": 320, "num_hidden_layers": 3,
      "num_attention_heads": 10, "num_key_value_heads": 2, "intermediate_size": 600, "vocab_size": 1009,
      "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 176,
      "shared_expert_intermediate_size": 400, "decoder_sparse_step": 1, "mlp_only_layers": [2],
      "norm_topk_prob": false, "use_sliding_window": false, "torch_dtype": "bfloat16"})"),
               s, b, DType::kBF16, AttentionImpl::kEager);
  // Two Llama RMSNorms (fp32 x, rsqrt, normalized x) and their outputs (the linears' input).
  const int64_t norms = 2 * (4 * T * h + 4 * T + e * T * h) + 2 * e * T * h;
  // q after RoPE, k and v repeated to a heads, fp32 softmax + bf16 cast, o_proj input.
  const int64_t attention = 3 * e * T * a * d + 4 * b * a * s * s + e * b * a * s * s + e * T * a * d;
  // Router softmax fp32, top-k indices; where pairs, gathered tokens, expert SwiGLU, expert output,
  // weight column, index_add_ source (EXPECTED.md, "hf Mixtral / Qwen3-MoE / Qwen2-MoE MoE").
  const int64_t routed = 4 * T * E + 8 * T * k + 16 * k * T + e * k * T * h + 4 * e * k * T * f + e * k * T * h +
                         e * k * T + e * k * T * h;
  const int64_t shared = 4 * e * T * fs + e * T + e * T * h;
  EXPECT_EQ(r.per_layer.count(), norms + attention + routed + shared);
  EXPECT_EQ(r.per_layer.count(), 2272614);  // measured
  EXPECT_EQ(layer_bytes_named(r, "moe.shared_gate"), e * T);
  const int64_t dense_layer = norms + attention + 4 * e * T * fd;
  // Outside: ids, RoPE cos + sin, final RMSNorm, LM head input, fp32 log-softmax, targets.
  const int64_t outside = 8 * T + 2 * e * s * d + 4 * T * h + 4 * T + e * T * h + e * T * h + 4 * T * V + 8 * T;
  EXPECT_EQ(r.total.count(), 2 * r.per_layer.count() + dense_layer + outside);
  EXPECT_EQ(r.total.count(), 6916928);  // measured
}

constexpr const char* kDeepseekV3 = R"({"model_type": "deepseek_v3", "hidden_size": 320,
  "num_hidden_layers": 3, "num_attention_heads": 5, "num_key_value_heads": 5, "intermediate_size": 640,
  "vocab_size": 1009, "rms_norm_eps": 1e-06, "hidden_act": "silu", "moe_intermediate_size": 112,
  "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2,
  "routed_scaling_factor": 2.5, "norm_topk_prob": true, "first_k_dense_replace": 1, "q_lora_rank": 96,
  "kv_lora_rank": 72, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 40,
  "rope_interleave": true, "rope_scaling": null, "attention_bias": false, "torch_dtype": "bfloat16"})";

// Case deepseek_v3-hf-eager-none-bf16 (EXPECTED.md, "hf DeepSeek-V3"). MLA: q_a_layernorm and
// kv_a_layernorm are Llama RMSNorms over q_lora_rank / kv_lora_rank (the latter on a strided view of
// the kv_a_proj_with_mqa output: its fp32 copy has kv_lora_rank columns); query and key are new
// tensors (cat); eager matmul copies the strided v slice of the kv_b_proj output. MoE: the router
// keeps fp32 copies of x (T·h) and of its weight (E·h), the sigmoid output, gather's indices, and the
// normalization's weights and denominators; the weighted expert output is promoted to fp32.
TEST(ActivationHfFamilies, DeepseekV3MlaEagerMoe) {
  const int64_t s = 37, b = 3, h = 320, a = 5, V = 1009, e = 2, T = s * b;
  const int64_t rq = 96, rkv = 72, dr = 16, dv = 40, dqk = 48;
  const int64_t E = 8, k = 3, f = 112, fs = 224, fd = 640;
  auto r = run(config(kDeepseekV3), s, b, DType::kBF16, AttentionImpl::kEager);
  const int64_t rms = 4 * T * h + 4 * T + e * T * h;
  const int64_t norms = 2 * rms + 2 * e * T * h;
  const int64_t q_path = 4 * T * rq + 4 * T + e * T * rq + e * T * rq;      // q_a_layernorm + q_b_proj input
  const int64_t kv_path = 4 * T * rkv + 4 * T + e * T * rkv + e * T * rkv;  // kv_a_layernorm + kv_b_proj input
  const int64_t core = 2 * e * T * a * dqk + 4 * b * a * s * s + e * b * a * s * s + e * T * a * dv + e * T * a * dv;
  const int64_t attention = q_path + kv_path + core;
  const int64_t router = 4 * T * h + 4 * E * h + 4 * T * E + 8 * T * k + 4 * T * k + 4 * T;
  const int64_t experts = 16 * k * T + e * k * T * h + 4 * e * k * T * f + e * k * T * h + 4 * k * T + 4 * k * T * h;
  EXPECT_EQ(r.per_layer.count(), norms + attention + router + experts + 4 * e * T * fs);
  EXPECT_EQ(r.per_layer.count(), 2554582);  // measured
  EXPECT_EQ(layer_bytes_named(r, "moe.router_weight_fp32"), 4 * E * h);
  EXPECT_EQ(layer_bytes_named(r, "moe.weighted_out"), 4 * k * T * h);
  const int64_t dense_layer = norms + attention + 4 * e * T * fd;  // first_k_dense_replace = 1
  const int64_t outside = 8 * T + 2 * e * s * dr + rms + e * T * h + 4 * T * V + 8 * T;
  EXPECT_EQ(r.total.count(), 2 * r.per_layer.count() + dense_layer + outside);
  EXPECT_EQ(r.total.count(), 7452078);  // measured
}

// Cases deepseek_v3-hf-flash-none-bf16-padv, deepseek_v3-hf-sdpa-none-bf16-nopad,
// deepseek_v3-hf-eager-none-fp32. flash_attention_2 pads v to the q/k head dim (F.pad keeps
// nothing; the padded v, the padded output and the reshape copy of its dv slice are kept); sdpa does
// not pad, so v stays a view of the kv_b_proj output and keeps all of it. With fp32 activations the
// router's x.float() / W.float() are the originals (nothing extra) and kv_a_layernorm's fp32 input is
// the strided view itself: the whole kv_a_proj_with_mqa output (kv_lora_rank + qk_rope_head_dim).
TEST(ActivationHfFamilies, DeepseekV3FlashPadsVSdpaDoesNotFp32RouterCopies) {
  const int64_t b = 3, a = 5, e = 2, dn = 32, dv = 40, dqk = 48;
  const ModelSpec m = config(kDeepseekV3);
  {
    const int64_t s = 41, T = s * b;
    auto r = run(m, s, b, DType::kBF16, AttentionImpl::kFlash);
    EXPECT_EQ(layer_bytes_named(r, "attn.v_padded"), e * T * a * dqk);
    EXPECT_EQ(layer_bytes_named(r, "attn.flash_out"), e * T * a * dqk);
    EXPECT_EQ(layer_bytes_named(r, "attn.context"), e * T * a * dv);
    EXPECT_EQ(layer_bytes_named(r, "attn.kv_b_proj"), 0);
    EXPECT_EQ(r.per_layer.count(), 2764456);  // measured
    EXPECT_EQ(r.total.count(), 8059924);      // measured
  }
  {
    const int64_t s = 33, bb = 2, T = s * bb;
    auto r = run(m, s, bb, DType::kBF16, AttentionImpl::kSdpa);
    EXPECT_EQ(layer_bytes_named(r, "attn.v_padded"), 0);
    EXPECT_EQ(layer_bytes_named(r, "attn.kv_b_proj"), e * T * a * (dn + dv));
    EXPECT_EQ(r.per_layer.count(), 1472272);  // measured
    EXPECT_EQ(r.total.count(), 4287512);      // measured
  }
  {
    const int64_t s = 29, bb = 2, T = s * bb, rkv = 72, dr = 16;
    auto r = run(m, s, bb, DType::kFP32, AttentionImpl::kEager);
    EXPECT_EQ(layer_bytes_named(r, "moe.router_input_fp32") + layer_bytes_named(r, "moe.router_weight_fp32"), 0);
    EXPECT_EQ(layer_bytes_named(r, "attn.kv_a_proj_with_mqa"), 4 * T * (rkv + dr));
    EXPECT_EQ(r.per_layer.count(), 2000304);  // measured
    EXPECT_EQ(r.total.count(), 5861016);      // measured
  }
}

// transformers 5 (`hf_version` 5): fused 3-D experts run by integrations/moe.py @8b584a67
// (validation/EXPECTED.md, "transformers 5"). Case mixtral-hf-eager-none-bf16-hf5: the validation
// Mixtral (h 320, 10 heads / 2 KV heads of 32, E 4, k 2, f 224), s 37, b 3, eager attention, bf16.
ActivationReport run_hf(const ModelSpec& m, int64_t s, int64_t b, AttentionImpl attention, HfVersion v,
                        ExpertsImpl impl = ExpertsImpl::kGroupedMm) {
  Workload w;
  w.attention = attention;
  w.hf_version = v;
  w.experts_impl = impl;
  Layout l;
  l.seq_len = s;
  l.micro_batch = b;
  auto r = testing::activations_for_test(m, w, l);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? *r : ActivationReport{};
}

constexpr const char* kTinyMixtral = R"({"model_type": "mixtral", "hidden_size": 320, "num_hidden_layers": 3,
  "num_attention_heads": 10, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 224,
  "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 1003, "rms_norm_eps": 1e-06,
  "torch_dtype": "bfloat16"})";

TEST(ActivationHfFamilies, Transformers5FusedExperts) {
  const int64_t s = 37, b = 3, h = 320, a = 10, d = 32, e = 2, T = s * b;
  const int64_t E = 4, k = 2, f = 224, S = k * T;
  const ModelSpec m = config(kTinyMixtral);
  // Norms and eager attention, as 4.57 (EXPECTED.md, "Norms", "hf, Llama / Qwen2 / Mixtral").
  const int64_t norms = 2 * (4 * T * h + 4 * T + e * T * h) + 2 * e * T * h;
  const int64_t attention = 3 * e * T * a * d + 4 * b * a * s * s + e * b * a * s * s + e * T * a * d;
  // MixtralTopKRouter: fp32 softmax, int64 top-k, the in-place /= keeps fp32 values and row sums.
  const int64_t router = 4 * T * E + 8 * T * k + 4 * T * k + 4 * T;
  const int64_t base = norms + attention + router;
  // grouped_mm_experts_forward: token_idx, perm, inv_perm (int64 S each), the sorted tokens, int32
  // offsets (E), [gate|up] (2f), act(gate), product, down output, sample_weights[perm].
  const int64_t grouped = 8 * S + 16 * S + e * S * h + 4 * E + 4 * e * S * f + e * S * h + e * S;
  auto r5 = run_hf(m, s, b, AttentionImpl::kEager, HfVersion::k5);
  EXPECT_EQ(r5.per_layer.count(), base + grouped);
  EXPECT_EQ(r5.per_layer.count(), 1792444);  // measured
  EXPECT_EQ(layer_bytes_named(r5, "moe.offsets"), 4 * E);
  EXPECT_EQ(layer_bytes_named(r5, "moe.perm") + layer_bytes_named(r5, "moe.inv_perm"), 16 * S);
  EXPECT_EQ(layer_bytes_named(r5, "moe.weighted_out"), 0);  // no index_add_: view(T, k, h).sum(1)
  // 4.57's loop (where pairs, index_add_ source): e·S·h − 8·S − 4·E more than grouped_mm.
  auto r457 = run_hf(m, s, b, AttentionImpl::kEager, HfVersion::k4_57);
  EXPECT_EQ(r457.per_layer.count() - r5.per_layer.count(), e * S * h - 8 * S - 4 * E);
  // The 5.x eager MixtralExperts loop keeps 4.57's bytes (one fused 2f storage for two f ones).
  auto eager = run_hf(m, s, b, AttentionImpl::kEager, HfVersion::k5, ExpertsImpl::kEager);
  EXPECT_EQ(eager.per_layer.count(), r457.per_layer.count());
  // batched_mm_experts_forward: the per-row weight copies (S, 2f, h) and (S, h, f), the clamped ids
  // instead of perm / inv_perm / offsets, the valid mask cast to the activation dtype.
  auto batched = run_hf(m, s, b, AttentionImpl::kEager, HfVersion::k5, ExpertsImpl::kBatchedMm);
  EXPECT_EQ(batched.per_layer.count() - r5.per_layer.count(), 3 * e * S * f * h - 8 * S - 4 * E + e * S);
  EXPECT_EQ(layer_bytes_named(batched, "moe.gate_up_weights"), 2 * e * S * f * h);
  // Outside the layers nothing changes.
  EXPECT_EQ(r5.total.count() - 3 * r5.per_layer.count(), r457.total.count() - 3 * r457.per_layer.count());
  // The defaults: transformers 5 (the current major version), grouped_mm (modeling_utils.py).
  EXPECT_EQ(Workload{}.hf_version, HfVersion::k5);
  EXPECT_EQ(Workload{}.experts_impl, ExpertsImpl::kGroupedMm);
  EXPECT_EQ(*kHfVersionNames.parse("5"), HfVersion::k5);
  EXPECT_EQ(*kExpertsImplNames.parse("batched_mm"), ExpertsImpl::kBatchedMm);
  EXPECT_FALSE(kExpertsImplNames.parse("sonicmoe"));
}

// DeepSeek-V3 under transformers 5 (kDeepseekV3 above, eager attention, bf16): fp32 routing weights
// (4·S), and no fp32 index_add_ source (−4·S·h) under grouped_mm; the eager loop casts its source to
// the activation dtype (`.to(final_hidden_states.dtype)`, final = zeros_like(hidden_states)).
TEST(ActivationHfFamilies, Transformers5DeepseekV3Experts) {
  const int64_t s = 37, b = 3, h = 320, e = 2, T = s * b, E = 8, k = 3, S = k * T;
  const ModelSpec m = config(kDeepseekV3);
  auto r457 = run_hf(m, s, b, AttentionImpl::kEager, HfVersion::k4_57);
  EXPECT_EQ(r457.per_layer.count(), 2554582);  // measured (deepseek_v3-hf-eager-none-bf16)
  auto grouped = run_hf(m, s, b, AttentionImpl::kEager, HfVersion::k5);
  EXPECT_EQ(r457.per_layer.count() - grouped.per_layer.count(), 4 * S * h - 8 * S - 4 * E);
  EXPECT_EQ(layer_bytes_named(grouped, "moe.combine_weights"), 4 * S);
  auto eager = run_hf(m, s, b, AttentionImpl::kEager, HfVersion::k5, ExpertsImpl::kEager);
  EXPECT_EQ(r457.per_layer.count() - eager.per_layer.count(), (4 - e) * S * h);
}

}  // namespace
}  // namespace actmem
