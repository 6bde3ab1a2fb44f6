// --loss: hand-computed cases for Llama-3-8B (config.json: h 4096, V 128256, untied head) and the
// rules' sources (policies/loss_impl.h: torchtune ce_chunked_output_loss.py, Liger
// fused_linear_cross_entropy.py); measured in validation/loss_validation.py.
#include "policies/loss_impl.h"

#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

TEST(Loss, ParsesTheFlag) {
  EXPECT_EQ(parse_loss("full")->impl, LossImpl::kFull);
  EXPECT_EQ(parse_loss("fused-linear-ce")->impl, LossImpl::kFusedLinearCE);
  EXPECT_EQ(parse_loss("chunked")->chunks, 8);  // torchtune's num_output_chunks default
  EXPECT_EQ(parse_loss("chunked:16")->chunks, 16);
  EXPECT_EQ(loss_name(LossImpl::kChunked, 16), "chunked:16");
  for (const char* bad : {"chunked:0", "chunked:x", "chunked:", "chunked:-2", "liger"}) {
    auto e = parse_loss(bad);
    ASSERT_FALSE(e) << bad;
    EXPECT_EQ(e.error().field, "loss");
  }
}

// Liger fused_linear_cross_entropy_forward: inc_factor = ⌈V/H⌉, chunk = min(next_pow2(⌈BT/inc⌉), BT).
TEST(Loss, LigerChunkRows) {
  EXPECT_EQ(liger_chunk_rows(8192, 4096, 128256), 256);   // inc ⌈31.3⌉ = 32; 8192/32 = 256
  EXPECT_EQ(liger_chunk_rows(4 * 4096, 4096, 32000), 2048);  // Liger's own comment: BT 16384, V 32000 -> 2048
  EXPECT_EQ(liger_chunk_rows(192, 64, 1003), 16);         // inc 16; 12 -> 16
  EXPECT_EQ(liger_chunk_rows(100, 4096, 4000), 100);      // V < H: one chunk of all rows (min with BT)
}

TEST(Loss, TransientBytes) {
  Workload w;  // bf16 activations
  w.loss = LossImpl::kFusedLinearCE;
  // e·c·V + 5·BT = 2·256·128256 + 5·8192.
  EXPECT_EQ(loss_transient_bytes(w, 8192, 1, 4096, 128256), 2 * 256 * 128256 + 5 * 8192);
  w.loss = LossImpl::kChunked;
  w.loss_chunks = 8;
  // Forward: 2·8192·V (all chunks) + 4·1024·V (one fp32 upcast) = 20,480·V; backward 8·1024·V.
  EXPECT_EQ(loss_transient_bytes(w, 8192, 1, 4096, 128256), int64_t{20480} * 128256);
  w.loss_chunks = 2;
  // Forward 2·8192·V + 4·4096·V = 32,768·V; backward 8·4096·V = 32,768·V: equal.
  EXPECT_EQ(loss_transient_bytes(w, 8192, 1, 4096, 128256), int64_t{32768} * 128256);
  w.loss_chunks = 1;  // backward dominates: 8·s·b·V (the logits were deleted before backward)
  EXPECT_EQ(loss_transient_bytes(w, 8192, 1, 4096, 128256), int64_t{8} * 8192 * 128256);
  w.dtype = DType::kFP32;  // .float() is a no-op: forward holds only the fp32 logits
  w.loss_chunks = 8;
  EXPECT_EQ(loss_transient_bytes(w, 8192, 1, 4096, 128256), int64_t{4} * 8192 * 128256);
  w.dtype = DType::kBF16;
  w.loss_chunks = 3;  // 100 rows -> 34, 33, 33: forward 2·100·V + 4·33·V; backward max(8·33, 8·34 − 4·33)·V
  EXPECT_EQ(loss_transient_bytes(w, 100, 1, 64, 1000), (200 + 132) * 1000);
}

