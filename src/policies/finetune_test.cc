#include "policies/finetune.h"

#include <gtest/gtest.h>

#include "api/library.h"
#include "model/presets.h"
#include "policies/layout_checks.h"

namespace actmem {
namespace {

// Llama-3-8B (huggingface.co/meta-llama/Meta-Llama-3-8B config.json): h 4096, f 14336, 32 layers,
// 32 heads, 8 KV heads of 128, V 128256, untied head. Per layer: q, o 4096×4096; k, v 1024×4096;
// gate, up 14336×4096; down 4096×14336.
std::vector<WeightTensor> llama_3_8b() { return weight_tensors(load_model("llama-3-8b").value()); }

Workload lora_all(int64_t rank) {
  Workload w;
  w.lora.rank = rank;
  w.lora.targets = kLoraAll;
  return w;
}

TEST(Finetune, ParsesLoraTargets) {
  EXPECT_EQ(parse_lora_targets("q,v").value(), kLoraQ | kLoraV);
  EXPECT_EQ(parse_lora_targets("all").value(), unsigned{kLoraAll});
  EXPECT_EQ(parse_lora_targets("q_proj,down").value(), kLoraQ | kLoraDown);  // PEFT's module names too
  EXPECT_EQ(lora_targets_name(kLoraAll), "q,k,v,o,gate,up,down");
  auto bad = parse_lora_targets("q,mlp");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "lora_targets");
  EXPECT_NE(bad.error().message.find("'mlp'"), std::string::npos);
}

// Trainable parameters per layer = r·(in + out) over q, k, v, o, gate, up, down:
// 16·(8192 + 5120 + 5120 + 8192 + 18432 + 18432 + 18432) = 1,310,720; × 32 layers = 41,943,040,
// what PEFT's print_trainable_parameters() prints for this model ("trainable params: 41,943,040 ||
// all params: 8,072,204,288").
TEST(Finetune, LoraAdapterParamsLlama3_8B) {
  const auto s = finetune_static(llama_3_8b(), lora_all(16), 1);
  EXPECT_EQ(s.adapter_params, 41'943'040);
  EXPECT_EQ(s.trainable, 41'943'040);
  EXPECT_EQ(s.frozen, 8'030'261'248);
  EXPECT_EQ(s.frozen + s.trainable, 8'072'204'288);
  // q and v only (PEFT's default for Llama): 16·(8192 + 5120)·32 = 6,815,744.
  Workload qv = lora_all(16);
  qv.lora.targets = kLoraQ | kLoraV;
  EXPECT_EQ(finetune_static(llama_3_8b(), qv, 1).adapter_params, 6'815'744);
}

// bitsandbytes storage of one matrix (functional.quantize_4bit, Int8Params).
TEST(Finetune, BaseMatrixBytes) {
  // q_proj 4096×4096 = 16,777,216 weights: nf4 codes n/2 = 8,388,608; 262,144 blocks of 64.
  EXPECT_EQ(base_matrix_bytes(4096, 4096, BaseWeights::kNF4, false), 8'388'608 + 4 * 262'144);
  // double quant: 262,144 uint8 absmax + 4·⌈262,144/256⌉ = 4096 + the fp32 offset 4.
  EXPECT_EQ(base_matrix_bytes(4096, 4096, BaseWeights::kNF4, true), 8'388'608 + 262'144 + 4096 + 4);
  // int8: CB n bytes + SCB 4 per output row.
  EXPECT_EQ(base_matrix_bytes(1024, 4096, BaseWeights::kInt8, false), 4'194'304 + 4 * 1024);
  EXPECT_EQ(base_matrix_bytes(3, 5, BaseWeights::kNF4, false), 8 + 4);  // ⌈15/2⌉, one partial block
  EXPECT_EQ(base_matrix_bytes(10, 10, BaseWeights::kBF16, false), 200);
}

// QLoRA of Llama-3-8B, nf4 with double quantization, r 16 on all seven projections, fp32 adapters
// (PEFT), AdamW. Linear weights: 32·218,103,808 = 6,979,321,856 → codes 3,489,660,928, uint8
// absmax 109,051,904, fp32 second-level scales per layer 4·(1024 + 256 + 256 + 1024 + 3·3584) =
// 53,248 + 7 offsets·4 = 53,276, × 32 = 1,704,832. Embedding, LM head and norms stay bf16:
// 2·(2·525,336,576 + 65·4096) = 2,101,878,784.
TEST(Finetune, QloraLlama3_8BStatic) {
  Workload w = lora_all(16);
  w.lora.base = BaseWeights::kNF4;
  w.lora.double_quant = true;
  const auto s = finetune_static(llama_3_8b(), w, 1);
  EXPECT_EQ(s.quant_scales, Bytes{109'051'904 + 1'704'832});
  EXPECT_EQ(s.frozen_weights, Bytes{3'489'660'928 + 109'051'904 + 1'704'832 + 2'101'878'784});
  EXPECT_EQ(s.trainable_weights, Bytes{4 * 41'943'040});
  EXPECT_EQ(s.gradients, Bytes{4 * 41'943'040});
  EXPECT_EQ(s.master, Bytes{0});  // fp32 adapters need no master copy
  EXPECT_EQ(s.state, Bytes{8 * 41'943'040});
  // Without double quantization: fp32 absmax, 4 bytes per 64 weights.
  w.lora.double_quant = false;
  EXPECT_EQ(finetune_static(llama_3_8b(), w, 1).quant_scales, Bytes{4 * 109'051'904});
  // bf16 adapters (torchtune) under mixed precision: fp32 master 4 + fp32 moments 8 per param.
  w.lora.adapter_dtype = DType::kBF16;
  const auto bf16 = finetune_static(llama_3_8b(), w, 1);
  EXPECT_EQ(bf16.trainable_weights, Bytes{2 * 41'943'040});
  EXPECT_EQ(bf16.master, Bytes{4 * 41'943'040});
  // ... and pure bf16: no master, bf16 moments.
  w.precision = Precision::kPure;
  const auto pure = finetune_static(llama_3_8b(), w, 1);
  EXPECT_EQ(pure.master, Bytes{0});
  EXPECT_EQ(pure.state, Bytes{4 * 41'943'040});
}

// bitsandbytes PagedAdamW8bit on the QLoRA adapters above. Per layer (A r×in, B out×r):
// q, o: A 65,536, B 65,536; k, v: A 65,536, B 16,384; gate, up: A 65,536, B 229,376;
// down: A 229,376, B 65,536. Each: 2n int8 + 2·4·⌈n/2048⌉ absmax = 2·1,310,720 + 8·640 = 2,626,560
// bytes per layer, 84,049,920 for 32. Paged (n >= 100,000): the three 229,376 tensors' int8
// state, 3·2·229,376 = 1,376,256 per layer, 44,040,192 in all.
TEST(Finetune, PagedAdamW8bitOnAdapters) {
  Workload w = lora_all(16);
  w.optimizer = Optimizer::kPagedAdamW8bit;
  const auto s = finetune_static(llama_3_8b(), w, 1);
  EXPECT_EQ(s.state, Bytes{84'049'920});
  EXPECT_EQ(s.paged_state, Bytes{44'040'192});
  // Not paged: the same state, none of it in unified memory.
  w.optimizer = Optimizer::kAdamW8bit;
  EXPECT_EQ(finetune_static(llama_3_8b(), w, 1).paged_state, Bytes{0});
  // bnb keeps fp32 state for tensors under 4096 elements: r 1 makes k's B 1024 × 1.
  Workload tiny = lora_all(1);
  tiny.lora.targets = kLoraK;
  tiny.optimizer = Optimizer::kAdamW8bit;
  // A 1×4096 (8-bit: 2·4096 + 2·4·2) + B 1024×1 (fp32: 8·1024), 32 layers.
  EXPECT_EQ(finetune_static(llama_3_8b(), tiny, 1).state, Bytes{32 * (2 * 4096 + 16 + 8 * 1024)});
}

// transformers' Adafactor, full fine-tuning of Llama-3-8B: fp32 row + column vectors per matrix,
// a full fp32 vector per norm. Per layer (4096+4096)·2 + (1024+4096)·2 + (14336+4096)·3 + 2·4096
// = 90,112 elements; embedding and LM head 128,256 + 4096 each; final norm 4096:
// 4·(32·90,112 + 2·132,352 + 4096) = 12,609,536 bytes.
TEST(Finetune, AdafactorFactoredStateLlama3_8B) {
  Workload w;
  w.optimizer = Optimizer::kAdafactor;
  const auto s = finetune_static(llama_3_8b(), w, 1);
  EXPECT_EQ(s.state, Bytes{12'609'536});
  EXPECT_EQ(s.master, Bytes{0});
  EXPECT_EQ(s.gradients, Bytes{2 * 8'030'261'248});
}

// torchtune's optimizer_in_bwd: one gradient at a time, the largest parameter's: the embedding
// (or the untied LM head), 128,256 × 4096 in bf16.
TEST(Finetune, OptimizerInBackwardKeepsTheLargestGradient) {
  Workload w;
  w.optimizer_in_backward = true;
  const auto s = finetune_static(llama_3_8b(), w, 1);
  EXPECT_EQ(s.largest_trainable, 525'336'576);
  EXPECT_EQ(s.gradients, Bytes{2 * 525'336'576});
  // Under TP 4 each rank holds a quarter of the vocabulary rows.
  EXPECT_EQ(finetune_static(llama_3_8b(), w, 4).gradients, Bytes{2 * 525'336'576 / 4});
}

// Pure bf16 AdamW (torchtune dtype=bf16, LitGPT bf16-true): 2 + 2 + 2 + 2 = 8 bytes per parameter
// instead of mixed precision's 2 + 2 + 12 = 16. SGD: momentum only, or nothing without it.
TEST(Finetune, PurePrecisionAndSgdPerParam) {
  Workload o;
  o.precision = Precision::kPure;
  auto per = bytes_per_param(o);
  EXPECT_EQ(per.weights + per.gradients + per.optimizer, 8.0);
  o.optimizer = Optimizer::kSGD;
  EXPECT_EQ(bytes_per_param(o).optimizer, 2.0);
  o.optimizer = Optimizer::kSGDPlain;
  EXPECT_EQ(bytes_per_param(o).optimizer, 0.0);
  o.precision = Precision::kMixed;
  EXPECT_EQ(bytes_per_param(o).optimizer, 4.0);  // the fp32 master copy alone
  o.optimizer = Optimizer::kPagedAdamW;
  o.precision = Precision::kPure;
  EXPECT_EQ(bytes_per_param(o).optimizer, 8.0);  // bitsandbytes 32-bit state is fp32 regardless
}

// The whole path through prepare/evaluate/explain: QLoRA Llama-3-8B, seq 2048, full recomputation.
TEST(Finetune, EngineTotalsMatchTheRule) {
  Workload w = lora_all(16);
  w.lora.base = BaseWeights::kNF4;
  w.lora.double_quant = true;
  auto prepared = prepare(load_model("llama-3-8b").value(), w).value();
  Layout l{.seq_len = 2048, .recompute = Recompute::kFull};
  Totals t;
  ASSERT_TRUE(evaluate(prepared, l, t));
  EXPECT_EQ(t.weights, 5'702'296'448 + 167'772'160);
  EXPECT_EQ(t.gradients, 167'772'160);
  EXPECT_EQ(t.optimizer, 335'544'320);
  EXPECT_EQ(t.params_on_gpu, 8'072'204'288);
  auto report = explain(prepared, l).value();
  EXPECT_EQ(report.totals.total, t.total);
  EXPECT_EQ(report.estimate.total(), Bytes{t.total});  // the terms add up to the peak
  // ZeRO-2 over 4 GPUs shards the adapters' gradients and optimizer state.
  l.parallel.dp = 4;
  l.zero_stage = 2;
  ASSERT_TRUE(evaluate(prepared, l, t));
  EXPECT_EQ(t.gradients, 167'772'160 / 4);
  EXPECT_EQ(t.optimizer, 335'544'320 / 4);
}

// LoRA activations (PEFT lora.Linear; measured: validation/lora_validation.py), one Llama-3-8B
// layer, HF flash, bf16, r 16 on all seven, lora_dropout 0.05, T = s·b = 2048 tokens:
//   two RMSNorms, each fp32 x + fp32 rstd (the frozen weight keeps no normalized x): 8·T·h + 8·T
//   q, k, v adapters: bool mask T·h + dropped x 2·T·h + rank-r intermediate 2·T·r, each
//   flash: v 2·T·kv·d, q and k after RoPE 2·T·(a + kv)·d, output 2·T·a·d, fp32 logsumexp 4·T·a
//   o adapter: 3·T·a·d + 2·T·r; gate and up adapters: 2·(3·T·h + 2·T·r); down: 3·T·f + 2·T·r
//   SwiGLU: gate, up and act(gate) outputs, 3·2·T·f; no frozen linear keeps its input.
// Per token 256,360 bytes (the sum below, written term by term); × 2048 = 525,025,280.
TEST(Finetune, LoraActivationsPerLayerLlama3_8B) {
  Workload w = lora_all(16);
  w.lora.dropout = 0.05;
  w.lora.adapter_dtype = DType::kBF16;
  auto prepared = prepare(load_model("llama-3-8b").value(), w).value();
  Totals t;
  ASSERT_TRUE(evaluate(prepared, {.seq_len = 2048}, t));
  const int64_t h = 4096, ad = 4096, kvd = 1024, f = 14336, r = 16, a = 32;
  const int64_t per_token = (8 * h + 8) + 3 * (3 * h + 2 * r) + (2 * kvd + 2 * (ad + kvd) + 2 * ad + 4 * a) +
                            (3 * ad + 2 * r) + 2 * (3 * h + 2 * r) + (3 * f + 2 * r) + 3 * 2 * f;
  EXPECT_EQ(per_token, 256'360);
  EXPECT_EQ(t.per_layer, 2048 * per_token);
  // Without dropout each adapter keeps x itself: q, k, v share the norm's output (one storage), and
  // so do gate and up; o's input is flash's output, already kept; down keeps the SwiGLU product.
  w.lora.dropout = 0.0;
  auto no_drop = prepare(load_model("llama-3-8b").value(), w).value();
  ASSERT_TRUE(evaluate(no_drop, {.seq_len = 2048}, t));
  const int64_t per_token_p0 = (8 * h + 8) + (2 * h + 3 * 2 * r) + (2 * kvd + 2 * (ad + kvd) + 2 * ad + 4 * a) +
                               (2 * r) + (2 * h + 2 * 2 * r) + (2 * f + 2 * r) + 3 * 2 * f;
  EXPECT_EQ(t.per_layer, 2048 * per_token_p0);
}

// bitsandbytes MatMul4Bit dequantizes the whole weight to the compute dtype for each matmul: the
// largest Llama-3-8B linear is 14336 × 4096, 117,440,512 bytes in bf16; none for a 16-bit base.
TEST(Finetune, DequantizedWeightTransient) {
  Workload w = lora_all(16);
  w.lora.base = BaseWeights::kNF4;
  EXPECT_EQ(dequantized_weight_bytes(llama_3_8b(), w, 1), 2 * 14336 * 4096);
  w.lora.base = BaseWeights::kBF16;
  EXPECT_EQ(dequantized_weight_bytes(llama_3_8b(), w, 1), -1);
  // In a short sequence the logits transient is smaller and the dequantized weight is the peak's.
  w.lora.base = BaseWeights::kNF4;
  auto prepared = prepare(load_model("llama-3-8b").value(), w).value();
  auto report = explain(prepared, {.seq_len = 32}).value();
  EXPECT_EQ(report.estimate.peak_transient_key, "dequantized_weight");
  EXPECT_EQ(report.totals.transient, 2 * 14336 * 4096);
  EXPECT_EQ(report.estimate.total(), Bytes{report.totals.total});
}

// evaluate() and explain() agree on every fine-tuning workload over a grid of layouts, and the
// report's terms add up to the peak (as engine_test checks for the defaults).
TEST(Finetune, EvaluateEqualsExplainOverLayouts) {
  const auto model = load_model("llama-3-8b").value();
  std::vector<Workload> workloads;
  for (BaseWeights base : {BaseWeights::kBF16, BaseWeights::kInt8, BaseWeights::kNF4}) {
    Workload w = lora_all(8);
    w.lora.base = base;
    w.lora.dropout = 0.1;
    w.optimizer = Optimizer::kPagedAdamW8bit;
    workloads.push_back(w);
  }
  Workload ada;
  ada.optimizer = Optimizer::kAdafactor;
  ada.precision = Precision::kPure;
  workloads.push_back(ada);
  Workload bwd;
  bwd.optimizer_in_backward = true;
  bwd.precision = Precision::kPure;
  workloads.push_back(bwd);
  int checked = 0;
  for (const Workload& w : workloads) {
    const auto prepared = prepare(model, w).value();
    for (int64_t tp : {1, 2, 8})
      for (int64_t dp : {1, 4})
        for (int zero : {0, 1, 2})
          for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
            Layout l{.seq_len = 1024, .micro_batch = 2, .recompute = rc, .zero_stage = zero};
            l.parallel.tp = tp;
            l.parallel.dp = dp;
            Totals t;
            const bool ok = evaluate(prepared, l, t);
            auto report = explain(prepared, l);
            ASSERT_EQ(ok, report.has_value());
            if (!ok) {
              EXPECT_EQ(t.error_field, report.error().field);
              continue;
            }
            EXPECT_EQ(report->totals.total, t.total);
            EXPECT_EQ(report->estimate.total(), Bytes{t.total});
            ++checked;
          }
  }
  // Adafactor and the step in backward refuse ZeRO 1 and 2: 2 of 6 (tp, dp) x zero cells.
  EXPECT_EQ(checked, 3 * 36 + 2 * 12);
}

TEST(Finetune, ChecksNameTheField) {
  auto model = load_model("llama-3-8b").value();
  Workload w;
  w.lora.base = BaseWeights::kNF4;
  auto no_rank = check_options(w, {.seq_len = 2048});
  ASSERT_FALSE(no_rank);
  EXPECT_EQ(no_rank.error().field, "base_weight_dtype");
  w = lora_all(16);
  w.lora.double_quant = true;
  EXPECT_EQ(check_options(w, {.seq_len = 2048}).error().field, "double_quant");
  w = lora_all(16);
  Layout pp{.seq_len = 2048};
  pp.parallel.pp = 2;
  EXPECT_EQ(check_options(w, pp).error().field, "pp");
  Layout z3{.seq_len = 2048, .zero_stage = 3};
  z3.parallel.dp = 8;
  EXPECT_EQ(check_options(w, z3).error().field, "zero_stage");
  Workload ada;
  ada.optimizer = Optimizer::kAdafactor;
  Layout z1{.seq_len = 2048, .zero_stage = 1};
  EXPECT_EQ(check_options(ada, z1).error().field, "zero_stage");
  // Fused projections (GPT-2's c_attn) and Megatron's fused layers: not modelled, said so.
  auto gpt2 = prepare(load_model("gpt2").value(), lora_all(8)).value();
  Totals fused;
  EXPECT_FALSE(evaluate(gpt2, {.seq_len = 512}, fused));
  EXPECT_STREQ(fused.error_field, "lora_targets");
  Workload up_down = lora_all(8);
  up_down.lora.targets = kLoraO | kLoraUp | kLoraDown;
  EXPECT_TRUE(evaluate(prepare(load_model("gpt2").value(), up_down).value(), {.seq_len = 512}, fused));
  Workload megatron = lora_all(8);
  megatron.framework = Framework::kMegatron;
  EXPECT_FALSE(evaluate(prepare(model, megatron).value(), {.seq_len = 512}, fused));
  EXPECT_STREQ(fused.error_field, "framework");
  auto params_only = prepare_params_only(8'000'000'000, ada).value();
  Totals t;
  EXPECT_FALSE(evaluate(params_only, {.seq_len = 2048}, t));
  EXPECT_STREQ(t.error_field, "params");
}

}  // namespace
}  // namespace actmem

namespace actmem {
namespace {

// Issue 26: a LoRA target the model does not have was accepted and counted as nothing ("0
// trainable adapter parameters", exit 0). Phi-2 (tests/data/configs/phi-2.json) has an ungated MLP
// (fc1, fc2: up and down), so gate names nothing: alone it is refused (PEFT raises too); beside
// targets that exist it is adapted nowhere and noted; `all` keeps what the model has.
TEST(LoraTargets, AModelWithoutTheProjectionRefusesItAndAllKeepsWhatItHas) {
  const ModelSpec phi2 = load_model(std::string(ACTMEM_SOURCE_DIR) + "/tests/data/configs/phi-2.json").value();
  const auto tensors = weight_tensors(phi2);
  auto gate = resolve_lora_targets(tensors, phi2.fused_qkv, phi2.fused_gate_up, kLoraGate);
  ASSERT_FALSE(gate);
  EXPECT_EQ(gate.error().field, "lora_targets");
  EXPECT_NE(gate.error().message.find("no gate projection"), std::string::npos) << gate.error().message;
  EXPECT_EQ(resolve_lora_targets(tensors, false, false, kLoraAll)->targets, unsigned{kLoraAll} & ~unsigned{kLoraGate});
  EXPECT_EQ(resolve_lora_targets(tensors, false, false, kLoraAll)->unmatched, 0u);
  // As PEFT: q and v adapted, gate matched nowhere (and said in a note, not dropped silently).
  const auto qvg = resolve_lora_targets(tensors, false, false, kLoraQ | kLoraV | kLoraGate).value();
  EXPECT_EQ(qvg.targets, unsigned{kLoraQ | kLoraV});
  EXPECT_EQ(qvg.unmatched, unsigned{kLoraGate});
  // Llama 3 8B has all seven.
  EXPECT_EQ(resolve_lora_targets(llama_3_8b(), false, false, kLoraAll)->targets, unsigned{kLoraAll});
  // Through prepare(): the error is the workload's, before any layout.
  Workload w;
  w.lora.rank = 8;
  w.lora.targets = kLoraGate;
  EXPECT_FALSE(prepare(phi2, w));
}

}  // namespace
}  // namespace actmem
