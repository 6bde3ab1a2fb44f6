// Hand-worked sequences through the caching allocator. Each expectation is worked out from
// pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @001074d2 (the function named in the comment)
// and c10/core/AllocatorConfig.cpp @065861fb.
#include "runtime/caching_allocator.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

constexpr int64_t MiB = 1 << 20;

AllocatorConfig conf(const char* text) {
  auto c = AllocatorConfig::parse(text);
  EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message);
  return c ? *c : AllocatorConfig{};
}

TEST(CachingAllocator, RoundSize) {
  const AllocatorConfig plain;
  EXPECT_EQ(rounded_size(0, plain), 512);  // round_size: below kMinBlockSize
  EXPECT_EQ(rounded_size(1, plain), 512);
  EXPECT_EQ(rounded_size(513, plain), 1024);
  EXPECT_EQ(rounded_size(MiB + 1, plain), MiB + 512);
  // roundup_power2_next_division: 5 MiB + 1 lies in [4, 8) MiB; 4 divisions are 4, 5, 6, 7 MiB.
  const AllocatorConfig four = conf("roundup_power2_divisions:4");
  EXPECT_EQ(rounded_size(5 * MiB + 1, four), 6 * MiB);
  EXPECT_EQ(rounded_size(8 * MiB, four), 8 * MiB);  // a power of two stays
  EXPECT_EQ(rounded_size(1200, four), 1536);        // not above 512·4: plain rounding
  // The list form: sizes below 256 MB one division (plain rounding), from 512 MB on 2 divisions.
  const AllocatorConfig list = conf("roundup_power2_divisions:[256:1,512:2,>:2]");
  EXPECT_EQ(rounded_size(100 * MiB + 1, list), 100 * MiB + 512);
  EXPECT_EQ(rounded_size(600 * MiB, list), 768 * MiB);  // [512, 1024) MiB in 2 steps of 256 MiB
}

TEST(CachingAllocator, SmallRequestsShareTwoMiBSegments) {
  CachingAllocator a(AllocatorConfig{});
  for (int k = 0; k < 4; ++k) ASSERT_GE(a.malloc(512 * 1024), 0);  // get_allocation_size: 2 MiB
  EXPECT_EQ(a.stats().reserved, 2 * MiB);
  EXPECT_EQ(a.stats().segments, 1);
  EXPECT_EQ(a.stats().allocated, 2 * MiB);
  ASSERT_GE(a.malloc(1), 0);  // the segment is full: a second one
  EXPECT_EQ(a.stats().reserved, 4 * MiB);
  EXPECT_EQ(a.stats().allocated, 2 * MiB + 512);
  EXPECT_EQ(a.stats().requested, 2 * MiB + 1);
}

TEST(CachingAllocator, MidSizedRequestsShareTwentyMiBSegments) {
  CachingAllocator a(AllocatorConfig{});
  const int64_t x = a.malloc(3 * MiB);  // 1-10 MiB: a 20 MiB segment, split (17 MiB left > 1 MiB)
  ASSERT_GE(x, 0);
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  EXPECT_EQ(a.block_size(x), 3 * MiB);
  for (int k = 0; k < 5; ++k) ASSERT_GE(a.malloc(3 * MiB), 0);  // 18 MiB in the one segment
  EXPECT_EQ(a.stats().reserved, 20 * MiB);
  // 2 MiB are left: a 3 MiB request does not fit, a new segment.
  ASSERT_GE(a.malloc(3 * MiB), 0);
  EXPECT_EQ(a.stats().reserved, 40 * MiB);
  EXPECT_EQ(a.stats().segments, 2);
}

TEST(CachingAllocator, LargeRequestsRoundToTwoMiBAndSplitOnlyAboveOneMiB) {
  CachingAllocator a(AllocatorConfig{});
  const int64_t x = a.malloc(12 * MiB + 1);  // rounded 12 MiB + 512, segment 14 MiB
  EXPECT_EQ(a.stats().reserved, 14 * MiB);
  EXPECT_EQ(a.block_size(x), 12 * MiB + 512);  // should_split: 2 MiB − 512 left > 1 MiB: split
  const int64_t y = a.malloc(MiB + MiB / 2);   // best fit: the 2 MiB − 512 remainder
  EXPECT_EQ(a.stats().reserved, 14 * MiB);
  EXPECT_EQ(a.block_size(y), 2 * MiB - 512);  // 0.5 MiB − 512 left: not > 1 MiB, not split
  a.free(y);
  a.free(x);  // free_block merges both halves back into one 14 MiB block
  EXPECT_EQ(a.largest_free_block(), 14 * MiB);
  EXPECT_EQ(a.stats().allocated, 0);
  EXPECT_EQ(a.stats().reserved, 14 * MiB);  // cached, not returned
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0);
}

