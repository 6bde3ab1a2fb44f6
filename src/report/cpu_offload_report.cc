#include "report/cpu_offload_report.h"

#include <fmt/format.h>

namespace actmem::detail {

Term cpu_offload_activations_term(const Totals& t, const RecordingSink& rec, int64_t num_layers, int64_t n) {
  Term a;
  a.key = "activations";
  a.label = fmt::format("Saved activations on the GPU under Megatron CPU offloading: {} of {} layers resident, "
                        "the first {} offloaded",
                        num_layers - n, num_layers, n);
  a.formula = "embedding + head + loss + shared + Σ window of (L − N) layers' saves + Σ offloaded layers' saves "
              "under 256Ki elements (TE cpu_offload.py DefaultOffloadSynchronizer)";
  a.substituted = fmt::format("{} saved per micro-batch; layers on the GPU at layer {}: {} ({} left by each "
                              "offloaded layer); {} in host memory",
                              format_binary(Bytes{t.activations + (t.host_activations - rec.cpu_offload_shared_host)}),
                              rec.cpu_offload_peak_step, format_binary(Bytes{rec.cpu_offload_layers_gpu}),
                              format_binary(Bytes{rec.cpu_offload_kept_per_layer}),
                              format_binary(Bytes{t.host_activations}));
  a.bytes = Bytes{t.activations};
  return a;
}

std::string cpu_offload_note(const Totals& t, const RecordingSink& rec, int64_t num_layers, int64_t n,
                             int64_t grad_accum) {
  const Bytes host{t.host_activations};
  return fmt::format(
      "CPU offloading (Megatron --cpu-offloading-num-layers {}, TransformerEngine cpu_offload): layers 0-{} are "
      "offloaded, layers {}-{} keep their saved tensors on the GPU; at any step the GPU holds {} full layers plus "
      "what each offloaded layer does not move (tensors under 256Ki elements: {} per layer). Host (pinned): {} "
      "({} of it RoPE/shared storages copied once per offloaded layer). PCIe per micro-batch: {} to the host in "
      "forward and {} back in backward; per step ({} micro-batch{}): {} each way",
      n, n - 1, n, num_layers - 1, num_layers - n, format_binary(Bytes{rec.cpu_offload_kept_per_layer}),
      format_binary(host), format_binary(Bytes{rec.cpu_offload_shared_host}), format_binary(host),
      format_binary(host), grad_accum, grad_accum == 1 ? "" : "es", format_binary(host * grad_accum));
}

}  // namespace actmem::detail
