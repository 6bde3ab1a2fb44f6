// framework torchtitan: a Llama-3.1-8B FSDP2 job under each activation-checkpointing mode, every
// number worked out by hand from validation/EXPECTED.md ("torchtitan") and src/policies/fsdp2.h.
//
// Llama-3.1-8B (huggingface.co/meta-llama/Llama-3.1-8B config.json): h 4096, L 32, a 32, kv 8,
// d 128, f 14336, V 128256, untied. Ψ = 8,030,261,248; Ψ_block = wq 16,777,216 + wk 4,194,304 +
// wv 4,194,304 + wo 16,777,216 + 3·h·f 176,160,768 + two norms 8,192 = 218,112,000;
// Ψ_head = V·h + h = 525,340,672. Job: s 8192, b 1, bf16 activations, dp 8.
#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

constexpr int64_t kT = 8192;  // tokens s·b

PreparedModel titan(AttentionImpl attention = AttentionImpl::kFlash) {
  return prepare(load_model("llama-3.1-8b").value(), {.framework = Framework::kTorchtitan, .attention = attention})
      .value();
}

Layout job(Recompute recompute, int64_t every = 0) {
  Layout l;
  l.seq_len = 8192;
  l.micro_batch = 1;
  l.parallel.dp = 8;
  l.recompute = recompute;
  l.selective_ac_every = every;
  return l;
}

// Outside the blocks: ids 8·T; final norm input 2·T·h, rstd 4·T, its output 2·T·h (output's input);
// fp32 log-softmax 4·T·V and int64 targets 8·T.
constexpr int64_t kEmbedding = 8 * kT;                                                         // 65,536
constexpr int64_t kHead = 2 * kT * 4096 + 4 * kT + 2 * kT * 4096 + 4 * kT * 128256 + 8 * kT;  // 4,337,008,640

