// The report -> JSON mapping: the stable keys scripts rely on (README "JSON keys"), and values that
// are the report's own numbers, not recomputed.
#include "report/render.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}

Report llama_report(const Layout& l) {
  auto prepared = prepare(load_model("llama-3-70b").value(), {.framework = Framework::kMegatron}).value();
  return explain(prepared, l).value();
}

TEST(ReportJson, StableKeys) {
  const Report r = llama_report({.seq_len = 8192, .parallel = {.dp = 8, .tp = 8, .sp = true, .pp = 2}});
  const auto j = report_json(r);
  EXPECT_EQ(keys(j), (std::set<std::string>{"activations", "inputs", "memory", "model", "notes", "params", "transients"}));
  EXPECT_EQ(keys(j["params"]),
            (std::set<std::string>{"active", "embedding", "lm_head", "non_embedding", "per_gpu", "total"}));
  EXPECT_EQ(keys(j["memory"]),
            (std::set<std::string>{"activations_bytes", "by_stage", "cpu_optimizer_bytes", "gradients_bytes",
                                   "optimizer_bytes", "pipeline_stage", "workspaces_bytes", "reserve_bytes",
                                   "reserved_bytes", "static_bytes", "terms", "timeline", "total_bytes",
                                   "transient_bytes", "weights_bytes"}));
  // The step's timeline (engine/timeline.h) peaks at the total without the reserve allowance.
  EXPECT_EQ(j["memory"]["timeline"]["allocated_peak_bytes"], r.totals.total - r.totals.reserve);
  EXPECT_GE(j["memory"]["reserved_bytes"], j["memory"]["timeline"]["allocated_peak_bytes"]);
  EXPECT_EQ(keys(j["activations"]),
            (std::set<std::string>{"forward_flops", "in_flight_by_stage", "in_flight_bytes", "in_flight_stage", "notes",
                                   "per_layer_bytes", "recompute_flops", "recompute_peak_bytes", "tensors", "terms",
                                   "total_bytes"}));
  for (const auto& t : j["memory"]["terms"])
    EXPECT_EQ(keys(t).count("key") + keys(t).count("formula") + keys(t).count("substituted") + keys(t).count("bytes") +
                  keys(t).count("exact") + keys(t).count("label"),
              6u);
  for (const auto& t : j["activations"]["tensors"])
    EXPECT_EQ(keys(t), (std::set<std::string>{"bytes", "dtype", "formula", "name", "note", "op", "region", "shape"}));
  EXPECT_EQ(j["inputs"]["tp"], 8);
  EXPECT_EQ(j["inputs"]["framework"], "megatron");
}

// The JSON shows the engine's numbers: the same as evaluate() gives.
TEST(ReportJson, ValuesAreTheTotals) {
  const Layout l{.seq_len = 4096, .micro_batch = 2, .parallel = {.dp = 4, .tp = 4, .pp = 4, .num_micro_batches = 8},
                 .recompute = Recompute::kSelective, .zero_stage = 1};
  const Report r = llama_report(l);
  const auto j = report_json(r);
  EXPECT_EQ(j["memory"]["total_bytes"], r.totals.total);
  EXPECT_EQ(j["memory"]["activations_bytes"], r.totals.activations);
  EXPECT_EQ(j["memory"]["transient_bytes"], r.totals.transient);
  EXPECT_EQ(j["memory"]["pipeline_stage"], r.totals.peak_stage);
  EXPECT_EQ(j["params"]["per_gpu"], r.totals.params_on_gpu);
  EXPECT_EQ(j["activations"]["in_flight_by_stage"].size(), 4u);
  int64_t sum = 0;
  for (const auto& t : j["memory"]["terms"]) sum += t["bytes"].get<int64_t>();
  EXPECT_EQ(sum, r.totals.total);
}

// A parameter-count-only report has no activations: nulls, as the README says.
TEST(ReportJson, ParamsOnlyHasNullActivations) {
  auto prepared = prepare_params_only(7'500'000'000, {}).value();
  const auto j = report_json(explain(prepared, {.seq_len = 1, .parallel = {.dp = 64}, .zero_stage = 3}).value());
  EXPECT_TRUE(j["activations"]["per_layer_bytes"].is_null());
  EXPECT_EQ(j["memory"]["total_bytes"], 1'875'000'000);  // ZeRO paper Figure 1: 16·Ψ/N_d
}

TEST(ReportText, TableAndExplainShowTheSameTotal) {
  const Report r = llama_report({.seq_len = 8192, .recompute = Recompute::kFull});
  const std::string total = group_digits(r.totals.total);
  EXPECT_NE(render_table(r).find(total), std::string::npos);
  EXPECT_NE(render_explain(r).find(total), std::string::npos);
  // Full recomputation reruns every layer's forward once: +1/3 of the step (seed card: ~1/3 more compute).
  EXPECT_NEAR(r.estimate.activations->recompute_share_of_step, 1.0 / 3.0, 0.02);
}

}  // namespace
}  // namespace actmem
