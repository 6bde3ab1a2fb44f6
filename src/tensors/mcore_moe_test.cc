// Megatron-core MoELayer saves and the MoE --recompute-modules, worked out by hand from
// Megatron-LM @d98e8a64ddf3 (validation/EXPECTED.md "megatron-moe", measured by
// validation/megatron_moe_validation.py):
//   moe/moe_utils.py RouterGatingLinearFunction l.1381 (the router keeps its input),
//   topk_routing_with_score_function l.896-916 (topk index int64, fp32 softmax of the k scores),
//   compute_routing_scores_for_aux_loss l.996-1004 + switch_load_balancing_loss_func l.146-149
//   (fp32 softmax over E, its topk index, int64 tokens_per_expert), permute l.470-494 (sorted indices
//   int64, the permuted tokens), moe/token_dispatcher.py l.331-333 (masked_select keeps the
//   transposed probs and the bool mask), moe/experts.py l.926-1038 (grouped fc1 input, fc1 output
//   and probs kept by WeightedSwiGLUFunction, fusions/fused_bias_swiglu.py l.268-270; fc2 input),
//   moe_layer.py l.508-534 / l.701-717 and experts.py l.1019-1030 (shared_experts, moe, moe_act).
// Mixtral-8x7B: h 4096, a 32, kv 8, d 128, E 8, k 2, fe 14336; s 4096, b 1, bf16, flash, local spec.
#include <gtest/gtest.h>

#include "api/library.h"
#include "policies/megatron_options.h"

namespace actmem {
namespace {

constexpr int64_t T = 4096, h = 4096, a = 32, kv = 8, d = 128, E = 8, k = 2, fe = 14336;

int64_t per_layer(const char* model, unsigned modules, Recompute recompute, MegatronOptions o = {}) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron = o;
  w.megatron.recompute_modules = modules;
  auto m = prepare(load_model(model).value(), w);
  EXPECT_TRUE(m.has_value());
  if (!m) return -1;
  Layout l;
  l.seq_len = T;
  l.micro_batch = 1;
  l.recompute = recompute;
  Totals t;
  EXPECT_TRUE(evaluate(*m, l, t));
  return t.per_layer;
}

// Attention and norms of the local spec (EXPECTED.md "megatron"): x 2Th, rstd 4T, qkv input 2Th,
// qkv 2T(a+2kv)d, q, k RoPE outputs, flash out 2Tad, logsumexp 4aT, h1 2Th, pre-MLP rstd 4T and
// output 2Th (the router's input).
constexpr int64_t kAttention = 2 * T * h + 4 * T + 2 * T * h + 2 * T * (a + 2 * kv) * d + 2 * T * a * d +
                               2 * T * kv * d + 2 * T * a * d + 4 * a * T + 2 * T * h + 4 * T + 2 * T * h;
// The MoE layer beyond its input: router 8Tk + 4Tk; aux loss 4TE + 8Tk + 8E; masked_select 2TE + TE;
// sorted indices 8kT; permuted tokens 2kTh; fc1 output 4kT·fe; probs 2kT; fc2 input 2kT·fe.
constexpr int64_t kMoe = 8 * T * k + 4 * T * k + 4 * T * E + 8 * T * k + 8 * E + 2 * T * E + T * E + 8 * k * T +
                         2 * k * T * h + 4 * k * T * fe + 2 * k * T + 2 * k * T * fe;

TEST(McoreMoe, MixtralLayer) {
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeCoreAttn, Recompute::kNone), kAttention + kMoe);
  EXPECT_EQ(kAttention + kMoe, 1'032'831'040);  // 0.96 GiB per layer
}

// --deterministic-mode (moe_utils.py l.604-612): from Megatron-core 0.15 unpermute runs index_add_,
// whose IndexAddBackward0 keeps its source, the experts' output (kT, h) in bf16: 2·kT·h more per
// layer; under 0.14 (scatter_add_) nothing more. Measured on CPU by the det-* cases of
// validation/megatron_moe_validation.py.
TEST(McoreMoe, DeterministicModeKeepsTheExpertOutput) {
  const int64_t none = kAttention + kMoe;
  MegatronOptions o;
  o.deterministic = true;
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeCoreAttn, Recompute::kNone, o), none + 2 * k * T * h);
  o.core = MegatronCore::k0_14;
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeCoreAttn, Recompute::kNone, o), none);
  // moe recompute: the checkpoint drops it with the rest of the layer.
  o.core = MegatronCore::k0_15;
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeMoe, Recompute::kSelective, o), kAttention);
}

