#include "policies/cpu_offloading.h"

#include "util/bytes.h"  // checked arithmetic

namespace actmem::detail {

int64_t te_offload_kept_bytes(const Graph& g, const SymValues& v, bool te_spec) {
  int64_t sum = 0;
  for (const Storage& st : g.storages) {
    if (!st.saved(Recompute::kNone)) continue;
    int64_t elements = 1;
    for (const Dim& d : st.shape) elements = checked_mul(elements, d.value(v));
    // The local spec's fused QKV output is saved only through q/k/v slices (torch.split in
    // attention.py get_query_key_value_tensors): non-contiguous views of part of it, which
    // _check_if_offload skips, so it stays whole. The TE spec marks q, k, v offload_base_tensor
    // (backends.py l.1422): the base moves.
    const bool strided_slices = !te_spec && st.name == "attn.qkv";
    if (elements >= kTeOffloadMinElements && !strided_slices) continue;  // moved to host memory
    sum = checked_add(sum, checked_mul(elements, int64_t{dtype_bytes(st.dtype)}));
  }
  return sum;
}

}  // namespace actmem::detail
