// Megatron-core activation CPU offloading (--cpu-offloading-num-layers N), as Megatron-LM
// d98e8a64ddf3 runs it through TransformerEngine d0067d0da6cb's cpu_offload.py (the default, v2
// code path; NVTE_CPU_OFFLOAD_V1=1 selects the older one, not modelled).
//
// Megatron: arguments.py l.1950 (`if args.cpu_offloading_num_layers > 0: args.cpu_offloading =
// True`); model_parallel_config.py l.458-480 (cpu_offloading_activations defaults True,
// _weights False, _double_buffering False; the last three have no CLI flag, arguments.py
// l.2320-2323 excludes them); transformer_block.py l.304-317 builds the context with
// get_cpu_offload_context(cpu_offloading, cpu_offloading_num_layers, num_layers, ...) and l.713-742
// runs each layer `with self.offload_context` followed by group_prefetch_offload_commit_async. Only
// the decoder layers are inside it: the embedding, the final norm, the output layer and the loss
// keep their saved tensors on the GPU.
//
// TE cpu_offload.py, DefaultOffloadSynchronizer (l.576-654): layers 0 .. N−1 are offloaded;
// layer i's copy starts when layer i+1 begins, its GPU tensors are released when layer L − N + i
// begins (finish_offload_map) and it is reloaded when the backward of layer L − 1 − N + i begins
// (start_reload_map); the previous backward layer's reloaded tensors are released at each step.
// So at every step k ≥ L − N − 1 of forward or backward the GPU holds the full saved tensors of the
// L − N consecutive layers ending at k (the docstring's "(num_layers − num_offloaded_layers)·T",
// l.612-621) and, of the offloaded layers not in that window, what _check_if_offload (l.454-475)
// does not move: tensors under 256·1024 elements (`t.numel() < 256 * 1024`), parameters, tensors
// marked _TE_do_not_offload (TE's weights and fp8 weight copies), non-contiguous views (warned and
// skipped). A view with its base's element count moves its base (_switch_to_base_tensors); a
// QuantizedTensor is pushed component by component (push_tensor, l.366-400).
// actmem applies the size rule per saved storage (its element count) and treats every saved
// storage as contiguous but one: the local spec's fused QKV output, saved only through the strided
// q/k/v slices torch.split makes (kept whole); validation/cpu_offload_validation.py measures it.
// Host (pinned) memory: each offloaded layer's moved tensors, deduplicated within the layer
// (_deduplicate_tensors), so a storage saved by every layer (RoPE freqs) is copied once per layer.
// Megatron's cpu_offloading_weights and cpu_offloading_double_buffering change nothing here: TE's
// get_cpu_offload_context (l.692-867) documents both as deprecated, ignores double_buffering and
// returns a null context for weights alone. The pinned buffers kept across iterations
// (--cpu-offloading-retain-pinned-cpu-buffers) are the same host bytes.
// Layout rules Megatron enforces (transformer_config.py l.1884-1899) and TE (l.817-827): refused.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "policies/options.h"
#include "tensors/op_graph.h"

namespace actmem::detail {

/// TE's threshold (cpu_offload.py l.457): saved tensors with fewer elements stay on the GPU.
inline constexpr int64_t kTeOffloadMinElements = 256 * 1024;

/// Bytes of a graph's saved storages (no recomputation) that TE's offloading leaves on the GPU:
/// those under kTeOffloadMinElements elements, and on the local spec (`te_spec` false) the fused
/// QKV output, saved only as strided slices; for bound symbol values.
int64_t te_offload_kept_bytes(const Graph& g, const SymValues& v, bool te_spec);

/// Where the decoder layers' saved activations live under --cpu-offloading-num-layers.
struct CpuOffloadSplit {
  int64_t gpu = 0;        // the most the GPU holds of the layers' saved tensors at once
  int64_t host = 0;       // pinned host bytes of the offloaded layers' own storages
  int64_t peak_step = 0;  // the layer (forward or backward step) at which `gpu` is reached
  int64_t last = 0;       // at the last layer (k = L − 1): with the head and loss saved after it, the
                          // end of the forward; the other steps run without them
};

/// The window walk above: layers [0, L), the first n offloaded; full(i) = everything layer i saves,
/// kept(i) = what of it stays on the GPU when offloaded.
template <typename Full, typename Kept>
CpuOffloadSplit cpu_offload_split(int64_t num_layers, int64_t n, Full full, Kept kept) {
  CpuOffloadSplit r;
  const int64_t w = num_layers - n;  // resident window
  int64_t window = 0;
  for (int64_t i = 0; i < w; ++i) window += full(i);
  int64_t small = 0;
  r.gpu = window;
  r.peak_step = w - 1;
  for (int64_t k = w; k < num_layers; ++k) {
    window += full(k) - full(k - w);
    small += kept(k - w);
    if (window + small >= r.gpu) {
      r.gpu = window + small;
      r.peak_step = k;
    }
  }
  r.last = window + small;
  for (int64_t i = 0; i < n; ++i) r.host += full(i) - kept(i);
  return r;
}

/// Megatron's and TE's layout rules for --cpu-offloading-num-layers.
template <typename Reporter>
bool check_cpu_offloading(int64_t num_layers, const Workload& w, const Layout& l, Reporter& r) {
  const int64_t n = l.cpu_offloading_num_layers;
  if (n == 0) return true;
  if (n < 0)
    return r.fail(ErrorKind::kInvalid, "cpu_offloading_num_layers", [&] {
      return fmt::format("@cpu_offloading_num_layers {} must be ≥ 0 (0: no offloading)", n);
    });
  if (w.framework != Framework::kMegatron)
    return r.fail(ErrorKind::kIncompatible, "cpu_offloading_num_layers", [] {
      return std::string("@cpu_offloading_num_layers is Megatron-core's activation offloading (TransformerEngine "
                         "cpu_offload); use @framework megatron (for torchtune's, @offload_activations with "
                         "@framework hf)");
    });
  if (n >= num_layers)
    return r.fail(ErrorKind::kIncompatible, "cpu_offloading_num_layers", [&] {
      return fmt::format("@cpu_offloading_num_layers {}: Megatron offloads only fewer layers than the model's {} "
                         "(transformer_config.py; TE keeps the last layer on the GPU); use at most {}",
                         n, num_layers, num_layers - 1);
    });
  if (l.parallel.pp > 1)
    return r.fail(ErrorKind::kIncompatible, "cpu_offloading_num_layers", [&] {
      return fmt::format("@cpu_offloading_num_layers: Megatron has no CPU offloading with pipeline parallelism "
                         "(transformer_config.py); use @pp 1 (not {}) or drop @cpu_offloading_num_layers",
                         l.parallel.pp);
    });
  if (l.recompute != Recompute::kNone)
    return r.fail(ErrorKind::kIncompatible, "cpu_offloading_num_layers", [] {
      return std::string("@cpu_offloading_num_layers: Megatron's CPU offloading does not work with activation "
                         "recomputation (transformer_config.py); use @recompute none or drop "
                         "@cpu_offloading_num_layers");
    });
  return true;
}

}  // namespace actmem::detail