TEST(CachingAllocator, FreedBlocksAreReusedBestFitAndFragment) {
  // Three 100 MiB tensors, the middle one freed: a 120 MiB request cannot use the 100 MiB hole.
  CachingAllocator a(AllocatorConfig{});
  const int64_t x = a.malloc(100 * MiB), y = a.malloc(100 * MiB), z = a.malloc(100 * MiB);
  a.free(y);
  const int64_t w = a.malloc(120 * MiB);
  EXPECT_EQ(a.stats().reserved, 420 * MiB);
  EXPECT_EQ(a.stats().allocated, 320 * MiB);
  // A 60 MiB request takes the hole (best fit), splitting it: 40 MiB stay cached.
  const int64_t v = a.malloc(60 * MiB);
  EXPECT_EQ(a.stats().reserved, 420 * MiB);
  EXPECT_EQ(a.largest_free_block(), 40 * MiB);
  for (int64_t h : {x, z, w, v}) a.free(h);
  EXPECT_EQ(a.stats().allocated_peak, 380 * MiB);
  EXPECT_EQ(a.stats().reserved_peak, 420 * MiB);
}

TEST(CachingAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  CachingAllocator a(conf("max_split_size_mb:128"));
  a.free(a.malloc(200 * MiB));
  // get_free_block: a 50 MiB request may not cut the cached 200 MiB block: a new segment.
  const int64_t small = a.malloc(50 * MiB);
  EXPECT_EQ(a.stats().reserved, 250 * MiB);
  // An oversize request takes an oversize block within max_non_split_rounding (20 MiB) of it,
  // whole: 190 MiB gets the 200 MiB block.
  const int64_t big = a.malloc(190 * MiB);
  EXPECT_EQ(a.block_size(big), 200 * MiB);
  EXPECT_EQ(a.stats().reserved, 250 * MiB);
  a.free(big);
  // 170 MiB is 30 MiB short of it: a segment of its own.
  ASSERT_GE(a.malloc(170 * MiB), 0);
  EXPECT_EQ(a.stats().reserved, 420 * MiB);
  a.free(small);
}

TEST(CachingAllocator, OutOfMemoryRetriesFreeTheCache) {
  // malloc: cudaMalloc fails, then every unsplit cached block is freed and it is tried again.
  CachingAllocator a(AllocatorConfig{}, {.capacity = 100 * MiB});
  a.free(a.malloc(30 * MiB));
  const int64_t x = a.malloc(80 * MiB);  // 30 + 80 > 100: fails, empties the cache, then fits
  ASSERT_GE(x, 0);
  EXPECT_EQ(a.stats().alloc_retries, 1);
  EXPECT_EQ(a.stats().reserved, 80 * MiB);
  EXPECT_EQ(a.stats().device_frees, 1);
  // 80 MiB in use and nothing cached: 30 MiB more do not fit, after the same two retries.
  EXPECT_EQ(a.malloc(30 * MiB), -1);
  EXPECT_EQ(a.stats().ooms, 1);
  EXPECT_EQ(a.stats().alloc_retries, 2);
}

TEST(CachingAllocator, OutOfMemoryFreesOversizeBlocksFirst) {
  // release_available_cached_blocks: with max_split_size set, the largest oversize cached blocks
  // are freed until their bytes reach the request; the 21 MiB small-ish block stays.
  CachingAllocator a(conf("max_split_size_mb:40"), {.capacity = 200 * MiB});
  const int64_t p = a.malloc(50 * MiB), q = a.malloc(60 * MiB), r = a.malloc(22 * MiB);
  a.free(p);
  a.free(q);
  a.free(r);
  ASSERT_GE(a.malloc(100 * MiB), 0);  // 132 + 100 > 200: 60 + 50 MiB freed, 22 MiB kept
  EXPECT_EQ(a.stats().reserved, 122 * MiB);
  EXPECT_EQ(a.stats().alloc_retries, 0);
}

TEST(CachingAllocator, ExpandableSegmentsGrowOneSegmentPageByPage) {
  // try_allocate_expandable_block: 20 MiB pages in the large pool, mapped as needed.
  CachingAllocator a(conf("expandable_segments:True"), {.total = 80LL << 30});
  const int64_t x = a.malloc(30 * MiB);  // two pages, the 10 MiB left split off (>= 512 B)
  EXPECT_EQ(a.stats().reserved, 40 * MiB);
  EXPECT_EQ(a.stats().segments, 0);  // mapped pages, not cudaMalloc segments
  const int64_t y = a.malloc(30 * MiB);  // the free 10 MiB + one more page
  EXPECT_EQ(a.stats().reserved, 60 * MiB);
  const auto segs = a.snapshot();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].size, 60 * MiB);
  EXPECT_TRUE(segs[0].expandable);
  // The batch of N + 1 case of the Note: every 31 MiB tensor tiles into the same segment after
  // the 30 MiB ones are freed, where cudaMalloc segments would not take them.
  a.free(x);
  a.free(y);
  const int64_t z = a.malloc(31 * MiB), w = a.malloc(31 * MiB);
  EXPECT_EQ(a.stats().reserved, 80 * MiB);
  a.free(z);
  a.free(w);
  a.empty_cache();  // release_blocks: the free pages unmapped, the segment released
  EXPECT_EQ(a.stats().reserved, 0);
  EXPECT_TRUE(a.snapshot().empty());

  CachingAllocator plain(AllocatorConfig{});
  plain.free(plain.malloc(30 * MiB));
  plain.free(plain.malloc(30 * MiB));  // the cached 30 MiB block again
  plain.malloc(31 * MiB);
  plain.malloc(31 * MiB);
  EXPECT_EQ(plain.stats().reserved, 94 * MiB);  // 30 cached + 32 + 32
}

