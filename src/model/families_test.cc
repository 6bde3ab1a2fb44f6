// Families added for fine-tuners (issue 8, item 4): gpt_bigcode, phi, olmo2. Each real config.json
// in tests/data/configs/ is the published file of a public checkpoint (source in the comment);
// the parameter count is the sum of the HF modeling class's tensors for that config, checked
// against the published count where one is stated.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/hf_config.h"
#include "model/params.h"
#include "model/weight_tensors.h"

namespace actmem {
namespace {

using json = nlohmann::json;

ModelSpec load(const std::string& file) {
  auto spec = load_hf_config(std::string{ACTMEM_SOURCE_DIR} + "/tests/data/configs/" + file);
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().message);
  return spec ? *spec : ModelSpec{};
}

void expect_error(const json& config, std::initializer_list<std::string_view> parts) {
  auto r = parse_hf_config(config.dump(), "test.json");
  ASSERT_FALSE(r) << "expected an error";
  for (std::string_view part : parts)
    EXPECT_NE(r.error().message.find(part), std::string::npos) << "'" << part << "' not in: " << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "one line";
}

// bigcode/starcoderbase-1b (huggingface.co/bigcode/starcoderbase-1b/blob/main/config.json).
// GPTBigCodeForCausalLM: per layer ln_1, c_attn 2048 x (2048 + 2·128) + bias, c_proj 2048² + bias,
// ln_2, c_fc 2048 x 8192 + bias, c_proj 8192 x 2048 + bias = 42,490,112; x 24 layers, + wte
// 49152·2048 + wpe 8192·2048 + ln_f 2·2048, lm_head tied: 1,137,207,296 (the hub's "1.14B").
TEST(FamiliesTest, StarCoderBase1B) {
  const ModelSpec m = load("starcoderbase-1b.json");
  EXPECT_EQ(m.model_type, "gpt_bigcode");
  EXPECT_EQ(m.num_kv_heads, 1);  // multi_query: true
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_TRUE(m.fused_qkv);
  EXPECT_TRUE(m.learned_positions);
  EXPECT_EQ(m.max_positions, 8192);
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(m.qkv_bias && m.o_bias && m.mlp_bias);
  EXPECT_EQ(m.act, ActFn::kGeluTanh);
  EXPECT_TRUE(m.tied_embeddings);  // absent: GPTBigCodeConfig's PretrainedConfig default
  EXPECT_DOUBLE_EQ(m.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(m.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(m.embedding_dropout, 0.1);
  EXPECT_EQ(m.layers[0].ffn, 8192);
  const ParamCounts p = count_params(m);
  EXPECT_EQ(p.layers[0].attention + p.layers[0].kv_projection + p.layers[0].dense_mlp + p.layers[0].replicated,
            42'490'112);
  EXPECT_EQ(p.total(), 1'137'207'296);
}

TEST(FamiliesTest, GptBigCodeMultiQueryFalseIsMha) {
  json c = {{"model_type", "gpt_bigcode"}, {"n_embd", 256}, {"n_layer", 2}, {"n_head", 8}, {"vocab_size", 1000},
            {"multi_query", false}, {"n_inner", nullptr}};
  auto m = parse_hf_config(c.dump(), "test.json");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->num_kv_heads, 8);
  EXPECT_EQ(m->layers[0].ffn, 4 * 256);  // n_inner null: 4·h
  EXPECT_EQ(m->max_positions, 1024);     // n_positions absent: the config class's default
  c["multi_query"] = "yes";
  expect_error(c, {"multi_query", "true or false"});
  c["multi_query"] = true;
  c["add_cross_attention"] = true;
  expect_error(c, {"add_cross_attention", "gpt_bigcode", "not supported"});
}

// microsoft/phi-2 (huggingface.co/microsoft/phi-2/blob/main/config.json): 2,779,683,840
// parameters (the HF safetensors metadata). Per layer q/k/v/dense 4·(2560² + 2560), fc1/fc2 with
// biases, one LayerNorm (2·2560); final_layernorm; untied lm_head with a bias of V = 51,200.
TEST(FamiliesTest, Phi2) {
  const ModelSpec m = load("phi-2.json");
  EXPECT_EQ(m.model_type, "phi");
  EXPECT_EQ(m.head_dim, 80);
  EXPECT_DOUBLE_EQ(m.rotary_fraction, 0.4);
  EXPECT_TRUE(m.parallel_residual);
  EXPECT_TRUE(m.shared_input_norm);
  EXPECT_TRUE(m.qkv_bias && m.o_bias && m.mlp_bias && m.lm_head_bias);
  EXPECT_FALSE(m.fused_qkv);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_EQ(m.act, ActFn::kGeluNew);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_DOUBLE_EQ(m.hidden_dropout, 0.1);     // resid_pdrop
  EXPECT_DOUBLE_EQ(m.embedding_dropout, 0.0);  // embd_pdrop
  EXPECT_EQ(m.dtype, DType::kFP16);
  const ParamCounts p = count_params(m);
  EXPECT_EQ(p.lm_head_bias, 51'200);
  EXPECT_EQ(p.total(), 2'779'683'840);
  // One norm per layer: input_layernorm only.
  int norms = 0;
  for (const WeightTensor& t : layer_weight_tensors(m, m.layers[0])) norms += t.part == WeightPart::kLayerNorm;
  EXPECT_EQ(norms, 2);  // its weight and its bias
}

TEST(FamiliesTest, PhiQkLayernormIsRefused) {
  json c = {{"model_type", "phi"}, {"hidden_size", 256}, {"num_hidden_layers", 2}, {"num_attention_heads", 8},
            {"intermediate_size", 1024}, {"vocab_size", 1000}, {"qk_layernorm", true}};
  expect_error(c, {"qk_layernorm", "phi", "not supported"});
  c["qk_layernorm"] = false;
  EXPECT_TRUE(parse_hf_config(c.dump(), "test.json"));
}

// allenai/OLMo-2-1124-7B (huggingface.co/allenai/OLMo-2-1124-7B/blob/main/config.json). Per
// layer q/k/v/o 4·4096², q_norm + k_norm 2·4096 (over the whole projection), SwiGLU 3·4096·11008,
// post_attention + post_feedforward norms 2·4096 = 202,391,552; x 32, + embed_tokens and lm_head
// 2·100352·4096 + the final norm 4096: 7,298,617,344 (OLMo 2 paper, "7.30B" rounded; our sum).
TEST(FamiliesTest, Olmo2_7B) {
  const ModelSpec m = load("olmo-2-1124-7b.json");
  EXPECT_EQ(m.model_type, "olmo2");
  EXPECT_TRUE(m.post_norms_only);
  EXPECT_TRUE(m.qk_norm && m.qk_norm_full_width);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-6);
  const ParamCounts p = count_params(m);
  EXPECT_EQ(p.layers[0].replicated + p.layers[0].attention + p.layers[0].kv_projection + p.layers[0].dense_mlp,
            202'391'552);
  EXPECT_EQ(p.total(), 7'298'617'344);
  bool q_norm_full = false;
  for (const WeightTensor& t : layer_weight_tensors(m, m.layers[0]))
    if (t.name == "attn.q_norm.weight") q_norm_full = t.rows == 4096;
  EXPECT_TRUE(q_norm_full);
}

}  // namespace
}  // namespace actmem

namespace actmem {
namespace {

// tiiuae/falcon-7b (huggingface.co/tiiuae/falcon-7b/blob/main/config.json): 6,921,720,704
// distinct parameters ("6.92B"; the LM head is tied to the embedding). The checkpoint stores the
// tied head a second time, so its file total is 7,217,189,760 = this + 65,024 × 4,544. multi_query: query_key_value 4544 x (4544 + 2·64),
// dense 4544², MLP 2·4·4544², one LayerNorm (input_layernorm) per layer; ln_f; lm_head tied.
TEST(FamiliesTest, Falcon7B) {
  const ModelSpec m = load("falcon-7b.json");
  EXPECT_EQ(m.model_type, "falcon");
  EXPECT_EQ(m.num_kv_heads, 1);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_TRUE(m.fused_qkv);
  EXPECT_TRUE(m.parallel_residual && m.shared_input_norm);
  EXPECT_FALSE(m.qkv_bias || m.o_bias || m.mlp_bias);  // bias: false
  EXPECT_EQ(m.act, ActFn::kGelu);
  EXPECT_EQ(m.layers[0].ffn, 4 * 4544);  // ffn_hidden_size absent: 4h
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_TRUE(m.kv_copied_in_split);
  EXPECT_FALSE(m.kv_expanded_in_split);
  EXPECT_EQ(count_params(m).total(), 6'921'720'704);
}

// new_decoder_architecture (Falcon-40B/180B layout), by hand: h = 512, a = 16, kv = 4, d = 32,
// L = 2, V = 1000, f = 4h = 2048, bias false, two LayerNorms (ln_attn, ln_mlp) per layer:
// layer = 512·(16 + 8)·32 + 512² + 2·512·2048 + 4·512 = 393,216 + 262,144 + 2,097,152 + 2,048
// = 2,754,560; total = 2·2,754,560 + 1000·512 + 2·512 (ln_f) = 6,022,144 (tied head).
TEST(FamiliesTest, FalconNewDecoderArchitecture) {
  json c = {{"model_type", "falcon"}, {"hidden_size", 512}, {"num_attention_heads", 16}, {"num_kv_heads", 4},
            {"num_hidden_layers", 2}, {"vocab_size", 1000}, {"new_decoder_architecture", true}};
  auto m = parse_hf_config(c.dump(), "test.json");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->num_kv_heads, 4);
  EXPECT_FALSE(m->shared_input_norm);
  EXPECT_TRUE(m->kv_expanded_in_split);
  EXPECT_EQ(count_params(*m).total(), 6'022'144);
  c["num_ln_in_parallel_attn"] = 1;  // Falcon-11B: one norm read by both branches
  auto one = parse_hf_config(c.dump(), "test.json");
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_TRUE(one->shared_input_norm);
  EXPECT_EQ(count_params(*one).total(), 6'022'144 - 2 * 2 * 512);
}

TEST(FamiliesTest, FalconUnsupportedKeysAreNamed) {
  json c = {{"model_type", "falcon"}, {"hidden_size", 512}, {"num_attention_heads", 16}, {"num_hidden_layers", 2},
            {"vocab_size", 1000}};
  EXPECT_TRUE(parse_hf_config(c.dump(), "test.json"));
  json alibi = c;
  alibi["alibi"] = true;
  expect_error(alibi, {"alibi", "falcon", "not supported"});
  json sequential = c;
  sequential["parallel_attn"] = false;
  expect_error(sequential, {"parallel_attn", "not supported"});
  json post = c;
  post["apply_residual_connection_post_layernorm"] = true;
  expect_error(post, {"apply_residual_connection_post_layernorm"});
  json kv = c;
  kv["multi_query"] = false;
  kv["num_kv_heads"] = 4;
  expect_error(kv, {"num_kv_heads", "new_decoder_architecture"});
}

}  // namespace
}  // namespace actmem

namespace actmem {
namespace {

// google/gemma-3-1b-it (huggingface.co/google/gemma-3-1b-it/blob/main/config.json): 999,885,952
// parameters (HF safetensors metadata). Per layer q 1152·1024, k and v 1152·256, o 1024·1152,
// q_norm and k_norm 256 each, GeGLU 3·1152·6912, four norms 4·1152 = 26,842,112; x 26, + the tied
// embedding 262144·1152 + the final norm 1152.
TEST(FamiliesTest, Gemma3_1B) {
  const ModelSpec m = load("gemma-3-1b-it.json");
  EXPECT_EQ(m.model_type, "gemma3_text");
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_TRUE(m.qk_norm && !m.qk_norm_full_width);
  EXPECT_TRUE(m.sandwich_norms && m.embedding_scaled && m.tied_embeddings);
  EXPECT_DOUBLE_EQ(m.attn_logit_softcap, 0.0);   // null
  EXPECT_DOUBLE_EQ(m.final_logit_softcap, 0.0);  // null
  // sliding_window_pattern 6: layers 5, 11, 17, 23 are global, the other 22 slide over 512 tokens.
  int global = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const bool expect_global = (i + 1) % 6 == 0;
    EXPECT_EQ(m.layers[i].sliding_window, expect_global ? 0 : 512) << "layer " << i;
    global += expect_global;
  }
  EXPECT_EQ(global, 4);
  EXPECT_EQ(count_params(m).total(), 999'885'952);
}

// openai/gpt-oss-20b: the fields of its config.json (model card: 24 layers, 32 experts, top-4,
// 20.91B parameters) as ../shared/data/vllm-0.19/configs/gpt-oss-20b.json holds them, without
// rope_scaling (GptOssConfig's default, YaRN x32 over 4096, applies). By hand: embeddings and the
// untied head 2·V·h = 1,158,266,880; per layer q/k/v/o 2880·(4096 + 2·512) + 4096·2880 with biases
// 4096 + 1024 + 2880 and 64 sinks = 26,550,336; 32 experts of 2880·5760 + 5760 (gate_up) and
// 2880·2880 + 2880 (down) = 796,538,880, router 2880·32 + 32, two norms 2·2880: 823,186,976 per
// layer; x 24 + the final norm 2880 = 20,914,757,184.
TEST(FamiliesTest, GptOss20B) {
  json c = {{"architectures", {"GptOssForCausalLM"}}, {"model_type", "gpt_oss"}, {"hidden_size", 2880},
            {"intermediate_size", 2880}, {"num_hidden_layers", 24}, {"num_attention_heads", 64},
            {"num_key_value_heads", 8}, {"head_dim", 64}, {"num_local_experts", 32}, {"num_experts_per_tok", 4},
            {"vocab_size", 201088}, {"sliding_window", 128}, {"max_position_embeddings", 131072},
            {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"}};
  auto m = parse_hf_config(c.dump(), "gpt-oss-20b.json");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(count_params(*m).total(), 20'914'757'184);
  EXPECT_TRUE(m->qkv_bias && m->o_bias && m->mlp_bias && m->attention_sinks);
  ASSERT_TRUE(m->moe);
  EXPECT_TRUE(m->moe->router_bias);
  EXPECT_EQ(m->moe->expert_ffn, 2880);
  EXPECT_EQ(m->layers[0].sliding_window, 128);  // even layers slide (GptOssConfig layer_types)
  EXPECT_EQ(m->layers[1].sliding_window, 0);
  EXPECT_TRUE(m->layers[23].moe);
  EXPECT_EQ(m->rope_scaling.type, "yarn");
  EXPECT_EQ(m->rope_scaling.original_max_positions, 4096);
  EXPECT_EQ(m->derived_max_len, 131072);  // vLLM: 4096 x 32
}

}  // namespace
}  // namespace actmem
