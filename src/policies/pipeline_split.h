// Which layers each pipeline rank holds: the one place that decides it. Rank r holds model chunks
// j·pp + r for j < vpp (Megatron's interleaved schedule; one chunk per rank without it). Layers are
// split evenly, or, as Megatron-LM's --decoder-first-pipeline-num-layers /
// --decoder-last-pipeline-num-layers allow, with a given number on the first and/or last stage and
// the rest evenly over the others (Llama 3 405B: 126 layers on 16 stages, 7 + 14 × 8 + 7).
#pragma once

#include <algorithm>
#include <cstdint>

#include "policies/parallel.h"

namespace actmem::detail {

struct PipelineSplit {
  int64_t num_layers = 0;
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t first = 0;   // layers on the first stage (0: the even share)
  int64_t last = 0;    // layers on the last stage (0: the even share)
  int64_t middle = 0;  // layers on every other stage (per chunk when vpp > 1)

  /// Assumes a checked layout (check_parallel): the split is whole.
  static PipelineSplit of(int64_t num_layers, const ParallelLayout& p) {
    PipelineSplit s{num_layers, p.pp, p.vpp, p.first_stage_layers, p.last_stage_layers, 0};
    const int64_t given = (s.first > 0 ? 1 : 0) + (s.last > 0 ? 1 : 0);
    const int64_t others = p.pp * p.vpp - given;
    s.middle = others > 0 ? (num_layers - s.first - s.last) / others : 0;
    if (s.first == 0) s.first = s.middle;
    if (s.last == 0) s.last = s.middle;
    return s;
  }
  bool uneven() const { return first != middle || last != middle; }

  /// Model chunk c (0 .. pp·vpp − 1) in layer order: its first layer and its size. With uneven
  /// stages vpp is 1, so chunk c is stage c.
  int64_t chunk_size(int64_t c) const {
    if (c == 0) return first;
    if (c == pp * vpp - 1) return last;
    return middle;
  }
  int64_t chunk_begin(int64_t c) const { return c == 0 ? 0 : first + (c - 1) * middle; }
  /// Chunk j of pipeline rank r.
  int64_t chunk_of(int64_t rank, int64_t j) const { return j * pp + rank; }
  /// The largest chunk: what a recomputation option per chunk is bounded by.
  int64_t largest_chunk() const { return std::max({first, middle, last}); }
};

}  // namespace actmem::detail
