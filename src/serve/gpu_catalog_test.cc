// The GPU catalog: memory entries unchanged, and speed figures someone can check against the datasheet
// each assertion names.
#include "serve/gpu_catalog.h"

#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include <gtest/gtest.h>

namespace actmem {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

GpuSpec gpu(std::string_view name) {
  auto g = find_gpu(name);
  if (!g) throw std::runtime_error(g.error().message);
  return *g;
}

TEST(GpuCatalog, ExistingMemoryEntriesAreUnchanged) {
  // `actmem serve --gpu` prints capacities from these; the golden outputs depend on them.
  EXPECT_EQ(gpu("a100-40gb").total, Bytes{40536 * kMiB});
  EXPECT_EQ(gpu("a100-80gb").total, Bytes{85167243264});
  EXPECT_EQ(gpu("h100-80gb").total, Bytes{85045477376});
  EXPECT_EQ(gpu("h200-141gb").total, Bytes{143156 * kMiB});
  EXPECT_EQ(gpu("l40s-48gb").total, Bytes{45589 * kMiB});
  EXPECT_EQ(gpu("rtx-4090-24gb").total, Bytes{24563 * kMiB});
  EXPECT_EQ(gpu("mi300x-192gb").total, Bytes{196592 * kMiB});
  EXPECT_EQ(gpu("b200-180gb").total, Bytes{182631 * kMiB});
  EXPECT_EQ(gpu("h100-80gb").vendor, Bytes{80 * kGiB});
  EXPECT_EQ(gpu("b200-180gb").vendor, Bytes{180 * kGiB});
  for (auto name : {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l40s-48gb", "rtx-4090-24gb",
                    "mi300x-192gb", "b200-180gb"})
    EXPECT_FALSE(gpu(name).total_is_estimate) << name;
}

TEST(GpuCatalog, H100SxmMatchesWhitepaperAndDatasheet) {
  const auto& h = gpu("h100-80gb");
  // NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5: BF16 989.4 dense / 1978.9 sparse.
  EXPECT_DOUBLE_EQ(h.bf16_flops, 989.4e12);
  EXPECT_DOUBLE_EQ(h.fp8_flops, 1978.9e12);
  // NVIDIA H100 datasheet, H100 SXM: 3.35 TB/s HBM3; NVLink 900 GB/s bidirectional = 450 GB/s per direction.
  EXPECT_DOUBLE_EQ(h.memory_bandwidth, 3.35e12);
  EXPECT_DOUBLE_EQ(h.link_bandwidth, 450e9);
  EXPECT_NE(h.link.find("NVLink"), std::string_view::npos);
}

TEST(GpuCatalog, A100MatchesDatasheet) {
  // NVIDIA A100 datasheet: BF16 312 TFLOPS (624 with sparsity) for every variant; no FP8;
  // memory bandwidth 40GB SXM 1,555 / 80GB SXM 2,039 / 40GB PCIe 1,555 / 80GB PCIe 1,935 GB/s;
  // NVLink 600 GB/s (SXM) = 300 GB/s per direction; PCIe Gen4 64 GB/s = 32 GB/s per direction.
  for (auto name : {"a100-40gb", "a100-80gb", "a100-pcie-40gb", "a100-pcie-80gb"}) {
    EXPECT_DOUBLE_EQ(gpu(name).bf16_flops, 312e12) << name;
    EXPECT_EQ(gpu(name).fp8_flops, 0) << name;
  }
  EXPECT_DOUBLE_EQ(gpu("a100-40gb").memory_bandwidth, 1555e9);
  EXPECT_DOUBLE_EQ(gpu("a100-80gb").memory_bandwidth, 2039e9);
  EXPECT_DOUBLE_EQ(gpu("a100-pcie-40gb").memory_bandwidth, 1555e9);
  EXPECT_DOUBLE_EQ(gpu("a100-pcie-80gb").memory_bandwidth, 1935e9);
  EXPECT_DOUBLE_EQ(gpu("a100-80gb").link_bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(gpu("a100-pcie-80gb").link_bandwidth, 32e9);
}

TEST(GpuCatalog, Mi300xMatchesDatasheet) {
  const auto& m = gpu("mi300x-192gb");
  // AMD Instinct MI300X data sheet: BF16 1307.4 TFLOPS dense (2614.9 with sparsity), FP8 2614.9 dense,
  // 5.3 TB/s HBM3, 7 Infinity Fabric links x 128 GB/s = 896 GB/s bidirectional = 448 GB/s per direction.
  EXPECT_DOUBLE_EQ(m.bf16_flops, 1307.4e12);
  EXPECT_DOUBLE_EQ(m.fp8_flops, 2614.9e12);
  EXPECT_DOUBLE_EQ(m.memory_bandwidth, 5.3e12);
  EXPECT_DOUBLE_EQ(m.link_bandwidth, 448e9);
}

TEST(GpuCatalog, OtherDatasheetFigures) {
  // NVIDIA H100 datasheet, H100 NVL column: 1,671 TFLOPS BF16 with sparsity -> 835.5 dense; 3.9 TB/s.
  EXPECT_DOUBLE_EQ(gpu("h100-nvl-94gb").bf16_flops, 835.5e12);
  EXPECT_DOUBLE_EQ(gpu("h100-nvl-94gb").memory_bandwidth, 3.9e12);
  // NVIDIA H800 datasheet: NVLink 400 GB/s bidirectional -> 200 GB/s per direction.
  EXPECT_DOUBLE_EQ(gpu("h800-80gb").link_bandwidth, 200e9);
  // NVIDIA H200 datasheet: 4.8 TB/s HBM3e.
  EXPECT_DOUBLE_EQ(gpu("h200-141gb").memory_bandwidth, 4.8e12);
  // NVIDIA HGX B200 datasheet: BF16 36 PFLOPS with sparsity for 8 GPUs -> 2.25 PFLOPS dense per GPU;
  // NVLink 5 1.8 TB/s per GPU -> 900 GB/s per direction.
  EXPECT_DOUBLE_EQ(gpu("b200-180gb").bf16_flops, 2.25e15);
  EXPECT_DOUBLE_EQ(gpu("b200-180gb").link_bandwidth, 900e9);
  // NVIDIA GB200 NVL72 datasheet: BF16 360 PFLOPS with sparsity for 72 GPUs -> 2.5 PFLOPS dense per GPU.
  EXPECT_DOUBLE_EQ(gpu("gb200-186gb").bf16_flops, 2.5e15);
  // NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense, 864 GB/s GDDR6.
  EXPECT_DOUBLE_EQ(gpu("l40s-48gb").bf16_flops, 362.05e12);
  EXPECT_DOUBLE_EQ(gpu("l40s-48gb").memory_bandwidth, 864e9);
  // NVIDIA Ada Lovelace whitepaper, RTX 4090: BF16 with FP32 accumulate 165.2 TFLOPS dense, 1,008 GB/s.
  EXPECT_DOUBLE_EQ(gpu("rtx-4090-24gb").bf16_flops, 165.2e12);
  EXPECT_DOUBLE_EQ(gpu("rtx-4090-24gb").memory_bandwidth, 1008e9);
  // AMD Instinct MI325X data sheet: 6 TB/s HBM3E, compute as MI300X.
  EXPECT_DOUBLE_EQ(gpu("mi325x-256gb").memory_bandwidth, 6.0e12);
  // AMD Instinct MI250X data sheet: 383 TFLOPS BF16 per module, i.e. per GCD (the ROCm device) half of it.
  EXPECT_DOUBLE_EQ(gpu("mi250x-64gb").bf16_flops, 191.5e12);
  EXPECT_EQ(gpu("mi250x-64gb").fp8_flops, 0);
}

TEST(GpuCatalog, EveryEntryIsComplete) {
  std::set<std::string_view> names;
  for (const auto& g : gpu_catalog()) {
    EXPECT_TRUE(names.insert(g.name).second) << "duplicate " << g.name;
    EXPECT_FALSE(g.description.empty()) << g.name;
    EXPECT_FALSE(g.source.empty()) << g.name;
    EXPECT_LT(g.total, g.vendor) << g.name;
    EXPECT_GT(g.total.count(), g.vendor.count() * 9 / 10) << g.name;
    if (g.total_is_estimate) {
      EXPECT_EQ(g.total.count() % kMiB, 0) << g.name << ": estimates are whole MiB";
    }
    // An estimate says so in its source, so a printed number can be traced to its rule.
    EXPECT_EQ(g.total_is_estimate, g.source.find("ESTIMATE") != std::string_view::npos) << g.name;
    // Peaks: dense bf16 between 50 TFLOP/s and 5 PFLOP/s; fp8 none or twice bf16 (every GPU here).
    EXPECT_GT(g.bf16_flops, 50e12) << g.name;
    EXPECT_LT(g.bf16_flops, 5e15) << g.name;
    if (g.fp8_flops != 0) {
      EXPECT_NEAR(g.fp8_flops / g.bf16_flops, 2.0, 0.03) << g.name;
    }
    EXPECT_FALSE(g.flops_source.empty()) << g.name;
    EXPECT_GT(g.memory_bandwidth, 500e9) << g.name;
    EXPECT_LT(g.memory_bandwidth, 10e12) << g.name;
    EXPECT_FALSE(g.memory_bandwidth_source.empty()) << g.name;
    EXPECT_GE(g.link_bandwidth, 32e9) << g.name;
    EXPECT_LE(g.link_bandwidth, 900e9) << g.name;
    EXPECT_FALSE(g.link.empty()) << g.name;
    EXPECT_FALSE(g.link_source.empty()) << g.name;
  }
  EXPECT_EQ(names.size(), 19u);
}

TEST(GpuCatalog, EstimatedTotalsFollowTheirRule) {
  // NVIDIA HBM rule: capacity less 1%, whole MiB. 94 GiB = 96256 MiB -> 95293 MiB.
  EXPECT_TRUE(gpu("h100-nvl-94gb").total_is_estimate);
  EXPECT_EQ(gpu("h100-nvl-94gb").total, Bytes{95293 * kMiB});
  EXPECT_EQ(gpu("h800-80gb").total, Bytes{81100 * kMiB});
  // AMD rule: capacity less 16 MiB, as the measured MI300X and MI250X GCD.
  EXPECT_TRUE(gpu("mi325x-256gb").total_is_estimate);
  EXPECT_EQ(gpu("mi325x-256gb").total, Bytes{256 * kGiB - 16 * kMiB});
  // Measured new entries are not estimates.
  EXPECT_FALSE(gpu("h100-pcie-80gb").total_is_estimate);
  EXPECT_EQ(gpu("h100-pcie-80gb").total, Bytes{81008 * kMiB});
  EXPECT_EQ(gpu("mi250x-64gb").total, Bytes{65520 * kMiB});
  EXPECT_EQ(gpu("a10g-24gb").total, Bytes{22587 * kMiB});
}

TEST(GpuCatalog, FindGpuSuggestsAndListsEveryName) {
  auto typo = find_gpu("h100-80g");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("did you mean 'h100-80gb'"), std::string::npos);
  // A short form still picks the same GPU it did before new names were added.
  for (auto [given, guess] : {std::pair{"h100", "h100-80gb"}, {"a100", "a100-40gb"}, {"h200", "h200-141gb"},
                              {"b200", "b200-180gb"}, {"mi300x", "mi300x-192gb"}}) {
    auto e = find_gpu(given);
    ASSERT_FALSE(e) << given;
    EXPECT_NE(e.error().message.find(fmt::format("did you mean '{}'", guess)), std::string::npos)
        << e.error().message;
  }
  auto unknown = find_gpu("tpu-v5p");
  ASSERT_FALSE(unknown);
  for (const auto& g : gpu_catalog())
    EXPECT_NE(unknown.error().message.find(std::string(g.name)), std::string::npos) << g.name;
  EXPECT_EQ(unknown.error().message.find("did you mean"), std::string::npos);
}

}  // namespace
}  // namespace actmem
