// `actmem allocator` end to end, on a trace recorded on a GPU (validation/allocator_traces/, from
// silmont2000/assignment2-systems@133f0643 mem_snapshot.pickle: 9 segments, 7 of them 512 MiB).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_run.h"

namespace actmem {
namespace {

using testing_cli::run;

const std::string kTrace = std::string(ACTMEM_SOURCE_DIR) + "/validation/allocator_traces/silmont_attention_fp32.json";

TEST(AllocatorCli, ReplaysARecordedTrace) {
  const auto r = run("allocator --trace " + kTrace + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // The recorded segments: 7 × 512 MiB + 20 MiB + 2 MiB, never freed.
  EXPECT_EQ(j["reserved_peak_bytes"], 7LL * 536870912 + 20971520 + 2097152);
  EXPECT_EQ(j["device_allocs"], 9);
  const auto text = run("allocator --trace " + kTrace);
  EXPECT_NE(text.out.find("peak reserved (max_memory_reserved)"), std::string::npos);
}

TEST(AllocatorCli, BadInputIsOneLineAndExitTwo) {
  const std::vector<std::string> cases = {"allocator --trace /nonexistent.json",
                                          "allocator --trace " + kTrace + " --alloc-conf expandable_segments:yes",
                                          "allocator --trace " + kTrace + " --capacity 80XB"};
  for (const std::string& args : cases) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  }
}

}  // namespace
}  // namespace actmem
