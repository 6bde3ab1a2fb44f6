// The caching allocator's rules (caching_allocator.h). Function names follow DeviceCachingAllocator
// in pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @001074d2, so each can be read beside its
// original; blocks live in a vector and the pools are ordered sets of (stream, size, address) and
// (stream, address), the original's BlockComparatorSize and BlockComparatorAddress.
#include "runtime/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace actmem {

namespace {

constexpr int64_t kMinBlockSize = 512;        // every size is rounded to at least 512 bytes
constexpr int64_t kSmallSize = 1 << 20;       // the largest "small" allocation: 1 MiB
constexpr int64_t kSmallBuffer = 2 << 20;     // small requests are packed in 2 MiB segments
constexpr int64_t kLargeBuffer = 20 << 20;    // 1-10 MiB requests may share a 20 MiB segment
constexpr int64_t kMinLargeAlloc = 10 << 20;  // from here a request gets its own segment
constexpr int64_t kRoundLarge = 2 << 20;      // which is rounded to 2 MiB

std::string fmt_address(int64_t a) { return fmt::format("segment at {:#x}", a); }


/// get_allocation_size: the segment cudaMalloc is asked for when no cached block fits.
int64_t allocation_size(int64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace

// --- the allocator ---

namespace {

struct Block {
  int64_t ptr = 0, size = 0, requested = 0;
  int stream = 0;
  int pool = 0;  // 0 large, 1 small
  bool allocated = false, mapped = true, alive = true;
  int64_t prev = -1, next = -1;
  int64_t gc_count_base = 0;
  int64_t segment = -1;  // its expandable segment, -1 for a cudaMalloc segment
  bool is_split() const { return prev >= 0 || next >= 0; }
};

using SizeKey = std::tuple<int, int64_t, int64_t, int64_t>;  // stream, size, ptr, block
using AddressKey = std::tuple<int, int64_t, int64_t>;        // stream, ptr, block

struct Pool {
  bool small = false;
  std::set<SizeKey> blocks;       // cached free blocks, mapped
  std::set<AddressKey> unmapped;  // expandable segments' unmapped address ranges
  int64_t get_free_blocks_call_count = 0;
};

/// ExpandableSegment: an address range of `pages` pages of `page` bytes, mapped page by page.
struct Segment {
  int64_t base = 0, page = 0, pages = 0;
  int stream = 0;
  std::vector<bool> mapped;
  bool alive = true;
};

}  // namespace

struct CachingAllocator::Impl {
  AllocatorConfig cfg;
  AllocatorDevice dev;
  AllocatorStats stats;
  std::vector<Block> blocks;
  std::vector<int64_t> dead;  // reusable slots of `blocks`
  std::vector<Segment> segments;
  std::array<Pool, 2> pools;
  int64_t next_address = int64_t{1} << 32;
  int64_t allowed_maximum = 0;
  bool set_fraction = false;
  std::vector<SegmentEvent> events;

  Impl(AllocatorConfig c, AllocatorDevice d) : cfg(std::move(c)), dev(d) {
    pools[1].small = true;
    if (dev.memory_fraction > 0) {
      set_fraction = true;
      allowed_maximum = static_cast<int64_t>(dev.memory_fraction * static_cast<double>(dev.total));
    }
  }

  Block& b(int64_t i) { return blocks[static_cast<std::size_t>(i)]; }
  const Block& b(int64_t i) const { return blocks[static_cast<std::size_t>(i)]; }
  Pool& pool_of(int64_t i) { return pools[static_cast<std::size_t>(b(i).pool)]; }
  SizeKey size_key(int64_t i) const { return {b(i).stream, b(i).size, b(i).ptr, i}; }
  AddressKey address_key(int64_t i) const { return {b(i).stream, b(i).ptr, i}; }

  int64_t new_block(Block value) {
    if (!dead.empty()) {
      const int64_t i = dead.back();
      dead.pop_back();
      b(i) = value;
      return i;
    }
    blocks.push_back(value);
    return static_cast<int64_t>(blocks.size()) - 1;
  }
  void delete_block(int64_t i) {
    b(i).alive = false;
    dead.push_back(i);
  }
  void insert_into_blocks(int64_t i) {
    Pool& pool = pool_of(i);
    b(i).gc_count_base = pool.get_free_blocks_call_count;
    pool.blocks.insert(size_key(i));
  }
  void add_reserved(int64_t bytes) {
    stats.reserved += bytes;
    stats.reserved_peak = std::max(stats.reserved_peak, stats.reserved);
  }

  /// get_free_block: the best-fitting cached block of the request's stream, or none.
  int64_t get_free_block(int pool_index, int stream, int64_t size) {
    Pool& pool = pools[static_cast<std::size_t>(pool_index)];
    if (set_fraction && cfg.garbage_collection_threshold > 0) ++pool.get_free_blocks_call_count;
    auto it = pool.blocks.lower_bound({stream, size, std::numeric_limits<int64_t>::min(), -1});
    if (it == pool.blocks.end() || std::get<0>(*it) != stream) return -1;
    int64_t found = std::get<3>(*it);
    if (b(found).segment >= 0 && cfg.expandable_segments) {
      // A block before unmapped space counts as large as it can grow.
      auto expandable_size = [&](int64_t i) {
        const Block& x = b(i);
        return x.size + (x.next >= 0 && !b(x.next).mapped ? b(x.next).size : 0);
      };
      for (auto next = std::next(it); b(found).segment >= 0 && next != pool.blocks.end() &&
                                      std::get<0>(*next) == stream &&
                                      expandable_size(std::get<3>(*next)) < expandable_size(found);
           ++next) {
        it = next;
        found = std::get<3>(*it);
      }
    }
    // An oversize block is not cut down for a smaller request, and serves an oversize one only within
    // max_non_split_rounding of its size (kLargeBuffer at 001074d2; max_non_split_rounding_mb later).
    if (size < cfg.max_split_size && b(found).size >= cfg.max_split_size) return -1;
    if (size >= cfg.max_split_size && b(found).size >= size + cfg.max_non_split_rounding) return -1;
    pool.blocks.erase(it);
    return found;
  }

  /// should_split: whether the rest of a block found for `size` becomes a free block of its own.
  bool should_split(int64_t i, int64_t size) const {
    const int64_t remaining = b(i).size - size;
    if (b(i).pool == 1 || cfg.expandable_segments) return remaining >= kMinBlockSize;
    return size < cfg.max_split_size && remaining > kSmallSize;
  }

  /// try_merge_blocks: `src` into `dst` when it is free and mapped alike; the bytes it added.
  int64_t try_merge_blocks(int64_t dst, int64_t src) {
    if (src < 0 || b(src).allocated || b(dst).mapped != b(src).mapped) return 0;
    Pool& pool = pool_of(src);
    if (b(src).mapped)
      pool.blocks.erase(size_key(src));
    else
      pool.unmapped.erase(address_key(src));
    Block& d = b(dst);
    const Block& s = b(src);
    if (d.prev == src) {
      d.ptr = s.ptr;
      d.prev = s.prev;
      if (d.prev >= 0) b(d.prev).next = dst;
    } else {
      d.next = s.next;
      if (d.next >= 0) b(d.next).prev = dst;
    }
    d.size += s.size;
    const int64_t subsumed = s.size;
    delete_block(src);
    return subsumed;
  }

  /// The first `n` bytes of block i become a block of their own before it (in no pool yet).
  int64_t split_front(int64_t i, int64_t n) {
    Block front = b(i);
    front.size = n;
    front.next = i;
    const int64_t f = new_block(front);
    if (b(f).prev >= 0) b(b(f).prev).next = f;
    b(i).prev = f;
    b(i).ptr += n;
    b(i).size -= n;
    return f;
  }

  void merge_neighbours(int64_t i) {
    try_merge_blocks(i, b(i).prev);
    try_merge_blocks(i, b(i).next);
  }

  /// free_block: back into its pool, merged with free neighbours.
  void free_block(int64_t i) {
    merge_neighbours(i);
    insert_into_blocks(i);
  }

  /// release_block: a whole cudaMalloc segment back to the driver (cudaFree).
  void release_block(int64_t i) {
    events.push_back({SegmentEvent::kFree, b(i).ptr, b(i).size, b(i).stream});
    ++stats.device_frees;
    stats.reserved -= b(i).size;
    --stats.segments;
    pool_of(i).blocks.erase(size_key(i));
    delete_block(i);
  }

  // --- expandable segments ---

  int64_t segment_left(const Segment& s, int64_t p) const { return (p - s.base) / s.page; }
  int64_t segment_right(const Segment& s, int64_t p) const { return (p - s.base + s.page - 1) / s.page; }

  /// ExpandableSegment::map: the pages covering [ptr, ptr + size); the bytes mapped, 0 when the
  /// device has no room for them (cuMemCreate's out of memory: the pages made so far are released).
  int64_t segment_map(int64_t seg, int64_t ptr, int64_t size) {
    Segment& s = segments[static_cast<std::size_t>(seg)];
    const int64_t begin = segment_left(s, ptr), end = segment_right(s, ptr + size);
    if (begin == end) return 0;
    const int64_t bytes = (end - begin) * s.page;
    if (dev.capacity > 0 && stats.reserved + bytes > dev.capacity) return 0;
    if (end > s.pages) return 0;  // past the segment's address space: out of memory there too
    if (static_cast<int64_t>(s.mapped.size()) < end) s.mapped.resize(static_cast<std::size_t>(end), false);
    for (int64_t k = begin; k < end; ++k) s.mapped[static_cast<std::size_t>(k)] = true;
    return bytes;
  }
  /// ExpandableSegment::unmap: the pages wholly inside [ptr, ptr + size); their first byte and size.
  std::pair<int64_t, int64_t> segment_unmap(int64_t seg, int64_t ptr, int64_t size) {
    Segment& s = segments[static_cast<std::size_t>(seg)];
    const int64_t begin = segment_right(s, ptr), end = segment_left(s, ptr + size);
    if (begin >= end) return {ptr, 0};
    for (int64_t k = begin; k < end && k < static_cast<int64_t>(s.mapped.size()); ++k)
      s.mapped[static_cast<std::size_t>(k)] = false;
    return {s.base + begin * s.page, (end - begin) * s.page};
  }

  /// find_expandable_block: the lowest address in a segment of the stream with room for `size`
  /// (free and unmapped blocks in a row); a new segment when there is none.
  int64_t find_expandable_block(int pool_index, int stream, int64_t size) {
    Pool& pool = pools[static_cast<std::size_t>(pool_index)];
    auto allocatable = [&](int64_t i) { return i >= 0 && !b(i).allocated; };
    auto has_room = [&](int64_t i) {
      int64_t bytes = 0;
      while (bytes < size && allocatable(i)) bytes += b(i).size, i = b(i).next;
      return bytes >= size;
    };
    for (auto it = pool.unmapped.lower_bound({stream, std::numeric_limits<int64_t>::min(), -1});
         it != pool.unmapped.end() && std::get<0>(*it) == stream; ++it) {
      int64_t c = std::get<2>(*it);
      if (allocatable(b(c).prev)) c = b(c).prev;
      if (has_room(c)) return c;
    }
    Segment s;
    s.page = pool.small ? kSmallBuffer : kLargeBuffer;
    // Address space for 1 1/8 of the GPU's memory (or as if unlimited when it is not given).
    const int64_t space = dev.total > 0 ? dev.total + dev.total / 8 : int64_t{1} << 48;
    s.pages = (space + s.page - 1) / s.page;
    s.base = next_address;
    s.stream = stream;
    next_address += s.pages * s.page;
    segments.push_back(std::move(s));
    const int64_t seg = static_cast<int64_t>(segments.size()) - 1;
    const int64_t i = new_block({.ptr = segments.back().base, .size = segments.back().pages * segments.back().page,
                                 .stream = stream, .pool = pool_index, .mapped = false, .segment = seg});
    pool.unmapped.insert(address_key(i));
    return i;
  }

  /// map_block: pages for the first `size` bytes of an unmapped block, merged with free neighbours.
  bool map_block(int64_t i, int64_t size) {
    const int64_t start = b(i).ptr;
    const int64_t mapped = segment_map(b(i).segment, start, size);
    if (mapped == 0) return false;
    events.push_back({SegmentEvent::kMap, start, mapped, b(i).stream});
    Pool& pool = pool_of(i);
    pool.unmapped.erase(address_key(i));
    b(i).mapped = true;
    if (mapped < b(i).size) {
      Block rest = b(i);
      rest.ptr = b(i).ptr + mapped;
      rest.size = b(i).size - mapped;
      rest.mapped = false;
      rest.prev = i;
      const int64_t r = new_block(rest);
      if (b(r).next >= 0) b(b(r).next).prev = r;
      b(i).next = r;
      b(i).size = mapped;
      pool.unmapped.insert(address_key(r));
    }
    merge_neighbours(i);
    insert_into_blocks(i);
    add_reserved(mapped);
    ++stats.device_allocs;
    return true;
  }

  /// try_allocate_expandable_block: maps pages until one free block holds `size`.
  int64_t try_allocate_expandable_block(int pool_index, int stream, int64_t size) {
    int64_t c = find_expandable_block(pool_index, stream, size);
    if (!b(c).mapped && !map_block(c, std::min(b(c).size, size))) return -1;
    while (b(c).size < size) {
      const int64_t next = b(c).next;
      if (!map_block(next, std::min(size - b(c).size, b(next).size))) return -1;
      c = next;  // map_block merged the block before it into it
    }
    pools[static_cast<std::size_t>(pool_index)].blocks.erase(size_key(c));
    return c;
  }

  /// unmap_block: the whole pages inside a free expandable block go back to the driver.
  void unmap_block(int64_t i) {
    const auto [ptr, size] = segment_unmap(b(i).segment, b(i).ptr, b(i).size);
    if (size == 0) return;
    Pool& pool = pool_of(i);
    pool.blocks.erase(size_key(i));
    const int64_t before = ptr - b(i).ptr;
    if (before > 0) insert_into_blocks(split_front(i, before));  // still mapped: a free block
    const int64_t after = b(i).size - size;
    if (after > 0) {
      Block x = b(i);
      x.ptr = ptr + size;
      x.size = after;
      x.prev = i;
      const int64_t f = new_block(x);
      if (b(f).next >= 0) b(b(f).next).prev = f;
      b(i).next = f;
      insert_into_blocks(f);
    }
    b(i).size = size;
    b(i).mapped = false;
    merge_neighbours(i);
    pool.unmapped.insert(address_key(i));
    stats.reserved -= size;
    ++stats.device_frees;
    events.push_back({SegmentEvent::kUnmap, ptr, size, b(i).stream});
  }

  /// release_blocks: every unsplit cached segment of a pool freed, every free page unmapped.
  void release_blocks(Pool& pool) {
    std::vector<int64_t> to_unmap, to_release;
    for (const auto& key : pool.blocks) {
      const int64_t i = std::get<3>(key);
      if (b(i).segment >= 0)
        to_unmap.push_back(i);
      else if (!b(i).is_split())
        to_release.push_back(i);
    }
    for (int64_t i : to_release) release_block(i);
    for (int64_t i : to_unmap) {
      unmap_block(i);
      if (!b(i).is_split() && !b(i).mapped) {  // release_expandable_segment: the segment is empty
        segments[static_cast<std::size_t>(b(i).segment)].alive = false;
        pool.unmapped.erase(address_key(i));
        delete_block(i);
      }
    }
  }

  /// release_cached_blocks (empty_cache, and malloc's last retry).
  void release_cached_blocks() {
    release_blocks(pools[0]);
    release_blocks(pools[1]);
  }

  /// release_available_cached_blocks: with max_split_size set, the oversize cached blocks of the
  /// stream, one that fits the request or the largest ones until their bytes reach it.
  bool release_available_cached_blocks(int pool_index, int stream, int64_t size) {
    if (cfg.max_split_size == std::numeric_limits<int64_t>::max()) return false;
    Pool& pool = pools[static_cast<std::size_t>(pool_index)];
    const int64_t key = std::max(size, cfg.max_split_size);
    auto it = pool.blocks.lower_bound({stream, key, std::numeric_limits<int64_t>::min(), -1});
    if (it != pool.blocks.end() && std::get<0>(*it) == stream) {
      if (b(std::get<3>(*it)).segment >= 0) return false;
      release_block(std::get<3>(*it));
      return true;
    }
    if (it == pool.blocks.begin()) return false;
    --it;
    int64_t released = 0;
    while (released < key && std::get<1>(*it) >= cfg.max_split_size && std::get<0>(*it) == stream &&
           b(std::get<3>(*it)).segment < 0) {
      const int64_t i = std::get<3>(*it);
      released += b(i).size;
      const bool first = it == pool.blocks.begin();
      if (!first) --it;
      release_block(i);
      if (first) break;
    }
    return released >= key;
  }

  /// garbage_collect_cached_blocks: above threshold × the allowed memory, the unsplit cached large
  /// blocks that waited longest (at least the average age, in get_free_block calls) are freed.
  void garbage_collect_cached_blocks() {
    const auto threshold =
        static_cast<int64_t>(cfg.garbage_collection_threshold * static_cast<double>(allowed_maximum));
    if (stats.reserved <= threshold) return;
    const int64_t target = stats.reserved - threshold;
    Pool& pool = pools[0];
    auto age = [&](int64_t i) { return pool.get_free_blocks_call_count - b(i).gc_count_base; };
    int64_t total_age = 0, freeable = 0;
    for (const auto& key : pool.blocks)
      if (!b(std::get<3>(key)).is_split()) total_age += age(std::get<3>(key)), ++freeable;
    int64_t reclaimed = 0;
    bool freed = true;
    while (reclaimed < target && freed && freeable > 0) {
      const double threshold_age = static_cast<double>(total_age) / static_cast<double>(freeable);
      freed = false;
      std::vector<int64_t> old;
      for (const auto& key : pool.blocks) {
        const int64_t i = std::get<3>(key);
        if (!b(i).is_split() && static_cast<double>(age(i)) >= threshold_age) old.push_back(i);
      }
      for (int64_t i : old) {
        freed = true;
        reclaimed += b(i).size;
        total_age -= age(i);
        --freeable;
        release_block(i);
      }
    }
  }

  /// alloc_block: a new segment (cudaMalloc of the allocation size) or, with expandable segments,
  /// new pages; false when the device or the memory fraction has no room.
  int64_t alloc_block(int pool_index, int stream, int64_t size, int64_t alloc_size, bool retry) {
    if (retry) ++stats.alloc_retries;
    if (set_fraction && stats.reserved + alloc_size > allowed_maximum) return -1;
    if (cfg.expandable_segments) return try_allocate_expandable_block(pool_index, stream, size);
    if (dev.capacity > 0 && stats.reserved + alloc_size > dev.capacity) return -1;
    const Block x{.ptr = next_address, .size = alloc_size, .stream = stream, .pool = pool_index};
    next_address += alloc_size;
    ++stats.segments;
    ++stats.device_allocs;
    add_reserved(alloc_size);
    events.push_back({SegmentEvent::kAlloc, x.ptr, alloc_size, stream});
    return new_block(x);
  }

  int64_t malloc(int64_t orig, int stream) {
    if (orig < 0) throw std::invalid_argument("CachingAllocator::malloc: negative size");
    const int64_t size = rounded_size(orig, cfg);
    const int pool_index = size <= kSmallSize ? 1 : 0;
    const int64_t alloc_size = allocation_size(size);
    int64_t i = get_free_block(pool_index, stream, size);
    if (i < 0) {
      if (set_fraction && cfg.garbage_collection_threshold > 0) garbage_collect_cached_blocks();
      i = alloc_block(pool_index, stream, size, alloc_size, false);
      if (i < 0 && release_available_cached_blocks(pool_index, stream, size))
        i = alloc_block(pool_index, stream, size, alloc_size, false);
      if (i < 0) {
        release_cached_blocks();
        i = alloc_block(pool_index, stream, size, alloc_size, true);
      }
    }
    if (i < 0) {
      ++stats.ooms;
      return -1;
    }
    if (should_split(i, size)) {  // alloc_found_block: the front becomes the allocation
      const int64_t f = split_front(i, size);
      insert_into_blocks(i);
      i = f;
    }
    Block& x = b(i);
    x.allocated = true;
    x.requested = orig;
    stats.allocated += x.size;
    stats.allocated_peak = std::max(stats.allocated_peak, stats.allocated);
    stats.requested += orig;
    stats.requested_peak = std::max(stats.requested_peak, stats.requested);
    return i;
  }

  void free(int64_t i) {
    if (i < 0 || i >= static_cast<int64_t>(blocks.size()) || !b(i).alive || !b(i).allocated)
      throw std::invalid_argument("CachingAllocator::free: not an allocated block");
    b(i).allocated = false;
    stats.allocated -= b(i).size;
    stats.requested -= b(i).requested;
    b(i).requested = 0;
    free_block(i);
  }
};

CachingAllocator::CachingAllocator(AllocatorConfig config, AllocatorDevice device)
    : impl_(std::make_unique<Impl>(std::move(config), device)) {}
CachingAllocator::~CachingAllocator() = default;
CachingAllocator::CachingAllocator(CachingAllocator&&) noexcept = default;
CachingAllocator& CachingAllocator::operator=(CachingAllocator&&) noexcept = default;

int64_t CachingAllocator::malloc(int64_t bytes, int stream) { return impl_->malloc(bytes, stream); }
void CachingAllocator::free(int64_t handle) { impl_->free(handle); }
void CachingAllocator::empty_cache() { impl_->release_cached_blocks(); }
const AllocatorStats& CachingAllocator::stats() const { return impl_->stats; }
const std::vector<SegmentEvent>& CachingAllocator::segment_events() const { return impl_->events; }

Expected<std::vector<int64_t>> CachingAllocator::restore(const SegmentInfo& segment) {
  Impl& m = *impl_;
  auto refuse = [&](const std::string& why) {
    return Error{ErrorKind::kInvalid, "trace", fmt_address(segment.address) + why};
  };
  if (segment.expandable) return refuse(": an expandable segment cannot be restored (start the trace empty)");
  if (segment.blocks.empty()) return refuse(": a segment with no blocks");
  int64_t size = 0;
  for (const SegmentBlock& x : segment.blocks) {
    if (x.size <= 0 || x.size % kMinBlockSize != 0) return refuse(": a block size that is not a multiple of 512");
    size += x.size;
  }
  if (segment.address <= 0) return refuse(": the address must be positive");
  for (const Block& x : m.blocks)
    if (x.alive && x.ptr < segment.address + size && segment.address < x.ptr + x.size)
      return refuse(": overlaps a segment already there");
  const int pool = segment.large ? 0 : 1;
  std::vector<int64_t> handles;
  int64_t ptr = segment.address, prev = -1;
  for (const SegmentBlock& x : segment.blocks) {
    const int64_t i = m.new_block({.ptr = ptr, .size = x.size, .stream = segment.stream, .pool = pool, .prev = prev});
    if (prev >= 0) m.b(prev).next = i;
    if (x.allocated) {
      m.b(i).allocated = true;
      m.b(i).requested = x.requested > 0 ? x.requested : x.size;
      m.stats.allocated += x.size;
      m.stats.requested += m.b(i).requested;
      handles.push_back(i);
    }
    prev = i;
    ptr += x.size;
  }
  // Free neighbours merged, as they would be in the allocator; then into their pool.
  for (int64_t i = prev; i >= 0;) {
    const int64_t before = m.b(i).prev;
    if (!m.b(i).allocated) {
      if (before >= 0 && !m.b(before).allocated) {
        m.try_merge_blocks(before, i);  // `before` takes over i's bytes
      } else {
        m.insert_into_blocks(i);
      }
    }
    i = before;
  }
  ++m.stats.segments;
  m.add_reserved(size);
  m.stats.allocated_peak = std::max(m.stats.allocated_peak, m.stats.allocated);
  m.stats.requested_peak = std::max(m.stats.requested_peak, m.stats.requested);
  m.next_address = std::max(m.next_address, segment.address + size);
  return handles;
}
int64_t CachingAllocator::block_size(int64_t handle) const { return impl_->b(handle).size; }
int64_t CachingAllocator::block_address(int64_t handle) const { return impl_->b(handle).ptr; }

int64_t CachingAllocator::largest_free_block() const {
  int64_t largest = 0;
  for (const Pool& pool : impl_->pools)
    for (const auto& key : pool.blocks) largest = std::max(largest, std::get<1>(key));
  return largest;
}

std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  const Impl& m = *impl_;
  std::vector<SegmentInfo> out;
  for (std::size_t k = 0; k < m.blocks.size(); ++k) {
    const Block& head = m.blocks[k];
    // A segment starts at a live mapped block with no mapped block before it (an expandable
    // segment is listed once per mapped run, as snapshot() does).
    if (!head.alive || !head.mapped || (head.prev >= 0 && m.b(head.prev).mapped)) continue;
    SegmentInfo s;
    s.address = head.ptr;
    s.stream = head.stream;
    s.large = head.pool == 0;
    s.expandable = head.segment >= 0;
    for (int64_t i = static_cast<int64_t>(k); i >= 0 && m.b(i).mapped; i = m.b(i).next) {
      s.blocks.push_back({m.b(i).size, m.b(i).requested, m.b(i).allocated});
      s.size += m.b(i).size;
    }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const SegmentInfo& x, const SegmentInfo& y) { return x.address < y.address; });
  return out;
}

}  // namespace actmem
