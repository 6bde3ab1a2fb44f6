// Published single-GPU fine-tuning memory figures, reproduced from their stated settings
// (validation/notes/published-finetune.md has each source, its commit, the quoted row and the
// reading of the framework code behind every term named here; README "Published fine-tuning
// figures" has the table).
//
// Each test names its source, quotes the figure, describes the run with the options the CLI takes
// (option_table.h: --seq-len is seq_len, ...), and asserts actmem's number against it like for like:
// the metric the source measured (torch.cuda.max_memory_allocated, or the allocator's
// active_bytes.all.peak: both allocated-like, neither includes the CUDA context or allocator
// slack, so --reserve stays 0), plus only the differences read from the framework's source,
// each computed here by its formula, never fitted. The tolerance of each row is justified beside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/library.h"
#include "policies/option_table.h"

namespace actmem {
namespace {

constexpr double kGB = 1e9;                         // LitGPT prints max_memory_allocated() / 1e9 "GB"
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;   // torchtune prints bytes / 1024**3 "GiB"

using Options = std::vector<std::pair<std::string_view, OptionValue>>;

// The totals `actmem estimate --model MODEL --OPTION VALUE ...` prints (evaluate(), one GPU).
Totals estimate(const std::string& model, const Options& options) {
  TrainingSettings settings;
  for (const auto& [name, value] : options) {
    auto set = set_training_option(settings, name, value);
    EXPECT_TRUE(set) << name << ": " << (set ? "" : set.error().message);
  }
  auto loaded = load_model(model);
  EXPECT_TRUE(loaded) << model;
  auto prepared = prepare(loaded.value(), settings.workload);
  EXPECT_TRUE(prepared) << (prepared ? "" : prepared.error().message);
  Totals totals;
  EXPECT_TRUE(evaluate(prepared.value(), settings.layout, totals)) << totals.error_field;
  return totals;
}

// ---------------------------------------------------------------------------------------------
// LitGPT, tutorials/resource-tables.md ("Finetuning with LoRA on 1 GPU"; lit-gpt commit 8641822,
// A100-SXM4-40GB, PyTorch 2.1.0, bitsandbytes 0.41.1). `litgpt finetune_lora` at that commit:
// --precision bf16-true (weights, adapters, gradients and AdamW state in bf16), LoRA r 8 on query
// and value (4,194,304 trainable parameters for Llama 2 7B = 32 · 8 · 2 · 2 · 4096, as the table
// states), lora_dropout 0.05, no activation checkpointing, the first iteration forced onto the
// longest Alpaca example (1304 tokens with the Llama 2 tokenizer, the table's header), the LM head
// run in 128-token chunks with a bf16 cross-entropy per chunk (modelled as --loss chunked:11:
// ⌈1304/128⌉ chunks), metric torch.cuda.max_memory_allocated() / 1e9.
// With --quantize bnb.nf4[-dq]: Lightning's BitsandbytesPrecision replaces every nn.Linear, the
// LM head included, by a bitsandbytes Linear4bit; the optimizer is bnb.optim.PagedAdamW.
// ---------------------------------------------------------------------------------------------

Options litgpt_lora(int64_t micro_batch) {
  return {{"seq_len", int64_t{1304}},      {"micro_batch", micro_batch},
          {"attention", std::string{"flash"}}, {"precision", std::string{"pure"}},
          {"lora_rank", int64_t{8}},       {"lora_targets", std::string{"q,v"}},
          {"lora_dropout", 0.05},          {"adapter_dtype", std::string{"bf16"}},
          {"loss", std::string{"chunked:11"}}};
}

Options litgpt_qlora(bool double_quant) {
  Options o = litgpt_lora(1);
  o.emplace_back("base_weight_dtype", std::string{"nf4"});
  o.emplace_back("optimizer", std::string{"paged-adamw"});
  if (double_quant) o.emplace_back("double_quant", true);
  return o;
}

struct LlamaDims {
  int64_t layers, hidden, ffn, vocab;
};
constexpr LlamaDims kLlama2_7B{32, 4096, 11008, 32000};
constexpr LlamaDims kLlama2_13B{40, 5120, 13824, 32000};
constexpr int64_t kLitgptSeq = 1304;

// Differences of lit-gpt + bitsandbytes 4-bit from actmem's rules (PEFT over transformers), read
// from the source; each is a formula in the model's dimensions.
//
// (1) bitsandbytes before 0.43.2 (these runs: 0.41.1): MatMul4Bit.forward (bitsandbytes/autograd/
// _functions.py) keeps its input A (`ctx.tensors = (A, B)`) whenever A requires grad, although the
// frozen 4-bit weight needs no A. bitsandbytes PR #1270 (commit 9e75374, July 2024, first in 0.43.2)
// changed it to `ctx.tensors = (None, B)`: actmem's QLoRA rule follows that current code, so this
// term is added here for the old release only:
// per layer the attention input (not in layer 0, whose input comes from the frozen embedding),
// the attention output going into proj, the MLP input (fc_1 and fc_2 share it) and the MLP product
// going into proj (f wide), plus the final norm's output going into the 4-bit LM head:
// 2·s·b·(L·(3h + f)) bytes in bf16.
int64_t bnb_saved_inputs(const LlamaDims& m, int64_t s, int64_t b) {
  return 2 * s * b * m.layers * (3 * m.hidden + m.ffn);
}

// (2) The LM head is 4-bit in lit-gpt (every nn.Linear), bf16 in actmem (transformers'
// llm_int8_skip_modules): V·h weights fewer bytes: 2 − 1/2 per weight less the block scales.
int64_t lm_head_4bit_saving(const LlamaDims& m, bool double_quant) {
  const int64_t n = m.vocab * m.hidden;
  const int64_t blocks = n / 64;  // V·h is a multiple of 64 for both models
  const int64_t scales = double_quant ? blocks + 4 * ((blocks + 255) / 256) + 4 : 4 * blocks;
  return 2 * n - (n / 2 + scales);
}

// (3) ... and dequantizes its whole V×h weight in bf16 for every 128-token chunk: a transient of
// 2·V·h bytes at the end of the forward, where every activation is still held. It replaces
// actmem's largest transient when it is larger.
int64_t lm_head_dequant_extra(const LlamaDims& m, const Totals& t) {
  return std::max<int64_t>(0, 2 * m.vocab * m.hidden - t.transient);
}

// bf16 rows. Tolerance: actmem may be up to 8 % below the figure, never above. Read from the
// source (and counted on torch 1.13 by validation/notes/litgpt_8641822_layer.py), lit-gpt's layer
// keeps +1·s·b·h bytes more than transformers' + PEFT's: its bf16 RMSNorm keeps x in bf16, not
// fp32 (−2·s·b·h, twice); v is a view of the fused qkv output, so attention keeps all of it
// (+4·s·b·h); one LoRA dropout on the shared qkv input instead of PEFT's two (−3·s·b·h); zero_pad's
// index_copy keeps its source, the q and v LoRA outputs (+4·s·b·h). The figures lie 5.7·s·b·h per
// layer above actmem, in both models and at both batch sizes (7B b 1: 0.98 GB, b 2: 1.94 GB; 13B:
// 1.53 GB): ≈ 4.7·s·b·h per layer is not identified. 8 % bounds it with the 2-decimal rounding, and
// a change to actmem's LoRA or Llama rules moves these rows out of the band.
void expect_litgpt_bf16(double published_gb, const Totals& t) {
  const double published = published_gb * kGB;
  EXPECT_LE(t.total, published + 0.005 * kGB) << "actmem above the measured peak";
  EXPECT_GE(t.total, 0.92 * published) << "actmem more than 8 % below";
}

TEST(PublishedFinetune, LitgptLlama2With7BLoraMicroBatch1) {
  // | 7 B | Llama 2 | None | 1 | 4,194,304 | 21.30 GB | 2.36 min |
  const Totals t = estimate("llama-2-7b", litgpt_lora(1));
  EXPECT_EQ(t.total, 20'321'160'480);  // 13,485,219,840 weights + 6,712,214,816 saved + 98,560,000 loss chunk + 25 MB adapters' grads and state
  expect_litgpt_bf16(21.30, t);
}

TEST(PublishedFinetune, LitgptLlama2With7BLoraMicroBatch2) {
  // | 7 B | Llama 2 | None | 2 | 4,194,304 | 29.07 GB | 2.52 min |
  const Totals t = estimate("llama-2-7b", litgpt_lora(2));
  expect_litgpt_bf16(29.07, t);
  // Per sequence: 29.07 − 21.30 = 7.77 GB measured, actmem 6.81 GB: the unidentified term scales
  // with b, so it is saved per token, not a fixed buffer.
  const Totals one = estimate("llama-2-7b", litgpt_lora(1));
  EXPECT_NEAR((t.total - one.total) / kGB, 6.81, 0.01);
}

TEST(PublishedFinetune, LitgptLlama2With13BLoraMicroBatch1) {
  // | 13 B | Llama 2 | None | 1 | 6,553,600 | 38.12 GB | 3.19 min |
  const Totals t = estimate("llama-2-13b", litgpt_lora(1));
  expect_litgpt_bf16(38.12, t);
}

// 4-bit rows: actmem + the three bitsandbytes/lit-gpt terms above, then the same band as the bf16
// rows widened by 3 %: after those terms the nf4 rows still lie 0.4 GB (7B) further below than the
// bf16 rows, unidentified as well.
void expect_litgpt_nf4(double published_gb, const LlamaDims& m, bool double_quant, const Totals& t) {
  const double published = published_gb * kGB;
  const int64_t explained = bnb_saved_inputs(m, kLitgptSeq, 1) - lm_head_4bit_saving(m, double_quant) +
                            lm_head_dequant_extra(m, t);
  const double like_for_like = static_cast<double>(t.total + explained);
  EXPECT_LE(like_for_like, published + 0.005 * kGB);
  EXPECT_GE(like_for_like, 0.89 * published);
  // Without the bitsandbytes terms actmem is about a fifth low: say so if that ever changes.
  EXPECT_LT(t.total, 0.80 * published);
}

TEST(PublishedFinetune, LitgptLlama2With7BQloraNf4) {
  // | 7 B | Llama 2 | bnb.nf4 | 1 | 4,194,304 | 14.14 GB | 3.68 min |
  const Totals t = estimate("llama-2-7b", litgpt_qlora(false));
  EXPECT_EQ(bnb_saved_inputs(kLlama2_7B, kLitgptSeq, 1), 1'944'190'976);  // 2·1304·32·(3·4096 + 11008)
  expect_litgpt_nf4(14.14, kLlama2_7B, false, t);
}

TEST(PublishedFinetune, LitgptLlama2With7BQloraNf4DoubleQuant) {
  // | 7 B | Llama 2 | bnb.nf4-dq | 1 | 4,194,304 | 13.84 GB | 3.83 min |
  const Totals t = estimate("llama-2-7b", litgpt_qlora(true));
  expect_litgpt_nf4(13.84, kLlama2_7B, true, t);
}

TEST(PublishedFinetune, LitgptLlama2With13BQloraNf4) {
  // | 13 B | Llama 2 | bnb.nf4 | 1 | 6,553,600 | 23.14 GB | 6.38 min |
  const Totals t = estimate("llama-2-13b", litgpt_qlora(false));
  expect_litgpt_nf4(23.14, kLlama2_13B, false, t);
}

TEST(PublishedFinetune, LitgptLlama2With13BQloraNf4DoubleQuant) {
  // | 13 B | Llama 2 | bnb.nf4-dq | 1 | 6,553,600 | 22.55 GB | 6.55 min |
  const Totals t = estimate("llama-2-13b", litgpt_qlora(true));
  expect_litgpt_nf4(22.55, kLlama2_13B, true, t);
}

// Like for like without any unidentified term: two rows that differ only in double quantization
// differ only in the block scales' storage (bitsandbytes quantize_4bit, compress_statistics: 8-bit
// absmax per 64 weights + an fp32 scale per 256 absmax, instead of an fp32 absmax per 64). Measured:
// 14.14 − 13.84 = 0.30 GB (7B), 23.14 − 22.55 = 0.59 GB (13B), each ±0.01 from the rounding.
TEST(PublishedFinetune, LitgptDoubleQuantSavesExactlyTheScales) {
  for (const auto& [model, dims, measured] : {std::tuple{"llama-2-7b", kLlama2_7B, 14.14 - 13.84},
                                              std::tuple{"llama-2-13b", kLlama2_13B, 23.14 - 22.55}}) {
    const Totals nf4 = estimate(model, litgpt_qlora(false));
    const Totals dq = estimate(model, litgpt_qlora(true));
    // The LM head's scales too: lit-gpt quantizes it, actmem's bf16 head has none.
    const int64_t head = lm_head_4bit_saving(dims, true) - lm_head_4bit_saving(dims, false);
    EXPECT_NEAR((nf4.total - dq.total + head) / kGB, measured, 0.0101) << model;
  }
}

// Like for like: a bf16 row minus its nf4 row is the weights' storage and what bitsandbytes adds
// (the terms above): actmem's difference, so corrected, within 4 % of the measured one (7.16 GB and
// 14.98 GB; the unidentified per-layer term cancels here, the 0.4 GB nf4 remainder does not).
TEST(PublishedFinetune, LitgptBf16MinusNf4IsTheWeightsAndBitsandbytes) {
  for (const auto& [model, dims, measured] : {std::tuple{"llama-2-7b", kLlama2_7B, 21.30 - 14.14},
                                              std::tuple{"llama-2-13b", kLlama2_13B, 38.12 - 23.14}}) {
    const Totals bf16 = estimate(model, litgpt_lora(1));
    const Totals nf4 = estimate(model, litgpt_qlora(false));
    const int64_t explained = bnb_saved_inputs(dims, kLitgptSeq, 1) - lm_head_4bit_saving(dims, false) +
                              lm_head_dequant_extra(dims, nf4);
    const double actmem_difference = (bf16.total - (nf4.total + explained)) / kGB;
    EXPECT_NEAR(actmem_difference, measured, 0.04 * measured) << model;
  }
}

// ---------------------------------------------------------------------------------------------
// torchtune README, "Optimization flags" (commit 1814feb, "add flags to readme (#2003)"): Llama 3.2
// 3B, full_finetune_single_device, batch size 2, max sequence length 4096, bf16, A100, metric
// "Peak Memory Active (GiB)" = memory_stats()["active_bytes.all.peak"] / 1024**3
// (torchtune/training/memory.py). The row "+ Packed Dataset" is the baseline (no compile, no
// activation checkpointing, torch.nn.CrossEntropyLoss, torch.optim.AdamW, no optimizer in
// backward) with every sequence packed to 4096: | + Packed Dataset | 60.0 | +135.16% | 7075 | ...
// The later rows all have compile=True, which actmem does not model (README table).
// ---------------------------------------------------------------------------------------------
TEST(PublishedFinetune, TorchtuneLlama32With3BFullPacked) {
  const std::string model = std::string{ACTMEM_SOURCE_DIR} + "/tests/data/published/llama-3.2-3b.json";
  // torchtune returns fp32 logits (`self.output(h).float()`, the bf16 ones are a temporary) and the
  // recipe deletes them before backward (`del logits`): the loss holds what torchtune's chunked
  // loss with one chunk holds, chunked:1 (saved fp32 log-softmax 4·s·b·V, backward transient
  // 8·s·b·V), not transformers' 10·s·b·V with its bf16 logits still referenced.
  const Totals t = estimate(model, {{"seq_len", int64_t{4096}},
                                    {"micro_batch", int64_t{2}},
                                    {"attention", std::string{"flash"}},
                                    {"precision", std::string{"pure"}},
                                    {"loss", std::string{"chunked:1"}}});
  EXPECT_EQ(t.transient, int64_t{8} * 4096 * 2 * 128256);
  // meta-llama/Llama-3.2-3B's config.json (tests/data/published/SOURCES.md): 3.21 B parameters,
  // the tied embedding counted once; pure-bf16 AdamW holds 2 + 2 + 2 + 2 bytes of each.
  EXPECT_EQ(t.weights, int64_t{2} * 3'212'749'824);
  EXPECT_EQ(t.optimizer, int64_t{4} * 3'212'749'824);
  // (1) The peak is in the loss backward, before any parameter has a gradient: torchtune's
  // zero_grad(set_to_none=True) frees them after every step, and the first gradient (the tied
  // embedding's, in the LM head's backward) comes after the peak. actmem counts the gradients as a
  // persistent buffer (its note says so): subtract them.
  // (2) torchtune's MultiHeadAttention expands k and v to all query heads before attention
  // (`k.unsqueeze(2).expand(...).flatten(1, 2)`, a copy) and attention keeps the expanded copies:
  // 2 · 2·s·b·(a − kv)·d per layer more than transformers' flash path keeps.
  const int64_t layers = 28, heads = 24, kv_heads = 8, head_dim = 128, s = 4096, b = 2;
  const int64_t expanded_kv = layers * 2 * 2 * s * b * (heads - kv_heads) * head_dim;
  EXPECT_EQ(expanded_kv, 1'879'048'192);
  const double like_for_like = static_cast<double>(t.total - t.gradients + expanded_kv);
  // 59.66 GiB against 60.0. Tolerance 2 %: the published figure is rounded to 0.1 GiB (0.08 %), and
  // torchtune's model differs from transformers' in tensors below 1 % of the total (RoPE keeps its
  // fp32 cache slice, not cos and sin in bf16; the packed batch's flex-attention block mask).
  EXPECT_NEAR(like_for_like / kGiB, 60.0, 0.02 * 60.0);
  // Without (1) and (2) actmem is 6.5 % above: the gradient term is the reason.
  EXPECT_NEAR(t.total / kGiB, 63.89, 0.01);
}


// torchtune docs/source/tutorials/e2e_flow.rst (commit 0cd8bc4, 2024-12-20): `tune run
// lora_finetune_single_device --config llama3_2/3B_lora_single_device`, whose log prints
// "Memory stats after model init: / GPU peak memory allocation: 6.21 GiB / GPU peak memory
// reserved: 6.27 GiB / GPU peak memory active: 6.21 GiB". The config: LoRA rank 64 on q_proj,
// v_proj, output_proj and the MLP (apply_lora_to_mlp), the model built in bf16 on the GPU
// (`training.set_default_dtype(bf16), device`), adapters bf16. Allocated after init = the weights
// term, plus the one buffer torchtune keeps that transformers does not: Llama3ScaledRoPE's cache,
// cos and sin for every position up to max_seq_len 131072, fp32 (torchtune/models/llama3_1/
// _position_embeddings.py, one module shared by all layers): 131072 · 64 · 2 · 4 B.
TEST(PublishedFinetune, TorchtuneLlama32With3BLoraAfterModelInit) {
  const std::string model = std::string{ACTMEM_SOURCE_DIR} + "/tests/data/published/llama-3.2-3b.json";
  const Totals t = estimate(model, {{"seq_len", int64_t{2048}},
                                    {"precision", std::string{"pure"}},
                                    {"lora_rank", int64_t{64}},
                                    {"lora_targets", std::string{"q,v,o,gate,up,down"}},
                                    {"adapter_dtype", std::string{"bf16"}}});
  // 3,212,749,824 frozen + 28 · 64 · ((3072 + 3072) + (3072 + 1024) + (3072 + 3072) + 3 · (3072 + 8192))
  // = 89,915,392 adapter parameters, all bf16.
  EXPECT_EQ(t.weights, 2 * (int64_t{3'212'749'824} + 28 * 64 * (6144 + 4096 + 6144 + 3 * 11264)));
  const int64_t rope_cache = int64_t{131072} * 64 * 2 * 4;
  // 6.2142 GiB: the published 6.21 to its rounding (±0.005 GiB); the reserved 6.27 GiB adds the
  // caching allocator's slack, which actmem's --gpu verdict allows for as a fraction of the peak.
  EXPECT_NEAR((t.weights + rope_cache) / kGiB, 6.21, 0.005);
}

}  // namespace
}  // namespace actmem
