// --grad-accum: the AccumulateGrad transient (torch/csrc/autograd/functions/accumulate_grad.h:
// `variable_grad += new_grad` once .grad exists), hand-computed from config.json shapes:
// Llama-3-8B's largest tensor is its untied LM head, V·h = 128256·4096; Gemma-2-9B ties its head to
// the embedding (V 256000, h 3584, f 14336), so with the embedding frozen the largest trainable
// tensor is an MLP matrix f·h.
#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

Expected<Report> run(const char* model, Workload w, Layout l) {
  auto p = prepare(load_model(model).value(), w);
  if (!p) return p.error();
  return explain(*p, l);
}

const Term* accumulated(const Report& r) { return r.estimate.transients.find("accumulated_grad"); }

TEST(GradAccum, OneParameterGradientIsATransient) {
  Workload w;
  w.loss = LossImpl::kFusedLinearCE;  // no logits-sized loss transient to hide it
  const Report r = run("llama-3-8b", w, {.seq_len = 2048, .recompute = Recompute::kFull, .grad_accum = 4}).value();
  const Term* t = accumulated(r);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bytes.count(), int64_t{128256} * 4096 * 2);  // bf16 gradients: 1,050,673,152
  EXPECT_GE(r.totals.transient, t->bytes.count());
  const Report one = run("llama-3-8b", w, {.seq_len = 2048, .recompute = Recompute::kFull}).value();
  EXPECT_EQ(accumulated(one), nullptr);
  // Nothing else moves: activations, weights, gradients, optimizer are per micro-batch.
  EXPECT_EQ(r.totals.activations, one.totals.activations);
  EXPECT_EQ(r.totals.gradients, one.totals.gradients);
  EXPECT_EQ(r.totals.optimizer, one.totals.optimizer);
  EXPECT_EQ(r.totals.transient, std::max(one.totals.transient, t->bytes.count()));
}

TEST(GradAccum, SplitByTensorParallelismAndInTheGradientDtype) {
  Workload w;
  w.grad_dtype = DType::kFP32;
  const Report r = run("llama-3-8b", w, {.seq_len = 2048, .parallel = {.tp = 2}, .grad_accum = 2}).value();
  ASSERT_NE(accumulated(r), nullptr);
  EXPECT_EQ(accumulated(r)->bytes.count(), int64_t{128256} / 2 * 4096 * 4);
}

TEST(GradAccum, FrozenTiedEmbeddingLeavesTheLargestMlpMatrix) {
  Workload w;
  w.freeze_embeddings = true;
  const Report r = run("gemma-2-9b", w, {.seq_len = 1024, .grad_accum = 8}).value();
  ASSERT_NE(accumulated(r), nullptr);
  EXPECT_EQ(accumulated(r)->bytes.count(), int64_t{14336} * 3584 * 2);
}

TEST(GradAccum, NoTransientWhereGradientsDoNotAccumulateInDotGrad) {
  Workload megatron;
  megatron.framework = Framework::kMegatron;  // gradient_accumulation_fusion into main_grad
  EXPECT_EQ(accumulated(run("llama-3-8b", megatron, {.seq_len = 2048, .grad_accum = 4}).value()), nullptr);
  // ZeRO-2: reduce-scattered every micro-batch into the partitioned gradient
  EXPECT_EQ(accumulated(run("llama-3-8b", {}, {.seq_len = 2048, .parallel = {.dp = 4}, .zero_stage = 2, .grad_accum = 4})
                            .value()),
            nullptr);
}

TEST(GradAccum, Errors) {
  auto pipeline = run("llama-3-8b", {}, {.seq_len = 2048, .parallel = {.pp = 2}, .grad_accum = 4});
  ASSERT_FALSE(pipeline);
  EXPECT_EQ(pipeline.error().field, "grad_accum");
  EXPECT_EQ(pipeline.error().message,
            "@grad_accum 4: with a pipeline the micro-batches of a step are @num_micro_batches; give "
            "@num_micro_batches 4 instead");
  Workload in_backward;
  in_backward.optimizer_in_backward = true;
  auto step = run("llama-3-8b", in_backward, {.seq_len = 2048, .grad_accum = 2});
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error().field, "grad_accum");
  auto zero = run("llama-3-8b", {}, {.seq_len = 2048, .grad_accum = 0});
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().field, "grad_accum");
}

TEST(GradAccum, PythonKeywordAndNote) {
  TrainingSettings s;
  ASSERT_TRUE(set_training_option(s, "grad_accum", OptionValue{int64_t{8}}));
  EXPECT_EQ(s.layout.grad_accum, 8);
  const Report r = run("llama-3-8b", {}, {.seq_len = 2048, .grad_accum = 8}).value();
  bool noted = false;
  for (const auto& n : r.estimate.notes) noted = noted || n.starts_with("gradient accumulation over 8 micro-batches");
  EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace actmem
