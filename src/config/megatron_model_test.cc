// Megatron-LM launch lines composed into ModelSpec parts (config/megatron_model.cc). The mixed
// models are model arguments of real launch lines of Megatron-LM's own CI, each named by its record
// in shared/data/megatron-ci/megatron_ci_memory.json (tests/functional_tests/test_cases/<id>/
// model_config.yaml), with the parameter counts worked out by hand from h, L, a, kv, f, V.
#include "config/megatron_model.h"

#include <string>

#include <gtest/gtest.h>

#include "api/library.h"
#include "config/config_test_util.h"
#include "model/hf_config.h"
#include "model/params.h"

namespace actmem {
namespace {

using testing::kData;
using testing::report_of;

ModelSpec model_of(const std::string& args) {
  auto c = read_megatron_args(args, "ci.sh");
  EXPECT_TRUE(c) << (c ? "" : c.error().message);
  EXPECT_TRUE(c && c->model);
  return c && c->model ? *c->model : ModelSpec{};
}

TrainingSettings settings_of(const std::string& args) {
  auto c = read_megatron_args(args, "ci.sh");
  EXPECT_TRUE(c) << (c ? "" : c.error().message);
  TrainingSettings s;
  if (c) EXPECT_TRUE(apply_training_config(*c, s));
  return s;
}

// gpt/gpt3_7b_tp1_pp4_memory_speed/dev_dgx_h100, Megatron's 7B memory test: GQA (8 groups) on a GPT
// with Megatron's defaults otherwise: LayerNorm, GeLU MLP of 4h, learned positions, linear biases,
// untied output layer. Earlier this reader refused it ("this one mixes them").
const std::string k7bMemoryTest =
    "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
    "--untie-embeddings-and-output-weights --micro-batch-size 1 --seq-length 8192 --max-position-embeddings 8192 "
    "--tokenizer-type NullTokenizer --vocab-size 131073 --tensor-model-parallel-size 1 --bf16";

TEST(MegatronModel, GptWithGqaFrom7bMemoryTest) {
  const ModelSpec m = model_of(k7bMemoryTest);
  EXPECT_EQ(m.model_type, "megatron_gpt");
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(m.norm_bias);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_EQ(m.act, ActFn::kGelu);
  EXPECT_TRUE(m.learned_positions);
  EXPECT_FALSE(m.has_rope());
  EXPECT_TRUE(m.qkv_bias && m.o_bias && m.mlp_bias);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.vocab, 131200);  // 131073 padded to a multiple of 128
  // Per layer: two LayerNorms 2·2h; linear_qkv (h + 2·kv·d)·h + its bias; linear_proj h·h + h;
  // fc1 f·h + f, fc2 h·f + h. Then the word and position embeddings, the final LayerNorm, the output layer.
  constexpr int64_t L = 32, h = 4096, kv = 8, d = 128, f = 4 * h, V = 131200, P = 8192;
  constexpr int64_t qkv = h + 2 * kv * d;
  constexpr int64_t layer = 2 * 2 * h + qkv * h + qkv + h * h + h + f * h + f + h * f + h;
  EXPECT_EQ(layer, 176'207'872);
  constexpr int64_t total = L * layer + V * h + P * h + 2 * h + V * h;
  EXPECT_EQ(total, 6'747'004'928);
  EXPECT_EQ(count_params(m).total(), total);
}

// The op graph builds that model from its parts under --framework megatron (local spec, flash
// attention, no dropout; T = s·b tokens, bf16). With learned positions q, k and v stay views of the
// fused QKV output, so flash keeps that one storage (a + 2kv)·d wide: layer input 2Th, LayerNorm
// mean and rstd 8T, qkv input 2Th, qkv output 2T(a+2kv)d, flash out 2Tad and logsumexp 4aT, the
// residual 2Th, the second LayerNorm's 8T, fc1 input 2Th, GeLU input 2Tf, fc2 input 2Tf.
TEST(MegatronModel, GqaGptActivationsUnderMegatronRules) {
  TrainingSettings s = settings_of(k7bMemoryTest);
  s.workload.megatron.impl = TransformerImpl::kLocal;  // the line names no spec: the reader gives Megatron's TE
  s.workload.attention = AttentionImpl::kFlash;
  s.workload.hidden_dropout = 0.0;
  s.workload.attention_dropout = 0.0;
  auto prepared = prepare(model_of(k7bMemoryTest), s.workload);
  ASSERT_TRUE(prepared) << prepared.error().message;
  Totals t;
  ASSERT_TRUE(evaluate(*prepared, s.layout, t));
  constexpr int64_t T = 8192, h = 4096, a = 32, kv = 8, d = 128, f = 4 * h;
  constexpr int64_t per_layer = 2 * T * h + 8 * T + 2 * T * h + 2 * T * (a + 2 * kv) * d + 2 * T * a * d + 4 * a * T +
                                2 * T * h + 8 * T + 2 * T * h + 2 * T * f + 2 * T * f;
  EXPECT_EQ(t.per_layer, per_layer);
}

// moe/gpt3_mcore_te_tp2_pp1_te_8experts2parallel_ddp_average_in_collective/dev_dgx_a100: MoE on a GPT
// (GeLU experts, LayerNorm, learned positions) without biases; GPT-2 BPE vocabulary 50257 padded to a
// multiple of 128·tp 2. Earlier: refused ("Megatron MoE models of the Mixtral kind").
TEST(MegatronModel, GptMoeFromCi) {
  const ModelSpec m = model_of(
      "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --micro-batch-size 4 --seq-length 1024 "
      "--max-position-embeddings 1024 --vocab-file vocab.json --tensor-model-parallel-size 2 --disable-bias-linear "
      "--num-experts 8 --moe-router-topk 1 --bf16");
  EXPECT_EQ(m.model_type, "megatron_gpt");
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.num_moe_layers(), 12);
  EXPECT_EQ(m.moe->expert_ffn, 2048);  // moe_ffn_hidden_size defaults to ffn_hidden_size (4h)
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_EQ(m.vocab, 50432);
  // Per layer: two LayerNorms 4h; linear_qkv 3h·h; linear_proj h·h; router E·h; E experts of fc1 f·h and fc2 h·f.
  constexpr int64_t L = 12, h = 512, f = 4 * h, E = 8, V = 50432, P = 1024;
  constexpr int64_t layer = 4 * h + 3 * h * h + h * h + E * h + E * 2 * f * h;
  constexpr int64_t total = L * layer + V * h + P * h + 2 * h;
  EXPECT_EQ(total, 240'329'728);
  EXPECT_EQ(count_params(m).total(), total);
  const TrainingSettings s = settings_of(
      "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --micro-batch-size 4 --seq-length 1024 "
      "--max-position-embeddings 1024 --vocab-file vocab.json --tensor-model-parallel-size 2 --disable-bias-linear "
      "--num-experts 8 --moe-router-topk 1 --bf16 --sequence-parallel");
  EXPECT_GT(report_of(m, s).totals.activations, 0);
}

// gpt/gpt3_mcore_te_tp4_pp1_resume_torch_dist_qk_layernorm_test_mode/dev_dgx_h100: --qk-layernorm on
// a GPT: LayerNorms (weight and bias) over the head size d = 64 on q and k, 4d per layer.
TEST(MegatronModel, QkLayerNormOnGptFromCi) {
  const ModelSpec m = model_of(
      "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --micro-batch-size 4 --seq-length 1024 "
      "--max-position-embeddings 1024 --vocab-file vocab.json --tensor-model-parallel-size 4 --qk-layernorm --bf16");
  EXPECT_EQ(m.model_type, "megatron_gpt");
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(m.vocab, 50688);  // 50257 padded to a multiple of 128·4
  constexpr int64_t L = 12, h = 512, d = 64, f = 4 * h, V = 50688, P = 1024;
  constexpr int64_t layer = 4 * h + 3 * h * h + 3 * h + h * h + h + f * h + f + h * f + h + 4 * d;
  constexpr int64_t total = L * layer + V * h + P * h + 2 * h;
  EXPECT_EQ(total, 64'309'248);
  EXPECT_EQ(count_params(m).total(), total);
}

// moe/deepseek_proxy_fsdp_ep2_fsdp2/dev_dgx_gb200: MLA (q rank 256, kv rank 128, qk 128 + rope 64,
// v 128; its latent norms with --qk-layernorm), RMSNorm, SwiGLU, RoPE, no biases, untied; experts
// on layers 3..7 (--moe-layer-freq ([0]*3+[1]*5)): 8 of 1024, top-4 pre-softmax, a shared expert of
// 1024; vocabulary 50257 padded to a multiple of 64.
TEST(MegatronModel, MlaMoeWithLayerPatternFromCi) {
  const ModelSpec m = model_of(
      "--tensor-model-parallel-size 1 --disable-bias-linear --micro-batch-size 32 --seq-length 1024 "
      "--vocab-file vocab.json --num-layers 8 --hidden-size 512 --ffn-hidden-size 2048 --num-attention-heads 8 "
      "--kv-channels 128 --max-position-embeddings 1024 --position-embedding-type rope --rotary-base 10000 "
      "--make-vocab-size-divisible-by 64 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu "
      "--untie-embeddings-and-output-weights --multi-latent-attention --attention-dropout 0.0 --hidden-dropout 0.0 "
      "--qk-layernorm --num-experts 8 --moe-layer-freq '([0]*3+[1]*5)' --moe-ffn-hidden-size 1024 "
      "--moe-shared-expert-intermediate-size 1024 --moe-router-topk 4 --moe-router-pre-softmax --q-lora-rank 256 "
      "--kv-lora-rank 128 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128");
  EXPECT_EQ(m.model_type, "megatron_gpt");
  ASSERT_TRUE(m.mla);
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_FALSE(m.moe->normalize_topk);
  EXPECT_EQ(m.moe->shared_ffn, 1024);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m.layers[static_cast<size_t>(i)].moe, i >= 3) << i;
  constexpr int64_t L_dense = 3, L_moe = 5, h = 512, a = 8, f = 2048, rq = 256, rkv = 128, dn = 128, dr = 64,
                    dv = 128, E = 8, fe = 1024, fs = 1024, V = 50304;
  // Per layer: two RMSNorms 2h; q_down rq·h, its norm rq, q_up a·(dn+dr)·rq; kv_down (rkv+dr)·h, its
  // norm rkv, kv_up a·(dn+dv)·rkv; linear_proj h·a·dv. Dense MLP 3·f·h; MoE: router E·h, experts
  // E·3·fe·h, shared expert 3·fs·h.
  constexpr int64_t attention = 2 * h + rq * h + rq + a * (dn + dr) * rq + (rkv + dr) * h + rkv +
                                a * (dn + dv) * rkv + h * a * dv;
  constexpr int64_t total = L_dense * (attention + 3 * f * h) + L_moe * (attention + E * h + E * 3 * fe * h + 3 * fs * h) +
                            2 * V * h + h;
  EXPECT_EQ(total, 143'031'808);
  EXPECT_EQ(count_params(m).total(), total);
}

