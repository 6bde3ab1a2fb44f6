#include "report/offload_report.h"

#include <fmt/format.h>

namespace actmem::detail {

Term offloaded_activations_term(const Totals& t) {
  Term a;
  a.key = "activations";
  a.label = "Saved activations on the GPU under offloading: LM head input, loss, checkpoint keywords";
  a.formula = "Σ saved tensors − offloaded (torchtune OffloadActivations: every saved tensor ≥ 1024 B inside "
              "the model's forward except the output projection's)";
  a.substituted = fmt::format("{} saved, {} of it in host memory", format_binary(Bytes{t.activations + t.host_activations}),
                              format_binary(Bytes{t.host_activations}));
  a.bytes = Bytes{t.activations};
  return a;
}

Term offload_working_set_term(int64_t bytes, Recompute recompute) {
  Term w;
  w.key = "offload_working_set";
  w.label = recompute == Recompute::kFull
                ? "Offloading: one layer's checkpointed input brought back for its recomputation"
                : "Offloading: saved tensors brought back in backward (or stashed at the end of forward), "
                  "at most one layer's";
  w.formula = recompute == Recompute::kFull ? "one layer's input" : "Σ saved tensors of the largest layer";
  w.substituted = format_binary(Bytes{bytes});
  w.bytes = Bytes{bytes};
  w.exactness = Exactness::kAllowance;
  w.note = "torchtune unpacks node by node (with streams, the previous node's tensors until the current one "
           "ends; up to 5 offloaded tensors stay stashed until backward starts): bounded by one layer";
  return w;
}

std::string offload_note(const Totals& t) {
  return fmt::format("activation offloading (torchtune): {} of saved activations live in host memory (pinned; "
                     "not in the GPU total), counted once per storage: torchtune copies a tensor once per save, "
                     "so its host use is higher (1.2-1.5× on Llama-like layers, validation/offload_validation.py)",
                     format_binary(Bytes{t.host_activations}));
}

}  // namespace actmem::detail
