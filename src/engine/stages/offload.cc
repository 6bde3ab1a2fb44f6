// Offloading the saved activations to host memory. --offload-activations (offload.h): the GPU keeps
// the head's and the shared storages, and a working set of tensors brought back in backward (an
// allowance: one layer's saved tensors) is a transient. Megatron's --cpu-offloading-num-layers
// (cpu_offloading.h, one stage): the decoder layers' part on the GPU is TE's window of L − N full
// layers plus what the offloaded ones leave behind. Their checks: check_offload,
// check_cpu_offloading (checks.cc). Their explanation: report/offload_report.cc and
// report/cpu_offload_report.cc.
#include "engine/stages/account.h"

#include <algorithm>

namespace actmem::detail {

void account_offload(Account& a) {
  const GraphSet& g = *a.b.graphs;
  const Scratch& s = a.s;
  Transients& tr = a.tr;
  if (a.l.offload_activations) {
    tr.offload_head_gpu = Bytes{offload_head_gpu_bytes(g.head, a.v)};
    tr.offload_shared_gpu = a.plan.some_layer_recomputed() ? Bytes{eval(g.shared.checkpointed, a.v)} : Bytes{0};
    tr.offload_working_set = Bytes{0};
    for (std::size_t k = 0; k < a.num_kinds; ++k)
      tr.offload_working_set = std::max(
          tr.offload_working_set, Bytes{a.l.recompute == Recompute::kFull ? s.kinds[k].input : s.kinds[k].none});
  }
  const int64_t n = a.l.cpu_offloading_num_layers;
  if (n > 0) {
    const bool te_spec = a.w.megatron.impl == TransformerImpl::kTransformerEngine;
    auto kind_at = [&](int64_t i) { return a.p.kind_of[static_cast<std::size_t>(i)]; };
    tr.cpu_off = cpu_offload_split(
        a.p.model.num_layers, n, [&](int64_t i) { return s.kinds[kind_at(i)].none; },
        [&](int64_t i) { return s.kind_offload_kept[kind_at(i)]; });
    const int64_t shared_all = eval(g.shared.none, a.v);
    tr.cpu_off_shared_host = checked_mul(shared_all - te_offload_kept_bytes(g.shared, a.v, te_spec), n);
  }
  if (!a.rec) return;
  RecordingSink& rec = *a.rec;
  rec.offload_working_set = tr.offload_working_set.count();
  if (n > 0) {
    rec.cpu_offload_layers_gpu = tr.cpu_off.gpu;
    rec.cpu_offload_layers_host = tr.cpu_off.host;
    rec.cpu_offload_shared_host = tr.cpu_off_shared_host;
    rec.cpu_offload_peak_step = tr.cpu_off.peak_step;
    rec.cpu_offload_kept_per_layer = s.kind_offload_kept[a.p.middle_kind];
  }
}

Bytes activations_on_gpu(const Account& a, Bytes in_flight) {
  const Transients& tr = a.tr;
  if (a.l.offload_activations) return tr.offload_head_gpu + tr.offload_shared_gpu;
  if (a.l.cpu_offloading_num_layers > 0)
    return in_flight - a.layers - Bytes{a.head_loss} +
           std::max(Bytes{tr.cpu_off.last} + Bytes{a.head_loss}, Bytes{tr.cpu_off.gpu});
  return in_flight;
}

int64_t activations_on_host(const Account& a, Bytes in_flight, Bytes on_gpu) {
  return a.l.cpu_offloading_num_layers > 0 ? checked_add(a.tr.cpu_off.host, a.tr.cpu_off_shared_host)
                                           : (in_flight - on_gpu).count();
}

}  // namespace actmem::detail
