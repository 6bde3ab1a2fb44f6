#include "model/weight_tensors.h"

#include <algorithm>

#include "model/arch.h"  // hf_quirks: Llama 4's fused 3-D expert parameters
#include "util/bytes.h"  // ceil_div, checked arithmetic

namespace actmem {

int64_t WeightTensor::rank_rows(int64_t tp) const {
  switch (shard) {
    case WeightShard::kColumn:
    case WeightShard::kVocab:
      return ceil_div(rows, tp);
    case WeightShard::kKvHeads:
      return kv_heads_per_rank(heads, tp) * (rows / heads);
    default:
      return rows;
  }
}

int64_t WeightTensor::rank_cols(int64_t tp) const { return shard == WeightShard::kRow ? ceil_div(cols, tp) : cols; }

int64_t WeightTensor::numel() const { return checked_mul(rows, cols); }

namespace {

/// Collects tensors, merging identical shapes of different layers into one row with a count.
/// Tensors added are tagged with the part set last (set_part), so the shape helpers stay part-blind.
class TensorList {
 public:
  void set_part(WeightPart part) { part_ = part; }
  void add(WeightTensor t) {
    auto same = [&](const WeightTensor& o) {
      return o.name == t.name && o.rows == t.rows && o.cols == t.cols && o.role == t.role && o.shard == t.shard &&
             o.heads == t.heads && o.part == t.part;
    };
    if (auto it = std::find_if(list_.begin(), list_.end(), same); it != list_.end())
      it->count += t.count;
    else
      list_.push_back(std::move(t));
  }
  void matrix(std::string name, int64_t rows, int64_t cols, WeightRole role, WeightShard shard,
              std::string rows_symbol, std::string cols_symbol, int64_t count = 1) {
    add({std::move(name), count, rows, cols, role, shard, 0, std::move(rows_symbol), std::move(cols_symbol), part_});
  }
  void vector(std::string name, int64_t size, WeightRole role, WeightShard shard, std::string symbol,
              int64_t count = 1) {
    add({std::move(name), count, size, 1, role, shard, 0, std::move(symbol), "1", part_});
  }
  void kv_matrix(std::string name, int64_t heads, int64_t head_dim, int64_t cols, WeightRole role,
                 std::string cols_symbol) {
    add({std::move(name), 1, heads * head_dim, cols, role, WeightShard::kKvHeads, heads, "kv·d",
         std::move(cols_symbol), part_});
  }
  std::vector<WeightTensor> take() { return std::move(list_); }

