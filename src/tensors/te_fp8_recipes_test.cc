// TE fp8 block-scaled recipes (--fp8 mxfp8 | blockwise) and --fp8-gpu blackwell, by hand from TE
// main @d0067d0da6cb csrc/quantizer.cpp (MXFP8Quantizer::get_scale_shape l.1852-1881: rowwise
// pad(M, 128) x pad(K/32, 4), columnwise pad(M/32, 4) x pad(K, 128), uint8 e8m0;
// Float8BlockQuantizer::get_scale_shape l.1441-1493: 1x128 tiles rowwise ⌈K/128⌉ x pad(M, 4),
// columnwise ⌈M/128⌉ x pad(K, 4), 128x128 blocks rowwise ⌈M/128⌉ x pad(⌈K/128⌉, 4), columnwise
// ⌈K/128⌉ x pad(⌈M/128⌉, 4), fp32), module/layernorm_linear.py l.478-487 and linear.py l.600-616
// (a saved input keeps its columnwise usage only), Megatron attention.py l.428-444 (linear_proj
// keeps its bf16 input for every recipe but delayed). See validation/EXPECTED.md "megatron-te".
#include <gtest/gtest.h>

#include "api/library.h"
#include "config/config_test_util.h"  // report_of
#include "config/training_config.h"  // read_megatron_args, apply_training_config (--from)
#include "policies/megatron_options.h"
#include "policies/option_table.h"
#include "tensors/te_rules.h"

