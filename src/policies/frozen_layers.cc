#include "policies/frozen_layers.h"

#include <algorithm>

namespace actmem {

namespace {
bool same_tensor(const WeightTensor& a, const WeightTensor& b) {
  return a.name == b.name && a.rows == b.rows && a.cols == b.cols && a.role == b.role && a.shard == b.shard &&
         a.heads == b.heads && a.part == b.part;
}
}  // namespace

std::vector<WeightTensor> weight_tensors_with_frozen_layers(const ModelSpec& model, int64_t frozen_layers) {
  std::vector<WeightTensor> all = weight_tensors(model);
  const auto n = static_cast<std::size_t>(std::clamp<int64_t>(frozen_layers, 0, static_cast<int64_t>(model.layers.size())));
  if (n == 0) return all;
  // The frozen layers' tensors, merged by shape as weight_tensors() merges them.
  std::vector<WeightTensor> frozen;
  for (std::size_t i = 0; i < n; ++i)
    for (WeightTensor& t : layer_weight_tensors(model, model.layers[i])) {
      auto it = std::find_if(frozen.begin(), frozen.end(), [&](const WeightTensor& o) { return same_tensor(o, t); });
      if (it != frozen.end()) {
        it->count += t.count;
      } else {
        t.frozen = true;
        frozen.push_back(std::move(t));
      }
    }
  // Take their counts out of the merged rows; a row left with count 0 goes.
  for (const WeightTensor& f : frozen) {
    auto it = std::find_if(all.begin(), all.end(), [&](const WeightTensor& o) { return !o.frozen && same_tensor(o, f); });
    it->count -= f.count;  // every frozen tensor is one of weight_tensors()'s rows
  }
  std::erase_if(all, [](const WeightTensor& t) { return t.count == 0; });
  all.insert(all.end(), frozen.begin(), frozen.end());
  return all;
}

std::string frozen_parts(const Workload& w) {
  const std::string layers = w.frozen_layers == 1 ? std::string("the first layer")
                             : w.frozen_layers > 1 ? fmt::format("the first {} layers", w.frozen_layers)
                                                   : std::string();
  if (w.freeze_embeddings) return layers.empty() ? "the embedding" : "the embedding and " + layers;
  return layers;
}

std::vector<std::string> frozen_layers_notes(const Workload& w, bool input_no_grad, Recompute recompute,
                                             int64_t num_layers) {
  std::vector<std::string> notes;
  if (w.frozen_layers <= 0) return notes;
  const std::string saves =
      input_no_grad
          ? (w.frozen_layers < num_layers
                 ? fmt::format("their input needs no gradient (frozen embedding): autograd records nothing for "
                               "them, and layer {} keeps no fp32 copy of x and no rstd in its input norm",
                               w.frozen_layers)
                 : std::string("no input needs a gradient (frozen embedding): autograd records nothing for them, "
                               "and the final norm keeps no fp32 copy of x and no rstd"))
          : std::string("gradients still flow through them to the embedding: they keep only what the input's "
                        "gradient needs (no linear input, no normalized x for a norm weight)");
  notes.push_back(fmt::format("frozen layers 0..{}: weights kept, no gradient or optimizer state; {} "
                              "(validation/notes/frozen-layers.md)",
                              w.frozen_layers - 1, saves));
  if (input_no_grad && recompute == Recompute::kFull && w.frozen_layers < num_layers)
    notes.push_back(fmt::format(
        "recompute full with a frozen input to layer {}: counted as the non-reentrant checkpoint; HF's default "
        "reentrant one gives that layer's weights no gradient (transformers warns \"None of the inputs have "
        "requires_grad=True\"); call model.enable_input_require_grads(), after which the embedding output needs "
        "a gradient and the frozen layers save as with a trained embedding",
        w.frozen_layers));
  return notes;
}

}  // namespace actmem
