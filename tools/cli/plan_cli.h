// `actmem plan` (which layout fits N GPUs and runs fastest) and the fit verdict that `estimate
// --gpu` adds: capacity, allowances, headroom, FITS / DOES NOT FIT, and what to change.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "actmem/actmem.h"

namespace CLI {
class App;
}

namespace actmem::cli {

/// The GPU, the allowances and the machine's speeds, as typed (shared by estimate and plan).
struct FitFlags {
  std::string gpu;
  std::string gpu_memory;
  std::string cuda_context;    // default kDefaultCudaContextBytes
  std::string nccl_per_group;  // default kDefaultNcclBytesPerGroup
  std::optional<double> fragmentation;
  int64_t gpus_per_node = 8;
  std::optional<double> inter_node_gbps;  // GB/s per GPU, one direction
  std::optional<double> compute_efficiency;
  std::optional<double> collective_efficiency;
  bool given() const { return !gpu.empty() || !gpu_memory.empty(); }
};
void add_fit_flags(CLI::App* cmd, FitFlags& f);

/// The parsed machine: capacity, allowances and (when the GPU is from the catalog) its speeds.
struct Machine {
  Bytes capacity{0};
  std::string gpu_name;  // empty for --gpu-memory
  Allowances allowances;
  Cluster cluster;
  bool has_speeds = false;
};
Expected<Machine> to_machine(const FitFlags& f);

/// `estimate --gpu`: the estimate's table (or JSON) with the fit verdict added, and, when it does
/// not fit, what to change. Returns the exit code (0; 2 on bad flags).
int print_with_fit(const PreparedModel& model, const Report& report, const FitFlags& f, bool json,
                   const std::string& rendered);

/// Registers `plan` on `app`; the runner prints and returns the exit code (2: bad input or nothing fits).
std::function<int()> add_plan_command(CLI::App& app);

}  // namespace actmem::cli
