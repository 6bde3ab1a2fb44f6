// GPUs by name (`--gpu h100-80gb`) with the memory a process can address on them: the total that
// cudaMemGetInfo / torch.cuda.mem_get_info reports (what vLLM calls total_gpu_memory), not the
// vendor's marketing figure. Both are kept, with where the reported total was seen.
#pragma once

#include <string_view>
#include <vector>

#include "bytes.h"
#include "expected.h"

namespace actmem {

struct GpuSpec {
  std::string_view name;         // "h100-80gb"
  std::string_view description;  // "NVIDIA H100 80GB HBM3 (SXM5)"
  Bytes total;                   // as cudaMemGetInfo reports it (driver- and ECC-dependent, ±0.1%)
  Bytes vendor;                  // the datasheet capacity: its "80GB" of HBM/GDDR is 80 GiB
  std::string_view source;       // where `total` was observed
};

const std::vector<GpuSpec>& gpu_catalog();

/// Example: find_gpu("h100-80gb")->total == Bytes{85045477376}. Unknown names get "did you mean ...?".
Expected<GpuSpec> find_gpu(std::string_view name);

}  // namespace actmem
