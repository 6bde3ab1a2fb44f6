// estimate_activations(): the activation part of explain() for callers that only want it.
#include "tensors/activation.h"

#include "actmem/actmem.h"

namespace actmem {

Expected<ActivationReport> estimate_activations(const ModelSpec& model, const ActivationOptions& options) {
  Workload w;
  w.framework = options.framework;
  w.attention = options.attention;
  w.dtype = options.dtype;
  w.hidden_dropout = options.hidden_dropout;
  w.attention_dropout = options.attention_dropout;
  auto prepared = prepare(model, w);
  if (!prepared) return prepared.error();
  Layout l;
  l.seq_len = options.seq_len;
  l.micro_batch = options.micro_batch;
  l.parallel = options.parallel;
  // Activations do not depend on dp; keep expert parallelism carved out of it as static memory requires.
  if (l.parallel.ep > 1 && l.parallel.dp % l.parallel.ep != 0) l.parallel.dp = l.parallel.ep;
  l.recompute = options.recompute;
  l.recompute_layers = options.recompute_layers;
  l.checkpoint_every = options.checkpoint_every;
  auto report = explain(*prepared, l);
  if (!report) return report.error();
  return std::move(*report->estimate.activations);
}

}  // namespace actmem
