#include "serve/gpu_catalog.h"

#include <iterator>

#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "util/spellcheck.h"

namespace actmem {

namespace {
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr double kT = 1e12;  // TFLOP/s, TB/s
constexpr double kG = 1e9;   // GB/s

// Estimated totals (GpuSpec::total_is_estimate), for GPUs with no public printout of what the runtime
// reports. Each rule comes from the measured entries below, and the GPU's `source` names the rule.
//
// NVIDIA HBM parts: the runtime keeps back 0.85-1.55% of the datasheet capacity (a100-80gb 0.85%,
// h200 0.85%, b200 0.92%, h100 0.99%, a100-40gb 1.03%, h100-pcie 1.11%, a100-pcie-40gb 1.55%), so the
// estimate is the capacity less 1%, in whole MiB: within about ±0.5% of what a real device prints.
constexpr Bytes nvidia_hbm_estimate(int64_t vendor_gib) { return Bytes{vendor_gib * 1024 * 99 / 100 * kMiB}; }
// AMD Instinct: ROCm reports the capacity less 16 MiB on both measured parts (mi300x, mi250x).
constexpr Bytes amd_estimate(int64_t vendor_gib) { return Bytes{vendor_gib * kGiB - 16 * kMiB}; }

constexpr std::string_view kNvidiaHbmRule =
    "ESTIMATE (no public printout known): datasheet capacity less 1% (the reserve the measured NVIDIA HBM "
    "entries show is 0.85-1.55%), in whole MiB";
constexpr std::string_view kAmdRule =
    "ESTIMATE (no public printout known): capacity less 16 MiB, as ROCm reports on the MI300X (196592 of "
    "196608 MiB) and an MI250X GCD (65520 of 65536 MiB)";

// Sources shared by several entries.
constexpr std::string_view kA100Flops =
    "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): BF16/FP16 Tensor 312 TFLOPS, 624 with "
    "sparsity; no FP8 (Ampere)";
constexpr std::string_view kA100SxmLink =
    "NVIDIA A100 datasheet: NVLink 600 GB/s (12 NVLink 3 links, bidirectional total) -> 300 GB/s per direction";
constexpr std::string_view kA100PcieLink =
    "NVIDIA A100 datasheet: PCIe Gen4 64 GB/s (bidirectional) -> 32 GB/s per direction; an optional NVLink "
    "bridge joins pairs only (600 GB/s bidirectional)";
constexpr std::string_view kH100SxmFlops =
    "NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5): BF16/FP16 989.4 dense / 1978.9 sparse, "
    "FP8 1978.9 dense / 3957.8 sparse TFLOPS; H100 datasheet rounds to 1,979* / 3,958* (*with sparsity)";
constexpr std::string_view kNvLink4 =
    "NVLink 900 GB/s (18 NVLink 4 links, bidirectional total) -> 450 GB/s per direction";
}  // namespace

// Totals are what the CUDA/HIP runtime reports for the whole device (torch prints it in whole MiB as
// total_memory=...MB). They move by a few tens of MiB with the driver and ECC setting, so a
// measurement of the actual machine (`--gpu-memory`) beats the catalog when exactness matters.
//
// Speeds are vendor peaks. NVIDIA datasheets print tensor FLOP/s "with sparsity" (2:4 structured);
// the dense figure kept here is half of it. GeForce cards (RTX 4090/5090, and the A10G, a GA102 part)
// run bf16/fp16 and fp8 tensor math with fp32 accumulate, what training and cuBLAS use, at half the
// rate of fp16 accumulate: the fp32-accumulate figure is kept. The link is the GPU-to-GPU bandwidth
// inside one node, per GPU and per direction (vendors quote the bidirectional sum: half of it).
namespace {

// The catalog, in a fixed order (find_gpu's guesses depend on it).
const GpuSpec kGpus[] = {
      {.name = "a100-40gb",
       .description = "NVIDIA A100-SXM4-40GB",
       .total = Bytes{40536 * kMiB},
       .vendor = Bytes{40 * kGiB},
       .sms = 108,
       .sms_source = "NVIDIA A100 whitepaper: 108 SMs",
       .source = "torch/paddle get_device_properties: total_memory=40536MB (PaddlePaddle get_device_properties "
                 "docs); the PCIe card reports 40326MB",
       .bf16_flops = 312 * kT,
       .flops_source = kA100Flops,
       .memory_bandwidth = 1555 * kG,
       .memory_bandwidth_source = "NVIDIA A100 datasheet: A100 40GB SXM 1,555 GB/s (HBM2)",
       .link_bandwidth = 300 * kG,
       .link = "NVLink 3 via NVSwitch (HGX A100)",
       .link_source = kA100SxmLink},
      {.name = "a100-80gb",
       .description = "NVIDIA A100-SXM4-80GB",
       .total = Bytes{85167243264},
       .vendor = Bytes{80 * kGiB},
       .sms = 108,
       .sms_source = "NVIDIA A100 whitepaper: 108 SMs",
       .source = "cudaGetDeviceProperties totalGlobalMem 81221.8125 MiB (public deviceQuery printout)",
       .bf16_flops = 312 * kT,
       .flops_source = kA100Flops,
       .memory_bandwidth = 2039 * kG,
       .memory_bandwidth_source = "NVIDIA A100 datasheet: A100 80GB SXM 2,039 GB/s (HBM2e)",
       .link_bandwidth = 300 * kG,
       .link = "NVLink 3 via NVSwitch (HGX A100)",
       .link_source = kA100SxmLink},
      {.name = "h100-80gb",
       .description = "NVIDIA H100 80GB HBM3 (SXM5)",
       .total = Bytes{85045477376},
       .vendor = Bytes{80 * kGiB},
       .sms = 132,
       .sms_source = "NVIDIA H100 whitepaper: H100 SXM5 132 SMs",
       .source = "deviceQuery: 81106 MBytes (85045477376 bytes), thamada/nvidia-smi nvsim/H100SXMx8_deviceQuery.py; "
                 "torch prints 81082-81090MB on other drivers, vLLM logs total_gpu_memory 79.22GiB (vllm PR #10511)",
       .bf16_flops = 989.4 * kT,
       .fp8_flops = 1978.9 * kT,
       .flops_source = kH100SxmFlops,
       .memory_bandwidth = 3.35 * kT,
       .memory_bandwidth_source = "NVIDIA H100 datasheet: H100 SXM 3.35 TB/s (HBM3)",
       .link_bandwidth = 450 * kG,
       .link = "NVLink 4 via NVSwitch (HGX H100)",
       .link_source = "NVIDIA H100 datasheet: H100 SXM NVLink 900 GB/s (18 NVLink 4 links, bidirectional total) "
                      "-> 450 GB/s per direction"},
      {.name = "h200-141gb",
       .description = "NVIDIA H200 (SXM)",
       .total = Bytes{143156 * kMiB},
       .vendor = Bytes{141 * kGiB},
       .sms = 132,
       .sms_source = "NVIDIA H200: the H100 SXM5's GH100 with 132 SMs",
       .source = "torch get_device_properties: total_memory=143156MB (public Modal/vLLM example printout)",
       .bf16_flops = 989.4 * kT,
       .fp8_flops = 1978.9 * kT,
       .flops_source = "NVIDIA H200 datasheet (H200 SXM): BF16/FP16 1,979*, FP8 3,958* TFLOPS (*with sparsity), "
                       "the H100 SXM figures; dense 989.4 / 1978.9 as in the H100 whitepaper",
       .memory_bandwidth = 4.8 * kT,
       .memory_bandwidth_source = "NVIDIA H200 datasheet (H200 SXM): 141GB, 4.8 TB/s (HBM3e)",
       .link_bandwidth = 450 * kG,
       .link = "NVLink 4 via NVSwitch (HGX H200)",
       .link_source = "NVIDIA H200 datasheet (H200 SXM): NVLink 900 GB/s (bidirectional) -> 450 GB/s per "
                      "direction"},
      {.name = "l40s-48gb",
       .description = "NVIDIA L40S",
       .total = Bytes{45589 * kMiB},
       .vendor = Bytes{48 * kGiB},
       .sms = 142,
       .sms_source = "NVIDIA L40S datasheet: 142 RT cores / SMs (AD102)",
       .source = "torch get_device_properties: total_memory=45589MB (public printout)",
       .bf16_flops = 362.05 * kT,
       .fp8_flops = 733 * kT,
       .flops_source = "NVIDIA L40S datasheet: BF16/FP16 Tensor 362.05 | 733*, FP8 733 | 1,466* TFLOPS (dense | "
                       "*with sparsity)",
       .memory_bandwidth = 864 * kG,
       .memory_bandwidth_source = "NVIDIA L40S datasheet: 48GB GDDR6 with ECC, 864 GB/s",
       .link_bandwidth = 32 * kG,
       .link = "PCIe Gen4 x16 (no NVLink)",
       .link_source = "NVIDIA L40S datasheet: PCIe Gen4 x16 64 GB/s bidirectional -> 32 GB/s per direction"},
      {.name = "rtx-4090-24gb",
       .description = "NVIDIA GeForce RTX 4090",
       .total = Bytes{24563 * kMiB},
       .vendor = Bytes{24 * kGiB},
       .sms = 128,
       .sms_source = "NVIDIA Ada whitepaper: RTX 4090 128 SMs",
       .source = "torch get_device_properties: total_memory=24563MB (public printout); nvidia-smi shows 24564MiB "
                 "(vllm issue #7768)",
       .bf16_flops = 165.2 * kT,
       .fp8_flops = 330.3 * kT,
       .flops_source = "NVIDIA Ada Lovelace GPU architecture whitepaper (RTX 4090): BF16/FP16 Tensor with FP32 "
                       "accumulate 165.2 / 330.4 sparse, FP8 with FP32 accumulate 330.3 / 660.6 sparse TFLOPS (FP16 "
                       "accumulate doubles them)",
       .memory_bandwidth = 1008 * kG,
       .memory_bandwidth_source = "NVIDIA Ada Lovelace whitepaper (RTX 4090): 24GB GDDR6X, 1,008 GB/s",
       .link_bandwidth = 32 * kG,
       .link = "PCIe Gen4 x16 (no NVLink; GeForce drivers disable peer-to-peer, so GPU-to-GPU copies go through "
               "host memory and reach less)",
       .link_source = "PCIe Gen4 x16: 32 GB/s per direction"},
      {.name = "mi300x-192gb",
       .description = "AMD Instinct MI300X",
       .total = Bytes{196592 * kMiB},
       .vendor = Bytes{192 * kGiB},
       .sms = 304,
       .sms_source = "AMD Instinct MI300X data sheet: 304 compute units",
       .source = "torch (ROCm) get_device_properties: total_memory=196592MB (ROCm/ROCm issue #4203)",
       .bf16_flops = 1307.4 * kT,
       .fp8_flops = 2614.9 * kT,
       .flops_source = "AMD Instinct MI300X data sheet: peak BF16/FP16 1307.4 TFLOPS (2614.9 with sparsity), FP8 "
                       "2614.9 TFLOPS (5229.8 with sparsity)",
       .memory_bandwidth = 5.3 * kT,
       .memory_bandwidth_source = "AMD Instinct MI300X data sheet: 192GB HBM3, 5.3 TB/s",
       .link_bandwidth = 448 * kG,
       .link = "Infinity Fabric, 7 links, full mesh of 8 (MI300X platform)",
       .link_source = "AMD Instinct MI300X data sheet: 7 Infinity Fabric links, 128 GB/s peak each = 896 GB/s "
                      "(bidirectional) -> 448 GB/s per direction"},
      {.name = "b200-180gb",
       .description = "NVIDIA B200",
       .total = Bytes{182631 * kMiB},
       .vendor = Bytes{180 * kGiB},
       .sms = 148,
       .sms_source = "NVIDIA Blackwell: B200 148 SMs (torch multi_processor_count printouts)",
       .source = "torch get_device_properties: total_memory=182631MB (public printouts; another shows 182642MB)",
       .bf16_flops = 2250 * kT,
       .fp8_flops = 4500 * kT,
       .flops_source = "NVIDIA HGX B200 / DGX B200 datasheet (8 GPUs): FP16/BF16 36 PFLOPS*, FP8 72 PFLOPS* "
                       "(*with sparsity) -> per GPU 2.25 / 4.5 PFLOPS dense",
       .memory_bandwidth = 8.0 * kT,
       .memory_bandwidth_source = "NVIDIA HGX B200 datasheet: 1.44 TB HBM3e, 64 TB/s for 8 GPUs -> 8 TB/s per GPU "
                                  "(some later NVIDIA tables list 7.7 TB/s)",
       .link_bandwidth = 900 * kG,
       .link = "NVLink 5 via NVSwitch (HGX B200)",
       .link_source = "NVIDIA HGX B200 datasheet: NVLink 5 1.8 TB/s per GPU (18 links, bidirectional) -> 900 GB/s "
                      "per direction"},
      // Added after the first eight, so that a typo the first eight matched still gets the same guess.
      {.name = "a100-pcie-40gb",
       .description = "NVIDIA A100-PCIE-40GB",
       .total = Bytes{40326 * kMiB},
       .vendor = Bytes{40 * kGiB},
       .sms = 108,
       .sms_source = "NVIDIA A100 whitepaper: 108 SMs",
       .source = "torch get_device_properties: name='NVIDIA A100-PCIE-40GB', total_memory=40326MB (public "
                 "printout, torch 1.9)",
       .bf16_flops = 312 * kT,
       .flops_source = kA100Flops,
       .memory_bandwidth = 1555 * kG,
       .memory_bandwidth_source = "NVIDIA A100 datasheet: A100 40GB PCIe 1,555 GB/s (HBM2)",
       .link_bandwidth = 32 * kG,
       .link = "PCIe Gen4 x16 (NVLink bridge optional, pairs only)",
       .link_source = kA100PcieLink},
      {.name = "a100-pcie-80gb",
       .description = "NVIDIA A100 80GB PCIe",
       .total = nvidia_hbm_estimate(80),
       .vendor = Bytes{80 * kGiB},
       .sms = 108,
       .sms_source = "NVIDIA A100 whitepaper: 108 SMs",
       .source = kNvidiaHbmRule,
       .total_is_estimate = true,
       .bf16_flops = 312 * kT,
       .flops_source = kA100Flops,
       .memory_bandwidth = 1935 * kG,
       .memory_bandwidth_source = "NVIDIA A100 datasheet: A100 80GB PCIe 1,935 GB/s (HBM2e)",
       .link_bandwidth = 32 * kG,
       .link = "PCIe Gen4 x16 (NVLink bridge optional, pairs only)",
       .link_source = kA100PcieLink},
      {.name = "h100-pcie-80gb",
       .description = "NVIDIA H100 PCIe (80GB HBM2e)",
       .total = Bytes{81008 * kMiB},
       .vendor = Bytes{80 * kGiB},
       .sms = 114,
       .sms_source = "NVIDIA H100 whitepaper: H100 PCIe 114 SMs",
       .source = "torch get_device_properties: name='NVIDIA H100 PCIe', total_memory=81008MB (public printout)",
       .bf16_flops = 756.5 * kT,
       .fp8_flops = 1513 * kT,
       .flops_source = "NVIDIA H100 datasheet (2022, H100 PCIe column): BF16/FP16 1,513*, FP8 3,026* TFLOPS "
                       "(*with sparsity) -> 756.5 / 1513 dense",
       .memory_bandwidth = 2.0 * kT,
       .memory_bandwidth_source = "NVIDIA H100 datasheet (2022, H100 PCIe column): 2 TB/s (HBM2e)",
       .link_bandwidth = 64 * kG,
       .link = "PCIe Gen5 x16 (NVLink bridge optional, pairs only)",
       .link_source = "NVIDIA H100 datasheet (H100 PCIe): PCIe Gen5 128 GB/s (bidirectional) -> 64 GB/s per "
                      "direction; the optional NVLink bridge joins pairs only (600 GB/s bidirectional)"},
      {.name = "h100-nvl-94gb",
       .description = "NVIDIA H100 NVL (94GB HBM3, PCIe, NVLink-bridged pairs)",
       .total = nvidia_hbm_estimate(94),
       .vendor = Bytes{94 * kGiB},
       .sms = 132,
       .sms_source = "NVIDIA H100 NVL: 132 SMs (the SXM5's count)",
       .source = kNvidiaHbmRule,
       .total_is_estimate = true,
       .bf16_flops = 835.5 * kT,
       .fp8_flops = 1670.5 * kT,
       .flops_source = "NVIDIA H100 datasheet (H100 NVL column, per GPU): BF16/FP16 1,671*, FP8 3,341* TFLOPS "
                       "(*with sparsity) -> 835.5 / 1670.5 dense",
       .memory_bandwidth = 3.9 * kT,
       .memory_bandwidth_source = "NVIDIA H100 datasheet (H100 NVL column): 94GB, 3.9 TB/s (HBM3)",
       .link_bandwidth = 300 * kG,
       .link = "NVLink 4 bridge to its pair partner; other GPUs over PCIe Gen5 x16 (64 GB/s per direction)",
       .link_source = "NVIDIA H100 datasheet (H100 NVL): NVLink 600 GB/s (bidirectional) -> 300 GB/s per "
                      "direction; PCIe Gen5 128 GB/s"},
      {.name = "h800-80gb",
       .description = "NVIDIA H800 80GB HBM3 (SXM5, export variant of the H100 SXM)",
       .total = nvidia_hbm_estimate(80),
       .vendor = Bytes{80 * kGiB},
       .sms = 132,
       .sms_source = "H800 SXM5: the H100 SXM5's 132 SMs",
       .source = kNvidiaHbmRule,
       .total_is_estimate = true,
       .bf16_flops = 989.4 * kT,
       .fp8_flops = 1978.9 * kT,
       .flops_source = "NVIDIA H800 datasheet (H800 SXM): BF16/FP16 1,979*, FP8 3,958* TFLOPS (*with sparsity), "
                       "the H100 SXM figures; dense 989.4 / 1978.9 as in the H100 whitepaper",
       .memory_bandwidth = 3.35 * kT,
       .memory_bandwidth_source = "NVIDIA H800 datasheet (H800 SXM): 80GB, 3.35 TB/s (HBM3)",
       .link_bandwidth = 200 * kG,
       .link = "NVLink 4 via NVSwitch, cut to 400 GB/s (HGX H800)",
       .link_source = "NVIDIA H800 datasheet (H800 SXM): NVLink 400 GB/s (bidirectional) -> 200 GB/s per "
                      "direction"},
      {.name = "gh200-96gb",
       .description = "NVIDIA GH200 Grace Hopper Superchip, its H100 GPU with 96GB HBM3",
       .total = nvidia_hbm_estimate(96),
       .vendor = Bytes{96 * kGiB},
       .sms = 132,
       .sms_source = "NVIDIA GH200: its H100 with 132 SMs",
       .source = kNvidiaHbmRule,
       .total_is_estimate = true,
       .bf16_flops = 989.4 * kT,
       .fp8_flops = 1978.9 * kT,
       .flops_source = "NVIDIA GH200 Grace Hopper Superchip datasheet: BF16/FP16 1,979*, FP8 3,958* TFLOPS "
                       "(*with sparsity) -> 989.4 / 1978.9 dense (H100 whitepaper)",
       .memory_bandwidth = 4.0 * kT,
       .memory_bandwidth_source = "NVIDIA GH200 datasheet: 96GB HBM3, 4 TB/s (the 144GB HBM3e version: 4.9 TB/s)",
       .link_bandwidth = 450 * kG,
       .link = "NVLink 4 where superchips are NVLink-connected (DGX GH200, GH200 NVL32); a lone superchip has no "
               "GPU peer. NVLink-C2C (900 GB/s) is the CPU-GPU link, not counted",
       .link_source = "NVIDIA GH200 datasheet / Hopper GPU: 18 NVLink 4 links, 900 GB/s bidirectional -> 450 GB/s "
                      "per direction"},
      {.name = "gb200-186gb",
       .description = "NVIDIA GB200 Grace Blackwell Superchip, per Blackwell GPU (two per superchip)",
       .total = nvidia_hbm_estimate(186),
       .vendor = Bytes{186 * kGiB},
       .sms = 148,
       .sms_source = "NVIDIA GB200: each Blackwell GPU 148 SMs, as B200",
       .source = kNvidiaHbmRule,
       .total_is_estimate = true,
       .bf16_flops = 2500 * kT,
       .fp8_flops = 5000 * kT,
       .flops_source = "NVIDIA GB200 NVL72 datasheet (72 GPUs): FP16/BF16 360 PFLOPS*, FP8 720 PFLOPS* (*with "
                       "sparsity) -> per GPU 2.5 / 5 PFLOPS dense",
       .memory_bandwidth = 8.0 * kT,
       .memory_bandwidth_source = "NVIDIA GB200 NVL72 datasheet: 13.4 TB HBM3e, 576 TB/s for 72 GPUs -> 186 GB and "
                                  "8 TB/s per GPU (superchip: 372 GB, 16 TB/s)",
       .link_bandwidth = 900 * kG,
       .link = "NVLink 5 via NVLink Switch (the whole NVL72 rack is one NVLink domain)",
       .link_source = "NVIDIA GB200 NVL72 datasheet: NVLink 130 TB/s for 72 GPUs = 1.8 TB/s per GPU "
                      "(bidirectional) -> 900 GB/s per direction"},
      {.name = "mi250x-64gb",
       .description = "AMD Instinct MI250X, one GCD: the OAM module's 128GB is two 64GB devices, each its own "
                      "ROCm/torch device",
       .total = Bytes{65520 * kMiB},
       .vendor = Bytes{64 * kGiB},
       .sms = 110,
       .sms_source = "AMD Instinct MI250X: 220 compute units, 110 per GCD",
       .source = "torch (ROCm) get_device_properties: name='AMD Instinct MI250X', total_memory=65520MB, "
                 "multi_processor_count=110 (one GCD; public printout)",
       .bf16_flops = 191.5 * kT,
       .flops_source = "AMD Instinct MI250X data sheet: peak FP16/BF16 383 TFLOPS per module (no sparsity) -> "
                       "191.5 per GCD; no FP8 (CDNA 2)",
       .memory_bandwidth = 1.6384 * kT,
       .memory_bandwidth_source = "AMD Instinct MI250X data sheet: 128GB HBM2e, 3.2768 TB/s per module -> 1.6384 "
                                  "TB/s per GCD (ROCm MI250 microarchitecture doc: 1.6 TB/s per GCD)",
       .link_bandwidth = 200 * kG,
       .link = "Infinity Fabric (4 external links per GCD; the two GCDs of a module share 4 more)",
       .link_source = "AMD Instinct MI250X data sheet: 8 Infinity Fabric links, 100 GB/s peak each (bidirectional) "
                      "per module; ROCm MI250 doc: 50 GB/s per link and direction -> 4 x 50 = 200 GB/s per GCD "
                      "per direction"},
      {.name = "mi325x-256gb",
       .description = "AMD Instinct MI325X",
       .total = amd_estimate(256),
       .vendor = Bytes{256 * kGiB},
       .sms = 304,
       .sms_source = "AMD Instinct MI325X data sheet: 304 compute units",
       .source = kAmdRule,
       .total_is_estimate = true,
       .bf16_flops = 1307.4 * kT,
       .fp8_flops = 2614.9 * kT,
       .flops_source = "AMD Instinct MI325X data sheet: peak BF16/FP16 1307.4 TFLOPS, FP8 2614.9 TFLOPS (dense; "
                       "twice with sparsity), the MI300X figures",
       .memory_bandwidth = 6.0 * kT,
       .memory_bandwidth_source = "AMD Instinct MI325X data sheet: 256GB HBM3E, 6 TB/s",
       .link_bandwidth = 448 * kG,
       .link = "Infinity Fabric, 7 links, full mesh of 8 (MI325X platform)",
       .link_source = "AMD Instinct MI325X data sheet: 7 Infinity Fabric links, 128 GB/s peak each = 896 GB/s "
                      "(bidirectional) -> 448 GB/s per direction"},
      {.name = "a10g-24gb",
       .description = "NVIDIA A10G (AWS G5 instances; GA102, 80 SMs)",
       .total = Bytes{22587 * kMiB},
       .vendor = Bytes{24 * kGiB},
       .sms = 80,
       .sms_source = "AWS A10G (GA102): 80 SMs",
       .source = "torch get_device_properties: name='NVIDIA A10G', total_memory=22587MB (TorchCodec CUDA decoding "
                 "tutorial printout; ECC on GDDR6 keeps back ~8%, as on the L40S)",
       .bf16_flops = 70 * kT,
       .flops_source = "no NVIDIA datasheet for the A10G: 70 TFLOPS BF16/FP16 tensor as in Baseten's 'NVIDIA A10 vs "
                       "A10G' spec table = 80 SMs x 1.71 GHz x 512 FLOP/clk (GA102 rate with fp32 accumulate); the "
                       "A10 datasheet's 125 TFLOPS does not apply; no FP8 (Ampere)",
       .memory_bandwidth = 600 * kG,
       .memory_bandwidth_source = "Baseten 'NVIDIA A10 vs A10G' and NVIDIA A10 datasheet: 24GB GDDR6, 600 GB/s",
       .link_bandwidth = 32 * kG,
       .link = "PCIe Gen4 x16 (no NVLink on G5)",
       .link_source = "PCIe Gen4 x16: 64 GB/s bidirectional (A10 datasheet) -> 32 GB/s per direction"},
      {.name = "rtx-5090-32gb",
       .description = "NVIDIA GeForce RTX 5090",
       .total = Bytes{32607 * kMiB},
       .vendor = Bytes{32 * kGiB},
       .sms = 170,
       .sms_source = "NVIDIA Blackwell GeForce: RTX 5090 170 SMs",
       .source = "ESTIMATE: the total NVML/nvidia-smi reports, 32607 MiB (public printouts); no torch/cudaMemGetInfo "
                 "printout known (on the RTX 4090 it is 1 MiB below NVML's)",
       .total_is_estimate = true,
       .bf16_flops = 209.5 * kT,
       .fp8_flops = 419 * kT,
       .flops_source = "NVIDIA RTX Blackwell GPU architecture whitepaper (RTX 5090): FP16/BF16 Tensor with FP32 "
                       "accumulate 209.5 / 419 sparse, FP8 with FP32 accumulate 419 / 838 sparse TFLOPS",
       .memory_bandwidth = 1792 * kG,
       .memory_bandwidth_source = "NVIDIA RTX 5090 specifications: 32GB GDDR7, 512-bit, 28 Gbps -> 1,792 GB/s",
       .link_bandwidth = 64 * kG,
       .link = "PCIe Gen5 x16 (no NVLink; GeForce drivers disable peer-to-peer)",
       .link_source = "PCIe Gen5 x16: 64 GB/s per direction"}
};

}  // namespace

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog(std::begin(kGpus), std::end(kGpus));
  return catalog;
}

Expected<GpuSpec> find_gpu(std::string_view name) {
  const auto& catalog = gpu_catalog();
  for (const auto& g : catalog)
    if (g.name == name) return g;
  std::vector<std::string_view> names;
  for (const auto& g : catalog) names.emplace_back(g.name);
  const auto guess = closest_name(name, names);
  return Error{ErrorKind::kUnknownName, "gpu",
               fmt::format("@gpu '{}': unknown GPU; {}known: {}; or give @gpu_memory 80GiB", name,
                           guess ? fmt::format("did you mean '{}'? ", *guess) : "", fmt::join(names, ", "))};
}

}  // namespace actmem