TEST(McoreMoe, RecomputeModules) {
  const int64_t none = kAttention + kMoe;
  // moe_act: CheckpointWithoutOutput frees the activation output (fc2's input), 2·kT·fe.
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeMoeAct, Recompute::kSelective), none - 2 * k * T * fe);
  // moe: the checkpoint keeps only the MoE layer's input (the pre-MLP norm output).
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeMoe, Recompute::kSelective), kAttention);
  // moe + layernorm: the norm output is freed too (CheckpointWithoutOutput after the MoE ran);
  // the norm's input and rstd go with it: its output's storage, its rstd.
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeMoe | kRecomputeLayernorm, Recompute::kSelective),
            kAttention - 2 * T * h - 4 * T - 2 * T * h - 4 * T);
  // mlp recompute leaves MoE layers alone (transformer_layer.py l.538).
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeMlp, Recompute::kSelective), none);
  // shared_experts on a model without shared experts changes nothing.
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeSharedExperts, Recompute::kSelective), none);
}

TEST(McoreMoe, Fp8InputStoreUnderMoeAct) {
  // --activation-func-fp8-input-store: WeightedSwiGLUFunction keeps fc1's output as float8_e4m3fn
  // (1 byte: 2·R·fe instead of 4·R·fe). Under moe_act the activation runs inside
  // CheckpointWithoutOutput, whose save_for_backward(*args) keeps fc1's output in bf16 and no fp8
  // copy is made: the store changes nothing for the routed experts then.
  const MegatronOptions te{.impl = TransformerImpl::kTransformerEngine};
  MegatronOptions store = te;
  store.fp8_act_input_store = true;
  constexpr int64_t R = k * T;
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeCoreAttn, Recompute::kNone, te) -
                per_layer("mixtral-8x7b", kRecomputeCoreAttn, Recompute::kNone, store),
            4 * R * fe - 2 * R * fe);
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeMoeAct, Recompute::kSelective, te),
            per_layer("mixtral-8x7b", kRecomputeMoeAct, Recompute::kSelective, store));
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeCoreAttn, Recompute::kNone, te) -
                per_layer("mixtral-8x7b", kRecomputeMoeAct, Recompute::kSelective, te),
            2 * R * fe);
}

TEST(McoreMoe, SharedExpertsRecompute) {
  // DeepSeek-V3 (MoE layers from layer 3; the middle layer is one): one shared expert of fs 2048,
  // ungated; recompute shared_experts drops its [gate|up] output 2·T·2fs and product 2·T·fs.
  constexpr int64_t fs = 2048;
  const int64_t plain = per_layer("deepseek-v3", kRecomputeCoreAttn, Recompute::kNone);
  const int64_t both = per_layer("deepseek-v3", kRecomputeSharedExperts, Recompute::kSelective);
  EXPECT_EQ(plain - both, 4 * T * fs + 2 * T * fs);
}

// --moe-token-dispatcher alltoall (Megatron-LM @d98e8a64ddf3 moe/token_dispatcher.py
// MoEAlltoAllTokenDispatcher.dispatch_preprocess l.624-680 -> moe_utils.py permute l.470-492 with
// probs): probs.T.contiguous().reshape(-1)[flat_sorted] keeps its index, a k·T view of the int64
// argsort of all E·T routing-map entries (8·E·T bytes); no masked_select (the allgather
// dispatcher's transposed probs 2·T·E and bool mask T·E). Measured: megatron_moe_validation.py a2a-*.
TEST(McoreMoe, AlltoallDispatcher) {
  MegatronOptions a2a;
  a2a.dispatcher = MoeDispatcher::kAlltoall;
  const int64_t none = kAttention + kMoe;
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeCoreAttn, Recompute::kNone, a2a), none - 3 * T * E + 8 * E * T);
  EXPECT_EQ(none - 3 * T * E + 8 * E * T, 1'032'994'880);  // +163,840 bytes per layer (5·E·T)
  // moe recompute: the checkpoint keeps only the MoE input, whatever the dispatcher.
  EXPECT_EQ(per_layer("mixtral-8x7b", kRecomputeMoe, Recompute::kSelective, a2a), kAttention);
  // Refused outside --framework megatron, the field named.
  Workload w;
  w.megatron = a2a;
  auto m = prepare(load_model("mixtral-8x7b").value(), w);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().field, "moe_token_dispatcher");
}

}  // namespace
}  // namespace actmem
