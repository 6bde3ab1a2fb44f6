// actmem's public API: the one header every front end (CLI, benchmark, fuzzer, planner, web and
// Python builds) includes. Compile once, bind many times (SQLite's prepare/bind/step):
//
//   auto model = actmem::load_model("llama-3-70b").value();            // preset or config.json path
//   auto prepared = actmem::prepare(model, {.framework = actmem::Framework::kMegatron}).value();
//   actmem::Totals t;
//   if (actmem::evaluate(prepared, {.seq_len = 8192, .parallel = {.dp = 8, .tp = 8}}, t))
//     use(t.total);                                      // plain numbers, no strings, no allocation
//   auto report = actmem::explain(prepared, layout).value();   // every term: formula = values = bytes
//   std::string json = actmem::report_json(report).dump(2);
//
// evaluate() and explain() run the same accounting routine (engine.cc: account()); explain records
// the terms on the way, evaluate only adds. Errors carry a kind and the option at fault (expected.h);
// messages write options as `@tp`, spelled by each front end (render_message()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>  // report_json(), serve_json(): the stable JSON every front end shares

#include "util/bytes.h"
#include "util/dtype.h"
#include "util/expected.h"
#include "serve/gpu_catalog.h"
#include "config/training_config.h"  // load_training_config(): a Megatron-LM launch script as input
#include "config/megatron_theory.h"  // megatron_theoretical_memory(): Megatron's own report, side by side
#include "model/hf_config.h"  // parse_hf_config(): a config.json given as text
#include "model/model_spec.h"
#include "policies/options.h"
#include "policies/option_table.h"  // set_training_option(): options by name (Python keywords)
#include "policies/finetune.h"  // parse_lora_targets(), the LoRA target bits
#include "model/presets.h"
#include "model/encoder_head.h"  // set_encoder_head(): --head for encoders (bert, roberta)
#include "serve/serve.h"
#include "engine/training.h"
#include "serve/serve_render.h"  // serve_json(), render_serve(): serving's renderers
#include "serve/serve_request.h"  // ServeRequest, serve(): a serving job as a user states it
#include "serve/vllm_command.h"  // read_vllm_command(): a `vllm serve` line as input (`serve --from`)
#include "serve/generate.h"  // estimate_generate(): HF generate() on one GPU (`serve --generate`)
#include "util/spellcheck.h"     // closest_name(): "did you mean ...?" for a front end's own names
#include "util/text_table.h"     // TextTable, group_digits: the tables every front end prints

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

 private:
  friend Expected<PreparedModel> prepare(const ModelSpec&, const Workload&);
  friend Expected<PreparedModel> prepare_params_only(int64_t, const Workload&);
  std::shared_ptr<const detail::Prepared> impl_;
};

/// Example: prepare(load_model("llama-3-8b").value(), {}).value().model()->hidden == 4096.
Expected<PreparedModel> prepare(const ModelSpec& model, const Workload& workload);
/// Static memory only, for a model known by its parameter count (e.g. 7.5e9).
Expected<PreparedModel> prepare_params_only(int64_t params, const Workload& workload);

/// Per-GPU peak of one layout, as plain numbers (bytes unless said otherwise). On the most loaded
/// GPU: the pipeline stage whose static + activations in flight + largest transient is largest.
struct Totals {
  int64_t total = 0;          // weights + gradients + optimizer + activations + transient + reserve
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;      // on the GPU (0 when offloaded)
  int64_t cpu_optimizer = 0;  // offloaded to host memory
  int64_t paged_optimizer = 0;  // of optimizer: bitsandbytes paged state in unified memory
  int64_t activations = 0;    // saved activations in flight on the peak stage (on the GPU)
  int64_t host_activations = 0;  // of the saved activations: offloaded to host memory (--offload-activations)
  int64_t transient = 0;      // the largest transient of the step on the peak stage
  int64_t reserve = 0;
  // TransformerEngine's cached fp8 weight copies on the peak stage (framework megatron, @fp8; in
  // `total`, not in `weights`): 2 bytes per TE linear weight element + 4 per linear (te_rules.h).
  int64_t fp8_weight_cache = 0;
  // cuBLAS workspaces in PyTorch's allocator all job long (framework megatron: two of PyTorch's, one
  // of TE's under the TE spec; policies/workspaces.h); in `total`, the same on every stage.
  int64_t workspaces = 0;
  int64_t peak_stage = 0;     // pipeline rank of the peak GPU
  int64_t params_on_gpu = 0;  // parameters the peak stage's GPU holds (after TP/EP, before ZeRO)

