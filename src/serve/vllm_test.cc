// vLLM v0.19's start-up rules (serve/vllm.h), each value worked by hand from the rule it tests, and
// whole start-ups held against the v0.19.0 logs of ../shared/data/vllm-0.19 (H100-80GB), whose
// lines are quoted in validation/notes/vllm_019_memory.md.
#include "serve/vllm.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/hf_config.h"
#include "model/presets.h"
#include "serve/gpu_catalog.h"
#include "serve/serve_request.h"

namespace actmem {
namespace {

ModelSpec config(const std::string& file) {
  auto spec = load_hf_config(std::string{ACTMEM_SOURCE_DIR} + "/tests/data/configs/" + file);
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().message);
  return *spec;
}

// vllm/distributed/utils.py get_pp_indices: the remainder goes to the ranks before the last.
TEST(Vllm, PipelinePartition) {
  EXPECT_EQ(vllm_pp_partition(32, 2), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(vllm_pp_partition(32, 3), (std::vector<int64_t>{11, 11, 10}));
  EXPECT_EQ(vllm_pp_partition(30, 4), (std::vector<int64_t>{7, 8, 8, 7}));
}

// vllm/engine/arg_utils.py:2087-2107: >= 70 GiB and not an A100 -> 8192 / 1024, else 2048 / 256.
TEST(Vllm, BatchDefaultsByGpu) {
  const GpuSpec h100 = *find_gpu("h100-80gb");
  EXPECT_EQ(vllm_batch_defaults(&h100).max_num_batched_tokens, 8192);
  EXPECT_EQ(vllm_batch_defaults(&h100).max_num_seqs, 1024);
  const GpuSpec a100 = *find_gpu("a100-80gb");
  EXPECT_EQ(vllm_batch_defaults(&a100).max_num_batched_tokens, 2048);
  const GpuSpec l40s = *find_gpu("l40s-48gb");
  EXPECT_EQ(vllm_batch_defaults(&l40s).max_num_seqs, 256);
  EXPECT_EQ(vllm_batch_defaults(nullptr).max_num_batched_tokens, 2048);
}

// Llama-3-8B shapes (h 4096, V 128256), bf16, n 1024, T 8192, 132 SMs:
// 1024·128256·14 + 132·128256·4 + 8192·4096·2 + 2·1024·4096·2 = 1,990,283,264 B = 1.854 GiB
// (the v0.19.0 log of Llama-3.1-8B at TP 1, 2 and 4: "torch peak memory increase: 1.89GiB").
TEST(Vllm, SamplerWarmup) {
  const ModelSpec m = *load_model("llama-3-8b");
  EXPECT_EQ(vllm_sampler_warmup(m, 1024, 8192, 2, 132).bytes.count(), int64_t{1'990'283'264});
  // fp32: the logits are already fp32 (no copy): 12 bytes per logit; 128 scratch rows for n = 100.
  EXPECT_EQ(vllm_sampler_warmup(m, 100, 2048, 4, 132).bytes.count(),
            int64_t{100} * 128256 * 12 + 128 * 128256 * 4 + int64_t{2048} * 4096 * 4 + 2 * 100 * 4096 * 4);
}

// KCU:1042-1071: Gemma 2 alternates sliding (4096) and full layers, 13 and 13: one group size 13,
// 2 groups, no padding; a request of 8192 with 8192 batched tokens holds 512 + (⌈8192/16⌉ + 1) pages.
// The gemma-2-2b log: 83,770 blocks and "Maximum concurrency ... 81.73x" = 83770 / 1025.
TEST(Vllm, KvGroupsGemma2) {
  auto g = vllm_kv_groups(config("gemma-2-2b.json"), 16, 8192, 8192, true);
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->hybrid);
  EXPECT_EQ(g->group_size, 13);
  EXPECT_EQ(g->num_groups, 2);
  EXPECT_EQ(g->padding_layers, 0);
  EXPECT_EQ(g->pages_per_request, 1025);
  EXPECT_NEAR(83770.0 / static_cast<double>(g->pages_per_request), 81.73, 0.005);
  // --disable-hybrid-kv-cache-manager: every layer a full one, one group of 26.
  auto full = vllm_kv_groups(config("gemma-2-2b.json"), 16, 8192, 8192, false);
  EXPECT_EQ(full->group_size, 26);
  EXPECT_EQ(full->pages_per_request, 512);
}

// Gemma 3 1B: every 6th layer full (4 of 26), 22 sliding (512): group size 4, ⌈22/4⌉ = 6 sliding
// groups with 2 padding layers ("Add 2 padding layers"), 7 groups; at 8192 / 8192 batched a sliding
// group holds ⌈min(511 + 8192, 8192)/16⌉ + 1 = 513 pages.
TEST(Vllm, KvGroupsGemma3Padding) {
  auto g = vllm_kv_groups(config("gemma-3-1b-it.json"), 16, 8192, 8192, true);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->group_size, 4);
  EXPECT_EQ(g->num_groups, 7);
  EXPECT_EQ(g->padding_layers, 2);
  EXPECT_EQ(g->pages_per_request, 512 + 6 * 513);
  // With 512 batched tokens the window does save: ⌈min(511 + 512, 8192)/16⌉ + 1 = 65 pages.
  auto small = vllm_kv_groups(config("gemma-3-1b-it.json"), 16, 8192, 512, true);
  EXPECT_EQ(small->pages_per_request, 512 + 6 * 65);
  // Pipeline rank of layers 0..12: group i of a type holds layers[i::groups]; the busiest group has 2.
  EXPECT_EQ(vllm_rank_group_layers(*g, 0, 13), 2);
}

// --kv-cache-memory-bytes (v1/worker/gpu_worker.py:367-385 @8b141ed8c): the KV cache is the given
// bytes on every worker and utilization is not used: 40 GiB of Llama-3-8B pages (16·8·128·2·2 B per
// layer, 32 layers) is 40·2³⁰ / 65536 / 32 = 20480 blocks, 40.00x at 8192 tokens. Given more than the
// GPU holds beside the weights, the allocation fails. Without a GPU it is not used, with a warning.
TEST(Vllm, GivenKvCacheMemory) {
  ServeRequest r;
  r.context_len = 8192;
  r.gpu = "h100-80gb";
  r.kv_cache_memory = "40GiB";
  auto result = serve(*load_model("llama-3-8b"), r);
  ASSERT_TRUE(result) << result.error().message;
  const VllmCapacity& c = *result->capacity->vllm;
  EXPECT_TRUE(c.kv_given);
  EXPECT_EQ(c.num_gpu_blocks, 20480);
  EXPECT_DOUBLE_EQ(c.max_concurrency, 40.0);
  EXPECT_TRUE(result->capacity->fits);
  r.kv_cache_memory = "70GiB";  // + 14.96 weights + 1.85 peak + 0.25 > 79.2 GiB
  EXPECT_FALSE(serve(*load_model("llama-3-8b"), r)->capacity->fits);
  r.gpu.clear();  // no GPU, no capacity: the setting is not used, and says so
  auto no_gpu = serve(*load_model("llama-3-8b"), r);
  ASSERT_TRUE(no_gpu.has_value());
  EXPECT_FALSE(no_gpu->capacity.has_value());
  ASSERT_EQ(no_gpu->serving.warnings.size(), 1u);
  EXPECT_NE(no_gpu->serving.warnings[0].find("kv_cache_memory"), std::string::npos);
}

// RoPE's cos/sin cache (rotary_embedding/base.py:57-92, linear_scaling_rope.py:85-95 @8b141ed8c):
// Llama-3-8B's 8192 positions × 128 × 2 B = 2 MiB; linear ×8 scaling multiplies the rows; yarn takes
// original_max_position_embeddings × factor; GPT-2's learned positions have none.
TEST(Vllm, RopeCache) {
  ModelSpec m = *load_model("llama-3-8b");
  EXPECT_EQ(vllm_rope_cache(m, 2)->bytes, Bytes{8192 * 128 * 2});
  m.rope_scaling = {.type = "linear", .factor = 8.0};
  EXPECT_EQ(vllm_rope_cache(m, 2)->bytes, Bytes{8 * 8192 * 128 * 2});
  m.rope_scaling = {.type = "yarn", .factor = 32.0, .original_max_positions = 4096};
  EXPECT_EQ(vllm_rope_cache(m, 4)->bytes, Bytes{int64_t{131072} * 128 * 4});
  EXPECT_FALSE(vllm_rope_cache(*load_model("gpt2"), 2).has_value());
}

// A whole start-up: Llama-3-8B shapes on H100-80GB at 0.95 (the Llama-3.1-8B-Instruct log: 14.99 GiB
// of weights, 1.89 peak, 0.25 non-torch, 58.11 GiB available, 29,751 blocks, 58.11x).
// requested = ⌈85045477376 × 0.95⌉; available = requested − weights (with the 2 MiB RoPE cache of
// 8192·128·2) − sampler − 256 MiB;
// blocks = ⌊available / (16·8·128·2·2) / 32⌋; concurrency = blocks / 512.
TEST(Vllm, StartupLlama8bOnH100) {
  ServeRequest r;
  r.context_len = 8192;
  r.gpu = "h100-80gb";
  r.gpu_memory_utilization = 0.95;
  auto result = serve(*load_model("llama-3-8b"), r);
  ASSERT_TRUE(result) << result.error().message;
  const VllmCapacity& c = *result->capacity->vllm;
  const int64_t requested = 80793203508;  // ⌈85045477376 × 0.95⌉
  EXPECT_EQ(c.requested.count(), requested);
  const int64_t available = requested - 16'060'522'496 - 2'097'152 - 1'990'283'264 - (int64_t{256} << 20);
  EXPECT_EQ(c.ranks.front().available.count(), available);
  EXPECT_EQ(c.num_gpu_blocks, available / 65536 / 32);
  EXPECT_EQ(c.kv_tokens, c.num_gpu_blocks * 16);
  EXPECT_DOUBLE_EQ(c.max_concurrency, static_cast<double>(c.num_gpu_blocks) / 512.0);
  EXPECT_NEAR(static_cast<double>(c.num_gpu_blocks), 29751.0, 29751.0 * 0.002);  // the log, within 0.2%
}

// PP 2 (the Llama-3.1-8B tp1pp2 log): rank 1 adds the receive buffer 2·8192·4096·2 to its sampler
// peak (logged 2.01 GiB), and the blocks are the least over the ranks (logged 67,207).
TEST(Vllm, PipelineRanksTakeTheFewestBlocks) {
  ServeRequest r;
  r.context_len = 8192;
  r.gpu = "h100-80gb";
  r.gpu_memory_utilization = 0.95;
  r.pp = 2;
  auto result = serve(*load_model("llama-3-8b"), r);
  ASSERT_TRUE(result) << result.error().message;
  const VllmCapacity& c = *result->capacity->vllm;
  ASSERT_EQ(c.ranks.size(), 2u);
  EXPECT_EQ(c.ranks[1].activation.count(), int64_t{1'990'283'264} + 2 * 8192 * 4096 * 2);
  EXPECT_EQ(c.num_gpu_blocks, std::min(c.ranks[0].num_blocks, c.ranks[1].num_blocks));
  EXPECT_EQ(c.ranks[0].group_layers, 16);
  EXPECT_NEAR(static_cast<double>(c.num_gpu_blocks), 67207.0, 67207.0 * 0.002);
}

// The notes name each setting vLLM defaulted (arg_utils.py:2087-2107), and only those.
TEST(Vllm, NotesNameTheDefaultedSettings) {
  ServeRequest r;
  r.context_len = 4096;
  r.max_num_batched_tokens = 512;
  auto result = serve(*load_model("llama-3-8b"), r);
  ASSERT_TRUE(result) << result.error().message;
  const auto& notes = result->serving.notes;
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.starts_with("max_num_seqs 256: vLLM's default for `vllm serve` (no GPU named");
  }));
  EXPECT_FALSE(std::any_of(notes.begin(), notes.end(),
                           [](const std::string& n) { return n.starts_with("max_num_batched_tokens"); }));
}

// vllm/config/model.py:2157-2170: a max_model_len beyond the model's is refused (phi-2: 2048
// positions; the data's phi-2 run at 8192 failed with this check).
TEST(Vllm, RefusesContextBeyondTheModel) {
  ServeRequest r;
  r.context_len = 8192;
  auto result = serve(config("phi-2.json"), r);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("derived max_model_len is 2048"), std::string::npos) << result.error().message;
  r.vllm_version = "none";
  EXPECT_TRUE(serve(config("phi-2.json"), r));  // the engine-agnostic model does not check it (RoPE)
}

