// Megatron-core TE fp8 (delayed / tensorwise per-tensor scaling) on MoE and MLA layers, worked
// out by hand from the sources (validation/EXPECTED.md "megatron-te-fp8-moe-mla", measured by
// validation/megatron_moe_validation.py and megatron_mla_validation.py, fp8-* cases):
//   TE module/grouped_linear.py l.819-826 (split_quantize: a Float8Tensor per expert, each its own
//   allocation for per-tensor recipes, csrc/extensions/cast.cpp split_quantize UNFUSED) and l.901-936
//   (each kept columnwise-only: 1 byte per element + one fp32 scale_inv per local expert);
//   module/fp8_padding.py (each expert's rows up to a multiple of 16), Megatron experts.py l.896-904;
//   module/linear.py l.606-617 (a TE Linear's input kept as its fp8 columnwise copy + scale_inv);
//   Megatron experts.py l.273-276 (moe_act: linear_fc2 set_save_original_input, freed by the
//   checkpoint), transformer_config.py l.2000-2005 (delayed refuses moe_act and layernorm);
//   multi_latent_attention.py l.983-988 (mla_up_proj: the up projections under no_grad).
// Mixtral-8x7B: h 4096, a 32, kv 8, d 128, E 8, k 2, fe 14336. DeepSeek-V3: h 7168, 128 heads,
// q_lora_rank 1536, kv_lora_rank 512, rope 64, nope 128, v 128, E 256, fe 2048, one shared expert.
#include <gtest/gtest.h>

#include "api/library.h"
#include "policies/megatron_options.h"
#include "tensors/te_rules.h"

