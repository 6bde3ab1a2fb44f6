// Encoders (bert, roberta; issue 8 item 4): hand-computed saved bytes from validation/EXPECTED.md,
// section "Encoders", each for the config of a validation case (validation/run_validation.py, case
// named in each test), so the same numbers are the measured ones. Save behaviour from HF
// transformers modeling_bert.py (commit 8ec58104181bfb34d824d89bccc009b4f6be6e0e: BertSelfAttention
// matmul on transpose_for_scores views, softmax without dtype, BertSdpaSelfAttention, BertSelfOutput
// / BertOutput LayerNorm(dropout(dense(x)) + input), BertEmbeddings, BertPooler, BertLMPredictionHead,
// BertForMaskedLM's CrossEntropyLoss on prediction_scores as they are) and modeling_roberta.py
// (create_position_ids_from_input_ids, RobertaClassificationHead).
#include <string>

#include <gtest/gtest.h>

#include "tensors/activation.h"
#include "engine/engine_test_util.h"
#include "model/encoder_head.h"
#include "model/hf_config.h"

namespace actmem {
namespace {

ModelSpec config(const std::string& json) {
  auto m = parse_hf_config(json, "test.json");
  EXPECT_TRUE(m) << (m ? "" : m.error().message);
  return m ? *m : ModelSpec{};
}

ActivationReport run(const ModelSpec& m, int64_t s, int64_t b, DType dtype, AttentionImpl attention,
                     Recompute recompute = Recompute::kNone) {
  Workload w;
  w.dtype = dtype;
  w.attention = attention;
  Layout l;
  l.seq_len = s;
  l.micro_batch = b;
  l.recompute = recompute;
  auto r = testing::activations_for_test(m, w, l);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? *r : ActivationReport{};
}

// BERT of the validation cases (run_validation.py BERT): h 320, 5 heads of 64, f 1280, V 1003.
std::string bert(double dropout, const char* arch = "BertForMaskedLM") {
  return std::string{R"({"model_type": "bert", "architectures": [")"} + arch +
         R"("], "hidden_size": 320, "num_hidden_layers": 2,
      "num_attention_heads": 5, "intermediate_size": 1280, "vocab_size": 1003, "max_position_embeddings": 128,
      "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "torch_dtype": "bfloat16",
      "hidden_dropout_prob": )" +
         std::to_string(dropout) + R"(, "attention_probs_dropout_prob": )" + std::to_string(dropout) + "}";
}

// Case bert-hf-eager-none-bf16-mlm-drop (s 37, b 3, dropouts 0.1): measured 1,312,131 per layer,
// 3,241,200 in all.
TEST(ActivationEncoders, BertEagerMlmDropout) {
  const int64_t s = 37, b = 3, h = 320, a = 5, f = 1280, V = 1003, e = 2, T = s * b;
  auto r = run(config(bert(0.1)), s, b, DType::kBF16, AttentionImpl::kEager);
  // input (query/key/value read it), matmul's copies of q, kᵀ and v, softmax output (bf16: no
  // dtype=float32 in BertSelfAttention), attention dropout mask + output, context, hidden dropout
  // mask; two LayerNorms (residual sum + fp32 mean and rstd); LN output (fc1 input), gelu input,
  // fc2 input, a second dropout mask.
  const int64_t layer = e * T * h + 3 * e * T * h + e * b * a * s * s + b * a * s * s + e * b * a * s * s +
                        e * T * h + T * h + 2 * (e * T * h + 8 * T) + e * T * h + 2 * e * T * f + T * h;
  EXPECT_EQ(r.per_layer.count(), layer);
  EXPECT_EQ(r.per_layer.count(), 1312131);
  // Embedding: ids, the embeddings' sum (LayerNorm input) + mean + rstd, dropout mask; MLM head:
  // last output (dense input), gelu input, LayerNorm input + stats, decoder input, bf16 log-softmax
  // over V at every position, int64 labels.
  const int64_t outside = 8 * T + e * T * h + 8 * T + T * h + 4 * e * T * h + 8 * T + e * T * V + 8 * T;
  EXPECT_EQ(r.total.count(), 2 * layer + outside);
  EXPECT_EQ(r.total.count(), 3241200);
}

// Case bert-hf-sdpa-none-fp32-cls (BERT_CLS: h 336, 7 heads of 48, f 900, 3 labels, s 33, b 3, no
// dropout): sdpa keeps the query/key/value outputs themselves and its logsumexp; the pooler keeps
// the whole last output (hidden_states[:, 0] is a view), tanh its output, the classifier that
// output again (no dropout), then a (b, 3) log-softmax and (b) labels.
TEST(ActivationEncoders, BertSdpaClassifier) {
  const int64_t s = 33, b = 3, h = 336, a = 7, f = 900, n = 3, e = 4, T = s * b;
  std::string json = bert(0.0, "BertForSequenceClassification");
  json.replace(json.find("\"hidden_size\": 320"), 18, "\"hidden_size\": 336");
  json.replace(json.find("\"num_attention_heads\": 5"), 24, "\"num_attention_heads\": 7");
  json.replace(json.find("\"intermediate_size\": 1280"), 25, "\"intermediate_size\": 900");
  json.replace(json.find("\"vocab_size\": 1003"), 18, "\"vocab_size\": 1013");
  json.replace(json.find("\"torch_dtype\": \"bfloat16\""), 25, "\"num_labels\": 3, \"torch_dtype\": \"float32\"");
  auto r = run(config(json), s, b, DType::kFP32, AttentionImpl::kSdpa);
  const int64_t layer = e * T * h + 3 * e * T * h + 4 * b * a * s + e * T * h + 2 * (e * T * h + 8 * T) + e * T * h +
                        2 * e * T * f;
  EXPECT_EQ(r.per_layer.count(), layer);
  EXPECT_EQ(r.per_layer.count(), 1781604);
  const int64_t outside = 8 * T + e * T * h + 8 * T + e * T * h + e * b * h + e * b * n + 8 * b;
  EXPECT_EQ(r.total.count(), 2 * layer + outside);
  EXPECT_EQ(r.total.count(), 3834996);
}

// Case roberta-hf-eager-full-fp32-cls-drop (3 layers, 4 labels, hidden dropout 0.1, attention 0):
// full recomputation keeps each layer's input and the (b, 1, 1, s) extended mask (eager); RoBERTa
// keeps its (b, s) position ids; RobertaClassificationHead drops features[:, 0] first (a new
// tensor: the last output is not kept), then dense, tanh, dropout, out_proj.
TEST(ActivationEncoders, RobertaEagerFullClassifier) {
  const int64_t s = 29, b = 2, h = 320, n = 4, e = 4, T = s * b;
  auto r = run(config(R"({"model_type": "roberta", "architectures": ["RobertaForSequenceClassification"],
      "hidden_size": 320, "num_hidden_layers": 3, "num_attention_heads": 5, "intermediate_size": 1280,
      "vocab_size": 1009, "max_position_embeddings": 130, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
      "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.0, "num_labels": 4,
      "torch_dtype": "float32"})"),
               s, b, DType::kFP32, AttentionImpl::kEager, Recompute::kFull);
  EXPECT_EQ(r.per_layer.count(), e * T * h);
  const int64_t outside = 8 * T + 8 * T + e * T * h + 8 * T + T * h + e * b * s +  // embeddings, mask
                          b * h + e * b * h + e * b * h + b * h + e * b * h + e * b * n + 8 * b;
  EXPECT_EQ(r.total.count(), 3 * e * T * h + outside);
  EXPECT_EQ(r.total.count(), 326152);
}

}  // namespace
}  // namespace actmem
