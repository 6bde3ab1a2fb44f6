#include "planner/machine.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

TEST(Machine, OptionsByName) {
  MachineOptions o;
  EXPECT_FALSE(o.given());
  ASSERT_TRUE(set_machine_option(o, "gpu", std::string("h100-80gb")));
  ASSERT_TRUE(set_machine_option(o, "cuda_context", int64_t{1} << 30));  // bytes, as Python passes an int
  ASSERT_TRUE(set_machine_option(o, "fragmentation", 0.1));
  EXPECT_TRUE(o.given());
  auto m = to_machine(o);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->gpu_name, "h100-80gb");
  EXPECT_EQ(m->allowances.cuda_context, Bytes{int64_t{1} << 30});
  EXPECT_EQ(m->allowances.fragmentation, 0.1);
  EXPECT_TRUE(m->has_speeds);
  auto unknown = set_machine_option(o, "gpus", int64_t{8});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().kind, ErrorKind::kUnknownName);
  auto wrong = set_machine_option(o, "gpus_per_node", std::string("eight"));
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().field, "gpus_per_node");
  MachineOptions bad;
  ASSERT_TRUE(set_machine_option(bad, "gpu_memory", std::string("0")));
  EXPECT_EQ(to_machine(bad).error().message,
            "@gpu_memory 0: size '0': expected a positive number with a unit, e.g. 80GiB or 141GB");
}

// dp · b · micro-batches, with pp micro-batches when none are given (1F1B's minimum to fill the pipe).
TEST(Machine, ImpliedGlobalBatch) {
  Layout l;
  l.micro_batch = 2;
  l.parallel.dp = 8;
  l.parallel.pp = 4;
  EXPECT_EQ(implied_global_batch(l), 2 * 8 * 4);
  l.parallel.num_micro_batches = 16;
  EXPECT_EQ(implied_global_batch(l), 2 * 8 * 16);
}

}  // namespace
}  // namespace actmem
