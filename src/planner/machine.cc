#include "planner/machine.h"

#include <array>

#include <fmt/format.h>

#include "report/render.h"  // report_json()
#include "serve/gpu_catalog.h"  // find_gpu()

namespace actmem {

namespace {

Expected<Bytes> size_flag(const char* flag, const std::string& text, Bytes fallback) {
  if (text.empty()) return fallback;
  if (text == "0") return Bytes{0};  // an allowance switched off, as --reserve 0
  auto b = parse_size(text);
  if (!b) return Error{ErrorKind::kInvalid, "", fmt::format("{} {}: {}", flag, text, b.error().message)};
  if (*b < Bytes{0}) return Error{ErrorKind::kInvalid, "", fmt::format("{} {}: must not be negative", flag, text)};
  return *b;
}

/// A size option: text as typed ("80GiB"), or a number of bytes.
Expected<std::string> size_text(std::string_view name, const OptionValue& v) {
  if (const auto* n = std::get_if<int64_t>(&v)) return std::to_string(*n);
  return option_text(name, v);
}

using Setter = Expected<void> (*)(MachineOptions&, std::string_view, const OptionValue&);
using Getter = std::string (*)(const MachineOptions&);
struct Row {
  OptionInfo info;
  Setter set;
  Getter get;  // the value as help shows it; empty when unset (the catalog's, or the allowance's default)
};

#define ACTMEM_SET(convert, field)                                                   \
  [](MachineOptions& o, std::string_view n, const OptionValue& v) -> Expected<void> { \
    auto x = convert(n, v);                                                          \
    if (!x) return x.error();                                                        \
    o.field = *x;                                                                    \
    return {};                                                                       \
  },                                                                                 \
      [](const MachineOptions& o) { return default_shown(o.field); }

const std::array kRows{
    Row{{"gpu", OptionKind::kText, "GPU from the catalog (e.g. h100-80gb): capacity, allowances, fit verdict"},
        ACTMEM_SET(option_text, gpu)},
    Row{{"gpu_memory", OptionKind::kSize, "per-GPU capacity, e.g. 80GiB (overrides the catalog's)"},
        ACTMEM_SET(size_text, gpu_memory)},
    Row{{"cuda_context", OptionKind::kSize, "CUDA context allowance (default 512MiB)"}, ACTMEM_SET(size_text, cuda_context)},
    Row{{"nccl_per_group", OptionKind::kSize, "NCCL buffers per communicator (default 256MiB)"},
        ACTMEM_SET(size_text, nccl_per_group)},
    Row{{"fragmentation", OptionKind::kReal, "allocator fragmentation, fraction of the peak (default 0.05)"},
        ACTMEM_SET(option_real, fragmentation)},
    Row{{"gpus_per_node", OptionKind::kCount, "GPUs per node (NVLink domain)"}, ACTMEM_SET(option_count, gpus_per_node)},
    Row{{"inter_node_bandwidth", OptionKind::kReal, "GB/s per GPU, one direction, between nodes (default 50: 8x400 Gb/s per 8-GPU node)"},
        ACTMEM_SET(option_real, inter_node_gbps)},
    Row{{"compute_efficiency", OptionKind::kReal, "fraction of the bf16 peak reached (default 0.55)"},
        ACTMEM_SET(option_real, compute_efficiency)},
    Row{{"collective_efficiency", OptionKind::kReal, "fraction of link bandwidth NCCL reaches (default 0.8)"},
        ACTMEM_SET(option_real, collective_efficiency)},
};

#undef ACTMEM_SET

const std::array<OptionInfo, kRows.size()> kInfos = [] {
  std::array<OptionInfo, kRows.size()> infos{};
  for (std::size_t i = 0; i < kRows.size(); ++i) infos[i] = kRows[i].info;
  return infos;
}();

}  // namespace

std::span<const OptionInfo> machine_options() { return kInfos; }

std::string machine_option_text(const MachineOptions& o, std::string_view name) {
  for (const auto& r : kRows)
    if (r.info.name == name) return r.get(o);
  return "";
}

std::string machine_option_default(std::string_view name) { return machine_option_text(MachineOptions{}, name); }

Expected<void> set_machine_option(MachineOptions& o, std::string_view name, const OptionValue& value) {
  for (const auto& r : kRows)
    if (r.info.name == name) return r.set(o, name, value);
  return Error{ErrorKind::kUnknownName, std::string(name), fmt::format("unknown machine option {}", name)};
}

Expected<Machine> to_machine(const MachineOptions& f) {
  Machine m;
  if (!f.gpu.empty()) {
    auto gpu = find_gpu(f.gpu);
    if (!gpu) return gpu.error();
    m.gpu_name = std::string(gpu->name);
    m.capacity = gpu->total;
    m.cluster = cluster_for(*gpu, f.gpus_per_node);
    m.has_speeds = gpu->bf16_flops > 0 && gpu->link_bandwidth > 0;
  }
  m.cluster.gpus_per_node = f.gpus_per_node;
  if (f.gpus_per_node < 1 || f.gpus_per_node > 1024)
    return Error{ErrorKind::kInvalid, "gpus_per_node", fmt::format("@gpus_per_node {}: use 1..1024", f.gpus_per_node)};
  if (!f.gpu_memory.empty()) {
    auto b = parse_size(f.gpu_memory);
    if (!b) return Error{ErrorKind::kInvalid, "gpu_memory", "@gpu_memory " + f.gpu_memory + ": " + b.error().message};
    if (*b <= Bytes{0}) return Error{ErrorKind::kInvalid, "gpu_memory", "@gpu_memory must be positive, e.g. 80GiB"};
    m.capacity = *b;
  }
  auto ctx = size_flag("--cuda-context", f.cuda_context, Bytes{kDefaultCudaContextBytes});
  if (!ctx) return ctx.error();
  auto nccl = size_flag("--nccl-per-group", f.nccl_per_group, Bytes{kDefaultNcclBytesPerGroup});
  if (!nccl) return nccl.error();
  m.allowances.cuda_context = *ctx;
  m.allowances.nccl_per_group = *nccl;
  if (f.fragmentation) {
    if (!(*f.fragmentation >= 0 && *f.fragmentation < 1))
      return Error{ErrorKind::kInvalid, "fragmentation",
                   fmt::format("@fragmentation {}: a fraction of the peak in [0, 1), e.g. 0.05", *f.fragmentation)};
    m.allowances.fragmentation = *f.fragmentation;
  }
  const struct {
    const char* field;
    const std::optional<double>& value;
    double* into;
    double scale, hi;
  } speeds[] = {
      {"inter_node_bandwidth", f.inter_node_gbps, &m.cluster.inter_node_bandwidth, 1e9, 1e6},
      {"compute_efficiency", f.compute_efficiency, &m.cluster.compute_efficiency, 1, 1},
      {"collective_efficiency", f.collective_efficiency, &m.cluster.collective_efficiency, 1, 1},
  };
  for (const auto& s : speeds)
    if (s.value) {
      if (!(*s.value > 0 && *s.value <= s.hi))
        return Error{ErrorKind::kInvalid, s.field, fmt::format("@{} {}: use a value in (0, {}]", s.field, *s.value, s.hi)};
      *s.into = *s.value * s.scale;
    }
  return m;
}

nlohmann::json fit_report_json(const PreparedModel& model, const Report& report, const Machine& m) {
  auto j = report_json(report);
  add_fit_json(j, model, report, m.gpu_name, m.capacity, m.allowances, m.cluster);
  return j;
}

}  // namespace actmem
