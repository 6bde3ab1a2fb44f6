// Megatron-LM's model arguments -> ModelSpec parts. Defaults and semantics are Megatron-LM's at
// NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553: megatron/training/arguments.py
// (validate_args: ffn_hidden_size, kv_channels, moe_ffn_hidden_size, add_qkv_bias; the argument
// groups), megatron/training/argument_utils.py (core_transformer_config_from_args: --swiglu,
// --squared-relu, --group-query-attention), megatron/core/transformer/transformer_config.py
// (TransformerConfig and MLATransformerConfig defaults) and megatron/core/models/gpt/
// gpt_layer_specs.py (the layer pattern of --moe-layer-freq).
#include "config/megatron_model.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "model/params.h"  // count_params: the overflow guard every model reader runs
#include "util/bytes.h"    // OverflowError

namespace actmem {

namespace {

using megatron::Reader;

Error config_error(std::string message) { return Error{ErrorKind::kConfig, "", std::move(message)}; }

// ---------------------------------------------------------------------------------------------
// Layer patterns: _eval_pattern's Python list expressions ("([0]*3+[1]*29)", "[1,0]*4").

/// An int or a list of ints, as the Python expression evaluates.
struct PatternValue {
  bool is_list = false;
  int64_t number = 0;
  std::vector<int64_t> list;
};

class PatternParser {
 public:
  explicit PatternParser(std::string_view text) : text_(text) {}

  Expected<std::vector<int64_t>> list() {
    auto v = sum();
    if (!v) return v.error();
    skip_spaces();
    if (pos_ != text_.size()) return fail("unexpected text");
    if (!v->is_list) return fail("not a list");
    return std::move(v->list);
  }

 private:
  // Bound on every list and number: a pattern longer than any model's layer count is a typo.
  static constexpr int64_t kMaxLength = 100000;

  Error fail(std::string_view what) const {
    return config_error(fmt::format("{} at character {}", what, pos_ + 1));
  }
  void skip_spaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool eat(char c) {
    skip_spaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Expected<PatternValue> sum() {  // product ('+' product)*
    auto left = product();
    if (!left) return left;
    while (eat('+')) {
      auto right = product();
      if (!right) return right;
      if (left->is_list != right->is_list) return fail("'+' of a list and a number");
      if (left->is_list) {
        if (static_cast<int64_t>(left->list.size() + right->list.size()) > kMaxLength) return fail("list too long");
        left->list.insert(left->list.end(), right->list.begin(), right->list.end());
      } else if (__builtin_add_overflow(left->number, right->number, &left->number) || left->number > kMaxLength) {
        return fail("number too large");
      }
    }
    return left;
  }
  Expected<PatternValue> product() {  // atom ('*' atom)*
    auto left = atom();
    if (!left) return left;
    while (eat('*')) {
      auto right = atom();
      if (!right) return right;
      if (left->is_list && right->is_list) return fail("'*' of two lists");
      if (!left->is_list && !right->is_list) {
        if (__builtin_mul_overflow(left->number, right->number, &left->number) || left->number > kMaxLength)
          return fail("number too large");
        continue;
      }
      PatternValue& list = left->is_list ? *left : *right;
      const int64_t times = left->is_list ? right->number : left->number;
      if (times > 0 && static_cast<int64_t>(list.list.size()) > kMaxLength / times) return fail("list too long");
      std::vector<int64_t> repeated;
      for (int64_t i = 0; i < times; ++i) repeated.insert(repeated.end(), list.list.begin(), list.list.end());
      left->is_list = true;
      left->list = std::move(repeated);
    }
    return left;
  }
  Expected<PatternValue> atom() {
    skip_spaces();
    if (eat('(')) {
      auto inner = sum();
      if (!inner) return inner;
      if (!eat(')')) return fail("')' expected");
      return inner;
    }
    if (eat('[')) {
      PatternValue v{.is_list = true};
      if (eat(']')) return v;
      do {
        auto item = sum();
        if (!item) return item;
        if (item->is_list) return fail("a list inside a list");
        if (static_cast<int64_t>(v.list.size()) >= kMaxLength) return fail("list too long");
        v.list.push_back(item->number);
      } while (eat(','));
      if (!eat(']')) return fail("']' expected");
      return v;
    }
    if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_])))
      return fail("a number, '[' or '(' expected");
    PatternValue v;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      v.number = v.number * 10 + (text_[pos_++] - '0');
      if (v.number > kMaxLength) return fail("number too large");
    }
    return v;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

