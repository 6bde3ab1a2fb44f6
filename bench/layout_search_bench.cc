// How fast layouts are evaluated: every (tp, sp, pp, dp, ZeRO, recompute, micro-batch) layout of
// Llama-3-70B on 64 GPUs, and of DeepSeek-V3 on 1,024, through the public API only.
// Run: cmake --preset release && cmake --build --preset release && ./build/actmem_bench
#include <benchmark/benchmark.h>

#include "api/library.h"

namespace {

using actmem::Layout;

std::vector<Layout> all_layouts(int64_t gpus, std::initializer_list<int64_t> pps, std::initializer_list<int64_t> eps,
                                int64_t seq_len) {
  std::vector<Layout> out;
  for (int64_t tp : {1, 2, 4, 8})
    for (bool sp : {false, true})
      for (int64_t pp : pps)
        for (int64_t ep : eps) {
          if (gpus % (tp * pp) != 0 || (sp && tp == 1) || (gpus / (tp * pp)) % ep != 0) continue;
          for (int zero = 0; zero <= 3; ++zero)
            for (auto rc : {actmem::Recompute::kNone, actmem::Recompute::kSelective, actmem::Recompute::kFull})
              for (int64_t mb : {1, 2, 4, 8}) {
                Layout l;
                l.seq_len = seq_len;
                l.micro_batch = mb;
                l.parallel.tp = tp;
                l.parallel.sp = sp;
                l.parallel.pp = pp;
                l.parallel.ep = ep;
                l.parallel.dp = gpus / (tp * pp);
                l.parallel.num_micro_batches = 4 * pp;
                l.zero_stage = zero;
                l.recompute = rc;
                out.push_back(l);
              }
        }
  return out;
}

void search(benchmark::State& state, const char* preset, const std::vector<Layout>& layouts) {
  const auto model = actmem::load_model(preset).value();
  const auto prepared = actmem::prepare(model, {.framework = actmem::Framework::kMegatron}).value();
  actmem::Totals t;
  int64_t valid = 0;
  for (const auto& l : layouts) valid += actmem::evaluate(prepared, l, t) ? 1 : 0;
  for (auto _ : state) {
    int64_t fits = 0;
    for (const auto& l : layouts)
      if (actmem::evaluate(prepared, l, t) && t.total <= (int64_t{80} << 30)) ++fits;
    benchmark::DoNotOptimize(fits);
  }
  state.counters["layouts"] = static_cast<double>(layouts.size());
  state.counters["valid"] = static_cast<double>(valid);
  state.counters["layouts/s"] =
      benchmark::Counter(static_cast<double>(layouts.size()), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_EvaluateLlama3_70B(benchmark::State& state) {
  search(state, "llama-3-70b", all_layouts(64, {1, 2, 4, 5, 8, 10, 16, 20}, {1}, 8192));
}
BENCHMARK(BM_EvaluateLlama3_70B)->Unit(benchmark::kMillisecond);

void BM_EvaluateDeepSeekV3(benchmark::State& state) {
  // 61 layers: only pp 1 and 61 divide them evenly.
  search(state, "deepseek-v3", all_layouts(1024, {1}, {1, 8, 32, 64}, 4096));
}
BENCHMARK(BM_EvaluateDeepSeekV3)->Unit(benchmark::kMillisecond);

void BM_PrepareLlama3_70B(benchmark::State& state) {
  const auto model = actmem::load_model("llama-3-70b").value();
  for (auto _ : state) benchmark::DoNotOptimize(actmem::prepare(model, {}));
}
BENCHMARK(BM_PrepareLlama3_70B)->Unit(benchmark::kMicrosecond);

void BM_ExplainLlama3_70B(benchmark::State& state) {
  const auto prepared = actmem::prepare(actmem::load_model("llama-3-70b").value(), {}).value();
  Layout l;
  l.seq_len = 8192;
  l.parallel = {.dp = 8, .tp = 8, .sp = true};
  for (auto _ : state) benchmark::DoNotOptimize(actmem::explain(prepared, l));
}
BENCHMARK(BM_ExplainLlama3_70B)->Unit(benchmark::kMicrosecond);

void BM_ExplainDeepSeekV3(benchmark::State& state) {
  const auto prepared = actmem::prepare(actmem::load_model("deepseek-v3").value(), {}).value();
  Layout l;
  l.seq_len = 4096;
  l.parallel = {.dp = 64, .ep = 8};
  for (auto _ : state) benchmark::DoNotOptimize(actmem::explain(prepared, l));
}
BENCHMARK(BM_ExplainDeepSeekV3)->Unit(benchmark::kMicrosecond);

}  // namespace
