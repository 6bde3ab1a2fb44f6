// Report::stages (the web page's per-stage bars): one entry per pipeline rank, the peak stage's equal
// to the totals, and each stage's activations the in-flight bytes report_json gives per stage.
#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

TEST(Stages, PeakStageIsTheTotalsAndEveryStageItsInFlight) {
  auto prepared = prepare(load_model("llama-3-70b").value(), {.framework = Framework::kMegatron}).value();
  Layout l;
  l.seq_len = 8192;
  l.parallel.tp = 8;
  l.parallel.sp = true;
  l.parallel.pp = 4;
  l.parallel.dp = 2;
  l.reserve = Bytes{int64_t{1} << 30};
  auto r = explain(prepared, l).value();
  ASSERT_EQ(r.stages.size(), 4u);
  const StageTotals& peak = r.stages[static_cast<std::size_t>(r.totals.peak_stage)];
  EXPECT_EQ(peak.weights, r.totals.weights);
  EXPECT_EQ(peak.gradients, r.totals.gradients);
  EXPECT_EQ(peak.optimizer, r.totals.optimizer);
  EXPECT_EQ(peak.activations, r.totals.activations);
  EXPECT_EQ(peak.transient, r.totals.transient);
  EXPECT_EQ(peak.total + r.totals.reserve, r.totals.total);  // the reserve is not a stage's
  const auto in_flight = report_json(r)["activations"]["in_flight_by_stage"];
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    const auto& s = r.stages[i];
    EXPECT_EQ(s.activations, in_flight[i].get<int64_t>()) << "stage " << i;
    EXPECT_EQ(s.total, s.weights + s.gradients + s.optimizer + s.activations + s.transient + s.workspaces)
        << "stage " << i;
    // framework megatron, local spec: PyTorch's :4096:8 twice, and Megatron's global memory buffer
    // holding the sequence-parallel linears' all-gathered input, s·b·h in bf16 (workspaces.h)
    EXPECT_EQ(s.workspaces, 2 * 32 * 1024 * 1024 + 8192LL * 1 * 8192 * 2);
    EXPECT_LE(s.total, peak.total) << "stage " << i;
  }
  // 1F1B: rank 0 holds pp = 4 micro-batches in flight, the last rank 1 (Narayanan et al. 2021).
  EXPECT_GT(r.stages.front().activations, r.stages.back().activations);
}

}  // namespace
}  // namespace actmem