/// An integer N, or the 0/1 list of a pattern expression of exactly `num_layers` entries.
Expected<std::vector<bool>> integer_or_list(std::string_view text, int64_t num_layers,
                                            const std::function<Expected<std::vector<bool>>(int64_t)>& every) {
  if (text.find('[') == std::string_view::npos) {  // moe_freq_type: a single int, maybe as a string
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size() || n < 1)
      return config_error(fmt::format("'{}' is neither a positive integer nor a list pattern", text));
    return every(n);
  }
  auto list = PatternParser(text).list();
  if (!list) return config_error(fmt::format("pattern '{}': {}", text, list.error().message));
  if (static_cast<int64_t>(list->size()) != num_layers)
    return config_error(fmt::format("pattern '{}' has {} entries; it needs one per layer ({})", text, list->size(),
                                    num_layers));
  std::vector<bool> out;
  for (int64_t v : *list) {
    if (v != 0 && v != 1) return config_error(fmt::format("pattern '{}' holds {}; use 0 and 1", text, v));
    out.push_back(v == 1);
  }
  return out;
}

}  // namespace

namespace megatron {

Expected<std::vector<bool>> moe_layer_pattern(std::string_view text, int64_t num_layers) {
  return integer_or_list(text, num_layers, [num_layers](int64_t n) -> Expected<std::vector<bool>> {
    std::vector<bool> moe;
    for (int64_t i = 0; i < num_layers; ++i) moe.push_back(i % n == 0);
    return moe;
  });
}

Expected<std::vector<bool>> no_rope_pattern(std::string_view text, int64_t num_layers) {
  return integer_or_list(text, num_layers, [num_layers](int64_t n) -> Expected<std::vector<bool>> {
    if (num_layers % n != 0)
      return config_error(fmt::format("{} layers are not a multiple of {} (Megatron asserts it)", num_layers, n));
    std::vector<bool> nope;
    for (int64_t i = 0; i < num_layers; ++i) nope.push_back((i + 1) % n == 0);
    return nope;
  });
}

}  // namespace megatron

