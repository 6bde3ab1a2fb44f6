// cuBLAS workspaces that live in PyTorch's caching allocator for the whole job, so that
// torch.cuda.memory_allocated() after a step counts them (validation/notes/megatron_persistent_state.md §4):
//   PyTorch: one workspace per (cuBLAS handle, stream), handles per thread (CublasHandlePool.cpp,
//     getCurrentCUDABlasHandle / setWorkspaceForHandle / getChosenWorkspaceSize); a training step
//     runs torch matmuls on the main thread (forward) and on autograd's device thread (backward):
//     two workspaces of CUBLAS_WORKSPACE_CONFIG (":SIZE:COUNT..." = Σ SIZE KiB × COUNT), by default
//     ":4096:8" (32 MiB) on sm90 and later and ":4096:2:16:8" (8 MiB + 128 KiB) before.
//   TransformerEngine (TE spec): one cached workspace, get_cublas_workspace (TE
//     pytorch/cpp_extensions/gemm.py l.35-62, v2.10-v2.18): 32 MiB + 1 KiB on sm90 and later, 4 MiB before.
//   TE's grouped GEMM (GroupedLinear: Megatron's TEGroupedMLP, --moe-grouped-gemm): general_grouped_gemm
//     takes get_cublas_workspace(device, ub=False, grouped_gemm=True), a second lru_cached entry of one
//     such workspace per compute stream, tex.get_num_cublas_streams() = 4 (TE gemm.py l.48-67, l.415;
//     common/util/multi_stream.cpp get_num_compute_streams, at TE d0067d0d).
// Checked on Megatron-LM's CI (validation/megatron_ci_validation.py): the A100 and H100 runs of one
// case differ by exactly 28 MiB + 1 KiB. Counted for framework megatron (the stack measured).
#pragma once

#include <cstdint>
#include <string_view>

#include "policies/options.h"
#include "actmem/expected.h"

namespace actmem {

/// PyTorch's CUBLAS_WORKSPACE_CONFIG when the job sets none: ":4096:8" from Hopper on, ":4096:2:16:8" before
/// (parseChosenWorkspaceSize, "32MiB for Hopper and Blackwell"). PyTorch before PR #175344 (2026-02,
/// NGC 26.02 and older) gave Blackwell ":4096:2:16:8" too: such a job gives --cublas-workspace-config.
std::string_view default_cublas_workspace_config(Fp8Gpu gpu);

/// Bytes of one PyTorch cuBLAS workspace: CUBLAS_WORKSPACE_CONFIG parsed, or PyTorch's default for
/// the GPU when `config` is empty. Example: cublas_workspace_bytes(":4096:8", Fp8Gpu::kAmpere) == 33554432.
Expected<int64_t> cublas_workspace_bytes(std::string_view config, Fp8Gpu gpu);

/// TransformerEngine's cuBLAS workspace. Example: te_workspace_bytes(Fp8Gpu::kHopper) == 33555456.
int64_t te_workspace_bytes(Fp8Gpu gpu);

/// TE's compute streams for grouped GEMM (multi_stream.cpp get_num_compute_streams).
inline constexpr int64_t kTeComputeStreams = 4;

struct Workspaces {
  int64_t pytorch_each = 0;  // one PyTorch workspace
  int64_t pytorch_count = 0; // how many: 2 (forward thread, autograd's backward thread)
  int64_t te = 0;            // TE's (TE spec only)
  int64_t te_grouped_count = 0;  // TE's grouped-GEMM workspaces, each `te` bytes (--moe-grouped-gemm)
  int64_t global_buffer = 0; // Megatron's GlobalMemoryBuffer, per layout (megatron_global_buffer)
  int64_t global_buffer_elements = 0;
  // Its largest request: the local attention scores, the sequence-parallel linears' gather, or the
  // MoE allgather dispatcher's gather of the TP·EP group's tokens.
  enum class GlobalRequest { kNone, kScores, kSpGather, kMoeGather } global_request = GlobalRequest::kNone;
  bool moe_allgather = false;  // the model has MoE layers under the allgather dispatcher (training_workspaces)
  int64_t total() const { return pytorch_each * pytorch_count + te * (1 + te_grouped_count) + global_buffer; }
};

/// The job's workspaces (framework megatron; zero for the others, which are not yet checked on a GPU).
/// `moe_layers`: the model has routed experts (the grouped-GEMM workspaces exist only once an expert
/// layer runs; counted for the whole model, every stage alike).
Expected<Workspaces> training_workspaces(const Workload& workload, bool moe_layers);

/// `ws` with Megatron-core's GlobalMemoryBuffer of the layout. The buffer (parallel_state.py
/// get_global_memory_buffer; utils.py GlobalMemoryBuffer.get_tensor) keeps one tensor per (name,
/// dtype), grown to the largest request and never freed: the local spec's DotProductAttention takes
/// its [b·a/tp, s, s] baddbmm input from it ("mpu", dot_product_attention.py l.188-191 at d98e8a64),
/// and every sequence-parallel ColumnParallelLinear (the output layer under either spec) its
/// all-gathered [s/cp, b, h] input (tensor_parallel/layers.py l.623-629, 667-673); both in the
/// activation dtype. Held all job long, so in the peak and after the step. Framework megatron only.
/// Under the TE spec the output layer is the only such linear: `output_layer` says whether the rank
/// holds it (the last pipeline stage). The MoE allgather dispatcher all-gathers the hidden states of
/// the expert TP·EP group into it too (token_dispatcher.py l.298-300, use_global_buffer=True;
/// mappings.py l.142-143): (s/(t·cp))·b tokens per rank under SP, times etp·ep, of h each.
/// Example: local spec, eager, s 1024, b 4, 8 heads, tp 1:
/// 4 · 8 · 1024 · 1024 · 2 B = 64 MiB.
Workspaces megatron_global_buffer(Workspaces ws, const Workload& workload, int64_t heads, int64_t hidden,
                                  const Layout& layout, bool output_layer);

}  // namespace actmem
