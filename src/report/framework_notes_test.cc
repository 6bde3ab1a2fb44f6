// explain()'s notes come from the framework's own writer (framework_notes.cc), each at its place:
// torchtitan names its block rules and its selective_ac_option (validation/EXPECTED.md
// "torchtitan", _apply_op_sac / _apply_layer_sac), hf its transformers version and its missing
// tensor parallelism, megatron its router and the Korthikanti et al. 2022 Eq. 1 caveat.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace actmem {
namespace {

std::vector<std::string> notes_of(const char* model, const Workload& w, const Layout& l) {
  const TrainingEstimate e = testing::estimate_for_test(load_model(model).value(), w, l);
  return e.activations ? e.activations->notes : std::vector<std::string>{};
}

/// The index of the first note starting with `prefix`, or -1.
int find(const std::vector<std::string>& notes, const std::string& prefix) {
  for (std::size_t i = 0; i < notes.size(); ++i)
    if (notes[i].rfind(prefix, 0) == 0) return static_cast<int>(i);
  return -1;
}

Layout layout(Recompute r, int64_t tp = 1, int64_t every = 0) {
  Layout l;
  l.seq_len = 4096;
  l.micro_batch = 1;
  l.recompute = r;
  l.parallel.tp = tp;
  l.parallel.dp = 8;
  l.selective_ac_every = every;
  return l;
}

TEST(FrameworkNotes, TorchtitanNamesItsBlockAndItsSacOption) {
  const Workload w{.framework = Framework::kTorchtitan, .attention = AttentionImpl::kFlash};
  const auto op = notes_of("llama-3.1-8b", w, layout(Recompute::kSelective));
  const int rules = find(op, "torchtitan rules: its Llama 3 block (v0.2.2");
  ASSERT_GE(rules, 0);
  EXPECT_GE(find(op, "selective_ac_option op: each block keeps its input"), rules + 1);
  EXPECT_LT(find(op, "framework torchtitan,"), rules);  // the first note, as under every framework
  const auto every2 = notes_of("llama-3.1-8b", w, layout(Recompute::kSelective, 1, 2));
  EXPECT_GE(find(every2, "selective_ac_option 2: every 2-th block (1-based)"), 0);
  EXPECT_EQ(find(every2, "selective_ac_option op"), -1);
  EXPECT_EQ(find(every2, "selective recomputation"), -1);  // neither Megatron's nor HF's wording
  const auto none = notes_of("llama-3.1-8b", w, layout(Recompute::kNone));
  EXPECT_GE(find(none, "torchtitan rules:"), 0);
  EXPECT_EQ(find(none, "selective_ac_option"), -1);
}

TEST(FrameworkNotes, HfNamesItsVersionAndItsMissingTensorParallelism) {
  const auto notes = notes_of("llama-3.1-8b", {.framework = Framework::kHF, .attention = AttentionImpl::kFlash},
                              layout(Recompute::kSelective, 2));
  EXPECT_GE(find(notes, "hf rules: transformers 5 (hf_version, the default"), 0);
  EXPECT_GE(find(notes, "selective recomputation is Megatron's (HF has none built in)"), 0);
  EXPECT_GT(find(notes, "HF has no tensor/context parallelism of its own"), find(notes, "TP splits heads"));
  EXPECT_EQ(find(notes, "torchtitan rules:"), -1);
  EXPECT_EQ(find(notes, "Megatron MoE:"), -1);
}

TEST(FrameworkNotes, MegatronNamesItsRouterAndTheTextbookCaveat) {
  const Workload w{.framework = Framework::kMegatron, .attention = AttentionImpl::kFlash};
  const auto moe = notes_of("mixtral-8x7b", w, layout(Recompute::kNone, 2));
  const int generic = find(moe, "MoE dropless with balanced routing assumed");
  ASSERT_GE(generic, 0);
  EXPECT_GT(find(moe, "Megatron MoE: TopKRouter with the aux loss on, allgather token dispatcher"), generic);
  EXPECT_EQ(find(moe, "HF has no tensor"), -1);
  // GPT-2: LayerNorm, GeLU, no MoE: Eq. 1's model, whose fp32 LayerNorm statistics it leaves out.
  const auto gpt2 = notes_of("gpt2", w, layout(Recompute::kNone));
  EXPECT_GT(find(gpt2, "Korthikanti et al. 2022 Eq. 1"), find(gpt2, "FLOPs count attention"));
  EXPECT_EQ(find(notes_of("llama-3.1-8b", w, layout(Recompute::kNone)), "Korthikanti"), -1);
}

}  // namespace
}  // namespace actmem