namespace {

// ---------------------------------------------------------------------------------------------
// The model parts.

using Notes = std::vector<std::string>;

/// `--flag` as an integer when given, else `fallback`.
Expected<int64_t> count_or(const Reader& in, std::string_view flag, int64_t fallback) {
  if (!in.has(flag)) return fallback;
  return in.count(flag);
}

/// `--flag` as a number when given, else `fallback`.
Expected<double> real_or(const Reader& in, std::string_view flag, double fallback) {
  if (!in.has(flag)) return fallback;
  return in.real(flag);
}

/// h, L, a, the FFN size, KV heads, head size, positions and the padded vocabulary.
Expected<void> read_sizes(const Reader& in, ModelSpec& m, int64_t& ffn, Notes& notes) {
  ACTMEM_TRY(layers, in.count("num-layers"));
  ACTMEM_TRY(hidden, in.count("hidden-size"));
  ACTMEM_TRY(heads, in.count("num-attention-heads"));
  for (const char* flag : {"num-layers", "hidden-size", "num-attention-heads"}) notes.push_back(in.where(flag));
  m.num_layers = layers;
  m.hidden = hidden;
  m.num_heads = heads;
  const bool swiglu = in.has("swiglu");
  ffn = swiglu ? (4 * hidden * 2 / 3) / 64 * 64 : 4 * hidden;  // validate_args' defaults
  if (in.has("ffn-hidden-size")) {
    ACTMEM_TRY(f, in.count("ffn-hidden-size"));
    ffn = f;
    notes.push_back(in.where("ffn-hidden-size"));
  } else {
    notes.push_back(fmt::format("ffn_hidden_size {} = Megatron's default ({})", ffn,
                                swiglu ? "int(8h/3 / 64)·64 with --swiglu" : "4h"));
  }
  // core_transformer_config_from_args: num_query_groups only with --group-query-attention (its
  // default 1, MQA); without it every head has its own K and V.
  m.num_kv_heads = heads;
  if (in.has("group-query-attention")) {
    ACTMEM_TRY(g, count_or(in, "num-query-groups", 1));
    if (g < 1 || heads % g != 0)
      return config_error(fmt::format("{}: {} heads do not split into {} query groups", in.name(), heads, g));
    m.num_kv_heads = g;
    notes.push_back(in.has("num-query-groups") ? in.where("num-query-groups")
                                               : in.where("group-query-attention") + ": Megatron's default 1 group");
  }
  if (in.has("kv-channels")) {
    ACTMEM_TRY(d, in.count("kv-channels"));
    m.head_dim = d;
    notes.push_back(in.where("kv-channels"));
  } else if (heads > 0 && hidden % heads == 0) {
    m.head_dim = hidden / heads;  // validate_args: kv_channels = h // a, asserting h % a == 0
  } else {
    return config_error(fmt::format("{}: --hidden-size {} is not a multiple of --num-attention-heads {}; give "
                                    "--kv-channels",
                                    in.name(), hidden, heads));
  }
  ACTMEM_TRY(seq, count_or(in, "seq-length", kDefaultSeqLen));
  ACTMEM_TRY(positions, count_or(in, "max-position-embeddings", seq));
  m.max_positions = positions;

  // Vocabulary: given, or the GPT-2 BPE's 50257; then padded as Megatron pads it
  // (_vocab_size_with_padding: a multiple of make_vocab_size_divisible_by × tp).
  int64_t vocab = 0;
  if (in.has("vocab-size")) {
    ACTMEM_TRY(v, in.count("vocab-size"));
    vocab = v;
  } else if (in.has("vocab-file") || (in.has("tokenizer-type") && in.text("tokenizer-type") &&
                                      *in.text("tokenizer-type") == "GPT2BPETokenizer")) {
    vocab = 50257;
  } else {
    return config_error(fmt::format("{}: the vocabulary size is not in the arguments (no --vocab-size, no GPT-2 "
                                    "--vocab-file); add --vocab-size N or give the model with --model",
                                    in.name()));
  }
  ACTMEM_TRY(tp, count_or(in, "tensor-model-parallel-size", 1));
  ACTMEM_TRY(divisible, count_or(in, "make-vocab-size-divisible-by", 128));
  const int64_t multiple = std::max<int64_t>(1, divisible * tp);
  m.vocab = (vocab + multiple - 1) / multiple * multiple;
  notes.push_back(fmt::format("vocabulary {} padded to {} (a multiple of {} x tp {}, as Megatron pads it){}", vocab,
                              m.vocab, divisible, tp,
                              in.has("vocab-size") ? " from " + in.where("vocab-size") : " (GPT-2 BPE)"));
  return {};
}

/// Norm, MLP activation, biases, position encoding, qk-norm, tied embeddings, dropouts, dtype.
Expected<void> read_block(const Reader& in, ModelSpec& m, Notes& notes) {
  std::string norm = "LayerNorm";  // TransformerConfig.normalization
  if (in.has("normalization")) {
    ACTMEM_TRY(n, in.text("normalization"));
    norm = n;
  }
  if (norm != "LayerNorm" && norm != "RMSNorm")
    return config_error(fmt::format("{}: use LayerNorm or RMSNorm", in.where("normalization")));
  m.norm = norm == "RMSNorm" ? NormKind::kRMSNorm : NormKind::kLayerNorm;
  m.norm_bias = m.norm == NormKind::kLayerNorm;  // Megatron's LayerNorm has a bias; RMSNorm has none
  ACTMEM_TRY(eps, real_or(in, "norm-epsilon", 1e-5));  // TransformerConfig.layernorm_epsilon
  m.norm_eps = eps;

  if (in.has("quick-geglu"))
    return config_error(fmt::format("{}: the quick-GeGLU MLP (x·sigmoid(1.702x) gated) is not modelled; give the "
                                    "model with --model",
                                    in.where("quick-geglu")));
  if (in.has("swiglu") && in.has("squared-relu"))
    return config_error(fmt::format("{}: --squared-relu and --swiglu exclude each other (Megatron asserts it)",
                                    in.where("squared-relu")));
  m.gated_mlp = in.has("swiglu");
  m.act = in.has("swiglu") ? ActFn::kSilu : in.has("squared-relu") ? ActFn::kSquaredRelu : ActFn::kGelu;

  // validate_args: add_bias_linear also sets add_qkv_bias; --add-qkv-bias alone biases q, k, v only.
  const bool bias = !in.has("disable-bias-linear");
  m.qkv_bias = bias || in.has("add-qkv-bias");
  m.o_bias = m.mlp_bias = bias;

  std::string pos = in.has("use-rotary-position-embeddings") ? "rope" : "learned_absolute";
  if (in.has("position-embedding-type")) {
    ACTMEM_TRY(p, in.text("position-embedding-type"));
    pos = p;
  }
  if (pos != "learned_absolute" && pos != "rope" && pos != "yarn" && pos != "none")
    return config_error(fmt::format("{}: {} positions are not modelled (learned_absolute, rope, yarn and none are)",
                                    in.where("position-embedding-type"), pos));
  m.learned_positions = pos == "learned_absolute";
  m.layers.assign(static_cast<size_t>(m.num_layers), LayerSpec{});
  if (pos == "none") {
    for (LayerSpec& l : m.layers) l.no_rope = true;
  } else if (pos != "learned_absolute" && in.has("no-rope-freq")) {
    ACTMEM_TRY(t, in.text("no-rope-freq"));
    auto nope = megatron::no_rope_pattern(t, m.num_layers);
    if (!nope) return config_error(fmt::format("{}: {}", in.where("no-rope-freq"), nope.error().message));
    for (size_t i = 0; i < m.layers.size(); ++i) m.layers[i].no_rope = (*nope)[i];
    notes.push_back(in.where("no-rope-freq"));
  }
  if (pos != "learned_absolute" && in.has("rotary-percent")) {
    ACTMEM_TRY(r, in.real("rotary-percent"));
    if (!(r > 0.0 && r <= 1.0))
      return config_error(fmt::format("{}: use a fraction in (0, 1]", in.where("rotary-percent")));
    m.rotary_fraction = r;
  }
  m.qk_norm = in.has("qk-layernorm");
  m.tied_embeddings = !in.has("untie-embeddings-and-output-weights");

  // Megatron's dropout defaults are 0.1; hidden_dropout also drops the embeddings' output.
  ACTMEM_TRY(hidden_p, real_or(in, "hidden-dropout", 0.1));
  ACTMEM_TRY(attention_p, real_or(in, "attention-dropout", 0.1));
  m.hidden_dropout = m.embedding_dropout = hidden_p;
  m.attention_dropout = attention_p;
  m.dtype = in.has("bf16") ? DType::kBF16 : in.has("fp16") ? DType::kFP16 : DType::kFP32;

  notes.push_back(fmt::format("{} ({}), {} MLP, {} positions ({}), {}", norm,
                              in.has("normalization") ? in.where("normalization") : "Megatron's default",
                              m.gated_mlp ? "SwiGLU" : m.act == ActFn::kSquaredRelu ? "squared-ReLU" : "GeLU", pos,
                              in.has("position-embedding-type") ? in.where("position-embedding-type")
                                                                : in.has("use-rotary-position-embeddings")
                                                                    ? in.where("use-rotary-position-embeddings")
                                                                    : "Megatron's default",
                              bias ? "linear biases" : m.qkv_bias ? "q/k/v biases only" : "no linear biases"));
  return {};
}

/// --multi-latent-attention with MLATransformerConfig's dims (arguments.py defaults: q_lora_rank
/// None, kv_lora_rank 32, qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128).
Expected<void> read_mla(const Reader& in, ModelSpec& m, Notes& notes) {
  if (!in.has("multi-latent-attention")) return {};
  const std::string where = in.where("multi-latent-attention");
  if (in.has("group-query-attention"))
    return config_error(fmt::format("{}: Megatron refuses --group-query-attention with multi-latent attention", where));
  // gpt_layer_specs.py: q_layernorm / kv_layernorm are TENorm only with --qk-layernorm (else IdentityOp).
  if (!in.has("qk-layernorm"))
    return config_error(fmt::format("{}: MLA without its latent norms (no --qk-layernorm) is not modelled; give the "
                                    "model with --model",
                                    where));
  if (m.qkv_bias || m.o_bias)
    return config_error(fmt::format("{}: MLA with linear biases is not modelled; add --disable-bias-linear or give "
                                    "the model with --model",
                                    where));
  MlaSpec mla;
  ACTMEM_TRY(q_rank, count_or(in, "q-lora-rank", 0));
  ACTMEM_TRY(kv_rank, count_or(in, "kv-lora-rank", 32));
  ACTMEM_TRY(nope, count_or(in, "qk-head-dim", 128));
  ACTMEM_TRY(rope, count_or(in, "qk-pos-emb-head-dim", 64));
  ACTMEM_TRY(v, count_or(in, "v-head-dim", 128));
  mla = {.q_lora_rank = q_rank, .kv_lora_rank = kv_rank, .qk_nope_head_dim = nope, .qk_rope_head_dim = rope,
         .v_head_dim = v};
  m.mla = mla;
  m.head_dim = mla.qk_head_dim();
  m.num_kv_heads = m.num_heads;
  m.qk_norm = false;  // the latent norms are MLA's own (q_a / kv_a layernorm)
  notes.push_back(fmt::format("{}: q rank {}, kv rank {}, qk {} + rope {}, v {}", where,
                              q_rank > 0 ? std::to_string(q_rank) : "none (q from h)", kv_rank, nope, rope, v));
  return {};
}

/// --num-experts with its router, expert and shared-expert sizes, and which layers have experts.
Expected<void> read_moe(const Reader& in, ModelSpec& m, int64_t ffn, Notes& notes) {
  for (LayerSpec& l : m.layers) l.ffn = ffn;
  ACTMEM_TRY(experts, count_or(in, "num-experts", 0));
  if (experts == 0) return {};  // validate_args: 0 means None, no MoE
  MoeSpec moe;
  moe.num_experts = experts;
  ACTMEM_TRY(topk, count_or(in, "moe-router-topk", 2));
  if (topk < 1 || topk > experts)
    return config_error(fmt::format("{}: top-{} of {} experts; use 1..{}",
                                    in.has("moe-router-topk") ? in.where("moe-router-topk") : in.where("num-experts"),
                                    topk, experts, experts));
  moe.experts_per_token = topk;
  ACTMEM_TRY(expert_ffn, count_or(in, "moe-ffn-hidden-size", ffn));  // validate_args: ffn_hidden_size
  moe.expert_ffn = expert_ffn;
  ACTMEM_TRY(shared, count_or(in, "moe-shared-expert-intermediate-size", 0));
  moe.shared_ffn = shared;
  moe.shared_expert_gate = shared > 0 && in.has("moe-shared-expert-gate");  // only with a shared expert
  moe.normalize_topk = !in.has("moe-router-pre-softmax");  // pre-softmax: softmax over E, no renormalization
  std::vector<bool> pattern(m.layers.size(), true);
  if (in.has("moe-layer-freq")) {
    ACTMEM_TRY(t, in.text("moe-layer-freq"));
    auto p = megatron::moe_layer_pattern(t, m.num_layers);
    if (!p) return config_error(fmt::format("{}: {}", in.where("moe-layer-freq"), p.error().message));
    pattern = *p;
  }
  int64_t moe_layers = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    m.layers[i].moe = pattern[i];
    if (pattern[i]) m.layers[i].ffn = 0;  // a MoE layer has no dense MLP
    moe_layers += pattern[i] ? 1 : 0;
  }
  if (moe_layers > 0) m.moe = moe;
  notes.push_back(fmt::format("{} experts of {}, top-{}{}, {} of {} layers ({}){}", experts, expert_ffn, topk,
                              moe.normalize_topk ? "" : " pre-softmax", moe_layers, m.num_layers,
                              in.has("moe-layer-freq") ? in.where("moe-layer-freq") : "every layer",
                              shared > 0 ? fmt::format(", shared expert {}{}", shared,
                                                       moe.shared_expert_gate ? " with its gate" : "")
                                         : ""));
  return {};
}