// What earlier versions read as HF gpt2 / llama / mixtral is the same model now, field by field
// (the spec's dropouts aside: the workload's --hidden-dropout / --attention-dropout, always set from
// the same arguments, override them), and the same estimate under either framework's rules.
TEST(MegatronModel, LegacyLayoutsUnchanged) {
  struct Case {
    std::string args;
    std::string hf_json;  // what the reader built before composing parts
    NormKind norm;        // Megatron's --normalization, set on that model afterwards
  };
  const std::string gpt = "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
                          "--max-position-embeddings 512 --vocab-size 1000 --tensor-model-parallel-size 2 --bf16 "
                          "--hidden-dropout 0.05 --attention-dropout 0.02 --micro-batch-size 2";
  const std::string gpt_json = R"({"model_type": "gpt2", "n_embd": 256, "n_head": 8, "n_layer": 4, "n_inner": 1024,
      "n_positions": 512, "vocab_size": 1024, "activation_function": "gelu", "resid_pdrop": 0.05,
      "attn_pdrop": 0.02, "embd_pdrop": 0.05, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": TIED,
      "torch_dtype": "bfloat16"})";
  auto tied = [](std::string json, bool t) { return json.replace(json.find("TIED"), 4, t ? "true" : "false"); };
  const std::string llama = "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --group-query-attention "
                            "--num-query-groups 2 --swiglu --position-embedding-type rope --disable-bias-linear "
                            "--vocab-size 1000 --seq-length 512 --max-position-embeddings 512 --bf16 "
                            "--attention-dropout 0.0 --micro-batch-size 1";
  const std::string llama_json = R"({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8,
      "num_key_value_heads": 2, "num_hidden_layers": 4, "intermediate_size": 640, "max_position_embeddings": 512,
      "vocab_size": 1024, "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
      "torch_dtype": "bfloat16", "attention_dropout": 0.0})";
  std::string mixtral_json = llama_json;
  mixtral_json.replace(mixtral_json.find("\"llama\""), 7, "\"mixtral\"");
  mixtral_json.replace(mixtral_json.find("640"), 3, "512");
  mixtral_json.insert(1, R"("num_local_experts": 4, "num_experts_per_tok": 2, )");
  const Case cases[] = {
      {gpt, tied(gpt_json, true), NormKind::kLayerNorm},
      {gpt + " --normalization RMSNorm --untie-embeddings-and-output-weights", tied(gpt_json, false),
       NormKind::kRMSNorm},
      {llama, llama_json, NormKind::kLayerNorm},
      {llama + " --normalization RMSNorm --num-experts 4 --moe-ffn-hidden-size 512", mixtral_json, NormKind::kRMSNorm},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const ModelSpec now = model_of(c.args);
    auto before = parse_hf_config(c.hf_json, "ci.sh");
    ASSERT_TRUE(before) << before.error().message;
    before->norm = c.norm;
    before->norm_bias = c.norm == NormKind::kLayerNorm;
    before->hidden_dropout = now.hidden_dropout;
    before->embedding_dropout = now.embedding_dropout;
    EXPECT_EQ(now.model_type, before->model_type);
    EXPECT_TRUE(now == *before);
    for (Framework fw : {Framework::kMegatron, Framework::kHF}) {
      TrainingSettings s = settings_of(c.args);
      s.workload.framework = fw;
      if (fw == Framework::kHF) s.workload.megatron = MegatronOptions{};  // the reader's router defaults are Megatron's
      const Report a = report_of(now, s);
      const Report b = report_of(*before, s);
      EXPECT_EQ(a.totals.total, b.totals.total);
      EXPECT_EQ(a.totals.activations, b.totals.activations);
    }
  }
}

