// estimate_training(): explain() for callers that hold TrainingOptions.
#include "engine/training.h"

#include "actmem/actmem.h"

namespace actmem {

namespace {
Workload workload_of(const TrainingOptions& o) {
  Workload w;
  w.framework = o.activation.framework;
  w.attention = o.activation.attention;
  w.dtype = o.activation.dtype;
  w.hidden_dropout = o.activation.hidden_dropout;
  w.attention_dropout = o.activation.attention_dropout;
  w.hf_version = o.activation.hf_version;
  w.experts_impl = o.activation.experts_impl;
  w.weight_dtype = o.static_options.weight_dtype;
  w.grad_dtype = o.static_options.grad_dtype;
  w.optimizer = o.static_options.optimizer;
  return w;
}

Layout layout_of(const TrainingOptions& o) {
  Layout l;
  l.seq_len = o.activation.seq_len;
  l.micro_batch = o.activation.micro_batch;
  l.parallel = o.static_options.parallel;
  l.recompute = o.activation.recompute;
  l.recompute_layers = o.activation.recompute_layers;
  l.checkpoint_every = o.activation.checkpoint_every;
  l.zero_stage = o.static_options.zero_stage;
  l.offload_optimizer = o.static_options.offload_optimizer;
  l.reserve = o.reserve;
  return l;
}

Expected<TrainingEstimate> run(Expected<PreparedModel> prepared, const TrainingOptions& options) {
  if (!prepared) return prepared.error();
  auto report = explain(*prepared, layout_of(options));
  if (!report) return report.error();
  return std::move(report->estimate);
}
}  // namespace

Expected<TrainingEstimate> estimate_training(const ModelSpec& model, TrainingOptions options) {
  return run(prepare(model, workload_of(options)), options);
}

Expected<TrainingEstimate> estimate_training_params_only(int64_t params, TrainingOptions options) {
  return run(prepare_params_only(params, workload_of(options)), options);
}

}  // namespace actmem
