// evaluate()'s shortcuts against the straightforward accounting that explain() keeps:
// - the interleaved schedule walked run by run (O(vpp)) instead of step by step;
// - pipeline ranks 2 .. pp − 2 skipped when ranks 1 .. pp − 2 hold alike layers (rank 1 peaks);
// - the full-recomputation peak taken over layer kinds instead of over every layer;
// - the layer kinds' bytes of recent bindings kept per thread (Scratch::Bound).
// Each must give the same numbers, to the byte and to the bit, on many random layouts.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "api/library.h"
#include "engine/engine.h"

namespace actmem {
namespace {

// validation/pipeline_validation.py measured Megatron's interleaved schedule: rank 0 at pp 4,
// vpp 2, M 8 holds 7 + 4 chunk-micro-batches after the warm-up and 8 + 3 one step later.
TEST(FastPath, InterleavedCountsOfTheMeasuredCase) {
  ParallelLayout p{.pp = 4, .vpp = 2, .num_micro_batches = 8};
  int64_t counts[2], step[2];
  const int64_t embedding_heavier[2] = {110, 100};  // chunk 0 keeps the embedding too
  detail::in_flight_per_chunk(p, 0, embedding_heavier, counts, step);
  EXPECT_EQ(counts[0], 8);
  EXPECT_EQ(counts[1], 3);
  const int64_t equal[2] = {100, 100};  // every step holds 11: the first (after the warm-up) is kept
  detail::in_flight_per_chunk(p, 0, equal, counts, step);
  EXPECT_EQ(counts[0], 7);
  EXPECT_EQ(counts[1], 4);
}

// Megatron's --microbatch-group-size-per-virtual-pipeline-stage, schedules.py's own example: pp 2,
// vpp 2, 5 micro-batches in groups of 3: forward chunks 0 0 0 1 1 1 0 0 1 1, backward mirrored. The
// last rank warms up (vpp − 1)·3 = 3 forwards; after its steady forwards 4..10 (one backward between
// each) chunks hold (3,1) (3,1) (3,1) (4,0) (4,0) (3,1) (2,2). validation/pipeline_validation.py runs it.
TEST(FastPath, InterleavedMicrobatchGroups) {
  const ParallelLayout p{.pp = 2, .vpp = 2, .num_micro_batches = 5, .microbatch_group = 3};
  int64_t counts[2], step[2];
  const int64_t first_heavier[2] = {10, 1};
  detail::in_flight_per_chunk(p, 1, first_heavier, counts, step);
  EXPECT_EQ(counts[0], 4);
  EXPECT_EQ(counts[1], 0);
  const int64_t second_heavier[2] = {1, 10};
  detail::in_flight_per_chunk(p, 1, second_heavier, counts, step);
  EXPECT_EQ(counts[0], 2);
  EXPECT_EQ(counts[1], 2);
  // Rank 0 warms up 2 + 3 = 5: (3,3) (4,2) (5,1) (5,1) (4,2).
  detail::in_flight_per_chunk(p, 0, first_heavier, counts, step);
  EXPECT_EQ(counts[0], 5);
  EXPECT_EQ(counts[1], 1);
  detail::in_flight_per_chunk(p, 0, second_heavier, counts, step);
  EXPECT_EQ(counts[0], 3);
  EXPECT_EQ(counts[1], 3);
}

// The run-by-run walk equals the step-by-step one for every rank of pp 2..12 × vpp 2..8, numbers of
// micro-batches from one round to many (and 0: as many as the schedule holds), and chunk bytes
// equal, with one chunk heavier (the embedding, the head), one lighter, or random (ties included).
TEST(FastPath, RunWalkEqualsStepWalk) {
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int64_t> small(0, 3), big(0, int64_t{1} << 40);
  int64_t compared = 0, differed_from_first_step = 0;
  std::vector<int64_t> bytes, fast, slow, step;
  for (int64_t pp = 2; pp <= 12; ++pp)
    for (int64_t vpp = 2; vpp <= 8; ++vpp)
      for (int64_t m : {int64_t{0}, pp, 2 * pp, 3 * pp, 5 * pp, 8 * pp, 16 * pp})
        for (int64_t rank = 0; rank < pp; ++rank)
          for (int pattern = 0; pattern < 6; ++pattern) {
            const ParallelLayout p{.pp = pp, .vpp = vpp, .num_micro_batches = m};
            const auto n = static_cast<std::size_t>(vpp);
            bytes.assign(n, 1000);
            if (pattern == 1) bytes[0] += 7;
            if (pattern == 2) bytes[n - 1] += 7;
            if (pattern == 3) bytes[static_cast<std::size_t>(rank) % n] -= 7;
            if (pattern == 4)
              for (auto& b : bytes) b = small(rng);  // many ties
            if (pattern == 5)
              for (auto& b : bytes) b = big(rng);
            fast.assign(n, -1);
            slow.assign(n, -2);
            step.assign(n, 0);
            detail::in_flight_per_chunk(p, rank, bytes.data(), fast.data(), step.data());
            detail::in_flight_per_chunk_reference(p, rank, bytes.data(), slow.data(), step.data());
            ASSERT_EQ(fast, slow) << "pp " << pp << " vpp " << vpp << " m " << m << " rank " << rank << " pattern "
                                  << pattern;
            ++compared;
            // The peak is not always the first steady step: the walk matters.
            std::vector<int64_t> first(n);
            const std::vector<int64_t> ones(n, 1);
            detail::in_flight_per_chunk_reference(p, rank, ones.data(), first.data(), step.data());
            if (fast != first) ++differed_from_first_step;
          }
  EXPECT_EQ(compared, (2 + 12) * 11 / 2 * 7 * 7 * 6);  // ranks of pp 2..12 × vpp × M × patterns
  EXPECT_GT(differed_from_first_step, 1000);
}

// Every field of Totals: bytes equal, FLOPs equal to the bit (the same operations in the same order).
void expect_same_totals(const Totals& fast, const Totals& t, const std::string& where) {
  EXPECT_EQ(fast.total, t.total) << where;
  EXPECT_EQ(fast.weights, t.weights) << where;
  EXPECT_EQ(fast.gradients, t.gradients) << where;
  EXPECT_EQ(fast.optimizer, t.optimizer) << where;
  EXPECT_EQ(fast.cpu_optimizer, t.cpu_optimizer) << where;
  EXPECT_EQ(fast.paged_optimizer, t.paged_optimizer) << where;
  EXPECT_EQ(fast.activations, t.activations) << where;
  EXPECT_EQ(fast.host_activations, t.host_activations) << where;
  EXPECT_EQ(fast.transient, t.transient) << where;
  EXPECT_EQ(fast.reserve, t.reserve) << where;
  EXPECT_EQ(fast.peak_stage, t.peak_stage) << where;
  EXPECT_EQ(fast.params_on_gpu, t.params_on_gpu) << where;
  EXPECT_EQ(fast.per_layer, t.per_layer) << where;
  EXPECT_EQ(fast.activations_total, t.activations_total) << where;
  EXPECT_EQ(fast.in_flight_max, t.in_flight_max) << where;
  EXPECT_EQ(fast.in_flight_stage, t.in_flight_stage) << where;
  EXPECT_EQ(fast.in_flight_micro_batches, t.in_flight_micro_batches) << where;
  EXPECT_EQ(fast.recompute_peak, t.recompute_peak) << where;
  EXPECT_EQ(fast.forward_flops, t.forward_flops) << where;
  EXPECT_EQ(fast.recompute_flops, t.recompute_flops) << where;
  EXPECT_EQ(fast.stage_imbalance, t.stage_imbalance) << where;
  EXPECT_EQ(fast.fp8_weight_cache, t.fp8_weight_cache) << where;
}

Layout random_deep_layout(std::mt19937& rng, const ModelSpec& m, Framework fw) {
  auto pick = [&](std::initializer_list<int64_t> xs) {
    std::uniform_int_distribution<std::size_t> d(0, xs.size() - 1);
    return *(xs.begin() + static_cast<std::ptrdiff_t>(d(rng)));
  };
  Layout l;
  l.seq_len = pick({1024, 4096, 8192});
  l.micro_batch = pick({1, 2});
  auto& p = l.parallel;
  p.tp = pick({1, 2, 8});
  p.sp = p.tp > 1 && pick({0, 1}) == 1;
  p.pp = pick({1, 2, 3, 4, 5, 6, 8, 16, 32});
  p.vpp = p.pp > 1 ? pick({1, 1, 2, 3, 4}) : 1;
  p.dp = pick({1, 8, 64});
  p.cp = pick({1, 1, 2});
  p.ep = m.is_moe() ? pick({1, 8}) : 1;
  // Uneven stages (Megatron's first/last stage layers) half of the time, multiples of vpp.
  const int64_t stage = m.num_layers / p.pp;
  if (p.pp > 2 && pick({0, 1}) == 1) {
    p.first_stage_layers = std::max<int64_t>(stage - pick({-1, 0, 1, 2}) * p.vpp, 0) / p.vpp * p.vpp;
    p.last_stage_layers = std::max<int64_t>(stage - pick({-1, 0, 1, 2}) * p.vpp, 0) / p.vpp * p.vpp;
  }
  const int64_t rounds = pick({0, 1, 2, 3, 8});
  p.num_micro_batches = p.vpp > 1 ? rounds * p.pp : rounds == 0 ? 0 : p.pp + pick({-1, 0, 3, 20});
  l.recompute = static_cast<Recompute>(pick({0, 1, 2, 2}));
  if (l.recompute == Recompute::kFull) {
    const int64_t how = pick({0, 1, 1, 2});
    if (how == 1) l.recompute_layers = pick({0, 1, 2, 3, 5});
    if (how == 2) l.checkpoint_every = pick({1, 2, 3});
  }
  if (l.recompute == Recompute::kSelective && fw == Framework::kTorchtitan) l.selective_ac_every = pick({0, 1, 2, 3});
  l.zero_stage = static_cast<int>(pick({0, 1, 2, 3}));
  l.offload_optimizer = pick({0, 0, 1}) == 1;
  l.reserve = Bytes{pick({0, int64_t{1} << 30})};
  return l;
}

// Every field of Totals, evaluate() against explain(), over random deep, interleaved and uneven
// pipelines of models with one layer kind and with several (DeepSeek-V3: 3 dense layers then MoE,
// so ranks 1 .. pp − 2 are not always alike; Gemma 2: sliding-window and global layers alternating,
// alike only when the chunks keep the same order of kinds).
TEST(FastPath, EvaluateEqualsTheReferenceAccountingOnRandomDeepLayouts) {
  std::mt19937 rng(20261202);
  int64_t checked = 0, deep = 0, interleaved = 0, uneven = 0;
  for (const char* preset :
       {"llama-3-70b", "llama-3.1-405b", "deepseek-v3", "gemma-2-9b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt2"}) {
    const ModelSpec model = load_model(preset).value();
    for (Framework fw : {Framework::kMegatron, Framework::kHF, Framework::kTorchtitan}) {
      auto prepared = prepare(model, {.framework = fw});
      if (!prepared) continue;  // torchtitan models only some families
      for (int i = 0; i < 600; ++i) {
        const Layout l = random_deep_layout(rng, model, fw);
        Totals fast;
        const bool ok = evaluate(*prepared, l, fast);
        const auto report = explain(*prepared, l);
        ASSERT_EQ(ok, report.has_value()) << preset;
        if (!ok) {
          EXPECT_EQ(fast.error, report.error().kind);
          EXPECT_EQ(std::string(fast.error_field), report.error().field);
          continue;
        }
        expect_same_totals(fast, report->totals, std::string(preset) + " " + layout_flags(l));
        ++checked;
        if (l.parallel.pp > 3) ++deep;
        if (l.parallel.vpp > 1) ++interleaved;
        if (l.parallel.first_stage_layers > 0 || l.parallel.last_stage_layers > 0) ++uneven;
      }
    }
  }
  // Enough of each shape that a wrong shortcut would show.
  EXPECT_GT(checked, 2000);
  EXPECT_GT(deep, 500);
  EXPECT_GT(interleaved, 300);
  EXPECT_GT(uneven, 150);
}

// Megatron with TransformerEngine fp8 (te_rules.h): the cached fp8 weight copies are a static term
// of each stage (its layers' TE linears), so deep, interleaved and uneven pipelines and ZeRO-3 (no
// cache) must agree too, and the cache must show up in most layouts.
TEST(FastPath, EvaluateEqualsTheReferenceWithTeFp8WeightCache) {
  std::mt19937 rng(20261203);
  int64_t checked = 0, cached = 0;
  for (const char* preset : {"llama-3-70b", "gemma-2-9b", "gpt2"}) {
    const ModelSpec model = load_model(preset).value();
    Workload w{.framework = Framework::kMegatron, .attention = AttentionImpl::kFlash};
    w.megatron = {.impl = TransformerImpl::kTransformerEngine, .fp8 = Fp8Recipe::kDelayed};
    const auto prepared = prepare(model, w).value();
    for (int i = 0; i < 300; ++i) {
      const Layout l = random_deep_layout(rng, model, Framework::kMegatron);
      Totals fast;
      const bool ok = evaluate(prepared, l, fast);
      const auto report = explain(prepared, l);
      ASSERT_EQ(ok, report.has_value()) << preset;
      if (!ok) continue;
      expect_same_totals(fast, report->totals, std::string(preset) + " fp8 " + layout_flags(l));
      EXPECT_EQ(report->estimate.total().count(), fast.total) << preset << " " << layout_flags(l);
      ++checked;
      if (fast.fp8_weight_cache > 0) ++cached;
    }
  }
  EXPECT_GT(checked, 250);  // 285 of the 900 random layouts are valid for these models
  EXPECT_GT(cached, 150);   // all but the ZeRO-3 ones (no cache), about a quarter
}

// evaluate() keeps the layer kinds' bytes of its last few bindings (the symbol values a layout
// binds) per prepared model. Layouts that share a binding (they differ in ZeRO, recomputation,
// pipeline shape) and two prepared models with equal bindings but different graphs (flash vs eager
// attention: eager keeps the s×s scores) evaluated in turn must each equal explain().
TEST(FastPath, RepeatedBindingsOfTwoPreparedModelsEqualTheReference) {
  const ModelSpec model = load_model("llama-3-70b").value();
  const auto flash = prepare(model, {.framework = Framework::kMegatron, .attention = AttentionImpl::kFlash}).value();
  const auto eager = prepare(model, {.framework = Framework::kMegatron, .attention = AttentionImpl::kEager}).value();
  int64_t checked = 0;
  std::vector<int64_t> eager_activations;
  for (int64_t tp : {1, 8})
    for (int64_t b : {1, 2})
      for (int64_t pp : {1, 4, 8})
        for (int64_t vpp : {1, 2})
          for (int zero : {0, 1})
            for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
              for (int sp = tp > 1 ? 1 : 0; sp >= 0; --sp)
                for (const PreparedModel* prepared : {&flash, &eager}) {
                  if (vpp > 1 && pp == 1) continue;
                  Layout l;
                  l.seq_len = 4096;
                  l.micro_batch = b;
                  l.parallel = {.dp = 64 / (tp * pp), .tp = tp, .sp = sp == 1, .pp = pp, .vpp = vpp,
                                .num_micro_batches = 2 * pp};
                  l.zero_stage = zero;
                  l.recompute = rc;
                  Totals fast;
                  ASSERT_TRUE(evaluate(*prepared, l, fast)) << layout_flags(l);
                  const auto report = explain(*prepared, l).value();
                  expect_same_totals(fast, report.totals, (prepared == &flash ? "flash " : "eager ") + layout_flags(l));
                  if (prepared == &eager) eager_activations.push_back(fast.activations_total);
                  ++checked;
                }
  EXPECT_EQ(checked, 2 * 2 * (1 + 2 + 2) * 2 * 3 * 2 * 2 - 2 * (1 + 2 + 2) * 2 * 3 * 2);  // tp 1: no sp
  // Eager attention keeps the s×s scores, flash does not: the two models do differ.
  Totals f;
  ASSERT_TRUE(evaluate(flash, {.seq_len = 4096}, f));
  EXPECT_GT(eager_activations.front(), f.activations_total);
}

}  // namespace
}  // namespace actmem