// Switches no CI record here combines, each a part: RoPE-free attention (--position-embedding-type
// none: every layer NoPE, no rotary table), squared-ReLU, q/k/v biases alone, head size ≠ h/a.
TEST(MegatronModel, MorePartsCompose) {
  const ModelSpec m = model_of(
      "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --kv-channels 32 --position-embedding-type none "
      "--squared-relu --disable-bias-linear --add-qkv-bias --vocab-size 1024 --seq-length 128");
  EXPECT_EQ(m.act, ActFn::kSquaredRelu);
  EXPECT_FALSE(m.learned_positions);
  EXPECT_FALSE(m.has_rope());
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.o_bias || m.mlp_bias);
  EXPECT_EQ(m.head_dim, 32);
  // Per layer: two LayerNorms 4h; q, k, v 3·(a·d)·h + their biases 3·a·d; proj h·(a·d); fc1, fc2 2·4h·h.
  constexpr int64_t h = 256, ad = 4 * 32, V = 1024;
  constexpr int64_t layer = 4 * h + 3 * ad * h + 3 * ad + h * ad + 2 * 4 * h * h;
  EXPECT_EQ(count_params(m).total(), 2 * layer + V * h + 2 * h);
  const ModelSpec rope = model_of("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --swiglu "
                                  "--position-embedding-type rope --no-rope-freq 2 --rotary-percent 0.5 "
                                  "--vocab-size 1024 --seq-length 128");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rope.layers[static_cast<size_t>(i)].no_rope, i % 2 == 1) << i;
  EXPECT_TRUE(rope.has_rope());
  EXPECT_EQ(rope.rotary_fraction, 0.5);
  EXPECT_EQ(rope.model_type, "megatron_gpt");  // NoPE layers: no HF llama
}

