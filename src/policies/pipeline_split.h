// Which layers each pipeline rank holds: the one place that decides it. Rank r holds model chunks
// j·pp + r for j < vpp (Megatron's interleaved schedule; one chunk per rank without it). Layers are
// split evenly, or, as Megatron-LM's --decoder-first-pipeline-num-layers /
// --decoder-last-pipeline-num-layers allow, with a given number on the first and/or last stage and
// the rest evenly over the others (Llama 3 405B: 126 layers on 16 stages, 7 + 14 × 8 + 7). With
// the interleaved schedule each stage's layers are split evenly over its vpp chunks, so virtual
// stage j holds first/vpp + (pp − 2)·middle/vpp + last/vpp layers (Megatron-core
// transformer_block.py get_num_layers_to_build, transformer_layer.py get_transformer_layer_offset).
#pragma once

#include <algorithm>
#include <cstdint>

#include "policies/parallel.h"

namespace actmem::detail {

struct PipelineSplit {
  int64_t num_layers = 0;
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t first = 0;   // layers per chunk of the first stage
  int64_t last = 0;    // layers per chunk of the last stage
  int64_t middle = 0;  // layers per chunk of every other stage

  /// Assumes a checked layout (check_parallel): the split is whole.
  static PipelineSplit of(int64_t num_layers, const ParallelLayout& p) {
    PipelineSplit s{num_layers, p.pp, p.vpp, 0, 0, 0};
    const int64_t given = (p.first_stage_layers > 0 ? 1 : 0) + (p.last_stage_layers > 0 ? 1 : 0);
    const int64_t others = p.pp - given;
    const int64_t stage = others > 0 ? (num_layers - p.first_stage_layers - p.last_stage_layers) / others : 0;
    s.middle = stage / p.vpp;
    s.first = p.first_stage_layers > 0 ? p.first_stage_layers / p.vpp : s.middle;
    s.last = p.last_stage_layers > 0 ? p.last_stage_layers / p.vpp : s.middle;
    return s;
  }
  bool uneven() const { return first != middle || last != middle; }

  /// The rank of model chunk c (0 .. pp·vpp − 1, in layer order).
  int64_t rank_of(int64_t c) const { return c % pp; }
  /// Model chunk c in layer order: its first layer and its size.
  int64_t chunk_size(int64_t c) const { return chunk_size_on_rank(rank_of(c)); }
  /// The size of each chunk of pipeline rank r.
  int64_t chunk_size_on_rank(int64_t r) const {
    if (r == 0) return first;
    if (r == pp - 1) return last;
    return middle;
  }
  int64_t chunk_begin(int64_t c) const {
    const int64_t virtual_stage = pp == 1 ? first : first + (pp - 2) * middle + last;
    const int64_t j = c / pp, r = rank_of(c);
    return j * virtual_stage + (r == 0 ? 0 : first + (r - 1) * middle);
  }
  /// Chunk j of pipeline rank r.
  int64_t chunk_of(int64_t rank, int64_t j) const { return j * pp + rank; }
  /// The largest chunk: what a recomputation option per chunk is bounded by.
  int64_t largest_chunk() const { return std::max({first, middle, last}); }
  /// The layers of pipeline rank r (all its chunks).
  int64_t stage_layers(int64_t r) const { return chunk_size(r) * vpp; }
};

}  // namespace actmem::detail
