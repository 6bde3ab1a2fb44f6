// --packed-docs: hand-computed for Llama-3-8B (a 32 query heads, kv 8, d 128, 32 layers, bf16), from
// the transformers source (masking_utils.py create_causal_mask / sdpa_mask / find_packed_sequence_indices,
// modeling_flash_attention_utils.py _is_packed_sequence / prepare_fa_kwargs_from_position_ids,
// integrations/sdpa_attention.py use_gqa_in_sdpa; 4.57 and 5) and torch's SDPA (attention.cpp
// convert_boolean_attn_mask, the memory-efficient kernel's saved attn_bias); measured on torch 1.13 by
// validation/packed_validation.py.
#include <gtest/gtest.h>

#include "api/library.h"
#include "model/hf_config.h"
#include "policies/option_table.h"
#include "policies/packed_docs.h"

namespace actmem {
namespace {

constexpr int64_t kHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kHeadDim = 128;
constexpr int64_t kLayers = 32;

Totals llama(Workload w, Layout l) {
  auto p = prepare(load_model("llama-3-8b").value(), w);
  Totals t;
  EXPECT_TRUE(evaluate(p.value(), l, t)) << t.error_field;
  return t;
}

Workload with(AttentionImpl attention, int64_t docs) {
  Workload w;
  w.attention = attention;
  w.packed_docs = docs;
  return w;
}

std::string refusal(const ModelSpec& m, Workload w, Layout l) {
  auto p = prepare(m, w);
  if (!p) return p.error().message;
  auto r = explain(*p, l);
  return r ? std::string("accepted") : r.error().message;
}

// flash_attention_2 at batch 1: flash_attn_varlen_func saves each layer's int32 cu_seqlens, N + 1
// entries (cu_seq_lens_k is the same tensor): 4·9 = 36 bytes a layer for 8 documents. q, k, v, out
// and the logsumexp are the unpacked sizes; cos/sin at b = 1 are (1, s, d) as before.
TEST(PackedDocs, FlashAddsTheCuSeqlensOfEachLayer) {
  const Layout l{.seq_len = 8192};
  const Totals plain = llama(with(AttentionImpl::kFlash, 0), l);
  const Totals packed = llama(with(AttentionImpl::kFlash, 8), l);
  EXPECT_EQ(packed.per_layer - plain.per_layer, 4 * (8 + 1));
  EXPECT_EQ(packed.activations_total - plain.activations_total, kLayers * 4 * (8 + 1));
}

// Under full recomputation a layer keeps its input only, and the checkpoint keeps the collator's
// (b, s) int64 position_ids, passed to every layer beside cache_position: 8·s·b.
TEST(PackedDocs, FullRecomputationKeepsThePackedPositionIds) {
  const Layout l{.seq_len = 8192, .recompute = Recompute::kFull};
  const Totals plain = llama(with(AttentionImpl::kFlash, 0), l);
  const Totals packed = llama(with(AttentionImpl::kFlash, 8), l);
  EXPECT_EQ(packed.per_layer, plain.per_layer);
  EXPECT_EQ(packed.activations_total - plain.activations_total, 8 * 8192);
}

// eager at b = 2: the (b, 1, s, s) additive mask keeps its shape; RoPE's cos and sin, computed from
// (b, s) position ids, become (b, s, d): 2 tables · 2 bytes · s·d more for the second row.
TEST(PackedDocs, EagerChangesOnlyCosSinAndPositionIds) {
  const int64_t s = 4096;
  const int64_t cos_sin_extra = 2 * 2 * s * kHeadDim * (2 - 1);  // 2,097,152
  Layout l{.seq_len = s, .micro_batch = 2};
  Totals plain = llama(with(AttentionImpl::kEager, 0), l);
  Totals packed = llama(with(AttentionImpl::kEager, 4), l);
  EXPECT_EQ(packed.per_layer, plain.per_layer);
  EXPECT_EQ(packed.activations_total - plain.activations_total, cos_sin_extra);
  l.recompute = Recompute::kFull;
  plain = llama(with(AttentionImpl::kEager, 0), l);
  packed = llama(with(AttentionImpl::kEager, 4), l);
  EXPECT_EQ(packed.activations_total - plain.activations_total, cos_sin_extra + 8 * s * 2);
}

// sdpa at b = 2: with the mask, k and v are repeated to all 32 heads (use_gqa_in_sdpa is False) and
// the memory-efficient kernel saves the repeated copies instead of the 8-head k and v, plus the bool
// mask converted to a bf16 bias, 2·b·s² per layer. The (b, 1, s, s) bool mask itself is kept only
// by the checkpoints of full recomputation: b·s².
TEST(PackedDocs, SdpaKeepsABiasPerLayerAndRepeatedKv) {
  const int64_t s = 4096;
  const int64_t b = 2;
  const int64_t bias = 2 * b * s * s;                                     // 67,108,864
  const int64_t repeat = 2 * (kHeads - kKvHeads) * kHeadDim * s * b * 2;  // k and v: 100,663,296
  const int64_t cos_sin_extra = 2 * 2 * s * kHeadDim * (b - 1);
  Layout l{.seq_len = s, .micro_batch = b};
  Totals plain = llama(with(AttentionImpl::kSdpa, 0), l);
  Totals packed = llama(with(AttentionImpl::kSdpa, 4), l);
  EXPECT_EQ(packed.per_layer - plain.per_layer, bias + repeat);
  EXPECT_EQ(packed.activations_total - plain.activations_total, kLayers * (bias + repeat) + cos_sin_extra);
  l.recompute = Recompute::kFull;
  plain = llama(with(AttentionImpl::kSdpa, 0), l);
  packed = llama(with(AttentionImpl::kSdpa, 4), l);
  EXPECT_EQ(packed.per_layer, plain.per_layer);
  EXPECT_EQ(packed.activations_total - plain.activations_total, b * s * s + 8 * s * b + cos_sin_extra);
}

// Attention FLOPs: the varlen kernel computes each document's square, 2·b·a·s·(s/N)·(d_qk + d_v)
// per layer instead of 2·b·a·s²·(d_qk + d_v); sdpa and eager compute the whole masked square.
TEST(PackedDocs, FlashAttentionFlopsArePerDocument) {
  const Layout l{.seq_len = 8192};
  const double core = 2.0 * kHeads * 8192.0 * 8192.0 * (2 * kHeadDim);  // one layer, b = 1
  const Totals plain = llama(with(AttentionImpl::kFlash, 0), l);
  const Totals packed = llama(with(AttentionImpl::kFlash, 8), l);
  EXPECT_DOUBLE_EQ(plain.forward_flops - packed.forward_flops, kLayers * core * 7.0 / 8.0);
  const Totals eager = llama(with(AttentionImpl::kEager, 0), l);
  const Totals eager_packed = llama(with(AttentionImpl::kEager, 8), l);
  EXPECT_DOUBLE_EQ(eager_packed.forward_flops, eager.forward_flops);
  EXPECT_DOUBLE_EQ(packed_attention_keys(with(AttentionImpl::kFlash, 8), 8192, 4096), 1024.0);
  EXPECT_DOUBLE_EQ(packed_attention_keys(with(AttentionImpl::kFlash, 2), 8192, 1000), 1000.0);
}

TEST(PackedDocs, RefusedWhereItDoesNotApply) {
  const ModelSpec llama = load_model("llama-3-8b").value();
  const Layout l{.seq_len = 4096};
  // flash packs only at batch 1 (_is_packed_sequence): the message names the fix
  EXPECT_EQ(refusal(llama, with(AttentionImpl::kFlash, 4), {.seq_len = 4096, .micro_batch = 2}),
            "@packed_docs with @attention flash needs @micro_batch 1: transformers sends packed rows to "
            "flash_attn_varlen_func only at batch 1 (_is_packed_sequence), and at 2 its documents would attend to "
            "each other; pack the micro-batch into one row (DataCollatorWithFlattening does) with @seq_len 8192");
  EXPECT_EQ(refusal(llama, with(AttentionImpl::kFlash, 1), l),
            "@packed_docs 1 is out of range; use 2..4096 (documents per row of @seq_len 4096 tokens), or 0 for "
            "unpacked rows");
  EXPECT_NE(refusal(llama, with(AttentionImpl::kFlash, 4097), l).find("out of range"), std::string::npos);
  Workload megatron = with(AttentionImpl::kFlash, 4);
  megatron.framework = Framework::kMegatron;
  EXPECT_NE(refusal(llama, megatron, l).find("@framework hf"), std::string::npos);
  Workload old = with(AttentionImpl::kEager, 4);
  old.hf_version = HfVersion::k4_44;
  EXPECT_NE(refusal(llama, old, l).find("@hf_version 4.57 or 5"), std::string::npos);
  EXPECT_NE(refusal(load_model("gpt2").value(), with(AttentionImpl::kEager, 4), l).find("RoPE decoders"),
            std::string::npos);
  const auto bert = parse_hf_config(R"({"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 1000, "max_position_embeddings": 512,
      "architectures": ["BertForMaskedLM"]})", "bert");
  ASSERT_TRUE(bert) << bert.error().message;
  EXPECT_NE(refusal(*bert, with(AttentionImpl::kSdpa, 2), {.seq_len = 128}).find("encoders"), std::string::npos);
  EXPECT_EQ(refusal(llama, with(AttentionImpl::kEager, 4), {.seq_len = 4096, .micro_batch = 2}), "accepted");
}

TEST(PackedDocs, AnOptionOfTheSharedTable) {
  TrainingSettings s;
  ASSERT_TRUE(set_training_option(s, "packed_docs", int64_t{6}));
  EXPECT_EQ(s.workload.packed_docs, 6);
}

TEST(PackedDocs, ExplainSaysWhatPackingChanged) {
  auto p = prepare(load_model("llama-3-8b").value(), with(AttentionImpl::kFlash, 8));
  const Report r = explain(p.value(), {.seq_len = 8192}).value();
  bool varlen = false;
  for (const auto& n : r.estimate.notes) varlen |= n.find("cu_seqlens (8 + 1 entries") != std::string::npos;
  EXPECT_TRUE(varlen);
}

}  // namespace
}  // namespace actmem
