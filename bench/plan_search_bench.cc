// How fast the planner searches: every candidate layout evaluated by the engine (evaluate()), its
// fit verdict and step time, the best kept. Through the public API only.
// Run: cmake --preset release && cmake --build --preset release && ./build/actmem_bench --benchmark_filter=Plan
#include <benchmark/benchmark.h>

#include "api/library.h"

namespace {

void plan_search(benchmark::State& state, const char* preset, int64_t gpus, int64_t seq_len, int64_t global_batch,
                 const char* gpu_name) {
  const auto prepared = actmem::prepare(actmem::load_model(preset).value(), {.framework = actmem::Framework::kMegatron})
                            .value();
  const auto gpu = actmem::find_gpu(gpu_name).value();
  actmem::PlanRequest req;
  req.gpus = gpus;
  req.seq_len = seq_len;
  req.global_batch = global_batch;
  req.capacity = gpu.total;
  req.cluster = actmem::cluster_for(gpu);
  int64_t searched = 0, fitting = 0;
  for (auto _ : state) {
    auto result = actmem::plan(prepared, req).value();
    searched = result.searched + result.refined;  // every engine evaluation
    fitting = result.fitting;
    benchmark::DoNotOptimize(result.best.data());
  }
  state.counters["layouts"] = static_cast<double>(searched);
  state.counters["fit"] = static_cast<double>(fitting);
  state.counters["layouts/s"] =
      benchmark::Counter(static_cast<double>(searched), benchmark::Counter::kIsIterationInvariantRate);
}

// The engine alone over the same candidates: what the planner adds on top is the difference.
void BM_EvaluateCandidatesLlama3_70B_64xH100(benchmark::State& state) {
  const auto prepared =
      actmem::prepare(actmem::load_model("llama-3-70b").value(), {.framework = actmem::Framework::kMegatron}).value();
  const auto gpu = actmem::find_gpu("h100-80gb").value();
  actmem::PlanRequest req;
  req.gpus = 64;
  req.seq_len = 8192;
  req.global_batch = 128;
  req.capacity = gpu.total;
  req.cluster = actmem::cluster_for(gpu);
  const auto layouts = actmem::candidate_layouts(prepared, req);
  actmem::Totals t;
  for (auto _ : state) {
    int64_t ok = 0;
    for (const auto& l : layouts) ok += actmem::evaluate(prepared, l, t) ? 1 : 0;
    benchmark::DoNotOptimize(ok);
  }
  state.counters["layouts"] = static_cast<double>(layouts.size());
  state.counters["layouts/s"] =
      benchmark::Counter(static_cast<double>(layouts.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_EvaluateCandidatesLlama3_70B_64xH100)->Unit(benchmark::kMillisecond);

// Llama-3-70B on 64 H100s at 8k, 1M-token batches.
void BM_PlanLlama3_70B_64xH100(benchmark::State& state) {
  plan_search(state, "llama-3-70b", 64, 8192, 128, "h100-80gb");
}
BENCHMARK(BM_PlanLlama3_70B_64xH100)->Unit(benchmark::kMillisecond);

// Llama-3.1-405B on 16,384 H100s at 8k with Llama 3's 16M-token batches (2,048 sequences).
void BM_PlanLlama31_405B_16384xH100(benchmark::State& state) {
  plan_search(state, "llama-3.1-405b", 16384, 8192, 2048, "h100-80gb");
}
BENCHMARK(BM_PlanLlama31_405B_16384xH100)->Unit(benchmark::kMillisecond);

// DeepSeek-V3 (MoE, EP searched) on 1,024 H800s at 4k.
void BM_PlanDeepSeekV3_1024xH800(benchmark::State& state) {
  plan_search(state, "deepseek-v3", 1024, 4096, 1024, "h800-80gb");
}
BENCHMARK(BM_PlanDeepSeekV3_1024xH800)->Unit(benchmark::kMillisecond);

}  // namespace
