#include "activation.h"

#include <gtest/gtest.h>

#include "test_models.h"

namespace actmem {
namespace {
TEST(Activation, Smoke) {
  auto r = estimate_activations(testing::llama_2_70b(), {.seq_len = 4096, .micro_batch = 2, .recompute = Recompute::kFull});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->per_layer, Bytes{134217728});
}
}  // namespace
}  // namespace actmem
