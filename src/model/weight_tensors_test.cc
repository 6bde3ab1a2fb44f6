#include "model/weight_tensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "model/hf_config.h"
#include "model/params.h"
#include "model/presets.h"
#include "policies/static_memory.h"

namespace actmem {
namespace {

// Serving counts weights tensor by tensor (for quantization scales); training sums the same tensors
// into sharding buckets (params.cc). The totals agree by construction (the published totals in
// params_test.cc check the shapes); per TP rank, LayerParams::per_rank must agree with each tensor's
// rank_rows × rank_cols, which is the bucketing being checked.
TEST(WeightTensors, AgreeWithParameterCountsOnEveryPreset) {
  for (const auto& p : list_presets()) {
    const ModelSpec m = load_preset(p.name).value();
    EXPECT_EQ(total_weight_elements(weight_tensors(m)), count_params(m).total()) << p.name;
  }
}

TEST(WeightTensors, AgreeWithStaticMemoryPerTensorParallelRank) {
  for (const char* name : {"llama-3-70b", "qwen2.5-72b", "mixtral-8x7b", "llama-3-8b"})
    for (int64_t tp : {2, 8, 16}) {
      const ModelSpec m = load_preset(name).value();
      int64_t per_rank = 0;
      for (const auto& t : weight_tensors(m)) per_rank += t.count * t.rank_rows(tp) * t.rank_cols(tp);
      ParallelLayout layout;
      layout.tp = tp;
      EXPECT_EQ(per_rank, stage_params(count_params(m), layout).at(0).total()) << name << " tp " << tp;
    }
}

std::vector<ModelSpec> presets_and_test_configs() {
  std::vector<ModelSpec> models;
  for (const auto& p : list_presets()) models.push_back(load_preset(p.name).value());
  for (const auto& file : std::filesystem::directory_iterator(std::string{ACTMEM_SOURCE_DIR} + "/tests/data/configs"))
    models.push_back(load_hf_config(file.path().string()).value());
  return models;
}

// weight_tensors() is the embedding, every layer's tensors and the head, merged by shape.
TEST(WeightTensors, ModelIsEmbeddingLayersAndHead) {
  for (const ModelSpec& m : presets_and_test_configs()) {
    int64_t sum = total_weight_elements(embedding_weight_tensors(m)) + total_weight_elements(head_weight_tensors(m));
    for (const LayerSpec& layer : m.layers) sum += total_weight_elements(layer_weight_tensors(m, layer));
    EXPECT_EQ(sum, total_weight_elements(weight_tensors(m))) << m.name;
  }
}

// Llama-3-8B: two norms, q/k/v/o, gate/up/down, one of each; k/v split by KV head.
TEST(WeightTensors, OneLlamaLayer) {
  const ModelSpec m = load_preset("llama-3-8b").value();
  const auto layer = layer_weight_tensors(m, m.layers[0]);
  ASSERT_EQ(layer.size(), 9u);
  for (const auto& t : layer) EXPECT_EQ(t.count, 1) << t.name;
  auto find = [&](const std::string& name) {
    return *std::find_if(layer.begin(), layer.end(), [&](const WeightTensor& t) { return t.name == name; });
  };
  EXPECT_EQ(find("attn.k_proj").rows, 8 * 128);
  EXPECT_EQ(find("attn.k_proj").part, WeightPart::kAttention);
  EXPECT_EQ(find("attn.k_proj").rank_rows(16), 128);  // one KV head per rank, replicated
  EXPECT_EQ(find("mlp.down_proj").part, WeightPart::kMlp);
  EXPECT_EQ(find("input_layernorm.weight").part, WeightPart::kLayerNorm);
}

// A DeepSeek-V3 MoE layer holds its 256 routed experts as count 256, tagged apart from the shared one.
TEST(WeightTensors, MoeLayerParts) {
  const ModelSpec m = load_preset("deepseek-v3").value();
  for (const auto& t : layer_weight_tensors(m, m.layers[3])) {
    if (t.name.starts_with("mlp.experts.")) {
      EXPECT_EQ(t.part, WeightPart::kRoutedExperts) << t.name;
      EXPECT_EQ(t.count, 256) << t.name;
    } else {
      EXPECT_EQ(t.count, 1) << t.name;
    }
    if (t.name.starts_with("mlp.shared_experts.")) {
      EXPECT_EQ(t.part, WeightPart::kSharedExperts) << t.name;
    }
    if (t.name.starts_with("mlp.router")) {
      EXPECT_EQ(t.part, WeightPart::kRouter) << t.name;
    }
  }
}

// Hand values, one layer, per token (h hidden, a heads, kv KV heads, d head_dim, f ffn):
//   llama-3-70b (h 8192, a 64, kv 8, d 128, f 28672, SwiGLU):
//     q 8192·8192 + k,v 2·8192·1024 + o 8192·8192 + MLP 3·8192·28672 = 855,638,016
//   mixtral-8x7b (h 4096, a 32, kv 8, d 128; 8 experts of f 14336, top-2):
//     q 4096·4096 + k,v 2·4096·1024 + o 4096·4096 + router 4096·8 + 2 experts 2·3·4096·14336 = 394,297,344
//   deepseek-v3 (h 7168, a 128, MLA: r_q 1536, r_kv 512, d_nope 128, d_rope 64, d_v 128):
//     attention: q_a 7168·1536 + q_b 1536·128·192 + kv_a 7168·576 + kv_b 512·128·256 + o 128·128·7168
//                = 187,105,280
//     MoE layer (256 experts of f 2048, top-8, one shared of f 2048):
//       + router 7168·256 + 8·3·7168·2048 + 3·7168·2048 = 585,302,016
//     dense layer (first 3, f 18432): + 3·7168·18432 = 583,467,008
TEST(WeightTensors, LinearMacsPerTokenByHand) {
  const ModelSpec llama = load_preset("llama-3-70b").value();
  EXPECT_EQ(linear_macs_per_token(llama, llama.layers[0]), 855'638'016.0);
  const ModelSpec mixtral = load_preset("mixtral-8x7b").value();
  EXPECT_EQ(linear_macs_per_token(mixtral, mixtral.layers[0]), 394'297'344.0);
  const ModelSpec deepseek = load_preset("deepseek-v3").value();
  EXPECT_EQ(linear_macs_per_token(deepseek, deepseek.layers[3]), 585'302'016.0);
  EXPECT_EQ(linear_macs_per_token(deepseek, deepseek.layers[0]), 583'467'008.0);
  EXPECT_EQ(lm_head_macs_per_token(llama), 8192.0 * 128256);
  const ModelSpec gpt2 = load_preset("gpt2").value();  // tied: the embedding matrix is the head
  EXPECT_EQ(lm_head_macs_per_token(gpt2), 768.0 * 50257);
}

// The projection and MLP terms (proj + mlp) of activation.cc's layer_flops as of 8d291cb, which
// wrote the shapes by hand; linear_macs_per_token must give exactly the same on every model.
double layer_flops_proj_plus_mlp(const ModelSpec& m, const LayerSpec& spec) {
  const double h = static_cast<double>(m.hidden);
  const double a = static_cast<double>(m.num_heads);
  double proj = 0;
  double d_qk = static_cast<double>(m.head_dim);
  double d_v = d_qk;
  if (m.mla) {
    const auto& x = *m.mla;
    d_qk = static_cast<double>(x.qk_head_dim());
    d_v = static_cast<double>(x.v_head_dim);
    proj += x.q_lora_rank > 0 ? h * x.q_lora_rank + static_cast<double>(x.q_lora_rank) * a * d_qk : h * a * d_qk;
    proj += h * (x.kv_lora_rank + x.qk_rope_head_dim) +
            static_cast<double>(x.kv_lora_rank) * a * (x.qk_nope_head_dim + d_v);
  } else {
    proj += h * static_cast<double>(m.q_dim() + 2 * m.kv_dim());
  }
  proj += a * d_v * h;
  double mlp = 0;
  const double mats = m.gated_mlp ? 3.0 : 2.0;
  if (spec.moe && m.moe) {
    mlp = h * static_cast<double>(m.moe->num_experts) +
          static_cast<double>(m.moe->experts_per_token) * mats * h * static_cast<double>(m.moe->expert_ffn) +
          mats * h * static_cast<double>(m.moe->shared_ffn);
  } else {
    mlp = mats * h * static_cast<double>(spec.ffn);
  }
  return proj + mlp;
}

TEST(WeightTensors, LinearMacsMatchTheActivationEnginesFlopsOnEveryModel) {
  for (const ModelSpec& m : presets_and_test_configs())
    for (const LayerSpec& layer : m.layers)
      ASSERT_EQ(linear_macs_per_token(m, layer), layer_flops_proj_plus_mlp(m, layer)) << m.name;
}

}  // namespace
}  // namespace actmem
