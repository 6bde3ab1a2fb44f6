#include "tensors/te_rules.h"

#include <fmt/format.h>

#include "tensors/mcore_router.h"  // check_mcore_router
#include "util/bytes.h"            // checked_mul, checked_add

namespace actmem::detail {

namespace {

/// Megatron's switches set under another framework: each is refused by name.
Expected<void> check_megatron_only(const MegatronOptions& o) {
  if (o.impl != TransformerImpl::kLocal)
    return Error{ErrorKind::kIncompatible, "transformer_impl",
                 "@transformer_impl is Megatron's layer spec; it applies to @framework megatron only"};
  if (o.fp8 != Fp8Recipe::kNone || o.fp8_act_input_store)
    return Error{ErrorKind::kIncompatible, "fp8",
                 "@fp8 models TransformerEngine fp8 under Megatron-core; it applies to @framework megatron "
                 "@transformer_impl transformer_engine only"};
  if (o.recompute_modules != kRecomputeCoreAttn)
    return Error{ErrorKind::kIncompatible, "recompute_modules",
                 "@recompute_modules is Megatron-core's selective recomputation; it applies to @framework "
                 "megatron only"};
  if (o.dispatcher != MoeDispatcher::kAllgather)
    return Error{ErrorKind::kIncompatible, "moe_token_dispatcher",
                 "@moe_token_dispatcher is Megatron-core's MoE token dispatcher; it applies to @framework "
                 "megatron only"};
  if (o.no_rope_fusion)
    return Error{ErrorKind::kIncompatible, "no_rope_fusion",
                 "@no_rope_fusion is Megatron's --no-rope-fusion; it applies to @framework megatron only"};
  if (o.moe_grouped_gemm)
    return Error{ErrorKind::kIncompatible, "moe_grouped_gemm",
                 "@moe_grouped_gemm is Megatron's --moe-grouped-gemm; it applies to @framework megatron only"};
  return {};
}

}  // namespace

Expected<void> check_megatron_workload(const ModelSpec& m, const Workload& w) {
  const MegatronOptions& o = w.megatron;
  if (auto v = check_mcore_router(m, w); !v) return v.error();
  if (auto gpu = check_fp8_gpu(w); !gpu) return gpu;  // --fp8-gpu, the block-scaled recipes
  // The MoE / MLA fp8 rules (TEGroupedMLP's 16-row Fp8Padding, one scale_inv per expert, the MLA
  // linears' fp8 copies) are the per-tensor recipes'; mxfp8 pads experts to 32 rows and keeps
  // block scales per expert, and the uncached per-micro-batch weight copies are written for the
  // four dense linears: not modeled yet, so refused rather than guessed.
  if (w.framework == Framework::kMegatron && (m.is_moe() || m.mla)) {
    if (o.fp8 == Fp8Recipe::kMxfp8 || o.fp8 == Fp8Recipe::kBlockwise)
      return Error{ErrorKind::kIncompatible, "fp8",
                   "@fp8 mxfp8 and blockwise are modeled for dense layers with standard attention, not yet for MoE "
                   "or MLA layers; use @fp8 delayed or tensorwise"};
    if (o.no_transpose_cache)
      return Error{ErrorKind::kIncompatible, "disable_parameter_transpose_cache",
                   "@disable_parameter_transpose_cache is modeled for dense layers with standard attention, not yet "
                   "for MoE or MLA layers (grouped expert and MLA weight copies per micro-batch); drop it"};
  }
  if (w.framework != Framework::kMegatron) return check_megatron_only(o);
  if (o.moe_grouped_gemm && (o.impl != TransformerImpl::kTransformerEngine || !m.is_moe()))
    return Error{ErrorKind::kIncompatible, "moe_grouped_gemm",
                 !m.is_moe() ? "@moe_grouped_gemm applies to MoE models only (this model has no experts); drop it"
                             : "@moe_grouped_gemm is TE's grouped GEMM (TEGroupedMLP); the local spec runs its experts "
                               "as SequentialMLP whatever the flag (models/backends.py); add @transformer_impl "
                               "transformer_engine or drop it"};
  // Modeled (and measured: validation/megatron_mla_validation.py, norope-fusion cases) for MLA only.
  if (o.no_rope_fusion && !m.mla)
    return Error{ErrorKind::kIncompatible, "no_rope_fusion",
                 "@no_rope_fusion is modeled for multi-latent attention only (kv_lora_rank); this model has "
                 "standard attention, whose unfused RoPE is not modeled; drop it"};
  if ((o.fp8 != Fp8Recipe::kNone || o.fp8_act_input_store) && o.impl != TransformerImpl::kTransformerEngine)
    return Error{ErrorKind::kIncompatible, "fp8",
                 "@fp8 runs through TransformerEngine's modules; add @transformer_impl transformer_engine"};
  if (o.fp8_act_input_store && !m.gated_mlp)
    return Error{ErrorKind::kIncompatible, "activation_func_fp8_input_store",
                 "@activation_func_fp8_input_store applies to Megatron's fused SwiGLU only; this model's MLP is "
                 "not gated; drop it"};
  // @attention eager under the TE spec is TE's UnfusedDotProductAttention (--attention-backend
  // unfused), whose saves are Megatron's local core attention's (op_graph.cc core_attention).
  // transformer_config.py l.2000-2005: "Delayed scaling does not support moe_act and layernorm
  // recompute for fp8" (both rely on set_save_original_input, which TE refuses for Float8Quantizer).
  // Megatron raises this for every model at start-up, so a dense model is refused too (its norms are
  // fused into TE LayerNormLinear, but the job would not start).
  if (o.fp8 == Fp8Recipe::kDelayed &&
      (o.recompute_modules & (kRecomputeMoeAct | kRecomputeLayernorm)))
    return Error{ErrorKind::kIncompatible, "recompute_modules",
                 "@recompute_modules moe_act and layernorm need a recipe other than delayed under fp8 (Megatron: "
                 "\"Delayed scaling does not support moe_act and layernorm recompute for fp8\"); use @fp8 tensorwise "
                 "or drop them"};
  if (o.recompute_modules & ~kRecomputeModulesModeled)
    return Error{ErrorKind::kIncompatible, "recompute_modules",
                 fmt::format("@recompute_modules {}: not yet modeled; drop it (core_attn, moe_act, layernorm, mlp, "
                             "moe, shared_experts and mla_up_proj are)",
                             recompute_modules_name(o.recompute_modules & ~kRecomputeModulesModeled))};
  // transformer_config.py l.1969-1973: "mla_up_proj in recompute_modules is only supported with
  // multi_latent_attention."
  if ((o.recompute_modules & kRecomputeMlaUpProj) && !m.mla)
    return Error{ErrorKind::kIncompatible, "recompute_modules",
                 "@recompute_modules mla_up_proj recomputes multi-latent attention's up projections; this model "
                 "has no MLA (no kv_lora_rank); drop mla_up_proj"};
  return {};
}

bool te_fused_input_norm(const ModelSpec& m, const Workload& w) {
  return w.framework == Framework::kMegatron && w.megatron.impl == TransformerImpl::kTransformerEngine && !m.mla;
}

bool te_fused_mlp_norm(const ModelSpec&, const Workload& w, bool moe_layer) {
  return w.framework == Framework::kMegatron && w.megatron.impl == TransformerImpl::kTransformerEngine && !moe_layer;
}

void apply_recompute_modules(Graph& g, const ModelSpec& m, const Workload& w, bool moe_layer) {
  if (w.framework != Framework::kMegatron) return;
  const unsigned mods = w.megatron.recompute_modules;
  const bool fused_attn_norm = te_fused_input_norm(m, w);
  const bool fused_mlp_norm = te_fused_mlp_norm(m, w, moe_layer);
  for (Storage& st : g.storages) {
    bool keep = st.saved(Recompute::kNone);
    if (mods & kRecomputeCoreAttn) {
      // _checkpointed_attention_forward (attention.py l.446): tensor_parallel.checkpoint keeps q, k, v.
      if (st.saved_by_core && !st.saved_outside_core) keep = false;
      if (st.core_input) keep = true;
    }
    if ((mods & kRecomputeMlp) && !moe_layer) {
      // transformer_layer.py l.537-539: tensor_parallel.checkpoint(self.mlp, ...) keeps its input only.
      if (st.mcore_tag & kTagMlp) keep = false;
      if (st.mcore_tag & kTagMlpInput) keep = true;
    }
    if ((mods & kRecomputeMoe) && moe_layer) {
      // moe_layer.py l.701-717: tensor_parallel.checkpoint(custom_forward, False, hidden_states, ...)
      // around router, dispatch, experts and shared experts keeps its input only.
      if (st.mcore_tag & kTagMlp) keep = false;
      if (st.mcore_tag & kTagMlpInput) keep = true;
    }
    // moe_layer.py l.517-530: tensor_parallel.checkpoint(shared_experts, False, hidden_states); the
    // input is the router's too, kept either way.
    if ((mods & kRecomputeSharedExperts) && (st.mcore_tag & kTagShared)) keep = false;
    // experts.py l.1019-1030: CheckpointWithoutOutput runs bias_act_func without saving (no fp8
    // copy then), keeps its inputs (fc1's output in the activation dtype, and the probs) and frees
    // the output once linear_fc2 saved it (random.py l.993). Inside a "moe" checkpoint nothing is.
    if ((mods & kRecomputeMoeAct) && !((mods & kRecomputeMoe) && moe_layer)) {
      if (st.mcore_tag & kTagMoeAct) keep = false;
      if (st.mcore_tag & kTagMoeActInput) keep = true;
    }
    if (mods & kRecomputeLayernorm) {
      // transformer_layer.py l.475-530: only a norm that is a module of its own (not IdentityOp):
      // CheckpointWithoutOutput runs it without saving and frees its output after the consumer saved
      // it (random.py l.993); the norm's input (the residual stream) is what stays.
      const bool attn_norm = (st.mcore_tag & kTagAttnNorm) && !fused_attn_norm;
      const bool mlp_norm = (st.mcore_tag & kTagMlpNorm) && !fused_mlp_norm;
      if (attn_norm || mlp_norm) keep = false;
    }
    if (mods & kRecomputeMlaUpProj) {
      // multi_latent_attention.py l.983-988, l.455-458: qkv_up_proj_and_rope_apply runs under
      // CheckpointWithoutOutput (no_grad: the up projections, their fused TE norms and RoPE save
      // nothing; its inputs q_compressed, kv_compressed, k_pos_emb are kept), and after core
      // attention saved query, key, value, discard_output_and_register_recompute frees them.
      if (st.mcore_tag & (kTagMlaUpOut | kTagMlaUpNorm)) keep = false;
      // Under SP its k_pos_emb input is the sequence-gathered rope key (TE spec) or a view of the
      // gathered kv_combined (local spec): kept by the checkpoint only (op_graph.cc latent_attention).
      if (st.mcore_tag & kTagMlaUpInput) keep = true;
    }
    st.selective_rule = keep ? 1 : 0;
  }
}

double selective_recompute_macs(const ModelSpec& m, const Workload& w, const LayerSpec& layer) {
  if (w.framework != Framework::kMegatron) return 0;
  const unsigned mods = w.megatron.recompute_modules;
  const double h = static_cast<double>(m.hidden);
  const double per_f = (m.gated_mlp ? 3.0 : 2.0) * h;  // fc1 (h·2f or h·f) + fc2 (f·h) per unit of f
  double macs = 0;
  if (!layer.moe) {
    if (mods & kRecomputeMlp) macs += per_f * static_cast<double>(layer.ffn);
  } else {
    const MoeSpec& e = *m.moe;
    const double shared = per_f * static_cast<double>(e.shared_ffn) + (e.shared_expert_gate ? h : 0.0);
    if (mods & kRecomputeMoe)  // router h·E, k routed experts, the shared experts
      macs += h * static_cast<double>(e.num_experts) +
              per_f * static_cast<double>(e.experts_per_token * e.expert_ffn) + shared;
    else if (mods & kRecomputeSharedExperts)
      macs += shared;
  }
  if (m.mla && (mods & kRecomputeMlaUpProj)) {
    // linear_q_up_proj (q_lora_rank -> n·dqk) or linear_q_proj (h -> n·dqk), linear_kv_up_proj
    // (kv_lora_rank -> n·(dn+dv)), rerun in backward (multi_latent_attention.py l.855-878)
    const MlaSpec& a = *m.mla;
    const double n = static_cast<double>(m.num_heads);
    const double q_in = a.q_lora_rank > 0 ? static_cast<double>(a.q_lora_rank) : h;
    macs += q_in * n * static_cast<double>(a.qk_head_dim()) +
            static_cast<double>(a.kv_lora_rank) * n * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim);
  }
  return macs;
}

