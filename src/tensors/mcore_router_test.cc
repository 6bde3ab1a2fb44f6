// Megatron-core TopKRouter options (policies/megatron_options.h MoeRouterOptions), worked out by hand
// from Megatron-LM @d98e8a64ddf3 moe/moe_utils.py topk_routing_with_score_function l.896-957,
// group_limited_topk l.711-728, compute_routing_scores_for_aux_loss l.996-1008,
// switch_load_balancing_loss_func l.146-149, z_loss_func l.169-181, moe/router.py routing
// l.746-837 (aux_loss / seq_aux_loss / global_aux_loss l.410-551, apply_z_loss l.642-709),
// Router.gating l.105-111 (moe_router_dtype). Measured: validation/megatron_moe_validation.py
// router-* (EXPECTED.md "megatron-moe-router").
// Mixtral-8x7B: E 8, k 2; s 4096, b 1, bf16, flash, local spec; the default router (softmax of the
// top-k logits, aux_loss) keeps topk index 8Tk, probs 4Tk, aux softmax 4TE, aux index 8Tk,
// tokens_per_expert 8E (mcore_moe_test.cc).
#include <gtest/gtest.h>

#include "api/library.h"
#include "config/config_test_util.h"
#include "config/training_config.h"
#include "policies/megatron_options.h"

