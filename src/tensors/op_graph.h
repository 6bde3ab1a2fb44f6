// The per-layer op graph with symbolic dimensions: each op declares the storages it creates and
// which of them it saves for backward (a view saves its whole base storage), under a framework's
// save rules (shared/spec/activation-rules.md). Shapes are written in symbols (s, b, h, a/t, kv/t,
// f/t, V/t, MoE rows ...) whose per-GPU values a layout binds later, so a graph is built once per
// model and workload and evaluated for any number of layouts.
//
// Formula symbols: s sequence, b micro-batch, h hidden, a heads, kv KV heads, d head dim, f FFN
// size, V vocab, E experts, k experts per token, t tensor-parallel degree, cp context-parallel
// degree, ep expert-parallel degree; the leading number of a formula is bytes per element.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "util/dtype.h"
#include "model/model_spec.h"
#include "policies/options.h"

namespace actmem::detail {

/// The per-GPU sizes a layout binds. Texts depend on the layout too ("a" vs "a/t"): sym_text().
enum class Sym : int8_t {
  kSeqRep,     // sequence of a tensor TP replicates: s/cp, and /t under sequence parallelism
  kSeqTp,      // sequence of a tensor TP splits (and of ids, loss, RoPE tables): s/cp
  kSeqKey,     // key length of an s×s score tensor: s
  kBatch,      // b
  kHidden,     // h
  kQHeads,     // a/t
  kKvHeads,    // kv/t, or 1 when kv < t (replicated KV heads)
  kHeadDim,    // d
  kVocab,      // ⌈V/t⌉
  kFfn,        // f/t of the layer being evaluated (layers may differ)
  kExpertFfn,  // fe/t
  kSharedFfn,  // fs/t
  kMoeRows,    // token rows one GPU's experts process: k·s·b (any ep), or the padded capacity
  kSeqShifted, // rows of a loss over shifted labels (transformers ≤ 4.45): s/cp − 1
  kExpertRows, // rows the routed experts' GEMMs see: kMoeRows, or under Megatron TE fp8 each local
               // expert's rows rounded up to a multiple of 16 (Fp8Padding; te_rules.h te_fp8_expert_rows)
  kLocalExperts,  // routed experts on one GPU: E/ep (one fp8 scale_inv each per GroupedLinear)
  kRngWords,   // int64 words of TE FusedAttention's rng_state: 2, and 2·cp under context parallelism
               // (AttnFuncWithCPAndKVP2P keeps one [2] rng_state per ring step)
  kCount,
};
constexpr std::size_t kNumSyms = static_cast<std::size_t>(Sym::kCount);
using SymValues = std::array<int64_t, kNumSyms>;

/// One dimension: a constant with its own text ("E", "2", "(rkv+dr)"), or ca·x (+ cb·y) over symbols
/// (e.g. the fused QKV output's (a/t + 2·kv/t) heads, the fused gate|up's 2·f/t).
struct Dim {
  int64_t constant = 0;
  const char* literal = nullptr;  // text of a constant
  Sym a = Sym::kCount;            // kCount: a constant
  int64_t ca = 1;
  Sym b = Sym::kCount;
  int64_t cb = 0;
  // A padded dimension (TE's fp8 block-scale tensors, te_rules.h): with `product` the raw value is
  // ca·a·b (e.g. the s·b token rows) instead of ca·a + cb·b; then ⌈x/div⌉ rounded up to a multiple
  // of `round`. Plain dims keep div = round = 1.
  bool product = false;
  int64_t div = 1;
  int64_t round = 1;