bool te_fp8_weight_cache_on(const Workload& w, int zero_stage) {
  return w.framework == Framework::kMegatron && w.megatron.fp8 != Fp8Recipe::kNone && zero_stage != 3 &&
         !w.megatron.no_transpose_cache;  // without the cache: saved per micro-batch (te_rules.h)
}

namespace {
/// fc1 (2)·f·h + fc2 f·h of one MLP with intermediate f (already per TP rank).
int64_t te_mlp_elements(const ModelSpec& m, int64_t f) {
  return checked_add(checked_mul(checked_mul(m.gated_mlp ? 2 : 1, f), m.hidden), checked_mul(f, m.hidden));
}
int64_t local_experts(const MoeSpec& e, int64_t ep) { return (e.num_experts + ep - 1) / ep; }
}  // namespace

int64_t te_fp8_weight_elements(const ModelSpec& m, const LayerSpec& l, int64_t tp, int64_t ep, int64_t etp) {
  const int64_t h = m.hidden;
  const int64_t q_heads = m.num_heads / tp;
  int64_t attn = 0;
  if (m.mla) {
    const MlaSpec& a = *m.mla;
    const int64_t q = a.q_lora_rank > 0
                          ? checked_add(checked_mul(h, a.q_lora_rank),
                                        checked_mul(checked_mul(a.q_lora_rank, q_heads), a.qk_head_dim()))
                          : checked_mul(checked_mul(h, q_heads), a.qk_head_dim());
    const int64_t kv_down = checked_mul(h, a.kv_lora_rank + a.qk_rope_head_dim);
    const int64_t kv_up = checked_mul(checked_mul(a.kv_lora_rank, q_heads), a.qk_nope_head_dim + a.v_head_dim);
    const int64_t proj = checked_mul(checked_mul(q_heads, a.v_head_dim), h);
    attn = checked_add(checked_add(q, kv_down), checked_add(kv_up, proj));
  } else {
    const int64_t d = m.head_dim;
    const int64_t qkv = checked_mul(checked_mul(q_heads + 2 * m.kv_heads_per_rank(tp), d), h);
    const int64_t proj = checked_mul(checked_mul(q_heads, d), h);
    attn = checked_add(qkv, proj);
  }
  if (!l.moe) return checked_add(attn, te_mlp_elements(m, l.ffn / tp));
  const MoeSpec& e = *m.moe;
  const int64_t shared = e.shared_ffn > 0 ? te_mlp_elements(m, e.shared_ffn / tp) : 0;
  const int64_t routed = checked_mul(local_experts(e, ep), te_mlp_elements(m, e.expert_ffn / (etp > 0 ? etp : tp)));
  return checked_add(attn, checked_add(shared, routed));
}

