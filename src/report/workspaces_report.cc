#include "report/workspaces_report.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace actmem::detail {

Term workspaces_term(const Workspaces& ws, const Workload& w) {
  std::vector<std::vector<Factor>> products{{{"threads", ws.pytorch_count}, {"W_torch", ws.pytorch_each}}};
  if (ws.te > 0) products.push_back({{"W_TE", ws.te}});
  if (ws.te_grouped_count > 0) products.push_back({{"streams", ws.te_grouped_count}, {"W_TE", ws.te}});
  if (ws.global_buffer > 0)
    products.push_back({{ws.global_request == Workspaces::GlobalRequest::kScores      ? "b·a/t·s·s"
                         : ws.global_request == Workspaces::GlobalRequest::kMoeGather ? "s/t·b·etp·ep·h"
                                                                                       : "s·b·h",
                         ws.global_buffer_elements},
                        {"e", ws.global_buffer / std::max<int64_t>(ws.global_buffer_elements, 1)}});
  std::string label = ws.te > 0 ? "cuBLAS workspaces (PyTorch's per thread, TransformerEngine's)"
                                : "cuBLAS workspaces (PyTorch's, per thread)";
  if (ws.global_buffer > 0) label += " and Megatron's global memory buffer";
  Term t = sum_term("cublas_workspaces", label, products);
  const std::string& config = w.megatron.cublas_workspace_config;
  const std::string gpu(kFp8GpuNames.name(w.megatron.fp8_gpu));
  t.note = fmt::format(
      "PyTorch allocates one per cuBLAS handle and stream through its caching allocator, and a step uses two "
      "threads (forward; autograd's backward): W_torch = CUBLAS_WORKSPACE_CONFIG {} (Σ SIZE KiB × COUNT){}{}",
      config.empty() ? default_cublas_workspace_config(w.megatron.fp8_gpu) : std::string_view(config),
      config.empty() ? fmt::format(", PyTorch's default on {} (give cublas_workspace_config, "
                                   "--cublas-workspace-config, as the job sets it)",
                                   gpu)
                     : "",
      ws.te > 0 ? fmt::format("; TE's one cached workspace on {}: {} (TE cpp_extensions/gemm.py "
                              "get_cublas_workspace_size_bytes; fp8_gpu, --fp8-gpu, names the generation)",
                              gpu, w.megatron.fp8_gpu == Fp8Gpu::kAmpere ? "4 MiB" : "32 MiB + 1 KiB")
                : "");
  if (ws.te_grouped_count > 0)
    t.note += fmt::format("; TE's grouped GEMM (the experts' GroupedLinear, moe_grouped_gemm) caches its own, one per "
                          "compute stream: {} × W_TE (TE cpp_extensions/gemm.py get_cublas_workspace(grouped_gemm=True), "
                          "common/util/multi_stream.cpp get_num_compute_streams)",
                          ws.te_grouped_count);
  if (ws.global_buffer > 0)
    t.note += fmt::format("; Megatron's GlobalMemoryBuffer (parallel_state.get_global_memory_buffer) keeps its "
                          "largest request all job long: {} (dot_product_attention.py l.188-191; "
                          "tensor_parallel/layers.py l.623-629)",
                          ws.global_request == Workspaces::GlobalRequest::kScores
                              ? "the local spec's [b·a/t, s, s] baddbmm input of the attention scores"
                          : ws.global_request == Workspaces::GlobalRequest::kMoeGather
                              ? "the MoE allgather dispatcher's gathered tokens of the expert TP·EP group "
                                "(token_dispatcher.py l.298-300)"
                              : "the sequence-parallel linears' all-gathered [s, b, h] input");
  return t;
}

Term layout_workspaces_term(const Prepared& p, const Layout& o, int64_t stage) {
  return workspaces_term(megatron_global_buffer(p.workspaces, p.workload, p.model.num_heads, p.model.hidden, o,
                                                stage == o.parallel.pp - 1),
                         p.workload);
}

}  // namespace actmem::detail
