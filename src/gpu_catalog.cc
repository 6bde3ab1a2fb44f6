#include "gpu_catalog.h"

#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "spellcheck.h"

namespace actmem {

namespace {
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
}  // namespace

// Totals are what the CUDA/HIP runtime reports for the whole device (torch prints it in whole MiB as
// total_memory=...MB). They move by a few tens of MiB with the driver and ECC setting, so a
// measurement of the actual machine (`--gpu-memory`) beats the catalog when exactness matters.
const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog{
      {"a100-40gb", "NVIDIA A100-SXM4-40GB", Bytes{40536 * kMiB}, Bytes{40 * kGiB},
       "torch/paddle get_device_properties: total_memory=40536MB (PaddlePaddle get_device_properties docs); "
       "the PCIe card reports 40326MB"},
      {"a100-80gb", "NVIDIA A100-SXM4-80GB", Bytes{85167243264}, Bytes{80 * kGiB},
       "cudaGetDeviceProperties totalGlobalMem 81221.8125 MiB (public deviceQuery printout)"},
      {"h100-80gb", "NVIDIA H100 80GB HBM3 (SXM5)", Bytes{85045477376}, Bytes{80 * kGiB},
       "deviceQuery: 81106 MBytes (85045477376 bytes), thamada/nvidia-smi nvsim/H100SXMx8_deviceQuery.py; torch "
       "prints 81082-81090MB on other drivers, vLLM logs total_gpu_memory 79.22GiB (vllm PR #10511)"},
      {"h200-141gb", "NVIDIA H200 (SXM)", Bytes{143156 * kMiB}, Bytes{141 * kGiB},
       "torch get_device_properties: total_memory=143156MB (public Modal/vLLM example printout)"},
      {"l40s-48gb", "NVIDIA L40S", Bytes{45589 * kMiB}, Bytes{48 * kGiB},
       "torch get_device_properties: total_memory=45589MB (public printout)"},
      {"rtx-4090-24gb", "NVIDIA GeForce RTX 4090", Bytes{24563 * kMiB}, Bytes{24 * kGiB},
       "torch get_device_properties: total_memory=24563MB (public printout); nvidia-smi shows 24564MiB "
       "(vllm issue #7768)"},
      {"mi300x-192gb", "AMD Instinct MI300X", Bytes{196592 * kMiB}, Bytes{192 * kGiB},
       "torch (ROCm) get_device_properties: total_memory=196592MB (ROCm/ROCm issue #4203)"},
      {"b200-180gb", "NVIDIA B200", Bytes{182631 * kMiB}, Bytes{180 * kGiB},
       "torch get_device_properties: total_memory=182631MB (public printouts; another shows 182642MB)"},
  };
  return catalog;
}

Expected<GpuSpec> find_gpu(std::string_view name) {
  const auto& catalog = gpu_catalog();
  for (const auto& g : catalog)
    if (g.name == name) return g;
  std::vector<std::string_view> names;
  for (const auto& g : catalog) names.emplace_back(g.name);
  const auto guess = closest_name(name, names);
  return Error{fmt::format("--gpu '{}': unknown GPU; {}known: {}; or give --gpu-memory 80GiB", name,
                           guess ? fmt::format("did you mean '{}'? ", *guess) : "", fmt::join(names, ", "))};
}

}  // namespace actmem
