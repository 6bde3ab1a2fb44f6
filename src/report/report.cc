// explain()'s report: the numbers account() computed, written out as terms (formula = values =
// bytes), the saved tensors of a middle layer with their shapes in symbols, and notes on what was
// assumed. Nothing here changes a total: every figure comes from Totals or the recorded sink, or is
// a per-group split of them read off the same bound graphs.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/engine.h"
#include "model/arch.h"  // hf_quirks: Llama 4
#include "report/loss_report.h"  // --loss: its transient term and note
#include "report/offload_report.h"  // --offload-activations: the GPU part, the working set
#include "report/cpu_offload_report.h"  // --cpu-offloading-num-layers: the GPU part, the PCIe traffic
#include "report/framework_notes.h"  // what each framework says
#include "report/fp8_report.h"  // fp8 weight cache of the block-scaled recipes and Blackwell
#include "report/workspaces_report.h"  // the cuBLAS workspaces term (policies/workspaces.h)
#include "report/after_step_report.h"  // what the last pipeline stage keeps after the step
#include "report/transients_report.h"  // the transients of the step, the largest in the peak
#include "policies/packed_docs.h"  // --packed-docs: its notes
#include "tensors/te_rules.h"  // the fp8 weight copies
#include "util/text_table.h"  // group_digits