/// The model_type: the HF family whose parts these are exactly, as this reader mapped such lines
/// before it composed parts (gpt2: GeLU, learned positions, biases, MHA; llama / mixtral: SwiGLU,
/// RoPE, no biases, every layer MoE without a shared expert); for those the weights keep that
/// family's HF layout (fused_qkv, fused_gate_up), which --framework hf runs. Anything else is
/// "megatron_gpt", with Megatron's fused linear_qkv and linear_fc1.
void label(const Reader& in, ModelSpec& m, Notes& notes) {
  const bool plain = !m.qk_norm && !m.mla && m.act != ActFn::kSquaredRelu;
  const bool gpt2 = plain && !m.gated_mlp && m.learned_positions && m.qkv_bias && m.o_bias &&
                    m.num_kv_heads == m.num_heads && m.head_dim * m.num_heads == m.hidden && !m.moe;
  bool rope_everywhere = !m.learned_positions;
  for (const LayerSpec& l : m.layers) rope_everywhere = rope_everywhere && !l.no_rope;
  const bool pos_rope = in.has("position-embedding-type") ? *in.text("position-embedding-type") == "rope" : true;
  const bool llama = plain && m.gated_mlp && rope_everywhere && pos_rope && !m.qkv_bias && !m.o_bias;
  const bool mixtral = llama && m.moe && m.num_moe_layers() == m.num_layers && m.moe->shared_ffn == 0 &&
                       m.moe->normalize_topk;
  const bool hf_llama_layout = llama && (!m.moe || mixtral);
  if (gpt2) {
    m.model_type = "gpt2";
    notes.push_back("GPT (GeLU, learned positions, biases): HF gpt2 layout");
  } else if (hf_llama_layout) {
    m.model_type = m.moe ? "mixtral" : "llama";
    notes.push_back(m.moe ? "Llama (SwiGLU, RoPE, no biases) with experts in every layer: HF mixtral layout"
                          : "Llama (SwiGLU, RoPE, no biases): HF llama layout");
  } else {
    m.model_type = "megatron_gpt";
    notes.push_back(fmt::format("Megatron GPTModel from its switches ({} KV heads{}{}): model_type megatron_gpt",
                                m.num_kv_heads, m.qk_norm ? ", qk-layernorm" : "", m.mla ? ", MLA" : ""));
  }
  m.fused_qkv = !hf_llama_layout;
  m.fused_gate_up = m.gated_mlp && !hf_llama_layout;
}

}  // namespace

