#include "weight_tensors.h"

#include <gtest/gtest.h>

#include "params.h"
#include "presets.h"
#include "static_memory.h"

namespace actmem {
namespace {

// Serving counts weights tensor by tensor (for quantization scales); training counts them by how
// they shard (params.cc). The two are independent derivations from the same shapes and must agree
// on every preset, whole and per TP rank.
TEST(WeightTensors, AgreeWithParameterCountsOnEveryPreset) {
  for (const auto& p : list_presets()) {
    const ModelSpec m = load_preset(p.name).value();
    EXPECT_EQ(total_weight_elements(weight_tensors(m)), count_params(m).total()) << p.name;
  }
}

TEST(WeightTensors, AgreeWithStaticMemoryPerTensorParallelRank) {
  for (const char* name : {"llama-3-70b", "qwen2.5-72b", "mixtral-8x7b", "llama-3-8b"})
    for (int64_t tp : {2, 8, 16}) {
      const ModelSpec m = load_preset(name).value();
      int64_t per_rank = 0;
      for (const auto& t : weight_tensors(m)) per_rank += t.count * t.rank_rows(tp) * t.rank_cols(tp);
      ParallelLayout layout;
      layout.tp = tp;
      EXPECT_EQ(per_rank, stage_params(count_params(m), layout).at(0).total()) << name << " tp " << tp;
    }
}

}  // namespace
}  // namespace actmem
