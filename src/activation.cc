// Activation memory, tensor by tensor (shared/spec/activation-rules.md).
//
// Flow: ModelSpec → one op graph per distinct layer shape, each op declaring the storages it
// creates and which of them it saves (a view saves its whole base storage) → the framework's save
// rules (a table, kRules) pick what each op keeps → recomputation and the pipeline schedule choose
// which layers keep what → storage-level dedup gives bytes.
//
// Shapes are built per GPU: tensor-parallel dims (heads, FFN, vocab) are divided by tp when the
// graph is built, the sequence by cp everywhere and, under sequence parallelism, by tp as well in
// the tensors that TP would otherwise replicate (norms, residual-stream inputs of linears, dropout
// masks). Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
// (Eq. 1, Table 2) is the reference for the Megatron rules and their TP/SP/selective variants.
//
// Formula symbols: s sequence, b micro-batch, h hidden, a heads, kv KV heads, d head dim, f FFN
// size, V vocab, E experts, k experts per token, t tensor-parallel degree, cp context-parallel
// degree, ep expert-parallel degree; the leading number of a formula is bytes per element.
#include "activation.h"

#include <algorithm>
#include <array>
#include <cmath>  // std::ceil for expert capacity
#include <string_view>

#include <fmt/format.h>

#include "text_table.h"  // group_digits

namespace actmem {

// ---------------------------------------------------------------------------------------------
// Names.

namespace {

template <typename E>
struct Named {
  E value;
  const char* name;
};

constexpr std::array<Named<Framework>, 2> kFrameworkNames{{{Framework::kHF, "hf"}, {Framework::kMegatron, "megatron"}}};
constexpr std::array<Named<AttentionImpl>, 3> kAttentionNames{
    {{AttentionImpl::kEager, "eager"}, {AttentionImpl::kSdpa, "sdpa"}, {AttentionImpl::kFlash, "flash"}}};
constexpr std::array<Named<Recompute>, 3> kRecomputeNames{
    {{Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}}};

template <typename E, size_t N>
Expected<E> parse_named(const std::string& text, const std::array<Named<E>, N>& table, const char* what) {
  std::string valid;
  for (const auto& row : table) {
    if (text == row.name) return row.value;
    valid += valid.empty() ? "" : ", ";
    valid += row.name;
  }
  return Error{fmt::format("unknown {} '{}'; valid values: {}", what, text, valid)};
}

template <typename E, size_t N>
const char* name_of(E value, const std::array<Named<E>, N>& table) {
  for (const auto& row : table)
    if (row.value == value) return row.name;
  return "?";
}

}  // namespace

Expected<Framework> parse_framework(const std::string& text) { return parse_named(text, kFrameworkNames, "framework"); }
Expected<AttentionImpl> parse_attention(const std::string& text) {
  return parse_named(text, kAttentionNames, "attention implementation");
}
Expected<Recompute> parse_recompute(const std::string& text) {
  return parse_named(text, kRecomputeNames, "recomputation");
}
const char* framework_name(Framework f) { return name_of(f, kFrameworkNames); }
const char* attention_name(AttentionImpl a) { return name_of(a, kAttentionNames); }
const char* recompute_name(Recompute r) { return name_of(r, kRecomputeNames); }

namespace {

// ---------------------------------------------------------------------------------------------
// Framework save rules: data, one row per framework (activation-rules.md, the two tables).

/// What a normalization keeps for backward.
struct NormSaves {
  bool input;       // the input itself (fused kernels, nn.LayerNorm)
  bool input_fp32;  // an fp32 copy of the input: HF RMSNorm's x.to(float32) (the input itself when already fp32)
  bool mean;        // LayerNorm's fp32 mean (RMSNorm has none)
  bool rstd;        // fp32 1/std per row
  bool normalized;  // x·rstd cast back to the activation dtype, saved by the `weight *` multiply
};

/// HF eager attention: torch.matmul folds (b, heads) with reshape, so a q, k or v that is a strided
/// view (a slice of a fused QKV output, a transposed projection output) is copied and the copy is
/// what bmm keeps; Megatron's bmm on [s, b·a, d] views keeps the views (and their whole storage).

/// What the MoE block keeps beyond its experts' MLPs (HF: the MixtralSparseMoeBlock loop, verified
/// in validation/EXPECTED.md; Megatron: permute/unpermute, not yet measured).
struct MoeSaves {
  bool topk_row_sums;     // the in-place `weights /= weights.sum(-1)` keeps the fp32 row sums
  bool topk_weights_kept_by_normalization;  // only `/=` keeps the fp32 top-k weights (topk keeps indices)
  int index_bytes;        // per routed row: torch.where's (row, token) pair is one (n, 2) int64 storage
  bool index_add_source;  // index_add_ keeps its source, the weighted expert output
};

struct FrameworkRules {
  Framework framework;
  NormSaves rms_norm;
  NormSaves layer_norm;
  bool fused_qkv;           // always one QKV linear (q, k, v are views of its output)
  bool fused_gate_up;       // always one [gate|up] fc1
  bool fused_gated_kernel;  // SwiGLU as one kernel saving only its input (else act and mul save theirs)
  bool rope_saves_cos_sin;  // q·cos + rotate_half(q)·sin saves cos and sin (shared across layers)
  bool python_gelu_new;     // gelu_new written as its Python formula: saves x, tanh, 0.5·x, 1 + tanh
  bool softmax_fp32;        // eager softmax(dtype=float32) saves an fp32 output (unless the model says otherwise)
  bool eager_matmul_copies_views;  // eager QKᵀ / AV keep copies of strided q, k, v views, not their storage
  bool flash_pads_v;        // MLA with flash_attention_2: v padded to the q/k head dim (HF DeepSeek-V3; not sdpa)
  const char* loss_name;    // what the loss keeps: HF log_softmax, Megatron's fused softmax
  MoeSaves moe;
  bool embedding_dropout_is_hidden;  // Megatron applies hidden_dropout to the embeddings
  bool position_ids_batched;         // Megatron collates position ids as (b, s); HF passes (1, s)
};

constexpr std::array<FrameworkRules, 2> kRules{{
    // HuggingFace transformers, eager PyTorch op by op (modeling_llama.py, modeling_gpt2.py, ...).
    {Framework::kHF,
     /*rms_norm=*/{false, true, false, true, true},
     /*layer_norm=*/{true, false, true, true, false},
     /*fused_qkv=*/false, /*fused_gate_up=*/false, /*fused_gated_kernel=*/false,
     /*rope_saves_cos_sin=*/true, /*python_gelu_new=*/true, /*softmax_fp32=*/true,
     /*eager_matmul_copies_views=*/true, /*flash_pads_v=*/true, "loss.log_softmax",
     /*moe=*/{true, true, 16, true}, /*embedding_dropout_is_hidden=*/false, /*position_ids_batched=*/false},
    // Megatron-LM with fused kernels (TransformerEngine norms, fused RoPE, bias-SwiGLU/GeLU).
    {Framework::kMegatron,
     /*rms_norm=*/{true, false, false, true, false},
     /*layer_norm=*/{true, false, true, true, false},
     /*fused_qkv=*/true, /*fused_gate_up=*/true, /*fused_gated_kernel=*/true,
     /*rope_saves_cos_sin=*/false, /*python_gelu_new=*/false, /*softmax_fp32=*/false,
     /*eager_matmul_copies_views=*/false, /*flash_pads_v=*/false, "loss.softmax",
     /*moe=*/{false, false, 8, false}, /*embedding_dropout_is_hidden=*/true, /*position_ids_batched=*/true},
}};

const FrameworkRules& rules_for(Framework f) {
  for (const auto& r : kRules)
    if (r.framework == f) return r;
  return kRules[0];
}

/// HF modeling-file quirks that differ by model_type (a row per family that deviates from Llama's;
/// validation/EXPECTED.md verifies each against the measured saved tensors).
struct HfModelTraits {
  std::string_view model_type;
  bool softmax_in_activation_dtype = false;  // GPT-2: nn.functional.softmax without dtype=float32
  // GemmaRMSNorm: `(x·rsqrt).float() * (1.0 + weight.float())`, then cast: the multiply keeps the
  // fp32 normalized x (instead of Llama's activation-dtype one) and the fp32 (1 + w) vector.
  bool rms_norm_scale_fp32 = false;
  // DeepseekV3TopkRouter: `F.linear(x.type(float32), weight.type(float32))` keeps fp32 copies of its
  // input (T·h) and of the router weight (E·h: a new tensor, not the parameter) unless the
  // activations already are fp32 (then both are the originals: the norm output, the parameter).
  bool router_fp32 = false;
  // DeepseekV3MoE.moe: the fp32 routing weights are not cast back, so `expert_out * weight` is
  // promoted to fp32: the weight column (k·T) and the weighted output kept by index_add_ (k·T·h)
  // are fp32 (Mixtral / Qwen MoE cast the weights to the activation dtype first).
  bool moe_combine_fp32 = false;
};
constexpr std::array<HfModelTraits, 4> kHfTraits{{
    {.model_type = "gpt2", .softmax_in_activation_dtype = true},
    {.model_type = "gemma", .rms_norm_scale_fp32 = true},
    {.model_type = "gemma2", .rms_norm_scale_fp32 = true},
    {.model_type = "deepseek_v3", .router_fp32 = true, .moe_combine_fp32 = true},
}};

HfModelTraits hf_traits(const ModelSpec& m) {
  for (const auto& t : kHfTraits)
    if (t.model_type == m.model_type) return t;
  return HfModelTraits{};
}

// ---------------------------------------------------------------------------------------------
// The op graph: storages, and which ops save them.

enum class Group { kAttention, kMlp, kNorms, kMoe, kEmbedding, kHeadLoss, kShared };
constexpr std::array<const char*, 7> kGroupNames{"attention", "mlp", "norms", "moe", "embedding", "head+loss", "shared"};
const char* group_name(Group g) { return kGroupNames[static_cast<size_t>(g)]; }

struct Storage {
  std::string name;
  Group group;
  const char* op;
  std::vector<Factor> shape;  // elements, per GPU
  DType dtype;
  std::string note;
  bool saved_outside_core = false;  // saved by an op that selective recomputation does not rerun
  bool saved_by_core = false;       // saved inside core attention (QKᵀ, softmax, dropout, AV, flash)
  bool core_input = false;          // q, k, v as core attention receives them (kept by selective)

