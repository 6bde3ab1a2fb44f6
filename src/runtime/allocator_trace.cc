// Reading and replaying an allocation trace (allocator_trace.h).
#include "runtime/allocator_trace.h"

#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace actmem {

namespace {

Error trace_error(const std::string& what) {
  return Error{ErrorKind::kConfig, "trace",
               "@trace: " + what + " (tools/snapshot_to_trace.py writes traces, format actmem-allocator-trace-1)"};
}

constexpr int64_t kMaxSize = int64_t{1} << 50;     // 1 PiB: no tensor or segment is larger
constexpr int64_t kMaxAddress = int64_t{1} << 56;  // above any device address (48-bit virtual space)
constexpr int kMaxStream = 1 << 16;

/// obj[key] when it is a string, else `otherwise` (nlohmann's value() throws on another type).
std::string trace_text(const nlohmann::json& obj, const char* key, const char* otherwise) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : otherwise;
}

/// A JSON integer in [lo, hi].
bool in_range(const nlohmann::json& j, int64_t lo, int64_t hi) {
  if (j.is_number_unsigned())
    return j.get<uint64_t>() <= static_cast<uint64_t>(hi) && static_cast<int64_t>(j.get<uint64_t>()) >= lo;
  return j.is_number_integer() && j.get<int64_t>() >= lo && j.get<int64_t>() <= hi;
}

}  // namespace

Expected<AllocatorTrace> parse_allocator_trace(const std::string& text) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return trace_error(fmt::format("not JSON: {}", e.what()));
  }
  if (!root.is_object() || trace_text(root, "format", "") != "actmem-allocator-trace-1")
    return trace_error("\"format\" is not \"actmem-allocator-trace-1\"");
  AllocatorTrace t;
  t.source = trace_text(root, "source", "");
  const nlohmann::json segments = root.value("segments", nlohmann::json::array());
  if (!segments.is_array()) return trace_error("\"segments\" is not a list");
  for (std::size_t k = 0; k < segments.size(); ++k) {
    const auto& s = segments[k];
    const std::string where = fmt::format("segments[{}]", k);
    if (!s.is_object() || !in_range(s.value("address", nlohmann::json()), 1, kMaxAddress) || !s.contains("blocks") ||
        !s["blocks"].is_array() || !in_range(s.value("stream", nlohmann::json(0)), 0, kMaxStream))
      return trace_error(where + " needs an integer \"address\" (1 to 2^56), a list of \"blocks\" and a stream "
                                 "from 0 to 65536");
    SegmentInfo seg;
    seg.address = s["address"].get<int64_t>();
    seg.stream = s.value("stream", 0);
    const std::string pool = s.contains("pool") ? trace_text(s, "pool", "(not a string)") : "large";
    if (pool != "large" && pool != "small") return trace_error(where + ".pool is \"" + pool + "\", not large or small");
    seg.large = pool == "large";
    for (const auto& b : s["blocks"]) {
      if (!b.is_object() || !in_range(b.value("size", nlohmann::json()), 1, kMaxSize) ||
          !in_range(b.value("requested", nlohmann::json(0)), 0, kMaxSize) || seg.size > kMaxSize)
        return trace_error(where + " has a block without a \"size\" from 1 to 2^50 (or a segment above 1 PiB)");
      const bool allocated = b.contains("allocated") && b["allocated"].is_boolean() && b["allocated"].get<bool>();
      const int64_t requested = b.value("requested", nlohmann::json(0)).get<int64_t>();
      seg.blocks.push_back({b["size"].get<int64_t>(), requested, allocated});
      seg.size += seg.blocks.back().size;
    }
    t.segments.push_back(std::move(seg));
  }
  const nlohmann::json events = root.value("events", nlohmann::json::array());
  if (!events.is_array()) return trace_error("\"events\" is not a list");
  t.events.reserve(events.size());
  for (std::size_t k = 0; k < events.size(); ++k) {
    const auto& e = events[k];
    const std::string kind = e.is_array() && !e.empty() && e[0].is_string() ? e[0].get<std::string>() : "";
    TraceEvent ev;
    if (kind == "alloc" && e.size() >= 3 && in_range(e[1], 0, kMaxAddress) && in_range(e[2], 0, kMaxSize) &&
        (e.size() == 3 || in_range(e[3], 0, kMaxStream)) && (e.size() <= 4 || e[4].is_string())) {
      const int stream = e.size() > 3 ? e[3].get<int>() : 0;
      ev = {TraceEvent::kAlloc, e[1].get<int64_t>(), e[2].get<int64_t>(), stream,
            e.size() > 4 ? e[4].get<std::string>() : std::string()};
    } else if (kind == "free" && e.size() >= 2 && in_range(e[1], 0, kMaxAddress)) {
      ev = {TraceEvent::kFree, e[1].get<int64_t>(), 0, 0};
    } else if (kind == "empty_cache") {
      ev.kind = TraceEvent::kEmptyCache;
    } else {
      return trace_error(fmt::format("events[{}] is not [\"alloc\", address, size (to 1 PiB), stream (to 65536)], "
                                     "[\"free\", address] or [\"empty_cache\"]", k));
    }
    t.events.push_back(std::move(ev));
  }
  return t;
}

