// Encoder families (issue 8, item 4): bert and roberta. The config.json files in
// tests/data/configs/ are the published files of the public checkpoints (source in each comment);
// every count below is the sum of HF's modules for that config, worked out by hand in the comment:
//   embeddings: V·h + P·h + T·h + LayerNorm 2h
//   layer:      4·(h² + h) (query, key, value, attention.output.dense) + 2·2h (two LayerNorms)
//               + (h·f + f) + (f·h + h) (intermediate.dense, output.dense)
//   BertModel / RobertaModel: + pooler h² + h
//   *ForMaskedLM: no pooler; + transform dense h² + h, LayerNorm 2h, decoder tied + bias V
//   BertForSequenceClassification: + pooler + classifier n·h + n
//   RobertaForSequenceClassification: no pooler; + dense h² + h, out_proj n·h + n
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/encoder_head.h"
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

int64_t with_head(ModelSpec m, std::string_view head) {
  auto ok = set_encoder_head(m, head);
  EXPECT_TRUE(ok) << (ok ? "" : ok.error().message);
  return count_params(m).total();
}

// google-bert/bert-base-uncased (huggingface.co/google-bert/bert-base-uncased/blob/main/config.json).
// embeddings 30522·768 + 512·768 + 2·768 + 1536 = 23,837,184; layer 2,362,368 + 3,072 + 2,362,368
// + 2,360,064 = 7,087,872, x 12 = 85,054,464; pooler 590,592: BertModel 109,482,240 (the count
// `BertModel.from_pretrained("bert-base-uncased").num_parameters()` prints).
TEST(EncoderFamiliesTest, BertBaseUncased) {
  const ModelSpec m = load("bert-base-uncased.json");
  EXPECT_EQ(m.model_type, "bert");
  EXPECT_TRUE(m.encoder);
  EXPECT_EQ(m.head, EncoderHead::kMaskedLM);  // architectures: BertForMaskedLM
  EXPECT_EQ(m.type_vocab, 2);
  EXPECT_EQ(m.max_positions, 512);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(m.norm_bias && m.qkv_bias && m.o_bias && m.mlp_bias);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_EQ(m.act, ActFn::kGelu);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-12);
  EXPECT_DOUBLE_EQ(m.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(m.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(m.embedding_dropout, 0.1);   // BertEmbeddings.dropout = hidden_dropout_prob
  EXPECT_DOUBLE_EQ(m.classifier_dropout, 0.1);  // classifier_dropout absent: hidden_dropout_prob
  EXPECT_FALSE(m.position_ids_from_input);
  const ParamCounts p = count_params(m);
  EXPECT_EQ(p.all_embedding(), 23'837'184);
  EXPECT_EQ(p.embedding, 30522LL * 768);  // word_embeddings; positions, token types and LayerNorm replicated
  EXPECT_EQ(p.layers[0].attention + p.layers[0].kv_projection + p.layers[0].dense_mlp + p.layers[0].replicated,
            7'087'872);
  EXPECT_EQ(with_head(m, "none"), 109'482'240);
  // BertForMaskedLM: 109,482,240 − 590,592 + 590,592 + 1,536 + 30,522 = 109,514,298
  EXPECT_EQ(p.total(), 109'514'298);
  // BertForSequenceClassification, 2 labels: + 768·2 + 2 = 109,483,778
  EXPECT_EQ(with_head(m, "classifier"), 109'483'778);
  EXPECT_EQ(with_head(m, "classifier:3"), 109'482'240 + 768 * 3 + 3);
}

// google-bert/bert-large-uncased (huggingface.co/google-bert/bert-large-uncased/blob/main/config.json).
// embeddings 30522·1024 + 512·1024 + 2·1024 + 2048 = 31,782,912; layer 4,198,400 + 4,096 +
// 4,198,400 + 4,195,328 = 12,596,224, x 24 = 302,309,376; pooler 1,049,600: 335,141,888.
TEST(EncoderFamiliesTest, BertLargeUncased) {
  const ModelSpec m = load("bert-large-uncased.json");
  EXPECT_EQ(m.num_layers, 24);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(with_head(m, "none"), 335'141'888);
  EXPECT_EQ(count_params(m).total(), 335'141'888 + 2'048 + 30'522);  // BertForMaskedLM: 335,174,458
}

// FacebookAI/roberta-base (huggingface.co/FacebookAI/roberta-base/blob/main/config.json):
// max_position_embeddings 514 (positions start at padding_idx + 1 = 2), type_vocab_size 1.
// embeddings 50265·768 + 514·768 + 768 + 1536 = 39,000,576; layers 85,054,464; pooler 590,592:
// RobertaModel 124,645,632.
TEST(EncoderFamiliesTest, RobertaBase) {
  const ModelSpec m = load("roberta-base.json");
  EXPECT_EQ(m.model_type, "roberta");
  EXPECT_TRUE(m.encoder);
  EXPECT_EQ(m.head, EncoderHead::kMaskedLM);  // architectures: RobertaForMaskedLM
  EXPECT_EQ(m.max_positions, 514);
  EXPECT_EQ(m.type_vocab, 1);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-5);
  EXPECT_TRUE(m.position_ids_from_input);
  EXPECT_EQ(count_params(m).all_embedding(), 39'000'576);
  EXPECT_EQ(with_head(m, "none"), 124'645'632);
  // RobertaForMaskedLM (lm_head: dense, layer_norm, tied decoder + bias): 124,697,433
  EXPECT_EQ(count_params(m).total(), 124'697'433);
  // RobertaForSequenceClassification: no pooler; classifier.dense 590,592 + out_proj 768·2 + 2
  EXPECT_EQ(with_head(m, "classifier"), 124'645'632 - 590'592 + 590'592 + 1'538);
}

// FacebookAI/roberta-large (huggingface.co/FacebookAI/roberta-large/blob/main/config.json).
// embeddings 50265·1024 + 514·1024 + 1024 + 2048 = 52,000,768; layers 302,309,376; pooler
// 1,049,600: RobertaModel 355,359,744; RobertaForMaskedLM + 2,048 + 50,265 = 355,412,057.
TEST(EncoderFamiliesTest, RobertaLarge) {
  const ModelSpec m = load("roberta-large.json");
  EXPECT_EQ(with_head(m, "none"), 355'359'744);
  EXPECT_EQ(count_params(m).total(), 355'412'057);
}

TEST(EncoderFamiliesTest, HeadFromArchitecturesAndLabels) {
  json c = {{"model_type", "bert"}, {"hidden_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
            {"intermediate_size", 256}, {"vocab_size", 100}, {"architectures", {"BertForSequenceClassification"}},
            {"id2label", {{"0", "a"}, {"1", "b"}, {"2", "c"}}}, {"classifier_dropout", 0.3}};
  auto m = parse_hf_config(c.dump(), "test.json");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->head, EncoderHead::kClassifier);
  EXPECT_EQ(m->num_labels, 3);  // len(id2label), as PretrainedConfig.num_labels
  EXPECT_DOUBLE_EQ(m->classifier_dropout, 0.3);
  EXPECT_EQ(encoder_head_name(*m), "classifier:3");
  c.erase("architectures");
  auto bare = parse_hf_config(c.dump(), "test.json");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->head, EncoderHead::kNone);
}

TEST(EncoderFamiliesTest, RefusedKeysAndHeads) {
  json c = {{"model_type", "bert"}, {"hidden_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
            {"intermediate_size", 256}, {"vocab_size", 100}};
  for (auto [key, value, word] : {std::tuple{"position_embedding_type", json("relative_key"), "position_embedding_type"},
                                  std::tuple{"is_decoder", json(true), "is_decoder"},
                                  std::tuple{"architectures", json({"BertForQuestionAnswering"}), "architectures"}}) {
    json bad = c;
    bad[key] = value;
    auto r = parse_hf_config(bad.dump(), "test.json");
    ASSERT_FALSE(r) << key;
    EXPECT_NE(r.error().message.find(word), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  }
  auto m = parse_hf_config(c.dump(), "test.json");
  ASSERT_TRUE(m);
  for (std::string_view bad : {"classifier:1", "classifier:x", "lm", "mlm:2"}) {
    ModelSpec copy = *m;
    auto r = set_encoder_head(copy, bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().field, "head");
  }
  auto llama = parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 100})",
                               "test.json");
  ASSERT_TRUE(llama);
  auto r = set_encoder_head(*llama, "mlm");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().field, "head");
}

}  // namespace
}  // namespace actmem
