// Every check of a layout against a model and workload, written once for two callers: evaluate()
// needs only the kind and the option at fault (no strings on the hot path), explain() and the
// Expected wrappers need the one-line message. A Reporter decides: its fail(kind, field, message)
// calls the `message` lambda only when it wants the text.
#pragma once

#include <numeric>  // std::gcd
#include <string>
#include <vector>

#include <fmt/format.h>

#include "actmem/expected.h"
#include "model/arch.h"  // hf_quirks: Llama 4
#include "model/model_spec.h"
#include "policies/options.h"
#include "policies/pipeline_split.h"
#include "policies/finetune.h"  // check_finetune

namespace actmem::detail {

/// Keeps the kind and the field; never formats.
struct FastReporter {
  ErrorKind kind = ErrorKind::kInvalid;
  const char* field = "";
  template <typename Message>
  bool fail(ErrorKind k, const char* f, Message&&) {
    kind = k;
    field = f;
    return false;
  }
};

/// Keeps the whole Error.
struct MessageReporter {
  Error error;
  template <typename Message>
  bool fail(ErrorKind k, const char* f, Message&& message) {
    error = Error{k, f, message()};
    return false;
  }
};

/// What the TP check needs of a model, computed once: every FFN size that TP splits shares the
/// divisors of their gcd.
struct TpFacts {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  bool mla = false;
  int64_t ffn_gcd = 0;  // gcd of the dense FFN sizes and the expert / shared-expert sizes
  static TpFacts of(const ModelSpec& m) {
    TpFacts f{m.num_heads, m.num_kv_heads, m.mla.has_value(), 0};
    for (const auto& l : m.layers)
      if (!l.moe) f.ffn_gcd = std::gcd(f.ffn_gcd, l.ffn);
    if (m.moe) f.ffn_gcd = std::gcd(std::gcd(f.ffn_gcd, m.moe->expert_ffn), m.moe->shared_ffn);
    return f;
  }
  // Does `tp` shard the model's heads? KV heads either divide evenly (kv % tp == 0) or, when there
  // are fewer KV heads than ranks, are replicated: each rank holds one KV head, which needs
  // tp % kv == 0. Megatron-LM itself asserts num_query_groups % tp == 0; vLLM and TransformerEngine
  // based stacks replicate, and we follow them so that e.g. Llama-3-70B (kv = 8) at tp = 16 is
  // still estimable.
  bool fits(int64_t tp) const {
    if (heads % tp != 0) return false;
    if (!mla && kv_heads % tp != 0 && tp % kv_heads != 0) return false;
    return ffn_gcd % tp == 0;
  }
};

// Largest degree we suggest in an error message; the list is a hint, not a limit.
constexpr int64_t kMaxSuggested = 128;

template <typename Fits>
std::string suggestions(int64_t limit, Fits&& fits) {
  std::string out;
  for (int64_t v = 1; v <= limit && v <= kMaxSuggested; ++v)
    if (fits(v)) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out.empty() ? "1" : out;
}

/// Ranges of the numbers, the dtypes training keeps, dropout in [0, 1): needs no model.
template <typename Reporter>
bool check_options(const Workload& w, const Layout& l, Reporter& r) {
  const auto& p = l.parallel;
  const struct {
    const char* field;
    int64_t value, lo, hi;
  } ranges[] = {
      {"seq_len", l.seq_len, 1, limits::kMaxSeqLen},
      {"micro_batch", l.micro_batch, 1, limits::kMaxMicroBatch},
      {"dp", p.dp, 1, limits::kMaxDp},
      {"tp", p.tp, 1, limits::kMaxTp},
      {"pp", p.pp, 1, limits::kMaxPp},
      {"vpp", p.vpp, 1, limits::kMaxVpp},
      {"cp", p.cp, 1, limits::kMaxCp},
      {"ep", p.ep, 1, limits::kMaxEp},
      {"etp", p.etp, 0, limits::kMaxTp},
      {"num_micro_batches", p.num_micro_batches, 0, limits::kMaxMicroBatches},
      {"microbatch_group", p.microbatch_group, 0, limits::kMaxMicroBatchGroup},
      {"first_stage_layers", p.first_stage_layers, 0, limits::kMaxLayers},
      {"last_stage_layers", p.last_stage_layers, 0, limits::kMaxLayers},
      {"zero_stage", l.zero_stage, 0, 3},
  };
  for (const auto& x : ranges)
    if (x.value < x.lo || x.value > x.hi)
      return r.fail(ErrorKind::kInvalid, x.field,
                    [&] { return fmt::format("@{} {} is out of range; use {}..{}", x.field, x.value, x.lo, x.hi); });
  const struct {
    const char* field;
    DType type;
  } dtypes[] = {{"dtype", w.dtype}, {"weight_dtype", w.weight_dtype}, {"grad_dtype", w.grad_dtype}};
  for (const auto& d : dtypes)
    if (d.type != DType::kBF16 && d.type != DType::kFP16 && d.type != DType::kFP32)
      return r.fail(ErrorKind::kInvalid, d.field, [&] {
        return fmt::format("@{} {}: training keeps bf16, fp16 or fp32 here; use one of those (quantized weights are "
                           "for actmem serve)",
                           d.field, dtype_name(d.type));
      });
  const struct {
    const char* field;
    std::optional<double> p;
  } dropouts[] = {{"hidden_dropout", w.hidden_dropout}, {"attention_dropout", w.attention_dropout}};
  for (const auto& d : dropouts)
    if (d.p && !(*d.p >= 0.0 && *d.p < 1.0))
      return r.fail(ErrorKind::kInvalid, d.field, [&] { return fmt::format("@{} {} must be in [0, 1)", d.field, *d.p); });
  if (l.reserve < Bytes{0})
    return r.fail(ErrorKind::kInvalid, "reserve", [] { return std::string("@reserve must not be negative"); });
  // Muon is Megatron's (core/optimizer/emerging_optimizers.py), modeled under its DDP and its
  // distributed optimizer; Megatron-FSDP with emerging optimizers raises NotImplementedError there
  // (core/optimizer/__init__.py _get_megatron_emerging_optimizer at d98e8a64).
  if (w.optimizer == Optimizer::kMuon &&
      (w.framework != Framework::kMegatron || l.zero_stage > 1 || needs_weight_shapes(w)))
    return r.fail(ErrorKind::kIncompatible, "optimizer", [&] {
      if (w.framework != Framework::kMegatron)
        return std::string("@optimizer muon is Megatron-LM's Muon; it applies to @framework megatron only");
      if (needs_weight_shapes(w))
        return std::string("@optimizer muon is modeled for full training; with frozen weights, LoRA or the step in "
                           "backward it is not; use @optimizer adamw");
      return fmt::format("@optimizer muon under @zero {} (Megatron-FSDP) is not modeled: Megatron does not run "
                         "its emerging optimizers there; use @zero 0 or 1",
                         l.zero_stage);
    });
  // fp8 primary weights are modeled under Megatron's DDP and distributed optimizer (te_rules.h);
  // Megatron-FSDP keeps its own fp8 shards and TE then caches nothing.
  if (w.megatron.fp8_param_gather && (l.zero_stage > 1 || needs_weight_shapes(w)))
    return r.fail(ErrorKind::kIncompatible, "fp8_param_gather", [&] {
      return l.zero_stage > 1 ? fmt::format("@fp8_param_gather under @zero {} (Megatron-FSDP) is not modeled; use "
                                            "@zero 0 or 1",
                                            l.zero_stage)
                              : std::string("@fp8_param_gather is modeled for full training; with frozen weights, "
                                            "LoRA or the step in backward it is not; drop it");
    });
  return check_finetune(w, l, r);
}

/// Megatron's interleaved schedule (schedules.py forward_backward_pipelining_with_interleaving): it
/// needs a pipeline, groups of M contiguous micro-batches per virtual stage with pp <= M <= m, and a
/// last group of m mod M that is 0 or at least pp ("dependency bubbles" otherwise). M is pp unless
/// given (--microbatch-group-size-per-virtual-pipeline-stage), so then m is a multiple of pp.
template <typename Reporter>
bool check_interleaved(const ParallelLayout& layout, Reporter& r) {
  if (layout.vpp > 1 && layout.pp == 1)
    return r.fail(ErrorKind::kIncompatible, "vpp", [&] {
      return fmt::format("@vpp {}: the interleaved schedule needs pipeline parallelism; use @pp 2 or more, or @vpp 1",
                         layout.vpp);
    });
  const int64_t group = layout.microbatch_group_or_pp();
  if (layout.microbatch_group > 0 && (layout.vpp == 1 || layout.microbatch_group < layout.pp))
    return r.fail(ErrorKind::kIncompatible, "microbatch_group", [&] {
      return layout.vpp == 1 ? fmt::format("@microbatch_group {}: only the interleaved schedule (@vpp 2 or more) "
                                           "groups micro-batches",
                                           layout.microbatch_group)
                             : fmt::format("@microbatch_group {}: Megatron needs at least @pp ({})",
                                           layout.microbatch_group, layout.pp);
    });
  const int64_t m = layout.num_micro_batches, last = m % group;
  if (layout.vpp > 1 && m > 0 && layout.microbatch_group == 0 && last != 0)
    return r.fail(ErrorKind::kIncompatible, "num_micro_batches", [&] {
      return fmt::format("@num_micro_batches {}: the interleaved schedule needs a multiple of @pp ({}); e.g. {}", m,
                         layout.pp, (m / layout.pp + 1) * layout.pp);
    });
  if (layout.vpp > 1 && m > 0 && m < group)
    return r.fail(ErrorKind::kIncompatible, "num_micro_batches", [&] {
      return fmt::format("@num_micro_batches {}: the interleaved schedule needs at least @microbatch_group ({})", m,
                         group);
    });
  if (layout.vpp > 1 && m > 0 && last > 0 && last < layout.pp)
    return r.fail(ErrorKind::kIncompatible, "num_micro_batches", [&] {
      return fmt::format("@num_micro_batches {}: with @microbatch_group {} the last group has {} micro-batch(es), "
                         "fewer than @pp ({}), which Megatron refuses; e.g. {}",
                         m, group, last, layout.pp, m - last);
    });
  return true;
}

/// Expert parallelism and the experts' own TP degree (MoE parallel folding): the experts split over
/// ep, each over etp, which must divide tp (each expert-TP group then gathers the tokens of etp
/// sequence-parallel shards) and the expert FFN.
template <typename Reporter>
bool check_experts(const ModelSpec& model, const ParallelLayout& layout, Reporter& r) {
  if (layout.ep > 1) {
    if (!model.is_moe())
      return r.fail(ErrorKind::kIncompatible, "ep",
                    [&] { return fmt::format("@ep {}: the model has no routed experts; use @ep 1", layout.ep); });
    if (hf_quirks(model).llama4)  // op_graph.cc llama4_moe: E·s·b rows on one rank
      return r.fail(ErrorKind::kIncompatible, "ep", [&] {
        return fmt::format("@ep {}: transformers' Llama4TextMoe runs all experts on every token on one rank; its "
                           "expert-parallel plan is not modeled; use @ep 1",
                           layout.ep);
      });
    if (model.moe->num_experts % layout.ep != 0)
      return r.fail(ErrorKind::kIncompatible, "ep", [&] {
        return fmt::format("@ep {}: num_experts ({}) is not divisible by {}; valid @ep values: {}", layout.ep,
                           model.moe->num_experts, layout.ep,
                           suggestions(model.moe->num_experts, [&](int64_t e) { return model.moe->num_experts % e == 0; }));
      });
  }
  if (layout.etp > 0 && layout.etp != layout.tp && model.is_moe() && !layout.sp)
    return r.fail(ErrorKind::kIncompatible, "etp", [&] {
      return fmt::format("@etp {} below @tp {} needs @sp: the experts take each rank's sequence-parallel shard "
                         "(Megatron asserts sequence parallelism for MoE with tensor parallelism)",
                         layout.etp, layout.tp);
    });
  if (layout.etp > 0 && model.is_moe() && (layout.tp % layout.etp != 0 || model.moe->expert_ffn % layout.etp != 0))
    return r.fail(ErrorKind::kIncompatible, "etp", [&] {
      return fmt::format("@etp {}: modelled when it divides @tp ({}) and the expert FFN ({}); use one of {}", layout.etp,
                         layout.tp, model.moe->expert_ffn,
                         suggestions(layout.tp, [&](int64_t e) { return layout.tp % e == 0 && model.moe->expert_ffn % e == 0; }));
    });
  return true;
}

/// The parallel layout against the model: heads and KV heads divisible by tp, layers by pp·vpp,
/// experts by ep, and so on. The message names the option and values that would work.
template <typename Reporter>
bool check_parallel(const ModelSpec& model, const TpFacts& tp_facts, const ParallelLayout& layout, Reporter& r) {
  const struct {
    const char* field;
    int64_t value;
  } degrees[] = {{"dp", layout.dp}, {"tp", layout.tp}, {"pp", layout.pp},
                 {"vpp", layout.vpp}, {"cp", layout.cp}, {"ep", layout.ep}};
  for (const auto& d : degrees)
    if (d.value < 1)
      return r.fail(ErrorKind::kInvalid, d.field, [&] { return fmt::format("@{} {}: must be at least 1", d.field, d.value); });
  if (layout.num_micro_batches < 0)
    return r.fail(ErrorKind::kInvalid, "num_micro_batches", [&] {
      return fmt::format("@num_micro_batches {}: must be >= 0 (0 = as many as the schedule holds)",
                         layout.num_micro_batches);
    });

  if (!tp_facts.fits(layout.tp))
    return r.fail(ErrorKind::kIncompatible, "tp", [&] {
      std::string why;
      if (model.num_heads % layout.tp != 0)
        why = fmt::format("num_attention_heads ({}) is not divisible by {}", model.num_heads, layout.tp);
      else if (!model.mla && model.num_kv_heads % layout.tp != 0 && layout.tp % model.num_kv_heads != 0)
        why = fmt::format("num_key_value_heads ({}) neither divides nor is divisible by {}", model.num_kv_heads,
                          layout.tp);
      else
        why = fmt::format("an FFN intermediate size is not divisible by {}", layout.tp);
      return fmt::format("@tp {}: {}; valid @tp values: {}", layout.tp, why,
                         suggestions(model.num_heads, [&](int64_t t) { return tp_facts.fits(t); }));
    });
  if (layout.sp && layout.tp == 1)
    return r.fail(ErrorKind::kIncompatible, "sp", [] {
      return std::string("@sp needs tensor parallelism: sequence parallelism splits what TP replicates; use @tp 2 or more");
    });

  const int64_t stages = layout.pp * layout.vpp;
  if (layout.first_stage_layers > 0 || layout.last_stage_layers > 0) {
    const char* field = layout.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers";
    if (layout.pp < 2)
      return r.fail(ErrorKind::kIncompatible, field, [&] {
        return fmt::format("@{} sets the layers of a pipeline stage; it needs @pp 2 or more", field);
      });
    // With the interleaved schedule a stage's layers split evenly over its vpp chunks (Megatron-core
    // get_num_layers_to_build asserts num_layers_per_pipeline_rank % vp_size == 0).
    for (const auto& [name, n] : {std::pair{"first_stage_layers", layout.first_stage_layers},
                                  std::pair{"last_stage_layers", layout.last_stage_layers}})
      if (n > 0 && n % layout.vpp != 0)
        return r.fail(ErrorKind::kIncompatible, name, [&, name = name, n = n] {
          return fmt::format("@{} {} with @vpp {}: each of the stage's {} model chunks holds the same number of "
                             "layers, so it must be a multiple of {}",
                             name, n, layout.vpp, layout.vpp, layout.vpp);
        });
    const int64_t given = (layout.first_stage_layers > 0 ? 1 : 0) + (layout.last_stage_layers > 0 ? 1 : 0);
    const int64_t others = layout.pp - given;
    const int64_t rest = model.num_layers - layout.first_stage_layers - layout.last_stage_layers;
    if (rest < others * layout.vpp || (others == 0 ? rest != 0 : rest % (others * layout.vpp) != 0))
      return r.fail(ErrorKind::kIncompatible, field, [&] {
        return fmt::format("@first_stage_layers {} @last_stage_layers {}: the other {} of @pp {} stages must split the "
                           "remaining {} of num_hidden_layers ({}) evenly, at least one layer each{}",
                           layout.first_stage_layers, layout.last_stage_layers, others, layout.pp, rest,
                           model.num_layers,
                           layout.vpp > 1 ? fmt::format(" per model chunk ({} chunks per stage)", layout.vpp)
                                          : std::string());
      });
  } else if (model.num_layers % stages != 0)
    return r.fail(ErrorKind::kIncompatible, "pp", [&] {
      return fmt::format("@pp {} @vpp {}: num_hidden_layers ({}) is not divisible by pp·vpp = {}; valid @pp values "
                         "with @vpp {}: {}",
                         layout.pp, layout.vpp, model.num_layers, stages, layout.vpp,
                         suggestions(model.num_layers, [&](int64_t p) {
                           // the interleaved schedule itself needs pp >= 2
                           return model.num_layers % (p * layout.vpp) == 0 && (layout.vpp == 1 || p > 1);
                         }));
    });
  if (!check_interleaved(layout, r)) return false;

  if (!check_experts(model, layout, r)) return false;
  return true;
}

/// The sequence against the layout: cp needs seq % (2·cp) == 0 (load-balanced causal context
/// parallelism cuts the sequence into 2·cp chunks), sp needs (seq / cp) % tp == 0.
template <typename Reporter>
bool check_sequence(int64_t seq_len, const ParallelLayout& layout, Reporter& r) {
  if (seq_len < 1)
    return r.fail(ErrorKind::kInvalid, "seq_len", [&] { return fmt::format("@seq_len {}: must be at least 1", seq_len); });
  if (layout.cp > 1 && seq_len % (2 * layout.cp) != 0)
    return r.fail(ErrorKind::kIncompatible, "cp", [&] {
      return fmt::format("@cp {}: load-balanced causal context parallelism cuts the sequence into 2·cp = {} chunks, "
                         "but @seq_len {} is not divisible by {}; e.g. @seq_len {}",
                         layout.cp, 2 * layout.cp, seq_len, 2 * layout.cp,
                         (seq_len / (2 * layout.cp) + 1) * 2 * layout.cp);
    });
  const int64_t local = seq_len / layout.cp;
  if (layout.sp && local % layout.tp != 0)
    return r.fail(ErrorKind::kIncompatible, "sp", [&] {
      return fmt::format("@sp with @tp {}: each rank's sequence ({}) must be divisible by tp; e.g. @seq_len {}",
                         layout.tp, local, (local / layout.tp + 1) * layout.tp * layout.cp);
    });
  return true;
}

/// Recomputation and attention options against the model's pipeline chunks.
template <typename Reporter>
bool check_recompute(const ModelSpec& model, const Workload& w, const Layout& o, Reporter& r) {
  if (o.recompute_layers >= 0 && o.checkpoint_every > 0)
    return r.fail(ErrorKind::kIncompatible, "recompute_layers", [] {
      return std::string("@recompute_layers and @checkpoint_every are two recomputation methods (Megatron's block "
                         "and uniform); pick one");
    });
  if ((o.recompute_layers >= 0 || o.checkpoint_every > 0) && o.recompute != Recompute::kFull)
    return r.fail(ErrorKind::kIncompatible, "recompute", [] {
      return std::string("@recompute_layers / @checkpoint_every apply to full recomputation; add @recompute full");
    });
  if (o.checkpoint_every < 0)
    return r.fail(ErrorKind::kInvalid, "checkpoint_every",
                  [&] { return fmt::format("@checkpoint_every {}: must be >= 1", o.checkpoint_every); });
  if (o.recompute_layers < -1)
    return r.fail(ErrorKind::kInvalid, "recompute_layers", [&] {
      return fmt::format("@recompute_layers {}: must be >= 0 (layers per pipeline chunk to recompute)",
                         o.recompute_layers);
    });
  const int64_t per_chunk = PipelineSplit::of(model.num_layers, o.parallel).largest_chunk();
  if (o.recompute_layers > per_chunk)
    return r.fail(ErrorKind::kIncompatible, "recompute_layers", [&] {
      return fmt::format("@recompute_layers {}: each pipeline chunk holds {} layers; use 0..{}", o.recompute_layers,
                         per_chunk, per_chunk);
    });
  if (o.checkpoint_every > per_chunk)
    return r.fail(ErrorKind::kIncompatible, "checkpoint_every", [&] {
      return fmt::format("@checkpoint_every {}: each pipeline chunk holds {} layers; use 1..{}", o.checkpoint_every,
                         per_chunk, per_chunk);
    });
  if (o.parallel.cp > 1 && w.attention == AttentionImpl::kEager)
    return r.fail(ErrorKind::kIncompatible, "cp", [] {
      return std::string("@cp with @attention eager: context parallelism is ring attention over flash kernels; use "
                         "@attention flash");
    });
  return true;
}

/// Static memory's own conditions: the optimizer instances split the dp·cp shard group; the experts'
/// grid fits in tp × cp × dp.
template <typename Reporter>
bool check_static(const ParallelLayout& par, Reporter& r) {
  if (par.optimizer_instances > 1 && (par.dp * par.cp) % par.optimizer_instances != 0)
    return r.fail(ErrorKind::kIncompatible, "distributed_optimizer_instances", [&] {
      return fmt::format("@distributed_optimizer_instances {} must divide dp·cp = {}: each instance shards over "
                         "dp·cp / N (parallel_state.py l.924-929)",
                         par.optimizer_instances, par.dp * par.cp);
    });
  if ((par.ep > 1 || par.etp > 0) && (par.tp * par.cp * par.dp) % (par.ep * par.expert_tp()) != 0)
    return r.fail(ErrorKind::kIncompatible, par.etp > 0 ? "etp" : "ep", [&] { return expert_grid_message(par); });
  return true;
}

}  // namespace actmem::detail
