#include "report/render.h"

#include <fmt/format.h>

#include "engine/prepared.h"
#include "report/timeline_report.h"  // memory.timeline, memory.reserved_bytes
#include "util/text_table.h"
#include "policies/loss_impl.h"  // loss_name (--loss)
#include "policies/finetune.h"  // finetune_summary(), lora_targets_name()

namespace actmem {

namespace {

// Output fits a 100-column terminal: long lines wrap with a hanging indent.
constexpr std::size_t kColumns = 100;

nlohmann::json shape_json(const std::vector<Factor>& shape) {
  auto arr = nlohmann::json::array();
  for (const auto& f : shape) arr.push_back({{"symbol", f.symbol}, {"value", f.value}});
  return arr;
}

std::string header_lines(const Report& r);

std::string uneven_stages(const ParallelLayout& p) {
  std::string out;
  if (p.first_stage_layers > 0) out += fmt::format("first stage {} layers", p.first_stage_layers);
  if (p.last_stage_layers > 0) out += fmt::format("{}last stage {} layers", out.empty() ? "" : ", ", p.last_stage_layers);
  return " (" + out + ")";
}

/// The request in four lines (model, workload, training, parallel), each wrapped at kColumns.
std::string header(const Report& r) {
  std::string out;
  std::string text = header_lines(r);
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    out += wrap(text.substr(start, end - start), kColumns, "           ") + "\n";
    start = end + 1;
  }
  return out;
}

std::string header_lines(const Report& r) {
  const auto& w = r.workload;
  const auto& l = r.layout;
  const auto& p = l.parallel;
  std::string out;
  if (r.model)
    out += fmt::format("Model      {} (model_type {}: L={} h={} a={} kv={} d={} V={})\n", r.model_name,
                       r.model->model_type, r.model->num_layers, r.model->hidden, r.model->num_heads,
                       r.model->num_kv_heads, r.model->head_dim, r.model->vocab);
  else
    out += fmt::format("Model      {}\n", r.model_name);
  if (r.model)
    out += fmt::format("Workload   seq {} × micro-batch {}, activations {}, framework {}, attention {}, recompute {}\n",
                       l.seq_len, l.micro_batch, dtype_name(w.dtype), kFrameworkNames.name(w.framework),
                       kAttentionNames.name(w.attention),
                       w.framework == Framework::kTorchtitan && l.recompute == Recompute::kSelective
                           ? (l.selective_ac_every > 0 ? fmt::format("selective (every {} blocks)", l.selective_ac_every)
                                                       : std::string("selective (per op)"))
                           : std::string(kRecomputeNames.name(l.recompute)));
  out += fmt::format("Training   weights {}, grads {}, {}, {}{}{}\n", dtype_name(w.weight_dtype),
                     dtype_name(w.grad_dtype), kOptimizerNames.name(w.optimizer),
                     w.framework == Framework::kTorchtitan ? std::string("FSDP2 (fully_shard)")
                                                           : fmt::format("ZeRO-{}", l.zero_stage),
                     l.offload_optimizer ? ", optimizer offloaded" : "", finetune_summary(w));
  out += fmt::format("Parallel   dp {} tp {}{} pp {}{} cp {} ep {}{}{}\n", p.dp, p.tp, p.sp ? " (sp)" : "", p.pp,
                     p.vpp > 1                                             ? fmt::format(" (vpp {})", p.vpp)
                     : p.first_stage_layers > 0 || p.last_stage_layers > 0 ? uneven_stages(p)
                                                                           : "",
                     p.cp, p.ep, p.etp > 0 ? fmt::format(" (etp {})", p.etp) : "",
                     p.num_micro_batches > 0 ? fmt::format(", {} micro-batches", p.num_micro_batches) : "");
  return out;
}

/// Every line of `text` wrapped at kColumns, continuing four columns deeper than it starts.
std::string wrap_lines_of(const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const std::size_t lead = line.find_first_not_of(' ');
    out += wrap(line, kColumns, std::string((lead == std::string::npos ? 0 : lead) + 4, ' ')) + "\n";
    start = end + 1;
  }
  return out;
}

std::string note_line(const std::string& note) { return wrap("note: " + note, kColumns, "      ") + "\n"; }

void add_term_row(TextTable& t, const Term& term) {
  t.add_row({{term.label},
             {fmt::format("{:.2f}", term.bytes.gib()), true},
             {group_digits(term.bytes.count()), true},
             {term.exactness == Exactness::kExact ? "exact" : "allowance"}});
}

}  // namespace

nlohmann::json terms_json(const Breakdown& b) {
  auto arr = nlohmann::json::array();
  for (const auto& t : b.terms) arr.push_back(term_json(t));
  return arr;
}

