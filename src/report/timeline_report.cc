// The step's timeline in the estimate (timeline_report.h).
#include "report/timeline_report.h"

#include <fmt/format.h>

namespace actmem::detail {

Expected<TimelineMemory> report_timeline_memory(const Report& report) {
  if (!report.source.valid())
    return Error{ErrorKind::kInvalid, "model", "the report has no prepared model to lay its step out from"};
  auto tl = step_timeline(report.source, report.layout);
  if (!tl) return tl.error();
  return replay_timeline(*tl, report.workload.alloc_conf);
}

void add_timeline_json(const Report& report, nlohmann::json& memory) {
  auto tm = report_timeline_memory(report);
  if (!tm) return;
  const TimelineMemory& m = *tm;
  memory["reserved_bytes"] = m.reserved_peak;
  memory["timeline"] = {{"events", m.events},
          {"allocated_peak_bytes", m.allocated_peak},
          {"rounded_peak_bytes", m.rounded_peak},
          {"reserved_peak_bytes", m.reserved_peak},
          {"segments", m.segments},
          {"alloc_conf", report.workload.alloc_conf},
          {"notes", m.notes},
          {"counts", "the tensors the estimate counts; op outputs nothing saves are not events yet, so a real "
                     "run reserves more"}};
}

std::string add_reserved_row(const Report& report, TextTable& table) {
  auto tm = report_timeline_memory(report);
  if (!tm) return "";
  const Bytes reserved{tm->reserved_peak};
  table.add_row({{"Reserved (caching allocator)"}, {fmt::format("{:.2f}", reserved.gib()), true},
                 {group_digits(reserved.count()), true}, {"model"}});
  const std::string& conf = report.workload.alloc_conf;
  return fmt::format("reserved: the step's {} allocations and frees (--timeline FILE writes them) replayed through "
                     "c10's caching allocator ({}); op outputs nothing saves are not in them yet, so a real run "
                     "reserves more",
                     group_digits(tm->events), conf.empty() ? "PyTorch's defaults" : "PYTORCH_CUDA_ALLOC_CONF " + conf);
}

}  // namespace actmem::detail
