// The checks of every stage, run before any accounting and in this order: when two fail, the first
// reported is the same for evaluate() and explain(), and the same as before the stages were split.
// Each check lives with the policy it guards (policies/); this file only orders them.
#include "engine/stages/account.h"

#include <fmt/format.h>

#include "policies/encoder_checks.h"  // encoders: HF, data parallelism only
#include "policies/packed_docs.h"     // check_packed_docs

namespace actmem::detail {

namespace {

/// --params: no weight shapes and no architecture, so only what static memory needs.
template <typename Reporter>
bool check_param_only(const Prepared& p, const Layout& l, Reporter& reporter) {
  const ParallelLayout& par = l.parallel;
  const Workload& w = p.workload;
  if (needs_weight_shapes(w) || w.optimizer == Optimizer::kMuon)  // Muon: which weights are 2-D
    return reporter.fail(ErrorKind::kIncompatible, "params", [&] {
      return fmt::format("@params gives no weight shapes, which {} needs; give @model",
                         w.lora.enabled() ? "LoRA" : w.optimizer_in_backward ? "the optimizer step in backward"
                                                                              : kOptimizerNames.name(w.optimizer));
    });
  if (par.cp > 1 || par.ep > 1 || par.sp)
    return reporter.fail(ErrorKind::kIncompatible, "params", [] {
      return std::string("@params gives no architecture: @cp, @ep and @sp need a model (@model)");
    });
  return check_static(par, reporter);  // static memory
}

}  // namespace

template <typename Reporter>
bool check_layout(const Prepared& p, const Layout& l, Reporter& reporter) {
  const ParallelLayout& par = l.parallel;
  const Workload& w = p.workload;
  if (!check_options(w, l, reporter)) return false;
  if (!check_torchtitan_layout(w, l, reporter)) return false;
  if (!p.param_only && !check_encoder_layout(p.model, l, reporter)) return false;
  if (p.param_only) return check_param_only(p, l, reporter);
  const ModelSpec& m = p.model;
  if (!check_parallel(m, p.tp_facts, par, reporter)) return false;            // layer kinds, pipeline
  if (!check_sequence(l.seq_len, par, reporter)) return false;                // layer kinds
  if (!check_loss(w, l, reporter)) return false;                              // transients: the loss
  if (!check_offload(w, l, reporter)) return false;                           // transients: offloading
  if (!check_cpu_offloading(m.num_layers, w, l, reporter)) return false;      // transients: TE cpu_offload
  if (!check_recompute(m, w, l, reporter)) return false;                      // activations, recompute
  if (!check_static(par, reporter)) return false;                             // static memory
  if (!check_finetune_model(m.fused_qkv, m.fused_gate_up, w, reporter)) return false;  // static memory
  if (!check_frozen_layers(m.num_layers, w, reporter)) return false;          // layer kinds
  if (!check_packed_docs(m, w, l, reporter)) return false;                    // layer kinds (FLOPs)
  return check_grad_accum(w, l, reporter);                                    // transients
}

template bool check_layout(const Prepared&, const Layout&, FastReporter&);
template bool check_layout(const Prepared&, const Layout&, MessageReporter&);

}  // namespace actmem::detail