std::string render_terms(const Breakdown& b, bool with_total, bool derivation) {
  TextTable table;
  table.set_max_width(0, 56);
  table.add_row({{""}, {"GiB", true}, {"bytes", true}, {"kind"}});
  for (const auto& t : b.terms) {
    add_term_row(table, t);
    if (derivation) table.add_row({{"    " + t.formula + " = " + t.substituted}});
  }
  if (with_total) {
    table.add_rule();
    table.add_row({{"total"}, {fmt::format("{:.2f}", b.total().gib()), true}, {group_digits(b.total().count()), true}});
  }
  return b.title + "\n" + table.render();
}

nlohmann::json term_json(const Term& t) {
  nlohmann::json j = {{"key", t.key},          {"label", t.label},      {"formula", t.formula},
                      {"substituted", t.substituted}, {"bytes", t.bytes.count()},
                      {"exact", t.exactness == Exactness::kExact}};
  if (!t.note.empty()) j["note"] = t.note;
  return j;
}

namespace {

/// framework megatron: the options given beside the defaults (megatron_options.h), in `inputs`.
void megatron_inputs_json(const Workload& w, const Layout& l, nlohmann::json& in) {
  if (w.framework != Framework::kMegatron) return;
  if (!w.megatron.is_default()) {  // megatron_options.h
    in["transformer_impl"] = kTransformerImplNames.name(w.megatron.impl);
    in["fp8"] = kFp8RecipeNames.name(w.megatron.fp8);
    in["activation_func_fp8_input_store"] = w.megatron.fp8_act_input_store;
    in["recompute_modules"] = recompute_modules_name(w.megatron.recompute_modules);
  }
  if (w.megatron.no_rope_fusion) in["no_rope_fusion"] = true;
  if (w.megatron.moe_grouped_gemm) in["moe_grouped_gemm"] = true;
  if (w.megatron.dispatcher != MoeDispatcher::kAllgather)
    in["moe_token_dispatcher"] = kMoeDispatcherNames.name(w.megatron.dispatcher);
  if (!w.megatron.router.is_default()) {
    const MoeRouterOptions& ro = w.megatron.router;  // the router options given (unset: the model's)
    if (ro.score != MoeScoreFunction::kModel) in["moe_router_score_function"] = kMoeScoreFunctionNames.name(ro.score);
    if (ro.expert_bias >= 0) in["moe_router_enable_expert_bias"] = ro.expert_bias > 0;
    if (ro.num_groups >= 0) in["moe_router_num_groups"] = ro.num_groups;
    if (ro.group_topk >= 0) in["moe_router_group_topk"] = ro.group_topk;
    if (ro.topk_scaling_factor >= 0) in["moe_router_topk_scaling_factor"] = ro.topk_scaling_factor;
    if (ro.load_balancing != MoeLoadBalancing::kModel)
      in["moe_router_load_balancing_type"] = kMoeLoadBalancingNames.name(ro.load_balancing);
    if (ro.aux_loss_coeff >= 0) in["moe_aux_loss_coeff"] = ro.aux_loss_coeff;
    if (ro.z_loss_coeff > 0) in["moe_z_loss_coeff"] = ro.z_loss_coeff;
    if (ro.dtype != MoeRouterDtype::kInput) in["moe_router_dtype"] = kMoeRouterDtypeNames.name(ro.dtype);
  }
  if (!w.megatron.cublas_workspace_config.empty()) in["cublas_workspace_config"] = w.megatron.cublas_workspace_config;
  if (l.parallel.optimizer_instances > 1) in["distributed_optimizer_instances"] = l.parallel.optimizer_instances;
  if (w.megatron.fp8_gpu != Fp8Gpu::kHopper) in["fp8_gpu"] = kFp8GpuNames.name(w.megatron.fp8_gpu);
}

/// Each pipeline stage's GPU, as the engine accounted it (Megatron logs the last rank: the last stage).
/// The experts' TP and the pipeline's schedule and split, when not the defaults.
void optional_parallel_inputs_json(const ParallelLayout& p, nlohmann::json& inputs) {
  if (p.etp > 0) inputs["etp"] = p.etp;
  if (p.microbatch_group > 0) inputs["microbatch_group"] = p.microbatch_group;
  if (p.first_stage_layers > 0) inputs["first_stage_layers"] = p.first_stage_layers;
  if (p.last_stage_layers > 0) inputs["last_stage_layers"] = p.last_stage_layers;
}

nlohmann::json stages_json(const Report& r) {
  auto arr = nlohmann::json::array();
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    const StageTotals& st = r.stages[i];
    arr.push_back({{"stage", i}, {"weights_bytes", st.weights}, {"gradients_bytes", st.gradients},
                   {"optimizer_bytes", st.optimizer}, {"fp8_weight_cache_bytes", st.fp8_weight_cache},
                   {"workspaces_bytes", st.workspaces}, {"static_bytes", st.static_bytes()},
                   {"pipeline_inputs_bytes", st.pipeline_inputs_kept}, {"grad_copies_bytes", st.grad_copies_kept},
                   {"after_step_bytes", st.after_step()},
                   {"activations_bytes", st.activations}, {"transient_bytes", st.transient}, {"total_bytes", st.total}});
  }
  return arr;
}

}  // namespace