TEST(Torchtitan, OpLevelSacLlama31_8bFsdp2HandComputed) {
  Totals t;
  ASSERT_TRUE(evaluate(titan(), job(Recompute::kSelective), t));
  // Per block: input x 2·T·h + wq out 2·T·(a·d) + wv out 2·T·(kv·d) + sdpa out 2·T·(a·d) + fp32
  // logsumexp 4·a·T + w1 out 2·T·f + w2 out 2·T·h = 16,384·31,744 + 1,048,576.
  EXPECT_EQ(t.per_layer, 521'142'272);
  EXPECT_EQ(t.activations_total, int64_t{32} * 521'142'272 + kEmbedding + kHead);  // 21,013,626,880
  EXPECT_EQ(t.activations_total, 21'013'626'880);
  // FSDP2 shards over dp 8: fp32 params 4·Ψ/8, fp32 grads 4·Ψ/8, AdamW 8·Ψ/8.
  EXPECT_EQ(t.weights, 4'015'130'624);
  EXPECT_EQ(t.gradients, 4'015'130'624);
  EXPECT_EQ(t.optimizer, 8'030'261'248);
  // Transient: the loss backward 8·T·V (8,405,385,216; train.py deletes pred) is the largest of the
  // others (the op-SAC rerun is 2·T·(3h + a·d + kv·d + 3f) + 8·T = 989,921,280); FSDP2 adds two bf16
  // blocks 4·Ψ_block, the bf16 [norm, output] 2·Ψ_head and one block's fp32 grads 4·Ψ_block.
  EXPECT_EQ(t.recompute_peak, 989'921'280);
  // It reruns the 2nd, 4th and 6th mm of each block (wk, wo, w3): 2·T·(h·kv·d + a·d·h + h·f) FLOPs.
  EXPECT_DOUBLE_EQ(t.recompute_flops, 32.0 * 2 * kT * (4096.0 * 1024 + 4096.0 * 4096 + 4096.0 * 14336));
  EXPECT_EQ(t.transient, 8'405'385'216 + 872'448'000 + 1'050'681'344 + 872'448'000);
  EXPECT_EQ(t.total, 16'060'522'496 + 21'013'626'880 + 11'200'962'560);  // 48,275,111,936 B = 44.96 GiB
}

TEST(Torchtitan, NoneFullAndLayerSacBracketOpSac) {
  const PreparedModel m = titan();
  Totals none, full, layer2, op;
  ASSERT_TRUE(evaluate(m, job(Recompute::kNone), none));
  ASSERT_TRUE(evaluate(m, job(Recompute::kFull), full));
  ASSERT_TRUE(evaluate(m, job(Recompute::kSelective, 2), layer2));
  ASSERT_TRUE(evaluate(m, job(Recompute::kSelective), op));
  // none: 2·T·(4h + 2·a·d + 2·kv·d + 4f) + 4·a·T + 8·T (two rstd).
  EXPECT_EQ(none.per_layer, 2 * kT * (4 * 4096 + 2 * 4096 + 2 * 1024 + 4 * 14336) + 4 * 32 * kT + 8 * kT);
  EXPECT_EQ(none.per_layer, 1'376'845'824);
  // full: the block input, 2·T·h.
  EXPECT_EQ(full.activations_total, 32 * 2 * kT * 4096 + kEmbedding + kHead);
  // selective 2: blocks 2, 4, ..., 32 (1-based) checkpointed: 16 inputs + 16 whole blocks.
  EXPECT_EQ(layer2.activations_total, 16 * 2 * kT * 4096 + int64_t{16} * 1'376'845'824 + kEmbedding + kHead);
  EXPECT_LT(full.activations_total, op.activations_total);
  EXPECT_LT(op.activations_total, layer2.activations_total);
  EXPECT_LT(layer2.activations_total, none.activations_total);
}

TEST(Torchtitan, RefusesWhatItDoesNotModel) {
  const ModelSpec llama = load_model("llama-3.1-8b").value();
  auto eager = prepare(llama, {.framework = Framework::kTorchtitan, .attention = AttentionImpl::kEager});
  ASSERT_FALSE(eager);
  EXPECT_EQ(eager.error().field, "attention");
  auto moe = prepare(load_model("mixtral-8x7b").value(), {.framework = Framework::kTorchtitan});
  ASSERT_FALSE(moe);
  EXPECT_EQ(moe.error().field, "framework");
  auto qwen2 = prepare(load_model("qwen2.5-7b").value(), {.framework = Framework::kTorchtitan});  // q/k/v biases
  ASSERT_FALSE(qwen2);
  EXPECT_EQ(qwen2.error().field, "framework");

  Layout one_gpu = job(Recompute::kNone);
  one_gpu.parallel.dp = 1;  // no fully_shard: torch.autocast instead (maybe_enable_amp), not modeled
  Totals t;
  ASSERT_FALSE(evaluate(titan(), one_gpu, t));
  EXPECT_STREQ(t.error_field, "dp");

  Layout tp = job(Recompute::kNone);
  tp.parallel.tp = 2;
  auto r = explain(titan(), tp);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().field, "tp");
  // selective_ac_option N belongs to torchtitan's selective mode only.
  auto hf = prepare(llama, {}).value();
  auto wrong = explain(hf, job(Recompute::kSelective, 2));
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().field, "selective_ac_option");
}

TEST(Torchtitan, ReportTermsAddUpAndNameFsdp2) {
  auto r = explain(titan(), job(Recompute::kSelective)).value();
  EXPECT_EQ(r.estimate.memory.total().count(), r.totals.total);
  ASSERT_NE(r.estimate.memory.find("fsdp2_head_unsharded"), nullptr);
  EXPECT_EQ(r.estimate.memory.find("fsdp2_head_unsharded")->bytes.count(), 2 * 525'340'672);
  EXPECT_EQ(r.estimate.memory.find("fsdp2_gathered_blocks")->bytes.count(), 4 * 218'112'000);
}

}  // namespace
}  // namespace actmem
