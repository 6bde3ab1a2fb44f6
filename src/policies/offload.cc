#include "policies/offload.h"

#include <string_view>

#include "util/bytes.h"  // checked arithmetic

namespace actmem::detail {

bool offloaded_head_storage(const Storage& st) {
  const std::string_view name = st.name;
  // The final norm's output is the LM head's input (kept); its other saves and its input are not.
  return name == "head.input" || (name.starts_with("final_norm.") && name != "final_norm.out");
}

int64_t offload_head_gpu_bytes(const Graph& head, const SymValues& v) {
  int64_t sum = 0;
  for (const Storage& st : head.storages) {
    if (!st.saved(Recompute::kNone) || offloaded_head_storage(st)) continue;
    int64_t n = dtype_bytes(st.dtype);
    for (const Dim& d : st.shape) n = checked_mul(n, d.value(v));
    sum = checked_add(sum, n);
  }
  return sum;
}

}  // namespace actmem::detail
