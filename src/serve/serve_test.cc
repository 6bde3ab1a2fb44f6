#include "serve/serve.h"

#include <cmath>

#include <gtest/gtest.h>

#include "serve/gpu_catalog.h"
#include "serve/serve_test_models.h"
#include "model/hf_config.h"
#include "model/weight_tensors.h"

namespace actmem {
namespace {

using testing::deepseek_v3;
using testing::gemma_2_9b;
using testing::llama_3_1_70b;
using testing::llama_3_8b;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

Bytes gib(double x) { return Bytes{std::llround(x * static_cast<double>(kGiB))}; }

ServeReport serve(const ModelSpec& m, ServeOptions o) {
  auto r = estimate_serving(m, o);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return *r;
}

// Parameter counts of the published checkpoints (HF model pages / safetensors metadata):
// Meta-Llama-3-8B 8,030,261,248; Llama-3.1-70B 70,553,706,496.
TEST(WeightTensors, ParameterCountsMatchCheckpoints) {
  EXPECT_EQ(total_weight_elements(weight_tensors(llama_3_8b())), 8'030'261'248);
  EXPECT_EQ(total_weight_elements(weight_tensors(llama_3_1_70b())), 70'553'706'496);
  // Gemma 2 9B: 9,241,705,984 (tied embeddings, four norms per layer).
  EXPECT_EQ(total_weight_elements(weight_tensors(gemma_2_9b())), 9'241'705'984);
}

// DeepSeek-V3 main model (61 layers, MTP layer excluded): 671B per the DeepSeek-V3 report (Table/abstract:
// "671B total parameters"); the exact count from the config's shapes is 671,026,419,200.
TEST(WeightTensors, DeepSeekV3MainModel) {
  EXPECT_EQ(total_weight_elements(weight_tensors(deepseek_v3())), 671'026'419'200);
}

// vLLM logs "model weights take 14.96GiB" for Meta-Llama-3-8B (vllm issue #12330, PR #10511):
// 2 · 8,030,261,248 B = 14.957 GiB (vLLM adds a 2 MiB rotary cos/sin cache).
TEST(Serve, Llama3_8BBf16Weights) {
  const auto r = serve(llama_3_8b(), {.context_len = 8192});
  EXPECT_EQ(r.weights_bytes(), Bytes{16'060'522'496});
  EXPECT_NEAR(r.weights_bytes().gib(), 14.96, 0.005);
}

// vLLM PR #10511 with -tp 2: "model weights take 7.48GiB" per GPU.
TEST(Serve, Llama3_8BTp2WeightsPerGpu) {
  const auto r = serve(llama_3_8b(), {.context_len = 8192, .tp = 2});
  // Halves of everything but the norms (32 · 8192 + 4096 params, whole on both ranks).
  EXPECT_EQ(r.weights_bytes(), Bytes{(8'030'261'248 - 266'240) / 2 * 2 + 266'240 * 2});
  EXPECT_NEAR(r.weights_bytes().gib(), 7.48, 0.005);
}

// int4, group 128, fp16 scales, linear layers only; embeddings, LM head and norms stay bf16.
// Linear params 32 · 218,103,808 = 6,979,321,856 → 3,489,660,928 B; scales per layer
// q 4096·32 + k 1024·32 + v 1024·32 + o 4096·32 + gate, up 14336·32 each + down 4096·112 = 1,703,936,
// · 32 layers · 2 B = 109,051,904 B; the rest 1,050,939,392 params · 2 B = 2,101,878,784 B.
TEST(Serve, Int4GroupScalesOnLinearLayersOnly) {
  ServeOptions o{.context_len = 8192};
  o.weights.dtype = DType::kINT4;
  const auto r = serve(llama_3_8b(), o);
  EXPECT_EQ(r.weights_bytes(), Bytes{3'489'660'928 + 109'051'904 + 2'101'878'784});
  EXPECT_EQ(r.weights.find("weights.embed_tokens")->bytes, Bytes{int64_t{128256} * 4096 * 2});
  EXPECT_EQ(r.weights.find("weights.mlp.down_proj.scales")->bytes, Bytes{int64_t{32} * 4096 * 112 * 2});
  EXPECT_EQ(r.weights.find("weights.mlp.down_proj.scales")->formula, "n·h·⌈f/g⌉·e_s");

  // Asymmetric (AWQ/GPTQ style): a 4-bit zero point per scale, 54,525,952 · 4/8 = 27,262,976 B more.
  o.weights.zero_points = true;
  EXPECT_EQ(serve(llama_3_8b(), o).weights_bytes(), Bytes{5'700'591'616 + 27'262'976});

  // Under TP 2 a row-parallel down_proj groups its half of the inputs: 4096 rows · ⌈7168/128⌉.
  o.tp = 2;
  EXPECT_EQ(serve(llama_3_8b(), o).weights.find("weights.mlp.down_proj.scales")->bytes,
            Bytes{int64_t{32} * 4096 * 56 * 2});
}

// fp8 (vLLM fp8 checkpoints): one fp32 scale per linear tensor by default.
TEST(Serve, Fp8PerTensorScales) {
  ServeOptions o{.context_len = 4096};
  o.weights.dtype = DType::kFP8;
  const auto r = serve(llama_3_8b(), o);
  EXPECT_EQ(r.weights.find("weights.attn.q_proj.scales")->bytes, Bytes{32 * 4});
  EXPECT_EQ(r.weights_bytes(), Bytes{6'979'321'856 + 7 * 32 * 4 + 2'101'878'784});
}

// RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8: config.json's quantization_config is what is
// counted, without --weight-dtype. By hand: linears 32·(2·4096² + 2·1024·4096 + 3·14336·4096) int8 =
// 6,979,321,856; fp32 scales per output row 32·43,008·4 = 5,505,024; embedding and lm_head
// 2·128256·4096·2 = 2,101,346,304; norms (65·4096)·2 = 532,480; total 9,086,705,664 bytes (8.463
// GiB; vLLM 0.19 logs 8.49 GiB, w8a8-redhatai-llam--h100-80gb--tp1pp1dp1--8192-dtf16, with its
// 32 MiB RoPE cache).
TEST(Serve, CheckpointQuantizationConfigIsRead) {
  auto m = parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "compressed-tensors", "format": "int-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int",
      "strategy": "channel", "symmetric": true}, "input_activations": {"num_bits": 8, "type": "int",
      "strategy": "token", "dynamic": true}}}, "ignore": ["lm_head"]}})",
                           "w8a8.json");
  ASSERT_TRUE(m.has_value()) << m.error().message;
  const ServeReport r = serve(*m, {.context_len = 8192});
  EXPECT_EQ(r.weight_dtype, DType::kINT8);
  EXPECT_EQ(r.weights_bytes(), Bytes{9'086'705'664});
  EXPECT_TRUE(r.warnings.empty());
  // The same as the flags that say it.
  ServeOptions flags{.context_len = 8192};
  flags.weights = {.dtype = DType::kINT8, .group_size = 0, .scale_dtype = DType::kFP32};
  ModelSpec plain = *m;
  plain.quant.reset();
  EXPECT_EQ(serve(plain, flags).weights_bytes(), r.weights_bytes());
  // A weight dtype given replaces it, with a warning.
  ServeOptions int4{.context_len = 8192};
  int4.weights.dtype = DType::kINT4;
  const ServeReport w = serve(*m, int4);
  EXPECT_EQ(w.weight_dtype, DType::kINT4);
  ASSERT_EQ(w.warnings.size(), 1u);
  EXPECT_NE(w.warnings[0].find("replaces config.json's quantization_config"), std::string::npos);
}

// DeepSeek-V3's fp8 checkpoint (quantization_config weight_block_size [128, 128]; vLLM fp8.py
// weight_scale_inv of ⌈out/128⌉ × ⌈in/128⌉ fp32): q_proj of Llama-3-8B shape, 4096 × 4096, has
// 32 × 32 block scales, 4 KiB per layer.
TEST(Serve, BlockScales) {
  ModelSpec m = llama_3_8b();
  m.quant = CheckpointQuant{.method = "fp8", .weight = DType::kFP8, .group_size = 128, .block_rows = 128,
                            .scale_dtype = DType::kFP32};
  const ServeReport r = serve(m, {.context_len = 4096});
  EXPECT_EQ(r.weights.find("weights.attn.q_proj.scales")->bytes, Bytes{32 * 32 * 32 * 4});
  // k_proj 1024 × 4096: 8 × 32 blocks.
  EXPECT_EQ(r.weights.find("weights.attn.k_proj.scales")->bytes, Bytes{32 * 8 * 32 * 4});
}

// TP 16 on 8 KV heads: every rank keeps one KV head of k_proj and v_proj (128 × 8192).
TEST(Serve, KvProjectionsReplicatedWhenTpExceedsKvHeads) {
  const auto r = serve(llama_3_1_70b(), {.context_len = 1024, .tp = 16});
  EXPECT_EQ(r.weights.find("weights.attn.k_proj")->bytes, Bytes{int64_t{80} * 128 * 8192 * 2});
  EXPECT_EQ(r.weights.find("weights.attn.q_proj")->bytes, Bytes{int64_t{80} * 512 * 8192 * 2});
}

// Forward-only peak for Llama-3-8B, one 8192-token prefill, flash attention, bf16:
// MLP block 2·P·h·e + P·2f·e + P·f·e = 134,217,728 + 469,762,048 + 234,881,024 = 838,860,800 B.
TEST(Serve, ActivationWorkspaceIsLargestBlock) {
  const auto r = serve(llama_3_8b(), {.context_len = 8192});
  EXPECT_EQ(r.activation.find("activation.attention")->bytes, Bytes{301'989'888});
  EXPECT_EQ(r.activation.find("activation.mlp")->bytes, Bytes{838'860'800});
  EXPECT_EQ(r.activation.find("activation.lm_head")->bytes, Bytes{4096 * 2 + 128256 * 6});
  EXPECT_EQ(r.activation_bytes(), Bytes{838'860'800});
  EXPECT_EQ(r.memory.find("activation_workspace")->formula, "2·P·h·e + P·2·(f/tp)·e + P·(f/tp)·e");

  // Chunked prefill of 2048 tokens: a quarter. Eager attention adds (a/tp)·P·T·(4+e) scores.
  EXPECT_EQ(serve(llama_3_8b(), {.context_len = 8192, .prefill_chunk = 2048}).activation_bytes(),
            Bytes{838'860'800 / 4});
  const auto eager = serve(llama_3_8b(), {.context_len = 8192, .prefill_chunk = 2048, .flash_attention = false});
  EXPECT_EQ(eager.activation_bytes(), Bytes{301'989'888 / 4 + int64_t{32} * 2048 * 8192 * 6});
}

TEST(Serve, MemoryTermsAndTotal) {
  const auto r = serve(llama_3_8b(), {.context_len = 8192, .batch = 4, .kv = {.block_size = 16}});
  ASSERT_EQ(r.memory.terms.size(), 4u);
  EXPECT_EQ(r.memory.terms[1].key, "kv_cache");
  EXPECT_EQ(r.kv_bytes(), Bytes{int64_t{4} * 8192 * 131072});
  EXPECT_EQ(r.non_torch_bytes(), kDefaultNonTorch);
  EXPECT_EQ(r.total(), Bytes{16'060'522'496} + r.kv_bytes() + Bytes{838'860'800} + kDefaultNonTorch);
}

// vllm-project/vllm issue #12330: Meta-Llama-3-8B on one A100 40GB, gpu_memory_utilization 0.90:
//   total_gpu_memory (39.50GiB) x 0.90 = 35.55GiB; model weights take 14.96GiB; non_torch_memory
//   takes 0.10GiB; PyTorch activation peak memory takes 9.37GiB; KV cache 11.12GiB; # GPU blocks: 5691.
// vLLM: blocks = ⌊(total·u − weights − peak − non_torch) / (16 · 131072)⌋. With our exact weights and
// the logged total we get 5694 (0.05% off; the log's amounts are rounded to 0.01 GiB).
TEST(Capacity, VllmA100Llama3_8BBlocks) {
  ServeOptions o{.context_len = 8192, .kv = {.block_size = 16}};
  o.activation_peak = gib(9.37);
  o.non_torch = gib(0.10);
  const auto r = serve(llama_3_8b(), o);
  auto c = estimate_capacity(llama_3_8b(), r, {.gpu_memory = gib(39.50), .utilization = 0.9});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->kv_blocks, 5694);
  EXPECT_LE(std::abs(c->kv_blocks - 5691) / 5691.0, 0.001);
  EXPECT_NEAR(c->kv_budget.gib(), 11.12, 0.005);  // the log's "reserved for KV Cache is 11.12GiB"
  EXPECT_EQ(c->kv_tokens, 5694 * 16);
  // vLLM: "Maximum concurrency for 8192 tokens per request: 11.12x" → 11 whole sequences.
  EXPECT_EQ(c->max_sequences, 11);
  EXPECT_EQ(c->budget.total(), c->kv_budget);

  // Solving the same formula for the total with vLLM's own 14.96 GiB of weights: 5691 blocks need
  // total ∈ [(5691·2 MiB + 24.43 GiB)/0.9, (5692·2 MiB + 24.43 GiB)/0.9) = [39.4947, 39.4968) GiB,
  // which prints as the log's 39.50 GiB. The A100 PCIe's 40326 MiB (39.38 GiB) would give 5638 blocks
  // and the SXM4's 40536 MiB (39.59 GiB) 5733: neither is the machine of that log.
  const double low = (5691 * 2.0 / 1024 + 14.96 + 9.37 + 0.10) / 0.9;
  EXPECT_NEAR(low, 39.50, 0.006);
  const double pcie_total = 40326.0 / 1024;
  EXPECT_EQ(static_cast<int64_t>((pcie_total * 0.9 - 14.96 - 9.37 - 0.10) * 512), 5638);
  const double sxm_total = 40536.0 / 1024;
  EXPECT_EQ(static_cast<int64_t>((sxm_total * 0.9 - 14.96 - 9.37 - 0.10) * 512), 5733);
}

TEST(Capacity, MaxContextForConcurrency) {
  ServeOptions o{.context_len = 8192, .batch = 12, .kv = {.block_size = 16}};
  o.activation_peak = gib(9.37);
  o.non_torch = gib(0.10);
  const auto r = serve(llama_3_8b(), o);
  auto c = estimate_capacity(llama_3_8b(), r, {.gpu_memory = gib(39.50), .utilization = 0.9});
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->max_context_len, 5694 / 12 * 16);  // 474 blocks each
  EXPECT_FALSE(c->fits);  // 12 × 8192 tokens need 12 · 512 blocks > 5694

  o.batch = 1;
  auto one = estimate_capacity(llama_3_8b(), serve(llama_3_8b(), o), {.gpu_memory = gib(39.50)});
  ASSERT_TRUE(one);
  EXPECT_EQ(one->max_context_len, 8192);  // memory holds more; the model's max_position_embeddings stops it
  EXPECT_TRUE(one->context_limited_by_model);
  EXPECT_TRUE(one->fits);
}

TEST(Capacity, GpuCatalog) {
  auto h100 = find_gpu("h100-80gb");
  ASSERT_TRUE(h100);
  EXPECT_EQ(h100->total, Bytes{85'045'477'376});  // deviceQuery, thamada/nvidia-smi
  EXPECT_EQ(find_gpu("a100-40gb")->total, Bytes{40536 * kMiB});
  for (const auto& g : gpu_catalog()) {
    EXPECT_LT(g.total, g.vendor) << g.name;  // the runtime never sees the whole datasheet capacity
    EXPECT_GT(g.total.count(), g.vendor.count() * 9 / 10) << g.name;
  }
  auto typo = find_gpu("h100-80g");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("did you mean 'h100-80gb'"), std::string::npos);
}

TEST(Serve, ErrorsNameTheFlag) {
  auto tp3 = estimate_serving(llama_3_8b(), {.context_len = 1024, .tp = 3});
  ASSERT_FALSE(tp3);
  EXPECT_NE(tp3.error().message.find("@tp 3"), std::string::npos);
  ServeOptions bad_group{.context_len = 1024};
  bad_group.weights.dtype = DType::kINT4;
  bad_group.weights.group_size = -5;
  auto g = estimate_serving(llama_3_8b(), bad_group);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("@quant_group_size"), std::string::npos);
  auto util = estimate_capacity(llama_3_8b(), serve(llama_3_8b(), {.context_len = 8}),
                                {.gpu_memory = gib(80), .utilization = 1.5});
  ASSERT_FALSE(util);
  EXPECT_NE(util.error().message.find("@gpu_memory_utilization"), std::string::npos);
}

// DeepSeek-V3 on 8 GPUs with fp8 weights and the latent cache: experts split by TP, latent whole.
TEST(Serve, DeepSeekV3Tp8) {
  ServeOptions o{.context_len = 32768, .batch = 8, .tp = 8};
  o.weights.dtype = DType::kFP8;
  const auto r = serve(deepseek_v3(), o);
  EXPECT_EQ(r.kv_bytes(), Bytes{int64_t{8} * 32768 * 576 * 2 * 61});
  // kv_a_proj_with_mqa is replicated: 61 · 576 · 7168 fp8 bytes on every rank.
  EXPECT_EQ(r.weights.find("weights.attn.kv_a_proj_with_mqa")->bytes, Bytes{int64_t{61} * 576 * 7168});
  EXPECT_EQ(r.weights.find("weights.mlp.experts.down_proj")->bytes, Bytes{int64_t{58} * 256 * 7168 * 256});
}

}  // namespace
}  // namespace actmem