namespace actmem {
namespace {

MegatronOptions te(Fp8Recipe fp8, Fp8Gpu gpu = Fp8Gpu::kHopper) {
  MegatronOptions o;
  o.impl = TransformerImpl::kTransformerEngine;
  o.fp8 = fp8;
  o.fp8_gpu = gpu;
  return o;
}

PreparedModel prepared(const char* preset, MegatronOptions o) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.attention = AttentionImpl::kFlash;
  w.megatron = o;
  return prepare(load_model(preset).value(), w).value();
}

TEST(TeFp8Recipes, ScaleShapesWithTePadding) {
  using detail::te_fp8_scale_bytes;
  // MXFP8, an activation of 128 rows x 704 features (validation's Llama f): columnwise
  // pad(128/32, 4) x pad(704, 128) = 4 x 768; rowwise pad(128, 128) x pad(704/32, 4) = 128 x 24.
  EXPECT_EQ(te_fp8_scale_bytes(Fp8Recipe::kMxfp8, 128, 704, true, false), 3072);
  EXPECT_EQ(te_fp8_scale_bytes(Fp8Recipe::kMxfp8, 128, 704, false, false), 3072);
  // Blockwise 1x128 tiles, 144 rows x 192: ⌈144/128⌉ x pad(192, 4) = 2 x 192 fp32.
  EXPECT_EQ(te_fp8_scale_bytes(Fp8Recipe::kBlockwise, 144, 192, true, false), 4 * 384);
  // Blockwise 128x128 weight blocks, (4096, 256) (Llama-3-8B's proj at tp 16): rowwise
  // 32 x pad(2, 4) = 128, columnwise 2 x pad(32, 4) = 64, fp32.
  EXPECT_EQ(te_fp8_scale_bytes(Fp8Recipe::kBlockwise, 4096, 256, false, true), 4 * 128);
  EXPECT_EQ(te_fp8_scale_bytes(Fp8Recipe::kBlockwise, 4096, 256, true, true), 4 * 64);
  // Per-tensor recipes: one fp32 scale_inv.
  EXPECT_EQ(te_fp8_scale_bytes(Fp8Recipe::kDelayed, 4096, 4096, true, false), 4);
  // fc2 of Llama-3-8B (4096, 14336) cached under MXFP8: 2 copies + 4096 x 448 + 128 x 14336.
  EXPECT_EQ(detail::te_fp8_weight_copy_bytes(Fp8Recipe::kMxfp8, Fp8Gpu::kBlackwell, 4096, 14336), 121'110'528);
}

int64_t per_layer(const PreparedModel& p, int64_t seq) {
  Layout l;
  l.seq_len = seq;
  l.micro_batch = 1;
  Totals t;
  EXPECT_TRUE(evaluate(p, l, t));
  return t.per_layer;
}

// Llama-3.1-8B (h 4096, f 14336), tp 1, b 1, bf16. tensorwise keeps 116,872 bytes per token + 16
// (te_rules_test.cc: 139,400 − 2·4096 for the two fp8 ln_outs − 14,336 for fc2's fp8 input) + three
// 4-byte scale_invs. MXFP8 and blockwise keep the same data bytes (proj its bf16 input too) and,
// instead of the scale_invs, per-block scales of the qkv and fc1 ln_outs (K = h) and fc2's input (K = f).
constexpr int64_t kTensorwisePerToken = 139'400 - 2 * 4096 - 14336;

TEST(TeFp8Recipes, BlockScaledInputsKeepPaddedScales) {
  const auto mx = prepared("llama-3.1-8b", te(Fp8Recipe::kMxfp8));
  const auto block = prepared("llama-3.1-8b", te(Fp8Recipe::kBlockwise));
  // s 4096: MXFP8 pad(4096/32, 4) x pad(K, 128) = 128·K bytes; blockwise ⌈4096/128⌉ x K fp32 = 128·K
  // bytes too: 128 · (4096 + 4096 + 14336) = 2,883,584 (1/32 byte per element when aligned).
  EXPECT_EQ(per_layer(mx, 4096), kTensorwisePerToken * 4096 + 16 + 2'883'584);  // 481,591,312
  EXPECT_EQ(per_layer(block, 4096), 481'591'312);
  // s 4000 (M = 4000 rows): MXFP8 pad(125, 4) = 128 rows of scales; blockwise ⌈4000/128⌉ = 32
  // tiles: still 2,883,584, not 4000 · 22,528 / 32 = 2,816,000.
  EXPECT_EQ(per_layer(mx, 4000), kTensorwisePerToken * 4000 + 16 + 2'883'584);  // 470,371,600
  EXPECT_EQ(per_layer(block, 4000), 470'371'600);
}

// TE's cached fp8 weight copies, Llama-3-8B at tp 2 (te_rules_test.cc): qkv (3072, 4096), proj
// (4096, 2048), fc1 (14336, 4096), fc2 (4096, 7168): 109,051,904 elements per layer, 32 layers.
Layout tp2() {
  Layout l;
  l.seq_len = 4096;
  l.parallel = {.dp = 8, .tp = 2, .pp = 1, .num_micro_batches = 2};
  l.zero_stage = 1;
  return l;
}

TEST(TeFp8Recipes, WeightCacheByRecipeAndGpu) {
  Totals t;
  // MXFP8: rowwise + columnwise data 2·Ψ, and every dim aligned: each scale tensor Ψ/32 bytes:
  // 2 · 109,051,904 + 109,051,904 / 16 = 224,919,552 per layer.
  ASSERT_TRUE(evaluate(prepared("llama-3-8b", te(Fp8Recipe::kMxfp8)), tp2(), t));
  EXPECT_EQ(t.fp8_weight_cache, int64_t{32} * 224'919'552);  // 7,197,425,664
  // Blockwise: 2·Ψ + fp32 128x128-block scales, rowwise and columnwise: qkv 24·32 + 32·24, proj
  // 32·16 + 16·32, fc1 112·32 + 32·112, fc2 32·56 + 56·32 = 13,312 scales · 4 = 53,248 bytes.
  ASSERT_TRUE(evaluate(prepared("llama-3-8b", te(Fp8Recipe::kBlockwise)), tp2(), t));
  EXPECT_EQ(t.fp8_weight_cache, int64_t{32} * (2 * 109'051'904 + 53'248));  // 6,981,025,792
  // Delayed on Blackwell: one data buffer serves both usages: Ψ + 4 scale_invs per layer.
  ASSERT_TRUE(evaluate(prepared("llama-3-8b", te(Fp8Recipe::kDelayed, Fp8Gpu::kBlackwell)), tp2(), t));
  EXPECT_EQ(t.fp8_weight_cache, int64_t{32} * (109'051'904 + 16));  // 3,489,661,440
  // Hopper, the default: unchanged (te_rules_test.cc Fp8WeightCacheCountedInTheTotal).
  ASSERT_TRUE(evaluate(prepared("llama-3-8b", te(Fp8Recipe::kDelayed)), tp2(), t));
  EXPECT_EQ(t.fp8_weight_cache, 6'979'322'368);
}

TEST(TeFp8Recipes, TermAddsUpAndNamesTheScales) {
  const auto r = explain(prepared("llama-3-8b", te(Fp8Recipe::kMxfp8)), tp2()).value();
  const Term* term = r.estimate.memory.find("fp8_weight_cache");
  ASSERT_NE(term, nullptr);
  EXPECT_EQ(term->bytes.count(), 7'197'425'664);
  EXPECT_EQ(term->formula, "2·Ψ_TE linears + scales");
  EXPECT_EQ(r.estimate.total().count(), r.totals.total);
  const auto bw = explain(prepared("llama-3-8b", te(Fp8Recipe::kTensorwise, Fp8Gpu::kBlackwell)), tp2()).value();
  EXPECT_EQ(bw.estimate.memory.find("fp8_weight_cache")->formula, "Ψ_TE linears + 4·4 linears·L_stage");
  EXPECT_EQ(bw.estimate.total().count(), bw.totals.total);
}

TEST(TeFp8Recipes, NamesAndErrors) {
  TrainingSettings s;
  ASSERT_TRUE(set_training_option(s, "fp8", OptionValue{std::string("mxfp8")}));
  EXPECT_EQ(s.workload.megatron.fp8, Fp8Recipe::kMxfp8);
  ASSERT_TRUE(set_training_option(s, "fp8_gpu", OptionValue{std::string("blackwell")}));
  EXPECT_EQ(s.workload.megatron.fp8_gpu, Fp8Gpu::kBlackwell);
  EXPECT_FALSE(set_training_option(s, "fp8", OptionValue{std::string("custom")}));  // Megatron's custom recipe: not modeled
  // --fp8-gpu without --fp8 sizes the cuBLAS workspaces (workspaces.h); ampere has no fp8.
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron.impl = TransformerImpl::kTransformerEngine;
  w.megatron.fp8_gpu = Fp8Gpu::kBlackwell;
  EXPECT_TRUE(prepare(load_model("llama-3-8b").value(), w).has_value());
  w.megatron.fp8_gpu = Fp8Gpu::kAmpere;
  w.megatron.fp8 = Fp8Recipe::kDelayed;
  auto p = prepare(load_model("llama-3-8b").value(), w);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().field, "fp8");
}

// --from a Megatron-LM line: --fp8-recipe mxfp8 / blockwise (core/enums.py Fp8Recipe) read as --fp8;
// --fp8-param-gather named as not modelled; --disable-parameter-transpose-cache read (below).
TEST(TeFp8Recipes, ReadFromMegatronArgs) {
  for (const auto& [text, recipe] : {std::pair{"mxfp8", Fp8Recipe::kMxfp8}, {"blockwise", Fp8Recipe::kBlockwise}}) {
    auto c = read_megatron_args(std::string("--fp8-format e4m3 --fp8-recipe ") + text + " --fp8-param-gather",
                                "fp8.sh");
    ASSERT_TRUE(c) << c.error().message;
    TrainingSettings s;
    ASSERT_TRUE(apply_training_config(*c, s));
    EXPECT_EQ(s.workload.megatron.impl, TransformerImpl::kTransformerEngine);
    EXPECT_EQ(s.workload.megatron.fp8, recipe);
    int not_modelled = 0;
    for (const auto& w : c->warnings)
      not_modelled += w.find("not modelled") != std::string::npos && w.find("--fp8-param-gather") != std::string::npos;
    EXPECT_EQ(not_modelled, 1);
  }
  auto c = read_megatron_args("--fp8-format hybrid --disable-parameter-transpose-cache", "fp8.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_TRUE(s.workload.megatron.no_transpose_cache);
  EXPECT_EQ(s.workload.megatron.fp8, Fp8Recipe::kDelayed);  // Megatron's default recipe
}

// --disable-parameter-transpose-cache, delayed, Llama-3-8B at tp 2 (qkv (3072, 4096), proj (4096,
// 2048), fc1 (14336, 4096), fc2 (4096, 7168): 109,051,904 weights per layer): no fp8_weight_cache;
// each layer keeps its copies per micro-batch, data + transpose 2 bytes per weight + 4 scale_invs:
// 218,103,824 bytes more per layer (Hopper), 109,051,920 on Blackwell.
TEST(TeFp8Recipes, NoTransposeCacheMovesTheCopiesIntoTheLayers) {
  auto opts = te(Fp8Recipe::kDelayed);
  Totals cached, fresh, fresh_bw;
  ASSERT_TRUE(evaluate(prepared("llama-3-8b", opts), tp2(), cached));
  opts.no_transpose_cache = true;
  ASSERT_TRUE(evaluate(prepared("llama-3-8b", opts), tp2(), fresh));
  opts.fp8_gpu = Fp8Gpu::kBlackwell;
  ASSERT_TRUE(evaluate(prepared("llama-3-8b", opts), tp2(), fresh_bw));
  EXPECT_EQ(fresh.fp8_weight_cache, 0);
  EXPECT_EQ(fresh.per_layer - cached.per_layer, 2 * 109'051'904 + 4 * 4);
  EXPECT_EQ(fresh_bw.per_layer - cached.per_layer, 109'051'904 + 4 * 4);
  // Refused with the block-scaled recipes and without fp8, naming the field.
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron = te(Fp8Recipe::kMxfp8);
  w.megatron.no_transpose_cache = true;
  auto p = prepare(load_model("llama-3-8b").value(), w);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().field, "disable_parameter_transpose_cache");
}


// --fp8-param-gather (Megatron's fp8 primary weights, te_rules.h) on Megatron CI's
// gpt/gpt3_weekly_mcore_tp4_cp2_current_scaling_native_fp8_tp_sp_cp_tp_overlap launch line
// (shared/data/megatron-ci), counted by hand: per TP rank of 4 the 12 layers' qkv 3h·h, proj h·h,
// fc1 4h·h, fc2 4h·h (h 512) are Ψ_TE = 12·12·512²/4 = 9,437,184 fp8 weights in 48 linears, beside
// 16,485,376 params on the GPU. Weights: (16,485,376 − Ψ_TE)·2 + Ψ_TE·1; the cache keeps Hopper's
// transpose Ψ_TE + 4·48 (Blackwell: 4·48). On both GPUs 2·Ψ_TE = 18,874,368 B below the bf16
// weights with their cached copies; the CI's measured state after the step is 17,678,016 B below
// what actmem gave without the flag, on H100 and GB200 alike.
TEST(TeFp8Recipes, Fp8ParamGatherStoresTheLinearsInFp8) {
  const std::string line =
      "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --micro-batch-size 2 --global-batch-size 128 "
      "--seq-length 1024 --max-position-embeddings 1024 --vocab-file vocab.json --transformer-impl transformer_engine "
      "--tensor-model-parallel-size 4 --context-parallel-size 2 --sequence-parallel --fp8-format hybrid "
      "--fp8-recipe tensorwise --use-distributed-optimizer --bf16 --normalization RMSNorm";
  constexpr int64_t kParams = 16'485'376, kTe = 9'437'184, kLinears = 48;
  for (const Fp8Gpu gpu : {Fp8Gpu::kHopper, Fp8Gpu::kBlackwell}) {
    auto report = [&](const std::string& extra) {
      auto c = read_megatron_args(line + extra, "fp8.sh");
      EXPECT_TRUE(c) << c.error().message;
      TrainingSettings s;
      EXPECT_TRUE(apply_training_config(*c, s));
      s.layout.parallel.dp = 1;
      s.workload.megatron.fp8_gpu = gpu;
      return testing::report_of(*c->model, s);
    };
    const Report bf16 = report(""), fp8 = report(" --fp8-param-gather");
    EXPECT_TRUE(fp8.workload.megatron.fp8_param_gather);
    EXPECT_EQ(fp8.totals.params_on_gpu, kParams);
    EXPECT_EQ(fp8.totals.weights, (kParams - kTe) * 2 + kTe);
    EXPECT_EQ(fp8.totals.fp8_weight_cache, (gpu == Fp8Gpu::kHopper ? kTe : 0) + 4 * kLinears);
    EXPECT_EQ(bf16.totals.weights + bf16.totals.fp8_weight_cache - fp8.totals.weights - fp8.totals.fp8_weight_cache,
              2 * kTe);
    const Term* w = fp8.estimate.static_memory.breakdown.find("weights");
    ASSERT_NE(w, nullptr);
    EXPECT_NE(w->substituted.find("(16,485,376 − 9,437,184) params / TP 4 × 2 B + 9,437,184 × 1 B"),
              std::string::npos)
        << w->substituted;
  }
  // Refused where it is not modeled, naming the field.
  auto c = read_megatron_args(line + " --fp8-param-gather", "fp8.sh");
  ASSERT_TRUE(c);
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  auto p = prepare(*c->model, s.workload);
  ASSERT_TRUE(p);
  Layout fsdp = s.layout;
  fsdp.zero_stage = 3;
  auto refused = explain(*p, fsdp);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "fp8_param_gather");
  Workload mx = s.workload;
  mx.megatron.fp8 = Fp8Recipe::kMxfp8;
  auto pm = prepare(*c->model, mx);
  const bool mx_refused = !pm || !explain(*pm, s.layout);
  EXPECT_TRUE(mx_refused);
}

}  // namespace
}  // namespace actmem
