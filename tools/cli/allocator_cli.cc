#include "allocator_cli.h"

#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"                      // report_error


namespace actmem::cli {

namespace {

struct AllocatorFlags {
  std::string trace, alloc_conf, capacity, gpu_total;
  double memory_fraction = 0;
  bool json = false;
};

const char* kind_name(SegmentEvent::Kind k) {
  switch (k) {
    case SegmentEvent::kAlloc: return "segment_alloc";
    case SegmentEvent::kFree: return "segment_free";
    case SegmentEvent::kMap: return "segment_map";
    case SegmentEvent::kUnmap: return "segment_unmap";
  }
  return "?";
}

Expected<int64_t> size_flag(const std::string& text, const char* flag) {
  if (text.empty()) return int64_t{0};
  auto b = parse_size(text);
  if (!b || b->count() <= 0)
    return Error{ErrorKind::kInvalid, "", fmt::format("{} '{}' is not a size (e.g. 80GiB)", flag, text)};
  return b->count();
}

nlohmann::json result_json(const AllocatorFlags& f, const AllocatorTrace& t, const ReplayResult& r) {
  const AllocatorStats& s = r.stats;
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : r.segment_events) events.push_back({kind_name(e.event.kind), e.event.size, e.at});
  nlohmann::json segments = nlohmann::json::array();
  for (const auto& seg : r.final_segments) {
    nlohmann::json blocks = nlohmann::json::array();
    int64_t address = seg.address;
    for (const auto& b : seg.blocks) {
      blocks.push_back(
          {{"address", address}, {"size", b.size}, {"requested", b.requested}, {"allocated", b.allocated}});
      address += b.size;
    }
    segments.push_back({{"address", seg.address}, {"size", seg.size}, {"pool", seg.large ? "large" : "small"},
                        {"stream", seg.stream}, {"expandable", seg.expandable}, {"blocks", blocks}});
  }
  static constexpr const char* kTimelineNames[] = {"alloc", "free", "segment_alloc", "segment_free", "segment_map",
                                                   "segment_unmap"};
  nlohmann::json timeline = nlohmann::json::array();
  for (const auto& e : r.timeline) {  // a tensor's name (the trace's fifth entry) fifth when it has one
    nlohmann::json x = {kTimelineNames[e.kind], e.address, e.size, e.stream};
    if (e.event >= 0 && !t.events[static_cast<std::size_t>(e.event)].name.empty())
      x.push_back(t.events[static_cast<std::size_t>(e.event)].name);
    timeline.push_back(std::move(x));
  }
  return {{"trace", {{"file", f.trace}, {"source", t.source}, {"events", t.events.size()},
                     {"segments_at_start", t.segments.size()}}},
          {"alloc_conf", f.alloc_conf},
          {"allocated_peak_bytes", s.allocated_peak},
          {"requested_peak_bytes", s.requested_peak},
          {"reserved_peak_bytes", s.reserved_peak},
          {"reserved_at_allocated_peak_bytes", r.reserved_at_allocated_peak},
          {"reserved_end_bytes", s.reserved},
          {"device_allocs", s.device_allocs},
          {"device_frees", s.device_frees},
          {"alloc_retries", s.alloc_retries},
          {"oom_at_event", r.oom_at},
          {"segment_events", events},
          {"segments_end", segments},
          {"timeline", timeline}};
}

int run_allocator(const AllocatorFlags& f) {
  std::ifstream in(f.trace, std::ios::binary);
  if (!in) return report_error(Error{fmt::format("--trace {}: cannot read the file", f.trace)});
  std::stringstream text;
  text << in.rdbuf();
  auto trace = parse_allocator_trace(text.str());
  if (!trace) return report_error(trace.error());
  auto config = AllocatorConfig::parse(f.alloc_conf);
  if (!config) return report_error(config.error());
  auto capacity = size_flag(f.capacity, "--capacity");
  if (!capacity) return report_error(capacity.error());
  auto total = size_flag(f.gpu_total, "--gpu-total");
  if (!total) return report_error(total.error());
  if (f.memory_fraction < 0 || f.memory_fraction > 1)
    return report_error(Error{fmt::format("--memory-fraction {}: give a fraction in (0, 1]", f.memory_fraction)});
  if (f.memory_fraction > 0 && *total == 0)
    return report_error(Error{"--memory-fraction is a fraction of --gpu-total; give --gpu-total too"});
  const AllocatorDevice device{*capacity, *total > 0 ? *total : *capacity, f.memory_fraction};
  auto r = replay_trace(*trace, *config, device);
  if (!r) return report_error(r.error());
  if (f.json) {
    fmt::print("{}\n", result_json(f, *trace, *r).dump(2));
    return 0;
  }
  const AllocatorStats& s = r->stats;
  fmt::print("trace {}: {} events, {} segments at the start\n", f.trace, trace->events.size(), trace->segments.size());
  fmt::print("PYTORCH_CUDA_ALLOC_CONF {}\n", f.alloc_conf.empty() ? "(not set)" : f.alloc_conf);
  fmt::print("  peak allocated (max_memory_allocated)  {:>12}\n", format_binary(Bytes{s.allocated_peak}));
  fmt::print("  peak reserved (max_memory_reserved)    {:>12}\n", format_binary(Bytes{s.reserved_peak}));
  fmt::print("  reserved when allocated peaks          {:>12}\n", format_binary(Bytes{r->reserved_at_allocated_peak}));
  fmt::print("  driver calls: {} allocations, {} frees; {} allocation retries\n", s.device_allocs, s.device_frees,
             s.alloc_retries);
  if (r->oom_at >= 0)
    fmt::print("  out of memory at event {} ({} requested) with {} reserved\n", r->oom_at,
               format_binary(Bytes{trace->events[static_cast<std::size_t>(r->oom_at)].size}),
               format_binary(Bytes{s.reserved}));
  return 0;
}

}  // namespace

std::function<int()> add_allocator_command(CLI::App& app) {
  auto f = std::make_shared<AllocatorFlags>();
  auto* cmd = app.add_subcommand("allocator", "Replay an allocation trace through PyTorch's caching allocator model");
  cmd->add_option("--trace", f->trace, "trace file (tools/snapshot_to_trace.py makes one from a snapshot)")
      ->required();
  cmd->add_option("--alloc-conf", f->alloc_conf, "PYTORCH_CUDA_ALLOC_CONF to replay under (default: not set)");
  cmd->add_option("--capacity", f->capacity, "device memory the allocator can get, e.g. 79GiB (default: no limit)");
  cmd->add_option("--gpu-total", f->gpu_total, "the GPU's total memory (memory fraction, expandable segments)");
  cmd->add_option("--memory-fraction", f->memory_fraction, "torch.cuda.set_per_process_memory_fraction");
  cmd->add_flag("--json", f->json, "machine-readable output");
  return [f] { return run_allocator(*f); };
}

}  // namespace actmem::cli