  bool is_constant() const { return a == Sym::kCount; }
  bool padded() const { return product || div != 1 || round != 1; }
  int64_t value(const SymValues& v) const {
    if (is_constant()) return constant;
    int64_t x = ca * v[static_cast<std::size_t>(a)];
    if (product) x *= v[static_cast<std::size_t>(b)];
    else if (b != Sym::kCount) x += cb * v[static_cast<std::size_t>(b)];
    if (div != 1 || round != 1) x = ((x + div - 1) / div + round - 1) / round * round;
    return x;
  }
  static Dim of(Sym s, int64_t coef = 1) { return Dim{0, nullptr, s, coef}; }
  static Dim lit(const char* text, int64_t v) { return Dim{v, text}; }
  /// ⌈coef·x(·y)/div⌉ rounded up to a multiple of `round`; y = Sym::kCount for one symbol.
  /// Example: Dim::pad(Sym::kSeqRep, Sym::kBatch, 32, 4) is MXFP8's roundup(s·b/32, 4).
  static Dim pad(Sym x, Sym y, int64_t div, int64_t round, int64_t coef = 1) {
    Dim d{0, nullptr, x, coef, y, 0};
    d.product = y != Sym::kCount;
    d.div = div;
    d.round = round;
    return d;
  }
};

enum class Group { kAttention, kMlp, kNorms, kMoe, kEmbedding, kHeadLoss, kShared };
const char* group_name(Group g);

/// One storage an op creates, and whether backward keeps it.
struct Storage {
  std::string name;
  Group group = Group::kNorms;
  const char* op = "";
  std::vector<Dim> shape;
  DType dtype = DType::kBF16;
  std::string note;
  bool saved_outside_core = false;  // saved by an op that selective recomputation does not rerun
  bool saved_by_core = false;       // saved inside core attention (QKᵀ, softmax, dropout, AV, flash)
  bool core_input = false;          // q, k, v as core attention receives them (kept by selective)
  bool checkpoint_input = false;    // passed into a checkpointed layer: alive until backward under full recomputation
  // torchtitan's per-op selective checkpointing (framework torchtitan, recompute selective,
  // selective_ac_option "op"): the layer's graph follows it (op_sac_rule) and keeps exactly the
  // checkpoint's input and the outputs of the ops its policy MUST_SAVEs (op_sac_kept).
  bool op_sac_rule = false;
  bool op_sac_kept = false;
  // framework megatron: which module created it (te_rules.h, McoreTag bits) and, once
  // apply_recompute_modules ran, whether --recompute-modules keeps it under selective (-1: unset).
  uint16_t mcore_tag = 0;
  int8_t selective_rule = -1;

  /// A shared storage (GraphSet::shared) is kept when a layer that runs normally saves it, or when a
  /// recomputed layer received it as a checkpoint input.
  bool kept_shared(bool some_layer_run, bool some_layer_recomputed) const {
    return (some_layer_run && saved(Recompute::kNone)) || (some_layer_recomputed && checkpoint_input);
  }

  bool saved(Recompute policy) const {
    if (policy == Recompute::kSelective && op_sac_rule) return op_sac_kept;
    if (policy == Recompute::kSelective && selective_rule >= 0) return selective_rule == 1;
    if (policy == Recompute::kSelective) return saved_outside_core || core_input;
    return saved_outside_core || saved_by_core;
  }
};

/// A sum of monomials coef · Π dims over the symbols (constants folded into coef): what a set of
/// storages keeps, ready to be evaluated for a layout in a few multiplications.
struct Polynomial {
  struct Monomial {
    int64_t coef = 0;
    int n = 0;
    std::array<Dim, 6> dims{};
  };
  std::vector<Monomial> monomials;

