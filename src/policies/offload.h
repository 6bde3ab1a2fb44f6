// Activation offloading to host memory (--offload-activations), as torchtune runs it
// (torchtune/training/_activation_offloading.py: OffloadActivations, NoOpManager,
// get_act_offloading_ctx_manager; recipes: `with self.activations_handling_ctx: logits =
// self._model(**batch)`, the loss outside it).
//
// OffloadActivations.pack_tensor copies every saved tensor of ≥ min_offload_size = 1024 bytes that
// is not a Parameter or Buffer to a new CPU tensor (one copy per save: no deduplication) and keeps
// an id; unpack brings it back in backward, node by node. The output projection is wrapped in
// NoOpManager (so the LM head's saved input stays), and the loss runs outside the context. So after
// forward the GPU holds, of the saved activations:
//   - the LM head's input and what the loss keeps: the head region minus the final norm's own saves;
//   - under full recomputation, the tensors a checkpointed layer is passed as keywords (HF's
//     GradientCheckpointingLayer binds them with functools.partial; torch's checkpoint holds the
//     function, it does not save them): the shared checkpoint inputs (RoPE cos/sin, position ids,
//     the eager mask). The positional layer input is saved (save_for_backward, or torch ≥ 2.1's
//     _NoopSaveInputs under the non-reentrant checkpoint) and so offloaded;
//   - saved tensors under 1024 bytes: at s·b ≥ 256 no per-layer tensor is that small (an fp32 row
//     statistic is 4·s·b bytes), which is what this model assumes (all per-layer tensors move).
// The host holds the rest: counted here as distinct storages, a lower bound of torchtune's per-save
// copies (measured: validation/offload_validation.py prints the ratio, 1.2-1.5 on Llama-like layers).
// Recomputation in backward runs outside the context: recomputed activations stay on the GPU.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "policies/options.h"
#include "tensors/op_graph.h"

namespace actmem::detail {

/// Whether a head-region storage is the final norm's own (offloaded) rather than the LM head's
/// input or the loss's (kept on the GPU by NoOpManager / the loss outside the context).
bool offloaded_head_storage(const Storage& st);

/// Bytes of the head region that stay on the GPU under offloading, for bound symbol values.
int64_t offload_head_gpu_bytes(const Graph& head, const SymValues& v);

/// torchtune offloads on one GPU or under FSDP (data parallel): HF rules, one pipeline stage.
template <typename Reporter>
bool check_offload(const Workload& w, const Layout& l, Reporter& r) {
  if (!l.offload_activations) return true;
  if (w.framework != Framework::kHF)
    return r.fail(ErrorKind::kIncompatible, "offload_activations", [] {
      return std::string("@offload_activations is torchtune's OffloadActivations over the HF save rules; use "
                         "@framework hf (for Megatron's TransformerEngine cpu_offload, @cpu_offloading_num_layers N)");
    });
  if (l.parallel.pp > 1)
    return r.fail(ErrorKind::kIncompatible, "offload_activations", [&] {
      return fmt::format("@offload_activations is modelled for one pipeline stage; use @pp 1 (not {})", l.parallel.pp);
    });
  return true;
}

}  // namespace actmem::detail
