// Megatron-core's MoE layer as an op graph (Megatron-LM @d98e8a64ddf3 megatron/core/transformer/moe/):
// the router's saves, the token dispatchers, the grouped experts, the unpermute and the shared
// experts; measured by validation/megatron_moe_validation.py (EXPECTED.md "megatron-moe").
#include <cstdint>

#include "tensors/graph_builder.h"
#include "tensors/mcore_router.h"  // Megatron TopKRouter options
#include "tensors/te_rules.h"      // --recompute-modules tags, fp8 expert rows

namespace actmem::detail::graph {

namespace {

/// TopKRouter.routing's top-k path (router.py l.775-832 @d98e8a64): the scores, the top-k and the
/// aux losses, as resolved in `r`.
void topk_routing_saves(Builder& g, const Context& c, const McoreRouter& r, const Shape& tokens, const Dim& experts,
                        const Dim& top_k) {
  const Group grp = Group::kMoe;
  const MoeSpec& spec = *c.model.moe;
  if (r.sigmoid)  // moe_utils.py l.917: sigmoid(logits.float()) keeps its output
    g.save(g.add("moe.scores", grp, "sigmoid", cat(tokens, {experts}), DType::kFP32,
                 "sigmoid(logits.float()), kept by its backward (and by gather with the expert bias)"));
  else if (!spec.normalize_topk)  // --moe-router-pre-softmax (no renormalization): softmax over E, then topk
    g.save(g.add("moe.scores", grp, "softmax", cat(tokens, {experts}), DType::kFP32,
                 "pre-softmax over all experts (fp32), kept by its backward"));
  if (r.groups > 0) {
    // group_limited_topk (moe_utils.py l.711-726): a top-(k/gk) per group, the top-gk groups, and
    // masked_fill keeping the mask of the experts outside the kept groups.
    g.save(g.add("moe.group_topk_index", grp, "group top-k",
                 Shape{c.s_rep, c.b, Dim::lit("G", r.groups), Dim::lit("k/gk", spec.experts_per_token / r.group_topk)},
                 DType::kINT64, "scores.view(T, G, E/G).topk(k / group_topk), kept by its topk"));
    g.save(g.add("moe.group_index", grp, "group top-k", cat(tokens, {Dim::lit("gk", r.group_topk)}), DType::kINT64,
                 "topk(group_scores, group_topk), kept by its topk"));
    g.save(g.add("moe.group_mask", grp, "masked_fill", cat(tokens, {experts}), DType::kBool,
                 "~score_mask, kept by masked_fill"));
  }
  // topk_routing_with_score_function (moe_utils.py l.896-931):
  g.save(g.add("moe.topk_index", grp, "top-k", cat(tokens, {top_k}), DType::kINT64,
               !r.sigmoid && !spec.normalize_topk ? "kept by topk; scatter keeps the same storage"
                                                  : "kept by topk; scatter(1, top_indices, probs) keeps the same storage"));
  if (r.sigmoid) {
    if (spec.experts_per_token > 1) {  // probs = scores / (scores.sum(-1, keepdim) + 1e-20)
      g.save(g.add("moe.topk_scores", grp, "top-k", cat(tokens, {top_k}), DType::kFP32,
                   r.expert_bias ? "gather(scores, top_indices), kept by the division"
                                 : "topk(scores), kept by the division"));
      g.save(g.add("moe.topk_score_sums", grp, "div", tokens, DType::kFP32, "sum + 1e-20, kept by the division"));
    }
  } else if (spec.normalize_topk) {
    // scores, top_indices = topk(logits); probs = softmax(scores, dtype=float32)
    g.save(g.add("moe.topk_probs", grp, "softmax", cat(tokens, {top_k}), DType::kFP32,
                 "softmax(top-k logits, dtype=float32) keeps its output"));
  }
  if (r.load_balancing != MoeLoadBalancing::kNone) {
    // The aux loss (router.py l.804-832, compute_routing_scores_for_aux_loss l.996-1008,
    // switch_load_balancing_loss_func l.146-149): the scores over all E, their topk, and
    // probs.sum(0) * tokens_per_expert keeping tokens_per_expert.
    if (r.sigmoid) {
      g.save(g.add("moe.aux_scores", grp, "aux loss", cat(tokens, {experts}), DType::kFP32,
                   "sigmoid(logits.float()) for the load-balancing loss, kept by sigmoid and the division"));
      g.save(g.add("moe.aux_score_sums", grp, "aux loss", tokens, DType::kFP32, "sum + 1e-20, kept by the division"));
    } else {
      g.save(g.add("moe.aux_scores", grp, "aux loss", cat(tokens, {experts}), DType::kFP32,
                   "fp32 softmax over all experts for the load-balancing loss"));
    }
    g.save(g.add("moe.aux_topk_index", grp, "aux loss", cat(tokens, {top_k}), DType::kINT64, "kept by its topk"));
    if (r.load_balancing == MoeLoadBalancing::kSeqAuxLoss)  // l.470-479: b folded into the expert dim
      g.save(g.add("moe.aux_tokens_per_expert", grp, "aux loss", Shape{c.b, experts}, DType::kINT64,
                   "routing_map.reshape(s, -1).sum(0), kept by the multiply"));
    else if (r.load_balancing == MoeLoadBalancing::kGlobalAuxLoss)  // l.529-531: the running buffer / steps
      g.save(g.add("moe.aux_tokens_per_expert", grp, "aux loss", {experts}, c.e,
                   "global_tokens_per_expert / ga_steps (a buffer in the params dtype), kept by the multiply"));
    else
      g.save(g.add("moe.aux_tokens_per_expert", grp, "aux loss", {experts}, DType::kINT64,
                   "routing_map.sum(0), kept by the multiply with the summed probs"));
  }
}

/// --moe-router-load-balancing-type sinkhorn (sinkhorn_load_balancing, router.py l.280-311 @d98e8a64):
/// in training the Sinkhorn iterations (moe_utils.py l.185-207) run on logits.float() under
/// torch.no_grad and only pick the experts (their topk keeps nothing); the probs are the activation of
/// the logits, masked: sigmoid(logits) for top-1 (keeps its output, in the logits' dtype), else
/// softmax(logits, dtype=float32) (keeps its fp32 output; .type_as(logits) keeps nothing); then
/// `scores = logits * map` keeps the bool routing map, the factor without a gradient. No aux loss
/// (l.298 asserts moe_aux_loss_coeff == 0) and no int64 top-k index is kept.
void sinkhorn_routing_saves(Builder& g, const Context& c, const McoreRouter& r, const Shape& tokens,
                            const Dim& experts) {
  const Group grp = Group::kMoe;
  if (c.model.moe->experts_per_token == 1)
    g.save(g.add("moe.scores", grp, "sigmoid", cat(tokens, {experts}), r.logits,
                 "sigmoid(logits) of sinkhorn routing, kept by its backward"));
  else
    g.save(g.add("moe.scores", grp, "softmax", cat(tokens, {experts}), DType::kFP32,
                 "softmax(logits, dtype=float32) of sinkhorn routing, kept by its backward"));
  g.save(g.add("moe.sinkhorn_map", grp, "mul", cat(tokens, {experts}), DType::kBool,
               "the routing map (the Sinkhorn top-k scattered), kept by logits * map"));
}

/// The router's saves (RouterGatingLinearFunction keeps x; the z-loss; top-k or Sinkhorn routing);
/// returns the routing probs' dtype.
DType router_saves(Builder& g, const Context& c, int x, const Shape& tokens, const Dim& experts, const Dim& top_k) {
  const Group grp = Group::kMoe;
  const MoeSpec& spec = *c.model.moe;
  // moe_layer.py l.660: the shared experts run first, on the same input (moe_shared below).
  // RouterGatingLinearFunction (moe_utils.py l.1381): save_for_backward(inp, weight, bias), always.
  g.save(x);
  const McoreRouter r = resolve_mcore_router(spec, c.workload.megatron.router, c.e);
  const DType pd = r.logits;  // probs.type_as(logits) (moe_utils.py l.936): the routing probs' dtype
  const int logits = g.add("moe.router_logits", grp, "router gating", cat(tokens, {experts}), pd,
                           r.dtype == MoeRouterDtype::kInput ? "in the input dtype (moe_router_dtype None)"
                                                             : "in --moe-router-dtype");
  if (r.z_loss) {
    // apply_z_loss (router.py l.655-679), z_loss_func (moe_utils.py l.169-181): logsumexp keeps
    // the logits and its result, square keeps the result.
    g.save(logits);
    g.save(g.add("moe.z_loss_logsumexp", grp, "z-loss", tokens, pd, "logsumexp(logits), kept by it and by square"));
  }
  if (r.sinkhorn)
    sinkhorn_routing_saves(g, c, r, tokens, experts);
  else
    topk_routing_saves(g, c, r, tokens, experts, top_k);
  return pd;
}

/// What the dispatcher decided that the experts' saves depend on.
struct Dispatch {
  Dim top_k;
  DType pd;       // the routing probs' dtype
  uint16_t tag;   // the MoE layer's --recompute-modules tag
  bool alltoall;  // MoEAlltoAllTokenDispatcher
  bool local_permute;  // alltoall without a capacity factor: permute on this rank's own tokens
};

/// The grouped experts (fc1, the weighted activation, fc2) and what the unpermute keeps.
void expert_saves(Builder& g, const Context& c, const Dispatch& d, const Shape& dispatched) {
  const Group grp = Group::kMoe;
  const Dim& top_k = d.top_k;
  const DType pd = d.pd;
  const uint16_t tag = d.tag;
  const bool alltoall = d.alltoall, local_permute = d.local_permute;
  // Under TE fp8 TEGroupedMLP pads each expert's rows, and the probs alike, to a multiple of 16
  // (experts.py l.896-904, Fp8Padding: a new tensor, saving nothing; Fp8Unpadding after fc2):
  // the experts' tensors have Sym::kExpertRows rows (te_rules.h te_fp8_expert_rows).
  const Shape rows{c.fp8 ? Dim::of(Sym::kExpertRows) : Dim::of(Sym::kMoeRows)};
  int permuted = g.add("moe.permuted_tokens", grp, c.fp8 ? "permute + Fp8Padding" : "permute", cat(rows, {c.h}), c.e,
                       "the grouped fc1's input");
  // TEGroupedMLP.forward (experts.py l.926-1038): linear_fc1, weighted_bias_swiglu_impl(fc1_out,
  // None, permuted_probs) (WeightedSwiGLUFunction, fused_bias_swiglu.py l.268-270 keeps its input and
  // the probs), linear_fc2.
  const auto fe = cat(rows, {Dim::of(Sym::kExpertFfn)});
  int act = -1;
  const int probs = g.add("moe.permuted_probs", grp, "masked_select", rows, pd,
                          "the routing probs in expert order, kept by the weighted activation");
  g.save(probs);
  if (c.model.gated_mlp) {
    int fc1 = linear(g, c, permuted, cat(rows, {Dim::of(Sym::kExpertFfn, 2)}), "moe.experts.fc1", grp);
    g.at(fc1).mcore_tag = static_cast<uint16_t>(tag | kTagMoeActInput);
    if (c.workload.megatron.fp8_act_input_store) {
      const int fp8 = g.add("moe.experts.fc1_fp8", grp, "weighted SwiGLU", g.at(fc1).shape, DType::kFP8,
                            "[gate|up] kept as float8_e4m3fn (activation_func_fp8_input_store)");
      g.save(fp8);
      g.at(fp8).mcore_tag = static_cast<uint16_t>(tag | kTagMoeAct);  // not made under moe_act's no-grad run
    } else {
      g.save(fc1);
    }
    act = g.add("moe.experts.act_out", grp, "weighted SwiGLU", fe, c.e, "swiglu(x)·probs, fc2's input");
  } else {
    int fc1 = linear(g, c, permuted, fe, "moe.experts.fc1", grp);
    int a = activation(g, c, fc1, fe, "moe.experts", grp);
    g.save(a);  // intermediate * permuted_probs (experts.py l.1013-1015) keeps both factors
    act = g.add("moe.experts.act_out", grp, "mul", fe, c.e, "act(x)·probs, fc2's input");
  }
  g.at(act).mcore_tag = static_cast<uint16_t>(tag | kTagMoeAct);
  const int fc2 = linear(g, c, act, cat(rows, {c.h}), "moe.experts.fc2", grp);
  // --deterministic-mode from Megatron-core 0.15: unpermute runs index_add_ (moe_utils.py l.604-612),
  // whose IndexAddBackward0 keeps its source (derivatives.yaml: expand_as(source)); scatter_add_ keeps
  // only the index. The source: allgather, the experts' output (unpadded after fc2 under fp8);
  // alltoall, the combine all-to-all's output, as many rows as the sorted indices.
  const MegatronOptions& mo = c.workload.megatron;
  if (mo.deterministic && mo.core == MegatronCore::k0_15) {
    if (!alltoall && !c.fp8)
      g.save(fc2);
    else
      g.save(g.add("moe.unpermute_source", grp, alltoall ? "all-to-all" : "Fp8Unpadding",
                   cat(alltoall ? (local_permute ? Shape{top_k, c.s_rep, c.b} : dispatched) : Shape{dispatched}, {c.h}),
                   c.e, "the experts' output, kept by unpermute's index_add_ (deterministic mode)"));
  }
}

}  // namespace

/// Megatron-core MoELayer (Megatron-LM @d98e8a64ddf3, megatron/core/transformer/moe/; measured by
/// validation/megatron_moe_validation.py, EXPECTED.md "megatron-moe") with its defaults: TopKRouter
/// with the aux loss (load-balancing type aux_loss, a nonzero --moe-aux-loss-coeff), the allgather
/// token dispatcher (moe_token_dispatcher_type's default; or alltoall, --moe-token-dispatcher),
/// unfused permute (moe_permute_fusion off), grouped SwiGLU experts weighted by their probs in the
/// fused activation, shared experts.
int mcore_moe(Builder& g, const Context& c, int x) {
  const Group grp = Group::kMoe;
  const MoeSpec& spec = *c.model.moe;
  const Shape tokens{c.s_rep, c.b};
  const Dim experts = Dim::lit("E", spec.num_experts);
  const Dim top_k = Dim::lit("k", spec.experts_per_token);
  const uint16_t tag = g.mcore_tag;
  const DType pd = router_saves(g, c, x, tokens, experts, top_k);
  // MoEAllGatherTokenDispatcher.dispatch_postprocess (l.305-335): local_probs.T.contiguous()
  // .masked_select(local_map.T.contiguous()) keeps both inputs. The dispatcher gathers the tokens of
  // the TP·EP group (l.281-303) and keeps the E/ep local experts' columns: s·b·E entries per rank
  // (Megatron requires SP with TP for MoE training, moe_layer.py l.636).
  const bool alltoall = c.workload.megatron.dispatcher == MoeDispatcher::kAlltoall;
  if (!alltoall) {
    g.save(g.add("moe.probs_transposed", grp, "masked_select", cat({experts}, {c.s_tp, c.b}), pd,
                 "local_probs.T.contiguous(), kept by masked_select"));
    g.save(g.add("moe.routing_map_transposed", grp, "masked_select", cat({experts}, {c.s_tp, c.b}), DType::kBool,
                 "local_map.T.contiguous(), the mask kept by masked_select"));
  } else {
    // MoEAlltoAllTokenDispatcher.dispatch_preprocess (token_dispatcher.py l.624-680) calls
    // permute(hidden, routing_map, probs=probs) on this rank's own tokens (E·s·b/t under SP):
    // flat_sorted = routing_map.T.reshape(-1).argsort()[:k·T] (moe_utils.py l.470-477) is a view
    // of the whole int64 argsort, and probs.T.contiguous().reshape(-1)[flat_sorted] keeps it as
    // its index. The all-to-all is an identity at ep 1 (mappings.py _AllToAll), sort_chunks_by_idxs
    // (split + cat) keeps nothing; no masked_select.
    g.save(g.add("moe.flat_sorted", grp, "permute", Shape{experts, c.s_rep, c.b}, DType::kINT64,
                 "routing_map argsort over all E·T entries, kept (as a k·T view) by probs[flat_sorted]"));
  }
  // permute (moe_utils.py l.470-494): tokens.index_select(0, sorted_indices) keeps the indices;
  // unpermute's scatter_add_ (l.617-619) keeps the same storage.
  const Shape dispatched{Dim::of(Sym::kMoeRows)};
  // alltoall: permute runs on this rank's own tokens (k·s·b/t under SP) before the all-to-all and
  // dispatch_postprocess's TP all-gather (token_dispatcher.py l.741-751) bring the experts k·s·b rows;
  // its sorted indices are k·(s/t)·b (not measured at TP > 1: the reference runs EP = TP = 1).
  const bool local_permute = alltoall && spec.capacity_factor <= 0.0;
  g.save(g.add("moe.sorted_indices", grp, "permute", local_permute ? Shape{top_k, c.s_rep, c.b} : dispatched, DType::kINT64,
               "flat_sorted % T, kept by index_select and by unpermute's scatter_add_"));
  expert_saves(g, c, {top_k, pd, tag, alltoall, local_permute}, dispatched);
  int out = g.add("moe.out", grp, "unpermute", cat(tokens, {c.h}), c.e, "scatter_add_ / index_add_ of the expert outputs");
  // SharedExpertMLP (shared_experts.py l.200-207): the MLP, then out * sigmoid(linear(x, gate_weight)).
  g.mcore_tag = static_cast<uint16_t>(tag | kTagShared);
  out = moe_shared(g, c, x, tokens, out);
  g.mcore_tag = tag;
  return out;
}

/// The shared experts beside the routed ones (Qwen2-MoE's gated one, DeepSeek's); returns `out`.
int moe_shared(Builder& g, const Context& c, int x, const Shape& tokens, int out) {
  const Group grp = Group::kMoe;
  const MoeSpec& spec = *c.model.moe;
  if (spec.shared_ffn > 0) {
    int shared = mlp(g, c, x, {c.s_tp, c.b}, Sym::kSharedFfn, "moe.shared", grp);
    if (spec.shared_expert_gate) {  // sigmoid(Linear(h, 1)(x)) * shared(x): keeps both factors
      g.save(g.add("moe.shared_gate", grp, "sigmoid", cat(tokens, {Dim::lit("1", 1)}), c.e));
      g.save(shared);
    }
  }
  return out;
}

}  // namespace actmem::detail::graph
