// The planner: every valid layout of a model on N GPUs, evaluated by the engine (evaluate(), the
// same accounting as `actmem estimate`, byte for byte), kept when it fits its GPU (fit.h) and
// ranked by the step time of time_model.h. The search keeps a fixed number of best layouts as
// plain structs: no string is built per layout; the front end formats the rows it prints.
//
//   auto prepared = actmem::prepare(model, {.framework = actmem::Framework::kMegatron}).value();
//   actmem::PlanRequest req{.gpus = 64, .seq_len = 8192, .global_batch = 512};
//   req.capacity = actmem::find_gpu("h100-80gb")->total;
//   req.cluster = actmem::cluster_for(*actmem::find_gpu("h100-80gb"));
//   auto result = actmem::plan(prepared, req).value();   // result.best[0] is the fastest that fits
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/prepared.h"
#include "planner/fit.h"
#include "planner/time_model.h"

namespace actmem {

/// What to search. Pins fix a dimension; bounds cap it. Unset = searched.
struct PlanRequest {
  int64_t gpus = 0;
  int64_t seq_len = 0;
  int64_t global_batch = 0;  // sequences per optimizer step
  Bytes capacity{0};         // per GPU
  Allowances allowances;
  Cluster cluster;

  // Pins.
  std::optional<int64_t> tp, pp, vpp, cp, ep, dp, micro_batch;
  std::optional<bool> sp;
  std::optional<int> zero;
  std::optional<Recompute> recompute;
  std::optional<bool> offload_optimizer;
  // Bounds (inclusive).
  int64_t max_tp = 0;  // 0 = gpus per node (TP stays inside a node)
  int64_t max_pp = limits::kMaxPp;
  int64_t max_vpp = 8;
  int64_t max_cp = 64;
  int64_t max_ep = limits::kMaxEp;
  int64_t max_micro_batch = 16;

  std::size_t keep = 10;  // best layouts returned
};

/// One layout the search kept.
struct PlannedLayout {
  Layout layout;
  Totals totals;
  FitVerdict fit;
  StepTime time;
};

struct PlanResult {
  int64_t searched = 0;  // candidate layouts evaluated by the engine
  int64_t refined = 0;   // further evaluations: the fewest recomputed layers of fitting full-recompute layouts
  int64_t valid = 0;     // of which the engine accepted
  int64_t fitting = 0;   // of which fit the GPU
  double search_ms = 0;
  std::vector<PlannedLayout> best;       // fastest first (ties: less memory first)
  std::optional<PlannedLayout> closest;  // when nothing fits: the valid layout needing the least memory
  // When no layout is valid: why the engine refused the first one searched (explain()'s error), so
  // that "no valid layout" says what to change (LoRA under framework megatron, heads against tp, ...).
  std::optional<Error> refusal;
};

/// Checks the request (ranges, pins against the model) and searches. Errors name the option.
/// Example: Llama-3-70B on 64 H100s, seq 8192, B 128: 12,717 layouts, 2,007 fit; the best is
/// tp 4 + sp, pp 4 × vpp 4, cp 2, dp 2, ZeRO 1 (README).
Expected<PlanResult> plan(const PreparedModel& model, const PlanRequest& request);

/// Every candidate layout of the request, in the search's order (what plan() evaluates; for tests
/// and the benchmark). The request must have passed plan()'s checks.
std::vector<Layout> candidate_layouts(const PreparedModel& model, const PlanRequest& request);

/// The `actmem estimate` arguments that reproduce a layout (model, framework and dtypes excluded;
/// the front end prefixes those). Example: "--seq-len 8192 --micro-batch 1 --dp 8 --tp 8 --sp".
std::string layout_flags(const Layout& layout);

/// The largest memory part of a peak. Example: dominant_memory({.weights = 2, .activations = 5}) == "activations".
const char* dominant_memory(const Totals& t);

// ---- Fit solvers and "what to change" ----------------------------------------------------------

/// The largest micro-batch (global batch fixed: fewer, larger micro-batches) that fits `layout`;
/// 0 when not even 1 fits. Searches the divisors of global_batch/dp.
int64_t largest_micro_batch(const PreparedModel& model, Layout layout, int64_t global_batch, Bytes capacity,
                            const Allowances& a);
/// The longest sequence (a multiple of `step`) that fits `layout`, up to `max_seq`; 0 when none.
int64_t longest_sequence(const PreparedModel& model, Layout layout, Bytes capacity, const Allowances& a,
                         int64_t step = 1024, int64_t max_seq = limits::kMaxSeqLen);
/// The fewest layers per pipeline chunk to recompute in full (Megatron's block method) so that
/// `layout` fits; -1 when even all do not.
int64_t fewest_recomputed_layers(const PreparedModel& model, Layout layout, Bytes capacity, const Allowances& a);

/// One change to a layout that does not fit, with what it saves and what it costs.
struct Change {
  std::string flags;        // e.g. "--recompute selective"
  Layout layout;            // the changed layout
  Bytes saved{0};           // peak memory saved (engine peak + allowances)
  Bytes needed{0};          // after the change
  double time_cost = 0;     // relative step-time change (0.029 = +2.9%); 0 when unknown (--params, no GPU speeds)
  bool fits = false;
};
/// The single-dimension changes that make `layout` fit, fewest-cost first (at most `keep`). The
/// world size stays fixed: a change of tp or pp takes the GPUs from dp.
std::vector<Change> what_to_change(const PreparedModel& model, const Layout& layout, int64_t global_batch,
                                   Bytes capacity, const Allowances& a, const Cluster& cluster, std::size_t keep = 5);

}  // namespace actmem
