// Which layer keeps what under recomputation: the one place that decides it. The engine (bytes in
// flight, recomputed segments, recomputation FLOPs) and the report (terms, notes) both ask it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "policies/options.h"

namespace actmem::detail {

struct RecomputePlan {
  Recompute policy = Recompute::kNone;
  int64_t recompute_layers = -1;  // full, Megatron's block method: the first N layers of each chunk
  int64_t checkpoint_every = 0;   // full, uniform method: a checkpoint every k layers
  int64_t chunk_layers = 0;       // layers of one model chunk on one rank (a recomputation unit)
  // torchtitan selective per layer (selective_ac_option N): _apply_layer_sac counts the blocks
  // from 1 in model order and wraps block i (1-based) in full checkpointing when i % N == 0.
  int64_t selective_every = 0;

  static RecomputePlan of(const Layout& l, int64_t chunk_layers) {
    return {l.recompute, l.recompute_layers, l.checkpoint_every, chunk_layers,
            l.recompute == Recompute::kSelective ? l.selective_ac_every : 0};
  }

  /// torchtitan's every-N-th-layer selective checkpointing.
  bool layer_sac() const { return policy == Recompute::kSelective && selective_every > 0; }
  /// Under layer_sac(): whether the layer at 0-based `position` is checkpointed.
  bool layer_sac_checkpointed(int64_t position) const { return (position + 1) % selective_every == 0; }

  /// What layer `position` of a unit keeps: everything its ops save, the selective set, its input
  /// alone, or nothing (a layer inside a uniform-method segment).
  enum class Keeps : uint8_t { kAll, kSelective, kInput, kNothing };
  Keeps keeps(int64_t position) const {
    switch (policy) {
      case Recompute::kNone: return Keeps::kAll;
      case Recompute::kSelective:
        if (layer_sac()) return layer_sac_checkpointed(position) ? Keeps::kInput : Keeps::kAll;
        return Keeps::kSelective;
      case Recompute::kFull:
        if (checkpoint_every > 0) return position % checkpoint_every == 0 ? Keeps::kInput : Keeps::kNothing;
        if (recompute_layers >= 0) return position < recompute_layers ? Keeps::kInput : Keeps::kAll;
        return Keeps::kInput;
    }
    return Keeps::kAll;
  }
  /// Bytes layer `position` of a unit keeps, given what its kind saves with nothing recomputed,
  /// under selective recomputation, and its input alone.
  int64_t kept(int64_t none, int64_t selective, int64_t input, int64_t position) const {
    switch (keeps(position)) {
      case Keeps::kAll: return none;
      case Keeps::kSelective: return selective;
      case Keeps::kInput: return input;
      case Keeps::kNothing: return 0;
    }
    return none;
  }
  /// The first `input_run(n)` positions of an n-layer unit keep their input and the rest keep
  /// what their policy saves (everything, or the selective set); under the uniform method
  /// (`strided()`) every checkpoint_every-th position keeps its input and the others nothing.
  bool strided() const { return policy == Recompute::kFull && checkpoint_every > 0; }
  int64_t input_run(int64_t n) const {
    if (policy != Recompute::kFull) return 0;
    return recompute_layers >= 0 ? std::min(recompute_layers, n) : n;
  }
  /// Layers of an n-layer chunk re-run in backward: a leading run (all of them but under the block method).
  int64_t rerun(int64_t n) const {
    if (policy != Recompute::kFull) return 0;
    return recompute_layers >= 0 && checkpoint_every == 0 ? std::min(recompute_layers, n) : n;
  }
  /// Layers per recomputed segment, and how many leading layers of a chunk are recomputed.
  int64_t segment() const { return checkpoint_every > 0 ? checkpoint_every : 1; }
  /// Full recomputation of only the first N < chunk layers of each chunk (block method).
  bool partial() const {
    return policy == Recompute::kFull && checkpoint_every == 0 && recompute_layers >= 0 &&
           recompute_layers < chunk_layers;
  }
  /// Some layer runs without full recomputation (its ops save what they save, shared tables too).
  bool some_layer_not_recomputed() const {
    if (layer_sac()) return selective_every > 1;
    return policy != Recompute::kFull || partial();
  }
  /// Some layer (or segment) is checkpointed: what the model passes into it stays alive until its
  /// backward (the shared checkpoint inputs: masks, rotary tables, position ids).
  bool some_layer_recomputed() const {
    if (layer_sac()) return selective_every <= chunk_layers;
    return policy == Recompute::kFull && recompute_layers != 0;
  }
  /// The "per layer" figure is a recomputed layer's input (unless no layer is recomputed).
  bool per_layer_is_input() const { return policy == Recompute::kFull && recompute_layers != 0; }
};

}  // namespace actmem::detail
