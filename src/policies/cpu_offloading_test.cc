// --cpu-offloading-num-layers (framework megatron): the rule of policies/cpu_offloading.h
// (Megatron-LM transformer_block.py + TransformerEngine cpu_offload.py DefaultOffloadSynchronizer),
// hand-checked; measured by validation/cpu_offload_validation.py.
#include "policies/cpu_offloading.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/library.h"
#include "config/config_test_util.h"
#include "config/training_config.h"

namespace actmem {
namespace {

TEST(CpuOffloading, WindowOfLMinusNLayers) {
  // TE's docstring (cpu_offload.py l.612-621): with equal layers of footprint T, the peak is
  // (L − N)·T; plus what each offloaded layer leaves behind (here 1 per layer).
  auto eq = detail::cpu_offload_split(8, 3, [](int64_t) { return int64_t{10}; }, [](int64_t) { return int64_t{1}; });
  EXPECT_EQ(eq.gpu, 5 * 10 + 3 * 1);
  EXPECT_EQ(eq.host, 3 * (10 - 1));
  EXPECT_EQ(eq.peak_step, 7);  // the last layer
  // Unequal layers: full = {1, 100, 1, 1}, N = 2, window 2. Steps k = 1..3: window {0,1} = 101,
  // {1,2} + kept(0) = 101 + 0, {2,3} + kept(0) + kept(1) = 2 + 0 + 7 = 9: the peak is 101 at k = 2
  // (the later of the equals), not at the end of the forward.
  const std::vector<int64_t> full = {1, 100, 1, 1};
  const std::vector<int64_t> kept = {0, 7, 0, 0};
  auto uneq = detail::cpu_offload_split(4, 2, [&](int64_t i) { return full[static_cast<std::size_t>(i)]; },
                                        [&](int64_t i) { return kept[static_cast<std::size_t>(i)]; });
  EXPECT_EQ(uneq.gpu, 101);
  EXPECT_EQ(uneq.peak_step, 2);
  EXPECT_EQ(uneq.last, 9);  // the end of the forward, to which the head and loss are added
  EXPECT_EQ(uneq.host, (1 - 0) + (100 - 7));
}

Report megatron_llama(int64_t n, int64_t s = 4096) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron.impl = TransformerImpl::kTransformerEngine;
  auto p = prepare(load_model("llama-3-8b").value(), w).value();
  Layout l{.seq_len = s};
  l.cpu_offloading_num_layers = n;
  return explain(p, l).value();
}

TEST(CpuOffloading, Llama3_8bTeSpec) {
  // Llama-3-8B (L 32, h 4096, a 32, kv 8, d 128) on the TE spec, s 4096, b 1. Of a layer's saves,
  // the ones under 256Ki elements stay: the two LayerNormLinear rsigma (fp32 s·b = 4,096 elements),
  // FusedAttention's softmaxStats (fp32 b·a·s = 131,072) and rng_state (2 int64); everything else
  // (h-wide inputs 16Mi elements, k and v s·b·kv·d = 4Mi) moves.
  const int64_t s = 4096;
  const int64_t kept = 2 * (4 * s) + 4 * 32 * s + 16;
  const Report plain = megatron_llama(0);
  const int64_t per_layer = plain.totals.per_layer;
  for (int64_t n : {1, 16, 31}) {
    const Report r = megatron_llama(n);
    EXPECT_EQ(r.totals.activations, plain.totals.activations - n * (per_layer - kept)) << n;
    // Host: the moved part of each offloaded layer, and the RoPE freqs (fp32 s·d = 512Ki elements,
    // saved by every layer's FusedRoPE) copied once per offloaded layer.
    EXPECT_EQ(r.totals.host_activations, n * (per_layer - kept) + n * (4 * s * 128)) << n;
    EXPECT_EQ(plain.totals.total - r.totals.total, n * (per_layer - kept)) << n;
  }
}

TEST(CpuOffloading, Checks) {
  Workload m;
  m.framework = Framework::kMegatron;
  auto p = prepare(load_model("llama-3-8b").value(), m).value();
  auto refused = [&](Layout l) {
    auto e = explain(p, l);
    EXPECT_FALSE(e);
    if (!e) {
      EXPECT_EQ(e.error().field, "cpu_offloading_num_layers") << e.error().message;
    }
    Totals t;
    EXPECT_FALSE(evaluate(p, l, t));
  };
  // transformer_config.py: num_layers < the model's 32 (TE: the last layer stays), no PP, no recompute.
  refused({.seq_len = 4096, .cpu_offloading_num_layers = 32});
  refused({.seq_len = 4096, .cpu_offloading_num_layers = -1});
  refused({.seq_len = 4096, .parallel = {.pp = 2}, .cpu_offloading_num_layers = 4});
  refused({.seq_len = 4096, .recompute = Recompute::kFull, .cpu_offloading_num_layers = 4});
  refused({.seq_len = 4096, .recompute = Recompute::kSelective, .cpu_offloading_num_layers = 4});
  // framework hf: torchtune's is --offload-activations.
  auto hf = prepare(load_model("llama-3-8b").value(), {}).value();
  auto e = explain(hf, {.seq_len = 4096, .cpu_offloading_num_layers = 4});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().field, "cpu_offloading_num_layers");
  EXPECT_TRUE(explain(p, {.seq_len = 4096, .cpu_offloading_num_layers = 31}));
}

// --from Megatron args: arguments.py l.1950 (`if args.cpu_offloading_num_layers > 0:
// args.cpu_offloading = True`); 0 leaves it off.
TEST(CpuOffloading, ReadFromMegatronArgs) {
  auto c = read_megatron_args("--num-layers 4 --cpu-offloading-num-layers 3", "off.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.cpu_offloading_num_layers, 3);
  EXPECT_EQ(testing::find(*c, "cpu_offloading_num_layers")->source, "--cpu-offloading-num-layers 3 (off.sh:1)");
  auto off = read_megatron_args("--num-layers 4 --cpu-offloading-num-layers 0", "off.sh");
  ASSERT_TRUE(off);
  EXPECT_EQ(testing::find(*off, "cpu_offloading_num_layers"), nullptr);
  // Megatron's newer fine-grained offloading (--fine-grained-activation-offloading, --offload-modules)
  // is not modelled: named in a warning, not dropped.
  auto fg = read_megatron_args("--num-layers 4 --fine-grained-activation-offloading --offload-modules core_attn", "fg.sh");
  ASSERT_TRUE(fg) << fg.error().message;
  int named = 0;
  for (const auto& w : fg->warnings) named += w.find("not modelled: fine-grained activation offloading") != std::string::npos;
  EXPECT_EQ(named, 2);
}

}  // namespace
}  // namespace actmem
