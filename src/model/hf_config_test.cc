// config.json parsing: real-world files (tests/data/configs/) with their published parameter
// counts, key aliases, wrappers, class defaults, per-layer data, and every error path.
#include "model/hf_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>  // builds test configs

#include "model/params.h"

namespace actmem {
namespace {

using json = nlohmann::json;

ModelSpec load_test_config(const std::string& file) {
  auto spec = load_hf_config(std::string{ACTMEM_SOURCE_DIR} + "/tests/data/configs/" + file);
  EXPECT_TRUE(spec) << (spec ? "" : spec.error().message);
  return spec ? *spec : ModelSpec{};
}

json small_llama() {
  return {{"model_type", "llama"},       {"hidden_size", 256},        {"intermediate_size", 512},
          {"num_hidden_layers", 4},      {"num_attention_heads", 8},  {"num_key_value_heads", 2},
          {"vocab_size", 1000},          {"torch_dtype", "bfloat16"}};
}

Expected<ModelSpec> parse(const json& config) { return parse_hf_config(config.dump(), "test.json"); }

/// The parse fails and the message mentions every piece of `parts`.
void expect_error(const Expected<ModelSpec>& r, std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(r) << "expected an error";
  for (std::string_view part : parts)
    EXPECT_NE(r.error().message.find(part), std::string::npos) << "'" << part << "' not in: " << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << "one line";
}

// --- real-world config.json files ---

// Qwen2-0.5B: 494,032,768 ("0.49B", Qwen2 technical report Table 1; HF safetensors metadata).
TEST(HfConfigTest, Qwen2HalfB) {
  const ModelSpec m = load_test_config("qwen2-0.5b.json");
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.o_bias);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.layers[23].sliding_window, 0);  // use_sliding_window: false
  EXPECT_EQ(m.dtype, DType::kBF16);
  EXPECT_EQ(count_params(m).total(), 494'032'768);
}