int64_t te_fp8_weight_copies(const ModelSpec& m, const LayerSpec& l, int64_t ep) {
  const int64_t attn = m.mla ? (m.mla->q_lora_rank > 0 ? 5 : 4) : 2;
  if (!l.moe) return attn + 2;
  const MoeSpec& e = *m.moe;
  return attn + (e.shared_ffn > 0 ? 2 : 0) + 2 * local_experts(e, ep);
}

int64_t te_fp8_expert_rows(int64_t moe_rows, int64_t local) {
  if (local <= 0) return moe_rows;
  const int64_t per_expert = (moe_rows + local - 1) / local;
  return checked_mul(local, (per_expert + kTeFp8RowAlign - 1) / kTeFp8RowAlign * kTeFp8RowAlign);
}

uint16_t te_fp8_input_tag(const std::string& name) {
  if (name == "moe.experts.fc2") return kTagMoeAct;
  if (name == "moe.shared.gate_up" || name == "moe.shared.fc1") return kTagMlpNorm;
  if (name == "attn.q_a_proj" || name == "attn.kv_a_proj_with_mqa") return kTagAttnNorm;
  if (name == "attn.q_b_proj" || name == "attn.kv_b_proj" || name == "attn.q_proj") return kTagMlaUpNorm;
  return 0;
}

