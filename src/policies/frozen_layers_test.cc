// --frozen-layers: hand-computed for Llama-3-8B (config.json: V 128256, h 4096, 32 layers, kv 8 × d 128,
// f 14336, untied head, 8,030,261,248 parameters; one layer 218,112,000 = q 4096² + k, v 1024·4096 +
// o 4096² + gate, up, down 14336·4096 + two norms 4096), the activation rules measured in
// validation/notes/frozen-layers.md and validation/frozen_layers_validation.py.
#include <gtest/gtest.h>

#include "api/library.h"
#include "policies/frozen_layers.h"

namespace actmem {
namespace {

constexpr int64_t kSeq = 8192;
constexpr int64_t kHidden = 4096;
constexpr int64_t kFfn = 14336;
constexpr int64_t kLayerParams = 218'112'000;
constexpr int64_t kParams = 8'030'261'248;

Expected<Report> llama_3_8b(int64_t frozen_layers, bool freeze_embeddings = false, Layout layout = {.seq_len = kSeq}) {
  Workload w;
  w.frozen_layers = frozen_layers;
  w.freeze_embeddings = freeze_embeddings;
  auto p = prepare(load_model("llama-3-8b").value(), w);
  if (!p) return p.error();
  return explain(*p, layout);
}

TEST(FrozenLayers, NoGradientOrOptimizerStateForTheFrozenLayers) {
  const Report r = llama_3_8b(2).value();
  const int64_t trainable = kParams - 2 * kLayerParams;
  EXPECT_EQ(r.totals.weights, kParams * 2);
  EXPECT_EQ(r.totals.gradients, trainable * 2);
  EXPECT_EQ(r.totals.optimizer, trainable * 12);  // fp32 master + fp32 m, v (mixed precision)
}

TEST(FrozenLayers, WithTheEmbeddingTheyAddUp) {
  const Report r = llama_3_8b(2, true).value();
  const int64_t trainable = kParams - 2 * kLayerParams - int64_t{128256} * kHidden;
  EXPECT_EQ(r.totals.gradients, trainable * 2);
  EXPECT_EQ(r.totals.optimizer, trainable * 12);
}

TEST(FrozenLayers, ZeroTwoShardsOnlyTheTrainedGradients) {
  const Report r = llama_3_8b(4, false, {.seq_len = kSeq, .parallel = {.dp = 8}, .zero_stage = 2}).value();
  const int64_t trainable = kParams - 4 * kLayerParams;
  EXPECT_EQ(r.totals.weights, kParams * 2);
  EXPECT_EQ(r.totals.gradients, trainable * 2 / 8);
  EXPECT_EQ(r.totals.optimizer, trainable * 12 / 8);
}

// frozen-layers.md row 4: a frozen layer with a trained embedding keeps what the input's gradient
// needs. It drops, per layer, both norms' normalized x (kept by weight·x) and outputs (kept by the
// q/k/v and gate/up linears for their weights), 4 · 2·s·h, and down_proj's input act·up, 2·s·f; the
// o_proj input is flash attention's saved output either way.
TEST(FrozenLayers, FrozenLayersAfterATrainedEmbeddingKeepNoWeightInputs) {
  const Report plain = llama_3_8b(0).value();
  const Report frozen = llama_3_8b(2).value();
  EXPECT_EQ(frozen.totals.per_layer, plain.totals.per_layer);  // layer 16 trains
  const int64_t per_frozen_layer = 8 * kSeq * kHidden + 2 * kSeq * kFfn;  // 503,316,480
  EXPECT_EQ(plain.totals.activations_total - frozen.totals.activations_total, 2 * per_frozen_layer);
}

// Rows 2 and 3: after a frozen embedding the frozen layers record nothing, and the first trained
// layer's RMSNorm keeps no fp32 x (4·s·h) and no rstd (4·s); the embedding no input_ids (8·s).
TEST(FrozenLayers, AfterAFrozenEmbeddingTheyKeepNothing) {
  const Report plain = llama_3_8b(0).value();
  const Report frozen = llama_3_8b(2, true).value();
  EXPECT_EQ(plain.totals.activations_total - frozen.totals.activations_total,
            2 * plain.totals.per_layer + 4 * kSeq * kHidden + 4 * kSeq + 8 * kSeq);
}

// Row 5: everything frozen but the head: no layer keeps anything, none saves RoPE's cos and sin
// (2 tables of 2·s·d), and the final norm keeps no fp32 x and no rstd.
TEST(FrozenLayers, AllLayersAndTheEmbeddingFrozen) {
  const Report plain = llama_3_8b(0).value();
  const Report frozen = llama_3_8b(32, true).value();
  const int64_t cos_sin = 2 * 2 * kSeq * 128;
  EXPECT_EQ(frozen.totals.per_layer, 0);
  EXPECT_EQ(plain.totals.activations_total - frozen.totals.activations_total,
            32 * plain.totals.per_layer + cos_sin + 8 * kSeq + 4 * kSeq * kHidden + 4 * kSeq);
  EXPECT_EQ(frozen.totals.gradients, (int64_t{128256} * kHidden + kHidden) * 2);  // LM head + final norm
}

// Under full recomputation a frozen layer after a frozen embedding keeps nothing, not even its
// input (the non-reentrant checkpoint records no graph); the others keep their input 2·s·h.
TEST(FrozenLayers, FullRecomputationKeepsNoInputOfAGraphlessLayer) {
  const Layout full{.seq_len = kSeq, .recompute = Recompute::kFull};
  const Report plain = llama_3_8b(0, true, full).value();
  const Report frozen = llama_3_8b(2, true, full).value();
  EXPECT_EQ(plain.totals.activations_total - frozen.totals.activations_total, 2 * 2 * kSeq * kHidden);
  bool noted = false;
  for (const auto& n : frozen.estimate.notes) noted = noted || n.find("enable_input_require_grads") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(FrozenLayers, Errors) {
  auto out_of_range = llama_3_8b(33);
  ASSERT_FALSE(out_of_range);
  EXPECT_EQ(out_of_range.error().field, "frozen_layers");
  EXPECT_EQ(out_of_range.error().message, "@frozen_layers 33 is out of range; use 0..32 (the model's decoder layers)");
  auto pipeline = llama_3_8b(2, false, {.seq_len = kSeq, .parallel = {.pp = 2}});
  ASSERT_FALSE(pipeline);
  EXPECT_EQ(pipeline.error().field, "pp");
  auto zero3 = llama_3_8b(2, false, {.seq_len = kSeq, .parallel = {.dp = 2}, .zero_stage = 3});
  ASSERT_FALSE(zero3);
  EXPECT_EQ(zero3.error().field, "zero_stage");

  Workload lora;
  lora.frozen_layers = 2;
  lora.lora.rank = 16;
  lora.lora.targets = kLoraQ | kLoraV;
  auto p = prepare(load_model("llama-3-8b").value(), lora).value();
  auto with_lora = explain(p, {.seq_len = kSeq});
  ASSERT_FALSE(with_lora);
  EXPECT_EQ(with_lora.error().field, "frozen_layers");
}

TEST(FrozenLayers, WeightTensorsSplitTheFrozenRows) {
  const auto tensors = weight_tensors_with_frozen_layers(load_model("llama-3-8b").value(), 2);
  int64_t frozen = 0, all = 0, q_trained = 0, q_frozen = 0;
  for (const auto& t : tensors) {
    all += t.numel() * t.count;
    if (t.frozen) frozen += t.numel() * t.count;
    if (t.name == "attn.q_proj") (t.frozen ? q_frozen : q_trained) += t.count;
  }
  EXPECT_EQ(all, kParams);
  EXPECT_EQ(frozen, 2 * kLayerParams);
  EXPECT_EQ(q_frozen, 2);
  EXPECT_EQ(q_trained, 30);
}

TEST(FrozenLayers, PythonKeyword) {
  TrainingSettings s;
  ASSERT_TRUE(set_training_option(s, "frozen_layers", OptionValue{int64_t{6}}));
  EXPECT_EQ(s.workload.frozen_layers, 6);
}

}  // namespace
}  // namespace actmem
