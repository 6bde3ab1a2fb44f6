#include "policies/pipeline_inputs.h"

#include <gtest/gtest.h>

namespace actmem {
namespace {

// Megatron-core schedules.py / transformer_block.py (d98e8a64): each chunk fed by another rank keeps
// its last received input (s/cp [/tp under SP], b, h) and that input's gradient.
TEST(PipelineInputs, ChunksAndShape) {
  const Workload w{.framework = Framework::kMegatron};
  // Megatron-LM CI gpt3_7b_tp1_pp4_memory_speed: pp 4, 32 layers at 1 per virtual stage (8 chunks per
  // rank), s 8192, b 1, h 4096, bf16: 8 × 2 × 64 MiB on the last rank.
  const Layout l7b{.seq_len = 8192, .micro_batch = 1, .parallel = {.dp = 2, .pp = 4, .vpp = 8}};
  const PipelineInputsKept last = pipeline_inputs_kept(w, l7b, 4096, 3);
  EXPECT_EQ(last.chunks, 8);
  EXPECT_EQ(last.tensor_bytes, 8192LL * 4096 * 2);
  EXPECT_EQ(last.total(), 1'073'741'824);
  EXPECT_EQ(pipeline_inputs_kept(w, l7b, 4096, 0).chunks, 7);  // rank 0's first chunk embeds its input
  // Sequence parallelism and context parallelism shorten the P2P tensor: s / (cp·tp).
  const Layout sp{.seq_len = 4096, .micro_batch = 2, .parallel = {.tp = 2, .sp = true, .pp = 2, .cp = 2}};
  EXPECT_EQ(pipeline_inputs_kept(w, sp, 1024, 1).tensor_bytes, 1024LL * 2 * 1024 * 2);
  Layout no_sp = sp;
  no_sp.parallel.sp = false;  // without SP every TP rank receives the whole sequence
  EXPECT_EQ(pipeline_inputs_kept(w, no_sp, 1024, 1).tensor_bytes, 2048LL * 2 * 1024 * 2);
  // Nothing without a pipeline, and nothing for frameworks other than Megatron.
  EXPECT_EQ(pipeline_inputs_kept(w, {.seq_len = 8192}, 4096, 0).total(), 0);
  EXPECT_EQ(pipeline_inputs_kept(Workload{}, l7b, 4096, 3).total(), 0);
}

}  // namespace
}  // namespace actmem