  void add(const Storage& st);
  /// False on int64 overflow.
  bool eval(const SymValues& v, int64_t& out) const;
};

struct Graph {
  std::vector<Storage> storages;
  Polynomial none;       // everything its ops save
  Polynomial selective;  // core attention rerun: q, k, v stay
  Polynomial input;      // storage 0 alone: what full recomputation keeps of a layer
  // Shared storages (GraphSet::shared): kept by checkpointed layers, and the part of those that no
  // layer running normally saves (counted on top of `none` when both kinds of layer exist).
  Polynomial checkpointed;
  Polynomial checkpointed_only;
  // What a recomputed layer allocates again in backward: saved without recomputation, not kept
  // under selective (torchtitan's op-level SAC reuses the cached outputs it kept).
  Polynomial rerun;
  // A layer none of whose inputs or weights needs a gradient (frozen, after a frozen embedding and
  // frozen layers): autograd records no graph, so it keeps nothing, not even its input.
  bool records_nothing = false;
  void compile();
};

/// One distinct layer shape (dense/MoE, FFN size, window): its graph and its forward FLOPs.
struct LayerKind {
  LayerSpec spec;
  Graph graph;
  // FLOPs of one layer = 2·s·b·macs_per_token + 2·b·a·s·keys·(d_qk + d_v), keys = s or the window.
  double macs_per_token = 0;
  double qk_v_head_dims = 0;  // d_qk + d_v
  // torchtitan op-level SAC: multiply-accumulates per token of the mm it recomputes (every second one).
  double op_sac_recompute_macs = 0;
  // framework megatron --recompute selective (te_rules.h): whether core attention is rerun
  // (recompute_modules core_attn) and the multiply-accumulates per token of the linears rerun besides
  // (mlp: the dense MLP's).
  bool selective_reruns_core = true;
  double selective_recompute_macs = 0;
};

/// The graphs of one structural variant of a workload. A layout picks the variant: whether k and v
/// are repeated to the query heads (GQA with fewer KV than query heads per rank), and whether TP > 1
/// (Megatron's vocab-parallel embedding keeps an extra mask).
struct GraphSet {
  std::vector<LayerKind> kinds;
  Graph embedding;
  Graph head;
  // Storages shared by all layers, counted once: what their ops save (HF RoPE cos/sin) and what
  // full recomputation keeps because it is passed into every checkpointed layer (masks, rotary
  // tables, position ids).
  Graph shared;
};

struct Variant {
  bool gqa_repeat = false;
  bool tensor_parallel = false;
  // Sequence parallelism (with tp > 1), built only for Megatron MLA (engine.cc prepare): its
  // down projections' gathers and scatters keep other tensors under SP (latent_attention).
  bool sequence_parallel = false;
  // Context parallelism (cp > 1), built only for Megatron MLA under the TE spec: TE's
  // AttnFuncWithCPAndKVP2P keeps a k|v ring buffer of its own, which outlives the k and v that
  // recompute_modules mla_up_proj frees (core_attention).
  bool context_parallel = false;
  std::size_t index() const {
    return (gqa_repeat ? 1 : 0) + (tensor_parallel ? 2 : 0) + (sequence_parallel ? 4 : 0) + (context_parallel ? 8 : 0);
  }
};

/// Builds one variant's graphs for a model and workload. Layers are grouped by shape; kind_of
/// maps each layer to its kind.
GraphSet build_graphs(const ModelSpec& model, const Workload& workload, Variant variant);
/// Whether the hf rules of `version` are modeled (and measured) for the model's family: 4.57 for
/// every family, 4.44 only where its loss rule is known (HfQuirks::loss_4_44, model/arch.h).
bool hf_version_modeled(const ModelSpec& model, HfVersion version);
/// With `first_layer_own_kind` (a frozen embedding: layer 0's input needs no gradient) layer 0 is
/// a kind of its own.
std::vector<std::size_t> layer_kinds(const ModelSpec& model, bool first_layer_own_kind = false);

/// How autograd treats a layer when weights are frozen (--freeze-embeddings, --frozen-layers;
/// measured in validation/notes/frozen-layers.md, rows in parentheses):
///   kTrained          its weights train and its input needs a gradient: the framework's rules
///   kFirstAfterNoGrad its weights train, its input needs none (row 3): the input norm keeps no fp32 x, no rstd
///   kFrozen           frozen, its input needs a gradient (row 4): saves only what the input's gradient
///                     needs (a linear keeps no input, a norm weight no normalized x: LoRA's frozen rule)
///   kNoGraph          frozen, its input needs none (row 2): autograd records nothing
enum class LayerGrad : int8_t { kTrained, kFirstAfterNoGrad, kFrozen, kNoGraph };
/// Each layer's LayerGrad under a workload (freeze_embeddings, frozen_layers).
std::vector<LayerGrad> layer_grads(const ModelSpec& model, const Workload& workload);
/// Layers grouped by shape and LayerGrad: kind_of[i] for each layer.
std::vector<std::size_t> layer_kinds(const ModelSpec& model, const std::vector<LayerGrad>& grads);

/// The text of a symbol under a layout: "a/t" when t > 1, "s/(t·cp)" under SP and CP, ...
struct SymTexts {
  std::array<std::string, kNumSyms> text;
};
SymTexts sym_texts(const ModelSpec& model, const Layout& layout);
std::string dim_text(const Dim& d, const SymTexts& texts);

}  // namespace actmem::detail