  // Activations (zero for a parameter-count-only model).
  int64_t per_layer = 0;               // one middle layer, per GPU
  int64_t activations_total = 0;       // whole model, one micro-batch
  int64_t in_flight_max = 0;           // the most loaded stage's activations in flight
  int64_t in_flight_stage = 0;
  int64_t in_flight_micro_batches = 0;
  int64_t recompute_peak = 0;          // one recomputed segment re-run in backward
  double forward_flops = 0;            // one micro-batch, whole model
  double recompute_flops = 0;
  // The busiest pipeline stage's share of a micro-batch's work (3·forward + recompute FLOPs) times
  // pp: 1 when stages are balanced, > 1 when one stage (its layers, the LM head) holds more.
  double stage_imbalance = 1;

  // Why evaluate() returned false: the kind and the option at fault (explain() has the message).
  ErrorKind error = ErrorKind::kInvalid;
  const char* error_field = "";
};

/// The fast path: true and `out` filled, or false with out.error / out.error_field set.
/// Never allocates (after the first call on a thread) and never throws.
bool evaluate(const PreparedModel& model, const Layout& layout, Totals& out) noexcept;

/// One pipeline stage's GPU (bytes), as the engine accounted it; the peak stage's equals Totals.
struct StageTotals {
  int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0, transient = 0;
  int64_t total = 0;  // the sum (reserve not included)
  int64_t fp8_weight_cache = 0;  // in total (Totals::fp8_weight_cache)
  int64_t workspaces = 0;        // in total (Totals::workspaces)
  // Held after the step and not at its peak, so not in total: Megatron's received pipeline inputs
  // with their gradients (policies/pipeline_inputs.h).
  int64_t pipeline_inputs_kept = 0;
  int64_t grad_copies_kept = 0;  // and the fp32 copies of 16-bit gradients (policies/grad_copies.h)
  int64_t static_bytes() const { return weights + gradients + optimizer + fp8_weight_cache + workspaces; }
  int64_t after_step() const { return static_bytes() + pipeline_inputs_kept + grad_copies_kept; }
};

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

/// Stable JSON: params.*, memory.*_bytes, activations.{per_layer_bytes, total_bytes, in_flight_bytes,
/// tensors[]}, transients[], notes[] (README "JSON keys").
nlohmann::json report_json(const Report& report);
/// The default human-readable table.
std::string render_table(const Report& report);
/// Each term as `label: formula = values = bytes`, as the seed cards derive.
std::string render_explain(const Report& report);

// Serving: estimate_serving(), estimate_capacity() and their renderers (serve/serve.h, serve_render.h).
// Models: load_model(), list_presets() (presets.h). GPUs: gpu_catalog(), find_gpu() (gpu_catalog.h).

}  // namespace actmem

#include "planner/plan.h"  // the planner: fit verdict, time model, layout search (after the API it builds on)
#include "planner/plan_json.h"  // fit_json(), plan_json(): the planner's JSON every front end shares
#include "planner/machine.h"  // MachineOptions, to_machine(), fit_report_json(): the GPU a job runs on (and, from it,
                               // planner/plan_options.h: PlanOptions, to_plan_request(), `plan` as front ends take it)
