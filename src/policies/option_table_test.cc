#include "policies/option_table.h"

#include <set>
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

// Megatron-LM keeps a bf16 model's gradients in fp32 (megatron/training/arguments.py: --bf16 sets
// accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16), fp16 ones in fp16; whichever
// of framework and weight_dtype is set first. A gradient dtype given stays.
TEST(OptionTable, MegatronKeepsBf16GradientsInFp32) {
  TrainingSettings a;
  ASSERT_TRUE(set_training_option(a, "framework", std::string("megatron")));
  EXPECT_EQ(a.workload.grad_dtype, DType::kFP32);
  ASSERT_TRUE(set_training_option(a, "weight_dtype", std::string("fp16")));
  EXPECT_EQ(a.workload.grad_dtype, DType::kFP16);
  TrainingSettings b;
  ASSERT_TRUE(set_training_option(b, "weight_dtype", std::string("bf16")));
  EXPECT_EQ(b.workload.grad_dtype, DType::kBF16);  // transformers' Trainer: the weights'
  ASSERT_TRUE(set_training_option(b, "framework", std::string("megatron")));
  EXPECT_EQ(b.workload.grad_dtype, DType::kFP32);
  TrainingSettings c;
  ASSERT_TRUE(set_training_option(c, "grad_dtype", std::string("bf16")));  // --grad-reduce-in-bf16
  ASSERT_TRUE(set_training_option(c, "framework", std::string("megatron")));
  EXPECT_EQ(c.workload.grad_dtype, DType::kBF16);
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

namespace actmem {
namespace {

// The table's own promises: unique names, help for each, an example that sets something other than
// the default (the front-end walks rely on it), and getters that read back what the setters set.
TEST(OptionTable, EveryOptionHasHelpAnExampleAndReadsBack) {
  std::set<std::string_view> names;
  const TrainingSettings defaults;
  for (const auto& spec : training_options()) {
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name;
    EXPECT_FALSE(spec.help.empty()) << spec.name;
    ASSERT_FALSE(spec.example.empty()) << spec.name;
    TrainingSettings s;
    const OptionValue v = spec.kind == OptionKind::kFlag ? OptionValue{true}
                                                         : option_value_from_text(spec.kind, std::string(spec.example));
    ASSERT_TRUE(set_training_option(s, spec.name, v)) << spec.name;
    const auto got = get_training_option(s, spec.name);
    ASSERT_TRUE(got) << spec.name;
    EXPECT_NE(got, get_training_option(defaults, spec.name)) << spec.name;
    // What the getter reads sets the same value again (the JSON echo is a valid input).
    TrainingSettings again;
    ASSERT_TRUE(set_training_option(again, spec.name, *got)) << spec.name;
    EXPECT_EQ(get_training_option(again, spec.name), got) << spec.name;
  }
  EXPECT_GE(names.size(), 62u);
}

TEST(OptionTable, DefaultsComeFromTheStructs) {
  EXPECT_EQ(option_default_text(*find_training_option("seq_len")), "8192");
  EXPECT_EQ(option_default_text(*find_training_option("framework")), "hf");
  EXPECT_EQ(option_default_text(*find_training_option("sp")), "off");
  EXPECT_EQ(option_default_text(*find_training_option("hidden_dropout")), "from config.json");
  EXPECT_EQ(option_choices(*find_training_option("optimizer")), kOptimizerNames.valid());
  EXPECT_EQ(find_training_option("tp")->scope, OptionScope::kLayout);
  EXPECT_EQ(find_training_option("attention")->scope, OptionScope::kWorkload);
  EXPECT_TRUE(find_training_option("fp8")->applies_to(Framework::kMegatron));
  EXPECT_FALSE(find_training_option("fp8")->applies_to(Framework::kHF));
  EXPECT_EQ(find_training_option("nope"), nullptr);
}

TEST(OptionTable, TextBecomesTheKindsValue) {
  EXPECT_EQ(option_value_from_text(OptionKind::kCount, "8"), OptionValue{int64_t{8}});
  EXPECT_EQ(option_value_from_text(OptionKind::kCount, "-5"), OptionValue{int64_t{-5}});
  EXPECT_EQ(option_value_from_text(OptionKind::kCount, "8x"), OptionValue{std::string("8x")});
  EXPECT_EQ(option_value_from_text(OptionKind::kReal, "0.1"), OptionValue{0.1});
  EXPECT_EQ(option_value_from_text(OptionKind::kReal, "0"), OptionValue{int64_t{0}});
  EXPECT_EQ(option_value_from_text(OptionKind::kSize, "2GiB"), OptionValue{std::string("2GiB")});
}

TEST(OptionTable, JsonListsEveryOptionWithItsValue) {
  TrainingSettings s;
  ASSERT_TRUE(set_training_option(s, "tp", int64_t{8}));
  const auto j = options_json(s);
  ASSERT_EQ(j.size(), training_options().size());
  for (const auto& o : j)
    if (o["name"] == "tp") {
      EXPECT_EQ(o["value"], 8);
      EXPECT_EQ(o["default"], 1);
      EXPECT_EQ(o["scope"], "layout");
      EXPECT_EQ(o["min"], 1);
    }
}

}  // namespace
}  // namespace actmem