nlohmann::json report_json(const Report& r) {
  const auto& e = r.estimate;
  const auto& w = r.workload;
  const auto& l = r.layout;
  const auto& p = l.parallel;
  nlohmann::json j;
  j["model"] = {{"name", r.model_name}};
  if (r.model) {
    j["model"]["model_type"] = r.model->model_type;
    j["model"]["num_layers"] = r.model->num_layers;
    j["model"]["hidden_size"] = r.model->hidden;
  }
  j["inputs"] = {{"seq_len", l.seq_len},
                 {"micro_batch", l.micro_batch},
                 {"dtype", dtype_name(w.dtype)},
                 {"framework", kFrameworkNames.name(w.framework)},
                 {"hf_version", kHfVersionNames.name(w.hf_version)},
                 {"experts_impl", kExpertsImplNames.name(w.experts_impl)},
                 {"attention", kAttentionNames.name(w.attention)},
                 {"recompute", kRecomputeNames.name(l.recompute)},
                 {"weight_dtype", dtype_name(w.weight_dtype)},
                 {"grad_dtype", dtype_name(w.grad_dtype)},
                 {"optimizer", kOptimizerNames.name(w.optimizer)},
                 {"zero", l.zero_stage},
                 {"offload_optimizer", l.offload_optimizer},
                 {"dp", p.dp}, {"tp", p.tp}, {"sp", p.sp}, {"pp", p.pp}, {"vpp", p.vpp}, {"cp", p.cp},
                 {"ep", p.ep}, {"num_micro_batches", p.num_micro_batches},
                 {"reserve_bytes", l.reserve.count()}};
  megatron_inputs_json(w, l, j["inputs"]);
  if (w.framework == Framework::kTorchtitan && l.recompute == Recompute::kSelective)
    j["inputs"]["selective_ac_option"] =
        l.selective_ac_every > 0 ? std::to_string(l.selective_ac_every) : std::string("op");
  optional_parallel_inputs_json(p, j["inputs"]);
  j["params"] = {{"total", e.params.total()},
                 {"active", e.params.active()},
                 {"non_embedding", e.params.non_embedding()},
                 {"embedding", e.params.all_embedding()},
                 {"lm_head", e.params.lm_head},
                 {"per_gpu", e.static_memory.stage.total()}};
  j["memory"] = {{"weights_bytes", e.static_memory.weights.count()},
                 {"gradients_bytes", e.static_memory.gradients.count()},
                 {"optimizer_bytes", e.static_memory.optimizer.count()},
                 {"cpu_optimizer_bytes", e.static_memory.cpu_optimizer.count()},
                 {"static_bytes", e.static_memory.total().count()},
                 {"activations_bytes", r.totals.activations},
                 {"transient_bytes", r.totals.transient},
                 {"reserve_bytes", l.reserve.count()},
                 {"total_bytes", e.total().count()},
                 {"pipeline_stage", e.static_memory.stage.stage},
                 {"terms", terms_json(e.memory)}};
  if (w.framework == Framework::kMegatron && w.megatron.fp8 != Fp8Recipe::kNone)  // te_rules.h: in total_bytes
    j["memory"]["fp8_weight_cache_bytes"] = r.totals.fp8_weight_cache;
  if (r.totals.workspaces > 0) j["memory"]["workspaces_bytes"] = r.totals.workspaces;  // workspaces.h: in total_bytes
  if (!r.stages.empty()) j["memory"]["by_stage"] = stages_json(r);
  detail::add_timeline_json(r, j["memory"]);  // memory.reserved_bytes, memory.timeline
  if (w.loss != LossImpl::kFull) j["inputs"]["loss"] = loss_name(w.loss, w.loss_chunks);  // loss_impl.h
  if (w.freeze_embeddings) j["inputs"]["freeze_embeddings"] = true;
  if (w.frozen_layers != 0) j["inputs"]["frozen_layers"] = w.frozen_layers;
  if (w.packed_docs != 0) j["inputs"]["packed_docs"] = w.packed_docs;
  if (l.grad_accum != 1) j["inputs"]["grad_accum"] = l.grad_accum;
  // offload.h, cpu_offloading.h (the first N layers): saved activations in host memory, not in the GPU total.
  if (l.offload_activations) j["inputs"]["offload_activations"] = true;
  if (l.cpu_offloading_num_layers > 0) j["inputs"]["cpu_offloading_num_layers"] = l.cpu_offloading_num_layers;
  if (l.offload_activations || l.cpu_offloading_num_layers > 0)
    j["memory"]["host_activations_bytes"] = r.totals.host_activations;
  if (!finetune_summary(w).empty() || needs_weight_shapes(w)) {  // only then: default outputs stay as they were
    j["inputs"]["precision"] = kPrecisionNames.name(w.precision);
    j["inputs"]["optimizer_in_backward"] = w.optimizer_in_backward;
    if (w.lora.enabled())
      j["inputs"]["lora"] = {{"rank", w.lora.rank},
                             {"targets", lora_targets_name(w.lora.targets)},
                             {"dropout", w.lora.dropout},
                             {"base_weight_dtype", kBaseWeightNames.name(w.lora.base)},
                             {"double_quant", w.lora.double_quant},
                             {"adapter_dtype", dtype_name(w.lora.adapter_dtype)}};
    j["memory"]["paged_optimizer_bytes"] = r.totals.paged_optimizer;
  }
  nlohmann::json a;
  if (e.activations) {
    const auto& act = *e.activations;
    a = {{"per_layer_bytes", act.per_layer.count()},
         {"total_bytes", act.total.count()},
         {"in_flight_bytes", act.in_flight.count()},
         {"in_flight_stage", act.in_flight_stage},
         {"in_flight_by_stage", [&] {
            auto arr = nlohmann::json::array();
            for (Bytes b : act.in_flight_by_stage) arr.push_back(b.count());
            return arr;
          }()},
         {"recompute_peak_bytes", act.recompute_peak.count()},
         {"forward_flops", act.forward_flops},
         {"recompute_flops", act.recompute_flops},
         {"terms", terms_json(act.breakdown)},
         {"notes", act.notes}};
    auto tensors = nlohmann::json::array();
    for (const auto& t : act.tensors)
      tensors.push_back({{"name", t.name},
                         {"region", t.region},
                         {"op", t.op},
                         {"shape", shape_json(t.shape)},
                         {"dtype", dtype_name(t.dtype)},
                         {"bytes", t.bytes.count()},
                         {"formula", t.formula},
                         {"note", t.note}});
    a["tensors"] = tensors;
  } else {
    a = {{"per_layer_bytes", nullptr}, {"total_bytes", nullptr}, {"in_flight_bytes", nullptr},
         {"tensors", nlohmann::json::array()}};
  }
  j["activations"] = a;
  j["transients"] = terms_json(e.transients);
  j["notes"] = e.notes;
  return j;
}

