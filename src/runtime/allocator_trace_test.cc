// Traces read and replayed (allocator_trace.h); the sizes are worked by hand from
// c10/cuda/CUDACachingAllocator.cpp @001074d2 as in caching_allocator_test.cc.
#include "runtime/allocator_trace.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

constexpr int64_t MiB = 1 << 20;

ReplayResult replay(const std::string& json, const char* conf = "") {
  auto t = parse_allocator_trace(json);
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().message);
  if (!t) return {};
  auto r = replay_trace(*t, *AllocatorConfig::parse(conf), {});
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? *r : ReplayResult{};
}

TEST(AllocatorTrace, ReplaysAllocationsAndFreesInOrder) {
  // Two 3 MiB tensors share one 20 MiB segment; empty_cache cannot return it while one lives.
  const ReplayResult r = replay(R"({"format": "actmem-allocator-trace-1",
      "events": [["alloc", 100, 3145728, 0], ["alloc", 200, 3145728, 0], ["free", 100], ["empty_cache"],
                 ["free", 200], ["empty_cache"]]})");
  EXPECT_EQ(r.stats.reserved_peak, 20 * MiB);
  EXPECT_EQ(r.stats.allocated_peak, 6 * MiB);
  EXPECT_EQ(r.reserved_at_allocated_peak, 20 * MiB);
  ASSERT_EQ(r.segment_events.size(), 2u);
  EXPECT_EQ(r.segment_events[0].event.kind, SegmentEvent::kAlloc);
  EXPECT_EQ(r.segment_events[0].at, 0);
  EXPECT_EQ(r.segment_events[1].event.kind, SegmentEvent::kFree);
  EXPECT_EQ(r.segment_events[1].at, 5);  // the second empty_cache, once the segment is whole again
  EXPECT_EQ(r.stats.reserved, 0);
}

TEST(AllocatorTrace, SegmentsAtTheStartKeepTheirBlocks) {
  // A 20 MiB segment holding 4 MiB with 16 MiB free: a 10 MiB tensor fits in it, a 17 MiB one not.
  const std::string start = R"({"format": "actmem-allocator-trace-1", "segments": [{"address": 1073741824,
      "pool": "large", "blocks": [{"size": 4194304, "allocated": true}, {"size": 16777216}]}], "events": )";
  ReplayResult r = replay(start + R"([["alloc", 7, 10485760, 0], ["free", 1073741824]]})");
  EXPECT_TRUE(r.segment_events.empty());
  EXPECT_EQ(r.stats.reserved_peak, 20 * MiB);
  EXPECT_EQ(r.stats.allocated_peak, 14 * MiB);
  r = replay(start + R"([["alloc", 7, 17825792, 0]]})");
  ASSERT_EQ(r.segment_events.size(), 1u);
  EXPECT_EQ(r.segment_events[0].event.size, 18 * MiB);  // 17 MiB rounded to 2 MiB
}

TEST(AllocatorTrace, RunsOutOfMemoryWhereTheDeviceIsFull) {
  auto t = parse_allocator_trace(R"({"format": "actmem-allocator-trace-1",
      "events": [["alloc", 1, 62914560, 0], ["alloc", 2, 62914560, 0]]})");
  ASSERT_TRUE(t.has_value());
  auto r = replay_trace(*t, AllocatorConfig{}, {.capacity = 100 * MiB});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->oom_at, 1);
  EXPECT_EQ(r->stats.reserved, 60 * MiB);
}

TEST(AllocatorTrace, BadTracesNameTheEntry) {
  for (const char* bad : {"[]", R"({"format": "x"})", R"({"format": []})",  // the last found by fuzzing
                          R"({"format": "actmem-allocator-trace-1",
                              "segments": [{"address": 1, "pool": 3, "blocks": []}]})",
                          R"({"format": "actmem-allocator-trace-1", "events": [["alloc", 1]]})",
                          R"({"format": "actmem-allocator-trace-1", "events": [["alloc", 1, -5, 0]]})",
                          R"({"format": "actmem-allocator-trace-1", "segments": [{"address": 1}]})"}) {
    auto t = parse_allocator_trace(bad);
    ASSERT_FALSE(t.has_value()) << bad;
    EXPECT_EQ(t.error().field, "trace");
  }
  auto t = parse_allocator_trace(R"({"format": "actmem-allocator-trace-1", "events": [["free", 9]]})");
  ASSERT_TRUE(t.has_value());
  auto r = replay_trace(*t, AllocatorConfig{}, {});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("events[0] frees address 9"), std::string::npos);
}

}  // namespace
}  // namespace actmem