std::vector<std::string> megatron_notes(const ModelSpec& m, const Workload& w, Recompute recompute, int64_t cp) {
  std::vector<std::string> notes;
  if (w.framework != Framework::kMegatron || w.megatron.is_default()) return notes;
  const MegatronOptions& o = w.megatron;
  if (o.impl == TransformerImpl::kTransformerEngine && w.attention == AttentionImpl::kEager)
    notes.push_back(
        "megatron rules: transformer_impl transformer_engine (Megatron-LM's default; actmem's default is local): "
        "LayerNormLinear keeps its input, ln_out and fp32 rsigma (+ mu for LayerNorm); attention eager is TE's "
        "UnfusedDotProductAttention (--attention-backend unfused), keeping what Megatron's local core attention "
        "keeps: q, k and v (repeated to all heads under GQA; v a contiguous copy when RoPE made q and k new "
        "tensors), the softmax output (b, a/t, s, s), the dropout mask and probs");
  else if (o.impl == TransformerImpl::kTransformerEngine)
    notes.push_back(
        "megatron rules: transformer_impl transformer_engine (Megatron-LM's default; actmem's default is local): "
        "LayerNormLinear keeps its input, ln_out and fp32 rsigma (+ mu for LayerNorm); FusedAttention keeps q, k, "
        "v (v a contiguous copy when RoPE made q and k new tensors), its output, fp32 softmaxStats (b, a/t, s, 1) "
        "and a 16-byte rng_state");
  if (o.impl == TransformerImpl::kTransformerEngine && cp > 1)
    notes.push_back(fmt::format(
        "context parallelism: TE AttnFuncWithCPAndKVP2P (context_parallel.py l.2087-2142) keeps q, the last "
        "received k|v ring buffer (k's and v's bytes in one storage, in place of this rank's own), the output and "
        "fp32 softmax_lse (b, a/t, s/cp), and one 16-byte rng_state per ring step (l.2139): {} bytes per layer",
        16 * cp));
  if (o.impl == TransformerImpl::kLocal)
    notes.push_back("megatron rules: transformer_impl local (actmem's default; Megatron-LM defaults to "
                    "transformer_engine)");
  for (auto& note : fp8_recipe_notes(o)) notes.push_back(std::move(note));  // mxfp8, blockwise, --fp8-gpu
  if (o.fp8 == Fp8Recipe::kDelayed || o.fp8 == Fp8Recipe::kTensorwise)
    notes.push_back(fmt::format(
        "fp8 recipe {} (per-tensor scaling): ln_out and linear inputs kept as fp8 (1 byte per element: columnwise "
        "data, or the local rowwise shard a LayerNormLinear all-gathers under sequence parallelism) plus a 4-byte "
        "fp32 scale_inv each; attention q, k, v, out and the norm input stay in the activation dtype{}{}; the fp8 "
        "weight copies TE caches are the term fp8_weight_cache (Megatron's default parameter transpose cache; "
        "Hopper's separate transpose: on Blackwell one buffer serves both, half the bytes; not with "
        "--fp8-param-gather, whose fp8 weights replace the bf16 ones)",
        kFp8RecipeNames.name(o.fp8),
        o.fp8_act_input_store ? "; the SwiGLU input kept as float8_e4m3fn (activation_func_fp8_input_store)"
                              : ", and so does the SwiGLU input",
        o.fp8 == Fp8Recipe::kTensorwise ? "; linear_proj keeps its bf16 input, the attention output (Megatron "
                                          "set_save_original_input for recipes other than delayed)"
                                        : ""));
  if (o.fp8 != Fp8Recipe::kNone && m.is_moe())
    notes.push_back(
        "fp8 on MoE layers: TE GroupedLinear keeps each local expert's fc1 and fc2 input as its own columnwise fp8 "
        "copy + fp32 scale_inv, on rows TEGroupedMLP pads per expert to a multiple of 16 (Fp8Padding; balanced "
        "routing assumed: the rows k·s·b↑16); the router keeps its bf16 input; the shared experts are TE linears; "
        "under moe_act fc2 keeps its original input, which the checkpoint frees (set_save_original_input); the fp8 "
        "weight cache holds a copy per local expert (validation/EXPECTED.md \"megatron-te-fp8-moe-mla\")");
  if (o.fp8 != Fp8Recipe::kNone && m.mla)
    notes.push_back(
        "fp8 on MLA: linear_q_down_proj and linear_kv_down_proj each keep their own fp8 copy of the input norm's "
        "output, the up projections (LayerNormLinear) an fp8 ln_out; under recompute_modules layernorm the down "
        "projections keep their original input instead, freed with the norm output (set_save_original_input)");
  if (o.no_rope_fusion)
    notes.push_back("no_rope_fusion (apply_rope_fusion False): MLA's RoPE runs unfused (multi_latent_attention.py "
                    "l.920-981, rope_utils.py _apply_rotary_pos_emb_bshd): each of the q and k calls keeps its own "
                    "cos_ and sin_ (s, 1, 1, dr) in the activation dtype, 4·e·s·dr bytes per layer (none under "
                    "mla_up_proj, which runs it without grad)");
  if (recompute == Recompute::kSelective)
    notes.push_back(fmt::format("recompute_modules {} (recompute_granularity selective){}",
                                recompute_modules_name(o.recompute_modules),
                                (o.recompute_modules & kRecomputeMoeAct) && m.is_moe()
                                    ? "; moe_act assumes --moe-grouped-gemm (TEGroupedMLP), which Megatron requires "
                                      "for it (transformer_config.py l.1964)"
                                    : ""));
  return notes;
}

