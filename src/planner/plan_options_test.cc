#include "planner/plan_options.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(PlanOptions, ByNameAsTheFlags) {
  PlanOptions o;
  o.model = "llama-3-8b";
  ASSERT_TRUE(set_plan_option(o, "gpus", int64_t{16}));
  ASSERT_TRUE(set_plan_option(o, "gpu", std::string("h100-80gb")));  // a machine option, into o.machine
  ASSERT_TRUE(set_plan_option(o, "global_batch_tokens", int64_t{524288}));
  ASSERT_TRUE(set_plan_option(o, "tp", int64_t{2}));
  ASSERT_TRUE(set_plan_option(o, "sp", true));
  ASSERT_TRUE(set_plan_option(o, "optimizer", std::string("sgd")));
  EXPECT_EQ(o.machine.gpu, "h100-80gb");
  auto setup = to_plan_request(o);
  ASSERT_TRUE(setup) << setup.error().message;
  EXPECT_EQ(setup->request.global_batch, 64);  // 524,288 tokens / 8,192 per sequence
  EXPECT_EQ(setup->request.tp, 2);
  EXPECT_EQ(setup->request.sp, true);
  EXPECT_EQ(setup->request.cluster.gpus_per_node, 8);
  EXPECT_EQ(setup->model_name, "llama-3-8b");
  EXPECT_EQ(setup->flags_prefix, "--model llama-3-8b --framework megatron --optimizer sgd");
  EXPECT_EQ(setup->flags_suffix, " --gpu h100-80gb");

  auto unknown = set_plan_option(o, "max_tpp", int64_t{4});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message, "unknown option @max_tpp; did you mean @max_tp?");
  auto wrong = set_plan_option(o, "gpus", std::string("many"));
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().field, "gpus");
}

// The defaults help shows are PlanOptions' own initializers: nothing for a pin (searched), a switch
// or max_tp (GPUs per node).
TEST(PlanOptions, DefaultsAreTheStructs) {
  const PlanOptions o;
  EXPECT_EQ(plan_option_default("seq_len"), std::to_string(o.seq_len));
  EXPECT_EQ(plan_option_default("seq_len"), "8192");
  EXPECT_EQ(plan_option_default("top"), "10");
  EXPECT_EQ(plan_option_default("max_vpp"), "8");
  EXPECT_EQ(plan_option_default("tp"), "");
  EXPECT_EQ(plan_option_default("sp"), "");
  EXPECT_EQ(plan_option_default("max_tp"), "");
  EXPECT_EQ(plan_option_default("no_such_option"), "");
  for (const auto& info : plan_options()) {  // every row sets what it names
    PlanOptions p;
    const OptionValue v = info.kind == OptionKind::kFlag   ? OptionValue{true}
                          : info.kind == OptionKind::kText ? OptionValue{std::string("full")}
                                                           : OptionValue{int64_t{3}};
    EXPECT_TRUE(set_plan_option(p, info.name, v)) << info.name;
  }
}

TEST(PlanOptions, ErrorsNameTheOption) {
  PlanOptions o;
  o.gpus = 8;
  o.global_batch = 16;
  EXPECT_EQ(to_plan_request(o).error().field, "gpu");  // no GPU
  o.machine.gpu = "h100-80gb";
  o.global_batch_tokens = 100;  // both given
  EXPECT_EQ(to_plan_request(o).error().field, "global_batch");
  o.global_batch.reset();
  EXPECT_EQ(to_plan_request(o).error().message, "@global_batch_tokens 100: must be a multiple of @seq_len 8192");
  o.global_batch_tokens.reset();
  o.global_batch = 16;
  o.gpus = 0;
  EXPECT_EQ(to_plan_request(o).error().field, "gpus");
}

}  // namespace
}  // namespace actmem
