// The public API: evaluate() and explain() agree to the byte over a grid of layouts, every term of
// a report adds up to the totals it shows, and an invalid layout fails the same way in both.
#include "engine/engine.h"

#include <random>

#include <gtest/gtest.h>

#include "api/library.h"
#include "model/hf_config.h"
#include "policies/pipeline_split.h"

namespace actmem {
namespace {

Layout random_layout(std::mt19937& rng, const ModelSpec& m) {
  auto pick = [&](std::initializer_list<int64_t> xs) {
    std::uniform_int_distribution<std::size_t> d(0, xs.size() - 1);
    return *(xs.begin() + static_cast<std::ptrdiff_t>(d(rng)));
  };
  Layout l;
  l.seq_len = pick({512, 2048, 4096, 8192});
  l.micro_batch = pick({1, 2, 4});
  l.parallel.tp = pick({1, 2, 4, 8});
  l.parallel.sp = l.parallel.tp > 1 && pick({0, 1}) == 1;
  l.parallel.pp = pick({1, 2, 4});
  l.parallel.vpp = l.parallel.pp > 1 ? pick({1, 2}) : 1;
  l.parallel.dp = pick({1, 8, 64});
  l.parallel.cp = pick({1, 1, 2});
  l.parallel.ep = m.is_moe() ? pick({1, 8}) : 1;
  l.parallel.num_micro_batches = l.parallel.pp > 1 ? pick({0, 8, 16}) : 0;
  l.recompute = static_cast<Recompute>(pick({0, 1, 2}));
  if (l.recompute == Recompute::kFull) {
    const int64_t how = pick({0, 1, 2});
    if (how == 1) l.recompute_layers = pick({0, 1, 2});
    if (how == 2) l.checkpoint_every = pick({1, 2});
  }
  l.zero_stage = static_cast<int>(pick({0, 1, 2, 3}));
  l.offload_optimizer = pick({0, 0, 1}) == 1;
  l.reserve = Bytes{pick({0, int64_t{1} << 30})};
  return l;
}

// The same accounting by construction (one routine, two sinks), checked anyway: for random layouts
// of every kind of model, evaluate()'s totals equal explain()'s, and the report's memory terms add
// up to its total.
TEST(Engine, EvaluateEqualsExplainOverAGridOfLayouts) {
  std::mt19937 rng(20261201);
  int checked = 0;
  int failed = 0;
  for (const char* preset : {"gpt2", "llama-3-70b", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "qwen3-30b-a3b"}) {
    const ModelSpec model = load_model(preset).value();
    for (Framework fw : {Framework::kHF, Framework::kMegatron})
      for (AttentionImpl attn : {AttentionImpl::kEager, AttentionImpl::kFlash}) {
        const auto prepared = prepare(model, {.framework = fw, .attention = attn}).value();
        for (int i = 0; i < 40; ++i) {
          const Layout l = random_layout(rng, model);
          Totals fast;
          const bool ok = evaluate(prepared, l, fast);
          const auto report = explain(prepared, l);
          ASSERT_EQ(ok, report.has_value()) << preset;
          if (!ok) {
            ++failed;
            EXPECT_EQ(fast.error, report.error().kind) << report.error().message;
            EXPECT_EQ(std::string(fast.error_field), report.error().field) << report.error().message;
            continue;
          }
          ++checked;
          const Totals& t = report->totals;
          EXPECT_EQ(fast.total, t.total) << preset;
          EXPECT_EQ(fast.activations, t.activations);
          EXPECT_EQ(fast.weights, t.weights);
          EXPECT_EQ(fast.per_layer, t.per_layer);
          EXPECT_EQ(fast.activations_total, t.activations_total);
          EXPECT_EQ(fast.forward_flops, t.forward_flops);
          const auto& e = report->estimate;
          EXPECT_EQ(e.total().count(), fast.total);
          EXPECT_EQ(e.activations->breakdown.total().count(), fast.activations_total) << preset;
          EXPECT_EQ(e.activations->in_flight_by_stage.at(static_cast<std::size_t>(fast.peak_stage)).count(),
                    fast.activations);
        }
      }
  }
  EXPECT_GT(checked, 300);  // the grid is mostly valid layouts
  EXPECT_GT(failed, 10);    // and has some invalid ones (TP not dividing heads, CP with eager ...)
}

// Static memory per stage from layer kinds equals stage_params() over the layers, for uneven
// models too (DeepSeek-V3: 3 dense layers, then 58 MoE layers).
TEST(Engine, StageParamsFromKindsEqualStageParams) {
  const ModelSpec m = load_model("deepseek-v3").value();
  const auto prepared = prepare(m, {}).value();
  for (int64_t tp : {1, 2, 8})
    for (int64_t ep : {1, 8, 32}) {
      Layout l;
      l.seq_len = 4096;
      l.parallel = {.dp = 64, .tp = tp, .ep = ep};
      auto r = explain(prepared, l).value();
      const auto stages = stage_params(count_params(m), l.parallel);
      EXPECT_EQ(r.totals.params_on_gpu, stages.at(0).total()) << tp << " " << ep;
    }
}

// The fast path does no formatting: a failing layout names only the option.
TEST(Engine, EvaluateReportsTheFieldOfAnImpossibleLayout) {
  const auto prepared = prepare(load_model("llama-3-70b").value(), {}).value();
  Totals t;
  EXPECT_FALSE(evaluate(prepared, {.seq_len = 8192, .parallel = {.tp = 3}}, t));
  EXPECT_EQ(t.error, ErrorKind::kIncompatible);
  EXPECT_STREQ(t.error_field, "tp");
  EXPECT_FALSE(evaluate(prepared, {.seq_len = 0}, t));
  EXPECT_EQ(t.error, ErrorKind::kInvalid);
  EXPECT_STREQ(t.error_field, "seq_len");
  // 2^24 tokens × 2^20 sequences of 128,256 fp32 logits overflow 64 bits.
  EXPECT_FALSE(evaluate(prepared, {.seq_len = int64_t{1} << 24, .micro_batch = int64_t{1} << 20}, t));
  EXPECT_EQ(t.error, ErrorKind::kOverflow);
}

// Seed card "Model Memory Footprint": Llama-3-70B at 16 bytes per parameter, 1,128,859,303,936 B.
TEST(Engine, ParamsOnlyAndFullModelShareStaticMemory) {
  const auto full = prepare(load_model("llama-3-70b").value(), {}).value();
  const auto bare = prepare_params_only(70'553'706'496, {}).value();
  Totals a, b;
  ASSERT_TRUE(evaluate(full, {.seq_len = 8192}, a));
  ASSERT_TRUE(evaluate(bare, {.seq_len = 8192}, b));
  EXPECT_EQ(a.weights + a.gradients + a.optimizer, int64_t{16} * 70'553'706'496);
  EXPECT_EQ(b.total, int64_t{16} * 70'553'706'496);
  EXPECT_EQ(b.activations, 0);
}

// render_message() spells each @option the front end's way.
TEST(Engine, MessagesSpellOptionsPerFrontEnd) {
  auto e = explain(prepare(load_model("llama-3-70b").value(), {}).value(), {.seq_len = 8192, .parallel = {.tp = 3}});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().field, "tp");
  const auto cli = render_message(e.error().message, [](const std::string& f) { return "--" + f; });
  const auto py = render_message(e.error().message, [](const std::string& f) { return f + "="; });
  EXPECT_EQ(cli.rfind("--tp 3: num_attention_heads (64) is not divisible by 3", 0), 0u) << cli;
  EXPECT_EQ(py.rfind("tp= 3:", 0), 0u) << py;
  EXPECT_EQ(render_message("a@ b @ c", [](const std::string&) { return "x"; }), "a@ b @ c");
}

}  // namespace
}  // namespace actmem

namespace actmem {
namespace {

// Llama 3 paper (Dubey et al. 2024, §3.3.2): 405B's 126 layers on 16 pipeline stages, one layer
// fewer on the first and the last stage: 7 + 14 × 8 + 7 (Megatron's
// --decoder-first/last-pipeline-num-layers 7).
TEST(Engine, UnevenPipelineStagesLlama3_405B) {
  const ModelSpec m = load_model("llama-3.1-405b").value();
  const auto prepared = prepare(m, {.framework = Framework::kMegatron}).value();
  Layout l{.seq_len = 8192,
           .parallel = {.dp = 8, .tp = 8, .sp = true, .pp = 16, .num_micro_batches = 16,
                        .first_stage_layers = 7, .last_stage_layers = 7},
           .recompute = Recompute::kNone};
  auto r = explain(prepared, l).value();
  const auto& act = *r.estimate.activations;
  const ParamCounts counts = count_params(m);
  const int64_t layer = counts.layers[0].per_rank(8, 1);
  const auto stages = stage_params(counts, l.parallel);
  EXPECT_EQ(stages[0].num_layers, 7);
  EXPECT_EQ(stages[1].num_layers, 8);
  EXPECT_EQ(stages[15].num_layers, 7);
  EXPECT_EQ(stages[1].total(), 8 * layer);
  EXPECT_EQ(stages[0].total(), 7 * layer + ceil_div(counts.embedding, 8));
  // 1F1B: rank r holds min(pp − r, M) micro-batches of its layers (+ the embedding on rank 0).
  EXPECT_EQ(act.in_flight_by_stage[0], act.per_layer * (7 * 16) + act.embedding * 16);
  EXPECT_EQ(act.in_flight_by_stage[1], act.per_layer * (8 * 15));
  EXPECT_EQ(act.in_flight_by_stage[15], act.per_layer * 7 + act.head_loss);
  // The even split is impossible: 126 is not divisible by 16.
  l.parallel.first_stage_layers = l.parallel.last_stage_layers = 0;
  Totals t;
  EXPECT_FALSE(evaluate(prepared, l, t));
  EXPECT_STREQ(t.error_field, "pp");
  // 7 + 14 × 8 + 8 = 127 ≠ 126: the rest does not split evenly.
  l.parallel.first_stage_layers = 7;
  l.parallel.last_stage_layers = 8;
  auto bad = explain(prepared, l);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "first_stage_layers");
  EXPECT_NE(bad.error().message.find("evenly"), std::string::npos) << bad.error().message;
  // Only the last stage given: 126 − 6 = 120 over the first 15 stages, 8 each.
  l.parallel.first_stage_layers = 0;
  l.parallel.last_stage_layers = 6;
  ASSERT_TRUE(evaluate(prepared, l, t));
  EXPECT_EQ(stage_params(counts, l.parallel)[0].num_layers, 8);
  // Interleaved (Megatron-core get_num_layers_to_build): each stage's layers split evenly over its
  // vpp chunks. vpp 2, last 6: stages 0-14 hold 8 layers (2 chunks of 4), the last 6 (2 of 3); a
  // virtual stage is 15·4 + 3 = 63 layers, so rank 15's second chunk is layers 123-125.
  l.parallel.vpp = 2;
  l.parallel.num_micro_batches = 32;
  ASSERT_TRUE(evaluate(prepared, l, t));
  const auto split = detail::PipelineSplit::of(126, l.parallel);
  EXPECT_EQ(split.chunk_begin(split.chunk_of(15, 1)), 123);
  EXPECT_EQ(split.chunk_size(split.chunk_of(15, 1)), 3);
  EXPECT_EQ(split.chunk_begin(split.chunk_of(0, 1)), 63);
  EXPECT_EQ(stage_params(counts, l.parallel)[15].num_layers, 6);
  EXPECT_EQ(stage_params(counts, l.parallel)[3].num_layers, 8);
  // 7 layers cannot split over 2 chunks: an error naming the option, not a guess.
  l.parallel.last_stage_layers = 0;
  l.parallel.first_stage_layers = 7;
  EXPECT_FALSE(evaluate(prepared, l, t));
  EXPECT_STREQ(t.error_field, "first_stage_layers");
  // Llama 3 405B's intent (lighter first and last stages) at vpp 2: first 6, last 8, 14 × 8 between.
  l.parallel.first_stage_layers = 6;
  l.parallel.last_stage_layers = 8;
  ASSERT_TRUE(evaluate(prepared, l, t));
  EXPECT_EQ(stage_params(counts, l.parallel)[0].num_layers, 6);
}

// transformers 4.44 (@hf_version): CrossEntropyLoss on logits[..., :-1, :].contiguous(), the s−1
// shifted rows (validation cases *-hf444, measured). GPT2LMHeadModel does not upcast: its
// log-softmax is in the activation dtype; LlamaForCausalLM upcasts first: fp32.
TEST(Engine, HfVersion444LossOverShiftedRows) {
  const int64_t s = 1024, b = 2;
  auto total = [&](const char* model, HfVersion v) {
    Totals t;
    EXPECT_TRUE(evaluate(prepare(load_model(model).value(), {.hf_version = v}).value(),
                         {.seq_len = s, .micro_batch = b}, t));
    return t.activations_total;
  };
  const int64_t V_gpt2 = 50257, V_llama3 = 128256;
  EXPECT_EQ(total("gpt2", HfVersion::k4_57) - total("gpt2", HfVersion::k4_44),
            (4 * s * b * V_gpt2 + 8 * s * b) - (2 * (s - 1) * b * V_gpt2 + 8 * (s - 1) * b));
  EXPECT_EQ(total("llama-3-8b", HfVersion::k4_57) - total("llama-3-8b", HfVersion::k4_44), 4 * b * V_llama3 + 8 * b);
  // Families without a measured 4.44 rule are refused, naming the option.
  auto qwen3 = prepare(load_model("qwen3-8b").value(), {.hf_version = HfVersion::k4_44});
  ASSERT_FALSE(qwen3);
  EXPECT_EQ(qwen3.error().field, "hf_version");
  EXPECT_TRUE(prepare(load_model("qwen3-8b").value(), {.framework = Framework::kMegatron, .hf_version = HfVersion::k4_44}));
  EXPECT_EQ(*kHfVersionNames.parse("4.44"), HfVersion::k4_44);
  EXPECT_FALSE(kHfVersionNames.parse("4.3"));
}

// transformers 5's experts backends (integrations/moe.py) exist only under --hf-version 5: another
// choice elsewhere is refused rather than ignored.
TEST(Engine, ExpertsImplOnlyUnderTransformers5) {
  const auto mixtral = load_model("mixtral-8x7b").value();
  EXPECT_TRUE(prepare(mixtral, {.experts_impl = ExpertsImpl::kEager}));
  auto old = prepare(mixtral, {.hf_version = HfVersion::k4_57, .experts_impl = ExpertsImpl::kEager});
  ASSERT_FALSE(old);
  EXPECT_EQ(old.error().field, "experts_impl");
  auto meg = prepare(mixtral, {.framework = Framework::kMegatron, .experts_impl = ExpertsImpl::kBatchedMm});
  ASSERT_FALSE(meg);
  EXPECT_EQ(meg.error().field, "experts_impl");
}

// GPT-OSS is read for `actmem serve` only: a training estimate names what is not modelled (arch.cc's
// row) instead of counting its clamped-SwiGLU experts as SiLU ones.
TEST(Engine, ServingOnlyFamiliesAreRefusedForTraining) {
  auto m = parse_hf_config(R"({"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
      "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 128, "torch_dtype": "bfloat16"})",
                           "tiny-gpt-oss.json");
  ASSERT_TRUE(m) << m.error().message;
  auto p = prepare(*m, {});
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().field, "model");
  EXPECT_NE(p.error().message.find("serving only"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("actmem serve"), std::string::npos);
}

}  // namespace
}  // namespace actmem