std::vector<std::string> fp8_recipe_notes(const MegatronOptions& o) {
  std::vector<std::string> notes;
  if (o.fp8 == Fp8Recipe::kMxfp8 || o.fp8 == Fp8Recipe::kBlockwise)
    notes.push_back(fmt::format(
        "fp8 recipe {}: ln_out and linear_fc2's input kept as their columnwise fp8 copy (1 byte per element; also "
        "the local shard under sequence parallelism) plus {}; linear_proj keeps its bf16 input (the attention "
        "output; Megatron set_save_original_input); attention q, k, v, out, the norm input and the SwiGLU input "
        "stay in the activation dtype{}; the term fp8_weight_cache holds TE's cached rowwise and columnwise weight "
        "copies with their scales{}",
        kFp8RecipeNames.name(o.fp8),
        o.fp8 == Fp8Recipe::kMxfp8
            ? "one e8m0 scale byte per 32 rows of a column, padded to pad(s·b/32, 4) x pad(K, 128)"
            : "one fp32 scale per 128-row tile of a column, ⌈s·b/128⌉ x pad(K, 4)",
        o.fp8_act_input_store ? " (SwiGLU's: float8_e4m3fn with activation_func_fp8_input_store)" : "",
        o.fp8 == Fp8Recipe::kMxfp8 ? "; MXFP8 runs on Blackwell (sm100) only and needs s·b and every K a multiple of 32"
                                    : "; blockwise needs Hopper or later with CUDA >= 12.9"));
  if (o.no_transpose_cache)
    notes.push_back(
        "disable_parameter_transpose_cache: Megatron passes is_first_microbatch None, TE caches no fp8 weight copy "
        "(linear.py l.1958): each forward quantizes every TE linear's weight anew and keeps it for dgrad, counted "
        "in each layer's saved tensors (weight_fp8: data + transpose on Hopper, 4-byte scale_inv) per micro-batch "
        "in flight; no fp8_weight_cache term, whatever the next note says");
  if (o.fp8_gpu == Fp8Gpu::kBlackwell && (o.fp8 == Fp8Recipe::kDelayed || o.fp8 == Fp8Recipe::kTensorwise))
    notes.push_back(
        "fp8_gpu blackwell: a per-tensor Float8Tensor keeps one data buffer for rowwise and columnwise use (no "
        "_transpose, TE csrc/quantizer.cpp l.361-376): the fp8_weight_cache term is 1 byte per weight, not 2 as "
        "the next note says for Hopper; saved activations are the same bytes");
  return notes;
}

