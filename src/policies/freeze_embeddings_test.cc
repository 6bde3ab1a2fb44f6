// --freeze-embeddings: hand-computed for Llama-3-8B (config.json: V 128256, h 4096, untied head,
// 8,030,261,248 parameters), the activation rule measured in validation/freeze_validation.py
// (validation/notes/frozen-layers.md).
#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

Report llama_3_8b(bool freeze) {
  Workload w;
  w.freeze_embeddings = freeze;
  auto p = prepare(load_model("llama-3-8b").value(), w).value();
  return explain(p, {.seq_len = 8192}).value();
}

TEST(FreezeEmbeddings, NoGradientOrOptimizerStateForTheEmbedding) {
  const Report r = llama_3_8b(true);
  const int64_t frozen = int64_t{128256} * 4096;  // 525,336,576
  const int64_t trainable = int64_t{8'030'261'248} - frozen;
  EXPECT_EQ(r.totals.weights, int64_t{8'030'261'248} * 2);
  EXPECT_EQ(r.totals.gradients, trainable * 2);
  EXPECT_EQ(r.totals.optimizer, trainable * 12);  // fp32 master + fp32 m, v (mixed precision)
}

TEST(FreezeEmbeddings, EmbeddingAndFirstNormSaveLess) {
  const Report plain = llama_3_8b(false);
  const Report frozen = llama_3_8b(true);
  EXPECT_EQ(frozen.totals.per_layer, plain.totals.per_layer);  // the middle layer is unchanged
  // input_ids (8·s) + layer 0's RMSNorm fp32 copy of x (4·s·h) and rstd (4·s).
  EXPECT_EQ(plain.totals.activations_total - frozen.totals.activations_total,
            8 * 8192 + int64_t{4} * 8192 * 4096 + 4 * 8192);
}

}  // namespace
}  // namespace actmem
