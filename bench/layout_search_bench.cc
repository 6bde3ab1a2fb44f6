// How long a configuration search over parallel layouts takes: every (tp, sp, pp, dp, ZeRO,
// recompute, micro-batch) layout of Llama-3-70B on 64 GPUs, each estimated in full.
// Run: cmake --preset release && cmake --build --preset release && ./build/actmem_bench
#include <benchmark/benchmark.h>

#include "presets.h"
#include "training.h"

namespace {

using actmem::TrainingOptions;

std::vector<TrainingOptions> all_layouts(int64_t gpus) {
  std::vector<TrainingOptions> out;
  for (int64_t tp : {1, 2, 4, 8})
    for (bool sp : {false, true})
      for (int64_t pp : {1, 2, 4, 5, 8, 10, 16, 20}) {
        if (gpus % (tp * pp) != 0 || (sp && tp == 1)) continue;
        for (int zero = 0; zero <= 3; ++zero)
          for (auto rc : {actmem::Recompute::kNone, actmem::Recompute::kSelective, actmem::Recompute::kFull})
            for (int64_t mb : {1, 2, 4, 8}) {
              TrainingOptions o;
              o.static_options.parallel.tp = tp;
              o.static_options.parallel.sp = sp;
              o.static_options.parallel.pp = pp;
              o.static_options.parallel.dp = gpus / (tp * pp);
              o.static_options.parallel.num_micro_batches = 4 * pp;
              o.static_options.zero_stage = zero;
              o.activation.seq_len = 8192;
              o.activation.micro_batch = mb;
              o.activation.framework = actmem::Framework::kMegatron;
              o.activation.recompute = rc;
              out.push_back(o);
            }
      }
  return out;
}

void BM_LayoutSearchLlama3_70B(benchmark::State& state) {
  const auto model = actmem::load_preset("llama-3-70b").value();
  const auto layouts = all_layouts(64);
  for (auto _ : state) {
    int64_t fits = 0;
    for (const auto& o : layouts) {
      auto e = actmem::estimate_training(model, o);
      if (e && e->total() <= actmem::Bytes{int64_t{80} << 30}) ++fits;
    }
    benchmark::DoNotOptimize(fits);
  }
  state.counters["layouts"] = static_cast<double>(layouts.size());
  state.counters["layouts/s"] =
      benchmark::Counter(static_cast<double>(layouts.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LayoutSearchLlama3_70B)->Unit(benchmark::kMillisecond);

void BM_SingleEstimateDeepSeekV3(benchmark::State& state) {
  const auto model = actmem::load_preset("deepseek-v3").value();
  TrainingOptions o;
  o.activation.seq_len = 4096;
  o.static_options.parallel.ep = 8;
  o.static_options.parallel.dp = 64;
  for (auto _ : state) benchmark::DoNotOptimize(actmem::estimate_training(model, o));
}
BENCHMARK(BM_SingleEstimateDeepSeekV3)->Unit(benchmark::kMicrosecond);

}  // namespace
