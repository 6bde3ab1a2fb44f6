// Megatron-core TopKRouter as configured (Megatron-LM @d98e8a64ddf3 moe/router.py, moe_utils.py):
// the options of policies/megatron_options.h MoeRouterOptions resolved against the model (DeepSeek-V3:
// sigmoid scores, expert bias, group-limited top-k, seq_aux_loss), their checks, and a short
// description for the report's note. The saves: op_graph.cc mcore_moe; EXPECTED.md "megatron-moe-router".
#pragma once

#include <string>

#include "policies/options.h"  // Workload
#include "model/model_spec.h"
#include "policies/megatron_options.h"
#include "util/dtype.h"
#include "actmem/expected.h"

namespace actmem::detail {

struct McoreRouter {
  bool sigmoid = false;      // score function sigmoid (else softmax)
  bool expert_bias = false;  // saves nothing more (the biased scores only pick the experts)
  int64_t groups = 0;        // group-limited top-k: num_groups (0: none)
  int64_t group_topk = 0;
  double scaling = 0;        // topk scaling factor: a multiply by a Python float, saves nothing
  MoeLoadBalancing load_balancing = MoeLoadBalancing::kAuxLoss;  // kNone: no aux loss (or coefficient 0)
  bool sinkhorn = false;     // sinkhorn routing (no aux loss; scores, groups and scaling unused)
  bool z_loss = false;
  DType logits;              // the router logits' dtype, hence the routing probs'
  MoeRouterDtype dtype = MoeRouterDtype::kInput;  // --moe-router-dtype as given
  bool from_model = false;   // DeepSeek-V3's routing taken from its config
};

/// The router Megatron runs for `spec` with options `o`; `e` is the activation dtype.
/// Example: resolve_mcore_router(deepseek_v3_spec, {}, kBF16) is sigmoid, bias, 8 groups keep 4, seq_aux_loss.
McoreRouter resolve_mcore_router(const MoeSpec& spec, const MoeRouterOptions& o, DType e);

/// The router options' checks (refused outside framework megatron; group sizes against E and k).
Expected<void> check_mcore_router(const ModelSpec& model, const Workload& workload);

/// "sigmoid scores with expert bias, group-limited top-k (8 groups, 4 kept), seq_aux_loss".
std::string describe_mcore_router(const McoreRouter& r);

}  // namespace actmem::detail