 private:
  std::vector<WeightTensor> list_;
  WeightPart part_ = WeightPart::kAttention;
};

void add_norm(TensorList& out, const std::string& name, int64_t size, const char* symbol, bool bias) {
  out.vector(name + ".weight", size, WeightRole::kNorm, WeightShard::kReplicated, symbol);
  if (bias) out.vector(name + ".bias", size, WeightRole::kNorm, WeightShard::kReplicated, symbol);
}

void add_attention(TensorList& out, const ModelSpec& m) {
  const int64_t h = m.hidden;
  constexpr auto kLinear = WeightRole::kLinear;
  if (m.mla) {
    const MlaSpec& mla = *m.mla;
    if (mla.q_lora_rank > 0) {
      out.matrix("attn.q_a_proj", mla.q_lora_rank, h, kLinear, WeightShard::kReplicated, "r_q", "h");
      add_norm(out, "attn.q_a_layernorm", mla.q_lora_rank, "r_q", m.norm_bias);
      out.matrix("attn.q_b_proj", m.q_dim(), mla.q_lora_rank, kLinear, WeightShard::kColumn, "a·(d_nope+d_rope)",
                 "r_q");
    } else {
      out.matrix("attn.q_proj", m.q_dim(), h, kLinear, WeightShard::kColumn, "a·(d_nope+d_rope)", "h");
    }
    out.matrix("attn.kv_a_proj_with_mqa", mla.kv_lora_rank + mla.qk_rope_head_dim, h, kLinear,
               WeightShard::kReplicated, "(r_kv+d_rope)", "h");
    add_norm(out, "attn.kv_a_layernorm", mla.kv_lora_rank, "r_kv", m.norm_bias);
    out.matrix("attn.kv_b_proj", m.num_heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank, kLinear,
               WeightShard::kColumn, "a·(d_nope+d_v)", "r_kv");
    out.matrix("attn.o_proj", h, m.attn_out_dim(), kLinear, WeightShard::kRow, "h", "a·d_v");
  } else {
    // A fused QKV projection holds the same rows; vLLM's QKVParallelLinear shards q by heads and
    // k, v by KV heads, so they are listed apart either way.
    out.matrix("attn.q_proj", m.q_dim(), h, kLinear, WeightShard::kColumn, "a·d", "h");
    out.kv_matrix("attn.k_proj", m.num_kv_heads, m.head_dim, h, kLinear, "h");
    out.kv_matrix("attn.v_proj", m.num_kv_heads, m.head_dim, h, kLinear, "h");
    if (m.qkv_bias) {
      out.vector("attn.q_proj.bias", m.q_dim(), WeightRole::kBias, WeightShard::kColumn, "a·d");
      out.kv_matrix("attn.k_proj.bias", m.num_kv_heads, m.head_dim, 1, WeightRole::kBias, "1");
      out.kv_matrix("attn.v_proj.bias", m.num_kv_heads, m.head_dim, 1, WeightRole::kBias, "1");
    }
    if (m.qk_norm && m.qk_norm_full_width) {  // OLMo 2: over the whole projection
      add_norm(out, "attn.q_norm", m.q_dim(), "a·d", false);
      add_norm(out, "attn.k_norm", m.kv_dim(), "kv·d", false);
    } else if (m.qk_norm) {  // of the model's norm kind: Megatron's --qk-layernorm with LayerNorm has a bias
      add_norm(out, "attn.q_norm", m.head_dim, "d", m.norm_bias);
      add_norm(out, "attn.k_norm", m.head_dim, "d", m.norm_bias);
    }
    out.matrix("attn.o_proj", h, m.attn_out_dim(), kLinear, WeightShard::kRow, "h", "a·d");
  }
  // GPT-OSS: a sink logit per head (GptOssAttention.sinks), split with the heads.
  if (m.attention_sinks) out.vector("attn.sinks", m.num_heads, WeightRole::kBias, WeightShard::kColumn, "a");
  if (m.o_bias) out.vector("attn.o_proj.bias", h, WeightRole::kBias, WeightShard::kReplicated, "h");
}

/// gate/up/down (or up/down = fc1/fc2) of an MLP of intermediate size f, `count` times (experts).
void add_mlp(TensorList& out, const ModelSpec& m, const std::string& prefix, int64_t f, const char* f_symbol,
             int64_t count, bool bias) {
  const int64_t h = m.hidden;
  constexpr auto kLinear = WeightRole::kLinear;
  if (m.gated_mlp) out.matrix(prefix + ".gate_proj", f, h, kLinear, WeightShard::kColumn, f_symbol, "h", count);
  out.matrix(prefix + ".up_proj", f, h, kLinear, WeightShard::kColumn, f_symbol, "h", count);
  out.matrix(prefix + ".down_proj", h, f, kLinear, WeightShard::kRow, "h", f_symbol, count);
  if (bias) {
    if (m.gated_mlp)
      out.vector(prefix + ".gate_proj.bias", f, WeightRole::kBias, WeightShard::kColumn, f_symbol, count);
    out.vector(prefix + ".up_proj.bias", f, WeightRole::kBias, WeightShard::kColumn, f_symbol, count);
    out.vector(prefix + ".down_proj.bias", h, WeightRole::kBias, WeightShard::kReplicated, "h", count);
  }
}

}  // namespace

std::vector<WeightTensor> layer_weight_tensors(const ModelSpec& m, const LayerSpec& layer) {
  TensorList out;
  out.set_part(WeightPart::kLayerNorm);
  if (!m.post_norms_only && !m.encoder) add_norm(out, "input_layernorm", m.hidden, "h", m.norm_bias);
  out.set_part(WeightPart::kAttention);
  add_attention(out, m);
  out.set_part(WeightPart::kLayerNorm);
  if (m.encoder) {  // BertLayer: attention.output.LayerNorm and output.LayerNorm, after each residual add
    add_norm(out, "attention.output.LayerNorm", m.hidden, "h", m.norm_bias);
    add_norm(out, "output.LayerNorm", m.hidden, "h", m.norm_bias);
    out.set_part(WeightPart::kMlp);
    add_mlp(out, m, "mlp", layer.ffn, "f", 1, m.mlp_bias);
    return out.take();
  }
  // Phi (shared_input_norm): one norm feeds attention and the MLP; OLMo 2 (post_norms_only):
  // post_attention_layernorm normalizes the attention output.
  if (!m.shared_input_norm) add_norm(out, "post_attention_layernorm", m.hidden, "h", m.norm_bias);
  if (m.post_norms_only) add_norm(out, "post_feedforward_layernorm", m.hidden, "h", m.norm_bias);
  if (m.sandwich_norms) {
    add_norm(out, "pre_feedforward_layernorm", m.hidden, "h", m.norm_bias);
    add_norm(out, "post_feedforward_layernorm", m.hidden, "h", m.norm_bias);
  }
  if (layer.moe && m.moe) {
    const MoeSpec& moe = *m.moe;
    out.set_part(WeightPart::kRouter);
    out.matrix("mlp.router", moe.num_experts, m.hidden, WeightRole::kRouter, WeightShard::kReplicated, "E", "h");
    if (moe.router_bias)
      out.vector("mlp.router.bias", moe.num_experts, WeightRole::kRouter, WeightShard::kReplicated, "E");
    // Without expert parallelism vLLM splits every expert's intermediate size over the TP ranks.
    out.set_part(WeightPart::kRoutedExperts);
    if (hf_quirks(m).llama4) {
      // Llama4TextExperts: fused 3-D parameters gate_up_proj (E, h, 2·f_e) and down_proj (E, f_e, h),
      // listed here as E matrices of (2·f_e, h) and (h, f_e) in the nn.Linear (out, in) convention.
      out.matrix("mlp.experts.gate_up_proj", 2 * moe.expert_ffn, m.hidden, WeightRole::kLinear, WeightShard::kColumn,
                 "2·f_e", "h", moe.num_experts);
      out.matrix("mlp.experts.down_proj", m.hidden, moe.expert_ffn, WeightRole::kLinear, WeightShard::kRow, "h",
                 "f_e", moe.num_experts);
    } else {
      add_mlp(out, m, "mlp.experts", moe.expert_ffn, "f_e", moe.num_experts, m.mlp_bias);
    }
    out.set_part(WeightPart::kSharedExperts);
    if (moe.shared_ffn > 0) add_mlp(out, m, "mlp.shared_experts", moe.shared_ffn, "f_s", 1, m.mlp_bias);
    out.set_part(WeightPart::kSharedExpertGate);
    if (moe.shared_expert_gate)
      out.matrix("mlp.shared_expert_gate", 1, m.hidden, WeightRole::kRouter, WeightShard::kReplicated, "1", "h");
  } else {
    out.set_part(WeightPart::kMlp);
    add_mlp(out, m, "mlp", layer.ffn, "f", 1, m.mlp_bias);
  }
  return out.take();
}

std::vector<WeightTensor> embedding_weight_tensors(const ModelSpec& m) {
  TensorList out;
  out.set_part(WeightPart::kEmbedding);
  out.matrix("embed_tokens", m.vocab, m.hidden, WeightRole::kEmbedding, WeightShard::kVocab, "V", "h");
  if (m.learned_positions)
    out.matrix("embed_positions", m.max_positions, m.hidden, WeightRole::kEmbedding, WeightShard::kReplicated, "P",
               "h");
  if (m.encoder) {  // BertEmbeddings: token_type_embeddings and the LayerNorm after the sum
    if (m.type_vocab > 0)
      out.matrix("token_type_embeddings", m.type_vocab, m.hidden, WeightRole::kEmbedding, WeightShard::kReplicated,
                 "T", "h");
    add_norm(out, "embeddings.LayerNorm", m.hidden, "h", m.norm_bias);
  }
  return out.take();
}

namespace {

/// An encoder's head (EncoderHead): no final norm (the layers end in their own LayerNorm).
///  - none: BertModel's pooler (dense h×h + tanh), RobertaModel's too (add_pooling_layer=True).
///  - mlm: BertForMaskedLM's cls.predictions (RobertaForMaskedLM's lm_head): transform dense h×h,
///    LayerNorm, decoder tied to the word embeddings (its own V×h when tie_word_embeddings is false)
///    and a bias of V; the *ForMaskedLM body has no pooler (add_pooling_layer=False).
///  - classifier: BERT: pooler + classifier (n×h + n); RoBERTa: RobertaClassificationHead, dense
///    h×h + out_proj n×h, no pooler.
void add_encoder_head(TensorList& out, const ModelSpec& m) {
  out.set_part(WeightPart::kLmHead);
  const int64_t h = m.hidden;
  auto dense = [&](const std::string& name, int64_t rows, const char* rows_symbol) {
    out.matrix(name + ".weight", rows, h, WeightRole::kLinear, WeightShard::kReplicated, rows_symbol, "h");
    out.vector(name + ".bias", rows, WeightRole::kBias, WeightShard::kReplicated, rows_symbol);
  };
  const bool roberta = m.position_ids_from_input;
  switch (m.head) {
    case EncoderHead::kNone:
      dense("pooler.dense", h, "h");
      break;
    case EncoderHead::kMaskedLM:
      dense(roberta ? "lm_head.dense" : "cls.predictions.transform.dense", h, "h");
      add_norm(out, roberta ? "lm_head.layer_norm" : "cls.predictions.transform.LayerNorm", h, "h", m.norm_bias);
      if (!m.tied_embeddings)
        out.matrix("decoder", m.vocab, h, WeightRole::kLmHead, WeightShard::kReplicated, "V", "h");
      out.vector("decoder.bias", m.vocab, WeightRole::kBias, WeightShard::kReplicated, "V");
      break;
    case EncoderHead::kClassifier:
      dense(roberta ? "classifier.dense" : "pooler.dense", h, "h");
      dense(roberta ? "classifier.out_proj" : "classifier", m.num_labels, "n");
      break;
  }
}

}  // namespace

std::vector<WeightTensor> head_weight_tensors(const ModelSpec& m) {
  TensorList out;
  if (m.encoder) {
    add_encoder_head(out, m);
    return out.take();
  }
  out.set_part(WeightPart::kFinalNorm);
  add_norm(out, "norm", m.hidden, "h", m.norm_bias);
  out.set_part(WeightPart::kLmHead);
  if (!m.tied_embeddings)
    out.matrix("lm_head", m.vocab, m.hidden, WeightRole::kLmHead, WeightShard::kVocab, "V", "h");
  if (m.lm_head_bias) out.vector("lm_head.bias", m.vocab, WeightRole::kBias, WeightShard::kVocab, "V");
  return out.take();
}

std::vector<WeightTensor> weight_tensors(const ModelSpec& m) {
  return stage_weight_tensors(m, 0, static_cast<int64_t>(m.layers.size()), true, true);
}

std::vector<WeightTensor> stage_weight_tensors(const ModelSpec& m, int64_t first_layer, int64_t num_layers,
                                               bool first_stage, bool last_stage) {
  TensorList out;
  // A tied head multiplies by the embedding: the last stage keeps its own copy when it is not the first.
  const bool embedding = first_stage || (last_stage && m.tied_embeddings && !m.encoder);
  if (embedding)
    for (WeightTensor& t : embedding_weight_tensors(m)) {
      if (!first_stage && t.name != "embed_tokens") continue;  // a learned position table stays on the first
      out.add(std::move(t));
    }
  const int64_t end = std::min<int64_t>(first_layer + num_layers, static_cast<int64_t>(m.layers.size()));
  for (int64_t i = std::max<int64_t>(first_layer, 0); i < end; ++i)
    for (WeightTensor& t : layer_weight_tensors(m, m.layers[static_cast<size_t>(i)])) out.add(std::move(t));
  if (last_stage)
    for (WeightTensor& t : head_weight_tensors(m)) out.add(std::move(t));
  return out.take();
}

int64_t total_weight_elements(const std::vector<WeightTensor>& tensors) {
  int64_t sum = 0;
  for (const auto& t : tensors) sum = checked_add(sum, checked_mul(t.numel(), t.count));
  return sum;
}

double linear_macs_per_token(const ModelSpec& m, const LayerSpec& layer) {
  double macs = 0;
  for (const WeightTensor& t : layer_weight_tensors(m, layer)) {
    // Matrices only (a vector, cols == 1, is a bias or norm: no multiply-accumulate per element).
    const bool matmul = t.cols > 1 && (t.role == WeightRole::kLinear || t.part == WeightPart::kRouter);
    if (!matmul) continue;
    // A token passes through k of the E routed experts, and once through everything else.
    const int64_t copies = t.part == WeightPart::kRoutedExperts ? m.moe->experts_per_token : t.count;
    // In double, as the FLOP counts are (exact below 2^53, every real model; no overflow above).
    macs += static_cast<double>(t.rows) * static_cast<double>(t.cols) * static_cast<double>(copies);
  }
  return macs;
}

double lm_head_macs_per_token(const ModelSpec& m) {
  if (m.encoder) {  // the MLM transform and decoder at every position; a pooler / classifier reads b rows only
    const double h = static_cast<double>(m.hidden);
    return m.head == EncoderHead::kMaskedLM ? h * h + static_cast<double>(m.vocab) * h : 0.0;
  }
  // A tied head multiplies by the embedding matrix, which has the same V × h shape.
  for (const WeightTensor& t : head_weight_tensors(m))
    if (t.role == WeightRole::kLmHead) return static_cast<double>(t.rows) * static_cast<double>(t.cols);
  const std::vector<WeightTensor> embedding = embedding_weight_tensors(m);  // embed_tokens first
  return static_cast<double>(embedding.front().rows) * static_cast<double>(embedding.front().cols);
}

}  // namespace actmem
