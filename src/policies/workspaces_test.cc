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
  EXPECT_EQ(training_workspaces(w).value().total(), 0);
  w.framework = Framework::kMegatron;  // local spec: PyTorch's two
  EXPECT_EQ(training_workspaces(w).value().total(), 2 * 33'554'432);
  w.megatron.impl = TransformerImpl::kTransformerEngine;
  w.megatron.fp8_gpu = Fp8Gpu::kAmpere;
  w.megatron.cublas_workspace_config = ":4096:8";
  EXPECT_EQ(training_workspaces(w).value().total(), 2 * 33'554'432 + 4 * 1024 * 1024);
}

}  // namespace
}  // namespace actmem