Expected<void> read_megatron_model(const Reader& in, TrainingConfig& cfg) {
  if (!in.has("hidden-size")) return {};  // a layout only (--num-layers may serve --num-layers-per-virtual-...)
  for (const char* need : {"num-layers", "hidden-size", "num-attention-heads"})
    if (!in.has(need))
      return config_error(fmt::format("{}: --{} is missing; the arguments describe a model only in part (add it, or "
                                      "give the model with --model)",
                                      in.name(), need));
  ModelSpec m;
  m.name = in.name();
  int64_t ffn = 0;
  Notes& notes = cfg.model_from;
  if (auto r = read_sizes(in, m, ffn, notes); !r) return r.error();
  if (auto r = read_block(in, m, notes); !r) return r.error();
  if (auto r = read_mla(in, m, notes); !r) return r.error();
  if (auto r = read_moe(in, m, ffn, notes); !r) return r.error();
  label(in, m, notes);
  if (auto ok = m.validate(); !ok) return config_error(fmt::format("{}: {}", in.name(), ok.error().message));
  try {  // every later product of sizes must fit in int64; counting the parameters once proves it
    (void)count_params(m).total();
  } catch (const OverflowError&) {
    return config_error(fmt::format("{}: the model's parameter count overflows int64; check the sizes", in.name()));
  }
  cfg.model = std::move(m);
  return {};
}

}  // namespace actmem
