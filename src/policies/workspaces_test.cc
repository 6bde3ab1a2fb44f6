#include "policies/workspaces.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

// PyTorch CublasHandlePool.cpp parseChosenWorkspaceSize: ":SIZE:COUNT" pairs, SIZE in KiB, summed;
// unset: ":4096:8" on sm90+, ":4096:2:16:8" before. TE gemm.py get_cublas_workspace_size_bytes.
TEST(Workspaces, CublasConfigAndDefaults) {
  EXPECT_EQ(cublas_workspace_bytes(":4096:8", Fp8Gpu::kAmpere).value(), 8 * 4096 * 1024);  // 32 MiB
  EXPECT_EQ(cublas_workspace_bytes(":16:8", Fp8Gpu::kHopper).value(), 8 * 16 * 1024);      // 128 KiB
  EXPECT_EQ(cublas_workspace_bytes("", Fp8Gpu::kHopper).value(), 33'554'432);
  EXPECT_EQ(cublas_workspace_bytes("", Fp8Gpu::kAmpere).value(), 2 * 4096 * 1024 + 8 * 16 * 1024);  // 8.125 MiB
  for (const char* bad : {"4096:8", ":4096", ":a:8", ":4096:8:", ":-1:8"}) {
    auto r = cublas_workspace_bytes(bad, Fp8Gpu::kHopper);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().field, "cublas_workspace_config");
  }
  EXPECT_EQ(te_workspace_bytes(Fp8Gpu::kHopper), 32 * 1024 * 1024 + 1024);
  EXPECT_EQ(te_workspace_bytes(Fp8Gpu::kBlackwell), 32 * 1024 * 1024 + 1024);
  EXPECT_EQ(te_workspace_bytes(Fp8Gpu::kAmpere), 4 * 1024 * 1024);
}

TEST(Workspaces, PerFramework) {
  Workload w;  // hf: not counted yet (no GPU measurement of the HF stack)
  EXPECT_EQ(training_workspaces(w, false).value().total(), 0);
  w.framework = Framework::kMegatron;  // local spec: PyTorch's two
  EXPECT_EQ(training_workspaces(w, false).value().total(), 2 * 33'554'432);
  w.megatron.impl = TransformerImpl::kTransformerEngine;
  w.megatron.fp8_gpu = Fp8Gpu::kAmpere;
  w.megatron.cublas_workspace_config = ":4096:8";
  EXPECT_EQ(training_workspaces(w, false).value().total(), 2 * 33'554'432 + 4 * 1024 * 1024);
  // TE's grouped GEMM (--moe-grouped-gemm, an MoE model): four more, one per compute stream
  // (TE gemm.py get_cublas_workspace(grouped_gemm=True); multi_stream.cpp: 4 streams).
  w.megatron.moe_grouped_gemm = true;
  EXPECT_EQ(training_workspaces(w, false).value().total(), 2 * 33'554'432 + 4 * 1024 * 1024);  // no experts
  EXPECT_EQ(training_workspaces(w, true).value().total(), 2 * 33'554'432 + 5 * 4 * 1024 * 1024);
  w.megatron.fp8_gpu = Fp8Gpu::kHopper;
  EXPECT_EQ(training_workspaces(w, true).value().total(), 2 * 33'554'432 + 5 * (32 * 1024 * 1024 + 1024));
}

// Megatron-core's GlobalMemoryBuffer ("mpu", utils.py GlobalMemoryBuffer; never freed): the local
// spec's DotProductAttention baddbmm input [b·a/tp, s, s] (dot_product_attention.py l.188-191), the
// sequence-parallel ColumnParallelLinear's all-gathered [s, b, h] input (layers.py l.623-629): the
// larger one. Megatron-LM's CI gpt/gpt3_mcore_tp4_pp1 (local spec, s 1024, b 4, 8 heads, tp 4, no SP)
// holds 4 · 2 · 1024² · 2 B = 16 MiB of it: with it actmem's state after the step is 2 MiB (0.5%)
// under the measured 382,956,544 B, 18 MiB without.
TEST(Workspaces, MegatronGlobalMemoryBuffer) {
  Workload w{.framework = Framework::kMegatron, .attention = AttentionImpl::kEager};
  Layout l{.seq_len = 1024, .micro_batch = 4, .parallel = {.tp = 4}};
  const Workspaces ws = megatron_global_buffer(Workspaces{}, w, 8, 512, l, true);
  EXPECT_EQ(ws.global_buffer, 4 * (8 / 4) * 1024 * 1024 * 2);
  EXPECT_EQ(ws.global_request, Workspaces::GlobalRequest::kScores);
  EXPECT_EQ(ws.total(), ws.global_buffer);
  l.parallel.sp = true;  // the scores (8M elements) stay larger than the gathered input (2M)
  EXPECT_EQ(megatron_global_buffer(Workspaces{}, w, 8, 512, l, true).global_buffer, 16 * 1024 * 1024);
  w.megatron.impl = TransformerImpl::kTransformerEngine;  // TE's attention allocates per call: SP's gather only
  const Workspaces te = megatron_global_buffer(Workspaces{}, w, 8, 512, l, true);
  EXPECT_EQ(te.global_buffer, 1024 * 4 * 512 * 2);
  EXPECT_EQ(te.global_request, Workspaces::GlobalRequest::kSpGather);
  // Under the TE spec only the output layer is Megatron's ColumnParallelLinear: the last stage's.
  EXPECT_EQ(megatron_global_buffer(Workspaces{}, w, 8, 512, l, false).global_buffer, 0);
  l.parallel.sp = false;
  EXPECT_EQ(megatron_global_buffer(Workspaces{}, w, 8, 512, l, true).global_buffer, 0);
  w.framework = Framework::kHF;
  w.megatron.impl = TransformerImpl::kLocal;
  EXPECT_EQ(megatron_global_buffer(Workspaces{}, w, 8, 512, l, true).global_buffer, 0);
}

// The MoE allgather dispatcher gathers the expert TP·EP group's tokens into the same buffer
// (token_dispatcher.py l.298-300, use_global_buffer=True at d98e8a64): Megatron-LM's CI
// moe/gpt3_mcore_tp2_cp2_pp2_ep2_te_4experts2parallel (s 1024, b 4, h 512, tp 2 with SP, cp 2,
// ep 2): (1024/(2·2))·4 tokens per rank × tp 2 · ep 2 × 512 × 2 B = 4 MiB, where SP's gather of
// the output layer's input is [s/cp, b, h] = 2 MiB.
TEST(Workspaces, MoeAllgatherDispatcherUsesTheGlobalBuffer) {
  Workload w{.framework = Framework::kMegatron, .megatron = {.impl = TransformerImpl::kTransformerEngine}};
  Layout l{.seq_len = 1024, .micro_batch = 4, .parallel = {.tp = 2, .sp = true, .cp = 2, .ep = 2}};
  Workspaces moe;
  moe.moe_allgather = true;
  const Workspaces ws = megatron_global_buffer(moe, w, 8, 512, l, true);
  EXPECT_EQ(ws.global_buffer, 4 * 1024 * 1024);
  EXPECT_EQ(ws.global_request, Workspaces::GlobalRequest::kMoeGather);
  EXPECT_EQ(megatron_global_buffer(Workspaces{}, w, 8, 512, l, true).global_buffer, 2 * 1024 * 1024);
  w.megatron.dispatcher = MoeDispatcher::kAlltoall;  // training_workspaces sets the flag for allgather only
  EXPECT_FALSE(training_workspaces(w, true).value().moe_allgather);
}

}  // namespace
}  // namespace actmem
