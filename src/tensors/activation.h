// Activation memory: the distinct storages the forward pass saves for backward, tensor by tensor,
// as defined in shared/spec/activation-rules.md, under a framework's save rules, recomputation
// and parallelism. The report types live here; the accounting is the engine's (engine.cc, op_graph.cc),
// and explain() fills them (its estimate's activations).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/breakdown.h"
#include "util/bytes.h"
#include "util/dtype.h"

namespace actmem {

/// One saved storage (after dedup): shape in symbols and values, dtype, bytes, formula.
struct SavedTensor {
  std::string name;     // "attn.q_rope"
  std::string region;   // "embedding", "layer", "head", "shared"
  std::string op;       // the op that saves it, e.g. "RMSNorm", "flash attention"
  std::vector<Factor> shape;  // e.g. {{"s",4096},{"b",2},{"h",8192}} (per GPU after sharding)
  DType dtype = DType::kBF16;
  Bytes bytes;
  std::string formula;  // "2·s·b·h"
  std::string note;     // e.g. "v is a view: the whole QKV output stays alive"
  std::string group;    // breakdown group: attention, mlp, norms, moe, embedding, head+loss, shared
};

struct ActivationReport {
  Bytes per_layer;   // one middle transformer layer, per GPU (after TP/SP/CP sharding)
  Bytes total;       // whole model, one micro-batch, all layers as if on one stage
  Bytes in_flight;   // per GPU on the most loaded pipeline stage, with the schedule's micro-batches
  Bytes recompute_peak;  // extra bytes live while one recomputed segment is re-run in backward
  Bytes layers_total;    // every transformer layer, one micro-batch (total without embedding/head/shared)
  Bytes embedding;       // embedding region, one micro-batch
  Bytes head_loss;       // final norm, LM head and loss, one micro-batch
  Bytes shared;          // tensors shared by all layers (RoPE cos/sin), counted once
  /// The transformer layers held by the first pipeline stage with its micro-batches in flight,
  /// without embedding, loss or shared tables: what Korthikanti et al. 2022 (Figure 1) plot.
  Bytes first_stage_layers_in_flight;
  std::vector<Bytes> in_flight_by_stage;  // per pipeline rank (size pp); in_flight is the largest
  int64_t in_flight_stage = 0;          // pipeline rank that in_flight describes
  int64_t in_flight_micro_batches = 0;  // micro-batches that rank holds (layer-weighted for vpp > 1)
  double forward_flops = 0;       // one micro-batch forward, whole model
  double recompute_flops = 0;     // extra forward FLOPs spent recomputing, per micro-batch
  double recompute_share_of_forward = 0;  // recompute_flops / forward_flops
  double recompute_share_of_step = 0;     // of a step taken as forward + backward = 3 × forward
  std::vector<SavedTensor> tensors;  // per-layer tensors of a middle layer, then embedding/head/shared
  Breakdown breakdown;               // grouped terms for renderers and `explain`
  std::vector<std::string> notes;    // plain statements of what was assumed
};

}  // namespace actmem