  int64_t elements() const {
    int64_t n = 1;
    for (const auto& f : shape) n = checked_mul(n, f.value);
    return n;
  }
  Bytes bytes() const { return Bytes{checked_mul(elements(), dtype_bytes(dtype))}; }
  bool saved(Recompute policy) const {
    if (policy == Recompute::kSelective) return saved_outside_core || core_input;
    return saved_outside_core || saved_by_core;
  }
};

struct Graph {
  std::vector<Storage> storages;

  int add(std::string name, Group group, const char* op, std::vector<Factor> shape, DType dtype,
          std::string note = {}) {
    storages.push_back(Storage{std::move(name), group, op, std::move(shape), dtype, std::move(note)});
    return static_cast<int>(storages.size()) - 1;
  }
  void save(int id) { storages[static_cast<size_t>(id)].saved_outside_core = true; }
  void save_core(int id) { storages[static_cast<size_t>(id)].saved_by_core = true; }
  Storage& at(int id) { return storages[static_cast<size_t>(id)]; }
  Bytes bytes(Recompute policy) const {
    Bytes sum{0};
    for (const auto& st : storages)
      if (st.saved(policy)) sum += st.bytes();
    return sum;
  }
};

std::vector<Factor> cat(std::vector<Factor> a, std::initializer_list<Factor> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// A factor divided by a parallel degree: "a" → "a/t" with the per-rank value.
Factor split(std::string symbol, int64_t value, const char* by, int64_t degree) {
  if (degree == 1) return {std::move(symbol), value};
  const bool compound = symbol.find_first_of("+·") != std::string::npos;
  return {compound ? fmt::format("({})/{}", symbol, by) : fmt::format("{}/{}", symbol, by), value / degree};
}

// ---------------------------------------------------------------------------------------------
// Context of one estimate: the model, the rules, and the per-GPU dimensions.

struct Context {
  const ModelSpec& model;
  const ActivationOptions& options;
  const FrameworkRules& rules;
  DType e;  // activation dtype
  double hidden_p;
  double attention_p;
  bool flash;
  bool softmax_fp32;
  bool norm_scale_fp32;  // HF Gemma RMSNorm (hf_traits)
  HfModelTraits hf;      // the model's HF quirks; the defaults (none) under other frameworks

  Factor s_rep;   // sequence of a tensor TP replicates: s, s/cp, and /t under SP
  Factor s_tp;    // sequence of a tensor TP splits (and of the gathered LM-head input): s or s/cp
  Factor s_key;   // key length of an s×s score tensor
  Factor b;
  Factor h;
  Factor q_heads;   // a/t
  Factor kv_heads;  // kv/t, or 1 when kv < t (replicated KV heads)
  Factor d;
  Factor vocab;     // V/t (vocabulary-parallel LM head and loss)
  int64_t tp;
  int64_t seq_local;  // s/cp
};

// ---------------------------------------------------------------------------------------------
// Op builders. Each returns the id of the storage it produces; saves are declared where the op
// that keeps them runs (a linear keeps its input, an activation its input, ...).

/// RMSNorm / LayerNorm over `width` per row. `input` may be a view: saving it keeps its base.
int norm(Graph& g, const Context& c, int input, const std::vector<Factor>& rows, const Factor& width,
         const std::string& prefix, Group group) {
  const bool rms = c.model.norm == NormKind::kRMSNorm;
  const NormSaves& keep = rms ? c.rules.rms_norm : c.rules.layer_norm;
  const char* op = rms ? "RMSNorm" : "LayerNorm";
  const auto full = cat(rows, {width});
  if (keep.input) g.save(input);
  if (keep.input_fp32) {
    if (c.e == DType::kFP32)
      g.save(input);  // x.to(float32) is a no-op: the input itself is what pow() keeps
    else
      g.save(g.add(prefix + ".input_fp32", group, op, full, DType::kFP32, "x.to(float32) kept by pow(2)"));
  }
  if (keep.mean && !rms) g.save(g.add(prefix + ".mean", group, op, rows, DType::kFP32));
  if (keep.rstd) g.save(g.add(prefix + ".rstd", group, op, rows, DType::kFP32));
  if (keep.normalized && rms && c.norm_scale_fp32) {
    // Gemma: (x·rstd) * (1 + w) in fp32 keeps both factors; with e = 4 the product is the output.
    g.save(g.add(prefix + ".normalized", group, op, full, DType::kFP32, "x·rstd in fp32, kept by (1 + w)·x"));
    g.save(g.add(prefix + ".one_plus_weight", group, op, {width}, DType::kFP32,
                 "1 + weight.float(): a new vector (not the parameter), kept by the multiply"));
  } else if (keep.normalized) {
    g.save(g.add(prefix + ".normalized", group, op, full, c.e, "x·rstd in the activation dtype, kept by weight·x"));
  }
  return g.add(prefix + ".out", group, op, full, c.e);
}

/// nn.Linear / a Megatron parallel linear: keeps its input.
int linear(Graph& g, const Context& c, int input, std::vector<Factor> out_shape, std::string name, Group group) {
  g.save(input);
  return g.add(std::move(name), group, "Linear", std::move(out_shape), c.e);
}

/// Dropout with probability p: a bool mask; the output is kept only if the next op keeps it.
int dropout(Graph& g, int input, double p, const std::vector<Factor>& shape, const std::string& prefix, Group group,
            DType e) {
  if (p <= 0.0) return input;
  g.save(g.add(prefix + ".dropout_mask", group, "dropout", shape, DType::kBool));
  return g.add(prefix + ".dropout_out", group, "dropout", shape, e);
}

/// The MLP activation on `input` of `shape`; returns its output.
int activation(Graph& g, const Context& c, int input, const std::vector<Factor>& shape, const std::string& prefix,
               Group group) {
  const ActFn act = c.model.act;
  if (act == ActFn::kRelu) {  // relu's backward reads its output
    int out = g.add(prefix + ".act_out", group, "relu", shape, c.e);
    g.save(out);
    return out;
  }
  if (act == ActFn::kGeluNew && c.rules.python_gelu_new) {
    // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): pow keeps x, tanh its output, the final mul both factors.
    g.save(input);
    g.save(g.add(prefix + ".gelu_tanh", group, "gelu_new (Python)", shape, c.e));
    g.save(g.add(prefix + ".gelu_half_x", group, "gelu_new (Python)", shape, c.e, "0.5·x"));
    g.save(g.add(prefix + ".gelu_one_plus_tanh", group, "gelu_new (Python)", shape, c.e, "1 + tanh(..)"));
    return g.add(prefix + ".act_out", group, "gelu_new (Python)", shape, c.e);
  }
  g.save(input);  // silu / gelu / gelu-tanh keep their input
  return g.add(prefix + ".act_out", group, act == ActFn::kSilu ? "silu" : "gelu", shape, c.e);
}

/// Dense MLP (or one expert bank) on `rows` tokens with intermediate `ffn`; returns down's output.
int mlp(Graph& g, const Context& c, int input, const std::vector<Factor>& rows, const Factor& ffn,
        const std::string& prefix, Group group) {
  const auto f_shape = cat(rows, {ffn});
  int product = -1;
  if (c.model.gated_mlp) {
    const bool fused = c.model.fused_gate_up || c.rules.fused_gate_up;
    int gate = -1;
    int up = -1;
    if (fused) {
      gate = up = linear(g, c, input, cat(rows, {Factor{"2·" + ffn.symbol, 2 * ffn.value}}), prefix + ".gate_up",
                         group);
    } else {
      gate = linear(g, c, input, f_shape, prefix + ".gate", group);
      up = linear(g, c, input, f_shape, prefix + ".up", group);
    }
    if (c.rules.fused_gated_kernel) {
      g.save(gate);  // the fused kernel keeps only its input, [gate|up]
      product = g.add(prefix + ".act_mul_up", group, "fused SwiGLU", f_shape, c.e);
    } else {
      int act_out = activation(g, c, gate, f_shape, prefix, group);
      g.save(act_out);  // act(gate) * up keeps both factors
      g.save(up);
      product = g.add(prefix + ".act_mul_up", group, "mul", f_shape, c.e);
    }
  } else {
    int fc1 = linear(g, c, input, f_shape, prefix + ".fc1", group);
    product = activation(g, c, fc1, f_shape, prefix, group);
  }
  return linear(g, c, product, cat(rows, {c.h}), prefix + ".down", group);
}

/// Core attention: QKᵀ, softmax, dropout, AV (eager) or one flash kernel. k and v carry
/// `kv_heads` heads; q carries c.q_heads. Returns the context tensor that the output projection reads.
int core_attention(Graph& g, const Context& c, int q, int k, int v, const Factor& kv_heads, const Factor& d_qk,
                   const Factor& d_v) {
  const Group grp = Group::kAttention;
  for (int id : {q, k, v}) g.at(id).core_input = true;
  const auto q_shape = std::vector<Factor>{c.s_tp, c.b, c.q_heads, d_qk};
  if (c.flash) {
    for (int id : {q, k, v}) g.save_core(id);
    int out = g.add("attn.flash_out", grp, "flash attention", {c.s_tp, c.b, c.q_heads, d_v}, c.e);
    g.save_core(out);
    g.save_core(g.add("attn.logsumexp", grp, "flash attention", {c.b, c.q_heads, c.s_tp}, DType::kFP32));
    return out;
  }
  int q_full = q;
  int k_full = k;
  int v_full = v;
  const auto v_shape = std::vector<Factor>{c.s_tp, c.b, c.q_heads, d_v};
  if (kv_heads.value < c.q_heads.value) {  // GQA/MQA: k and v are copied out to every query head
    k_full = g.add("attn.k_repeated", grp, "repeat_kv", q_shape, c.e, "copy of k at all heads");
    v_full = g.add("attn.v_repeated", grp, "repeat_kv", v_shape, c.e, "copy of v at all heads");
  } else if (c.rules.eager_matmul_copies_views) {
    // v is a strided view (transposed projection output, or a slice of a fused QKV output): matmul's
    // reshape copies it. k and q are fresh RoPE outputs unless they are views of the fused output too.
    v_full = g.add("attn.v_copy", grp, "matmul reshape", v_shape, c.e, "copy of the strided v view");
    if (k == v) k_full = g.add("attn.k_copy", grp, "matmul reshape", q_shape, c.e, "copy of the strided k view");
  }
  if (c.rules.eager_matmul_copies_views && q == v)
    q_full = g.add("attn.q_copy", grp, "matmul reshape", q_shape, c.e, "copy of the strided q view");
  g.save_core(q_full);  // QKᵀ keeps both operands
  g.save_core(k_full);
  const std::vector<Factor> scores{c.b, c.q_heads, c.s_tp, c.s_key};
  if (c.model.attn_logit_softcap > 0.0 && c.rules.framework == Framework::kHF)
    g.save_core(g.add("attn.softcap_tanh", grp, "tanh", scores, c.e, "attn_logit_softcapping"));
  const DType softmax_dtype = c.softmax_fp32 ? DType::kFP32 : c.e;
  int softmax = g.add("attn.softmax", grp, "softmax", scores, softmax_dtype);
  g.save_core(softmax);  // softmax's backward reads its output
  int probs = softmax_dtype == c.e ? softmax : g.add("attn.probs", grp, "to(dtype)", scores, c.e);
  if (c.attention_p > 0.0) {
    g.save_core(g.add("attn.dropout_mask", grp, "dropout", scores, DType::kBool));
    probs = g.add("attn.probs_dropout", grp, "dropout", scores, c.e);
  }
  g.save_core(probs);  // AV keeps both operands
  g.save_core(v_full);
  return g.add("attn.context", grp, "AV", {c.s_tp, c.b, c.q_heads, d_v}, c.e,
               "heads transposed back and made contiguous for the output projection");
}

/// Multi-head or grouped-query attention with optional RoPE and q/k norms.
int standard_attention(Graph& g, const Context& c, int x) {
  const Group grp = Group::kAttention;
  const auto& m = c.model;
  int q = -1;
  int k = -1;
  int v = -1;
  if (m.fused_qkv || c.rules.fused_qkv) {
    const Factor heads{fmt::format("({}+2·{})", c.q_heads.symbol, c.kv_heads.symbol),
                       c.q_heads.value + 2 * c.kv_heads.value};
    q = k = v = linear(g, c, x, {c.s_tp, c.b, heads, c.d}, "attn.qkv", grp);
    g.at(q).note = "q, k and v are views of this one output: keeping any keeps all of it";
  } else {
    q = linear(g, c, x, {c.s_tp, c.b, c.q_heads, c.d}, "attn.q", grp);
    k = linear(g, c, x, {c.s_tp, c.b, c.kv_heads, c.d}, "attn.k", grp);
    v = linear(g, c, x, {c.s_tp, c.b, c.kv_heads, c.d}, "attn.v", grp);
  }
  if (m.qk_norm) {
    q = norm(g, c, q, {c.s_tp, c.b, c.q_heads}, c.d, "attn.q_norm", Group::kNorms);
    k = norm(g, c, k, {c.s_tp, c.b, c.kv_heads}, c.d, "attn.k_norm", Group::kNorms);
  }
  if (!m.learned_positions) {  // RoPE: q and k become new tensors; HF keeps only cos/sin (shared)
    const char* op = c.rules.rope_saves_cos_sin ? "RoPE" : "fused RoPE";
    q = g.add("attn.q_rope", grp, op, {c.s_tp, c.b, c.q_heads, c.d}, c.e);
    k = g.add("attn.k_rope", grp, op, {c.s_tp, c.b, c.kv_heads, c.d}, c.e);
  }
  return core_attention(g, c, q, k, v, c.kv_heads, c.d, c.d);
}

/// DeepSeek multi-head latent attention (modeling_deepseek_v3.py; Megatron multi_latent_attention.py).
int latent_attention(Graph& g, const Context& c, int x) {
  const Group grp = Group::kAttention;
  const MlaSpec& mla = *c.model.mla;
  const Factor qk{"dqk", mla.qk_head_dim()};
  const Factor dv{"dv", mla.v_head_dim};
  const std::vector<Factor> rows{c.s_rep, c.b};  // the down projections are replicated across TP
  int q_full = -1;
  if (mla.q_lora_rank > 0) {
    int qa = linear(g, c, x, cat(rows, {Factor{"rq", mla.q_lora_rank}}), "attn.q_a_proj", grp);
    int qn = norm(g, c, qa, rows, Factor{"rq", mla.q_lora_rank}, "attn.q_a_norm", Group::kNorms);
    q_full = linear(g, c, qn, {c.s_tp, c.b, c.q_heads, qk}, "attn.q_b_proj", grp);
  } else {
    q_full = linear(g, c, x, {c.s_tp, c.b, c.q_heads, qk}, "attn.q_proj", grp);
  }
  (void)q_full;  // split into nope/rope parts and re-concatenated: not kept itself
  int ckv = linear(g, c, x, cat(rows, {Factor{"(rkv+dr)", mla.kv_lora_rank + mla.qk_rope_head_dim}}),
                   "attn.kv_a_proj_with_mqa", grp);
  g.at(ckv).note = "the compressed kv and the shared rope key; the norm reads a view of it";
  int kvn = norm(g, c, ckv, rows, Factor{"rkv", mla.kv_lora_rank}, "attn.kv_a_norm", Group::kNorms);
  int kvb = linear(g, c, kvn, {c.s_tp, c.b, c.q_heads, Factor{"(dn+dv)", mla.qk_nope_head_dim + mla.v_head_dim}},
                   "attn.kv_b_proj", grp);
  g.at(kvb).note = "k_nope and v are views of it";
  int query = g.add("attn.q", grp, "cat(q_nope, rope(q_rope))", {c.s_tp, c.b, c.q_heads, qk}, c.e);
  int key = g.add("attn.k", grp, "cat(k_nope, rope(k_rope))", {c.s_tp, c.b, c.q_heads, qk}, c.e);
  int value = kvb;
  Factor v_dim = dv;
  // modeling_deepseek_v3.py pads only under flash_attention_2; sdpa takes v at its own head dim.
  const bool pad = c.options.attention == AttentionImpl::kFlash && c.rules.flash_pads_v &&
                   mla.qk_head_dim() != mla.v_head_dim;
  if (pad) {
    value = g.add("attn.v_padded", grp, "pad", {c.s_tp, c.b, c.q_heads, qk}, c.e, "v padded to the q/k head dim");
    v_dim = qk;
  }
  int context = core_attention(g, c, query, key, value, c.q_heads, qk, v_dim);
  if (pad)  // attn_output[..., :dv].reshape(..).contiguous(): a copy
    context = g.add("attn.context", grp, "slice+contiguous", {c.s_tp, c.b, c.q_heads, dv}, c.e);
  return context;
}

/// Routed experts (+ shared experts) on the normed input `x`; returns the combined output.
int moe(Graph& g, const Context& c, int x) {
  const Group grp = Group::kMoe;
  const MoeSpec& spec = *c.model.moe;
  const std::vector<Factor> tokens{c.s_rep, c.b};
  const Factor experts{"E", spec.num_experts};
  const Factor top_k{"k", spec.experts_per_token};
  linear(g, c, x, cat(tokens, {experts}), "moe.router_logits", grp);
  if (c.hf.router_fp32 && c.e != DType::kFP32) {
    g.save(g.add("moe.router_input_fp32", grp, "router", cat(tokens, {c.h}), DType::kFP32, "x.float() for the gate"));
    g.save(g.add("moe.router_weight_fp32", grp, "router", {experts, c.h}, DType::kFP32,
                 "weight.float(): a new copy of the gate parameter, kept by F.linear"));
  }
  g.save(g.add("moe.router_probs", grp, "router", cat(tokens, {experts}), DType::kFP32,
               "fp32 softmax/sigmoid scores, kept by their backward"));
  g.save(g.add("moe.topk_index", grp, "top-k", cat(tokens, {top_k}), DType::kINT64));
  if (spec.normalize_topk || !c.rules.moe.topk_weights_kept_by_normalization)
    g.save(g.add("moe.topk_weights", grp, "top-k", cat(tokens, {top_k}), DType::kFP32));
  if (c.rules.moe.topk_row_sums && spec.normalize_topk)
    g.save(g.add("moe.topk_row_sums", grp, "div_", tokens, DType::kFP32, "weights /= weights.sum(-1) keeps the sums"));

  // Rows each GPU's experts process: k·s·b/ep with balanced routing (dropless), or the padded
  // capacity E·⌈cf·k·s·b/E⌉/ep with a capacity factor.
  const int64_t token_rows = checked_mul(checked_mul(spec.experts_per_token, c.seq_local), c.b.value);
  Factor rows_factor;
  const int64_t ep = c.options.parallel.ep;
  if (spec.capacity_factor > 0.0) {
    const auto cap = static_cast<int64_t>(
        std::ceil(spec.capacity_factor * static_cast<double>(token_rows) / static_cast<double>(spec.num_experts)));
    rows_factor = {ep > 1 ? "E·C/ep" : "E·C", checked_mul(cap, spec.num_experts) / ep};
  } else {
    rows_factor = {ep > 1 ? "k·s·b/ep" : "k·s·b", ceil_div(token_rows, ep)};
  }
  if (c.options.parallel.cp > 1) rows_factor.symbol = rows_factor.symbol + " (s/cp)";
  const std::vector<Factor> rows{rows_factor};
  int dispatched = g.add("moe.dispatched", grp, "dispatch", cat(rows, {c.h}), c.e, "tokens gathered per expert");
  const auto index_shape =
      c.rules.moe.index_bytes == 16 ? cat(rows, {Factor{"2", 2}}) : rows;  // (row, token) pairs
  g.save(g.add("moe.token_index", grp, "dispatch", index_shape, DType::kINT64));
  const Factor expert_ffn = split("fe", spec.expert_ffn, "t", c.tp);
  int expert_out = mlp(g, c, dispatched, rows, expert_ffn, "moe.experts", grp);
  g.save(expert_out);  // scaled by its routing weight: the mul keeps both
  const DType combine = c.hf.moe_combine_fp32 ? DType::kFP32 : c.e;
  g.save(g.add("moe.combine_weights", grp, "combine", rows, combine));
  if (c.rules.moe.index_add_source)
    g.save(g.add("moe.weighted_out", grp, "index_add_", cat(rows, {c.h}), combine, "index_add_ keeps its source"));
  int out = g.add("moe.out", grp, "combine", cat(tokens, {c.h}), c.e);
  if (spec.shared_ffn > 0) {
    int shared = mlp(g, c, x, {c.s_tp, c.b}, split("fs", spec.shared_ffn, "t", c.tp), "moe.shared", grp);
    if (spec.shared_expert_gate) {  // sigmoid(Linear(h, 1)(x)) * shared(x): keeps both factors
      g.save(g.add("moe.shared_gate", grp, "sigmoid", cat(tokens, {Factor{"1", 1}}), c.e));
      g.save(shared);
    }
  }
  return out;
}

/// One transformer layer; returns its graph. `layer_input` is storage 0.
Graph build_layer(const Context& c, const LayerSpec& spec) {
  Graph g;
  const auto& m = c.model;
  const std::vector<Factor> hidden{c.s_rep, c.b, c.h};
  int x = g.add("layer.input", Group::kNorms, "residual stream", hidden, c.e, "the layer's input");
  int n1 = norm(g, c, x, {c.s_rep, c.b}, c.h, "attn_norm", Group::kNorms);
  int context = m.mla ? latent_attention(g, c, n1) : standard_attention(g, c, n1);
  int attn_out = linear(g, c, context, hidden, "attn.o_proj", Group::kAttention);
  if (m.sandwich_norms) attn_out = norm(g, c, attn_out, {c.s_rep, c.b}, c.h, "attn_post_norm", Group::kNorms);
  dropout(g, attn_out, c.hidden_p, hidden, "attn.hidden", Group::kAttention, c.e);
  int h1 = m.parallel_residual ? x : g.add("attn.residual", Group::kNorms, "add", hidden, c.e);
  int n2 = norm(g, c, h1, {c.s_rep, c.b}, c.h, "mlp_norm", Group::kNorms);
  if (spec.moe)
    moe(g, c, n2);
  else
    mlp(g, c, n2, {c.s_tp, c.b}, split("f", spec.ffn, "t", c.tp), "mlp", Group::kMlp);
  // The block's output after TP's all-reduce (or reduce-scatter under SP).
  int mlp_out = g.add("mlp.out", Group::kMlp, "all-reduce", hidden, c.e);
  if (m.sandwich_norms) mlp_out = norm(g, c, mlp_out, {c.s_rep, c.b}, c.h, "mlp_post_norm", Group::kNorms);
  dropout(g, mlp_out, c.hidden_p, hidden, "mlp.hidden", Group::kMlp, c.e);
  return g;
}

Graph build_embedding(const Context& c) {
  Graph g;
  const Factor s_ids{c.options.parallel.cp > 1 ? "s/cp" : "s", c.seq_local};
  g.save(g.add("embedding.input_ids", Group::kEmbedding, "embedding", {s_ids, c.b}, DType::kINT64));
  // Megatron-LM VocabParallelEmbedding.forward (tensor_parallel/layers.py), tp > 1: ids outside the
  // rank's vocabulary are masked, and `output_parallel[input_mask, :] = 0.0` (index_put_) keeps the
  // bool mask (measured: validation/EXPECTED.md, "one rank").
  if (c.rules.framework == Framework::kMegatron && c.tp > 1)
    g.save(g.add("embedding.input_mask", Group::kEmbedding, "vocab-parallel embedding", {s_ids, c.b}, DType::kBool,
                 "ids outside this rank's vocabulary, kept by index_put_"));
  if (c.model.learned_positions)
    g.save(g.add("embedding.position_ids", Group::kEmbedding, "embedding",
                 c.rules.position_ids_batched ? std::vector<Factor>{s_ids, c.b} : std::vector<Factor>{s_ids},
                 DType::kINT64));
  const std::vector<Factor> hidden{c.s_rep, c.b, c.h};
  int emb = g.add("embedding.out", Group::kEmbedding, "embedding", hidden, c.e);
  const double p = c.rules.embedding_dropout_is_hidden
                       ? c.hidden_p
                       : c.options.hidden_dropout.value_or(c.model.embedding_dropout);
  dropout(g, emb, p, hidden, "embedding", Group::kEmbedding, c.e);
  return g;
}

Graph build_head(const Context& c) {
  Graph g;
  int x = g.add("head.input", Group::kHeadLoss, "residual stream", {c.s_rep, c.b, c.h}, c.e, "the last layer's output");
  int fn = norm(g, c, x, {c.s_rep, c.b}, c.h, "final_norm", Group::kHeadLoss);
  int logits = linear(g, c, fn, {c.s_tp, c.b, c.vocab}, "head.logits", Group::kHeadLoss);
  if (c.model.final_logit_softcap > 0.0 && c.rules.framework == Framework::kHF)
    g.save(g.add("head.softcap_tanh", Group::kHeadLoss, "tanh", {c.s_tp, c.b, c.vocab}, c.e));
  (void)logits;  // upcast to fp32 and consumed by the loss, which keeps its own fp32 output
  g.save(g.add(c.rules.loss_name, Group::kHeadLoss, "cross entropy", {c.s_tp, c.b, c.vocab}, DType::kFP32,
               "fp32 (log-)softmax over the vocabulary at every position"));
  g.save(g.add("loss.targets", Group::kHeadLoss, "cross entropy", {c.s_tp, c.b}, DType::kINT64));
  // Megatron-LM _VocabParallelCrossEntropy (tensor_parallel/cross_entropy.py) saves (exp_logits,
  // target_mask, masked_target_1d): the bool mask of targets outside the rank's vocabulary too.
  if (c.rules.framework == Framework::kMegatron)
    g.save(g.add("loss.target_mask", Group::kHeadLoss, "vocab-parallel cross entropy", {c.s_tp, c.b}, DType::kBool,
                 "targets outside this rank's vocabulary"));
  return g;
}

Graph build_shared(const Context& c) {
  Graph g;
  if (!c.rules.rope_saves_cos_sin) return g;
  int64_t rot = 0;
  if (c.model.mla)
    rot = c.model.mla->qk_rope_head_dim;
  else if (!c.model.learned_positions)
    rot = static_cast<int64_t>(static_cast<double>(c.model.head_dim) * c.model.rotary_fraction);
  if (rot == 0) return g;
  const Factor s{c.options.parallel.cp > 1 ? "s/cp" : "s", c.seq_local};
  const Factor dr{c.model.mla ? "dr" : (c.model.rotary_fraction < 1.0 ? "d_rot" : "d"), rot};
  for (const char* name : {"rope.cos", "rope.sin"})
    g.save(g.add(name, Group::kShared, "RoPE", {s, dr}, c.e, "one table for all layers (batch dim broadcast)"));
  return g;
}

// ---------------------------------------------------------------------------------------------
// FLOPs (whole model, not per GPU; matmuls 2·m·n·k, attention over the full s×s square as
// Megatron's MFU formula counts it, or s×window with a sliding window).

struct LayerFlops {
  double total = 0;
  double core_attention = 0;
};

LayerFlops layer_flops(const ModelSpec& m, const LayerSpec& spec, int64_t s, int64_t b) {
  const double tokens = static_cast<double>(s) * static_cast<double>(b);
  const double h = static_cast<double>(m.hidden);
  const double a = static_cast<double>(m.num_heads);
  double proj = 0;
  double d_qk = static_cast<double>(m.head_dim);
  double d_v = d_qk;
  if (m.mla) {
    const auto& x = *m.mla;
    d_qk = static_cast<double>(x.qk_head_dim());
    d_v = static_cast<double>(x.v_head_dim);
    proj += x.q_lora_rank > 0 ? h * x.q_lora_rank + static_cast<double>(x.q_lora_rank) * a * d_qk : h * a * d_qk;
    proj += h * (x.kv_lora_rank + x.qk_rope_head_dim) + static_cast<double>(x.kv_lora_rank) * a * (x.qk_nope_head_dim + d_v);
  } else {
    proj += h * static_cast<double>(m.q_dim() + 2 * m.kv_dim());
  }
  proj += a * d_v * h;  // output projection
  double mlp = 0;
  const double mats = m.gated_mlp ? 3.0 : 2.0;
  if (spec.moe && m.moe) {
    mlp = h * static_cast<double>(m.moe->num_experts) +
          static_cast<double>(m.moe->experts_per_token) * mats * h * static_cast<double>(m.moe->expert_ffn) +
          mats * h * static_cast<double>(m.moe->shared_ffn);
  } else {
    mlp = mats * h * static_cast<double>(spec.ffn);
  }
  const double keys = spec.sliding_window > 0 ? static_cast<double>(std::min(s, spec.sliding_window)) : static_cast<double>(s);
  LayerFlops f;
  f.core_attention = 2.0 * static_cast<double>(b) * a * static_cast<double>(s) * keys * (d_qk + d_v);
  f.total = 2.0 * tokens * (proj + mlp) + f.core_attention;
  return f;
}

// ---------------------------------------------------------------------------------------------
// Layers by shape: each distinct LayerSpec is built once.

struct LayerKind {
  LayerSpec spec;
  Graph graph;
  Bytes none;       // everything its ops save
  Bytes selective;  // core attention rerun: q, k, v stay
  Bytes input;      // full recomputation: the layer's input only
  LayerFlops flops;
};

bool same_shape(const LayerSpec& a, const LayerSpec& b) {
  return a.moe == b.moe && a.ffn == b.ffn && a.sliding_window == b.sliding_window;
}

/// What layer `position` of a recomputation unit keeps (a unit is a model chunk on one stage).
Bytes kept_bytes(const LayerKind& kind, const ActivationOptions& o, int64_t position) {
  switch (o.recompute) {
    case Recompute::kNone: return kind.none;
    case Recompute::kSelective: return kind.selective;
    case Recompute::kFull:
      if (o.checkpoint_every > 0) return position % o.checkpoint_every == 0 ? kind.input : Bytes{0};
      if (o.recompute_layers >= 0) return position < o.recompute_layers ? kind.input : kind.none;
      return kind.input;
  }
  return kind.none;
}

/// Micro-batches in flight on pipeline `rank` for each of its `vpp` model chunks, at the step of
/// Megatron's schedule (megatron/core/pipeline_parallel/schedules.py) where they hold the most bytes;
/// `chunk_bytes[j]` is what one micro-batch keeps on chunk j (embedding / head included).
/// 1F1B (forward_backward_pipelining_without_interleaving): rank r holds min(pp − r, M).
/// Interleaved (forward_backward_pipelining_with_interleaving): warm-up w = (pp−r−1)·2 + (vpp−1)·pp
/// forwards (get_pp_rank_microbatches; all M·vpp when w reaches that), then each steady step k runs
/// forward w + k and backward k; virtual micro-batch i is chunk (i mod pp·vpp)/pp in forward and
/// vpp − 1 minus that in backward (get_schedule_table, groups of pp). Every steady step holds w + 1
/// chunk-micro-batches, but which chunks repeats with period pp·vpp: e.g. rank 0 at pp 4, vpp 2,
/// M 8 holds 7 + 4 after the warm-up and 8 + 3 one step later (measured by
/// validation/pipeline_validation.py), so the step with the most bytes is searched. With uniform
/// layers rank 0 holds pp·vpp + pp − 1 chunk-micro-batches, L/pp·(pp + (pp−1)/vpp) layers:
/// Korthikanti's factor 1 + (p−1)/(p·v).
std::vector<int64_t> in_flight_per_chunk(const ParallelLayout& p, int64_t rank,
                                         const std::vector<Bytes>& chunk_bytes) {
  std::vector<int64_t> counts(static_cast<size_t>(p.vpp), 0);
  const int64_t m = p.num_micro_batches;
  if (p.vpp == 1) {
    counts[0] = std::min(p.pp - rank, m > 0 ? m : p.pp);
    return counts;
  }
  const int64_t warmup = (p.pp - rank - 1) * 2 + (p.vpp - 1) * p.pp;
  if (m > 0 && warmup + 1 >= m * p.vpp) {  // all forwards before the first backward
    std::fill(counts.begin(), counts.end(), m);
    return counts;
  }
  const int64_t round = p.pp * p.vpp;
  // virtual micro-batches of chunk j among the first n (forward order)
  const auto of_chunk = [&](int64_t n, int64_t j) {
    return (n / round) * p.pp + std::clamp(n % round - j * p.pp, int64_t{0}, p.pp);
  };
  const int64_t steps = m > 0 ? std::min(m * p.vpp - warmup, round) : round;
  Bytes best{-1};
  std::vector<int64_t> step(counts.size());
  for (int64_t k = 0; k < steps; ++k) {
    Bytes bytes{0};
    for (int64_t j = 0; j < p.vpp; ++j) {
      step[static_cast<size_t>(j)] = of_chunk(warmup + 1 + k, j) - of_chunk(k, p.vpp - 1 - j);
      bytes += chunk_bytes[static_cast<size_t>(j)] * step[static_cast<size_t>(j)];
    }
    if (bytes > best) {
      best = bytes;
      counts = step;
    }
  }
  return counts;
}

std::string join_formulas(const std::vector<const Storage*>& parts) {
  std::string out;
  for (const auto* st : parts) {
    if (!out.empty()) out += " + ";
    out += std::to_string(dtype_bytes(st->dtype));
    for (const auto& f : st->shape) out += "·" + f.symbol;
  }
  return out;
}

SavedTensor to_saved(const Storage& st, const char* region) {
  SavedTensor t;
  t.name = st.name;
  t.region = region;
  t.op = st.op;
  t.shape = st.shape;
  t.dtype = st.dtype;
  t.bytes = st.bytes();
  t.formula = std::to_string(dtype_bytes(st.dtype));
  for (const auto& f : st.shape) t.formula += "·" + f.symbol;
  t.note = st.note;
  t.group = group_name(st.group);
  return t;
}

Factor seq_factor(int64_t s, int64_t cp, int64_t t) {
  if (cp == 1 && t == 1) return {"s", s};
  if (t == 1) return {"s/cp", s / cp};
  if (cp == 1) return {"s/t", s / t};
  return {"s/(t·cp)", s / (t * cp)};
}

Expected<ActivationReport> estimate(const ModelSpec& model, const ActivationOptions& o) {
  if (auto r = model.validate(); !r) return r.error();
  if (auto r = validate_layout(model, o.parallel); !r) return r.error();
  if (auto r = validate_sequence(o.seq_len, o.parallel); !r) return r.error();
  if (o.micro_batch < 1) return Error{fmt::format("--micro-batch {}: must be at least 1", o.micro_batch)};
  if (o.dtype != DType::kBF16 && o.dtype != DType::kFP16 && o.dtype != DType::kFP32)
    return Error{fmt::format("activation dtype {}: use bf16, fp16 or fp32", dtype_name(o.dtype))};
  if (o.recompute_layers >= 0 && o.checkpoint_every > 0)
    return Error{"--recompute-layers and --checkpoint-every are two recomputation methods (Megatron's block and "
                 "uniform); pick one"};
  if ((o.recompute_layers >= 0 || o.checkpoint_every > 0) && o.recompute != Recompute::kFull)
    return Error{"--recompute-layers / --checkpoint-every apply to full recomputation; add --recompute full"};
  if (o.checkpoint_every < 0) return Error{fmt::format("--checkpoint-every {}: must be >= 1", o.checkpoint_every)};
  if (o.recompute_layers < -1)
    return Error{fmt::format("--recompute-layers {}: must be >= 0 (layers per pipeline chunk to recompute)",
                             o.recompute_layers)};
  {
    const int64_t per_chunk = model.num_layers / (o.parallel.pp * o.parallel.vpp);
    if (o.recompute_layers > per_chunk)
      return Error{fmt::format("--recompute-layers {}: each pipeline chunk holds {} layers; use 0..{}",
                               o.recompute_layers, per_chunk, per_chunk)};
    if (o.checkpoint_every > per_chunk)
      return Error{fmt::format("--checkpoint-every {}: each pipeline chunk holds {} layers; use 1..{}",
                               o.checkpoint_every, per_chunk, per_chunk)};
  }
  const bool flash = o.attention != AttentionImpl::kEager;
  if (o.parallel.cp > 1 && !flash)
    return Error{"--cp with --attention eager: context parallelism is ring attention over flash kernels; use "
                 "--attention flash"};
  for (double prob : {o.hidden_dropout.value_or(0.0), o.attention_dropout.value_or(0.0)})
    if (!(prob >= 0.0 && prob < 1.0)) return Error{fmt::format("dropout {}: must be in [0, 1)", prob)};

  const FrameworkRules& rules = rules_for(o.framework);
  const ParallelLayout& p = o.parallel;
  const int64_t t = p.tp;
  const int64_t kv_per_rank = model.num_kv_heads >= t ? model.num_kv_heads / t : 1;
  const int64_t seq_local = o.seq_len / p.cp;
  Context c{model,
            o,
            rules,
            o.dtype,
            o.hidden_dropout.value_or(model.hidden_dropout),
            o.attention_dropout.value_or(model.attention_dropout),
            flash,
            rules.softmax_fp32 && !hf_traits(model).softmax_in_activation_dtype,
            o.framework == Framework::kHF && hf_traits(model).rms_norm_scale_fp32,
            o.framework == Framework::kHF ? hf_traits(model) : HfModelTraits{},
            seq_factor(o.seq_len, p.cp, p.sp ? t : 1),
            seq_factor(o.seq_len, p.cp, 1),
            Factor{"s", o.seq_len},
            Factor{"b", o.micro_batch},
            Factor{"h", model.hidden},
            split("a", model.num_heads, "t", t),
            model.num_kv_heads >= t ? split("kv", model.num_kv_heads, "t", t) : Factor{"1", kv_per_rank},
            Factor{"d", model.head_dim},
            Factor{t > 1 ? "V/t" : "V", ceil_div(model.vocab, t)},
            t,
            seq_local};

  ActivationReport report;
  // Distinct layer shapes, each built once.
  std::vector<LayerKind> kinds;
  std::vector<size_t> kind_of(model.layers.size());
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LayerSpec& spec = model.layers[i];
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const LayerKind& k) { return same_shape(k.spec, spec); });
    if (it == kinds.end()) {
      LayerKind k;
      k.spec = spec;
      k.graph = build_layer(c, spec);
      k.none = k.graph.bytes(Recompute::kNone);
      k.selective = k.graph.bytes(Recompute::kSelective);
      k.input = k.graph.storages[0].bytes();
      k.flops = layer_flops(model, spec, o.seq_len, o.micro_batch);
      kinds.push_back(std::move(k));
      it = kinds.end() - 1;
    }
    kind_of[i] = static_cast<size_t>(it - kinds.begin());
  }
  const Graph embedding = build_embedding(c);
  const Graph head = build_head(c);
  const Graph shared = build_shared(c);
  report.embedding = embedding.bytes(Recompute::kNone);
  report.head_loss = head.bytes(Recompute::kNone);
  // HF's checkpointed layers bind cos/sin in a closure (not saved): the tables are kept only when
  // some layer runs without full recomputation.
  const int64_t chunk_layers = model.num_layers / (p.pp * p.vpp);  // layers of one model chunk on one rank
  const bool some_layer_not_recomputed =
      o.recompute != Recompute::kFull ||
      (o.checkpoint_every == 0 && o.recompute_layers >= 0 && o.recompute_layers < chunk_layers);
  report.shared = some_layer_not_recomputed ? shared.bytes(Recompute::kNone) : Bytes{0};