TEST(MegatronModel, LayerPatterns) {
  auto freq = megatron::moe_layer_pattern("2", 4);
  ASSERT_TRUE(freq);
  EXPECT_EQ(*freq, (std::vector<bool>{true, false, true, false}));
  auto list = megatron::moe_layer_pattern("([0]*1+[1]*2)*2", 6);
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_EQ(*list, (std::vector<bool>{false, true, true, false, true, true}));
  auto spaced = megatron::moe_layer_pattern("[1, 0] * 2", 4);
  ASSERT_TRUE(spaced) << spaced.error().message;
  EXPECT_EQ(*spaced, (std::vector<bool>{true, false, true, false}));
  EXPECT_NE(megatron::moe_layer_pattern("[1]*3", 4).error().message.find("has 3 entries; it needs one per layer (4)"),
            std::string::npos);
  EXPECT_FALSE(megatron::moe_layer_pattern("[2]*4", 4));
  EXPECT_FALSE(megatron::moe_layer_pattern("[1]*(4", 4));
  EXPECT_FALSE(megatron::moe_layer_pattern("[1]*99999999", 4));
  EXPECT_FALSE(megatron::moe_layer_pattern("0", 4));
  auto nope = megatron::no_rope_pattern("4", 8);
  ASSERT_TRUE(nope);
  EXPECT_EQ(*nope, (std::vector<bool>{false, false, false, true, false, false, false, true}));
  EXPECT_FALSE(megatron::no_rope_pattern("3", 8));  // Megatron asserts L % N == 0
}