int64_t te_fp8_scale_bytes(Fp8Recipe recipe, int64_t rows, int64_t cols, bool columnwise, bool weight_blocks) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  switch (recipe) {
    case Fp8Recipe::kNone:
      return 0;
    case Fp8Recipe::kDelayed:
    case Fp8Recipe::kTensorwise:
      return kTeFp8ScaleInvBytes;
    case Fp8Recipe::kMxfp8:  // e8m0, 1 byte each (MXFP8Quantizer::get_scale_shape)
      return columnwise ? checked_mul(pad_up(rows / kMxfp8BlockSize, 4), pad_up(cols, 128))
                        : checked_mul(pad_up(rows, 128), pad_up(cols / kMxfp8BlockSize, 4));
    case Fp8Recipe::kBlockwise: {  // fp32 (Float8BlockQuantizer::get_scale_shape)
      int64_t n = 0;
      if (weight_blocks)
        n = columnwise ? ceil_div(cols, kFp8BlockLen) * pad_up(ceil_div(rows, kFp8BlockLen), 4)
                       : ceil_div(rows, kFp8BlockLen) * pad_up(ceil_div(cols, kFp8BlockLen), 4);
      else
        n = columnwise ? checked_mul(ceil_div(rows, kFp8BlockLen), pad_up(cols, 4))
                       : checked_mul(ceil_div(cols, kFp8BlockLen), pad_up(rows, 4));
      return checked_mul(4, n);
    }
  }
  return 0;
}

