#include "engine/training.h"

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "model/presets.h"

namespace actmem {
namespace {

using testing::activations_for_test;
using testing::try_estimate;
using testing::try_params_only;

// Seed cards: Llama-3-70B, 16 bytes per parameter (1.13 TB) plus activations at 8k.
TEST(Training, DefaultLlama3_70BAdds16BytesPerParamActivationsAndLogitsGradient) {
  auto model = load_preset("llama-3-70b").value();
  auto e = try_estimate(model, {}, {.seq_len = 8192, .micro_batch = 1});
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->static_memory.total(), Bytes{16 * int64_t{70'553'706'496}});
  // HF loss backward: fp32 d(log-probs) + fp32 d(logits) + bf16 logits held: (8 + 2) · s · b · V,
  // measured in validation/loss_transient.py.
  const Bytes loss_transient{int64_t{10} * 8192 * 128256};
  EXPECT_EQ(e->transients.find("logits_grad")->bytes, loss_transient);
  EXPECT_EQ(e->total(), e->static_memory.total() + e->activations->total + loss_transient);
}

// With PP the peak GPU is the stage with the largest static + in-flight + transient sum; check it
// against every stage computed independently.
TEST(Training, PipelinePeakIsTheMostLoadedStage) {
  auto model = load_preset("llama-3-70b").value();
  const Workload w{.framework = Framework::kMegatron};
  const Layout l{.seq_len = 4096, .parallel = {.tp = 8, .sp = true, .pp = 4, .num_micro_batches = 16}};
  auto e = try_estimate(model, w, l);
  ASSERT_TRUE(e.has_value()) << e.error().message;
  ASSERT_EQ(e->activations->in_flight_by_stage.size(), 4u);
  const auto stages = stage_params(e->params, l.parallel);
  ASSERT_EQ(stages.size(), 4u);
  Bytes expected_peak{0};
  for (int64_t stage = 0; stage < 4; ++stage) {
    const auto st = stage_static_bytes(stages[static_cast<size_t>(stage)], bytes_per_param(w), l.zero_stage,
                                       l.offload_optimizer, l.parallel);
    Bytes peak = st.total() + e->activations->in_flight_by_stage[static_cast<size_t>(stage)];
    if (stage == 3) peak += Bytes{int64_t{4} * 4096 * ceil_div(128256, 8)};  // logits buffer, V/t
    peak += Bytes{2 * 32 * 1024 * 1024};  // PyTorch's cuBLAS workspaces, :4096:8 on two threads (workspaces.h)
    peak += Bytes{4096LL * 1 * 8192 * 2};  // Megatron's global buffer: SP's all-gathered s·b·h input (workspaces.h)
    expected_peak = std::max(expected_peak, peak);
  }
  EXPECT_EQ(e->total(), expected_peak);
  // 1F1B: the first stage holds pp = 4 micro-batches of its 20 layers.
  EXPECT_EQ(e->activations->in_flight_by_stage[0],
            e->activations->per_layer * (20 * 4) + e->activations->embedding * 4 + e->activations->shared);
}

// ZeRO-3 gathers a layer (plus one prefetched) and its full gradient: Llama-3-70B layer = 855,654,400
// parameters (q, k, v, o, gate, up, down, 2 norms), bf16 → (2·2 + 2) bytes each.
TEST(Training, Zero3GatheredLayerTransient) {
  auto model = load_preset("llama-3-70b").value();
  auto e = try_estimate(model, {}, {.seq_len = 1024, .micro_batch = 1, .parallel = {.dp = 64}, .zero_stage = 3});
  ASSERT_TRUE(e.has_value()) << e.error().message;
  const Term* t = e->transients.find("zero3_gathered_layer");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bytes, Bytes{int64_t{855'654'400} * 6});
  EXPECT_EQ(t->exactness, Exactness::kAllowance);
  EXPECT_EQ(e->peak_transient_key, "zero3_gathered_layer");
}

// Full recomputation: backward re-runs one layer, whose full activations (minus its kept input) are
// a transient; for Llama-2-70B at 8k (V = 32000) that is larger than the logits gradient and is counted.
TEST(Training, RecomputedSegmentIsATransient) {
  auto model = load_preset("llama-2-70b").value();
  Layout l{.seq_len = 8192, .micro_batch = 1, .recompute = Recompute::kFull};
  auto e = try_estimate(model, {}, l);
  ASSERT_TRUE(e.has_value()) << e.error().message;
  l.recompute = Recompute::kNone;
  auto none = activations_for_test(model, {}, l).value();
  const Term* t = e->transients.find("recompute_segment");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bytes, none.per_layer - e->activations->per_layer);
  EXPECT_EQ(e->peak_transient_key, "recompute_segment");
}

TEST(Training, ParamsOnlyHasNoActivations) {
  auto e = try_params_only(7'500'000'000, {}, {.seq_len = 1, .micro_batch = 1});
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(e->activations.has_value());
  EXPECT_EQ(e->total(), Bytes{120'000'000'000});
  EXPECT_FALSE(try_params_only(0, {}, {.seq_len = 1, .micro_batch = 1}).has_value());
}

TEST(Training, ImpossibleLayoutIsAnErrorNamingTheFlag) {
  auto model = load_preset("llama-3-70b").value();
  auto e = try_estimate(model, {}, {.seq_len = 4096, .micro_batch = 1, .parallel = {.tp = 3}});
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("@tp"), std::string::npos) << e.error().message;
}

TEST(Training, AbsurdSizesOverflowIntoAnError) {
  auto model = load_preset("llama-3.1-405b").value();
  auto e = try_estimate(model, {}, {.seq_len = int64_t{1} << 24, .micro_batch = 1 << 20});
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("overflow"), std::string::npos) << e.error().message;
}

}  // namespace
}  // namespace actmem