std::string write_allocator_trace(const AllocatorTrace& trace) {
  nlohmann::json segments = nlohmann::json::array();
  for (const SegmentInfo& seg : trace.segments) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const SegmentBlock& b : seg.blocks)
      blocks.push_back({{"size", b.size}, {"requested", b.requested}, {"allocated", b.allocated}});
    segments.push_back({{"address", seg.address},
                        {"stream", seg.stream},
                        {"pool", seg.large ? "large" : "small"},
                        {"blocks", blocks}});
  }
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : trace.events) {
    if (e.kind == TraceEvent::kAlloc) {
      nlohmann::json x = {"alloc", e.address, e.size, e.stream};
      if (!e.name.empty()) x.push_back(e.name);
      events.push_back(std::move(x));
    } else if (e.kind == TraceEvent::kFree) {
      events.push_back({"free", e.address});
    } else {
      events.push_back({"empty_cache"});
    }
  }
  const nlohmann::json root = {
      {"format", "actmem-allocator-trace-1"}, {"source", trace.source}, {"segments", segments}, {"events", events}};
  return root.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Expected<ReplayResult> replay_trace(const AllocatorTrace& trace, const AllocatorConfig& config,
                                    const AllocatorDevice& device) {
  CachingAllocator a(config, device);
  struct Live {
    int64_t handle, size;
    int stream;
    int64_t event;  // the alloc's index in the trace (-1: a block of the start state)
  };
  std::unordered_map<int64_t, Live> live;  // address in the trace -> its block
  for (const SegmentInfo& s : trace.segments) {
    auto handles = a.restore(s);
    if (!handles) return handles.error();
    int64_t ptr = s.address;
    std::size_t h = 0;
    for (const SegmentBlock& b : s.blocks) {
      if (b.allocated) live[ptr] = {(*handles)[h++], b.requested > 0 ? b.requested : b.size, s.stream, -1};
      ptr += b.size;
    }
  }
  ReplayResult r;
  r.reserved_at_allocated_peak = a.stats().reserved;
  std::size_t seen = 0;
  auto note_segments = [&](int64_t at) {
    const auto& ev = a.segment_events();
    for (; seen < ev.size(); ++seen) {
      r.segment_events.push_back({ev[seen], at});
      const int kind = TimelineEntry::kSegmentAlloc + static_cast<int>(ev[seen].kind);
      r.timeline.push_back(
          {static_cast<TimelineEntry::Kind>(kind), ev[seen].address, ev[seen].size, ev[seen].stream});
    }
  };
  for (std::size_t k = 0; k < trace.events.size(); ++k) {
    const TraceEvent& e = trace.events[k];
    const auto at = static_cast<int64_t>(k);
    if (e.kind == TraceEvent::kAlloc) {
      if (live.count(e.address))
        return trace_error(fmt::format("events[{}] allocates address {} while it is still allocated", k, e.address));
      const int64_t before_peak = a.stats().allocated_peak;
      const int64_t h = a.malloc(e.size, e.stream);
      note_segments(at);
      if (h < 0) {
        r.oom_at = at;
        break;
      }
      live[e.address] = {h, e.size, e.stream, at};
      r.timeline.push_back({TimelineEntry::kAlloc, a.block_address(h), e.size, e.stream, at});
      if (a.stats().allocated_peak > before_peak) r.reserved_at_allocated_peak = a.stats().reserved;
    } else if (e.kind == TraceEvent::kFree) {
      auto it = live.find(e.address);
      if (it == live.end())
        return trace_error(fmt::format("events[{}] frees address {}, which no alloc before it made and no "
                                       "segment at the start holds", k, e.address));
      const Live& x = it->second;
      r.timeline.push_back({TimelineEntry::kFree, a.block_address(x.handle), x.size, x.stream, x.event});
      a.free(x.handle);
      live.erase(it);
    } else {
      a.empty_cache();
      note_segments(at);
    }
  }
  r.stats = a.stats();
  r.final_segments = a.snapshot();
  return r;
}

}  // namespace actmem