int64_t te_fp8_weight_copy_bytes(Fp8Recipe recipe, Fp8Gpu gpu, int64_t out, int64_t in) {
  const int64_t n = checked_mul(out, in);
  if (recipe == Fp8Recipe::kDelayed || recipe == Fp8Recipe::kTensorwise)
    return checked_add(gpu == Fp8Gpu::kBlackwell ? n : checked_mul(kTeFp8CopyBytesPerWeight, n), kTeFp8ScaleInvBytes);
  // mxfp8 / blockwise: a rowwise and a columnwise copy, each with its own scales (128x128 weight blocks)
  return checked_add(checked_mul(2, n), checked_add(te_fp8_scale_bytes(recipe, out, in, false, true),
                                                    te_fp8_scale_bytes(recipe, out, in, true, true)));
}

int64_t te_fp8_weight_cache_layer_bytes(const ModelSpec& m, const LayerSpec& l, int64_t tp, int64_t ep,
                                        const MegatronOptions& o, int64_t etp) {
  if (o.fp8 == Fp8Recipe::kDelayed || o.fp8 == Fp8Recipe::kTensorwise) {
    // Hopper: data + transpose; Blackwell: one buffer. With fp8 weights the data is the weight (te_rules.h).
    const int64_t per_element = (o.fp8_gpu == Fp8Gpu::kHopper ? kTeFp8CopyBytesPerWeight : 1) - (o.fp8_param_gather ? 1 : 0);
    return checked_add(checked_mul(per_element, te_fp8_weight_elements(m, l, tp, ep, etp)),
                       checked_mul(kTeFp8ScaleInvBytes, te_fp8_weight_copies(m, l, ep)));
  }
  if (l.moe || m.mla) return 0;  // mxfp8 / blockwise refused there (check_megatron_workload)
  const int64_t h = m.hidden;
  const int64_t q = m.num_heads / tp * m.head_dim;
  const int64_t kv = m.kv_heads_per_rank(tp) * m.head_dim;
  const int64_t ffn = l.ffn / tp;
  const auto copy = [&](int64_t out, int64_t in) { return te_fp8_weight_copy_bytes(o.fp8, o.fp8_gpu, out, in); };
  return checked_add(checked_add(copy(q + 2 * kv, h), copy(h, q)),
                     checked_add(copy((m.gated_mlp ? 2 : 1) * ffn, h), copy(h, ffn)));
}

