#include "tensors/mcore_router.h"

#include <fmt/format.h>

namespace actmem::detail {

namespace {
bool groups_fit(int64_t experts, int64_t k, int64_t groups, int64_t group_topk) {
  // group_limited_topk (moe_utils.py l.711-726): scores.view(T, G, E/G).topk(k / gk) per group, then
  // k experts among the gk groups kept.
  return groups > 0 && group_topk > 0 && group_topk <= groups && experts % groups == 0 && k % group_topk == 0 &&
         k / group_topk <= experts / groups;
}
}  // namespace

McoreRouter resolve_mcore_router(const MoeSpec& spec, const MoeRouterOptions& o, DType e) {
  McoreRouter r;
  const bool model = spec.sigmoid_scores;  // DeepSeek-V3 (hf_config.cc read_moe)
  r.sigmoid = o.score == MoeScoreFunction::kModel ? model : o.score == MoeScoreFunction::kSigmoid;
  r.expert_bias = o.expert_bias < 0 ? model : o.expert_bias > 0;
  if (o.num_groups >= 0 || o.group_topk >= 0) {
    r.groups = o.num_groups > 0 ? o.num_groups : 0;
    r.group_topk = o.group_topk > 0 ? o.group_topk : 0;
  } else if (model && groups_fit(spec.num_experts, spec.experts_per_token, spec.router_groups, spec.router_group_topk)) {
    r.groups = spec.router_groups;
    r.group_topk = spec.router_group_topk;
  }
  if (r.groups == 0 || r.group_topk == 0) r.groups = r.group_topk = 0;
  r.scaling = o.topk_scaling_factor >= 0 ? o.topk_scaling_factor : (model ? spec.routed_scaling_factor : 0);
  r.load_balancing = o.load_balancing != MoeLoadBalancing::kModel
                         ? o.load_balancing
                         : (model ? MoeLoadBalancing::kSeqAuxLoss : MoeLoadBalancing::kAuxLoss);
  if (o.aux_loss_coeff == 0) r.load_balancing = MoeLoadBalancing::kNone;  // is_aux_loss_enabled (router.py l.403-408)
  if (o.load_balancing == MoeLoadBalancing::kSinkhorn) {
    // sinkhorn_load_balancing (router.py l.280-311) replaces topk_routing_with_score_function: no
    // score function, groups, scaling or aux loss; sigmoid of the logits for top-1, softmax otherwise.
    r.sinkhorn = true;
    r.load_balancing = MoeLoadBalancing::kNone;
    r.sigmoid = spec.experts_per_token == 1;
    r.groups = r.group_topk = 0;
    r.scaling = 0;
  }
  r.z_loss = o.z_loss_coeff > 0;
  r.logits = o.dtype == MoeRouterDtype::kFp32 ? DType::kFP32 : o.dtype == MoeRouterDtype::kFp64 ? DType::kFP64 : e;
  r.dtype = o.dtype;
  r.from_model = model && o.score == MoeScoreFunction::kModel;
  return r;
}

Expected<void> check_mcore_router(const ModelSpec& m, const Workload& w) {
  const MoeRouterOptions& o = w.megatron.router;
  if (w.framework != Framework::kMegatron) {
    if (!o.is_default())
      return Error{ErrorKind::kIncompatible, "moe_router_score_function",
                   "@moe_router_score_function and the other @moe_router_* / @moe_aux_loss_coeff / "
                   "@moe_z_loss_coeff options are Megatron-core's TopKRouter; they apply to @framework megatron only"};
    return {};
  }
  if (o.aux_loss_coeff < -1 || (o.aux_loss_coeff < 0 && o.aux_loss_coeff != -1))
    return Error{ErrorKind::kInvalid, "moe_aux_loss_coeff", "@moe_aux_loss_coeff must be 0 or more"};
  if (o.z_loss_coeff < 0)
    return Error{ErrorKind::kInvalid, "moe_z_loss_coeff", "@moe_z_loss_coeff must be 0 or more (0: no z-loss)"};
  if (o.topk_scaling_factor < 0 && o.topk_scaling_factor != -1)
    return Error{ErrorKind::kInvalid, "moe_router_topk_scaling_factor",
                 "@moe_router_topk_scaling_factor must be 0 or more"};
  // router.py l.298: "Sinkhorn routing does not support aux loss." (Megatron's default coefficient is 0).
  if (o.load_balancing == MoeLoadBalancing::kSinkhorn && o.aux_loss_coeff > 0)
    return Error{ErrorKind::kIncompatible, "moe_aux_loss_coeff",
                 "@moe_router_load_balancing_type sinkhorn takes no aux loss (Megatron asserts moe_aux_loss_coeff == "
                 "0, router.py l.298); drop @moe_aux_loss_coeff or give 0"};
  if (!m.moe) return {};
  const MoeSpec& spec = *m.moe;
  const bool given_groups = o.num_groups > 0, given_topk = o.group_topk > 0;
  if (given_groups != given_topk)
    return Error{ErrorKind::kInvalid, given_groups ? "moe_router_group_topk" : "moe_router_num_groups",
                 "@moe_router_num_groups and @moe_router_group_topk go together (group-limited routing); give both"};
  if (given_groups && !groups_fit(spec.num_experts, spec.experts_per_token, o.num_groups, o.group_topk))
    return Error{ErrorKind::kInvalid, "moe_router_num_groups",
                 fmt::format("@moe_router_num_groups {} / @moe_router_group_topk {}: the {} experts must split into "
                             "equal groups, the top-{} into the kept groups (k % group_topk == 0, group_topk <= "
                             "num_groups, k / group_topk <= experts per group)",
                             o.num_groups, o.group_topk, spec.num_experts, spec.experts_per_token)};
  return {};
}

std::string describe_mcore_router(const McoreRouter& r) {
  if (r.sinkhorn) {
    std::string out = r.sigmoid ? "sinkhorn routing, sigmoid of the logits" : "sinkhorn routing, softmax of the logits";
    if (r.z_loss) out += ", z-loss";
    if (r.dtype != MoeRouterDtype::kInput) out += fmt::format(", {} router", dtype_name(r.logits));
    return out;
  }
  std::string out = r.sigmoid ? (r.expert_bias ? "sigmoid scores with expert bias" : "sigmoid scores")
                              : (r.expert_bias ? "softmax scores with expert bias" : "softmax scores");
  if (r.groups > 0) out += fmt::format(", group-limited top-k ({} groups, {} kept)", r.groups, r.group_topk);
  if (r.scaling > 0) out += fmt::format(", top-k scaling {:g}", r.scaling);
  switch (r.load_balancing) {
    case MoeLoadBalancing::kSeqAuxLoss: out += ", seq_aux_loss"; break;
    case MoeLoadBalancing::kGlobalAuxLoss: out += ", global_aux_loss"; break;
    case MoeLoadBalancing::kNone: out += ", no aux loss"; break;
    default: out += ", aux_loss"; break;
  }
  if (r.z_loss) out += ", z-loss";
  if (r.dtype != MoeRouterDtype::kInput) out += fmt::format(", {} router", dtype_name(r.logits));
  return out;
}

}  // namespace actmem::detail
