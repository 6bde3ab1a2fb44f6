// Megatron-core multi-latent attention (--framework megatron on a DeepSeek-V3-shaped config with
// every layer dense), every number worked out by hand from the save lists in validation/EXPECTED.md
// ("megatron-mla"), which name the Megatron-LM source of each (main @d98e8a64ddf3):
//   megatron/core/transformer/multi_latent_attention.py (l.638-664 down projections, l.779-781
//   q/kv layernorm, l.855-981 qkv_up_proj_and_rope_apply, l.983-988 and l.455-458 the mla_up_proj
//   CheckpointWithoutOutput), megatron/core/fusions/fused_mla_yarn_rope_apply.py (the fused RoPE
//   saves cos/sin only; key and value are new tensors), gpt_layer_specs.py (local and TE MLA specs).
// Measured by validation/megatron_mla_validation.py (35 cases, exact).
// DeepSeek-V3 attention: h 7168, a 128, q_lora_rank 1536, kv_lora_rank 512, nope 128 + rope 64 =
// dqk 192, dv 128; dense MLP f 18432; 2 layers; s 4096, b 1, bf16, tp 1: T = 4096 tokens.
#include <gtest/gtest.h>

#include <string>

#include "api/library.h"
#include "model/hf_config.h"
#include "policies/megatron_options.h"

