// --offload-activations: hand-computed cases for Llama-3-8B (h 4096, d 128, V 128256) under the
// rule of policies/offload.h (torchtune _activation_offloading.py), measured by
// validation/offload_validation.py.
#include "policies/offload.h"

#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

Report llama_3_8b(const Workload& w, Layout l) {
  auto p = prepare(load_model("llama-3-8b").value(), w).value();
  return explain(p, l).value();
}

TEST(Offload, GpuKeepsTheHeadInputAndTheLoss) {
  const Report r = llama_3_8b({}, {.seq_len = 8192, .offload_activations = true});
  // LM head input 2·s·h + fp32 log-softmax 4·s·V + int64 targets 8·s.
  const int64_t gpu = int64_t{2} * 8192 * 4096 + int64_t{4} * 8192 * 128256 + 8 * 8192;
  EXPECT_EQ(r.totals.activations, gpu);
  EXPECT_EQ(r.totals.activations + r.totals.host_activations, r.totals.activations_total);
  // The working set (an allowance): one layer's saved tensors.
  EXPECT_EQ(r.totals.transient, std::max(r.totals.per_layer, int64_t{10} * 8192 * 128256));
  const Report plain = llama_3_8b({}, {.seq_len = 8192});
  EXPECT_EQ(plain.totals.total - r.totals.total, plain.totals.activations - gpu);
}

TEST(Offload, CheckpointKeywordsStayOnTheGpu) {
  // Full recomputation: + RoPE cos and sin (2·s·d each) and position ids (8·s), passed as keywords.
  const Report r = llama_3_8b({}, {.seq_len = 8192, .recompute = Recompute::kFull, .offload_activations = true});
  const int64_t gpu = int64_t{2} * 8192 * 4096 + int64_t{4} * 8192 * 128256 + 8 * 8192 + 2 * (2 * 8192 * 128) + 8 * 8192;
  EXPECT_EQ(r.totals.activations, gpu);
  // The 32 layer inputs (2·s·h each), the embedding's input_ids (8·s) and the final norm's saves
  // (fp32 copy 4·s·h, rstd 4·s, normalized 2·s·h) go to the host.
  EXPECT_EQ(r.totals.host_activations, 32 * (int64_t{2} * 8192 * 4096) + 8 * 8192 +
                                           (int64_t{4} * 8192 * 4096 + 4 * 8192 + int64_t{2} * 8192 * 4096));
}

TEST(Offload, FusedLossKeepsItsGradientsOnTheGpu) {
  Workload w;
  w.loss = LossImpl::kFusedLinearCE;
  const Report r = llama_3_8b(w, {.seq_len = 4096, .offload_activations = true});
  EXPECT_EQ(r.totals.activations, int64_t{2} * 4096 * 4096 + int64_t{2} * 128256 * 4096);  // grad_input, grad_weight
}

TEST(Offload, Checks) {
  Workload m;
  m.framework = Framework::kMegatron;
  auto e = explain(prepare(load_model("llama-3-8b").value(), m).value(), {.seq_len = 4096, .offload_activations = true});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().field, "offload_activations");
  Totals t;
  EXPECT_FALSE(evaluate(prepare(load_model("llama-3-8b").value(), {}).value(),
                        {.seq_len = 4096, .parallel = {.pp = 2}, .offload_activations = true}, t));
  EXPECT_STREQ(t.error_field, "offload_activations");
}

}  // namespace
}  // namespace actmem
