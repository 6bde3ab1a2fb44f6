#include "report/framework_notes.h"

#include <array>

#include <fmt/format.h>

#include "model/arch.h"            // hf_quirks: Llama 4
#include "tensors/mcore_router.h"  // the Megatron router note
#include "tensors/te_rules.h"      // megatron_notes

namespace actmem::detail {

namespace {

using Notes = std::vector<std::string>;

// transformers: the version's rules (Llama 4 is modeled for hf only: engine.cc check_llama4_workload).
void hf_notes(NoteAt at, const Prepared& p, const Layout& o, Notes& notes) {
  const ModelSpec& model = p.model;
  const Workload& w = p.workload;
  switch (at) {
    case NoteAt::kRules:
      if (hf_quirks(model).llama4)
        notes.push_back(fmt::format(
            "hf rules: transformers {} Llama4ForCausalLM (4.57 and 5 save the same): NoPE layers keep the fp32 "
            "temperature scales, RoPE layers the shared complex freqs_cis and L2 q/k norm statistics; eager "
            "softmax in the activation dtype; Llama4TextMoe runs every expert on every token (E·s·b rows)",
            kHfVersionNames.name(w.hf_version)));
      else if (w.hf_version == HfVersion::k5 && model.is_moe())
        notes.push_back(fmt::format(
            "hf rules: transformers 5 (hf_version, the default; 4.57 and 4.44 are the other choices): MoE experts "
            "as fused 3-D weights run by {} (experts_impl); everything else as the 4.57 rules",
            kExpertsImplNames.name(w.experts_impl)));
      else if (w.hf_version == HfVersion::k5)
        notes.push_back("hf rules: transformers 5 (hf_version, the default; 4.57 and 4.44 are the other choices): "
                        "for a model without MoE experts the same saves as the 4.57 rules");
      else
        notes.push_back(w.hf_version == HfVersion::k4_44
                            ? "hf rules: transformers 4.44 (hf_version): the loss keeps a log-softmax over the s−1 "
                              "shifted rows (GPT-2 in the activation dtype, Llama/Mistral/Qwen2 in fp32); the rest, "
                              "and the loss transient, are the 4.57 rules"
                            : "hf rules: transformers 4.57 (hf_version; 5, the default, and 4.44 are the other "
                              "choices)");
      return;
    case NoteAt::kRecompute:
      if (o.recompute == Recompute::kSelective && w.megatron.recompute_modules == kRecomputeCoreAttn)
        notes.push_back("selective recomputation is Megatron's (HF has none built in): core attention rerun, only "
                        "q, k and v stay of it");
      return;
    case NoteAt::kSharding:
      if (o.parallel.tp * o.parallel.cp > 1)
        notes.push_back(
            "HF has no tensor/context parallelism of its own: sharded as Megatron would shard the same tensors");
      return;
    case NoteAt::kMoe:
    case NoteAt::kFormula:
      return;
  }
}

// Megatron-core: its TE spec, fp8 and recompute modules (te_rules.h), its router and dispatcher.
void megatron_framework_notes(NoteAt at, const Prepared& p, const Layout& o, Notes& notes) {
  const ModelSpec& model = p.model;
  const Workload& w = p.workload;
  switch (at) {
    case NoteAt::kRules:
      for (auto& note : megatron_notes(model, w, o.recompute, o.parallel.cp)) notes.push_back(std::move(note));
      return;
    case NoteAt::kRecompute:
      if (o.recompute == Recompute::kSelective && w.megatron.recompute_modules == kRecomputeCoreAttn)
        notes.push_back("selective recomputation reruns core attention (Megatron): only q, k and v stay of it");
      return;
    case NoteAt::kMoe: {
      const McoreRouter router = resolve_mcore_router(*model.moe, w.megatron.router, w.dtype);
      const bool plain = !router.sigmoid && !router.expert_bias && router.groups == 0 && router.scaling == 0 &&
                         router.load_balancing == MoeLoadBalancing::kAuxLoss && !router.z_loss &&
                         router.dtype == MoeRouterDtype::kInput;
      const std::string topk = plain ? "TopKRouter with the aux loss on"
                                     : fmt::format("TopKRouter ({}{})", describe_mcore_router(router),
                                                   router.from_model ? "; from the model's config, as Megatron's "
                                                                       "DeepSeek-V3 recipe sets it"
                                                                     : "");
      notes.push_back(w.megatron.dispatcher == MoeDispatcher::kAlltoall
                          ? "Megatron MoE: " + topk + ", alltoall token dispatcher (its permute "
                            "keeps the int64 argsort of the whole E·s·b routing map), unfused permute, grouped "
                            "SwiGLU experts (validation/megatron_moe_validation.py)"
                          : "Megatron MoE: " + topk + ", allgather token dispatcher, unfused "
                            "permute, grouped SwiGLU experts (validation/megatron_moe_validation.py)");
      return;
    }
    case NoteAt::kFormula:
      if (model.norm == NormKind::kLayerNorm && !model.is_moe() && !model.mla && !model.gated_mlp)
        notes.push_back("Korthikanti et al. 2022 Eq. 1 (34·s·b·h + 5·a·s²·b) leaves out the fp32 LayerNorm "
                        "statistics (16·s·b per layer) counted here");
      return;
    case NoteAt::kSharding:
      return;
  }
}

// torchtitan's Llama 3 block and its two selective recomputation options.
void torchtitan_notes(NoteAt at, const Prepared&, const Layout& o, Notes& notes) {
  if (at != NoteAt::kRecompute) return;
  notes.push_back("torchtitan rules: its Llama 3 block (v0.2.2 models/llama3/model/model.py): fused RMSNorm keeps "
                  "its input and fp32 rstd; RoPE keeps only freqs_cis, a buffer (the fp32 q/k copies are "
                  "transient); sdpa keeps q, k, v, output and fp32 logsumexp; no dropout");
  if (o.recompute == Recompute::kSelective && o.selective_ac_every > 0)
    notes.push_back(fmt::format("selective_ac_option {}: every {}-th block (1-based) is wrapped in full activation "
                                "checkpointing and keeps its input; the others keep everything (_apply_layer_sac)",
                                o.selective_ac_every, o.selective_ac_every));
  else if (o.recompute == Recompute::kSelective)
    notes.push_back("selective_ac_option op: each block keeps its input and the outputs of the ops of _save_list "
                    "(sdpa; the 1st, 3rd, 5th, 7th mm: wq, wv, w1, w2); wk, wo, w3 and the elementwise ops are "
                    "recomputed (_apply_op_sac)");
}

using Writer = void (*)(NoteAt, const Prepared&, const Layout&, Notes&);
struct Row {
  Framework framework;
  Writer write;
};
constexpr std::array kWriters{Row{Framework::kHF, hf_notes}, Row{Framework::kMegatron, megatron_framework_notes},
                              Row{Framework::kTorchtitan, torchtitan_notes}};
static_assert(kWriters.size() == kFrameworkNames.rows.size(), "every framework writes its notes");

}  // namespace

void add_framework_notes(NoteAt at, const Prepared& p, const Layout& o, Notes& notes) {
  if (at == NoteAt::kMoe && !p.model.is_moe()) return;
  for (const Row& r : kWriters)
    if (r.framework == p.workload.framework) r.write(at, p, o, notes);
}

}  // namespace actmem::detail