Report estimate(const Workload& w, int64_t seq = 8192) {
  auto p = prepare(load_model("llama-3-8b").value(), w).value();
  return explain(p, {.seq_len = seq}).value();
}

int64_t tensor_bytes(const Report& r, const std::string& name) {
  for (const auto& t : r.estimate.activations->tensors)
    if (t.name == name) return t.bytes.count();
  return -1;
}

TEST(Loss, SavedTensorsLlama3_8B) {
  Workload full;
  const Report f = estimate(full);
  // full: fp32 log-softmax 4·s·V + targets 8·s, the final-norm output kept by lm_head.
  EXPECT_EQ(tensor_bytes(f, "loss.log_softmax"), int64_t{4} * 8192 * 128256);
  Workload chunked;
  chunked.loss = LossImpl::kChunked;
  const Report c = estimate(chunked);
  EXPECT_EQ(c.totals.activations_total, f.totals.activations_total);  // the same saved bytes
  EXPECT_EQ(c.totals.transient, int64_t{20480} * 128256);
  EXPECT_LT(c.totals.total, f.totals.total);
  Workload fused;
  fused.loss = LossImpl::kFusedLinearCE;
  const Report l = estimate(fused);
  EXPECT_EQ(tensor_bytes(l, "loss.log_softmax"), -1);
  EXPECT_EQ(tensor_bytes(l, "loss.targets"), -1);
  EXPECT_EQ(tensor_bytes(l, "loss.grad_input"), int64_t{2} * 8192 * 4096);
  EXPECT_EQ(tensor_bytes(l, "loss.grad_weight"), int64_t{2} * 128256 * 4096);
  // full − fused = log-softmax + targets + final-norm output (lm_head's input) − the two gradients.
  EXPECT_EQ(f.totals.activations_total - l.totals.activations_total,
            int64_t{4} * 8192 * 128256 + 8 * 8192 + 2 * 8192 * 4096 - 2 * 8192 * 4096 - 2 * 128256 * 4096);
  EXPECT_EQ(l.totals.transient, 2 * 256 * 128256 + 5 * 8192);
  // Under LoRA the LM head is frozen: no grad_weight.
  fused.lora.rank = 8;
  fused.lora.targets = kLoraQ | kLoraV;
  EXPECT_EQ(tensor_bytes(estimate(fused), "loss.grad_weight"), -1);
}

TEST(Loss, Checks) {
  Workload w;
  w.loss = LossImpl::kFusedLinearCE;
  auto p = prepare(load_model("llama-3-8b").value(), w).value();
  auto tp = explain(p, {.seq_len = 4096, .parallel = {.tp = 2}});
  ASSERT_FALSE(tp);
  EXPECT_EQ(tp.error().field, "loss");
  w.framework = Framework::kMegatron;
  auto m = explain(prepare(load_model("llama-3-8b").value(), w).value(), {.seq_len = 4096});
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("@framework megatron"), std::string::npos);
  // issue 20: the refusal names the framework given, not megatron whatever it is. torchtitan's loss is
  // cross_entropy over the full fp32 logits (torchtitan components/loss.py): only --loss full applies.
  Workload titan;
  titan.framework = Framework::kTorchtitan;
  titan.loss = LossImpl::kChunked;
  titan.loss_chunks = 8;
  auto tt = explain(prepare(load_model("llama-3-8b").value(), titan).value(), {.seq_len = 4096, .parallel = {.dp = 8}});
  ASSERT_FALSE(tt);
  EXPECT_EQ(tt.error().field, "loss");
  EXPECT_EQ(tt.error().message,
            "@loss chunked:8 is a transformers/torchtune/Liger loss; with @framework torchtitan use @loss full");
  Workload c;
  c.loss = LossImpl::kChunked;
  c.loss_chunks = 64;
  Totals t;
  EXPECT_FALSE(evaluate(prepare(load_model("llama-3-8b").value(), c).value(), {.seq_len = 32}, t));
  EXPECT_STREQ(t.error_field, "loss");
}

}  // namespace
}  // namespace actmem