std::string render_table(const Report& r) {
  const auto& e = r.estimate;
  std::string out = header(r);

  TextTable params;
  params.add_row({{"total"}, {group_digits(e.params.total()), true}});
  if (!e.param_only) {
    params.add_row({{"non-embedding"}, {group_digits(e.params.non_embedding()), true}});
    params.add_row({{"active per token"}, {group_digits(e.params.active()), true}});
  }
  params.add_row({{"on this GPU (before ZeRO)"}, {group_digits(e.static_memory.stage.total()), true}});
  out += "\nParameters\n" + params.render();

  TextTable mem;
  mem.set_max_width(0, 52);
  mem.add_row({{"term"}, {"GiB", true}, {"bytes", true}, {"kind"}});
  mem.add_rule();
  for (const auto& t : e.memory.terms) add_term_row(mem, t);
  mem.add_rule();
  mem.add_row({{"Total per GPU"}, {fmt::format("{:.2f}", e.total().gib()), true}, {group_digits(e.total().count()), true},
               {fmt::format("({:.2f} GB)", e.total().gb())}});
  const std::string reserved_note = detail::add_reserved_row(r, mem);
  out += "\n" + e.memory.title + "\n" + mem.render();
  if (!reserved_note.empty()) out += note_line(reserved_note);

  if (e.activations) {
    const auto& act = *e.activations;
    TextTable at;
    at.add_row({{"one layer (middle)"}, {format_binary(act.per_layer), true}, {group_digits(act.per_layer.count()), true}});
    at.add_row({{"whole model, one micro-batch"}, {format_binary(act.total), true}, {group_digits(act.total.count()), true}});
    // With PP, the peak GPU's stage may not be the stage with the most activations in flight.
    const int64_t peak_stage = e.static_memory.stage.stage;
    const bool pipelined = act.in_flight_by_stage.size() > 1;
    const Bytes here{r.totals.activations};
    at.add_row({{pipelined ? fmt::format("in flight on the peak GPU (stage {})", peak_stage + 1) : "in flight on this GPU"},
                {format_binary(here), true},
                {group_digits(here.count()), true}});
    if (pipelined && act.in_flight != here)
      at.add_row({{fmt::format("most in flight on any stage (stage {})", act.in_flight_stage + 1)},
                  {format_binary(act.in_flight), true},
                  {group_digits(act.in_flight.count()), true}});
    if (act.recompute_peak.count() > 0)
      at.add_row({{"+ peak while recomputing a segment"}, {format_binary(act.recompute_peak), true},
                  {group_digits(act.recompute_peak.count()), true}});
    out += "\nActivations\n" + at.render();
    if (act.forward_flops > 0) {
      TextTable ft;
      ft.set_max_width(2, 50);
      ft.add_row({{"forward FLOPs, one micro-batch"}, {fmt::format("{:.3g}", act.forward_flops), true}});
      if (act.recompute_flops > 0)
        ft.add_row({{"+ recomputation FLOPs"}, {fmt::format("{:.3g}", act.recompute_flops), true},
                    {fmt::format("+{:.1f}% of forward, +{:.1f}% of the step (forward + 2× backward)",
                                 100.0 * act.recompute_share_of_forward, 100.0 * act.recompute_share_of_step)}});
      out += ft.render();
    }
    if (!act.breakdown.terms.empty()) {
      TextTable bt;
    bt.set_max_width(0, 30);
    bt.set_max_width(1, 50);
      for (const auto& t : act.breakdown.terms)
        bt.add_row({{t.label}, {t.formula}, {format_binary(t.bytes), true}});
      out += "\n" + (act.breakdown.title.empty() ? std::string("Activation terms") : act.breakdown.title) + "\n" +
             bt.render();
    }
    for (const auto& n : act.notes) out += note_line(n);
  }
  if (!e.transients.terms.empty()) {
    TextTable tt;
    tt.set_max_width(0, 64);
    for (const auto& t : e.transients.terms) {
      const bool counted = t.key == e.peak_transient_key;
      tt.add_row({{t.label}, {format_binary(t.bytes), true}, {counted ? "counted" : "not coincident"}});
    }
    out += "\n" + e.transients.title + "\n" + tt.render();
  }
  for (const auto& n : e.notes) out += note_line(n);
  out += "\n'exact' terms are arithmetic on tensor shapes (activations are held to measured PyTorch in\n"
         "validation/); 'allowance' terms are settings you can change.\n";
  return out;
}