// Phi-3-mini-4k: 3,821,079,552 ("3.8B", HF safetensors metadata); fused qkv_proj and gate_up_proj.
TEST(HfConfigTest, Phi3Mini) {
  const ModelSpec m = load_test_config("phi-3-mini-4k-instruct.json");
  EXPECT_TRUE(m.fused_qkv);
  EXPECT_TRUE(m.fused_gate_up);
  EXPECT_EQ(m.layers[0].sliding_window, 2047);
  EXPECT_EQ(m.layers[31].sliding_window, 2047);
  EXPECT_EQ(count_params(m).total(), 3'821'079'552);
}

// Pythia-160M: 162,322,944 total and 85,056,000 non-embedding (Biderman et al. 2023, Table 1).
TEST(HfConfigTest, PythiaGptNeox) {
  const ModelSpec m = load_test_config("pythia-160m.json");
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(m.norm_bias);
  EXPECT_EQ(m.num_kv_heads, 12);  // no num_key_value_heads key: MHA
  EXPECT_DOUBLE_EQ(m.rotary_fraction, 0.25);
  EXPECT_TRUE(m.parallel_residual);
  EXPECT_TRUE(m.qkv_bias && m.o_bias && m.mlp_bias);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_EQ(m.act, ActFn::kGelu);
  const ParamCounts p = count_params(m);
  EXPECT_EQ(p.total(), 162'322'944);
  EXPECT_EQ(p.non_embedding(), 85'056'000);
}

// Gemma-2-2B: 2,614,341,888 ("2.6B", HF safetensors metadata); even layers slide (HF Gemma2).
TEST(HfConfigTest, Gemma2Small) {
  const ModelSpec m = load_test_config("gemma-2-2b.json");
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_EQ(m.layers[0].sliding_window, 4096);
  EXPECT_EQ(m.layers[1].sliding_window, 0);
  EXPECT_EQ(m.layers[24].sliding_window, 4096);
  EXPECT_TRUE(m.sandwich_norms);
  EXPECT_TRUE(m.embedding_scaled);
  EXPECT_TRUE(m.tied_embeddings);  // absent: Gemma2Config default
  EXPECT_EQ(m.act, ActFn::kGeluTanh);
  EXPECT_DOUBLE_EQ(m.attn_logit_softcap, 50.0);
  EXPECT_DOUBLE_EQ(m.final_logit_softcap, 30.0);
  EXPECT_EQ(m.dtype, DType::kFP32);
  EXPECT_EQ(count_params(m).total(), 2'614'341'888);
}

// Qwen1.5-MoE-A2.7B: "14.3B total, 2.7B activated" (Qwen blog); the shared expert has a gate.
TEST(HfConfigTest, Qwen2Moe) {
  const ModelSpec m = load_test_config("qwen1.5-moe-a2.7b.json");
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.moe->num_experts, 60);
  EXPECT_EQ(m.moe->experts_per_token, 4);
  EXPECT_EQ(m.moe->expert_ffn, 1408);
  EXPECT_EQ(m.moe->shared_ffn, 5632);
  EXPECT_TRUE(m.moe->shared_expert_gate);
  EXPECT_EQ(m.num_moe_layers(), 24);
  const ParamCounts p = count_params(m);
  EXPECT_EQ(p.total(), 14'315'784'192);
  EXPECT_EQ(p.active(), 2'689'173'504);
}

// LLaVA-1.5-7B: the language model is in text_config, written as a diff against LlamaConfig's
// defaults (h=4096, ffn=11008, L=32, a=32). Llama-2-7B's 6,738,415,616 plus 64 extra vocab rows
// in the embedding and in the LM head.
TEST(HfConfigTest, MultimodalWrapperUsesTextConfig) {
  const ModelSpec m = load_test_config("llava-1.5-7b.json");
  EXPECT_EQ(m.model_type, "llama");
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.vocab, 32064);
  EXPECT_EQ(m.max_positions, 4096);
  EXPECT_EQ(m.dtype, DType::kFP16);
  EXPECT_EQ(count_params(m).total(), 6'738'415'616 + 2 * 64 * 4096);
}

// --- aliases, defaults, per-layer data ---

TEST(HfConfigTest, KeyAliases) {
  json c = {{"model_type", "llama"}, {"n_embd", 256}, {"n_layer", 4}, {"n_head", 8}, {"n_inner", 512},
            {"n_vocab", 1000}, {"n_positions", 64}, {"layer_norm_epsilon", 1e-5}, {"dtype", "float16"},
            {"hidden_dropout", 0.1}, {"attention_dropout", 0.2}, {"embd_pdrop", 0.05}};
  auto m = parse(c);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->hidden, 256);
  EXPECT_EQ(m->num_layers, 4);
  EXPECT_EQ(m->num_heads, 8);
  EXPECT_EQ(m->layers[0].ffn, 512);
  EXPECT_EQ(m->vocab, 1000);
  EXPECT_EQ(m->max_positions, 64);
  EXPECT_DOUBLE_EQ(m->norm_eps, 1e-5);
  EXPECT_EQ(m->dtype, DType::kFP16);
  EXPECT_DOUBLE_EQ(m->hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(m->attention_dropout, 0.2);
  EXPECT_DOUBLE_EQ(m->embedding_dropout, 0.05);
}

TEST(HfConfigTest, ExplicitHeadDim) {
  json c = small_llama();
  c["head_dim"] = 64;  // 8 heads x 64 = 512 != hidden 256
  auto m = parse(c);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->head_dim, 64);
  EXPECT_EQ(m->q_dim(), 512);
  EXPECT_EQ(m->kv_dim(), 128);
  c["head_dim"] = nullptr;  // null: derive
  EXPECT_EQ(parse(c)->head_dim, 32);
}

TEST(HfConfigTest, ClassDefaults) {
  json c = small_llama();
  c.erase("num_key_value_heads");
  c.erase("torch_dtype");
  auto m = parse(c);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->num_kv_heads, 8);        // absent: MHA
  EXPECT_EQ(m->dtype, DType::kFP32);    // absent: PyTorch loads fp32
  EXPECT_FALSE(m->tied_embeddings);     // LlamaConfig default
  EXPECT_FALSE(m->qkv_bias);
  EXPECT_EQ(m->act, ActFn::kSilu);
  EXPECT_EQ(m->max_positions, 2048);

  c["attention_bias"] = true;
  c["mlp_bias"] = true;
  m = parse(c);
  EXPECT_TRUE(m->qkv_bias && m->o_bias && m->mlp_bias);

  // GPT-2: n_inner null means 4h; tied; learned positions; dropout 0.1 by default.
  json gpt2 = {{"model_type", "gpt2"}, {"n_embd", 64}, {"n_layer", 2}, {"n_head", 4}, {"vocab_size", 100},
               {"n_inner", nullptr}};
  m = parse(gpt2);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->layers[0].ffn, 256);
  EXPECT_TRUE(m->tied_embeddings);
  EXPECT_TRUE(m->learned_positions);
  EXPECT_EQ(m->max_positions, 1024);
  EXPECT_EQ(m->act, ActFn::kGeluNew);
  EXPECT_DOUBLE_EQ(m->hidden_dropout, 0.1);

  // Gemma reads hidden_activation (default gelu_pytorch_tanh), not hidden_act.
  json gemma = small_llama();
  gemma["model_type"] = "gemma";
  gemma["hidden_act"] = "gelu";
  gemma["head_dim"] = 32;
  m = parse(gemma);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->act, ActFn::kGeluTanh);
  EXPECT_TRUE(m->tied_embeddings);
}