namespace actmem {
namespace {

constexpr int64_t kT = 4096;

ModelSpec dense_dsv3(bool q_lora = true) {
  std::string json = R"({"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 2,
    "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
    "first_k_dense_replace": 2, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": false})";
  if (!q_lora) json.replace(json.find("\"q_lora_rank\": 1536"), 19, "\"q_lora_rank\": null");
  auto m = parse_hf_config(json, "dsv3-dense.json");
  EXPECT_TRUE(m.has_value()) << m.error().message;
  return *m;
}

Expected<PreparedModel> megatron(MegatronOptions o, bool q_lora = true) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.attention = AttentionImpl::kFlash;
  w.megatron = o;
  return prepare(dense_dsv3(q_lora), w);
}

Totals totals(const Expected<PreparedModel>& m, Recompute recompute = Recompute::kNone, ParallelLayout par = {}) {
  Layout l;
  l.seq_len = 4096;
  l.micro_batch = 1;
  l.recompute = recompute;
  l.parallel = par;
  Totals t;
  EXPECT_TRUE(m.has_value()) << (m.has_value() ? "" : m.error().message);
  if (m.has_value()) {
    EXPECT_TRUE(evaluate(*m, l, t));
  }
  return t;
}

const MegatronOptions kTe{.impl = TransformerImpl::kTransformerEngine};
MegatronOptions with(MegatronOptions o, unsigned modules) {
  o.recompute_modules = modules;
  return o;
}

// Local spec, flash, no recomputation, bytes per token:
//   x, input_layernorm out (kept by both down projections), residual, pre-MLP norm out: 4 · 2h = 57,344
//   four norms' fp32 rstd: 4 · 4 = 16
//   q_down out 2·1536, q_layernorm out 2·1536, kv_down out 2·(512+64), kv_layernorm out 2·512 = 8,320
//   query 2·a·dqk, key 2·a·dqk, value 2·a·dv = 49,152 + 49,152 + 32,768 = 131,072
//   flash out 2·a·dv (linear_proj's input too) + fp32 logsumexp 4·a = 33,280
//   fc1 out [gate|up] 2·2f + SwiGLU out 2·f = 110,592
constexpr int64_t kLocalPerToken = 57'344 + 16 + 8'320 + 131'072 + 33'280 + 110'592;
static_assert(kLocalPerToken == 340'624);

TEST(MegatronMla, LocalSpecHandComputed) {
  // The value is the fused kv RoPE's own [s, b, n, dv] output: the kv up projection's
  // [s, b, n, dn+dv] output (2·128·256 = 65,536 B/token) is not kept.
  EXPECT_EQ(totals(megatron({})).per_layer, kLocalPerToken * kT);  // 1,395,195,904
}

TEST(MegatronMla, TeSpecAddsOnlyTheRngState) {
  // TE: q/kv norms fused into the up projections' LayerNormLinear (input, ln_out, rsigma: the same
  // bytes), FusedAttention keeps softmaxStats (b, a, s, 1) fp32 = the logsumexp's bytes, and the
  // 16-byte rng_state; q, k, v are three contiguous tensors: no v copy.
  EXPECT_EQ(totals(megatron(kTe)).per_layer, kLocalPerToken * kT + 16);
}

TEST(MegatronMla, RecomputeMlaUpProj) {
  // Local: query, key, value freed after core attention saved them (131,072 B/token); the up
  // projections' inputs (the q/kv layernorm outputs) stay as checkpoint inputs.
  EXPECT_EQ(totals(megatron(with({}, kRecomputeMlaUpProj)), Recompute::kSelective).per_layer,
            (kLocalPerToken - 131'072) * kT);
  // TE: the q/kv norms run inside the checkpoint too: their ln_out (2·1536 + 2·512) and rsigma
  // (2 · 4) go as well; q_compressed and kv_combined (the checkpoint inputs) stay.
  EXPECT_EQ(totals(megatron(with(kTe, kRecomputeMlaUpProj)), Recompute::kSelective).per_layer,
            (kLocalPerToken - 131'072 - 4'096 - 8) * kT + 16);
  // With core_attn (local flash): the logsumexp goes too (the out is linear_proj's input).
  EXPECT_EQ(totals(megatron(with({}, kRecomputeMlaUpProj | kRecomputeCoreAttn)), Recompute::kSelective).per_layer,
            (kLocalPerToken - 131'072 - 512) * kT);
}

TEST(MegatronMla, RecomputeMlaUpProjFlops) {
  // The up projections rerun in backward, per token: q_up 1536·128·192 + kv_up 512·128·(128+128)
  // = 37,748,736 + 16,777,216 = 54,525,952 MACs; 2 FLOPs each, T tokens, 2 layers.
  EXPECT_DOUBLE_EQ(totals(megatron(with({}, kRecomputeMlaUpProj)), Recompute::kSelective).recompute_flops,
                   2.0 * 2 * kT * 54'525'952.0);
}

TEST(MegatronMla, FullRecomputeKeepsNoRotaryFrequencies) {
  // gpt_model.py l.183: no model-level rotary_pos_emb with MLA, so no fp32 (s, 1, 1, dr) freqs
  // tensor is passed into the checkpointed layers: full recomputation keeps each layer's input only.
  EXPECT_EQ(totals(megatron({}), Recompute::kFull).per_layer, 2 * 7168 * kT);
}

TEST(MegatronMla, NoQLoraTeFusesAQNormIntoQProj) {
  // No q LoRA: q_proj reads the input_layernorm output (kept anyway): the q_down output, the q
  // norm's rstd and output (2·1536 + 4 + 2·1536) are gone. The TE spec with qk_layernorm then makes
  // linear_q_proj a LayerNormLinear (mla_qk_norm_config.py _resolve_mla_qk_layernorm): its ln_out
  // over h (2·7168) and rsigma (4) are kept; mla_up_proj drops them with query, key and value.
  const int64_t local = kLocalPerToken - (2 * 1536 + 4 + 2 * 1536);
  EXPECT_EQ(totals(megatron({}, false)).per_layer, local * kT);
  EXPECT_EQ(totals(megatron(kTe, false)).per_layer, (local + 2 * 7168 + 4) * kT + 16);
  EXPECT_EQ(totals(megatron(with(kTe, kRecomputeMlaUpProj), false), Recompute::kSelective).per_layer,
            (local - 131'072 - 2 * 512 - 4) * kT + 16);
}

TEST(MegatronMla, LocalSpecTp8SequenceParallel) {
  // tp 8 with SP, per rank: n = 16 heads, f/t = 2304. Per s/t token (512): x, input norm out,
  // residual, pre-MLP norm out 4·2h; four rstd 4·4; q_layernorm out 2·1536; kv_compressed 2·512 (the
  // scatter's contiguous copy of the gathered kv_combined's strided kv slice, mappings.py l.60-81,
  // which kv_layernorm keeps; the gathered [s, b, 576] is not kept); kv_layernorm out 2·512. Per s
  // token (4096): the gathered q_compressed 2·1536 (q_layernorm reads an s/t slice that is a view of
  // it: mappings.py _split_along_first_dim); query, key 2·16·192 each; value, flash out 2·16·128
  // each; logsumexp 4·16; fc1 out 2·2·2304; SwiGLU out 2·2304.
  const int64_t per_shard_token = 4 * 2 * 7168 + 4 * 4 + 2 * 1536 + 2 * 512 + 2 * 512;
  const int64_t per_token = 2 * 1536 + 2 * 2 * 16 * 192 + 2 * 2 * 16 * 128 + 4 * 16 + 2 * 2 * 2304 + 2 * 2304;
  const int64_t sp_none = per_shard_token * (kT / 8) + per_token * kT;
  EXPECT_EQ(totals(megatron({}), Recompute::kNone, {.tp = 8, .sp = true}).per_layer, sp_none);
  EXPECT_EQ(sp_none, 185'344'000);
  // Without SP the norm reads a view of the gathered [s, b, 576] kv_combined: that storage is kept
  // (and kv_layernorm's input rows are s, not s/t): tp 8 alone keeps 2·576 per token there.
  const Totals tp8 = totals(megatron({}), Recompute::kNone, {.tp = 8});
  EXPECT_EQ(tp8.per_layer, (per_shard_token - 2 * 512) * kT + 2 * 576 * kT + per_token * kT);
}

TEST(MegatronMla, SequenceParallelMlaUpProjKeepsTheGatheredRopeKey) {
  // recompute_modules mla_up_proj under SP (multi_latent_attention.py l.983-988 saves k_pos_emb):
  // query, key, value go (2·16·192 · 2 + 2·16·128 = 16,384 per s token), and
  //  - local spec: k_pos_emb is a view of the gathered [s, b, rkv+dr] kv_combined (l.746-756): the
  //    checkpoint keeps that whole storage, 2·576 per s token;
  const ParallelLayout sp{.tp = 8, .sp = true};
  const int64_t local_none = totals(megatron({}), Recompute::kNone, sp).per_layer;
  EXPECT_EQ(totals(megatron(with({}, kRecomputeMlaUpProj)), Recompute::kSelective, sp).per_layer,
            local_none - 16'384 * kT + 2 * 576 * kT);
  //  - TE spec: kv_combined is this rank's [s/t, b, 576] (duplicated TELinear) and
  //    gather_from_sequence_parallel_region(k_pos_emb) (l.757-764) is a new [s, b, dr] the checkpoint
  //    keeps, 2·64 per s token; the fused q/kv norms' ln_out shards and rsigma (2·1536 + 2·512 + 2·4
  //    per s/t token) go too.
  const int64_t te_none = totals(megatron(kTe), Recompute::kNone, sp).per_layer;
  EXPECT_EQ(totals(megatron(with(kTe, kRecomputeMlaUpProj)), Recompute::kSelective, sp).per_layer,
            te_none - 16'384 * kT - (2 * 1536 + 2 * 512 + 2 * 4) * (kT / 8) + 2 * 64 * kT);
  // Without SP nothing is added: k_pos_emb is a view of the kv_combined the norm keeps anyway.
  const ParallelLayout tp8{.tp = 8};
  EXPECT_EQ(totals(megatron(with({}, kRecomputeMlaUpProj)), Recompute::kSelective, tp8).per_layer,
            totals(megatron({}), Recompute::kNone, tp8).per_layer - 16'384 * kT);
}

TEST(MegatronMla, TeContextParallelRingBufferOutlivesMlaUpProj) {
  // TE spec, cp 2: each rank runs s/cp = 2048 tokens; AttnFuncWithCPAndKVP2P (TE
  // context_parallel.py l.1690, l.2087-2142) keeps q, the last received k|v ring buffer (the bytes
  // of key and value, 2·128·(192+128) = 81,920 per token, in a storage of its own), out [.., dv],
  // softmax_lse and one rng_state per ring step (16·cp).
  const ParallelLayout cp{.cp = 2};
  EXPECT_EQ(totals(megatron(kTe), Recompute::kNone, cp).per_layer, kLocalPerToken * (kT / 2) + 32);
  // mla_up_proj frees query, key and value, but the ring buffer holding key's and value's bytes
  // stays: only query's 2·128·192 = 49,152 per token go (131,072 without CP), with the fused
  // norms' ln_out and rsigma (4,096 + 8).
  EXPECT_EQ(totals(megatron(with(kTe, kRecomputeMlaUpProj)), Recompute::kSelective, cp).per_layer,
            (kLocalPerToken - 49'152 - 4'096 - 8) * (kT / 2) + 32);
  // core_attn: the checkpoint keeps query, key, value (its inputs: key's and value's bytes, as the
  // ring buffer's it replaces); softmax_lse (4·128 per token) and the rng_states go; linear_proj
  // keeps out.
  EXPECT_EQ(totals(megatron(kTe), Recompute::kSelective, cp).per_layer,
            (kLocalPerToken - 4 * 128) * (kT / 2));
}

TEST(MegatronMla, NoRopeFusionKeepsCosSinPerCall) {
  // --no-rope-fusion (multi_latent_attention.py l.920-981; rope_utils.py _apply_rotary_pos_emb_bshd
  // l.143-144): the q and k RoPE calls each keep cos_ and sin_ (s, 1, 1, dr) in bf16: 4·2·4096·64 =
  // 2,097,152 bytes per layer more, query, key and value unchanged (value.contiguous() is a copy of
  // the same [s, b, n, dv] bytes as the fused kernel's new value).
  MegatronOptions unfused;
  unfused.no_rope_fusion = true;
  EXPECT_EQ(totals(megatron(unfused)).per_layer, kLocalPerToken * kT + 4 * 2 * kT * 64);
  MegatronOptions te_unfused = kTe;
  te_unfused.no_rope_fusion = true;
  EXPECT_EQ(totals(megatron(te_unfused)).per_layer, kLocalPerToken * kT + 16 + 4 * 2 * kT * 64);
  // mla_up_proj runs the RoPE without grad: nothing more kept than fused.
  EXPECT_EQ(totals(megatron(with(unfused, kRecomputeMlaUpProj)), Recompute::kSelective).per_layer,
            (kLocalPerToken - 131'072) * kT);
  // Standard attention: refused (not modeled), field named.
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron.no_rope_fusion = true;
  auto llama = prepare(load_model("llama-3.1-8b").value(), w);
  ASSERT_FALSE(llama.has_value());
  EXPECT_EQ(llama.error().field, "no_rope_fusion");
}

TEST(MegatronMla, MlaUpProjNeedsMla) {
  Workload w;
  w.framework = Framework::kMegatron;
  w.megatron.recompute_modules = kRecomputeMlaUpProj;
  auto llama = prepare(load_model("llama-3.1-8b").value(), w);
  ASSERT_FALSE(llama.has_value());
  EXPECT_EQ(llama.error().field, "recompute_modules");
  EXPECT_NE(llama.error().message.find("mla_up_proj"), std::string::npos);
}

}  // namespace
}  // namespace actmem