// openai/gpt-oss-20b under quant_method mxfp4 (the v0.19.0 logs: "Model loading took 13.64 GiB" at
// TP 1, 7.01 GiB per rank at TP 2; TP 2 at utilization 0.9: 59.32 GiB of KV cache, 316.07x). By hand
// at TP 2 (vllm_mxfp4_experts): f_r = ⌈1440⌉₆₄ = 1472, n = 24·32 = 768 experts; w13 values
// 768·1472·2944 = 3,328,180,224 B; w2 768·768·2880 = 1,698,693,120; scales as loaded 768·2944·90 and
// 768·2880·46, swizzled 768·3072·90 and 768·3072·46; fp32 biases 768·2944·4 and 768·2880·4. The rest
// is bf16: embedding and head 2·100544·2880·2, q/k/v/o with biases and sinks, router, norms, and the
// fp32 RoPE table 131072·64·4 (gpt_oss.py get_rope(dtype=torch.float32)).
TEST(Vllm, Mxfp4GptOss20b) {
  nlohmann::json c = {{"architectures", {"GptOssForCausalLM"}}, {"model_type", "gpt_oss"}, {"hidden_size", 2880},
                      {"intermediate_size", 2880}, {"num_hidden_layers", 24}, {"num_attention_heads", 64},
                      {"num_key_value_heads", 8}, {"head_dim", 64}, {"num_local_experts", 32},
                      {"num_experts_per_tok", 4}, {"vocab_size", 201088}, {"sliding_window", 128},
                      {"max_position_embeddings", 131072}, {"tie_word_embeddings", false},
                      {"torch_dtype", "bfloat16"}, {"quantization_config", {{"quant_method", "mxfp4"}}}};
  auto model = parse_hf_config(c.dump(), "gpt-oss-20b.json");
  ASSERT_TRUE(model) << model.error().message;
  ServeRequest r;
  r.context_len = 8192;
  r.gpu = "h100-80gb";
  r.tp = 2;
  auto result = serve(*model, r);
  ASSERT_TRUE(result) << result.error().message;
  const Breakdown& w = result->serving.weights;
  EXPECT_EQ(w.find("weights.mlp.experts.w13")->bytes.count(), 3'328'180'224);
  EXPECT_EQ(w.find("weights.mlp.experts.w2")->bytes.count(), 1'698'693'120);
  EXPECT_EQ(w.find("weights.mlp.experts.w13.scales")->bytes.count(), 768 * 2944 * 90);
  EXPECT_EQ(w.find("weights.mlp.experts.w2.scales_swizzled")->bytes.count(), 768 * 3072 * 46);
  EXPECT_EQ(w.find("weights.mlp.experts.w2.bias")->bytes.count(), 768 * 2880 * 4);
  EXPECT_EQ(w.find("weights.attn.q_proj")->bytes.count(), 24 * 2048 * 2880 * 2);  // not quantized
  EXPECT_EQ(w.find("weights.rope_cache")->bytes.count(), 131072 * 64 * 4);
  EXPECT_EQ(w.find("weights.mlp.experts.gate_proj"), nullptr);
  EXPECT_EQ(result->serving.weights_bytes().count(), 7'504'664'192);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  EXPECT_NEAR(static_cast<double>(result->serving.weights_bytes().count()) / kGiB, 7.01, 7.01 * 0.005);
  const VllmCapacity& v = *result->capacity->vllm;
  EXPECT_NEAR(static_cast<double>(v.ranks.front().available.count()) / kGiB, 59.32, 59.32 * 0.002);
  EXPECT_NEAR(v.max_concurrency, 316.07, 316.07 * 0.002);

  r.tp = 1;
  result = serve(*model, r);
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(result->serving.weights_bytes().count(), 14'639'742'080);

  // Mxfp4Config quantizes fused MoE layers only: a dense model under it keeps every linear in bf16.
  nlohmann::json dense = {{"model_type", "llama"},         {"hidden_size", 256},
                          {"intermediate_size", 512},       {"num_hidden_layers", 2},
                          {"num_attention_heads", 4},       {"vocab_size", 1024},
                          {"max_position_embeddings", 8192}, {"torch_dtype", "bfloat16"}};
  auto plain = parse_hf_config(dense.dump(), "dense.json");
  dense["quantization_config"] = {{"quant_method", "mxfp4"}};
  auto mx = parse_hf_config(dense.dump(), "dense-mxfp4.json");
  ASSERT_TRUE(plain && mx);
  auto a = serve(*plain, r), b = serve(*mx, r);
  ASSERT_TRUE(a && b) << (a ? b.error().message : a.error().message);
  EXPECT_EQ(b->serving.weights_bytes(), a->serving.weights_bytes());
  EXPECT_NEAR(static_cast<double>(result->serving.weights_bytes().count()) / kGiB, 13.64, 13.64 * 0.005);
}

}  // namespace
}  // namespace actmem
