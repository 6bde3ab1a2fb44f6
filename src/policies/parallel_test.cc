#include "policies/parallel.h"

#include <gtest/gtest.h>

#include "model/model_spec.h"
#include "model/test_models.h"

namespace actmem {
namespace {

std::string error_of(const ModelSpec& m, const ParallelLayout& p) {
  auto r = validate_layout(m, p);
  return r ? std::string{} : r.error().message;
}

TEST(ValidateLayout, AcceptsCommonLayouts) {
  EXPECT_EQ(error_of(testing::llama_3_70b(), {.tp = 8, .sp = true, .pp = 4, .vpp = 5}), "");
  // kv 8 < tp 16: KV heads replicated, one per rank.
  EXPECT_EQ(error_of(testing::llama_3_70b(), {.tp = 16}), "");
  EXPECT_EQ(error_of(testing::mixtral_8x7b(), {.tp = 2, .ep = 8}), "");
}

TEST(ValidateLayout, ErrorsNameTheFlagAndAFix) {
  const auto tp = error_of(testing::llama_3_70b(), {.tp = 3});
  EXPECT_NE(tp.find("@tp 3"), std::string::npos) << tp;
  EXPECT_NE(tp.find("1, 2, 4, 8"), std::string::npos) << tp;
  // Library errors name the option as @field; each front end spells it (the CLI: --tp).
  EXPECT_EQ(validate_layout(testing::llama_3_70b(), {.tp = 3}).error().field, "tp");
  EXPECT_EQ(validate_layout(testing::llama_3_70b(), {.tp = 3}).error().kind, ErrorKind::kIncompatible);
  const auto pp = error_of(testing::llama_3_70b(), {.pp = 3});
  EXPECT_NE(pp.find("@pp 3"), std::string::npos) << pp;
  EXPECT_NE(pp.find("valid @pp"), std::string::npos) << pp;
  EXPECT_NE(error_of(testing::llama_3_70b(), {.sp = true}).find("@tp 2"), std::string::npos);
  EXPECT_NE(error_of(testing::llama_3_70b(), {.ep = 2}).find("@ep 1"), std::string::npos);
  EXPECT_NE(error_of(testing::mixtral_8x7b(), {.ep = 3}).find("1, 2, 4, 8"), std::string::npos);
  EXPECT_NE(error_of(testing::llama_3_70b(), {.vpp = 2}).find("@pp 2"), std::string::npos);
  EXPECT_NE(error_of(testing::llama_3_70b(), {.tp = 0}).find("@tp 0"), std::string::npos);
}

TEST(ValidateSequence, ContextAndSequenceParallel) {
  EXPECT_TRUE(validate_sequence(8192, {.cp = 4}));
  auto cp = validate_sequence(100, {.cp = 4});  // load-balanced causal CP needs seq % 8 == 0
  ASSERT_FALSE(cp);
  EXPECT_NE(cp.error().message.find("@seq_len 104"), std::string::npos) << cp.error().message;
  EXPECT_FALSE(validate_sequence(4098, {.tp = 4, .sp = true}));
}

}  // namespace
}  // namespace actmem
