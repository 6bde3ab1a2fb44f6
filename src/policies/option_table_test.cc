#include "policies/option_table.h"

#include <string>

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(OptionTable, SetsTheFieldEachNameStandsFor) {
  TrainingSettings s;
  EXPECT_EQ(s.layout.seq_len, kDefaultSeqLen);
  ASSERT_TRUE(set_training_option(s, "seq_len", int64_t{4096}));
  ASSERT_TRUE(set_training_option(s, "tp", int64_t{8}));
  ASSERT_TRUE(set_training_option(s, "sp", true));
  ASSERT_TRUE(set_training_option(s, "zero", int64_t{3}));
  ASSERT_TRUE(set_training_option(s, "recompute", std::string("selective")));
  ASSERT_TRUE(set_training_option(s, "hidden_dropout", int64_t{0}));  // a whole number is a real
  ASSERT_TRUE(set_training_option(s, "reserve", std::string("2GiB")));
  EXPECT_EQ(s.layout.seq_len, 4096);
  EXPECT_EQ(s.layout.parallel.tp, 8);
  EXPECT_TRUE(s.layout.parallel.sp);
  EXPECT_EQ(s.layout.zero_stage, 3);
  EXPECT_EQ(s.layout.recompute, Recompute::kSelective);
  EXPECT_EQ(s.workload.hidden_dropout, 0.0);
  EXPECT_EQ(s.layout.reserve, Bytes{int64_t{2} << 30});
}

// The CLI's rule: gradients take the weights' dtype unless --grad-dtype says otherwise, in any order.
TEST(OptionTable, GradDtypeFollowsWeightsUntilSet) {
  TrainingSettings a;
  ASSERT_TRUE(set_training_option(a, "weight_dtype", std::string("fp32")));
  EXPECT_EQ(a.workload.grad_dtype, DType::kFP32);
  TrainingSettings b;
  ASSERT_TRUE(set_training_option(b, "grad_dtype", std::string("fp32")));
  ASSERT_TRUE(set_training_option(b, "weight_dtype", std::string("fp16")));
  EXPECT_EQ(b.workload.weight_dtype, DType::kFP16);
  EXPECT_EQ(b.workload.grad_dtype, DType::kFP32);
}

TEST(OptionTable, ErrorsNameTheOption) {
  TrainingSettings s;
  auto unknown = set_training_option(s, "seqlen", int64_t{1});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().kind, ErrorKind::kUnknownName);
  EXPECT_EQ(unknown.error().message, "unknown option @seqlen; did you mean @seq_len?");
  auto type = set_training_option(s, "tp", std::string("8"));
  ASSERT_FALSE(type);
  EXPECT_EQ(type.error().field, "tp");
  EXPECT_EQ(type.error().message, "@tp '8': expected a whole number");
  auto name = set_training_option(s, "recompute", std::string("fulll"));
  ASSERT_FALSE(name);
  EXPECT_EQ(name.error().message, "unknown recomputation 'fulll'; valid values: none, selective, full");
}

TEST(OptionTable, EveryListedOptionIsSettable) {
  for (const auto& o : training_options()) {
    TrainingSettings s;
    OptionValue v = o.kind == OptionKind::kFlag    ? OptionValue{true}
                    : o.kind == OptionKind::kReal  ? OptionValue{0.0}
                    : o.kind == OptionKind::kCount ? OptionValue{int64_t{1}}
                    : o.kind == OptionKind::kSize  ? OptionValue{std::string("1GiB")}
                                                   : OptionValue{std::string("?")};
    auto r = set_training_option(s, o.name, v);
    // Text options reject "?" with their own table's message, never as an unknown option.
    if (!r) {
      EXPECT_EQ(o.kind, OptionKind::kText) << o.name;
      EXPECT_NE(r.error().message.find("'?'"), std::string::npos) << r.error().message;
    }
  }
}

}  // namespace
}  // namespace actmem