TEST(HfConfigTest, ActivationSpellings) {
  const std::pair<const char*, ActFn> cases[] = {{"gelu", ActFn::kGelu},           {"gelu_new", ActFn::kGeluNew},
                                                 {"gelu_pytorch_tanh", ActFn::kGeluTanh},
                                                 {"gelu_fast", ActFn::kGeluTanh}, {"silu", ActFn::kSilu},
                                                 {"swish", ActFn::kSilu},         {"relu", ActFn::kRelu}};
  for (auto [name, fn] : cases) {
    json c = small_llama();
    c["hidden_act"] = name;
    EXPECT_EQ(parse(c)->act, fn) << name;
  }
}

TEST(HfConfigTest, SlidingWindows) {
  json mistral = small_llama();
  mistral["model_type"] = "mistral";
  EXPECT_EQ(parse(mistral)->layers[3].sliding_window, 4096);  // absent: MistralConfig default
  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(parse(mistral)->layers[3].sliding_window, 0);  // null: none

  json qwen = small_llama();
  qwen["model_type"] = "qwen2";
  qwen["sliding_window"] = 1024;
  qwen["max_window_layers"] = 2;
  EXPECT_EQ(parse(qwen)->layers[3].sliding_window, 0);  // use_sliding_window absent: off
  qwen["use_sliding_window"] = true;
  auto m = parse(qwen);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->layers[1].sliding_window, 0);
  EXPECT_EQ(m->layers[2].sliding_window, 1024);  // layers >= max_window_layers slide

  qwen["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "sliding_attention"};
  m = parse(qwen);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->layers[0].sliding_window, 1024);
  EXPECT_EQ(m->layers[2].sliding_window, 0);
}

TEST(HfConfigTest, MoeLayerSelection) {
  json qwen = small_llama();
  qwen["model_type"] = "qwen3_moe";
  qwen["num_experts"] = 8;
  qwen["num_experts_per_tok"] = 2;
  qwen["moe_intermediate_size"] = 64;
  qwen["decoder_sparse_step"] = 2;
  qwen["mlp_only_layers"] = {3};
  auto m = parse(qwen);
  ASSERT_TRUE(m) << m.error().message;
  // (i + 1) % 2 == 0 -> layers 1 and 3; layer 3 is in mlp_only_layers.
  EXPECT_FALSE(m->layers[0].moe);
  EXPECT_TRUE(m->layers[1].moe);
  EXPECT_FALSE(m->layers[3].moe);
  EXPECT_EQ(m->layers[3].ffn, 512);
  EXPECT_TRUE(m->qk_norm);

  qwen["num_experts"] = 0;  // HF falls back to dense MLPs
  m = parse(qwen);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_FALSE(m->moe);
}

TEST(HfConfigTest, DeepseekMoeAndMla) {
  json c = small_llama();
  c["model_type"] = "deepseek_v3";
  c.update({{"n_routed_experts", 16}, {"num_experts_per_tok", 4}, {"moe_intermediate_size", 64},
            {"n_shared_experts", 2}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1},
            {"q_lora_rank", nullptr}, {"kv_lora_rank", 32}, {"qk_nope_head_dim", 16},
            {"qk_rope_head_dim", 8}, {"v_head_dim", 16}, {"num_nextn_predict_layers", 1}});
  auto m = parse(c);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->num_layers, 4);  // the MTP layer is not part of the main model
  EXPECT_FALSE(m->layers[0].moe);
  EXPECT_TRUE(m->layers[1].moe);
  EXPECT_EQ(m->moe->shared_ffn, 128);
  EXPECT_TRUE(m->moe->router_bias);
  ASSERT_TRUE(m->mla);
  EXPECT_EQ(m->mla->q_lora_rank, 0);
  EXPECT_EQ(m->head_dim, 24);
}

// --- errors: one line, naming the field ---

TEST(HfConfigTest, MalformedJsonHasLineAndColumn) {
  expect_error(parse_hf_config("{\n  \"model_type\": \"llama\",\n  oops\n}", "bad.json"),
               {"bad.json", "malformed JSON", "line 3", "column"});
  expect_error(parse_hf_config("", "empty.json"), {"malformed JSON"});
  expect_error(parse_hf_config(R"({"hidden_size": 1e400})", "x.json"), {"malformed JSON"});
}

