// --frozen-layers N: the first N decoder layers frozen, as a partial fine-tune does
// (`for p in model.model.layers[i].parameters(): p.requires_grad_(False)` for i < N).
//
// Static memory: their weights stay in the weight dtype; they have no gradient, no fp32 master and
// no optimizer state (finetune_static() counts the tensors weight_tensors_with_frozen_layers() marks).
// Activations (validation/notes/frozen-layers.md, measured on torch 1.13 with models.py's HF Llama):
// what a frozen layer keeps depends on whether its input needs a gradient (detail::LayerGrad,
// tensors/op_graph.h): after a trained embedding it keeps what the input's gradient needs (LoRA's
// frozen-weight rule); after a frozen embedding autograd records nothing, and the first trained layer
// keeps no fp32 copy of its input and no rstd in its input norm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/model_spec.h"
#include "model/weight_tensors.h"
#include "policies/options.h"

namespace actmem {

/// weight_tensors(model) with the tensors of layers [0, frozen_layers) in rows of their own,
/// marked `frozen`. Example: llama-3-8b with 2 frozen layers has a frozen q_proj row of count 2 and a
/// trained one of count 30.
std::vector<WeightTensor> weight_tensors_with_frozen_layers(const ModelSpec& model, int64_t frozen_layers);

/// What is frozen, for labels: "the embedding", "the first 2 layers", "the embedding and the first 2
/// layers", or "" when nothing is.
std::string frozen_parts(const Workload& w);

/// Notes for explain: the rule applied, and the checkpointing caveat (HF's reentrant checkpoint).
/// `input_no_grad`: the embedding's output needs no gradient (a frozen table, no trained position table).
std::vector<std::string> frozen_layers_notes(const Workload& w, bool input_no_grad, Recompute recompute,
                                             int64_t num_layers);

}  // namespace actmem

namespace actmem::detail {

/// --frozen-layers against the model and the other options; a Reporter as in layout_checks.h.
/// Pipeline stages and ZeRO-3 are refused by check_finetune (the weight-shape rules are written for
/// one stage and ZeRO ≤ 2).
template <typename Reporter>
bool check_frozen_layers(int64_t num_layers, const Workload& w, Reporter& r) {
  if (w.frozen_layers == 0) return true;
  if (w.frozen_layers < 0 || w.frozen_layers > num_layers)
    return r.fail(ErrorKind::kInvalid, "frozen_layers", [&] {
      return fmt::format("@frozen_layers {} is out of range; use 0..{} (the model's decoder layers)", w.frozen_layers,
                         num_layers);
    });
  if (w.lora.enabled())
    return r.fail(ErrorKind::kIncompatible, "frozen_layers", [] {
      return std::string("@frozen_layers: LoRA already freezes every base weight, and adapters on some layers only "
                         "(PEFT layers_to_transform) are not modelled; drop @frozen_layers or @lora_rank");
    });
  if (w.framework != Framework::kHF)
    return r.fail(ErrorKind::kIncompatible, "frozen_layers", [] {
      return std::string("@frozen_layers: the frozen-layer saves are measured on HF models "
                         "(validation/notes/frozen-layers.md); use @framework hf");
    });
  return true;
}

}  // namespace actmem::detail