  const size_t middle = model.layers.size() / 2;
  const LayerKind& mid = kinds[kind_of[middle]];
  const int64_t num_layers = model.num_layers;

  // One micro-batch, the whole model as one stage (one recomputation unit).
  Bytes layers{0};
  for (int64_t i = 0; i < num_layers; ++i) layers += kept_bytes(kinds[kind_of[static_cast<size_t>(i)]], o, i);
  report.layers_total = layers;
  report.total = report.embedding + layers + report.head_loss + report.shared;
  // Under full recomputation per_layer is a recomputed layer (its input), unless none is recomputed.
  report.per_layer = o.recompute == Recompute::kFull && o.recompute_layers != 0 ? mid.input : kept_bytes(mid, o, 0);

  // Pipeline: per rank, its chunks' layers × micro-batches in flight; embedding on rank 0, head on the last.
  Bytes worst{-1};
  for (int64_t rank = 0; rank < p.pp; ++rank) {
    std::vector<Bytes> chunk_layer_bytes(static_cast<size_t>(p.vpp), Bytes{0});
    for (int64_t j = 0; j < p.vpp; ++j) {
      const int64_t first = (j * p.pp + rank) * chunk_layers;
      for (int64_t pos = 0; pos < chunk_layers; ++pos)
        chunk_layer_bytes[static_cast<size_t>(j)] += kept_bytes(kinds[kind_of[static_cast<size_t>(first + pos)]], o, pos);
    }
    std::vector<Bytes> chunk_bytes = chunk_layer_bytes;
    if (rank == 0) chunk_bytes.front() += report.embedding;
    if (rank == p.pp - 1) chunk_bytes.back() += report.head_loss;
    const auto counts = in_flight_per_chunk(p, rank, chunk_bytes);
    Bytes stage_layers{0};
    for (int64_t j = 0; j < p.vpp; ++j)
      stage_layers += chunk_layer_bytes[static_cast<size_t>(j)] * counts[static_cast<size_t>(j)];
    Bytes stage = stage_layers + report.shared;
    if (rank == 0) {
      stage += report.embedding * counts[0];
      report.first_stage_layers_in_flight = stage_layers;
    }
    if (rank == p.pp - 1) stage += report.head_loss * counts[static_cast<size_t>(p.vpp - 1)];
    report.in_flight_by_stage.push_back(stage);
    if (stage > worst) {
      worst = stage;
      report.in_flight_stage = rank;
      report.in_flight_micro_batches = counts[0];
    }
  }
  report.in_flight = worst;