int64_t fp8_param_weight_saving(const Workload& w, int64_t elements) {
  if (!w.megatron.fp8_param_gather) return 0;
  return checked_mul(elements, dtype_bytes(w.weight_dtype) - 1);
}

Expected<void> check_fp8_gpu(const Workload& w) {
  const MegatronOptions& o = w.megatron;
  // Without @fp8 the GPU generation still sizes the cuBLAS workspaces (policies/workspaces.h).
  if (o.fp8_gpu == Fp8Gpu::kAmpere && o.fp8 != Fp8Recipe::kNone)
    return Error{ErrorKind::kIncompatible, "fp8",
                 "@fp8 needs an fp8 GPU: @fp8_gpu ampere (A100) has no fp8 tensor cores; use hopper or blackwell, or "
                 "drop @fp8"};
  // @cublas_workspace_config is parsed by prepare() (policies/workspaces.h).
  if (o.no_transpose_cache && o.fp8 == Fp8Recipe::kNone)
    return Error{ErrorKind::kIncompatible, "disable_parameter_transpose_cache",
                 "@disable_parameter_transpose_cache drops TE's cached fp8 weight copies; it applies with @fp8 only; "
                 "drop it"};
  if (o.no_transpose_cache && o.fp8 != Fp8Recipe::kDelayed && o.fp8 != Fp8Recipe::kTensorwise)
    return Error{ErrorKind::kIncompatible, "disable_parameter_transpose_cache",
                 "@disable_parameter_transpose_cache is modeled for the per-tensor recipes (delayed, tensorwise); "
                 "the per-micro-batch mxfp8 / blockwise weight copies with their block scales are not; drop it"};
  if (o.fp8_param_gather && o.fp8 != Fp8Recipe::kDelayed && o.fp8 != Fp8Recipe::kTensorwise)
    return Error{ErrorKind::kIncompatible, "fp8_param_gather",
                 "@fp8_param_gather (fp8 primary weights) is modeled with @fp8 delayed or tensorwise; with "
                 "mxfp8 / blockwise or without @fp8 it is not; drop it"};
  if (o.fp8_param_gather && o.no_transpose_cache)
    return Error{ErrorKind::kIncompatible, "fp8_param_gather",
                 "@fp8_param_gather with @disable_parameter_transpose_cache is not modeled; drop one of them"};
  return {};
}

}  // namespace actmem::detail
