// A model prepared once per workload, and the two ways to account one layout on it: evaluate(), the
// fast path into plain numbers (actmem/values.h), and explain(), the full report. Compile once, bind
// many times (SQLite's prepare/bind/step):
//
//   auto prepared = prepare(load_model("llama-3-70b").value(), {.framework = Framework::kMegatron}).value();
//   Totals t;
//   if (evaluate(prepared, {.seq_len = 8192, .parallel = {.dp = 8, .tp = 8}}, t)) use(t.total);
//   auto report = explain(prepared, layout).value();   // every term: formula = values = bytes
//
// Both run the same accounting routine (engine.cc: account()); explain records the terms on the way,
// evaluate only adds. Errors carry a kind and the option at fault (actmem/expected.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actmem/expected.h"
#include "actmem/values.h"
#include "engine/training.h"
#include "model/model_spec.h"
#include "policies/options.h"

namespace actmem {

namespace detail {
struct Prepared;
}

/// A model prepared for one workload: its per-layer graphs with symbolic dimensions, parameter
/// sums and FLOPs, ready to evaluate any layout. Cheap to copy (shared, immutable).
class PreparedModel {
 public:
  /// The architecture, or null for a parameter-count-only model (prepare_params_only).
  const ModelSpec* model() const;
  const Workload& workload() const;
  const std::string& name() const;  // preset name, config path or "--params N"
  const detail::Prepared& impl() const { return *impl_; }
  bool valid() const { return impl_ != nullptr; }

 private:
  friend Expected<PreparedModel> prepare(const ModelSpec&, const Workload&);
  friend Expected<PreparedModel> prepare_params_only(int64_t, const Workload&);
  std::shared_ptr<const detail::Prepared> impl_;
};

/// Example: prepare(load_model("llama-3-8b").value(), {}).value().model()->hidden == 4096.
Expected<PreparedModel> prepare(const ModelSpec& model, const Workload& workload);
/// Static memory only, for a model known by its parameter count (e.g. 7.5e9).
Expected<PreparedModel> prepare_params_only(int64_t params, const Workload& workload);

/// The fast path: true and `out` filled, or false with out.error / out.error_field set.
/// Never allocates (after the first call on a thread) and never throws.
bool evaluate(const PreparedModel& model, const Layout& layout, Totals& out) noexcept;

/// A layout's full report: every term with its formula and values, the saved tensors, the notes.
struct Report {
  PreparedModel source;              // keeps the model alive for as long as the report
  std::string model_name;
  const ModelSpec* model = nullptr;  // null for --params; points into `source`
  Workload workload;
  Layout layout;
  TrainingEstimate estimate;
  Totals totals;  // the same numbers evaluate() gives
  std::vector<StageTotals> stages;  // every pipeline stage's GPU, rank 0 first (charts; not in report_json)
};
/// Example: explain(prepared, {.seq_len = 4096})->estimate.total().
Expected<Report> explain(const PreparedModel& model, const Layout& layout);

}  // namespace actmem
