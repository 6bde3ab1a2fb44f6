#include "policies/workspaces.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "util/bytes.h"
#include "util/dtype.h"

namespace actmem {

namespace {
constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;
}  // namespace

std::string_view default_cublas_workspace_config(Fp8Gpu gpu) {
  return gpu == Fp8Gpu::kAmpere ? ":4096:2:16:8" : ":4096:8";
}

Expected<int64_t> cublas_workspace_bytes(std::string_view config, Fp8Gpu gpu) {
  if (config.empty()) config = default_cublas_workspace_config(gpu);
  const auto bad = [&] {
    return Error{ErrorKind::kInvalid, "cublas_workspace_config",
                 fmt::format("--cublas-workspace-config '{}': give CUBLAS_WORKSPACE_CONFIG's form, \":SIZE:COUNT\" "
                             "pairs in KiB (e.g. :4096:8)",
                             config)};
  };
  // ":SIZE:COUNT[:SIZE:COUNT...]"; each pair SIZE KiB × COUNT, summed (PyTorch parseChosenWorkspaceSize).
  int64_t total = 0;
  std::string_view rest = config;
  while (!rest.empty()) {
    int64_t pair[2] = {0, 0};
    for (int64_t& v : pair) {
      if (rest.empty() || rest.front() != ':') return bad();
      rest.remove_prefix(1);
      const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
      if (ec != std::errc{} || v < 0 || v > (int64_t{1} << 24)) return bad();
      rest.remove_prefix(static_cast<size_t>(end - rest.data()));
    }
    total += pair[0] * kKiB * pair[1];
  }
  return total;
}

int64_t te_workspace_bytes(Fp8Gpu gpu) { return gpu == Fp8Gpu::kAmpere ? 4 * kMiB : 32 * kMiB + 1024; }

Workspaces megatron_global_buffer(Workspaces ws, const Workload& w, int64_t heads, int64_t hidden,
                                  const Layout& l, bool output_layer) {
  if (w.framework != Framework::kMegatron) return ws;
  const ParallelLayout& p = l.parallel;
  const int64_t tp = std::max<int64_t>(p.tp, 1), cp = std::max<int64_t>(p.cp, 1);
  int64_t scores = 0, gathered = 0, moe = 0;
  const bool local = w.megatron.impl == TransformerImpl::kLocal;
  if (local && w.attention == AttentionImpl::kEager)
    scores = checked_mul(checked_mul(l.micro_batch, heads / tp), checked_mul(l.seq_len / cp, l.seq_len / cp));
  if (p.sp && tp > 1 && (local || output_layer)) gathered = checked_mul(checked_mul(l.seq_len / cp, l.micro_batch), hidden);
  const int64_t etp = p.expert_tp(), ep = std::max<int64_t>(p.ep, 1);
  if (ws.moe_allgather && (tp > 1 || ep > 1))  // the expert TP·EP group's tokens (SP with TP for MoE)
    moe = checked_mul(checked_mul(l.seq_len / (cp * tp) * l.micro_batch, checked_mul(etp, ep)), hidden);
  ws.global_buffer_elements = std::max({scores, gathered, moe});
  using R = Workspaces::GlobalRequest;
  ws.global_request = ws.global_buffer_elements == 0   ? R::kNone
                      : scores == ws.global_buffer_elements   ? R::kScores
                      : gathered == ws.global_buffer_elements ? R::kSpGather  // equal sizes: SP's, as before
                                                              : R::kMoeGather;
  ws.global_buffer = checked_mul(ws.global_buffer_elements, dtype_bits(w.dtype) / 8);
  return ws;
}

Expected<Workspaces> training_workspaces(const Workload& w, bool moe_layers) {
  Workspaces out;
  if (w.framework != Framework::kMegatron) return out;
  auto each = cublas_workspace_bytes(w.megatron.cublas_workspace_config, w.megatron.fp8_gpu);
  if (!each) return each.error();
  out.pytorch_each = *each;
  out.pytorch_count = 2;
  if (w.megatron.impl == TransformerImpl::kTransformerEngine) {
    out.te = te_workspace_bytes(w.megatron.fp8_gpu);
    if (w.megatron.moe_grouped_gemm && moe_layers) out.te_grouped_count = kTeComputeStreams;
  }
  out.moe_allgather = moe_layers && w.megatron.dispatcher == MoeDispatcher::kAllgather;
  return out;
}

}  // namespace actmem
