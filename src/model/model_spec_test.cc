#include "model/model_spec.h"

#include <gtest/gtest.h>

#include "model/presets.h"

namespace actmem {
namespace {

// Each TP rank keeps kv/tp KV heads, and one head (replicated) when there are fewer heads than
// ranks: Llama-3-70B (kv 8) at tp 16 is the case Megatron rejects and vLLM runs.
TEST(ModelSpec, KvHeadsPerRankSplitsThenReplicates) {
  EXPECT_EQ(kv_heads_per_rank(8, 1), 8);
  EXPECT_EQ(kv_heads_per_rank(8, 4), 2);
  EXPECT_EQ(kv_heads_per_rank(8, 8), 1);
  EXPECT_EQ(kv_heads_per_rank(8, 16), 1);
  EXPECT_EQ(kv_heads_per_rank(1, 8), 1);  // MQA
  const ModelSpec m = load_preset("llama-3-70b").value();
  EXPECT_EQ(m.kv_heads_per_rank(2), 4);
  EXPECT_EQ(m.kv_heads_per_rank(16), 1);
}

}  // namespace
}  // namespace actmem