namespace actmem {
namespace {

constexpr int64_t h = 4096, a = 32, d = 128, E = 8, k = 2, fe = 14336;

Expected<PreparedModel> te(const char* model, Fp8Recipe fp8, unsigned modules = kRecomputeCoreAttn) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.attention = AttentionImpl::kFlash;
  w.megatron = {.impl = TransformerImpl::kTransformerEngine, .fp8 = fp8, .recompute_modules = modules};
  return prepare(load_model(model).value(), w);
}

int64_t per_layer(const Expected<PreparedModel>& m, int64_t seq, Recompute recompute = Recompute::kNone) {
  Layout l;
  l.seq_len = seq;
  l.micro_batch = 1;
  l.recompute = recompute;
  Totals t;
  EXPECT_TRUE(m.has_value());
  if (!m) return -1;
  EXPECT_TRUE(evaluate(*m, l, t));
  return t.per_layer;
}

TEST(TeFp8Moe, ExpertRowsPaddedTo16) {
  // Balanced routing: k·s·b = 8192 rows over 8 experts, 1024 each (a multiple of 16): unchanged;
  // 8000 rows: 1000 each -> 1008: 8064; 1000 rows: 125 -> 128: 1024; 4 local experts of 3 rows: 64.
  EXPECT_EQ(detail::te_fp8_expert_rows(8192, 8), 8192);
  EXPECT_EQ(detail::te_fp8_expert_rows(8000, 8), 8064);
  EXPECT_EQ(detail::te_fp8_expert_rows(1000, 8), 1024);
  EXPECT_EQ(detail::te_fp8_expert_rows(12, 4), 64);
}

TEST(TeFp8Moe, MixtralLayerUnderDelayed) {
  // bf16 -> fp8 on a Mixtral layer at T = 4096 (R = kT = 8192 rows, 1024 per expert: no padding):
  //  qkv LayerNormLinear ln_out 2Th -> Th + 4; linear_proj keeps an fp8 copy of the attention
  //  output beside FusedAttention's bf16 one: + T·a·d + 4; the grouped fc1 input 2Rh -> Rh + 4·E;
  //  the grouped fc2 input 2R·fe -> R·fe + 4·E. The router input, fc1's output (SwiGLU) and the
  //  probs stay in bf16.
  constexpr int64_t T = 4096, R = k * T;
  const int64_t bf16 = per_layer(te("mixtral-8x7b", Fp8Recipe::kNone), T);
  const int64_t fp8 = per_layer(te("mixtral-8x7b", Fp8Recipe::kDelayed), T);
  EXPECT_EQ(bf16 - fp8, (T * h - 4) - (T * a * d + 4) + (R * h - 4 * E) + (R * fe - 4 * E));
  EXPECT_EQ(bf16 - fp8, 150'994'872);
  // tensorwise: linear_proj keeps the bf16 attention output it shares (no fp8 copy): T·a·d + 4 less.
  EXPECT_EQ(per_layer(te("mixtral-8x7b", Fp8Recipe::kTensorwise), T), fp8 - (T * a * d + 4));
}

TEST(TeFp8Moe, PaddedExpertRows) {
  // T = 4000: R = 8000 rows, 1000 per expert, padded to 1008: R' = 8064. The experts' tensors
  // (fc1's fp8 input R'h, fc1's bf16 output 4R'·fe, the padded probs 2R', fc2's fp8 input R'·fe)
  // grow with R'; the dispatcher's (sorted indices) do not.
  constexpr int64_t T = 4000, R = k * T, Rp = 8064;
  const int64_t bf16 = per_layer(te("mixtral-8x7b", Fp8Recipe::kNone), T);
  const int64_t fp8 = per_layer(te("mixtral-8x7b", Fp8Recipe::kDelayed), T);
  EXPECT_EQ(bf16 - fp8, (T * h - 4) - (T * a * d + 4) + (2 * R * h - Rp * h - 4 * E) +
                            (2 * R * fe - Rp * fe - 4 * E) + (4 * R * fe - 4 * Rp * fe) + (2 * R - 2 * Rp));
}

TEST(TeFp8Moe, MoeActUnderTensorwise) {
  // moe_act: fc2 keeps its original (bf16) input, the checkpoint output it then frees: the fp8
  // copy R·fe + 4·E is gone and no bf16 one is added.
  constexpr int64_t T = 4096, R = k * T;
  const int64_t none = per_layer(te("mixtral-8x7b", Fp8Recipe::kTensorwise), T);
  const int64_t act = per_layer(te("mixtral-8x7b", Fp8Recipe::kTensorwise, kRecomputeMoeAct), T, Recompute::kSelective);
  EXPECT_EQ(none - act, R * fe + 4 * E);
  // Megatron refuses moe_act and layernorm under delayed (transformer_config.py l.2000-2005).
  auto delayed = te("mixtral-8x7b", Fp8Recipe::kDelayed, kRecomputeMoeAct);
  ASSERT_FALSE(delayed.has_value());
  EXPECT_EQ(delayed.error().field, "recompute_modules");
  // ... for every model, dense ones included: the check runs at start-up, before any layer exists.
  auto dense = te("llama-3-8b", Fp8Recipe::kDelayed, kRecomputeLayernorm);
  ASSERT_FALSE(dense.has_value());
  EXPECT_EQ(dense.error().field, "recompute_modules");
  EXPECT_TRUE(te("llama-3-8b", Fp8Recipe::kTensorwise, kRecomputeLayernorm).has_value());
  EXPECT_FALSE(te("deepseek-v3", Fp8Recipe::kDelayed, kRecomputeLayernorm).has_value());
}

TEST(TeFp8Moe, WeightCacheElementsAndCopies) {
  const ModelSpec mix = load_model("mixtral-8x7b").value();
  // qkv (32 + 16)·128·4096 + proj 32·128·4096 = 41,943,040; per expert 3·14336·4096 = 176,160,768.
  EXPECT_EQ(detail::te_fp8_weight_elements(mix, mix.layers[0], 1, 1), 41'943'040 + 8 * 176'160'768);
  EXPECT_EQ(detail::te_fp8_weight_copies(mix, mix.layers[0], 1), 2 + 2 * 8);
  EXPECT_EQ(detail::te_fp8_weight_elements(mix, mix.layers[0], 1, 4), 41'943'040 + 2 * 176'160'768);
  EXPECT_EQ(detail::te_fp8_weight_copies(mix, mix.layers[0], 4), 2 + 2 * 2);
  // DeepSeek-V3 at tp 8 (16 heads per rank): q_down 7168·1536 + q_up 1536·16·192 + kv_down
  // 7168·576 + kv_up 512·16·256 + proj 16·128·7168 = 36,634,624; dense layer 0 fc1 + fc2
  // 3·2304·7168; MoE layer 3 at ep 8: shared 3·256·7168 + 32 experts · 3·256·7168.
  const ModelSpec ds = load_model("deepseek-v3").value();
  constexpr int64_t mla = 11'010'048 + 4'718'592 + 4'128'768 + 2'097'152 + 14'680'064;
  static_assert(mla == 36'634'624);
  EXPECT_EQ(detail::te_fp8_weight_elements(ds, ds.layers[0], 8, 8), mla + 3 * 2304 * 7168);
  EXPECT_EQ(detail::te_fp8_weight_copies(ds, ds.layers[0], 8), 5 + 2);
  EXPECT_EQ(detail::te_fp8_weight_elements(ds, ds.layers[3], 8, 8), mla + 33 * 3 * 256 * 7168);
  EXPECT_EQ(detail::te_fp8_weight_copies(ds, ds.layers[3], 8), 5 + 2 + 64);
}

TEST(TeFp8Moe, WeightCacheTermCountsCopiesPerExpert) {
  // Mixtral at tp 1, ep 4 (dp 4): 2 local experts a layer, 32 layers: 2 · 32 · (41,943,040 +
  // 2 · 176,160,768) weight bytes + 4 · 32 · 6 copies' scale_inv = 25,232,933,632 bytes.
  Layout l;
  l.seq_len = 4096;
  l.parallel = {.dp = 4, .tp = 1, .pp = 1, .ep = 4};
  l.zero_stage = 1;
  const auto r = explain(te("mixtral-8x7b", Fp8Recipe::kDelayed).value(), l).value();
  const Term* term = r.estimate.memory.find("fp8_weight_cache");
  ASSERT_NE(term, nullptr);
  EXPECT_EQ(term->bytes.count(), int64_t{2} * 32 * (41'943'040 + int64_t{2} * 176'160'768) + 4 * 32 * 6);
  EXPECT_EQ(term->bytes.count(), 25'232'933'632);
  EXPECT_EQ(term->formula, "2·Ψ_TE linears + 4·n_fp8 weight copies");
  EXPECT_EQ(r.totals.fp8_weight_cache, 25'232'933'632);
}

TEST(TeFp8Mla, MlaUpProjDropsTheUpProjectionsFp8Inputs) {
  // DeepSeek-V3, T = 4096: mla_up_proj drops query, key, value and the q/kv norms fused into the
  // up projections (their rstd; in bf16 their outputs 2T·rq + 2T·rkv, under fp8 the up
  // projections' fp8 copies T·rq + 4 + T·rkv + 4 instead): the two savings differ by T(rq + rkv) - 8.
  constexpr int64_t T = 4096, rq = 1536, rkv = 512;
  auto saving = [&](Fp8Recipe r) {
    return per_layer(te("deepseek-v3", r), T) -
           per_layer(te("deepseek-v3", r, kRecomputeMlaUpProj), T, Recompute::kSelective);
  };
  EXPECT_EQ(saving(Fp8Recipe::kNone) - saving(Fp8Recipe::kTensorwise), T * (rq + rkv) - 8);
  EXPECT_EQ(saving(Fp8Recipe::kNone) - saving(Fp8Recipe::kDelayed), T * (rq + rkv) - 8);
}

}  // namespace
}  // namespace actmem

namespace actmem {
namespace {

TEST(TeFp8Moe, BlackwellCacheKeepsOneBufferPerExpertCopy) {
  // --fp8-gpu blackwell (TE csrc/quantizer.cpp l.361-376: no separate transpose): the same Mixtral
  // layout as above keeps 1 byte per weight: 32 · (41,943,040 + 2 · 176,160,768) + 4 · 32 · 6
  // = 12,616,467,200 bytes; the term names the copies, not 4 linears a layer.
  Workload w;
  w.framework = Framework::kMegatron;
  w.attention = AttentionImpl::kFlash;
  w.megatron = {.impl = TransformerImpl::kTransformerEngine, .fp8 = Fp8Recipe::kDelayed};
  w.megatron.fp8_gpu = Fp8Gpu::kBlackwell;
  Layout l;
  l.seq_len = 4096;
  l.parallel = {.dp = 4, .tp = 1, .pp = 1, .ep = 4};
  l.zero_stage = 1;
  const auto r = explain(prepare(load_model("mixtral-8x7b").value(), w).value(), l).value();
  const Term* term = r.estimate.memory.find("fp8_weight_cache");
  ASSERT_NE(term, nullptr);
  EXPECT_EQ(term->bytes.count(), 32 * (41'943'040 + int64_t{2} * 176'160'768) + 4 * 32 * 6);
  EXPECT_EQ(term->bytes.count(), 12'616'467'200);
  EXPECT_EQ(term->formula, "Ψ_TE linears + 4·n_fp8 weight copies");
}

TEST(TeFp8Moe, BlockScaledRecipesAndUncachedCopiesRefusedOnMoeAndMla) {
  // The MoE / MLA fp8 rules are the per-tensor recipes' (16-row Fp8Padding, one scale_inv per
  // expert); mxfp8 (32-row alignment, block scales) and blockwise are refused there, as are the
  // per-micro-batch copies of --disable-parameter-transpose-cache. Dense models keep them.
  for (const char* model : {"mixtral-8x7b", "deepseek-v3"})
    for (Fp8Recipe recipe : {Fp8Recipe::kMxfp8, Fp8Recipe::kBlockwise}) {
      auto m = te(model, recipe);
      ASSERT_FALSE(m.has_value()) << model;
      EXPECT_EQ(m.error().field, "fp8");
    }
  EXPECT_TRUE(te("llama-3-8b", Fp8Recipe::kMxfp8).has_value());
  Workload w;
  w.framework = Framework::kMegatron;
  w.attention = AttentionImpl::kFlash;
  w.megatron = {.impl = TransformerImpl::kTransformerEngine, .fp8 = Fp8Recipe::kTensorwise};
  w.megatron.no_transpose_cache = true;
  auto moe = prepare(load_model("mixtral-8x7b").value(), w);
  ASSERT_FALSE(moe.has_value());
  EXPECT_EQ(moe.error().field, "disable_parameter_transpose_cache");
  EXPECT_TRUE(prepare(load_model("llama-3-8b").value(), w).has_value());
}

}  // namespace
}  // namespace actmem
