// Megatron-core with TransformerEngine (--transformer-impl transformer_engine), TE fp8 and
// --recompute-modules on Llama-3.1-8B, every number worked out by hand from the save lists in
// validation/EXPECTED.md ("megatron-te"), which name the TE / Megatron-LM source of each:
//   TE module/layernorm_linear.py l.526-536 (inputmat, ln_out, rsigma), module/linear.py
//   l.606-621 (input; fp8 columnwise), attention/dot_product_attention/backends.py l.1592-1664
//   (q, k, v, out, softmaxStats fp32 (b, a, s, 1), rng_state int64 [2]), utils.py l.2612-2615
//   (v made contiguous), Megatron fusions/fused_bias_swiglu.py l.232-235 (fc1 out; e4m3 store),
//   transformer_layer.py l.475-539 and attention.py l.446 (recompute_modules).
// Llama-3.1-8B: h 4096, a 32, kv 8, d 128, f 14336; s 4096, b 1, bf16, tp 1: T = 4096 tokens.
#include <gtest/gtest.h>

#include "api/library.h"
#include "policies/megatron_options.h"
#include "policies/option_table.h"
#include "tensors/te_rules.h"

namespace actmem {
namespace {

constexpr int64_t kT = 4096;

Expected<PreparedModel> megatron(MegatronOptions o, AttentionImpl attention = AttentionImpl::kFlash,
                                 Framework framework = Framework::kMegatron) {
  Workload w;
  w.framework = framework;
  w.attention = attention;
  w.megatron = o;
  return prepare(load_model("llama-3.1-8b").value(), w);
}

int64_t per_layer(const Expected<PreparedModel>& m, Recompute recompute = Recompute::kNone) {
  Layout l;
  l.seq_len = 4096;
  l.micro_batch = 1;
  l.recompute = recompute;
  Totals t;
  EXPECT_TRUE(m.has_value());
  EXPECT_TRUE(evaluate(*m, l, t));
  return t.per_layer;
}

MegatronOptions te(Fp8Recipe fp8 = Fp8Recipe::kNone, unsigned modules = kRecomputeCoreAttn, bool store = false) {
  return {.impl = TransformerImpl::kTransformerEngine, .fp8 = fp8, .fp8_act_input_store = store,
          .recompute_modules = modules};
}

// TE, bf16, no recomputation, per token: x, ln_out (qkv LayerNormLinear) 2·2h + rsigma 4;
// q 2·a·d, k 2·kv·d, v copy 2·kv·d, out 2·a·d, softmaxStats 4·a; h1, ln_out (fc1) 2·2h + rsigma 4;
// fc1 out 2·2f; fc2 input 2·f  = 139,400 bytes per token, + rng_state 16 bytes.
constexpr int64_t kTePerToken = 4 * 4096 + 4 + 2 * 4096 + 2 * 1024 * 2 + 2 * 4096 + 4 * 32 + 4 * 4096 + 4 + 4 * 14336 +
                                2 * 14336;
static_assert(kTePerToken == 139'400);

TEST(MegatronTe, LayerNormLinearAndFusedAttentionHandComputed) {
  EXPECT_EQ(per_layer(megatron(te())), kTePerToken * kT + 16);  // 570,982,416
  EXPECT_EQ(per_layer(megatron(te())), 570'982'416);
}

TEST(MegatronTe, LocalSpecKeepsTheQkvStorageInsteadOfAVCopy) {
  // The local spec (unchanged default) with flash keeps the whole fused QKV output through the v
  // view, 2·(a + 2kv)·d = 12,288 B/token, where TE keeps a v copy 2·kv·d = 2,048 and the rng_state.
  const int64_t local = per_layer(megatron({}));
  EXPECT_EQ(local, (kTePerToken - 2048 + 12288) * kT);  // 612,925,440
  EXPECT_EQ(local - per_layer(megatron(te())), 10240 * kT - 16);
}

// --attention-backend unfused under the TE spec: TE's UnfusedDotProductAttention (backends.py
// l.351-787 @d0067d0) keeps what Megatron's local core attention keeps. Llama-3.1-8B (GQA 32/8, no
// attention dropout): q 2·a·d; k and v repeat_interleave'd to all a heads, 2·a·d each (the contiguous v
// of get_qkv_layout is only their source); the fused softmax's bf16 output (b, a, s, s), 2·a·s per
// token; the context 2·a·d for linear_proj. FusedAttention's k 2·kv·d, v copy 2·kv·d, out 2·a·d,
// softmaxStats 4·a and rng_state 16 B are gone: +(8·a·d - 4·a·d - 4·kv·d - 4·a) = +12,160 B/token.
TEST(MegatronTe, UnfusedAttentionKeepsTheScoresAndRepeatedKv) {
  const int64_t flash = per_layer(megatron(te()));
  const int64_t eager = per_layer(megatron(te(), AttentionImpl::kEager));
  EXPECT_EQ(eager, flash - 16 + 12160 * kT + 2 * 32 * kT * kT);  // + 2·a·s²·b
  EXPECT_EQ(eager, 1'694'531'584);
}

TEST(MegatronTe, UnfusedAttentionMhaKeepsTheContiguousV) {
  // Llama-2-7B (MHA, a 32, d 128): no repeat; bmm keeps the contiguous v (2·a·d, as FusedAttention
  // does), so only the softmax output replaces softmaxStats and rng_state: +(2·a·s - 4·a) B/token - 16.
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron = te();
  const auto llama2 = load_model("llama-2-7b").value();
  const int64_t flash = per_layer(prepare(llama2, w));
  w.attention = AttentionImpl::kEager;
  EXPECT_EQ(per_layer(prepare(llama2, w)), flash - 16 + (2 * 32 * kT - 4 * 32) * kT);
}

TEST(MegatronTe, UnfusedAttentionNote) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron = te();
  w.attention = AttentionImpl::kEager;
  const auto notes = detail::megatron_notes(load_model("llama-3.1-8b").value(), w, Recompute::kNone, 1);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("UnfusedDotProductAttention"), std::string::npos) << notes[0];
  EXPECT_EQ(notes[0].find("softmaxStats"), std::string::npos) << notes[0];
}

TEST(MegatronTe, Fp8DelayedKeepsColumnwiseFp8InputsAndScales) {
  // ln_out of both LayerNormLinears 2h -> h (+4 B scale_inv each); linear_proj gains an fp8 copy of
  // the attention out a·d (+4; FusedAttention still keeps the bf16 out); fc2's input 2f -> f (+4).
  const int64_t fp8 = kTePerToken - 2 * 4096 + 4096 - 14336;
  EXPECT_EQ(per_layer(megatron(te(Fp8Recipe::kDelayed))), fp8 * kT + 16 + 4 * 4);  // 495,484,960
  // tensorwise: Megatron sets save_original_input on linear_proj for recipes other than delayed
  // (attention.py l.428-444; TE linear.py l.597-598): it keeps the bf16 attention out, which
  // FusedAttention keeps already, so the proj fp8 copy a·d (+4 B) of delayed is not there.
  EXPECT_EQ(per_layer(megatron(te(Fp8Recipe::kTensorwise))), (fp8 - 4096) * kT + 16 + 3 * 4);  // 478,707,740
  EXPECT_EQ(per_layer(megatron(te(Fp8Recipe::kTensorwise))), 478'707'740);
  // --activation-func-fp8-input-store: the SwiGLU input [gate|up] as float8_e4m3fn, 2f instead of 4f.
  EXPECT_EQ(per_layer(megatron(te(Fp8Recipe::kDelayed, kRecomputeCoreAttn, true))), (fp8 - 28672) * kT + 32);
}

TEST(MegatronTe, RecomputeModules) {
  // core_attn with TE: the v copy, softmaxStats and rng_state go, but the checkpoint keeps v, a view
  // of the QKV output: the whole QKV storage (12,288 B/token) stays. More than no recomputation.
  EXPECT_EQ(per_layer(megatron(te()), Recompute::kSelective), (kTePerToken - 2048 - 128 + 12288) * kT);
  // mlp: the MLP (fc1's fused norm included) is checkpointed; its input h1 stays: drops ln_out 2h,
  // rsigma 4, fc1 out 4f and act out 2f.
  EXPECT_EQ(per_layer(megatron(te(Fp8Recipe::kNone, kRecomputeMlp)), Recompute::kSelective),
            (kTePerToken - 2 * 4096 - 4 - 4 * 14336 - 2 * 14336) * kT + 16);
  // layernorm is a no-op for the TE dense spec (the norms are fused: IdentityOp modules) ...
  EXPECT_EQ(per_layer(megatron(te(Fp8Recipe::kNone, kRecomputeLayernorm)), Recompute::kSelective),
            per_layer(megatron(te())));
  // ... while the local spec's two norms drop their outputs (qkv's and fc1's inputs) and rstd.
  EXPECT_EQ(per_layer(megatron({.recompute_modules = kRecomputeLayernorm}), Recompute::kSelective),
            (kTePerToken - 2048 + 12288 - 2 * (2 * 4096 + 4)) * kT);
  // The default (core_attn) is what --recompute selective has always meant for megatron.
  EXPECT_EQ(per_layer(megatron({}), Recompute::kSelective),
            per_layer(megatron({.recompute_modules = kRecomputeCoreAttn}), Recompute::kSelective));
}

TEST(MegatronTe, RecomputeModulesFlops) {
  // What selective recomputation reruns per micro-batch, 32 layers: mlp: fc1 and fc2, 2·T·3·h·f;
  // core_attn: QKᵀ and AV over the full square, 2·b·a·s·s·(d + d) (Megatron's MFU convention).
  auto flops = [](MegatronOptions o) {
    Layout l;
    l.seq_len = 4096;
    l.recompute = Recompute::kSelective;
    Totals t;
    EXPECT_TRUE(evaluate(megatron(o).value(), l, t));
    return t.recompute_flops;
  };
  const double mlp = 32.0 * 2 * kT * 3 * 4096.0 * 14336;
  const double core = 32.0 * 2 * 32 * 4096.0 * 4096 * 256;
  EXPECT_DOUBLE_EQ(flops(te(Fp8Recipe::kNone, kRecomputeMlp)), mlp);
  EXPECT_DOUBLE_EQ(flops(te(Fp8Recipe::kNone, kRecomputeMlp | kRecomputeCoreAttn)), mlp + core);
  EXPECT_DOUBLE_EQ(flops(te()), core);
  EXPECT_DOUBLE_EQ(flops({}), core);  // the default, as before
}

// TE's cached fp8 weight copies (te_rules.h), by hand. Llama-3-8B (h 4096, a 32, kv 8, d 128,
// f 14336, 32 layers) at tp 2, one TE linear's weight per rank:
//   qkv (16 + 2·4)·128·4096 = 12,582,912; proj 4096·16·128 = 8,388,608;
//   fc1 2·7168·4096 = 58,720,256; fc2 4096·7168 = 29,360,128: 109,051,904 per layer (half of tp 1's
//   218,103,808). 2 bytes each (Float8Tensor data + transpose on Hopper) + 4 linears · 4 B scale_inv.
constexpr int64_t kLlama3_8bTeWeightsTp2 = 109'051'904;

Layout tp_layout(int64_t tp, int64_t pp = 1, int zero = 1) {
  Layout l;
  l.seq_len = 4096;
  l.parallel = {.dp = 8, .tp = tp, .pp = pp, .num_micro_batches = 2 * pp};
  l.zero_stage = zero;
  return l;
}

PreparedModel llama3_8b(Fp8Recipe fp8) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.attention = AttentionImpl::kFlash;
  w.megatron = te(fp8);
  return prepare(load_model("llama-3-8b").value(), w).value();
}

TEST(MegatronTe, Fp8WeightElementsPerTpRank) {
  const ModelSpec m = load_model("llama-3-8b").value();
  EXPECT_EQ(detail::te_fp8_weight_elements(m, m.layers[0], 1), 218'103'808);
  EXPECT_EQ(detail::te_fp8_weight_elements(m, m.layers[0], 2), kLlama3_8bTeWeightsTp2);
  // tp 16 > kv 8: one KV head replicated per rank, qkv (2 + 2·1)·128·4096 = 2,097,152.
  EXPECT_EQ(detail::te_fp8_weight_elements(m, m.layers[0], 16), 2'097'152 + 1'048'576 + 7'340'032 + 3'670'016);
  EXPECT_EQ(detail::te_fp8_weight_cache_bytes(kLlama3_8bTeWeightsTp2, 4), 218'103'808 + 16);  // 4 copies: 4 scale_inv
}

TEST(MegatronTe, Fp8WeightCacheCountedInTheTotal) {
  Totals fp8, bf16;
  ASSERT_TRUE(evaluate(llama3_8b(Fp8Recipe::kDelayed), tp_layout(2), fp8));
  ASSERT_TRUE(evaluate(llama3_8b(Fp8Recipe::kNone), tp_layout(2), bf16));
  // 32 layers: 2 · 32 · 109,051,904 + 16 · 32 = 6,979,322,368 bytes (6.50 GiB).
  EXPECT_EQ(fp8.fp8_weight_cache, 2 * 32 * kLlama3_8bTeWeightsTp2 + 16 * 32);
  EXPECT_EQ(fp8.fp8_weight_cache, 6'979'322'368);
  EXPECT_EQ(bf16.fp8_weight_cache, 0);
  // A term of its own: not in weights (the bf16 parameters), in the total.
  EXPECT_EQ(fp8.weights, bf16.weights);
  EXPECT_EQ(fp8.total,
            fp8.weights + fp8.gradients + fp8.optimizer + fp8.activations + fp8.transient + fp8.reserve +
                fp8.fp8_weight_cache + fp8.workspaces);
  EXPECT_EQ(fp8.workspaces, 2 * 32 * 1024 * 1024 + 32 * 1024 * 1024 + 1024);  // PyTorch's two + TE's (Hopper)
  // The same bytes under tensorwise current scaling (Float8CurrentScalingQuantizer allocates alike).
  Totals tensorwise;
  ASSERT_TRUE(evaluate(llama3_8b(Fp8Recipe::kTensorwise), tp_layout(2), tensorwise));
  EXPECT_EQ(tensorwise.fp8_weight_cache, 6'979'322'368);
  // pp 4: each stage caches its own 8 layers' copies: 2 · 8 · 109,051,904 + 16 · 8.
  Totals pp4;
  ASSERT_TRUE(evaluate(llama3_8b(Fp8Recipe::kDelayed), tp_layout(2, 4), pp4));
  EXPECT_EQ(pp4.fp8_weight_cache, 1'744'830'592);
  // ZeRO-3 (FSDP): TE caches no workspace (linear.py l.1958, cache_name None under FSDP2).
  Totals zero3;
  ASSERT_TRUE(evaluate(llama3_8b(Fp8Recipe::kDelayed), tp_layout(2, 1, 3), zero3));
  EXPECT_EQ(zero3.fp8_weight_cache, 0);
}

TEST(MegatronTe, Fp8WeightCacheTermInExplainAndJson) {
  const auto prepared = llama3_8b(Fp8Recipe::kDelayed);
  const auto r = explain(prepared, tp_layout(2)).value();
  const Term* term = r.estimate.memory.find("fp8_weight_cache");
  ASSERT_NE(term, nullptr);
  EXPECT_EQ(term->bytes.count(), 6'979'322'368);
  EXPECT_EQ(term->formula, "2·Ψ_TE linears + 4·4 linears·L_stage");
  EXPECT_EQ(r.estimate.total().count(), r.totals.total);  // the terms add up to evaluate()'s total
  EXPECT_EQ(r.stages.front().fp8_weight_cache, 6'979'322'368);
  EXPECT_EQ(r.stages.front().total + r.totals.reserve, r.totals.total);
  const nlohmann::json json = report_json(r);
  EXPECT_EQ(json["memory"]["fp8_weight_cache_bytes"].get<int64_t>(), 6'979'322'368);
  // Without fp8 neither the term nor the key.
  const auto plain = explain(llama3_8b(Fp8Recipe::kNone), tp_layout(2)).value();
  EXPECT_EQ(plain.estimate.memory.find("fp8_weight_cache"), nullptr);
  EXPECT_FALSE(report_json(plain)["memory"].contains("fp8_weight_cache_bytes"));
}

TEST(MegatronTe, ErrorsNameTheField) {
  auto hf = megatron(te(), AttentionImpl::kFlash, Framework::kHF);
  ASSERT_FALSE(hf.has_value());
  EXPECT_EQ(hf.error().field, "transformer_impl");
  auto fp8_local = megatron({.fp8 = Fp8Recipe::kDelayed});
  ASSERT_FALSE(fp8_local.has_value());
  EXPECT_EQ(fp8_local.error().field, "fp8");
  EXPECT_TRUE(megatron(te(), AttentionImpl::kEager).has_value());  // TE's UnfusedDotProductAttention
  auto mla = megatron(te(Fp8Recipe::kNone, kRecomputeMlaUpProj));
  ASSERT_FALSE(mla.has_value());
  EXPECT_EQ(mla.error().field, "recompute_modules");
  EXPECT_TRUE(megatron(te(Fp8Recipe::kNone, kRecomputeMoe | kRecomputeMoeAct | kRecomputeSharedExperts)).has_value());
  // --moe-grouped-gemm: TEGroupedMLP exists under the TE spec with experts only (the local spec's
  // SequentialMLP ignores it, models/backends.py l.133-142); another framework has no such switch.
  MegatronOptions grouped = te();
  grouped.moe_grouped_gemm = true;
  auto dense = megatron(grouped);
  ASSERT_FALSE(dense.has_value());
  EXPECT_EQ(dense.error().field, "moe_grouped_gemm");
  EXPECT_NE(dense.error().message.find("MoE models only"), std::string::npos) << dense.error().message;
  auto hf_grouped = megatron({.moe_grouped_gemm = true}, AttentionImpl::kFlash, Framework::kHF);
  ASSERT_FALSE(hf_grouped.has_value());
  EXPECT_EQ(hf_grouped.error().field, "moe_grouped_gemm");
  Workload w{.framework = Framework::kMegatron, .megatron = grouped};
  EXPECT_TRUE(prepare(load_model("mixtral-8x7b").value(), w).has_value());
  w.megatron.impl = TransformerImpl::kLocal;
  auto local = prepare(load_model("mixtral-8x7b").value(), w);
  ASSERT_FALSE(local.has_value());
  EXPECT_EQ(local.error().field, "moe_grouped_gemm");
}

// Context parallelism (TE context_parallel.py AttnFuncWithCPAndKVP2P, l.1674 and l.2131-2142):
// per rank the layer sees s/cp tokens with the same per-token saves (the last received k|v ring
// buffer in place of this rank's k and v, softmax_lse (b, a, s/cp) fp32 as softmaxStats), plus
// one 16-byte rng_state per ring step: 16·cp bytes (measured: validation/te_validation.py, cp2).
TEST(MegatronTe, ContextParallelKeepsOneRngStatePerRingStep) {
  auto m = megatron(te());
  for (int64_t cp : {2, 4}) {
    Layout l;
    l.seq_len = 4096;
    l.micro_batch = 1;
    l.parallel.cp = cp;
    Totals t;
    ASSERT_TRUE(evaluate(*m, l, t));
    EXPECT_EQ(t.per_layer, kTePerToken * (kT / cp) + 16 * cp) << "cp " << cp;
  }
  // cp 2: 139,400 · 2,048 + 32 = 285,491,232 bytes
  Layout l;
  l.seq_len = 4096;
  l.parallel.cp = 2;
  Totals t;
  ASSERT_TRUE(evaluate(*m, l, t));
  EXPECT_EQ(t.per_layer, 285'491'232);
}

TEST(MegatronTe, OptionNames) {
  EXPECT_EQ(parse_recompute_modules("core_attn,mlp").value(), kRecomputeCoreAttn | kRecomputeMlp);
  EXPECT_EQ(recompute_modules_name(kRecomputeMlp | kRecomputeLayernorm | kRecomputeCoreAttn), "core_attn,layernorm,mlp");
  auto bad = parse_recompute_modules("core_attn,attn");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().field, "recompute_modules");
  TrainingSettings s;
  ASSERT_TRUE(set_training_option(s, "transformer_impl", "transformer_engine"));
  ASSERT_TRUE(set_training_option(s, "fp8", "delayed"));
  ASSERT_TRUE(set_training_option(s, "recompute_modules", "mlp"));
  EXPECT_EQ(s.workload.megatron.impl, TransformerImpl::kTransformerEngine);
  EXPECT_EQ(s.workload.megatron.fp8, Fp8Recipe::kDelayed);
  EXPECT_EQ(s.workload.megatron.recompute_modules, unsigned{kRecomputeMlp});
  EXPECT_FALSE(set_training_option(s, "fp8", "custom"));  // Megatron's custom recipe: not modeled (mxfp8, blockwise: te_fp8_recipes_test.cc)
}

}  // namespace
}  // namespace actmem
