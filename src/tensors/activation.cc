// estimate_activations(): the activation part of explain() for callers that only want it.
#include "tensors/activation.h"

#include "actmem/actmem.h"

namespace actmem {

Expected<ActivationReport> estimate_activations(const ModelSpec& model, const ActivationOptions& options) {
  TrainingOptions o;
  o.activation = options;
  o.static_options.parallel = options.parallel;
  // Activations do not depend on dp; keep expert parallelism carved out of it as static memory requires.
  auto& par = o.static_options.parallel;
  if (par.ep > 1 && par.dp % par.ep != 0) par.dp = par.ep;
  auto e = estimate_training(model, o);
  if (!e) return e.error();
  return std::move(*e->activations);
}

}  // namespace actmem
