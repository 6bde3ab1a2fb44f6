// GPUs by name (`--gpu h100-80gb`) with the memory a process can address on them: the total that
// cudaMemGetInfo / torch.cuda.mem_get_info reports (what vLLM calls total_gpu_memory), not the
// vendor's marketing figure. Both are kept, with where the reported total was seen. Each GPU also
// carries the datasheet speeds a time model needs (tensor peak, memory bandwidth, GPU-to-GPU link),
// each with its source.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "util/bytes.h"
#include "actmem/expected.h"

namespace actmem {

struct GpuSpec {
  std::string_view name;         // "h100-80gb"
  std::string_view description;  // "NVIDIA H100 80GB HBM3 (SXM5)"
  Bytes total;                   // as cudaMemGetInfo reports it (driver- and ECC-dependent, ±0.1%)
  Bytes vendor;                  // the datasheet capacity: its "80GB" of HBM/GDDR is 80 GiB
  int64_t sms = 0;                // streaming multiprocessors (AMD: compute units), as multi_processor_count
  std::string_view sms_source;    // vLLM sizes its sampler's scratch buffer by it
  std::string_view source;       // where `total` was observed, or the rule it was estimated by
  // No public printout of the runtime's total is known: `total` is `vendor` less the reserve seen on
  // a sibling GPU (see kEstimateRule* in gpu_catalog.cc); `source` says which rule. Treat it as ±1%.
  bool total_is_estimate = false;

  // Speeds, as the vendor quotes them (peaks, not what a kernel reaches). 0 means "none".
  double bf16_flops = 0;         // dense (no 2:4 sparsity) bf16/fp16 tensor peak, FLOP/s, fp32 accumulate
  double fp8_flops = 0;          // dense fp8 tensor peak, FLOP/s; 0 where the GPU has no fp8
  std::string_view flops_source;
  double memory_bandwidth = 0;   // HBM/GDDR peak, bytes/s
  std::string_view memory_bandwidth_source;
  double link_bandwidth = 0;     // to the other GPUs of the node, per GPU, one direction, bytes/s
  std::string_view link;         // what link that is ("NVLink 4 via NVSwitch", "PCIe Gen4 x16")
  std::string_view link_source;
};

/// Every GPU the catalog knows, in a fixed order.
const std::vector<GpuSpec>& gpu_catalog();

/// Example: find_gpu("h100-80gb")->total == Bytes{85045477376}. Unknown names get "did you mean ...?".
Expected<GpuSpec> find_gpu(std::string_view name);

}  // namespace actmem