TEST(HfConfigTest, NotAnObject) {
  expect_error(parse_hf_config("[1, 2]", "x.json"), {"must be a JSON object", "array"});
  json c = small_llama();
  c["text_config"] = 5;
  expect_error(parse(c), {"'text_config' must be an object"});
}

TEST(HfConfigTest, MissingKeys) {
  json c = small_llama();
  c.erase("hidden_size");
  expect_error(parse(c), {"test.json", "missing required key 'hidden_size'"});
  c = small_llama();
  c.erase("model_type");
  expect_error(parse(c), {"missing required key 'model_type'"});
  c = small_llama();
  c.erase("intermediate_size");
  expect_error(parse(c), {"intermediate_size"});
  json wrapper = {{"model_type", "llava"}, {"text_config", {{"hidden_size", 8}}}};
  expect_error(parse(wrapper), {"text_config.model_type"});
}

TEST(HfConfigTest, WrongTypes) {
  json c = small_llama();
  c["hidden_size"] = "4096";
  expect_error(parse(c), {"'hidden_size' must be an integer", "string"});
  c = small_llama();
  c["num_hidden_layers"] = 2.5;
  expect_error(parse(c), {"'num_hidden_layers' must be an integer"});
  c = small_llama();
  c["tie_word_embeddings"] = "yes";
  expect_error(parse(c), {"'tie_word_embeddings' must be true or false"});
  c = small_llama();
  c["rms_norm_eps"] = "tiny";
  expect_error(parse(c), {"'rms_norm_eps' must be a number"});
  c = small_llama();
  c["model_type"] = 3;
  expect_error(parse(c), {"'model_type' must be a string"});
  c = small_llama();
  c["rope_scaling"] = "linear";
  expect_error(parse(c), {"'rope_scaling' must be an object or null"});
  c = small_llama();
  c["hidden_size"] = 4096.0;  // integral floats are accepted
  EXPECT_TRUE(parse(c));
}

TEST(HfConfigTest, BadSizes) {
  json c = small_llama();
  c["num_hidden_layers"] = -3;
  expect_error(parse(c), {"'num_hidden_layers' must be a positive integer, got -3"});
  c = small_llama();
  c["vocab_size"] = 0;
  expect_error(parse(c), {"'vocab_size' must be a positive integer, got 0"});
  c = small_llama();
  c["hidden_size"] = 1'000'000'000'000LL;
  expect_error(parse(c), {"'hidden_size'", "absurdly large"});
  c = small_llama();
  c["hidden_size"] = 18446744073709551615ULL;
  expect_error(parse(c), {"'hidden_size'", "too large"});
  c = small_llama();
  c["hidden_size"] = 1e300;
  expect_error(parse(c), {"'hidden_size'", "too large"});
  c = small_llama();
  c["attention_dropout"] = 1.5;
  expect_error(parse(c), {"'attention_dropout'", "out of range"});
}

TEST(HfConfigTest, HeadsNotDivisible) {
  json c = small_llama();
  c["num_key_value_heads"] = 3;
  expect_error(parse(c), {"num_attention_heads (8) is not divisible by num_key_value_heads (3)"});
  c = small_llama();
  c["hidden_size"] = 100;
  expect_error(parse(c), {"hidden_size (100) is not divisible by num_attention_heads (8)", "head_dim"});
}

TEST(HfConfigTest, UnknownNames) {
  json c = small_llama();
  c["model_type"] = "lama";
  expect_error(parse(c), {"model_type 'lama' is not supported", "did you mean 'llama'?", "qwen3_moe"});
  c = small_llama();
  c["hidden_act"] = "mish";
  expect_error(parse(c), {"'hidden_act'", "mish", "silu"});
  c = small_llama();
  c["torch_dtype"] = "float7";
  expect_error(parse(c), {"torch_dtype", "float7"});
}

TEST(HfConfigTest, ParameterOverflowIsAnError) {
  json c = small_llama();
  c["hidden_size"] = 1 << 24;
  c["num_attention_heads"] = 1 << 10;
  c["num_key_value_heads"] = 1 << 10;
  c["intermediate_size"] = 1 << 28;
  c["num_hidden_layers"] = 100000;
  expect_error(parse(c), {"overflows int64"});
}

TEST(HfConfigTest, MissingFile) {
  auto r = load_hf_config("/nonexistent/config.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("cannot read config file '/nonexistent/config.json'"), std::string::npos);
}

}  // namespace
}  // namespace actmem