  // Recomputation: the extra bytes alive while one unit is rerun in backward, and its FLOPs.
  double forward = 2.0 * static_cast<double>(o.seq_len) * static_cast<double>(o.micro_batch) *
                   static_cast<double>(model.hidden) * static_cast<double>(model.vocab);
  double core = 0;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    forward += kinds[kind_of[i]].flops.total;
    core += kinds[kind_of[i]].flops.core_attention;
  }
  report.forward_flops = forward;
  Bytes peak{0};
  if (o.recompute == Recompute::kSelective) {
    for (const auto& k : kinds) peak = std::max(peak, k.none - k.selective);
    report.recompute_flops = core;
  } else if (o.recompute == Recompute::kFull) {
    // Segments never cross a model chunk (a stage's share of layers); with --recompute-layers only
    // the first N layers of each chunk are rerun.
    const int64_t segment = o.checkpoint_every > 0 ? o.checkpoint_every : 1;
    const int64_t rerun_per_chunk = o.recompute_layers >= 0 && o.checkpoint_every == 0 ? o.recompute_layers : chunk_layers;
    for (int64_t chunk = 0; chunk < num_layers; chunk += chunk_layers)
      for (int64_t pos = 0; pos < rerun_per_chunk; pos += segment) {
        Bytes seg{0};
        for (int64_t i = chunk + pos; i < chunk + std::min(chunk_layers, pos + segment); ++i)
          seg += kinds[kind_of[static_cast<size_t>(i)]].none;
        peak = std::max(peak, seg - kinds[kind_of[static_cast<size_t>(chunk + pos)]].input);
      }
    double recomputed = 0;
    for (int64_t rank = 0; rank < p.pp; ++rank)
      for (int64_t j = 0; j < p.vpp; ++j)
        for (int64_t pos = 0; pos < chunk_layers; ++pos) {
          const bool rerun = o.recompute_layers < 0 || o.checkpoint_every > 0 || pos < o.recompute_layers;
          if (rerun) recomputed += kinds[kind_of[static_cast<size_t>((j * p.pp + rank) * chunk_layers + pos)]].flops.total;
        }
    report.recompute_flops = recomputed;
  }
  report.recompute_peak = peak;

  // Tensors: the middle layer under the policy, then embedding, head+loss, shared.
  if (o.recompute == Recompute::kFull) {
    auto t0 = to_saved(mid.graph.storages[0], "layer");
    t0.note = "checkpoint: full recomputation keeps only the layer's input";
    report.tensors.push_back(std::move(t0));
  } else {
    for (const auto& st : mid.graph.storages)
      if (st.saved(o.recompute)) report.tensors.push_back(to_saved(st, "layer"));
  }
  for (const auto* region : {&embedding, &head, &shared}) {
    if (region == &shared && report.shared == Bytes{0}) continue;
    const char* name = region == &embedding ? "embedding" : region == &head ? "head" : "shared";
    for (const auto& st : region->storages)
      if (st.saved(Recompute::kNone)) report.tensors.push_back(to_saved(st, name));
  }

  // Breakdown of `total` by group: layers' groups summed over all layers, then the other regions.
  report.breakdown.title = "activations (one micro-batch, whole model)";
  const Recompute layer_policy = o.recompute == Recompute::kFull ? Recompute::kNone : o.recompute;
  for (Group grp : {Group::kAttention, Group::kMlp, Group::kNorms, Group::kMoe}) {
    Bytes sum{0};
    std::vector<const Storage*> parts;
    for (int64_t i = 0; i < num_layers; ++i) {
      const LayerKind& k = kinds[kind_of[static_cast<size_t>(i)]];
      if (o.recompute == Recompute::kFull) {
        if (grp == Group::kNorms) sum += kept_bytes(k, o, i);
        continue;
      }
      for (const auto& st : k.graph.storages)
        if (st.group == grp && st.saved(layer_policy)) sum += st.bytes();
    }
    if (o.recompute == Recompute::kFull) {
      if (grp == Group::kNorms) parts.push_back(&mid.graph.storages[0]);
    } else {
      for (const auto& st : mid.graph.storages)
        if (st.group == grp && st.saved(layer_policy)) parts.push_back(&st);
    }
    if (sum == Bytes{0}) continue;
    Term term;
    term.key = fmt::format("activations.layers.{}", group_name(grp));
    const bool partial = o.recompute == Recompute::kFull && o.checkpoint_every == 0 && o.recompute_layers >= 0 &&
                         o.recompute_layers < chunk_layers;
    term.label = o.recompute != Recompute::kFull ? fmt::format("transformer layers: {}", group_name(grp))
                 : partial ? fmt::format("layers: the first {} of each {}-layer chunk keep their input, the rest "
                                         "keep everything",
                                         o.recompute_layers, chunk_layers)
                 : o.checkpoint_every > 1 ? fmt::format("layer inputs kept every {} layers (checkpoints)",
                                                        o.checkpoint_every)
                                          : "layer inputs kept by full recomputation";
    term.formula = partial ? std::string("Σ layers (input of a recomputed layer, everything of the others)")
                           : fmt::format("Σ layers ({} in the middle layer)", join_formulas(parts));
    Bytes middle_bytes{0};
    for (const auto* st : parts) middle_bytes += st->bytes();
    // Uniform layers (or checkpoints): count × bytes; otherwise say that the layers differ.
    const bool whole_multiple = !partial && middle_bytes > Bytes{0} && sum.count() % middle_bytes.count() == 0;
    term.substituted = whole_multiple ? fmt::format("{} × {} B", sum.count() / middle_bytes.count(),
                                                    group_digits(middle_bytes.count()))
                                      : partial ? fmt::format("Σ over {} layers", num_layers)
                                                : fmt::format("Σ over {} layers (middle layer: {} B)", num_layers,
                                                              group_digits(middle_bytes.count()));
    term.bytes = sum;
    report.breakdown.add(std::move(term));
  }
  for (const auto* region : {&embedding, &head, &shared}) {
    if (region == &shared && report.shared == Bytes{0}) continue;
    std::vector<const Storage*> parts;
    Bytes sum{0};
    for (const auto& st : region->storages)
      if (st.saved(Recompute::kNone)) {
        parts.push_back(&st);
        sum += st.bytes();
      }
    if (parts.empty()) continue;
    Term term;
    const char* grp = group_name(parts[0]->group);
    term.key = fmt::format("activations.{}", grp);
    term.label = grp;
    term.formula = join_formulas(parts);
    for (const auto* st : parts)
      term.substituted += (term.substituted.empty() ? "" : " + ") + group_digits(st->bytes().count());
    term.bytes = sum;
    report.breakdown.add(std::move(term));
  }

  // Notes: what was assumed.
  auto& notes = report.notes;
  notes.push_back(fmt::format("framework {}, attention {}, recompute {}, activations {} ({} bytes per element)",
                              framework_name(o.framework), attention_name(o.attention), recompute_name(o.recompute),
                              dtype_name(o.dtype), dtype_bytes(o.dtype)));
  notes.push_back("activation memory = distinct storages saved for backward; a saved view keeps its whole base "
                  "storage; norm statistics are fp32, dropout masks 1 byte");
  if (o.attention == AttentionImpl::kSdpa)
    notes.push_back("sdpa is modeled as its flash backend: q, k, v (KV heads), output and fp32 logsumexp");
  if (o.recompute == Recompute::kSelective)
    notes.push_back(o.framework == Framework::kHF
                        ? "selective recomputation is Megatron's (HF has none built in): core attention rerun, only "
                          "q, k and v stay of it"
                        : "selective recomputation reruns core attention (Megatron): only q, k and v stay of it");
  if (o.recompute == Recompute::kFull) {
    if (o.checkpoint_every > 0)
      notes.push_back(fmt::format("full recomputation with a checkpoint every {} layers: only segment-first layers "
                                  "keep their input; recompute_peak is one segment's activations",
                                  o.checkpoint_every));
    else if (o.recompute_layers >= 0)
      notes.push_back(fmt::format("full recomputation of the first {} layers of each model chunk (Megatron block "
                                  "method); the other layers keep {} each; per_layer is a recomputed layer",
                                  o.recompute_layers, format_binary(mid.none)));
    else
      notes.push_back("full recomputation: each layer keeps only its input; embedding, final norm, LM head and loss "
                      "are not recomputed");
  }
  if (p.tp > 1)
    notes.push_back(p.sp ? "TP with sequence parallelism: what TP replicates is split along s by t"
                         : "TP splits heads, FFN and vocabulary; norms, residual-stream inputs and hidden dropout "
                           "masks stay whole on every rank");
  if (p.tp > model.num_kv_heads && !model.mla)
    notes.push_back(fmt::format("kv heads ({}) < tp ({}): each rank holds one replicated KV head",
                                model.num_kv_heads, p.tp));
  if (p.cp > 1)
    notes.push_back("CP: each rank holds s/cp of the sequence; ring attention keeps only its local q, k, v");
  if (model.is_moe()) {
    notes.push_back(model.moe->capacity_factor > 0
                        ? "MoE with a capacity factor: expert rows are the padded capacity E·⌈cf·k·s·b/E⌉ / ep"
                        : "MoE dropless with balanced routing assumed: each GPU's experts see k·s·b/ep token rows");
    if (p.tp > 1) notes.push_back("MoE experts use TP = tp on their FFN; dispatched tokens are whole per TP rank");
    if (o.framework == Framework::kMegatron)
      notes.push_back("Megatron MoE saves (router, permute/unpermute) are modeled, not yet measured; the HF "
                      "Mixtral, Qwen-MoE and DeepSeek-V3 blocks are measured (validation/EXPECTED.md)");
  }
  if (p.pp > 1)
    notes.push_back(fmt::format("pipeline 1F1B{}: in_flight is rank {} holding {} micro-batch(es){}",
                                p.vpp > 1 ? fmt::format(" interleaved (vpp {})", p.vpp) : "", report.in_flight_stage,
                                report.in_flight_micro_batches,
                                p.vpp > 1 ? " on its first chunk (Korthikanti factor 1 + (p−1)/(p·v))" : ""));
  if (o.framework == Framework::kHF && p.tp * p.cp > 1)
    notes.push_back("HF has no tensor/context parallelism of its own: sharded as Megatron would shard the same tensors");
  notes.push_back("FLOPs count attention over the full s×s square (no causal halving), as Megatron's MFU formula does");
  if (o.framework == Framework::kMegatron && model.norm == NormKind::kLayerNorm && !model.is_moe() && !model.mla &&
      !model.gated_mlp)
    notes.push_back("Korthikanti et al. 2022 Eq. 1 (34·s·b·h + 5·a·s²·b) leaves out the fp32 LayerNorm statistics "
                    "(16·s·b per layer) counted here");
  {
    const double rule = 34.0 * static_cast<double>(o.seq_len) * static_cast<double>(o.micro_batch) *
                        static_cast<double>(model.hidden) / static_cast<double>(p.tp);
    notes.push_back(fmt::format("rule of thumb 34·s·b·h/t = {} per layer vs {} here: 34 assumes MHA, a 4h GeLU MLP "
                                "and dropout masks; GQA, SwiGLU with other f/h, no dropout and flash attention (no "
                                "s² terms) move it",
                                format_binary(Bytes{static_cast<int64_t>(rule)}), format_binary(report.per_layer)));
  }
  return report;
}

}  // namespace

Expected<ActivationReport> estimate_activations(const ModelSpec& model, const ActivationOptions& options) {
  try {
    return estimate(model, options);
  } catch (const OverflowError& e) {
    return Error{fmt::format("activation sizes overflow 64 bits ({}); check --seq-len and --micro-batch", e.what())};
  }
}

}  // namespace actmem