namespace actmem {
namespace {

constexpr int64_t T = 4096, E = 8, k = 2;

int64_t per_layer(const char* model, MoeRouterOptions r, int64_t b = 1, int64_t tp = 1,
                  MoeDispatcher dispatcher = MoeDispatcher::kAllgather) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron.router = r;
  w.megatron.dispatcher = dispatcher;
  auto m = prepare(load_model(model).value(), w);
  EXPECT_TRUE(m.has_value()) << (m ? "" : m.error().message);
  if (!m) return -1;
  Layout l;
  l.seq_len = T;
  l.micro_batch = b;
  l.parallel.tp = tp;
  l.parallel.sp = tp > 1;  // Megatron requires SP with TP for MoE training (moe_layer.py l.636)
  Totals t;
  EXPECT_TRUE(evaluate(*m, l, t));
  return t.per_layer;
}

int64_t plain() { return per_layer("mixtral-8x7b", {}); }

TEST(McoreRouter, SigmoidScores) {
  // sigmoid(logits.float()) kept (4TE); topk values kept by the division instead of the softmax
  // output (4Tk either way) plus the row sums (4T); the aux loss: its own sigmoid and row sums
  // (4TE + 4T) in place of the softmax (4TE). The expert bias only picks: nothing more.
  MoeRouterOptions r;
  r.score = MoeScoreFunction::kSigmoid;
  EXPECT_EQ(per_layer("mixtral-8x7b", r) - plain(), 4 * T * E + 4 * T + 4 * T);
  r.expert_bias = 1;
  EXPECT_EQ(per_layer("mixtral-8x7b", r) - plain(), 4 * T * E + 8 * T);
}

TEST(McoreRouter, GroupLimitedTopk) {
  // 4 groups of 2, 2 kept: the per-group top-(k/gk) index T·4·1, the group index T·2 (int64) and
  // masked_fill's bool mask T·E.
  MoeRouterOptions r;
  r.num_groups = 4;
  r.group_topk = 2;
  EXPECT_EQ(per_layer("mixtral-8x7b", r) - plain(), 8 * T * 4 + 8 * T * 2 + T * E);
}

TEST(McoreRouter, LoadBalancingTypes) {
  const int64_t aux = 4 * T * E + 8 * T * k + 8 * E;  // the aux loss's saves
  MoeRouterOptions none;
  none.load_balancing = MoeLoadBalancing::kNone;
  EXPECT_EQ(plain() - per_layer("mixtral-8x7b", none), aux);
  MoeRouterOptions zero;  // --moe-aux-loss-coeff 0: is_aux_loss_enabled() false
  zero.aux_loss_coeff = 0;
  EXPECT_EQ(plain() - per_layer("mixtral-8x7b", zero), aux);
  // seq_aux_loss: tokens_per_expert over b·E (b folded into the expert dim): 8·b·E bytes.
  MoeRouterOptions seq;
  seq.load_balancing = MoeLoadBalancing::kSeqAuxLoss;
  EXPECT_EQ(per_layer("mixtral-8x7b", seq, 3) - per_layer("mixtral-8x7b", {}, 3), 8 * 3 * E - 8 * E);
  // global_aux_loss: the running buffer / steps in the params dtype (bf16): 2E instead of 8E.
  MoeRouterOptions global;
  global.load_balancing = MoeLoadBalancing::kGlobalAuxLoss;
  EXPECT_EQ(plain() - per_layer("mixtral-8x7b", global), 8 * E - 2 * E);
  // The top-k scaling factor multiplies by a Python float: nothing saved.
  MoeRouterOptions scaled;
  scaled.topk_scaling_factor = 2.5;
  EXPECT_EQ(per_layer("mixtral-8x7b", scaled), plain());
}

// --moe-router-load-balancing-type sinkhorn (router.py sinkhorn_load_balancing l.280-311): the
// Sinkhorn iterations and their topk run under torch.no_grad (nothing kept); k > 1: the fp32
// softmax over E (4TE); `logits * map` keeps the bool map (TE); no top-k index, no top-k softmax, no
// aux loss. Against the default router (8Tk + 4Tk + 4TE + 8Tk + 8E): TE - 20Tk - 8E.
TEST(McoreRouter, Sinkhorn) {
  MoeRouterOptions r;
  r.load_balancing = MoeLoadBalancing::kSinkhorn;
  EXPECT_EQ(per_layer("mixtral-8x7b", r) - plain(), T * E - 20 * T * k - 8 * E);
  EXPECT_EQ(per_layer("mixtral-8x7b", r) - plain(), -131'136);
  // Megatron's CI top-1 case: sigmoid(logits) in the logits' dtype (2TE) and the map (TE), where the
  // default top-1 router keeps 8T + 4T + 4TE + 8T + 8E.
  Workload w;
  w.framework = Framework::kMegatron;
  ModelSpec top1 = load_model("mixtral-8x7b").value();
  top1.moe->experts_per_token = 1;
  Layout l;
  l.seq_len = T;
  auto layer = [&](MoeRouterOptions o) {
    w.megatron.router = o;
    Totals t;
    auto m = prepare(top1, w);
    EXPECT_TRUE(m.has_value() && evaluate(*m, l, t));
    return t.per_layer;
  };
  EXPECT_EQ(layer(r) - layer({}), 3 * T * E - (20 * T + 4 * T * E + 8 * E));
  // The aux loss is refused with it (l.298: "Sinkhorn routing does not support aux loss.").
  r.aux_loss_coeff = 1e-2;
  w.megatron.router = r;
  auto refused = prepare(load_model("mixtral-8x7b").value(), w);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().field, "moe_aux_loss_coeff");
  r.aux_loss_coeff = 0;
  EXPECT_EQ(per_layer("mixtral-8x7b", r) - plain(), T * E - 20 * T * k - 8 * E);
}

TEST(McoreRouter, ZLossAndRouterDtype) {
  // z-loss: logsumexp keeps the bf16 logits (2TE) and its result (2T).
  MoeRouterOptions z;
  z.z_loss_coeff = 1e-3;
  EXPECT_EQ(per_layer("mixtral-8x7b", z) - plain(), 2 * T * E + 2 * T);
  // fp32 router: the routing probs are fp32, so masked_select's transposed probs (T·E) and the
  // permuted probs the weighted SwiGLU keeps (k·T) take 4 bytes instead of 2; fp64: 8.
  MoeRouterOptions fp32;
  fp32.dtype = MoeRouterDtype::kFp32;
  EXPECT_EQ(per_layer("mixtral-8x7b", fp32) - plain(), 2 * T * E + 2 * k * T);
  MoeRouterOptions fp64;
  fp64.dtype = MoeRouterDtype::kFp64;
  EXPECT_EQ(per_layer("mixtral-8x7b", fp64) - plain(), 6 * T * E + 6 * k * T);
}

TEST(McoreRouter, DeepseekV3FromItsConfig) {
  // DeepSeek-V3 (E 256, k 8, n_group 8, topk_group 4): sigmoid scores with expert bias, group-limited
  // top-k, seq_aux_loss by default; against the softmax router with those turned off: sigmoid and
  // its row sums 4TE + 4T, aux sigmoid row sums 4T, group index T·8·2 and T·4 (int64), mask T·E;
  // seq_aux_loss at b 1 keeps the same 8E.
  constexpr int64_t E3 = 256;
  MoeRouterOptions softmax;
  softmax.score = MoeScoreFunction::kSoftmax;
  softmax.expert_bias = 0;
  softmax.num_groups = softmax.group_topk = 0;
  softmax.load_balancing = MoeLoadBalancing::kAuxLoss;
  const int64_t diff = per_layer("deepseek-v3", {}) - per_layer("deepseek-v3", softmax);
  EXPECT_EQ(diff, 4 * T * E3 + 8 * T + 8 * T * 8 * 2 + 8 * T * 4 + T * E3);
  EXPECT_EQ(diff, 5'931'008);
}

// The alltoall dispatcher at TP 2 with SP (token_dispatcher.py dispatch_preprocess l.624-680,
// dispatch_postprocess l.741-751): permute runs on the rank's own T/2 tokens (argsort 8·E·T/2,
// sorted indices 8·k·T/2) before the TP all-gather; the allgather dispatcher gathers first
// (transposed probs 2·E·T, mask E·T, sorted indices 8·k·T). DeepSeek-V3 (E 256, k 8):
// a2a − allgather = E·T − 4·k·T. Not measured at TP > 1 (the reference runs TP = 1).
TEST(McoreRouter, AlltoallSortedIndicesAtTp2) {
  constexpr int64_t E3 = 256, k3 = 8;
  const int64_t a2a = per_layer("deepseek-v3", {}, 1, 2, MoeDispatcher::kAlltoall);
  const int64_t ag = per_layer("deepseek-v3", {}, 1, 2, MoeDispatcher::kAllgather);
  EXPECT_EQ(a2a - ag, E3 * T - 4 * k3 * T);
  EXPECT_EQ(a2a - ag, 917'504);
}

TEST(McoreRouter, Refused) {
  Workload hf;  // outside --framework megatron
  hf.megatron.router.score = MoeScoreFunction::kSigmoid;
  auto m = prepare(load_model("mixtral-8x7b").value(), hf);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().field, "moe_router_score_function");
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron.router.num_groups = 3;  // 8 experts do not split into 3 groups
  w.megatron.router.group_topk = 1;
  m = prepare(load_model("mixtral-8x7b").value(), w);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().field, "moe_router_num_groups");
  w.megatron.router.num_groups = 4;
  w.megatron.router.group_topk = -1;  // one without the other
  m = prepare(load_model("mixtral-8x7b").value(), w);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().field, "moe_router_group_topk");
}

