// `actmem allocator`: a recorded allocation trace (tools/snapshot_to_trace.py writes one from a
// memory snapshot) replayed through the model of PyTorch's caching allocator
// (src/runtime/caching_allocator.h), under the PYTORCH_CUDA_ALLOC_CONF given: peak allocated and
// reserved, the segments it asked the driver for, where it runs out of memory on a GPU of a size.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace actmem::cli {

std::function<int()> add_allocator_command(CLI::App& app);

}  // namespace actmem::cli
