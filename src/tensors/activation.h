// Activation memory: the distinct storages the forward pass saves for backward, tensor by tensor,
// as defined in shared/spec/activation-rules.md, under a framework's save rules, recomputation
// and parallelism. The report types live here; the accounting is the engine's (engine.cc, op_graph.cc),
// and estimate_activations() is a convenience over prepare() + explain().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/breakdown.h"
#include "util/bytes.h"
#include "util/dtype.h"
#include "util/expected.h"
#include "model/model_spec.h"
#include "policies/options.h"
#include "policies/parallel.h"

namespace actmem {

struct ActivationOptions {
  int64_t seq_len = 0;     // s
  int64_t micro_batch = 1; // b
  DType dtype = DType::kBF16;
  Framework framework = Framework::kHF;
  AttentionImpl attention = AttentionImpl::kFlash;
  Recompute recompute = Recompute::kNone;
  int64_t recompute_layers = -1;  // with kFull: only this many layers (per stage) recomputed; -1 = all
  int64_t checkpoint_every = 0;   // with kFull: keep a checkpoint every k layers (0 = every layer)
  std::optional<double> hidden_dropout;     // unset = from the model (config.json)
  std::optional<double> attention_dropout;  // unset = from the model
  ParallelLayout parallel;
  HfVersion hf_version = HfVersion::k5;                // framework hf: the transformers code layout
  ExpertsImpl experts_impl = ExpertsImpl::kGroupedMm;  // hf_version 5: how the fused experts run
};

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

/// Example: estimate_activations(llama_2_70b, {.seq_len = 4096, .micro_batch = 2,
///   .recompute = Recompute::kFull}).value().per_layer == Bytes{134217728}.
Expected<ActivationReport> estimate_activations(const ModelSpec& model, const ActivationOptions& options);

}  // namespace actmem