// --from: Megatron's DeepSeek-V3 recipe lines (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh
// l.91-104) set every router option.
TEST(McoreRouter, MegatronArgs) {
  auto c = read_megatron_args("--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-4 "
                              "--moe-router-group-topk 4 --moe-router-num-groups 8 "
                              "--moe-router-topk-scaling-factor 2.5 --moe-router-score-function sigmoid "
                              "--moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3 "
                              "--moe-router-dtype fp32 --moe-z-loss-coeff 1e-3",
                              "dsv3.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  const MoeRouterOptions& r = s.workload.megatron.router;
  EXPECT_EQ(r.score, MoeScoreFunction::kSigmoid);
  EXPECT_EQ(r.expert_bias, 1);
  EXPECT_EQ(r.num_groups, 8);
  EXPECT_EQ(r.group_topk, 4);
  EXPECT_EQ(r.topk_scaling_factor, 2.5);
  EXPECT_EQ(r.load_balancing, MoeLoadBalancing::kSeqAuxLoss);
  EXPECT_EQ(r.aux_loss_coeff, 1e-4);
  EXPECT_EQ(r.z_loss_coeff, 1e-3);
  EXPECT_EQ(r.dtype, MoeRouterDtype::kFp32);
  EXPECT_EQ(testing::find(*c, "moe_router_dtype")->source, "--moe-router-dtype fp32 (dsv3.sh:1)");
}

TEST(McoreRouter, MegatronArgsSinkhorn) {  // Megatron-LM's CI MoE lines (moe_router_load_balancing_type)
  auto c = read_megatron_args("--num-experts 8 --moe-router-topk 1 --moe-router-load-balancing-type sinkhorn", "ci.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.megatron.router.load_balancing, MoeLoadBalancing::kSinkhorn);
}

}  // namespace
}  // namespace actmem