std::string render_explain(const Report& r) {
  const auto& e = r.estimate;
  std::string out = header(r);
  auto sizes = [](Bytes b) { return fmt::format("{} B ({}, {})", group_digits(b.count()), format_binary(b), format_decimal(b)); };
  auto explain = [&](const Breakdown& b) {
    out += "\n" + b.title + "\n";
    for (const auto& t : b.terms) {
      out += fmt::format("  {}\n    {}", t.label, t.formula);
      if (!t.substituted.empty() && t.substituted != t.formula) out += " = " + t.substituted;
      out += " = " + sizes(t.bytes) + "\n";
      if (!t.note.empty()) out += "    why: " + t.note + "\n";
    }
    out += "  sum = " + sizes(b.total()) + "\n";
  };
  explain(e.memory);
  if (e.activations) {
    const auto& act = *e.activations;
    out += "\nSaved tensors of one middle layer, then the model's other regions (each storage once)\n";
    for (const auto& t : act.tensors) {
      // The values in the formula's order: bytes per element first, then the shape.
      std::string values = fmt::format("{}", dtype_bytes(t.dtype));
      for (const auto& f : t.shape) values += fmt::format(" × {}", f.value);
      out += fmt::format("  [{}] {} ({}, {}): {} = {} = {} B{}\n", t.region, t.name, t.op, dtype_name(t.dtype),
                         t.formula, values, group_digits(t.bytes.count()), t.note.empty() ? "" : "  — " + t.note);
    }
    explain(act.breakdown);
    for (const auto& n : act.notes) out += note_line(n);
  }
  if (!e.transients.terms.empty()) explain(e.transients);
  for (const auto& n : e.notes) out += note_line(n);
  return wrap_lines_of(out);
}

}  // namespace actmem