TEST(MegatronModel, RefusalsNameTheSwitch) {
  const std::string base = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --vocab-size 1024 ";
  auto refused = [&](const std::string& extra) {
    auto c = read_megatron_args(base + extra, "x.sh");
    EXPECT_FALSE(c) << extra;
    return c ? std::string() : c.error().message;
  };
  EXPECT_NE(refused("--swiglu --squared-relu").find("exclude each other"), std::string::npos);
  EXPECT_NE(refused("--quick-geglu").find("quick-GeGLU"), std::string::npos);
  EXPECT_NE(refused("--position-embedding-type relative").find("relative positions are not modelled"),
            std::string::npos);
  EXPECT_NE(refused("--multi-latent-attention --disable-bias-linear").find("latent norms"), std::string::npos);
  EXPECT_NE(refused("--multi-latent-attention --qk-layernorm").find("MLA with linear biases"), std::string::npos);
  EXPECT_NE(refused("--num-experts 4 --moe-router-topk 5").find("top-5 of 4 experts"), std::string::npos);
  EXPECT_NE(refused("--group-query-attention --num-query-groups 3").find("do not split into 3"), std::string::npos);
  // --group-query-attention alone: Megatron's default num_query_groups 1 (MQA).
  EXPECT_EQ(model_of(base + "--group-query-attention").num_kv_heads, 1);
}

}  // namespace
}  // namespace actmem
