// What the tests of the accounting share: a model's estimate, its activations or a parameter
// count's static memory through the engine path every front end uses (prepare() or
// prepare_params_only(), then explain()), with a failure made a test failure where one is not expected.
#pragma once

#include <cstdint>
#include <utility>

#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem::testing {

/// prepare() + explain(): the estimate, or the first error of the two.
inline Expected<TrainingEstimate> try_estimate(const ModelSpec& model, const Workload& workload, const Layout& layout) {
  auto prepared = prepare(model, workload);
  if (!prepared) return prepared.error();
  auto report = explain(*prepared, layout);
  if (!report) return report.error();
  return std::move(report->estimate);
}

/// prepare_params_only() + explain(): static memory of a model known by its parameter count.
inline Expected<TrainingEstimate> try_params_only(int64_t params, const Workload& workload, const Layout& layout) {
  auto prepared = prepare_params_only(params, workload);
  if (!prepared) return prepared.error();
  auto report = explain(*prepared, layout);
  if (!report) return report.error();
  return std::move(report->estimate);
}

/// try_estimate() where an error is a test failure (its message shown); an empty estimate then.
inline TrainingEstimate estimate_for_test(const ModelSpec& model, const Workload& workload, const Layout& layout) {
  auto e = try_estimate(model, workload, layout);
  EXPECT_TRUE(e) << (e ? "" : e.error().message);
  return e ? std::move(*e) : TrainingEstimate{};
}

/// try_params_only() where an error is a test failure (its message shown).
inline TrainingEstimate params_only_for_test(int64_t params, const Workload& workload, const Layout& layout) {
  auto e = try_params_only(params, workload, layout);
  EXPECT_TRUE(e) << (e ? "" : e.error().message);
  return e ? std::move(*e) : TrainingEstimate{};
}

/// The activations of try_estimate(). Activations do not depend on dp: a dp that expert parallelism
/// cannot be carved out of (as static memory requires) is taken as ep, so a test may leave dp at 1.
inline Expected<ActivationReport> activations_for_test(const ModelSpec& model, const Workload& workload, Layout layout) {
  auto& par = layout.parallel;
  if (par.ep > 1 && par.dp % par.ep != 0) par.dp = par.ep;
  auto e = try_estimate(model, workload, layout);
  if (!e) return e.error();
  return std::move(*e->activations);
}

}  // namespace actmem::testing