TEST(CachingAllocator, StreamsHaveTheirOwnBlocks) {
  CachingAllocator a(AllocatorConfig{});
  a.free(a.malloc(100 * MiB, 0));
  ASSERT_GE(a.malloc(100 * MiB, 1), 0);  // a block freed on stream 0 is not reused on stream 1
  EXPECT_EQ(a.stats().reserved, 200 * MiB);
}

TEST(CachingAllocator, GarbageCollectionUnderAMemoryFraction) {
  // garbage_collect_cached_blocks: above 0.5 × (0.5 × 400 MiB) reserved, the cached unsplit blocks
  // of at least average age are freed before a new segment is made.
  CachingAllocator a(conf("garbage_collection_threshold:0.5"), {.total = 400 * MiB, .memory_fraction = 0.5});
  // Ages count get_free_block calls since a block was cached.
  a.free(a.malloc(60 * MiB));  // call 1: a 60 MiB segment, cached at age base 1
  a.free(a.malloc(50 * MiB));  // call 2: best fit takes it, split; merged again at base 2
  EXPECT_EQ(a.stats().reserved, 60 * MiB);
  const int64_t x = a.malloc(80 * MiB);  // call 3: 60 MiB <= 100 MiB: no collection, a new segment
  EXPECT_EQ(a.stats().reserved, 140 * MiB);
  a.free(x);  // cached at base 3
  // Call 4: nothing fits 90 MiB; 140 > 100 MiB: ages 2 and 1, average 1.5, the 60 MiB block goes
  // (40 MiB had to be reclaimed), then 80 + 90 <= 200 MiB allowed.
  ASSERT_GE(a.malloc(90 * MiB), 0);
  EXPECT_EQ(a.stats().device_frees, 1);
  EXPECT_EQ(a.stats().reserved, 170 * MiB);
  // Call 5: 120 MiB: the cached 80 MiB block (age 2, the only one) is collected, and then
  // 90 + 120 MiB pass the allowed 200 MiB: out of memory though the device has room.
  EXPECT_EQ(a.malloc(120 * MiB), -1);
  EXPECT_EQ(a.stats().reserved, 90 * MiB);
}

TEST(AllocatorConfig, ParsesWhatPyTorchAccepts) {
  const AllocatorConfig c = conf("expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6");
  EXPECT_TRUE(c.expandable_segments);
  EXPECT_EQ(c.max_split_size, 128 * MiB);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.6);
  EXPECT_EQ(conf("").max_split_size, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(conf("backend:native,release_lock_on_cudamalloc:True").max_non_split_rounding, 20 * MiB);
  // parseRoundUpPower2Divisions: the first interval also sets the ones below it, and '>' fills
  // from the last interval named, that one included.
  const AllocatorConfig d = conf("roundup_power2_divisions:[64:1,256:2,>:4]");
  EXPECT_EQ(d.divisions(MiB), 1);
  EXPECT_EQ(d.divisions(100 * MiB), 1);  // [64, 128) MiB: named 64
  EXPECT_EQ(d.divisions(200 * MiB), 0);  // [128, 256) MiB: not named
  EXPECT_EQ(d.divisions(300 * MiB), 4);  // 256 named 2, then overwritten by '>'
  EXPECT_EQ(d.divisions(8000 * MiB), 4);
}

TEST(AllocatorConfig, RefusesWhatPyTorchRefuses) {
  for (const char* bad : {"max_split_size_mb:10", "expandable_segments:true", "garbage_collection_threshold:1.5",
                          "roundup_power2_divisions:3", "backend:cudaMallocAsync", "max_split_size_mb",
                          "expandable_segment:True", "max_split_size_mb:128;expandable_segments:True"}) {
    auto c = AllocatorConfig::parse(bad);
    ASSERT_FALSE(c.has_value()) << bad;
    EXPECT_EQ(c.error().field, "alloc_conf") << bad;
    EXPECT_EQ(c.error().message.find('\n'), std::string::npos);
  }
  EXPECT_NE(AllocatorConfig::parse("max_split_size_mb:10").error().message.find("minimum of 20"), std::string::npos);
}

}  // namespace
}  // namespace actmem