namespace actmem::detail {

namespace {

struct Bound {
  SymValues values;
  SymTexts texts;
};

std::string storage_formula(const Storage& st, const SymTexts& x) {
  std::string out = std::to_string(dtype_bytes(st.dtype));
  for (const Dim& d : st.shape) out += "·" + dim_text(d, x);
  return out;
}

SavedTensor to_saved(const Storage& st, const char* region, const Bound& b) {
  SavedTensor t;
  t.name = st.name;
  t.region = region;
  t.op = st.op;
  for (const Dim& d : st.shape) t.shape.push_back(Factor{dim_text(d, b.texts), d.value(b.values)});
  t.dtype = st.dtype;
  t.bytes = Bytes{storage_bytes(st, b.values)};
  t.formula = storage_formula(st, b.texts);
  t.note = st.note;
  t.group = group_name(st.group);
  return t;
}

std::string join_formulas(const std::vector<const Storage*>& parts, const SymTexts& x) {
  std::string out;
  for (const auto* st : parts) {
    if (!out.empty()) out += " + ";
    out += storage_formula(*st, x);
  }
  return out;
}

/// The regions besides the layers, in the order they are listed.
struct Region {
  const Graph* graph;
  const char* name;
};
std::array<Region, 3> regions_of(const GraphSet& g) {
  return {{{&g.embedding, "embedding"}, {&g.head, "head"}, {&g.shared, "shared"}}};
}

/// Whether a region's storage is kept: embedding and head save theirs; the shared ones are saved by
/// layers that run normally or kept as checkpoint inputs (Storage::kept_shared), as recorded.
bool region_keeps(const RecordingSink& rec, const Graph* graph, const Storage& st) {
  return graph == &rec.binding.graphs->shared ? st.kept_shared(rec.shared_saved, rec.shared_kept)
                                              : st.saved(Recompute::kNone);
}

/// The totals account() found, and the recomputation FLOPs' shares.
void copy_activation_totals(const Totals& t, const RecordingSink& rec, ActivationReport& report) {
  report.per_layer = Bytes{t.per_layer};
  report.total = Bytes{t.activations_total};
  report.in_flight = Bytes{t.in_flight_max};
  report.recompute_peak = Bytes{t.recompute_peak};
  report.layers_total = Bytes{rec.layers_total};
  report.embedding = Bytes{rec.embedding};
  report.head_loss = Bytes{rec.head_loss};
  report.shared = Bytes{rec.shared};
  report.first_stage_layers_in_flight = Bytes{rec.first_stage_layers_in_flight};
  report.in_flight_by_stage = rec.in_flight_by_stage;
  report.in_flight_stage = t.in_flight_stage;
  report.in_flight_micro_batches = t.in_flight_micro_batches;
  report.forward_flops = t.forward_flops;
  report.recompute_flops = t.recompute_flops;
  if (t.forward_flops > 0) {
    // A step is forward + backward, backward ≈ 2 × forward (two matmuls per forward matmul: the input
    // and the weight gradients), as Narayanan et al. 2021 count it.
    report.recompute_share_of_forward = t.recompute_flops / t.forward_flops;
    report.recompute_share_of_step = t.recompute_flops / (3.0 * t.forward_flops);
  }
}

/// The saved tensors: the middle layer's under the policy, then embedding, head+loss, shared.
void list_saved_tensors(const Prepared& p, const Layout& o, const RecordingSink& rec, const Bound& mid_bound,
                        ActivationReport& report) {
  const GraphSet& g = *rec.binding.graphs;
  const Graph& mid = g.kinds[p.middle_kind].graph;
  if (o.recompute == Recompute::kFull) {
    auto t0 = to_saved(mid.storages[0], "layer", mid_bound);
    t0.note = "checkpoint: full recomputation keeps only the layer's input";
    report.tensors.push_back(std::move(t0));
  } else {
    for (const auto& st : mid.storages)
      if (st.saved(rec.listed)) report.tensors.push_back(to_saved(st, "layer", mid_bound));
  }
  for (const auto& region : regions_of(g)) {
    if (region.graph == &g.shared && report.shared == Bytes{0}) continue;
    for (const auto& st : region.graph->storages)
      if (region_keeps(rec, region.graph, st)) report.tensors.push_back(to_saved(st, region.name, mid_bound));
  }
}

/// One group of the layers' bytes, summed over all layers (recorded), with the middle layer's
/// storages of that group as its formula.
Term layer_group_term(const Prepared& p, const Layout& o, const RecordingSink& rec, const Bound& mid_bound, Group grp,
                      Bytes sum) {
  const Graph& mid = rec.binding.graphs->kinds[p.middle_kind].graph;
  const int64_t num_layers = p.model.num_layers;
  std::vector<const Storage*> parts;
  if (o.recompute == Recompute::kFull) {
    if (grp == Group::kNorms) parts.push_back(&mid.storages[0]);
  } else {
    for (const auto& st : mid.storages)
      if (st.group == grp && st.saved(rec.layer_policy)) parts.push_back(&st);
  }
  Term term;
  term.key = fmt::format("activations.layers.{}", group_name(grp));
  const bool partial = rec.partial;
  term.label = o.recompute != Recompute::kFull ? fmt::format("transformer layers: {}", group_name(grp))
               : partial ? fmt::format("layers: the first {} of each {}-layer chunk keep their input, the rest "
                                       "keep everything",
                                       o.recompute_layers, rec.binding.chunk_layers)
               : o.checkpoint_every > 1 ? fmt::format("layer inputs kept every {} layers (checkpoints)",
                                                      o.checkpoint_every)
                                        : "layer inputs kept by full recomputation";
  term.formula = partial ? std::string("Σ layers (input of a recomputed layer, everything of the others)")
                         : fmt::format("Σ layers ({} in the middle layer)", join_formulas(parts, mid_bound.texts));
  Bytes middle_bytes{0};
  for (const auto* st : parts) middle_bytes += Bytes{storage_bytes(*st, mid_bound.values)};
  // Uniform layers (or checkpoints): count × bytes; otherwise say that the layers differ.
  const bool whole_multiple = !partial && middle_bytes > Bytes{0} && sum.count() % middle_bytes.count() == 0;
  term.substituted = whole_multiple ? fmt::format("{} × {} B", sum.count() / middle_bytes.count(),
                                                  group_digits(middle_bytes.count()))
                     : partial      ? fmt::format("Σ over {} layers", num_layers)
                                    : fmt::format("Σ over {} layers (middle layer: {} B)", num_layers,
                                                  group_digits(middle_bytes.count()));
  term.bytes = sum;
  return term;
}

/// A region's kept storages as one term.
void add_region_term(const RecordingSink& rec, const Region& region, const Bound& mid_bound, Breakdown& breakdown) {
  std::vector<const Storage*> parts;
  Bytes sum{0};
  for (const auto& st : region.graph->storages)
    if (region_keeps(rec, region.graph, st)) {
      parts.push_back(&st);
      sum += Bytes{storage_bytes(st, mid_bound.values)};
    }
  if (parts.empty()) return;
  Term term;
  const char* grp = group_name(parts[0]->group);
  term.key = fmt::format("activations.{}", grp);
  term.label = grp;
  term.formula = join_formulas(parts, mid_bound.texts);
  for (const auto* st : parts)
    term.substituted += (term.substituted.empty() ? "" : " + ") + group_digits(storage_bytes(*st, mid_bound.values));
  term.bytes = sum;
  breakdown.add(std::move(term));
}

/// Breakdown of `total` by group: layers' groups summed over all layers, then the other regions.
Breakdown activation_breakdown(const Prepared& p, const Layout& o, const RecordingSink& rec, const Bound& mid_bound,
                               Bytes shared) {
  Breakdown breakdown;
  breakdown.title = "activations (one micro-batch, whole model)";
  for (Group grp : kLayerGroups) {
    const Bytes sum{rec.layer_groups[static_cast<std::size_t>(grp)]};
    if (sum == Bytes{0}) continue;
    breakdown.add(layer_group_term(p, o, rec, mid_bound, grp, sum));
  }
  const GraphSet& g = *rec.binding.graphs;
  for (const auto& region : regions_of(g)) {
    if (region.graph == &g.shared && shared == Bytes{0}) continue;
    add_region_term(rec, region, mid_bound, breakdown);
  }
  return breakdown;
}

/// Notes on the framework's rules, the attention backend, the loss and the model's wrapper.
void framework_notes(const Prepared& p, const Layout& o, std::vector<std::string>& notes) {
  const ModelSpec& model = p.model;
  const Workload& w = p.workload;
  notes.push_back(fmt::format("framework {}, attention {}, recompute {}, activations {} ({} bytes per element)",
                              kFrameworkNames.name(w.framework), kAttentionNames.name(w.attention),
                              kRecomputeNames.name(o.recompute), dtype_name(w.dtype), dtype_bytes(w.dtype)));
  notes.push_back("activation memory = distinct storages saved for backward; a saved view keeps its whole base "
                  "storage; norm statistics are fp32, dropout masks 1 byte");
  if (w.loss != LossImpl::kFull) notes.push_back(loss_note(w, model.hidden, model.vocab));
  const bool llama4 = hf_quirks(model).llama4;
  if (!model.wrapper_model_type.empty())
    notes.push_back(fmt::format("config.json is a multimodal wrapper (model_type '{}'): only its text_config model "
                                "is counted, parameters and activations; no vision encoder, no projector",
                                model.wrapper_model_type));
  add_framework_notes(NoteAt::kRules, p, o, notes);
  if (w.attention == AttentionImpl::kSdpa && w.packed_docs == 0)  // packed: its own note (packed_docs.h)
    notes.push_back("sdpa is modeled as its flash backend: q, k, v (KV heads), output and fp32 logsumexp");
  if (w.attention == AttentionImpl::kSdpa && llama4) {
    int64_t chunk = 0;
    for (const LayerSpec& l : model.layers)
      if (l.attention_chunk > 0 && (chunk == 0 || l.attention_chunk < chunk)) chunk = l.attention_chunk;
    if (chunk > 0 && o.seq_len >= chunk)
      notes.push_back(fmt::format("seq_len {} >= attention_chunk_size {}: the chunked layers pass sdpa an explicit "
                                  "mask, so CUDA runs its efficient or math backend, not flash; its saved mask/bias "
                                  "(up to b·s² per chunked layer) is not modeled",
                                  o.seq_len, chunk));
  }
}

/// Notes on what recomputation reruns and keeps (the framework's own rules first).
void recompute_notes(const Prepared& p, const Layout& o, const RecordingSink& rec, std::vector<std::string>& notes) {
  const KindBytes& mid_bytes = rec.kinds[p.middle_kind];
  const GraphSet& g = *rec.binding.graphs;
  add_framework_notes(NoteAt::kRecompute, p, o, notes);
  if (o.recompute == Recompute::kFull) {
    if (o.checkpoint_every > 0)
      notes.push_back(fmt::format("full recomputation with a checkpoint every {} layers: only segment-first layers "
                                  "keep their input; recompute_peak is one segment's activations",
                                  o.checkpoint_every));
    else if (o.recompute_layers >= 0)
      notes.push_back(fmt::format("full recomputation of the first {} layers of each model chunk (Megatron block "
                                  "method); the other layers keep {} each; per_layer is a recomputed layer",
                                  o.recompute_layers, format_binary(Bytes{mid_bytes.none})));
    else
      notes.push_back("full recomputation: each layer keeps only its input; embedding, final norm, LM head and loss "
                      "are not recomputed");
  }
  if (rec.shared_kept) {
    std::vector<std::string> inputs;
    for (const auto& st : g.shared.storages)
      if (st.checkpoint_input) inputs.push_back(st.name);
    if (!inputs.empty())
      notes.push_back(fmt::format("checkpointed layers keep what the model passes into them until backward ({}): "
                                  "shared by all layers, counted once in shared",
                                  fmt::join(inputs, ", ")));
  }
}

/// Notes on how tensor, context and expert parallelism shard the saved tensors.
void parallel_notes(const Prepared& p, const Layout& o, std::vector<std::string>& notes) {
  const ModelSpec& model = p.model;
  const ParallelLayout& par = o.parallel;
  const bool llama4 = model.model_type == "llama4_text";
  if (par.tp > 1)
    notes.push_back(par.sp ? "TP with sequence parallelism: what TP replicates is split along s by t"
                           : "TP splits heads, FFN and vocabulary; norms, residual-stream inputs and hidden dropout "
                             "masks stay whole on every rank");
  if (par.tp > model.num_kv_heads && !model.mla)
    notes.push_back(fmt::format("kv heads ({}) < tp ({}): each rank holds one replicated KV head",
                                model.num_kv_heads, par.tp));
  if (par.cp > 1)
    notes.push_back("CP: each rank holds s/cp of the sequence; ring attention keeps only its local q, k, v");
  if (model.is_moe()) {
    notes.push_back(llama4  // Llama 4 is modeled under the hf rules only (engine.cc)
                        ? "Llama4TextMoe: no dispatch; every expert's bmm runs on all s·b tokens, the unchosen "
                          "ones scaled by a zero routing score"
                    : model.moe->capacity_factor > 0
                        ? "MoE with a capacity factor: expert rows are the padded capacity E·⌈cf·k·s·b/E⌉ per GPU"
                        : "MoE dropless with balanced routing assumed: each GPU's experts see k·s·b token rows "
                          "(with ep > 1, its E/ep experts get their share of the ep ranks' tokens: EP is carved "
                          "out of the data- and context-parallel ranks, with etp < tp of tensor-parallel ones too)");
    if (par.tp > 1) notes.push_back(par.expert_tp() == par.tp ? std::string("MoE experts use TP = tp on their FFN; dispatched tokens are whole per TP rank")
                                                               : fmt::format("MoE experts use their own TP (etp {}) on their FFN; each rank's experts see k·s·b·etp/tp rows (the sequence-parallel shards of etp ranks)", par.expert_tp()));
  }
  add_framework_notes(NoteAt::kMoe, p, o, notes);
}

/// Notes on the pipeline schedule and on how FLOPs and the rule of thumb are counted.
void pipeline_and_flops_notes(const Prepared& p, const Layout& o, const ActivationReport& report,
                              std::vector<std::string>& notes) {
  const ModelSpec& model = p.model;
  const Workload& w = p.workload;
  const ParallelLayout& par = o.parallel;
  if (par.pp > 1)
    notes.push_back(fmt::format("pipeline 1F1B{}: in_flight is rank {} holding {} micro-batch(es){}",
                                par.vpp > 1 ? fmt::format(" interleaved (vpp {})", par.vpp) : "",
                                report.in_flight_stage, report.in_flight_micro_batches,
                                par.vpp > 1 ? " on its first chunk (Korthikanti factor 1 + (p−1)/(p·v))" : ""));
  add_framework_notes(NoteAt::kSharding, p, o, notes);
  if (w.packed_docs == 0 || w.attention != AttentionImpl::kFlash)  // packed flash: per document (packed_docs.h)
    notes.push_back("FLOPs count attention over the full s×s square (no causal halving), as Megatron's MFU formula does");
  add_framework_notes(NoteAt::kFormula, p, o, notes);
  {
    const double rule = 34.0 * static_cast<double>(o.seq_len) * static_cast<double>(o.micro_batch) *
                        static_cast<double>(model.hidden) / static_cast<double>(par.tp);
    notes.push_back(fmt::format("rule of thumb 34·s·b·h/t = {} per layer vs {} here: 34 assumes MHA, a 4h GeLU MLP "
                                "and dropout masks; GQA, SwiGLU with other f/h, no dropout and flash attention (no "
                                "s² terms) move it",
                                format_binary(Bytes{static_cast<int64_t>(rule)}), format_binary(report.per_layer)));
  }
}

ActivationReport describe_activations(const Prepared& p, const Layout& o, const Totals& t, const RecordingSink& rec) {
  const Bound mid_bound{rec.mid_values, sym_texts(p.model, o)};
  ActivationReport report;
  copy_activation_totals(t, rec, report);
  list_saved_tensors(p, o, rec, mid_bound, report);
  report.breakdown = activation_breakdown(p, o, rec, mid_bound, report.shared);
  // Notes: what was assumed.
  framework_notes(p, o, report.notes);
  recompute_notes(p, o, rec, report.notes);
  parallel_notes(p, o, report.notes);
  pipeline_and_flops_notes(p, o, report, report.notes);
  return report;
}

Term reserve_term(Bytes reserve) {
  Term t;
  t.key = "reserve";
  t.label = "Reserve: CUDA context and allocator slack (--reserve)";
  t.formula = "--reserve";
  t.substituted = format_binary(reserve);
  t.bytes = reserve;
  t.exactness = Exactness::kAllowance;
  return t;
}

/// Static memory of the peak stage, with its terms (by weight tensor for fine-tuning), and the
/// notes of fine-tuning, frozen layers, gradient accumulation and packed documents.
void describe_static_memory(const Prepared& p, const Layout& o, const Totals& t, const RecordingSink& rec,
                            TrainingEstimate& e) {
  const auto& par = o.parallel;
  Layout sharded = o;
  if (p.workload.framework == Framework::kTorchtitan) sharded.zero_stage = 3;  // FSDP2 (fsdp2.h)
  e.static_memory.stage = rec.stage;
  e.static_memory.num_stages = par.pp;
  e.static_memory.weights = Bytes{t.weights};
  e.static_memory.gradients = Bytes{t.gradients};
  e.static_memory.optimizer = Bytes{t.optimizer};
  e.static_memory.cpu_optimizer = Bytes{t.cpu_optimizer};
  describe_static(e.static_memory, p.per_param, p.workload, sharded,
                  p.workload.megatron.fp8_param_gather ? rec.fp8_weight_elements : 0);
  if (p.shape_static) {  // LoRA, Adafactor, paged optimizers, step in backward: by weight tensor
    const FinetuneStatic& fs = rec.finetune;
    e.static_memory.breakdown.terms =
        describe_finetune_static(fs, p.workload, o.zero_stage, par.dp * par.cp, o.offload_optimizer, e.static_memory.weights,
                                 e.static_memory.gradients, e.static_memory.optimizer);
    for (auto& note : finetune_notes(fs, p.workload)) e.notes.push_back(std::move(note));
    if (!p.param_only)
      for (auto& note : frozen_layers_notes(p.workload, p.workload.freeze_embeddings && !p.model.learned_positions,
                                            o.recompute, p.model.num_layers))
        e.notes.push_back(std::move(note));
  }
  if (!p.param_only) {
    for (auto& note : grad_accum_notes(p.workload, o)) e.notes.push_back(std::move(note));
    for (auto& note : packed_docs_notes(p.workload, o)) e.notes.push_back(std::move(note));
  }
}

/// TE's cached fp8 weight copies of the peak stage (te_rules.h): 2 bytes per weight element + a
/// 4-byte scale_inv per linear on Hopper with per-tensor scaling; fp8_report.cc for the others.
Term fp8_weight_cache_term(const Prepared& p, const Layout& o, const Totals& t, const RecordingSink& rec) {
  const auto& par = o.parallel;
  if (p.workload.megatron.fp8_param_gather)
    return describe_fp8_param_extras(p.workload.megatron, rec.fp8_weight_elements, rec.stage.num_layers, par.tp,
                                     rec.fp8_weight_copies);
  const Fp8Recipe fp8_recipe = p.workload.megatron.fp8;
  const bool per_tensor_hopper = (fp8_recipe == Fp8Recipe::kDelayed || fp8_recipe == Fp8Recipe::kTensorwise) &&
                                 p.workload.megatron.fp8_gpu == Fp8Gpu::kHopper;
  if (!per_tensor_hopper)
    return describe_fp8_weight_cache(p.workload.megatron, t.fp8_weight_cache, rec.fp8_weight_elements,
                                     rec.stage.num_layers, par.tp, rec.fp8_weight_copies);
  // Dense layers with standard attention: four linears a layer (the formula as before); MoE
  // (grouped experts: a copy per expert) and MLA layers: the stage's copies counted.
  const bool four_per_layer = rec.fp8_weight_copies == detail::kTeLinearsPerLayer * rec.stage.num_layers;
  std::vector<Factor> scale_factors{{"4", detail::kTeFp8ScaleInvBytes}};
  if (four_per_layer) {
    scale_factors.push_back({"4 linears", detail::kTeLinearsPerLayer});
    scale_factors.push_back({"L_stage", rec.stage.num_layers});
  } else {
    scale_factors.push_back({"n_fp8 weight copies", rec.fp8_weight_copies});
  }
  Term c = sum_term("fp8_weight_cache",
                    "TE fp8 weight copies cached per TE linear (rowwise data + columnwise transpose, fp32 scale_inv)",
                    {{{"2", detail::kTeFp8CopyBytesPerWeight}, {"Ψ_TE linears", rec.fp8_weight_elements}}, scale_factors});
  c.note = four_per_layer
               ? fmt::format("qkv, proj, fc1, fc2 of the stage's {} layers at tp {}: Float8Tensor data (out, in) + "
                             "_transpose (in, out) on Hopper (TE csrc/quantizer.cpp), kept in _fp8_workspaces across "
                             "micro-batches (TE linear.py l.1958-2071; Megatron passes is_first_microbatch, "
                             "extensions/transformer_engine.py l.1338-1345)",
                             rec.stage.num_layers, par.tp)
               : fmt::format("the TE linears of the stage's {} layers at tp {} (MLA's q/kv down and up projections "
                             "and linear_proj; the shared experts' fc1, fc2; one copy per local routed expert of "
                             "GroupedLinear fc1 and fc2, its _fp8_workspaces[\"weight{{i}}\"], TE grouped_linear.py "
                             "l.2259-2310): {} fp8 weight copies, Float8Tensor data (out, in) + _transpose (in, "
                             "out) on Hopper, kept across micro-batches",
                             rec.stage.num_layers, par.tp, rec.fp8_weight_copies);
  return c;
}

/// The saved activations on the GPU of the peak stage, or their offloaded part.
Term activations_term(const Prepared& p, const Layout& o, const Totals& t, const RecordingSink& rec,
                      std::vector<std::string>& notes) {
  Term a;
  a.key = "activations";
  a.label = o.parallel.pp > 1 ? "Saved activations in flight on this stage" : "Saved activations (one micro-batch)";
  a.formula = "Σ saved tensors (see activations)";
  a.substituted = fmt::format("{} per layer; {} for one micro-batch of the whole model",
                              format_binary(Bytes{t.per_layer}), format_binary(Bytes{t.activations_total}));
  a.bytes = Bytes{t.activations};
  if (o.offload_activations) {
    a = offloaded_activations_term(t);
    notes.push_back(offload_note(t));
  }
  if (rec.cpu_offload_layers_gpu >= 0) {  // Megatron --cpu-offloading-num-layers (cpu_offloading.h)
    a = cpu_offload_activations_term(t, rec, p.model.num_layers, o.cpu_offloading_num_layers);
    notes.push_back(cpu_offload_note(t, rec, p.model.num_layers, o.cpu_offloading_num_layers, o.grad_accum));
  }
  return a;
}

/// torchtitan: FSDP2's unsharded working set, on top of any transient (fsdp2.h).
void add_fsdp2_terms(const Fsdp2Transient& f, int64_t dp, TrainingEstimate& e) {
  Term gathered = product_term("fsdp2_gathered_blocks",
                               "FSDP2 all-gathered blocks (bf16 param_dtype): the running one + the prefetched next",
                               {{"2", 2}, {"2 blocks", 2}, {"Ψ_block", f.block_params}}, Exactness::kAllowance);
  gathered.note = "fully_shard per TransformerBlock, reshard_after_forward=True (apply_fsdp); one unit prefetched";
  e.memory.add(gathered);
  Term head = product_term("fsdp2_head_unsharded", "FSDP2 [norm, output] kept unsharded after forward (bf16)",
                           {{"2", 2}, {"Ψ_head", f.head_params}}, Exactness::kAllowance);
  head.note = "apply_fsdp: reshard_after_forward = (policy == \"always\") for [norm, output]";
  e.memory.add(head);
  Term grads = product_term("fsdp2_block_grads", "FSDP2 one block's unsharded gradients before reduce-scatter (fp32)",
                            {{"4", 4}, {"Ψ_block", f.block_params}}, Exactness::kAllowance);
  grads.note = "MixedPrecisionPolicy(reduce_dtype=float32): the reduce-scatter input";
  e.memory.add(grads);
  e.notes.push_back(fmt::format(
      "FSDP2 over dp {}: fp32 parameter, gradient and AdamW shards (4 + 4 + 8 bytes per parameter / dp); the "
      "unsharded working set (two bf16 blocks, the bf16 [norm, output] unit, one block's fp32 gradients) is "
      "counted beside the largest transient",
      dp));
}

}  // namespace

TrainingEstimate describe(const Prepared& p, const Layout& o, const Totals& t, const RecordingSink& rec) {
  const auto& par = o.parallel;
  TrainingEstimate e;
  e.param_only = p.param_only;
  e.params = p.param_only ? param_only_counts(p.param_count, par.pp) : p.params;
  describe_static_memory(p, o, t, rec, e);
  if (p.param_only) {
    e.memory.title = "Peak memory per GPU";
  } else {
    e.activations = describe_activations(p, o, t, rec);
    e.transients = describe_transients(p, o, t, rec);
    e.memory.title = par.pp > 1 ? fmt::format("Peak memory per GPU (pipeline stage {} of {}, the most loaded)",
                                              t.peak_stage + 1, par.pp)
                                : "Peak memory per GPU";
  }
  for (const auto& term : e.static_memory.breakdown.terms) e.memory.add(term);
  if (t.fp8_weight_cache > 0) e.memory.add(fp8_weight_cache_term(p, o, t, rec));
  if (t.workspaces > 0) e.memory.add(layout_workspaces_term(p, o, t.peak_stage));
  if (!p.param_only) {
    e.memory.add(activations_term(p, o, t, rec, e.notes));
    if (rec.fsdp2.present()) add_fsdp2_terms(rec.fsdp2, par.dp, e);
    add_peak_transient(e);
    add_pipeline_inputs_note(p, o, e);
    add_grad_copies_note(p, rec, e);
  }
  e.memory.add(reserve_term(o.reserve));
  if (p.param_only)
    e.notes.push_back("--params: a parameter count alone gives static memory; activations need an architecture (--model)");
  else
    e.notes.push_back(
        "gradients are counted as a persistent buffer (Megatron's grad buffer, DeepSpeed's partitions, DDP "
        "buckets); a single-GPU loop that sets gradients to None between steps peaks lower, by up to the "
        "gradient term");
  return e;
}

}  // namespace actmem::detail
