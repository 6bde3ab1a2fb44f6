// The step as a timeline (timeline.h): its allocations peak at the estimate's bytes, each tensor
// named as explain lists it, in the order the step makes them; replayed through the caching
// allocator model it gives the reserved memory.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "api/library.h"

namespace actmem {
namespace {

using detail::StepTimeline;

StepTimeline timeline_of(const std::string& model, const Workload& w, const Layout& l, Report* report = nullptr) {
  auto prepared = prepare(load_model(model).value(), w).value();
  auto tl = detail::step_timeline(prepared, l);
  EXPECT_TRUE(tl) << (tl ? "" : tl.error().message);
  if (report) *report = explain(prepared, l).value();
  return tl ? std::move(*tl) : StepTimeline{};
}

/// Allocs whose name starts with `prefix`, by name.
std::map<std::string, int64_t> allocs(const StepTimeline& tl, const std::string& prefix) {
  std::map<std::string, int64_t> out;
  for (const auto& e : tl.events)
    if (e.alloc && e.name.rfind(prefix, 0) == 0) out[e.name] = e.bytes;
  return out;
}

TEST(StepTimeline, FullRecomputationKeepsEachLayersInputAlone) {
  // GPT-2 (L 12, h 768), s 1024, b 1, full recomputation: each layer keeps its input, 2·s·b·h bytes
  // in bf16 (Korthikanti et al. 2022, "Σ 2·s·b·h" of the seed card), and the step peaks at the
  // estimate's total.
  Report r;
  const auto tl = timeline_of("gpt2", {}, {.seq_len = 1024, .recompute = Recompute::kFull}, &r);
  const auto layers = allocs(tl, "layers.");
  ASSERT_EQ(layers.size(), 12u);
  for (const auto& [name, bytes] : layers) EXPECT_EQ(bytes, 2 * 1024 * 768) << name;
  EXPECT_EQ(tl.allocated_peak, r.totals.total - r.totals.reserve);
  // Held first: weights, gradients, optimizer state, in that order.
  ASSERT_GE(tl.events.size(), 3u);
  EXPECT_EQ(tl.events[0].name, "weights");
  EXPECT_EQ(tl.events[0].bytes, r.totals.weights);
  EXPECT_EQ(tl.events[1].name, "gradients");
  EXPECT_EQ(tl.events[2].name, "optimizer");
}

TEST(StepTimeline, PeaksAtTheLargestTransientOnTopOfEverythingInFlight) {
  // Llama 3 8B, s 4096, nothing recomputed: the loss's backward (the largest transient, 4.89 GiB
  // = (8 + 2)·s·b·V bytes) is the peak event, and every layer's storages are freed after it, last
  // layer first.
  Report r;
  const auto tl = timeline_of("llama-3-8b", {}, {.seq_len = 4096}, &r);
  EXPECT_EQ(tl.allocated_peak, r.totals.total);
  ASSERT_GE(tl.peak_event, 0);
  const auto& peak = tl.events[static_cast<std::size_t>(tl.peak_event)];
  EXPECT_EQ(peak.kind, detail::TensorKind::kTransient);
  EXPECT_EQ(peak.bytes, int64_t{10} * 4096 * 128256);
  EXPECT_EQ(peak.bytes, r.totals.transient);
  // The first free after the transient's is the head's last storage; the last free is layer 0's first.
  std::size_t last_free = 0;
  for (std::size_t i = 0; i < tl.events.size(); ++i)
    if (!tl.events[i].alloc) last_free = i;
  EXPECT_EQ(tl.events[last_free].name.rfind("embedding.", 0), 0u) << tl.events[last_free].name;
  // The saved bytes sum to the estimate's activations.
  int64_t saved = 0;
  for (const auto& e : tl.events)
    if (e.alloc && e.kind == detail::TensorKind::kActivations) saved += e.bytes;
  EXPECT_EQ(saved, r.totals.activations);
}

TEST(StepTimeline, PipelineRankZeroHoldsPpMicroBatches) {
  // 1F1B at pp 4 (Narayanan et al. 2021): rank 0 holds 4 micro-batches in flight, each of its 8 of
  // Llama 2 7B's 32 layers once per micro-batch; the peak equals the estimate's.
  Report r;
  Layout l{.seq_len = 2048, .recompute = Recompute::kFull};
  l.parallel.pp = 4;
  l.parallel.num_micro_batches = 8;
  const auto tl = timeline_of("llama-2-7b", {.framework = Framework::kMegatron}, l, &r);
  EXPECT_EQ(r.totals.peak_stage, 0);
  EXPECT_EQ(tl.allocated_peak, r.totals.total);
  for (int mb = 1; mb <= 4; ++mb) EXPECT_EQ(allocs(tl, "mb " + std::to_string(mb) + " · layers.").size(), 8u) << mb;
  EXPECT_TRUE(allocs(tl, "mb 5 ").empty());
}

TEST(StepTimeline, ReplayedItReservesAtLeastItsTensors) {
  const auto tl = timeline_of("llama-3-8b", {}, {.seq_len = 4096});
  const auto plain = detail::replay_timeline(tl, "").value();
  const auto expandable = detail::replay_timeline(tl, "expandable_segments:True").value();
  EXPECT_EQ(plain.allocated_peak, tl.allocated_peak);
  EXPECT_GE(plain.rounded_peak, plain.allocated_peak);
  EXPECT_GE(plain.reserved_peak, plain.rounded_peak);
  // Expandable segments map 20 MiB pages as they are needed instead of a segment per large request.
  EXPECT_LE(expandable.reserved_peak, plain.reserved_peak);
  EXPECT_GE(expandable.reserved_peak, expandable.rounded_peak);
  EXPECT_FALSE(detail::replay_timeline(tl, "expandable_segments:maybe"));
}

TEST(StepTimeline, WrittenAsATraceItReadsBackTheSame) {
  const auto tl = timeline_of("gpt2", {}, {.seq_len = 512});
  const AllocatorTrace trace = detail::to_allocator_trace(tl);
  auto back = parse_allocator_trace(write_allocator_trace(trace));
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->events.size(), tl.events.size());
  for (std::size_t i = 0; i < tl.events.size(); ++i) {
    EXPECT_EQ(back->events[i].address, tl.events[i].id);
    EXPECT_EQ(back->events[i].kind == TraceEvent::kAlloc, tl.events[i].alloc);
    if (tl.events[i].alloc) {
      EXPECT_EQ(back->events[i].size, tl.events[i].bytes);
      EXPECT_EQ(back->events[i].name, tl.events[i].name);
    }
  }
}

TEST(StepTimeline, OffloadingLeavesOneBlockAndSaysSo) {
  Report r;
  Layout l{.seq_len = 4096};
  l.offload_activations = true;
  const auto tl = timeline_of("llama-3-8b", {}, l, &r);
  EXPECT_EQ(tl.allocated_peak, r.totals.total);
  ASSERT_EQ(tl.notes.size(), 1u);
  EXPECT_NE(tl.notes[0].find("offloading"), std::string::npos);
}

}  // namespace
}  // namespace actmem
