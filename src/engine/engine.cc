// prepare(), evaluate(), explain(): one accounting routine (account()) over a model prepared once.
//
// prepare() builds the per-layer op graphs with symbolic dimensions (op_graph.h) for the four
// structural variants a layout can pick, the parameters of each layer kind, and the facts the
// checks need. A layout then binds the per-GPU values of the symbols and walks the layers once per
// pipeline rank: no graph is built and nothing is formatted unless explain() asks for the terms.
// account() runs the stages of engine/stages/ (account.h lists them) in order.
#include "engine/engine.h"
#include "engine/stages/account.h"  // the stages account() runs
#include "engine/timeline.h"
#include "model/arch.h"  // arch_row: families modelled for serving only
#include "model/encoder_head.h"  // set_encoder_head(): --head

#include <algorithm>
#include <atomic>
#include <utility>

#include <fmt/format.h>

#include "util/text_table.h"      // group_digits, for the --params name
#include "model/weight_tensors.h"  // lm_head_macs_per_token
#include "tensors/te_rules.h"        // check_megatron_workload
#include "policies/encoder_checks.h"  // encoders: HF, data parallelism only

namespace actmem {

const ModelSpec* PreparedModel::model() const { return impl_->param_only ? nullptr : &impl_->model; }
const Workload& PreparedModel::workload() const { return impl_->workload; }
const std::string& PreparedModel::name() const { return impl_->name; }

namespace {

/// Llama 4 text (model_type llama4_text) is modeled from transformers' modeling_llama4.py only.
Expected<void> check_llama4_workload(const ModelSpec& m, const Workload& w) {
  if (m.model_type != "llama4_text") return {};
  if (w.framework != Framework::kHF)
    return Error{ErrorKind::kIncompatible, "framework",
                 fmt::format("@framework {}: Llama 4 (NoPE layers, chunked attention, L2 q/k norm, its sigmoid "
                             "top-k MoE) is modeled for @framework hf only; use @framework hf",
                             kFrameworkNames.name(w.framework))};
  if (w.hf_version == HfVersion::k4_44)
    return Error{ErrorKind::kIncompatible, "hf_version",
                 "@hf_version 4.44: Llama 4 arrived in transformers 4.51 (modeling_llama4.py); use @hf_version 5 or "
                 "4.57"};
  if (w.attention == AttentionImpl::kFlash)
    return Error{ErrorKind::kIncompatible, "attention",
                 "@attention flash: transformers' Llama 4 does not support flash_attention_2 "
                 "(Llama4PreTrainedModel._supports_flash_attn = False); use @attention sdpa or eager"};
  if (w.experts_impl != ExpertsImpl::kGroupedMm)
    return Error{ErrorKind::kIncompatible, "experts_impl",
                 fmt::format("@experts_impl {}: Llama4TextExperts runs its own bmm over every expert (no experts "
                             "backend to choose); drop @experts_impl",
                             kExpertsImplNames.name(w.experts_impl))};
  return {};
}

/// The checks of a workload against its model, in the order errors are reported.
Expected<void> check_workload(const ModelSpec& model, const Workload& workload) {
  if (const ArchTraits* row = arch_row(model.model_type); row && !row->training_not_modelled.empty())
    return Error{ErrorKind::kIncompatible, "model",
                 fmt::format("model_type {}: actmem models it for serving only ({} are not modelled for training); "
                             "use `actmem serve`",
                             model.model_type, row->training_not_modelled)};
  if (auto v = check_llama4_workload(model, workload); !v) return v;
  if (auto v = detail::check_torchtitan_workload(model, workload); !v) return v;
  if (auto v = detail::check_megatron_workload(model, workload); !v) return v;
  if (auto v = detail::check_encoder_workload(model, workload); !v) return v;
  if (workload.framework == Framework::kHF && !detail::hf_version_modeled(model, workload.hf_version))
    return Error{ErrorKind::kIncompatible, "hf_version",
                 fmt::format("@hf_version {}: the transformers 4.44 rules are modeled for model_type gpt2, llama, "
                             "mistral and qwen2 only, not '{}'; use @hf_version 5 or 4.57",
                             kHfVersionNames.name(workload.hf_version), model.model_type)};
  // @experts_impl picks transformers 5's experts backend; elsewhere a choice other than the default
  // would be silently ignored (grouped_mm, the default, cannot be told apart from no choice).
  if (workload.experts_impl != ExpertsImpl::kGroupedMm &&
      (workload.framework != Framework::kHF || workload.hf_version != HfVersion::k5))
    return Error{ErrorKind::kIncompatible, "experts_impl",
                 fmt::format("@experts_impl {} applies to @framework hf with @hf_version 5 only (transformers 5's "
                             "experts backends); drop it, or use @framework hf @hf_version 5",
                             kExpertsImplNames.name(workload.experts_impl))};
  return {};
}

}  // namespace

Expected<PreparedModel> prepare(const ModelSpec& given, const Workload& workload) {
  // @head (encoders) replaces the head the config named: on a copy, before anything reads the model.
  ModelSpec headed;
  if (!workload.head.empty()) {
    headed = given;
    if (auto h = set_encoder_head(headed, workload.head); !h) return h.error();
  }
  const ModelSpec& model = workload.head.empty() ? given : headed;
  if (auto v = model.validate(); !v) return v.error();
  if (auto v = check_workload(model, workload); !v) return v.error();
  try {
    auto p = std::make_shared<detail::Prepared>();
    static std::atomic<uint64_t> next_id{1};
    p->id = next_id.fetch_add(1, std::memory_order_relaxed);
    p->name = model.name;
    p->model = model;
    p->workload = workload;
    p->per_param = workload.framework == Framework::kTorchtitan ? fsdp2_bytes_per_param(workload.optimizer)
                                                                : bytes_per_param(workload);
    if (workload.framework == Framework::kTorchtitan) {  // FSDP2 keeps fp32 shards of both (fsdp2.h)
      p->workload.weight_dtype = DType::kFP32;
      p->workload.grad_dtype = DType::kFP32;
    }
    p->params = count_params(model);
    p->tp_facts = detail::TpFacts::of(model);
    p->kind_of = detail::layer_kinds(model, detail::layer_grads(model, workload));
    for (bool gqa : {false, true})
      for (bool tp : {false, true}) {
        const detail::Variant v{gqa, tp};
        p->variants[v.index()] = detail::build_graphs(model, workload, v);
      }
    // Megatron MLA keeps other tensors under sequence parallelism (op_graph.cc latent_attention):
    // the SP variants (tp > 1 only) are built for it alone.
    // Under the TE spec also the CP variants (its ring buffer outlives what mla_up_proj frees).
    p->sp_variants = model.mla.has_value() && workload.framework == Framework::kMegatron;
    p->cp_variants = p->sp_variants && workload.megatron.impl == TransformerImpl::kTransformerEngine;
    for (bool gqa : {false, true})
      for (bool tp : {false, true})
        for (bool sp : {false, true})
          for (bool cp : {false, true}) {
            if ((!sp && !cp) || (sp && !(p->sp_variants && tp)) || (cp && !p->cp_variants)) continue;
            const detail::Variant v{gqa, tp, sp, cp};
            p->variants[v.index()] = detail::build_graphs(model, workload, v);
          }
    const auto& kinds = p->variants[0].kinds;
    p->num_kinds = kinds.size();
    p->kind_prefix.assign((p->kind_of.size() + 1) * p->num_kinds, 0);
    for (std::size_t i = 0; i < p->kind_of.size(); ++i)
      for (std::size_t k = 0; k < p->num_kinds; ++k)
        p->kind_prefix[(i + 1) * p->num_kinds + k] = p->kind_prefix[i * p->num_kinds + k] + (p->kind_of[i] == k ? 1 : 0);
    p->kind_params.resize(kinds.size());
    for (std::size_t i = 0; i < p->kind_of.size(); ++i) p->kind_params[p->kind_of[i]] = p->params.layers[i];
    p->middle_kind = p->kind_of[model.layers.size() / 2];
    p->lm_head_macs = lm_head_macs_per_token(model);
    auto workspaces = training_workspaces(workload, model.is_moe());  // the config was checked with the workload
    if (!workspaces) return workspaces.error();
    p->workspaces = *workspaces;
    p->shape_static = needs_weight_shapes(workload);
    // Every weight tensor: the static memory of fine-tuning (shape_static) and the largest gradient
    // of gradient accumulation (grad_accum.h).
    p->tensors = weight_tensors_with_frozen_layers(model, workload.frozen_layers);
    // @lora_targets against the model's projections (finetune.h): `all` keeps those it has.
    if (workload.lora.enabled() && workload.framework != Framework::kMegatron) {
      auto targets = resolve_lora_targets(p->tensors, model.fused_qkv, model.fused_gate_up, workload.lora.targets);
      if (!targets) return targets.error();
      p->workload.lora.targets = targets->targets;
      p->workload.lora.unmatched = targets->unmatched;
    }
    PreparedModel out;
    out.impl_ = std::move(p);
    return out;
  } catch (const OverflowError&) {
    return Error{ErrorKind::kOverflow, "model", "the model's sizes overflow 64-bit arithmetic; check the config"};
  }
}

Expected<PreparedModel> prepare_params_only(int64_t params, const Workload& workload) {
  if (params <= 0)
    return Error{ErrorKind::kInvalid, "params",
                 fmt::format("@params {} must be a positive parameter count, e.g. 7.5e9", params)};
  auto p = std::make_shared<detail::Prepared>();
  p->name = fmt::format("--params {}", group_digits(params));
  p->param_only = true;
  p->param_count = params;
  p->workload = workload;
  p->per_param = bytes_per_param(workload);
  auto workspaces = training_workspaces(workload, false);
  if (!workspaces) return workspaces.error();
  p->workspaces = *workspaces;
  PreparedModel out;
  out.impl_ = std::move(p);
  return out;
}

namespace detail {

template <typename Reporter, typename Sink>
bool account(const Prepared& p, const Layout& l, Totals& t, Reporter& reporter, Sink& sink) {
  t = Totals{};
  if (!check_layout(p, l, reporter)) return false;  // every stage's check, in the order errors are reported
  RecordingSink* rec = nullptr;
  if constexpr (Sink::kRecords) rec = &sink;
  if (p.param_only) {
    account_param_only(p, l, t, rec);
    return true;
  }
  Account a{.p = p, .l = l, .t = t, .rec = rec};
  bind_layer_kinds(a);      // each layer kind's bytes and FLOPs at this layout's symbol values
  account_activations(a);   // one micro-batch of the whole model under the recomputation plan
  account_layer_params(a);  // static memory: parameters of one layer of each kind per GPU
  account_recompute(a);     // the recomputed segment rerun in backward, the recomputation FLOPs
  account_transients(a);    // ZeRO-3 / FSDP2, the loss, the nf4 base, gradient accumulation
  account_offload(a);       // what activation offloading leaves on the GPU
  account_pipeline(a);      // per rank: micro-batches in flight, static bytes, the peak stage
  return true;
}

}  // namespace detail

bool evaluate(const PreparedModel& model, const Layout& layout, Totals& out) noexcept {
  detail::FastReporter reporter;
  detail::NullSink sink;
  try {
    if (detail::account(model.impl(), layout, out, reporter, sink)) return true;
    out.error = reporter.kind;
    out.error_field = reporter.field;
  } catch (const OverflowError&) {
    out.error = ErrorKind::kOverflow;
    out.error_field = "seq_len";
  } catch (...) {  // std::bad_alloc on the first call of a thread
    out.error = ErrorKind::kOverflow;
    out.error_field = "";
  }
  return false;
}

Expected<Report> explain(const PreparedModel& model, const Layout& layout) {
  detail::MessageReporter reporter;
  detail::RecordingSink sink;
  Report r;
  r.source = model;
  r.model_name = model.name();
  r.model = model.model();
  r.workload = model.workload();
  r.layout = layout;
  try {
    if (!detail::account(model.impl(), layout, r.totals, reporter, sink)) return reporter.error;
    r.estimate = detail::describe(model.impl(), layout, r.totals, sink);
    r.stages = std::move(sink.stages);
  } catch (const OverflowError&) {
    return Error{ErrorKind::kOverflow, "seq_len",
                 model.model() ? "activation sizes overflow 64 bits (size arithmetic overflowed int64); check @seq_len "
                                 "and @micro_batch"
                               : "the estimate overflowed 64-bit arithmetic; @params is absurd"};
  }
  return r;
}

namespace detail {

Expected<StepTimeline> step_timeline(const PreparedModel& model, const Layout& layout) {
  MessageReporter reporter;
  RecordingSink sink;
  Totals totals;
  try {
    if (!account(model.impl(), layout, totals, reporter, sink)) return reporter.error;
    return step_timeline(model.impl(), layout, totals, sink);
  } catch (const OverflowError&) {
    return Error{ErrorKind::kOverflow, "seq_len", "the step's timeline overflowed 64-bit arithmetic; check @seq_len"};
  }
}

}  // namespace detail

}  // namespace actmem

namespace actmem {

Expected<void> check_options(const Workload& workload, const Layout& layout) {
  detail::MessageReporter reporter;
  if (!detail::check_options(workload, layout, reporter)) return reporter.error;
  return {};
}

}  // namespace actmem
