// Op builders: one function per op pattern (norm, linear, attention, MLP, MoE ...), each declaring
// the storages it creates and which it saves, under the framework's save rules (kRules, a table).
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (Eq. 1,
// Table 2) is the reference for the Megatron rules and their TP/SP/selective variants; the HF rules
// are verified tensor by tensor in validation/EXPECTED.md.
#include "tensors/op_graph.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include <fmt/format.h>

#include "util/bytes.h"           // checked arithmetic
#include "model/arch.h"            // hf_quirks: the HF modeling file's saved-tensor quirks
#include "model/weight_tensors.h"  // linear_macs_per_token: FLOPs from the weight shapes
#include "policies/finetune.h"      // LoRA targets
#include "tensors/framework_rules.h"  // kRules: what each framework's ops save
#include "tensors/graph_builder.h"    // Builder, Context, the shared op builders
#include "tensors/te_rules.h"         // Megatron TE spec, fp8, --recompute-modules

namespace actmem::detail {

namespace graph {

// HF modeling-file quirks (GPT-2's softmax dtype, Gemma's fp32 norm scale, ...) are fields of the
// model's row in model/arch.cc (HfQuirks), applied under the hf rules only.
using ShiftedLoss = HfQuirks::ShiftedLoss;

constexpr std::array<const char*, 7> kGroupNames{"attention", "mlp", "norms", "moe", "embedding", "head+loss", "shared"};

// ---------------------------------------------------------------------------------------------
// Op builders. Each returns the id of the storage it produces; saves are declared where the op
// that keeps them runs (a linear keeps its input, an activation its input, ...).

/// RMSNorm / LayerNorm over the `width` dims per row. `input` may be a view: saving it keeps its base.
int norm_over(Builder& g, const Context& c, int input, const Shape& rows, const Shape& width,
              const std::string& prefix, Group group) {
  const bool rms = c.model.norm == NormKind::kRMSNorm;
  const NormSaves& keep = rms ? c.rules.rms_norm : c.rules.layer_norm;
  const char* op = rms ? "RMSNorm" : "LayerNorm";
  Shape full = rows;
  full.insert(full.end(), width.begin(), width.end());
  // HF RMSNorm on an input that needs no gradient (layer 0 after a frozen embedding): pow() and the
  // rsqrt multiply record nothing; only `weight *` keeps the normalized x, for the weight's gradient
  // (measured: validation/notes/frozen-layers.md, 4·s·b·h + 4·s·b less).
  if (c.input_no_grad && keep.input_fp32) {
    if (keep.normalized)
      g.save(g.add(prefix + ".normalized", group, op, full, c.norm_scale_fp32 ? DType::kFP32 : c.e,
                   "x·rstd, kept by weight·x for the weight's gradient (x needs none)"));
    return g.add(prefix + ".out", group, op, full, c.e);
  }
  if (keep.input) g.save(input);
  if (keep.input_fp32) {
    if (c.e == DType::kFP32)
      g.save(input);  // x.to(float32) is a no-op: the input itself is what pow() keeps
    else
      g.save(g.add(prefix + ".input_fp32", group, op, full, DType::kFP32, "x.to(float32) kept by pow(2)"));
  }
  if (keep.mean && !rms) g.save(g.add(prefix + ".mean", group, op, rows, DType::kFP32));
  if (keep.rstd) g.save(g.add(prefix + ".rstd", group, op, rows, DType::kFP32));
  // Under LoRA (or in a frozen layer) the norm's weight is frozen: weight·x keeps x only for the weight's gradient.
  const bool frozen = c.frozen();
  if (keep.normalized && rms && c.norm_scale_fp32 && frozen) {
    g.save(g.add(prefix + ".one_plus_weight", group, op, width, DType::kFP32,
                 "1 + weight.float(): kept by the multiply for x's gradient"));
  } else if (keep.normalized && rms && c.norm_scale_fp32) {
    // Gemma: (x·rstd) * (1 + w) in fp32 keeps both factors; with e = 4 the product is the output.
    g.save(g.add(prefix + ".normalized", group, op, full, DType::kFP32, "x·rstd in fp32, kept by (1 + w)·x"));
    g.save(g.add(prefix + ".one_plus_weight", group, op, width, DType::kFP32,
                 "1 + weight.float(): a new vector (not the parameter), kept by the multiply"));
  } else if (keep.normalized && rms && c.hf.rms_norm_weight_fp32) {
    // OLMo 2: weight * (x·rstd) with x·rstd in fp32 keeps it in fp32 (the weight is a parameter).
    if (!frozen)
      g.save(g.add(prefix + ".normalized", group, op, full, DType::kFP32, "x·rstd in fp32, kept by weight·x"));
  } else if (keep.normalized && !frozen) {
    g.save(g.add(prefix + ".normalized", group, op, full, c.e, "x·rstd in the activation dtype, kept by weight·x"));
  }
  return g.add(prefix + ".out", group, op, full, c.e);
}

/// RMSNorm / LayerNorm over `width` per row.
int norm(Builder& g, const Context& c, int input, const Shape& rows, const Dim& width, const std::string& prefix,
         Group group) {
  return norm_over(g, c, input, rows, {width}, prefix, group);
}

/// The LoRA target (finetune.h) a linear of these graphs is, by its name here; 0 for none (the
/// router, the LM head, routed experts, MLA's projections, fused qkv / gate_up).
unsigned lora_target_of(const std::string& name) {
  static constexpr std::pair<const char*, unsigned> kNames[] = {
      {"attn.q", kLoraQ},       {"attn.q_proj", kLoraQ},       {"attn.k", kLoraK},     {"attn.v", kLoraV},         {"attn.o_proj", kLoraO},
      {"mlp.gate", kLoraGate},  {"mlp.up", kLoraUp},    {"mlp.fc1", kLoraUp},       {"mlp.down", kLoraDown},    {"moe.shared.gate", kLoraGate},
      {"moe.shared.up", kLoraUp}, {"moe.shared.down", kLoraDown}};
  for (const auto& [n, bit] : kNames)
    if (name == n) return bit;
  return 0;
}

int dropout(Builder& g, int input, double p, const Shape& shape, const std::string& prefix, Group group, DType e);

/// PEFT's lora.Linear.forward beside a frozen base: base_layer(x) + lora_B(lora_A(dropout(x)))·scaling.
/// Measured on torch 1.13 (validation/lora_validation.py): lora_dropout (p > 0; nn.Identity at 0)
/// keeps its mask and lora_A its output, a new tensor, or at p = 0 lora_A keeps x itself; lora_B
/// keeps the rank-r intermediate; the scaling multiply keeps nothing. Adapters computing in the
/// activation dtype (torchtune; PEFT under autocast): PEFT's fp32 adapters without autocast cast x
/// to fp32 first, which is not modelled.
void lora_branch(Builder& g, const Context& c, int input, const Shape& out_shape, const std::string& name,
                 Group group) {
  const LoraOptions& lora = c.workload.lora;
  const Shape in_shape = g.at(input).shape;  // a copy: adding storages moves them
  int a_input = dropout(g, input, lora.dropout, in_shape, name + ".lora", group, c.e);
  g.save(a_input);
  const Shape rows{out_shape[0], out_shape[1]};
  g.save(g.add(name + ".lora_a_out", group, "LoRA A", cat(rows, {Dim::lit("r", lora.rank)}), c.e,
               "the rank-r intermediate, kept by lora_B"));
}

/// A TE linear's input under MXFP8 / Float8 blockwise scaling (te_rules.h): the columnwise copy
/// (MXFP8: the (M, K) layout; blockwise: transposed (K, M)), 1 byte per element, and its scale
/// tensor with TE's padding: MXFP8 e8m0 pad(M/32, 4) x pad(K, 128), blockwise fp32 ⌈M/128⌉ x
/// pad(K, 4), over the M = s·b token rows (s/t·b: the local shard under sequence parallelism) and
/// K input features.
void save_block_scaled_input(Builder& g, const Context& c, int input, const std::string& name, Group group) {
  const Shape in_shape = g.at(input).shape;  // a copy: adding storages moves them
  const bool mx = c.workload.megatron.fp8 == Fp8Recipe::kMxfp8;
  const auto symbol = [&](std::size_t i) {
    const Dim& d = in_shape[i];
    if (d.is_constant() || d.ca != 1 || d.b != Sym::kCount) throw std::logic_error("fp8 block scales: " + name);
    return d.a;
  };
  if (in_shape.size() != 3 && in_shape.size() != 4) throw std::logic_error("fp8 block scales: " + name);
  const Sym rows_a = symbol(0);
  const Sym rows_b = symbol(1);
  const Sym cols_a = symbol(2);
  const Sym cols_b = in_shape.size() == 4 ? symbol(3) : Sym::kCount;
  const int64_t col_coef = in_shape.size() == 4 ? 1 : in_shape[2].ca;
  g.save(g.add(name + ".input_fp8", group, "TE fp8 quantize", in_shape, DType::kFP8,
               mx ? "MXFP8 columnwise data of the input (same layout), kept for the weight gradient"
                  : "blockwise fp8 columnwise (transposed) data of the input, kept for the weight gradient"));
  Shape scale = mx ? Shape{Dim::pad(rows_a, rows_b, kMxfp8BlockSize, 4), Dim::pad(cols_a, cols_b, 1, 128, col_coef)}
                   : Shape{Dim::pad(rows_a, rows_b, kFp8BlockLen, 1), Dim::pad(cols_a, cols_b, 1, 4, col_coef)};
  g.save(g.add(name + ".input_scale_inv", group, "TE fp8 quantize", std::move(scale),
               mx ? DType::kINT8 : DType::kFP32,
               mx ? "e8m0 scales, one per 32 rows of a column, padded to 4 x 128 (MXFP8Quantizer::get_scale_shape)"
                  : "fp32 scales, one per 128-row tile of a column, padded to 4 columns "
                    "(Float8BlockQuantizer::get_scale_shape)"));
}

/// --disable-parameter-transpose-cache (te_rules.h): the TE linear's fp8 weight (out, in), quantized
/// in this forward and saved for dgrad: its data, on Hopper its transpose, and the fp32 scale_inv.
void save_weight_copy(Builder& g, const Context& c, int input, const Shape& out_shape, const std::string& name,
                      Group group) {
  Shape w(out_shape.begin() + 2, out_shape.end());  // the output features (a/t + 2·kv/t, d) or (h) ...
  const Shape& in_shape = g.at(input).shape;
  w.insert(w.end(), in_shape.begin() + 2, in_shape.end());  // ... by the input features
  if (c.workload.megatron.fp8_gpu == Fp8Gpu::kHopper) w.insert(w.begin(), Dim::lit("2", 2));
  g.save(g.add(name + ".weight_fp8", group, "TE fp8 quantize", std::move(w), DType::kFP8,
               c.workload.megatron.fp8_gpu == Fp8Gpu::kHopper
                   ? "fp8 weight data + transpose made this forward and kept for dgrad (no parameter transpose cache)"
                   : "fp8 weight data made this forward and kept for dgrad (no parameter transpose cache)"));
  g.save(g.add(name + ".weight_scale_inv", group, "TE fp8 quantize", {Dim::lit("1", 1)}, DType::kFP32,
               "its fp32 scale_inv"));
}

/// nn.Linear / a Megatron parallel linear: keeps its input for its weight's gradient. Under LoRA
/// every base weight is frozen and y = x·Wᵀ needs only W for dx: nothing of x is kept (torch's
/// mm saves `self` only when the weight requires grad), unless an adapter sits beside it.
int linear(Builder& g, const Context& c, int input, Shape out_shape, std::string name, Group group) {
  const LoraOptions& lora = c.workload.lora;
  // Megatron attention.py l.428-444 (TE >= 2.6): under fp8 recipes other than delayed, linear_proj
  // is set_save_original_input: it keeps its high-precision input (TE linear.py l.597-598,
  // inputmat = inp), the FusedAttention output attention keeps already, not an fp8 copy.
  const bool save_original =
      c.fp8 && c.workload.megatron.fp8 != Fp8Recipe::kDelayed && name == "attn.o_proj";
  const bool block_scaled =
      c.workload.megatron.fp8 == Fp8Recipe::kMxfp8 || c.workload.megatron.fp8 == Fp8Recipe::kBlockwise;
  if (!c.frozen() && c.fp8 && !save_original && block_scaled) {
    save_block_scaled_input(g, c, input, name, group);  // te_rules.h: columnwise data + padded scales
  } else if (!c.frozen() && c.fp8 && !save_original) {
    // TE Linear / LayerNormLinear under fp8 per-tensor scaling: the quantized input with only its
    // columnwise usage (linear.py l.606-617, layernorm_linear.py l.478-487): 1 byte per element
    // plus the fp32 scale_inv (Float8Tensor._scale_inv, one element).
    // TE GroupedLinear (the routed experts, grouped_linear.py l.819-826, l.901-936): split_quantize
    // makes one Float8Tensor per expert (a separate allocation each for per-tensor recipes,
    // csrc/extensions/cast.cpp split_quantize, AllocationMethod::UNFUSED), each kept columnwise-only
    // with its own scale_inv: E/ep of them. te_fp8_input_tag: the recompute modules that drop it.
    const Shape in_shape = g.at(input).shape;
    const bool grouped = name == "moe.experts.fc1" || name == "moe.experts.fc2";
    const uint16_t extra = te_fp8_input_tag(name);
    const int data = g.add(name + ".input_fp8", group, grouped ? "TE GroupedLinear fp8 split_quantize" : "TE fp8 quantize",
                           in_shape, DType::kFP8,
                           grouped ? "per-expert columnwise (transposed) fp8 copies of the input, kept for the weight "
                                     "gradients"
                                   : "columnwise (transposed) fp8 copy of the input, kept for the weight gradient");
    g.at(data).mcore_tag |= extra;
    g.save(data);
    const int scale = g.add(name + ".input_scale_inv", group, grouped ? "TE GroupedLinear fp8 split_quantize" : "TE fp8 quantize",
                            {grouped ? Dim::of(Sym::kLocalExperts) : Dim::lit("1", 1)}, DType::kFP32,
                            grouped ? "one fp32 scale_inv per local expert" : "its fp32 scale_inv");
    g.at(scale).mcore_tag |= extra;
    g.save(scale);
  } else if (!c.frozen())
    g.save(input);
  else if (lora.enabled() && (lora.targets & lora_target_of(name)))
    lora_branch(g, c, input, out_shape, name, group);
  if (!c.frozen() && c.fp8 && c.workload.megatron.no_transpose_cache)
    save_weight_copy(g, c, input, out_shape, name, group);  // te_rules.h: per micro-batch, not cached
  const int out = g.add(std::move(name), group, "Linear", std::move(out_shape), c.e);
  g.mm(out);  // nn.Linear on a 3-D input dispatches aten.mm on the folded (b·s, in) view
  return out;
}

/// Dropout with probability p: a bool mask; the output is kept only if the next op keeps it.
int dropout(Builder& g, int input, double p, const Shape& shape, const std::string& prefix, Group group, DType e) {
  if (p <= 0.0) return input;
  g.save(g.add(prefix + ".dropout_mask", group, "dropout", shape, DType::kBool));
  return g.add(prefix + ".dropout_out", group, "dropout", shape, e);
}

/// The MLP activation on `input` of `shape`; returns its output.
int activation(Builder& g, const Context& c, int input, const Shape& shape, const std::string& prefix, Group group) {
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
  // silu / gelu / gelu-tanh keep their input. Megatron's squared_relu, torch.pow(F.relu(x), 2)
  // under jit_fuser (torch.compile, megatron/core/jit.py), keeps one tensor of the input's shape.
  g.save(input);
  const char* op = act == ActFn::kSilu ? "silu" : act == ActFn::kSquaredRelu ? "squared relu" : "gelu";
  return g.add(prefix + ".act_out", group, op, shape, c.e);
}

/// Dense MLP (or one expert bank) on `rows` tokens with intermediate `ffn` (a symbol); returns
/// down's output.
int mlp(Builder& g, const Context& c, int input, const Shape& rows, Sym ffn, const std::string& prefix, Group group,
        bool fused_gate_up) {
  const auto f_shape = cat(rows, {Dim::of(ffn)});
  int product = -1;
  if (c.model.gated_mlp) {
    const bool fused = fused_gate_up || c.model.fused_gate_up || c.rules.fused_gate_up;
    int gate = -1;
    int up = -1;
    if (fused) {
      gate = up = linear(g, c, input, cat(rows, {Dim::of(ffn, 2)}), prefix + ".gate_up", group);
    } else {
      gate = linear(g, c, input, f_shape, prefix + ".gate", group);
      up = linear(g, c, input, f_shape, prefix + ".up", group);
    }
    if (c.rules.fused_gated_kernel && c.workload.megatron.fp8_act_input_store) {
      // Megatron SwiGLUFunction (fused_bias_swiglu.py l.232-235): input.to(torch.float8_e4m3fn)
      g.save(g.add(prefix + ".gate_up_fp8", group, "fused SwiGLU", g.at(gate).shape, DType::kFP8,
                   "[gate|up] kept as float8_e4m3fn (activation_func_fp8_input_store)"));
      product = g.add(prefix + ".act_mul_up", group, "fused SwiGLU", f_shape, c.e);
    } else if (c.rules.fused_gated_kernel) {
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

/// sdpa on packed rows (policies/packed_docs.h): sdpa_attention_forward repeats k and v to every query
/// head when a mask is given (use_gqa_in_sdpa), and torch's SDPA turns the (b, 1, s, s) bool mask into
/// a float bias in the query dtype (attention.cpp convert_boolean_attn_mask) for the memory-efficient
/// kernel, which saves q, k, v, the bias, its output and the fp32 logsumexp for backward.
int packed_sdpa_attention(Builder& g, const Context& c, int q, int k, int v, bool repeat, const Dim& d_qk,
                          const Dim& d_v) {
  const Group grp = Group::kAttention;
  if (repeat) {
    k = g.add("attn.k_repeated", grp, "repeat_kv", {c.s_tp, c.b, c.q_heads, d_qk}, c.e,
              "copy of k at all heads: with a mask sdpa gets no enable_gqa");
    v = g.add("attn.v_repeated", grp, "repeat_kv", {c.s_tp, c.b, c.q_heads, d_v}, c.e,
              "copy of v at all heads: with a mask sdpa gets no enable_gqa");
  }
  for (int id : {q, k, v}) g.save_core(id);
  g.save_core(g.add("attn.mask_bias", grp, "sdpa (memory-efficient)", {c.b, c.s_tp, c.s_key}, c.e,
                    "the bool packed mask as a float bias, made by each layer's sdpa call"));
  int out = g.add("attn.sdpa_out", grp, "sdpa (memory-efficient)", {c.s_tp, c.b, c.q_heads, d_v}, c.e);
  g.save_core(out);
  g.save_core(g.add("attn.logsumexp", grp, "sdpa (memory-efficient)", {c.b, c.q_heads, c.s_tp}, DType::kFP32));
  return out;
}

/// TE DotProductAttention.forward runs get_qkv_layout before choosing a backend (TE
/// dot_product_attention.py l.1898-1911 @d0067d0): with RoPE, q and k are new tensors while v is a
/// strided view of the fused QKV output; no layout matches and .contiguous() gives v a storage of its
/// own (utils.py l.2613-2615), which the backend keeps in place of the QKV output. MLA's q, k, v are
/// three new contiguous tensors already (latent_attention), and without RoPE they match sbh3d.
int te_layout_v(Builder& g, const Context& c, int q, int v, const Dim& d_v) {
  if (v == q || c.model.mla) return v;
  return g.add("attn.v_contiguous", Group::kAttention, "TE get_qkv_layout", {c.s_tp, c.b, c.kv_heads, d_v}, c.e,
               "v made contiguous (q, k are RoPE outputs): the fused QKV output is not kept");
}

/// TE DotProductAttention -> FusedAttnFunc (backends.py l.1592-1664): saves q, k, v, out and the
/// aux tensors softmaxStats fp32 (b, np, s, 1) and rng_state int64 [2].
int te_fused_attention(Builder& g, const Context& c, int q, int k, int v, const Dim& d_qk, const Dim& d_v) {
  const Group grp = Group::kAttention;
  if (c.variant.context_parallel && c.model.mla && d_qk.is_constant() && d_v.is_constant()) {
    // MLA under CP (the variant is built for it alone): AttnFuncWithCPAndKVP2P (TE
    // context_parallel.py l.1690, l.1706, l.2087) keeps p2p_comm_buffers[-1], the last received
    // k|v ring buffer, a storage of its own in place of k and v (same bytes): recompute_modules
    // mla_up_proj frees key and value, not it (measured: megatron_mla_validation.py, te-cp2 cases).
    g.save_core(q);
    g.save_core(g.add("attn.kv_ring", grp, "TE AttnFuncWithCPAndKVP2P",
                      {c.s_tp, c.b, c.q_heads, Dim::lit("(dqk+dv)", d_qk.constant + d_v.constant)}, c.e,
                      "the last received k|v ring buffer (k's and v's bytes in one storage)"));
  } else {
    for (int id : {q, k, te_layout_v(g, c, q, v, d_v)}) g.save_core(id);
  }
  int out = g.add("attn.flash_out", grp, "TE FusedAttention", {c.s_tp, c.b, c.q_heads, d_v}, c.e);
  g.save_core(out);
  g.save_core(g.add("attn.softmax_stats", grp, "TE FusedAttention", {c.b, c.q_heads, c.s_tp, Dim::lit("1", 1)},
                    DType::kFP32, "softmaxStats: the log-sum-exp per query row"));
  // Under context parallelism AttnFuncWithCPAndKVP2P runs one fused-attention step per ring step
  // and saves every step's rng_state (TE context_parallel.py l.1674 rng_states = [None] * cp_size,
  // l.2131-2142 prepare_for_saving(..., *rng_states, ...)): cp of them, 16·cp bytes
  // (measured: validation/te_validation.py, the cp2 cases). Shape (2) without CP, (2·cp) with.
  g.save_core(g.add("attn.rng_state", grp, "TE FusedAttention", {Dim::of(Sym::kRngWords)}, DType::kINT64,
                    "rng_state (seed, offset), present even without dropout"));
  return out;
}

/// Core attention: QKᵀ, softmax, dropout, AV (eager) or one flash kernel. k and v carry
/// `kv_heads` heads (fewer than q's when `repeat`); q carries c.q_heads. Returns the context
/// tensor that the output projection reads.
int core_attention(Builder& g, const Context& c, int q, int k, int v, bool repeat, const Dim& d_qk, const Dim& d_v,
                   bool qk_views = false) {
  const Group grp = Group::kAttention;
  for (int id : {q, k, v}) g.at(id).core_input = true;
  const Shape q_shape{c.s_tp, c.b, c.q_heads, d_qk};
  if (c.flash && c.te) return te_fused_attention(g, c, q, k, v, d_qk, d_v);
  if (c.flash && c.packed && c.workload.attention == AttentionImpl::kSdpa)
    return packed_sdpa_attention(g, c, q, k, v, repeat, d_qk, d_v);
  if (c.flash) {
    for (int id : {q, k, v}) g.save_core(id);
    if (c.packed)  // flash_attn_varlen_func (policies/packed_docs.h)
      g.save_core(g.add("attn.cu_seqlens", grp, "flash_attn_varlen_func",
                        {Dim::lit("(N+1)", c.workload.packed_docs + 1)}, DType::kINT32,
                        "cu_seq_lens_q (= cu_seq_lens_k), built from position_ids in each layer"));
    int out = g.add("attn.flash_out", grp, "flash attention", {c.s_tp, c.b, c.q_heads, d_v}, c.e);
    g.save_core(out);
    const int lse = g.add("attn.logsumexp", grp, "flash attention", {c.b, c.q_heads, c.s_tp}, DType::kFP32);
    g.save_core(lse);
    // torchtitan's _save_list holds every sdpa kernel (flash, efficient, cuDNN): its outputs are kept.
    g.op_sac_keep(out);
    g.op_sac_keep(lse);
    return out;
  }
  // TE spec, --attention-backend unfused (Megatron language_module.py l.141-144 @d98e8a64: NVTE_FLASH_ATTN=0,
  // NVTE_FUSED_ATTN=0): TE's UnfusedDotProductAttention (backends.py l.351-787 @d0067d0) saves what
  // Megatron's own DotProductAttention (dot_product_attention.py l.170-239) does, below: k, v
  // repeat_interleave'd for GQA (l.543-549), baddbmm(q, kᵀ) with beta 0 keeping q and k (l.621), the
  // FusedScaleMaskSoftmax kernel keeping its output in the input dtype (softmax.py l.102-105; its torch
  // fallback, sk >= 16384 or not a multiple of 8 (l.296-329), would keep an fp32 copy: not modeled),
  // nn.Dropout's mask (l.714), bmm(probs, v) keeping both (l.738); v after get_qkv_layout (te_layout_v).
  if (c.te) v = te_layout_v(g, c, q, v, d_v);
  int q_full = q;
  int k_full = k;
  int v_full = v;
  const Shape v_shape{c.s_tp, c.b, c.q_heads, d_v};
  if (repeat) {  // GQA/MQA: k and v are copied out to every query head
    k_full = g.add("attn.k_repeated", grp, "repeat_kv", q_shape, c.e, "copy of k at all heads");
    v_full = g.add("attn.v_repeated", grp, "repeat_kv", v_shape, c.e, "copy of v at all heads");
  } else if (c.rules.eager_matmul_copies_views) {
    // v is a strided view (transposed projection output, or a slice of a fused QKV output): matmul's
    // reshape copies it. k and q are fresh RoPE outputs unless they are views of the fused output too.
    v_full = g.add("attn.v_copy", grp, "matmul reshape", v_shape, c.e, "copy of the strided v view");
    if (k == v || qk_views)
      k_full = g.add("attn.k_copy", grp, "matmul reshape", q_shape, c.e, "copy of the strided k view");
  }
  if (c.rules.eager_matmul_copies_views && (q == v || qk_views))
    q_full = g.add("attn.q_copy", grp, "matmul reshape", q_shape, c.e, "copy of the strided q view");
  g.save_core(q_full);  // QKᵀ keeps both operands
  g.save_core(k_full);
  const Shape scores{c.b, c.q_heads, c.s_tp, c.s_key};
  if (c.model.attn_logit_softcap > 0.0 && c.rules.model_code)
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
int standard_attention(Builder& g, const Context& c, int x) {
  const Group grp = Group::kAttention;
  const auto& m = c.model;
  int q = -1;
  int k = -1;
  int v = -1;
  bool expanded = false;  // k and v already at every query head (Falcon new_decoder_architecture)
  if (m.fused_qkv || c.rules.fused_qkv) {
    const Dim heads{0, nullptr, Sym::kQHeads, 1, Sym::kKvHeads, 2};  // (a/t + 2·kv/t)
    q = k = v = linear(g, c, x, {c.s_tp, c.b, heads, c.d}, "attn.qkv", grp);
    g.at(q).note = "q, k and v are views of this one output: keeping any keeps all of it";
    if (m.kv_copied_in_split && c.rules.model_code) {
      // FalconAttention._split_heads (+ transpose(1, 2).reshape): k and v become new tensors, at
      // every query head under new_decoder_architecture (broadcast_to(key, query.shape).flatten).
      expanded = m.kv_expanded_in_split;
      const Dim heads_kv = expanded ? c.q_heads : c.kv_heads;
      const char* note = expanded ? "copied out to every query head" : "a copy (list indexing / reshape)";
      k = g.add("attn.k_split", grp, "_split_heads", {c.s_tp, c.b, heads_kv, c.d}, c.e, std::string{"k "} + note);
      v = g.add("attn.v_split", grp, "_split_heads", {c.s_tp, c.b, heads_kv, c.d}, c.e, std::string{"v "} + note);
      if (expanded || m.num_kv_heads == 1)  // `[..., [-2], :]`, `[..., [-1], :]`: index keeps its int64 index
        g.save(g.add("attn.split_index", grp, "index", {Dim::lit("2", 2)}, DType::kINT64,
                     "the one-element index tensors of k's and v's list indexing"));
    }
  } else {
    q = linear(g, c, x, {c.s_tp, c.b, c.q_heads, c.d}, "attn.q", grp);
    k = linear(g, c, x, {c.s_tp, c.b, c.kv_heads, c.d}, "attn.k", grp);
    v = linear(g, c, x, {c.s_tp, c.b, c.kv_heads, c.d}, "attn.v", grp);
  }
  if (m.qk_norm && m.qk_norm_full_width) {  // OLMo 2: one norm over the whole projection per token
    q = norm_over(g, c, q, {c.s_tp, c.b}, {c.q_heads, c.d}, "attn.q_norm", Group::kNorms);
    k = norm_over(g, c, k, {c.s_tp, c.b}, {c.kv_heads, c.d}, "attn.k_norm", Group::kNorms);
  } else if (m.qk_norm) {
    q = norm(g, c, q, {c.s_tp, c.b, c.q_heads}, c.d, "attn.q_norm", Group::kNorms);
    k = norm(g, c, k, {c.s_tp, c.b, c.kv_heads}, c.d, "attn.k_norm", Group::kNorms);
  }
  if (!m.learned_positions && !c.no_rope) {  // RoPE: q and k become new tensors; HF keeps only cos/sin (shared)
    const char* op = c.rules.rope_saves_cos_sin ? "RoPE" : "fused RoPE";
    q = g.add("attn.q_rope", grp, op, {c.s_tp, c.b, c.q_heads, c.d}, c.e);
    k = g.add("attn.k_rope", grp, op, {c.s_tp, c.b, expanded ? c.q_heads : c.kv_heads, c.d}, c.e);
  }
  return core_attention(g, c, q, k, v, c.variant.gqa_repeat && !expanded, c.d, c.d);
}

/// Llama4TextL2Norm on q or k (b, s, heads, d): `x.float()` kept by pow (x itself in fp32), the
/// fp32 rsqrt per row kept by the multiply; no weight; `.type_as(x)` gives the output.
int l2_norm(Builder& g, const Context& c, int input, const Dim& heads, const std::string& prefix) {
  const Shape full{c.s_tp, c.b, heads, c.d};
  if (c.e == DType::kFP32)
    g.save(input);
  else
    g.save(g.add(prefix + ".input_fp32", Group::kNorms, "L2Norm", full, DType::kFP32, "x.float() kept by pow(2)"));
  g.save(g.add(prefix + ".rstd", Group::kNorms, "L2Norm", {c.s_tp, c.b, heads}, DType::kFP32, "rsqrt per row"));
  return g.add(prefix + ".out", Group::kNorms, "L2Norm", full, c.e);
}

/// Llama4TextAttention.forward (modeling_llama4.py, 4.57 and 5): q_proj, k_proj, v_proj viewed
/// (b, s, heads, d); on RoPE layers apply_rotary_emb (`view_as_complex(x.float()) * freqs_cis`, the
/// multiply keeps only freqs_cis, shared; `.type_as(x)` a new tensor) then Llama4TextL2Norm when
/// use_qk_norm; on NoPE layers with attn_temperature_tuning `(q * attn_scales).to(dtype)`: the fp32
/// (s) scales kept by the multiply (the product is fp32, cast back). q and k are then transposed
/// views, so eager matmul copies them (k through repeat_kv when grouped), as it copies v.
int llama4_attention(Builder& g, const Context& c, int x) {
  const Group grp = Group::kAttention;
  const auto& m = c.model;
  int q = linear(g, c, x, {c.s_tp, c.b, c.q_heads, c.d}, "attn.q", grp);
  int k = linear(g, c, x, {c.s_tp, c.b, c.kv_heads, c.d}, "attn.k", grp);
  int v = linear(g, c, x, {c.s_tp, c.b, c.kv_heads, c.d}, "attn.v", grp);
  if (!c.no_rope) {
    q = g.add("attn.q_rope", grp, "complex RoPE", {c.s_tp, c.b, c.q_heads, c.d}, c.e);
    k = g.add("attn.k_rope", grp, "complex RoPE", {c.s_tp, c.b, c.kv_heads, c.d}, c.e);
    if (m.qk_l2_norm) {
      q = l2_norm(g, c, q, c.q_heads, "attn.q_norm");
      k = l2_norm(g, c, k, c.kv_heads, "attn.k_norm");
    }
  } else if (m.attn_temperature_tuning) {
    g.save(g.add("attn.temperature_scales", grp, "mul", {c.s_tp}, DType::kFP32,
                 "log1p(floor((pos + 1) / floor_scale)) · attn_scale + 1, kept by q * attn_scales"));
    q = g.add("attn.q_scaled", grp, "mul", {c.s_tp, c.b, c.q_heads, c.d}, c.e, "(q * attn_scales).to(q.dtype)");
  }
  return core_attention(g, c, q, k, v, c.variant.gqa_repeat, c.d, c.d, /*qk_views=*/true);
}

/// DeepSeek multi-head latent attention (modeling_deepseek_v3.py; Megatron multi_latent_attention.py).
int latent_attention(Builder& g, const Context& c, int x) {
  const Group grp = Group::kAttention;
  const MlaSpec& mla = *c.model.mla;
  const Dim qk = Dim::lit("dqk", mla.qk_head_dim());
  const Dim dv = Dim::lit("dv", mla.v_head_dim);
  const Shape rows{c.s_rep, c.b};  // the down projections are replicated across TP
  const bool megatron = c.rules.mcore_modules;
  // Megatron's TE spec fuses q_layernorm / kv_layernorm into linear_q_up_proj / linear_kv_up_proj
  // (TELayerNormColumnParallelLinear, gpt_layer_specs.py get_gpt_layer_with_transformer_engine_submodules):
  // under recompute_modules mla_up_proj the norm runs inside the checkpoint (te_rules.h kTagMlaUpNorm).
  const uint16_t up_norm_tag = megatron && c.te ? kTagMlaUpNorm : 0;
  if (mla.q_lora_rank > 0) {
    // Megatron local spec: linear_q_down_proj is a ColumnParallelLinear whose [s, b, rq/t] output is
    // gathered along rq (multi_latent_attention.py l.650-655); under SP scatter_to_sequence_parallel_region
    // slices it with input_[a:b].contiguous() (mappings.py l.60-81), a view: q_layernorm keeps the
    // whole gathered [s, b, rq] storage (measured: megatron_mla_validation.py, tp4-sp cases). The TE
    // spec's duplicated TELinear yields [s/t, b, rq] directly.
    const Dim q_seq = megatron && !c.te ? c.s_tp : c.s_rep;
    int qa = linear(g, c, x, {q_seq, c.b, Dim::lit("rq", mla.q_lora_rank)}, "attn.q_a_proj", grp);
    g.mcore_tag |= up_norm_tag;
    int qn = norm(g, c, qa, rows, Dim::lit("rq", mla.q_lora_rank), "attn.q_a_norm", Group::kNorms);
    g.mcore_tag &= static_cast<uint16_t>(~up_norm_tag);
    linear(g, c, qn, {c.s_tp, c.b, c.q_heads, qk}, "attn.q_b_proj", grp);
  } else if (megatron && c.te) {
    // mla_qk_norm_config.py _resolve_mla_qk_layernorm: without q LoRA, qk_layernorm makes
    // linear_q_proj a TELayerNormColumnParallelLinear: a norm over h on the layer's normed input
    // (kept anyway), its rsigma and ln_out (measured: megatron_mla_validation.py, nolora-te cases).
    g.mcore_tag |= up_norm_tag;
    int qn = norm(g, c, x, rows, c.h, "attn.q_norm", Group::kNorms);
    g.mcore_tag &= static_cast<uint16_t>(~up_norm_tag);
    linear(g, c, qn, {c.s_tp, c.b, c.q_heads, qk}, "attn.q_proj", grp);
  } else {
    linear(g, c, x, {c.s_tp, c.b, c.q_heads, qk}, "attn.q_proj", grp);
  }
  // q is split into nope/rope parts and re-concatenated: the projection output is not kept itself.
  const Dim rkv = Dim::lit("rkv", mla.kv_lora_rank);
  const Dim dr = Dim::lit("dr", mla.qk_rope_head_dim);
  // Under sequence parallelism (multi_latent_attention.py get_query_key_value_tensors l.746-764):
  //  - local spec: linear_kv_down_proj is a ColumnParallelLinear (gpt_layer_specs.py l.424) whose
  //    [s, b, (rkv+dr)/t] output is gathered along the last dim (gather_from_tensor_model_parallel_region,
  //    a new [s, b, rkv+dr]); kv_compressed, a strided view of it, is scattered to s/t by
  //    scatter_to_sequence_parallel_region (mappings.py l.60-81, input_[a:b].contiguous(): a copy
  //    [s/t, b, rkv]) that kv_layernorm keeps; k_pos_emb stays a view of the gathered storage, which
  //    only the mla_up_proj checkpoint keeps (its k_pos_emb input);
  //  - TE spec: linear_kv_down_proj is a duplicated TELinear (l.125): kv_combined [s/t, b, rkv+dr],
  //    the norm reads a view of it; k_pos_emb = gather_from_sequence_parallel_region(k_pos_emb) is a
  //    new [s, b, dr], kept only by the mla_up_proj checkpoint.
  // Measured: validation/megatron_mla_validation.py, the tp-sp cases.
  const bool sp = megatron && c.variant.sequence_parallel;
  const bool sp_local = sp && !c.te;
  int ckv = linear(g, c, x, cat(Shape{sp_local ? c.s_tp : c.s_rep, c.b}, {Dim::lit("(rkv+dr)", mla.kv_lora_rank + mla.qk_rope_head_dim)}),
                   "attn.kv_a_proj_with_mqa", grp);
  int kv_in = ckv;
  if (sp_local) {
    g.at(ckv).note = "kv_combined gathered along (rkv+dr): k_pos_emb is a view of it, kept by the mla_up_proj checkpoint";
    g.at(ckv).mcore_tag |= kTagMlaUpInput;
    kv_in = g.add("attn.kv_compressed", grp, "scatter_to_sequence_parallel_region", {c.s_rep, c.b, rkv}, c.e,
                  "this rank's s/t rows of kv_compressed, a contiguous copy");
  } else {
    g.at(ckv).note = "the compressed kv and the shared rope key; the norm reads a view of it";
  }
  if (sp && c.te) {
    int kpe = g.add("attn.k_pos_emb", grp, "gather_from_sequence_parallel_region", {c.s_tp, c.b, dr}, c.e,
                    "the rope key gathered to the whole sequence, kept by the mla_up_proj checkpoint");
    g.at(kpe).mcore_tag |= kTagMlaUpInput;
  }
  g.mcore_tag |= up_norm_tag;
  int kvn = norm(g, c, kv_in, rows, rkv, "attn.kv_a_norm", Group::kNorms);
  g.mcore_tag &= static_cast<uint16_t>(~up_norm_tag);
  int kvb = linear(g, c, kvn,
                   {c.s_tp, c.b, c.q_heads, Dim::lit("(dn+dv)", mla.qk_nope_head_dim + mla.v_head_dim)},
                   "attn.kv_b_proj", grp);
  g.at(kvb).note = "k_nope and v are views of it";
  // query, key and value: what qkv_up_proj_and_rope_apply returns (multi_latent_attention.py
  // l.855-981), the outputs recompute_modules mla_up_proj discards after core attention saved them.
  const uint16_t outer = g.mcore_tag;
  if (megatron) g.mcore_tag |= kTagMlaUpOut;
  int query = g.add("attn.q", grp, "cat(q_nope, rope(q_rope))", {c.s_tp, c.b, c.q_heads, qk}, c.e);
  int key = g.add("attn.k", grp, "cat(k_nope, rope(k_rope))", {c.s_tp, c.b, c.q_heads, qk}, c.e);
  int value = kvb;
  if (megatron && c.workload.megatron.no_rope_fusion) {
    // --no-rope-fusion (multi_latent_attention.py l.920-981): apply_rotary_pos_emb on q_pos_emb and
    // on k_pos_emb, _apply_rotary_pos_emb_bshd (rope_utils.py l.92-156) computing
    // cos_ = (cos(freqs) · mscale).to(t.dtype) and sin_ per call (l.143-144), kept by `t * cos_` and
    // `_rotate_half(t) * sin_` (freqs needs no gradient, so t is not kept). query and key are new
    // (cat), value is value.contiguous() of the strided split: the same bytes as fused. Inside
    // qkv_up_proj_and_rope_apply (tagged: mla_up_proj runs it without grad). Measured:
    // validation/megatron_mla_validation.py, norope-fusion cases.
    for (const char* name : {"attn.q_rope_cos", "attn.q_rope_sin", "attn.k_rope_cos", "attn.k_rope_sin"})
      g.save(g.add(name, grp, "unfused MLA RoPE", {c.s_tp, Dim::lit("1", 1), Dim::lit("1", 1), dr}, c.e,
                   "cos_ / sin_ computed per call in the activation dtype, kept by the multiply"));
  }
  if (megatron) {
    // multi_latent_attention.py l.881-904: fused_apply_mla_rope_for_kv writes key and value into
    // new tensors (fused_mla_yarn_rope_apply.py _FusedMLARoPEKVSplit l.785-786, kv.new_empty);
    // unfused, `value.contiguous()` (l.980) copies the strided v: either way the kv_up output
    // [s, b, n, dn+dv] is not kept, a [s, b, n, dv] value is (measured:
    // validation/megatron_mla_validation.py). HF keeps the kv_b_proj output (v is a view of it).
    value = g.add("attn.v", grp, "fused MLA RoPE (kv split)", {c.s_tp, c.b, c.q_heads, dv}, c.e,
                  "v split out of the kv up projection into a new tensor; the projection output is not kept");
  }
  g.mcore_tag = outer;
  Dim v_dim = dv;
  // modeling_deepseek_v3.py pads only under flash_attention_2; sdpa takes v at its own head dim.
  const bool pad = c.workload.attention == AttentionImpl::kFlash && c.rules.flash_pads_v &&
                   mla.qk_head_dim() != mla.v_head_dim;
  if (pad) {
    value = g.add("attn.v_padded", grp, "pad", {c.s_tp, c.b, c.q_heads, qk}, c.e, "v padded to the q/k head dim");
    v_dim = qk;
  }
  int context = core_attention(g, c, query, key, value, /*repeat=*/false, qk, v_dim);
  if (pad)  // attn_output[..., :dv].reshape(..).contiguous(): a copy
    context = g.add("attn.context", grp, "slice+contiguous", {c.s_tp, c.b, c.q_heads, dv}, c.e);
  return context;
}

/// transformers 5 fused 3-D experts (gate_up_proj (E, 2f, h), down_proj (E, h, f)) run by
/// integrations/moe.py (validation/EXPECTED.md, "transformers 5"), on S = k·T rows:
///  - grouped_mm_experts_forward: `hidden_states[token_idx]` keeps token_idx (int64 S); argsort gives
///    perm and inv_perm (int64 S each), kept by the `[perm]` and `[inv_perm]` gathers; the sorted
///    tokens (S, h) are kept by grouped_mm #1, which with #2 keeps the int32 (E) offsets (torch
///    derivatives.yaml _grouped_mm: self, mat2, offs; mat2 is a view of the parameter); the
///    (S, 2f) [gate|up] output (chunk views), act(gate), the product (grouped_mm #2's input), the
///    down output and the routing weights `sample_weights[perm]` (S) kept by the weighting mul.
///    No index_add_: `.view(T, k, h).sum(1)` keeps nothing.
///  - batched_mm_experts_forward: token_idx; the clamped expert ids (int64 S), kept by the two
///    weight gathers; the gathered tokens and the gathered weights `gate_up_proj[ids]` (S, 2f, h)
///    and `down_proj[ids]` (S, h, f), kept by the bmm's (each keeps the other operand); the SwiGLU
///    as above; the down output and the weights (S) for the weighting mul; the EP valid mask cast
///    to the weighted output's dtype (S), kept by `* valid_mask`.
void hf5_experts(Builder& g, const Context& c, const Shape& rows, const Dim& experts) {
  const Group grp = Group::kMoe;
  const bool batched = c.workload.experts_impl == ExpertsImpl::kBatchedMm;
  const bool frozen = c.workload.lora.enabled();  // frozen expert weights: the GEMMs keep no input
  g.save(g.add("moe.token_idx", grp, "gather", rows, DType::kINT64,
               "arange(T).expand(k).reshape(-1), kept by x[token_idx]"));
  int tokens = -1;
  if (batched) {
    g.save(g.add("moe.expert_ids", grp, "clamp", rows, DType::kINT64,
                 "expert_ids.clamp(0, E−1), kept by the two weight gathers"));
    tokens = g.add("moe.dispatched", grp, "gather", cat(rows, {c.h}), c.e, "x[token_idx], kept by bmm #1");
    g.save(g.add("moe.gate_up_weights", grp, "gather", cat(rows, {Dim::of(Sym::kExpertFfn, 2), c.h}), c.e,
                 "gate_up_proj[expert_ids]: a weight copy per row, kept by bmm #1"));
    g.save(g.add("moe.down_weights", grp, "gather", cat(rows, {c.h, Dim::of(Sym::kExpertFfn)}), c.e,
                 "down_proj[expert_ids]: a weight copy per row, kept by bmm #2"));
  } else {
    for (const char* name : {"moe.perm", "moe.inv_perm"})
      g.save(g.add(name, grp, "argsort", rows, DType::kINT64, "kept by the [perm] / [inv_perm] gathers"));
    tokens = g.add("moe.dispatched", grp, "gather", cat(rows, {c.h}), c.e,
                   "x[token_idx][perm], kept by grouped_mm #1");
    g.save(g.add("moe.offsets", grp, "cumsum(histc)", {experts}, DType::kINT32, "kept by both grouped_mm"));
  }
  if (!frozen) g.save(tokens);
  const auto f2 = cat(rows, {Dim::of(Sym::kExpertFfn, 2)});
  const auto f1 = cat(rows, {Dim::of(Sym::kExpertFfn)});
  const char* gemm = batched ? "bmm" : "grouped_mm";
  int gate_up = g.add("moe.experts.gate_up", grp, gemm, f2, c.e);
  int act_out = activation(g, c, gate_up, f1, "moe.experts", grp);  // keeps gate, a view of gate_up
  g.save(act_out);
  g.save(gate_up);  // up, the other view
  int product = g.add("moe.experts.act_mul_up", grp, "mul", f1, c.e);
  if (!frozen) g.save(product);
  g.save(g.add("moe.experts.down", grp, gemm, cat(rows, {c.h}), c.e, "kept by the weighting mul"));
  const DType weights = c.hf.moe_combine_fp32 ? DType::kFP32 : c.e;  // DeepSeek: fp32 routing weights
  g.save(g.add("moe.combine_weights", grp, "combine", rows, weights,
               "the routing weight per row, kept by the weighting mul"));
  if (batched)  // cast to the weighted output's dtype (fp32 when the weights promote it)
    g.save(g.add("moe.valid_mask", grp, "mul", cat(rows, {Dim::lit("1", 1)}), weights,
                 "(expert_ids < E).to(out.dtype), kept by `* valid_mask`"));
}

/// Llama4TextMoe.forward (modeling_llama4.py, 4.57 and 5; T = s·b tokens, E experts):
///  - Llama4Router: the router linear keeps x; topk keeps its int64 (T, k) indices (scatter_ reads
///    the same); sigmoid(scores.float()) keeps its fp32 (T, E) output;
///  - `routed_in = x.repeat(E, 1)` (E·T, h) and `router_scores.transpose(0, 1).reshape(-1, 1)` (a
///    copy, E·T) are both kept by their multiply; every expert runs on every token;
///  - Llama4TextExperts: bmm #1 keeps the scaled (E, T, h) input, gate_up (E, T, 2f) is kept through
///    its chunk views by silu (gate) and the multiply (up), which also keeps act(gate) (E·T·f); bmm #2
///    keeps the product (E·T·f). Frozen expert weights (LoRA): the bmm's keep no input.
///  - the shared expert (Llama4TextMLP(intermediate_size)) on x; `out.add_(routed.sum(0))` keeps nothing.
int llama4_moe(Builder& g, const Context& c, int x) {
  const Group grp = Group::kMoe;
  const MoeSpec& spec = *c.model.moe;
  const Shape tokens{c.s_rep, c.b};
  const Dim experts = Dim::lit("E", spec.num_experts);
  const Dim top_k = Dim::lit("k", spec.experts_per_token);
  linear(g, c, x, cat(tokens, {experts}), "moe.router_logits", grp);
  g.save(g.add("moe.topk_index", grp, "top-k", cat(tokens, {top_k}), DType::kINT64, "kept by topk and scatter_"));
  g.save(g.add("moe.router_probs", grp, "sigmoid", cat(tokens, {experts}), DType::kFP32,
               "sigmoid of the scattered top-k logits (−inf elsewhere), kept by its backward"));
  const Shape rows{experts, c.s_rep, c.b};
  g.save(g.add("moe.routed_in", grp, "repeat", cat(rows, {c.h}), c.e, "x.repeat(E, 1): every token once per expert"));
  g.save(g.add("moe.score_column", grp, "reshape", rows, c.e, "router_scores.transpose(0, 1).reshape(-1, 1): a copy"));
  const int scaled = g.add("moe.routed_in_scaled", grp, "mul", cat(rows, {c.h}), c.e, "kept by bmm #1");
  if (!c.frozen()) g.save(scaled);
  const Dim f = Dim::of(Sym::kExpertFfn);
  int gate_up = g.add("moe.experts.gate_up", grp, "bmm", cat(rows, {Dim::of(Sym::kExpertFfn, 2)}), c.e,
                      "gate and up are chunk views of it: silu keeps gate, the multiply up");
  int act_out = activation(g, c, gate_up, cat(rows, {f}), "moe.experts", grp);
  g.save(act_out);
  g.save(gate_up);
  int product = g.add("moe.experts.act_mul_up", grp, "mul", cat(rows, {f}), c.e, "kept by bmm #2");
  if (!c.frozen()) g.save(product);
  return moe_shared(g, c, x, tokens, g.add("moe.out", grp, "combine", cat(tokens, {c.h}), c.e));
}

/// Routed experts (+ shared experts) on the normed input `x`; returns the combined output.
int moe(Builder& g, const Context& c, int x) {
  if (c.rules.mcore_modules) return mcore_moe(g, c, x);
  const Group grp = Group::kMoe;
  const MoeSpec& spec = *c.model.moe;
  if (c.hf.llama4) return llama4_moe(g, c, x);
  const Shape tokens{c.s_rep, c.b};
  const Dim experts = Dim::lit("E", spec.num_experts);
  const Dim top_k = Dim::lit("k", spec.experts_per_token);
  linear(g, c, x, cat(tokens, {experts}), "moe.router_logits", grp);
  if (c.hf.router_fp32 && c.e != DType::kFP32) {
    // A frozen router (LoRA) needs x.float() only for its weight's gradient: not kept then.
    if (!c.frozen())
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

  // Rows each GPU's experts process (Sym::kMoeRows): k·s·b with balanced routing (dropless), or
  // the padded capacity E·⌈cf·k·s·b/E⌉ with a capacity factor, whatever ep, times etp/tp under MoE
  // parallel folding (layer_kinds.cc bind_moe); bound by the layout.
  const Shape rows{Dim::of(Sym::kMoeRows)};
  if (c.hf5 && c.workload.experts_impl != ExpertsImpl::kEager) {
    hf5_experts(g, c, rows, experts);
    return moe_shared(g, c, x, tokens, g.add("moe.out", grp, "combine", cat(tokens, {c.h}), c.e));
  }
  // transformers 5 eager (MixtralExperts.forward): the 4.x loop with one fused [gate|up] linear
  // per expert: the same bytes (one 2f storage instead of two f ones).
  const bool fused_experts = c.hf5;
  int dispatched = g.add("moe.dispatched", grp, "dispatch", cat(rows, {c.h}), c.e, "tokens gathered per expert");
  const auto index_shape = c.rules.moe.index_bytes == 16 ? cat(rows, {Dim::lit("2", 2)}) : rows;  // (row, token) pairs
  g.save(g.add("moe.token_index", grp, "dispatch", index_shape, DType::kINT64));
  int expert_out = mlp(g, c, dispatched, rows, Sym::kExpertFfn, "moe.experts", grp, fused_experts);
  g.save(expert_out);  // scaled by its routing weight: the mul keeps both
  const DType combine = c.hf.moe_combine_fp32 ? DType::kFP32 : c.e;
  g.save(g.add("moe.combine_weights", grp, "combine", rows, combine));
  // 5.x MixtralExperts / DeepseekV3NaiveMoe: index_add_ of `.to(final_hidden_states.dtype)` into
  // zeros_like(hidden_states): the source is in the activation dtype even with fp32 weights.
  if (c.rules.moe.index_add_source)
    g.save(g.add("moe.weighted_out", grp, "index_add_", cat(rows, {c.h}), fused_experts ? c.e : combine,
                 "index_add_ keeps its source"));
  return moe_shared(g, c, x, tokens, g.add("moe.out", grp, "combine", cat(tokens, {c.h}), c.e));
}

/// One encoder layer (modeling_bert.py BertLayer; RobertaLayer copies it), post-LN:
///   a = LayerNorm(dropout(dense(attention(x))) + x);  y = LayerNorm(dropout(fc2(gelu(fc1(a)))) + a).
/// query/key/value read x (storage 0, saved once); transpose_for_scores gives (b, a, s, d) views,
/// so eager matmul copies q, kᵀ and v (bmm keeps the copies), softmax in the activation dtype, no
/// causal mask (bidirectional). sdpa (BertSdpaSelfAttention) hands the views to the kernel. The
/// residual sums are new tensors kept by nn.LayerNorm with its fp32 mean and rstd; the second
/// LayerNorm's output is the next layer's input.
Graph build_encoder_layer(const Context& c) {
  Builder g;
  const Group grp = Group::kAttention;
  const Shape hidden{c.s_rep, c.b, c.h};
  int x = g.add("layer.input", Group::kNorms, "residual stream", hidden, c.e, "the layer's input (the previous LayerNorm's output)");
  int q = linear(g, c, x, {c.s_tp, c.b, c.q_heads, c.d}, "attn.q", grp);
  int k = linear(g, c, x, {c.s_tp, c.b, c.kv_heads, c.d}, "attn.k", grp);
  int v = linear(g, c, x, {c.s_tp, c.b, c.kv_heads, c.d}, "attn.v", grp);
  int context = core_attention(g, c, q, k, v, /*repeat=*/false, c.d, c.d, /*qk_views=*/true);
  int attn_out = linear(g, c, context, hidden, "attn.o_proj", grp);
  dropout(g, attn_out, c.hidden_p, hidden, "attn.hidden", grp, c.e);
  int sum1 = g.add("attn.residual", Group::kNorms, "add", hidden, c.e, "dropout(dense(context)) + x");
  int a = norm(g, c, sum1, {c.s_rep, c.b}, c.h, "attn_post_norm", Group::kNorms);
  mlp(g, c, a, {c.s_tp, c.b}, Sym::kFfn, "mlp", Group::kMlp);
  int mlp_out = g.add("mlp.out", Group::kMlp, "all-reduce", hidden, c.e);
  dropout(g, mlp_out, c.hidden_p, hidden, "mlp.hidden", Group::kMlp, c.e);
  int sum2 = g.add("mlp.residual", Group::kNorms, "add", hidden, c.e, "dropout(fc2(..)) + attention_output");
  norm(g, c, sum2, {c.s_rep, c.b}, c.h, "mlp_post_norm", Group::kNorms);
  return std::move(g.g);
}

/// BertEmbeddings (RobertaEmbeddings): word + token-type + position embeddings summed, LayerNorm,
/// dropout(hidden_dropout_prob). Called with input_ids only: token_type_ids and BERT's position_ids
/// are slices of registered buffers (kept by their embeddings, but no activation); RoBERTa's
/// position ids are a new (b, s) int64 tensor (create_position_ids_from_input_ids).
Graph build_encoder_embedding(const Context& c) {
  Builder g;
  const int ids = g.add("embedding.input_ids", Group::kEmbedding, "embedding", {c.s_tp, c.b}, DType::kINT64);
  g.save(ids);
  if (c.model.position_ids_from_input)
    g.save(g.add("embedding.position_ids", Group::kEmbedding, "embedding", {c.s_tp, c.b}, DType::kINT64,
                 "create_position_ids_from_input_ids: padding_idx + 1 + cumsum, a new (b, s) tensor"));
  const Shape hidden{c.s_rep, c.b, c.h};
  int sum = g.add("embedding.sum", Group::kEmbedding, "add", hidden, c.e, "word + token-type + position embeddings");
  int out = norm(g, c, sum, {c.s_rep, c.b}, c.h, "embedding_norm", Group::kEmbedding);
  dropout(g, out, c.workload.hidden_dropout.value_or(c.model.embedding_dropout), hidden, "embedding",
          Group::kEmbedding, c.e);
  return std::move(g.g);
}

/// An encoder's head on the last layer's output (EncoderHead; weight_tensors.cc lists its weights).
///  - mlm: BertLMPredictionHead: dense (keeps x), gelu (keeps its input), LayerNorm (keeps its
///    input, mean, rstd), decoder (keeps its input); CrossEntropyLoss on the logits as they are:
///    log_softmax in the activation dtype (no fp32 upcast), and the (b, s) int64 labels.
///  - classifier, BERT: BertPooler's dense reads hidden_states[:, 0], a view: it keeps the whole
///    last output; tanh keeps its output; dropout(classifier_dropout); classifier keeps its input;
///    CrossEntropyLoss over (b, n) and the (b) int64 labels.
///  - classifier, RoBERTa (RobertaClassificationHead): dropout on features[:, 0, :] (a new tensor:
///    the last output is not kept unless p = 0), dense, tanh, dropout, out_proj.
///  - none: BertModel's pooler (dense + tanh); no loss.
Graph build_encoder_head(const Context& c) {
  Builder g;
  const Group grp = Group::kHeadLoss;
  int x = g.add("head.input", grp, "residual stream", {c.s_rep, c.b, c.h}, c.e, "the last layer's output");
  const double p = c.model.classifier_dropout;
  const Shape pooled{c.b, c.h};
  const Dim labels = Dim::lit("n", c.model.num_labels);
  const bool roberta = c.model.position_ids_from_input;
  switch (c.model.head) {
    case EncoderHead::kMaskedLM: {
      int t = linear(g, c, x, {c.s_tp, c.b, c.h}, "head.transform", grp);
      int act = activation(g, c, t, {c.s_tp, c.b, c.h}, "head.transform", grp);
      int n = norm(g, c, act, {c.s_tp, c.b}, c.h, "head.transform_norm", grp);
      linear(g, c, n, {c.s_tp, c.b, c.vocab}, "head.logits", grp);
      g.save(g.add(c.rules.loss_name, grp, "cross entropy", {c.s_tp, c.b, c.vocab}, c.e,
                   "log-softmax over the vocabulary in the activation dtype (no upcast), every position"));
      g.save(g.add("loss.targets", grp, "cross entropy", {c.s_tp, c.b}, DType::kINT64, "labels.view(-1)"));
      break;
    }
    case EncoderHead::kNone:
    case EncoderHead::kClassifier: {
      int first = x;  // hidden_states[:, 0]: a view of the last output
      if (c.model.head == EncoderHead::kClassifier && roberta)
        first = dropout(g, x, p, pooled, "head.features", grp, c.e);
      int dense = linear(g, c, first, pooled, "head.pooler", grp);
      int tanh = g.add("head.tanh", grp, "tanh", pooled, c.e);
      g.save(tanh);  // tanh's backward reads its output
      (void)dense;
      if (c.model.head == EncoderHead::kNone) break;
      int in = dropout(g, tanh, p, pooled, "head.classifier", grp, c.e);
      linear(g, c, in, {c.b, labels}, "head.classifier", grp);
      g.save(g.add(c.rules.loss_name, grp, "cross entropy", {c.b, labels}, c.e, "log-softmax over the n labels"));
      g.save(g.add("loss.targets", grp, "cross entropy", {c.b}, DType::kINT64));
      break;
    }
  }
  return std::move(g.g);
}

/// One transformer layer; `layer_input` is storage 0.
Graph build_layer(const Context& layer_c, const LayerSpec& spec) {
  if (layer_c.model.encoder) return build_encoder_layer(layer_c);
  // `at_input` reads the layer's input (which needs no gradient after a frozen embedding, layer 0);
  // every other op sees inputs that do.
  const Context& at_input = layer_c;
  Context c = layer_c;
  c.input_no_grad = false;
  Builder g;
  g.op_sac = c.rules.op_sac;
  const auto& m = c.model;
  const Shape hidden{c.s_rep, c.b, c.h};
  int x = g.add("layer.input", Group::kNorms, "residual stream", hidden, c.e, "the layer's input");
  g.op_sac_keep(x);  // the checkpoint wrapper's input
  // OLMo 2 (post_norms_only) has no input norms: attention and the MLP read the residual stream.
  const bool megatron = c.rules.mcore_modules;
  if (megatron) {
    c.te = c.workload.megatron.impl == TransformerImpl::kTransformerEngine;
    c.fp8 = c.workload.megatron.fp8 != Fp8Recipe::kNone;
  }
  if (megatron) g.mcore_tag = kTagAttnNorm;
  int n1 = m.post_norms_only ? x : norm(g, at_input, x, {c.s_rep, c.b}, c.h, "attn_norm", Group::kNorms);
  g.mcore_tag = 0;
  c.no_rope = spec.no_rope;
  int context = m.mla          ? latent_attention(g, c, n1)
                : c.hf.llama4 ? llama4_attention(g, c, n1)
                               : standard_attention(g, c, n1);
  int attn_out = linear(g, c, context, hidden, "attn.o_proj", Group::kAttention);
  if (m.sandwich_norms || m.post_norms_only)
    attn_out = norm(g, c, attn_out, {c.s_rep, c.b}, c.h, "attn_post_norm", Group::kNorms);
  if (!(c.hf.one_residual_dropout && m.parallel_residual))
    dropout(g, attn_out, c.hidden_p, hidden, "attn.hidden", Group::kAttention, c.e);
  int h1 = m.parallel_residual ? x : g.add("attn.residual", Group::kNorms, "add", hidden, c.e);
  // Megatron TE spec, dense layer: pre_mlp_layernorm is IdentityOp, the norm runs inside fc1's
  // LayerNormLinear, so self.mlp receives the residual stream and the norm belongs to the MLP.
  const bool te_mlp_norm = megatron && te_fused_mlp_norm(m, c.workload, spec.moe);
  if (megatron) g.mcore_tag = te_mlp_norm ? uint16_t(kTagMlp) : uint16_t(kTagMlpNorm);
  // Phi (shared_input_norm): the MLP reads the same input_layernorm output as attention.
  int n2 = m.post_norms_only     ? h1
           : m.shared_input_norm ? n1
                                 : norm(g, m.parallel_residual ? at_input : c, h1, {c.s_rep, c.b}, c.h, "mlp_norm",
                                        Group::kNorms);
  if (megatron) {
    g.at(te_mlp_norm ? h1 : n2).mcore_tag |= kTagMlpInput;
    g.mcore_tag = kTagMlp;
  }
  if (spec.moe)
    moe(g, c, n2);
  else
    mlp(g, c, n2, {c.s_tp, c.b}, Sym::kFfn, "mlp", Group::kMlp);
  g.mcore_tag = 0;
  // The block's output after TP's all-reduce (or reduce-scatter under SP).
  int mlp_out = g.add("mlp.out", Group::kMlp, "all-reduce", hidden, c.e);
  if (m.sandwich_norms || m.post_norms_only)
    mlp_out = norm(g, c, mlp_out, {c.s_rep, c.b}, c.h, "mlp_post_norm", Group::kNorms);
  dropout(g, mlp_out, c.hidden_p, hidden, "mlp.hidden", Group::kMlp, c.e);
  return std::move(g.g);
}

Graph build_embedding(const Context& c) {
  if (c.model.encoder) return build_encoder_embedding(c);
  Builder g;
  const Dim s_ids = c.s_tp;
  // The embedding's backward needs the ids only for its weight gradient: a frozen table (LoRA) keeps none.
  const int ids = g.add("embedding.input_ids", Group::kEmbedding, "embedding", {s_ids, c.b}, DType::kINT64);
  const bool frozen = c.workload.freeze_embeddings;  // its output needs no gradient: nothing is recorded
  if (!c.workload.lora.enabled() && !frozen) g.save(ids);
  // Megatron-LM VocabParallelEmbedding.forward (tensor_parallel/layers.py), tp > 1: ids outside the
  // rank's vocabulary are masked, and `output_parallel[input_mask, :] = 0.0` (index_put_) keeps the
  // bool mask (measured: validation/EXPECTED.md, "one rank").
  if (c.rules.mcore_modules && c.variant.tensor_parallel)
    g.save(g.add("embedding.input_mask", Group::kEmbedding, "vocab-parallel embedding", {s_ids, c.b}, DType::kBool,
                 "ids outside this rank's vocabulary, kept by index_put_"));
  if (c.model.learned_positions)
    g.save(g.add("embedding.position_ids", Group::kEmbedding, "embedding",
                 c.rules.position_ids_batched ? Shape{s_ids, c.b} : Shape{s_ids}, DType::kINT64));
  const Shape hidden{c.s_rep, c.b, c.h};
  int emb = g.add("embedding.out", Group::kEmbedding, "embedding", hidden, c.e);
  const double p = c.rules.embedding_dropout_is_hidden ? c.hidden_p
                   : c.hf.no_embedding_dropout || !c.rules.dropout_modules ? 0.0
                                                     : c.workload.hidden_dropout.value_or(c.model.embedding_dropout);
  // A trained position embedding (GPT-2's wpe) still makes the sum need a gradient.
  dropout(g, emb, frozen && !c.model.learned_positions ? 0.0 : p, hidden, "embedding", Group::kEmbedding, c.e);
  return std::move(g.g);
}

Graph build_head(const Context& c) {
  if (c.model.encoder) return build_encoder_head(c);
  Builder g;
  int x = g.add("head.input", Group::kHeadLoss, "residual stream", {c.s_rep, c.b, c.h}, c.e, "the last layer's output");
  int fn = norm(g, c, x, {c.s_rep, c.b}, c.h, "final_norm", Group::kHeadLoss);
  if (c.workload.loss == LossImpl::kFusedLinearCE) {
    // Liger LigerFusedLinearCrossEntropyFunction.forward (policies/loss_impl.h): no logits, no
    // targets; ctx.save_for_backward(grad_input, grad_weight) instead. grad_weight exists only for
    // a trained LM head (fused_linear_cross_entropy_forward: `if weight_needs_grad`), in its dtype.
    g.save(g.add("loss.grad_input", Group::kHeadLoss, "fused linear cross entropy", {c.s_tp, c.b, c.h}, c.e,
                 "d(final-norm output), computed chunk by chunk in forward"));
    if (!c.workload.lora.enabled() && !(c.workload.freeze_embeddings && c.model.tied_embeddings))
      g.save(g.add("loss.grad_weight", Group::kHeadLoss, "fused linear cross entropy", {c.vocab, c.h},
                   c.workload.weight_dtype, "d(lm_head.weight), computed in forward: a second gradient-sized buffer"));
    return std::move(g.g);
  }
  if (c.workload.freeze_embeddings && c.model.tied_embeddings)  // a frozen (tied) head keeps no input
    g.add("head.logits", Group::kHeadLoss, "Linear", {c.s_tp, c.b, c.vocab}, c.e);
  else
    linear(g, c, fn, {c.s_tp, c.b, c.vocab}, "head.logits", Group::kHeadLoss);
  if (c.model.final_logit_softcap > 0.0 && c.rules.model_code)
    g.save(g.add("head.softcap_tanh", Group::kHeadLoss, "tanh", {c.s_tp, c.b, c.vocab}, c.e));
  const auto shifted = c.workload.hf_version == HfVersion::k4_44 ? c.hf.loss_4_44 : ShiftedLoss::kNone;
  if (shifted != ShiftedLoss::kNone) {
    // transformers 4.44: CrossEntropyLoss on logits[..., :-1, :].contiguous() (HfQuirks::loss_4_44).
    const DType dt = shifted == ShiftedLoss::kFp32 ? DType::kFP32 : c.e;
    const Dim rows = Dim::of(Sym::kSeqShifted);
    g.save(g.add(c.rules.loss_name, Group::kHeadLoss, "cross entropy", {rows, c.b, c.vocab}, dt,
                 "log-softmax over the s−1 shifted rows (transformers 4.44)"));
    g.save(g.add("loss.targets", Group::kHeadLoss, "cross entropy", {rows, c.b}, DType::kINT64,
                 "labels[..., 1:].contiguous()"));
    return std::move(g.g);
  }
  // The logits are upcast to fp32 and consumed by the loss, which keeps its own fp32 output.
  g.save(g.add(c.rules.loss_name, Group::kHeadLoss, "cross entropy", {c.s_tp, c.b, c.vocab}, DType::kFP32,
               c.workload.loss == LossImpl::kChunked
                   ? "fp32 log-softmax, one per output chunk (torchtune CEWithChunkedOutputLoss): the same bytes"
                   : "fp32 (log-)softmax over the vocabulary at every position"));
  g.save(g.add("loss.targets", Group::kHeadLoss, "cross entropy", {c.s_tp, c.b}, DType::kINT64));
  // Megatron-LM _VocabParallelCrossEntropy (tensor_parallel/cross_entropy.py) saves (exp_logits,
  // target_mask, masked_target_1d): the bool mask of targets outside the rank's vocabulary too.
  if (c.rules.mcore_modules)
    g.save(g.add("loss.target_mask", Group::kHeadLoss, "vocab-parallel cross entropy", {c.s_tp, c.b}, DType::kBool,
                 "targets outside this rank's vocabulary"));
  return std::move(g.g);
}

/// Storages shared by all layers, each counted once (activation-rules.md, "shared").
///
/// Saved by the layers' ops: HF's RoPE cos/sin (q·cos + rotate_half(q)·sin keeps them).
/// Kept by full recomputation: whatever the model passes into each checkpointed layer stays alive
/// until that layer's backward, positional or keyword, reentrant or not (torch.utils.checkpoint:
/// the reentrant CheckpointFunction save_for_backward()s the positional tensors and holds the
/// function, so a functools.partial's keywords, in ctx.run_function; the non-reentrant one holds
/// args and kwargs in its unpack closure; measured: validation/EXPECTED.md, "checkpoint inputs").
///  - HF 4.5x (GradientCheckpointingLayer; modeling_llama.py LlamaModel.forward, modeling_gpt2.py
///    GPT2Model.forward): position_embeddings (cos, sin), position_ids = cache_position.unsqueeze(0)
///    (one int64 (s) storage; GPT-2's wpe already saves it), and the causal mask. The mask exists
///    for eager attention only (masking_utils.py eager_mask: torch.where over the (b, 1, s, s)
///    broadcast of a bool mask, in the activation dtype); sdpa and flash get None without padding.
///  - Megatron-LM (TransformerBlock._checkpointed_forward -> tensor_parallel.checkpoint, positional
///    hidden_states, attention_mask, ..., rotary_pos_emb): the rotary frequencies, fp32 (s/cp, 1,
///    1, d_rot), one lru_cached tensor for every layer and micro-batch (RotaryEmbedding.forward).
///    The data loader's attention mask is not modeled (see validation/EXPECTED.md).
Graph build_shared(const Context& c) {
  Builder g;
  int64_t rot = 0;
  if (c.model.mla)
    rot = c.model.mla->qk_rope_head_dim;
  else if (c.model.has_rope())  // not with learned positions, nor when every layer is NoPE
    rot = static_cast<int64_t>(static_cast<double>(c.model.head_dim) * c.model.rotary_fraction);
  const Dim dr = Dim::lit(c.model.mla ? "dr" : (c.model.rotary_fraction < 1.0 ? "d_rot" : "d"), rot);
  const bool hf = c.rules.model_code;
  // Gemma 3: sliding layers use their own (local) cos/sin and eager mask, when both kinds exist.
  bool sliding = false;
  bool global = false;
  for (const LayerSpec& l : c.model.layers) (l.sliding_window > 0 || l.attention_chunk > 0 ? sliding : global) = true;
  const bool two_kinds = c.hf.local_rope_and_mask && sliding && global;
  // Packed rows: cos/sin come from the collator's (b, s) position_ids, one row per sequence.
  const Shape table = c.packed ? Shape{c.s_tp, c.b, dr} : Shape{c.s_tp, dr};
  if (c.hf.llama4) {
    // Llama4TextRotaryEmbedding: freqs_cis = polar(1, pos·inv_freq), complex64 (1, s, d/2): 8 bytes
    // per complex, 4·s·d bytes; kept by the complex multiply of every RoPE layer and passed to all.
    bool rope_layer = false;
    for (const LayerSpec& l : c.model.layers) rope_layer = rope_layer || !l.no_rope;
    int id = g.add("rope.freqs_cis", Group::kShared, "complex RoPE", {c.s_tp, Dim::lit("d", c.model.head_dim)},
                   DType::kFP32, "complex64 (s, d/2): the same bytes as fp32 (s, d); one table for all layers");
    if (rope_layer) g.save(id);
    g.at(id).checkpoint_input = true;
  } else if (rot > 0 && c.rules.rope_saves_cos_sin) {
    for (const char* name : {"rope.cos", "rope.sin"}) {
      int id = g.add(name, Group::kShared, "RoPE", table, c.e,
                     c.packed ? "one (b, s, d) table for all layers, from the packed position ids"
                              : "one table for all layers (batch dim broadcast)");
      g.save(id);
      g.at(id).checkpoint_input = hf;  // position_embeddings, passed to every decoder layer
    }
    if (two_kinds) {
      for (const char* name : {"rope.local_cos", "rope.local_sin"}) {
        int id = g.add(name, Group::kShared, "RoPE", table, c.e,
                       "the sliding layers' table (rope_local_base_freq); passed to every layer");
        g.save(id);
        g.at(id).checkpoint_input = true;
      }
    }
  }
  // Megatron: gpt_model.py l.183 builds no model-level rotary_pos_emb with MLA (the attention
  // module owns its RoPE; the fused MLA kernels keep its cos/sin buffers), so none is passed in.
  if (rot > 0 && c.rules.mcore_modules && !c.model.mla) {  // torchtitan's freqs_cis is a buffer
    int id = g.add("rope.freqs", Group::kShared, "rotary_pos_emb", {c.s_tp, dr}, DType::kFP32,
                   "the fp32 rotary frequencies, a checkpoint input of every layer");
    g.at(id).checkpoint_input = true;
    // TE FusedRoPEFunc (attention/rope.py l.152) save_for_backward()s freqs: the one shared tensor.
    if (c.workload.megatron.impl == TransformerImpl::kTransformerEngine) g.save(id);
  }
  if (hf && !c.model.learned_positions) {  // GPT-2's wpe saves this storage already (embedding)
    int id = g.add("checkpoint.position_ids", Group::kShared, "checkpoint input", {c.s_tp}, DType::kINT64,
                   c.packed ? "cache_position, passed to every decoder layer"
                            : "cache_position (position_ids is a view of it), passed to every decoder layer");
    g.at(id).checkpoint_input = true;
  }
  if (c.packed) {  // DataCollatorWithFlattening's position_ids: the model receives them, LlamaModel passes them on
    int id = g.add("checkpoint.packed_position_ids", Group::kShared, "checkpoint input", {c.s_tp, c.b}, DType::kINT64,
                   "the collator's (b, s) position_ids, restarting per document, passed to every decoder layer");
    g.at(id).checkpoint_input = true;
  }
  if (c.packed && c.workload.attention == AttentionImpl::kSdpa) {
    // masking_utils.sdpa_mask with the packed-document mask function and-ed in: no is_causal skip.
    int id = g.add("checkpoint.packed_mask", Group::kShared, "checkpoint input", {c.b, c.s_tp, c.s_key}, DType::kBool,
                   "sdpa_mask: the (b, 1, s, s) bool packed causal mask, passed to every decoder layer");
    g.at(id).checkpoint_input = true;
    if (two_kinds) {
      int local = g.add("checkpoint.packed_sliding_mask", Group::kShared, "checkpoint input", {c.b, c.s_tp, c.s_key},
                        DType::kBool, "the sliding-window packed (b, 1, s, s) bool mask, passed to every sliding layer");
      g.at(local).checkpoint_input = true;
    }
  }
  if (hf && c.model.encoder && c.workload.attention == AttentionImpl::kEager) {
    // BertModel.forward: attention_mask = torch.ones((b, s)); get_extended_attention_mask gives the
    // additive (b, 1, 1, s) mask in the activation dtype, passed to every layer. sdpa without
    // padding: _prepare_4d_attention_mask_for_sdpa returns None.
    int id = g.add("checkpoint.attention_mask", Group::kShared, "checkpoint input", {c.b, c.s_key}, c.e,
                   "the extended (b, 1, 1, s) padding mask (no causal part), passed to every layer");
    g.at(id).checkpoint_input = true;
  } else if (hf && c.workload.attention == AttentionImpl::kEager) {
    // e·b·s², GPT-2 too: 4.57's GPT2Model.forward calls create_causal_mask, whose eager_mask
    // torch.where writes the (b, 1, s, s) tensor (sources: tensors/checkpoint_inputs_test.cc). The
    // (1, 1, s, s+1) expanded storage is the older _update_causal_mask code's, not modeled.
    int id = g.add("checkpoint.causal_mask", Group::kShared, "checkpoint input", {c.b, c.s_tp, c.s_key}, c.e,
                   "eager_mask: the additive (b, 1, s, s) causal mask, passed to every decoder layer");
    g.at(id).checkpoint_input = true;
    if (two_kinds) {
      int local = g.add("checkpoint.sliding_mask", Group::kShared, "checkpoint input", {c.b, c.s_tp, c.s_key}, c.e,
                        "the sliding-window (b, 1, s, s) mask, passed to every sliding layer");
      g.at(local).checkpoint_input = true;
    }
    if (c.hf.llama4 && sliding && global) {  // create_chunked_causal_mask: the RoPE layers' own mask
      int local = g.add("checkpoint.chunked_mask", Group::kShared, "checkpoint input", {c.b, c.s_tp, c.s_key}, c.e,
                        "the chunked (b, 1, s, s) mask (attention_chunk_size), passed to every chunked layer");
      g.at(local).checkpoint_input = true;
    }
  }
  return std::move(g.g);
}

bool same_shape(const LayerSpec& a, const LayerSpec& b) {
  return a.moe == b.moe && a.ffn == b.ffn && a.sliding_window == b.sliding_window && a.no_rope == b.no_rope &&
         a.attention_chunk == b.attention_chunk;
}

/// FLOPs of a layer kind: its linear layers' multiply-accumulates per token (weight_tensors.h, the
/// one source of weight shapes) and the head dims of core attention.
void set_flops(const ModelSpec& m, LayerKind& kind) {
  kind.macs_per_token = linear_macs_per_token(m, kind.spec);
  const double d_qk = static_cast<double>(m.mla ? m.mla->qk_head_dim() : m.head_dim);
  const double d_v = static_cast<double>(m.mla ? m.mla->v_head_dim : m.head_dim);
  kind.qk_v_head_dims = d_qk + d_v;
  // torchtitan op-level SAC recomputes the 2nd, 4th and 6th mm of a Llama block: wk, wo, w3.
  const double h = static_cast<double>(m.hidden);
  kind.op_sac_recompute_macs = h * static_cast<double>(m.num_kv_heads * m.head_dim) +
                               static_cast<double>(m.num_heads * m.head_dim) * h +
                               h * static_cast<double>(kind.spec.ffn);
}

}  // namespace graph

const char* group_name(Group g) { return graph::kGroupNames[static_cast<std::size_t>(g)]; }

// ---------------------------------------------------------------------------------------------
// Polynomials.

namespace {
auto dim_key(const Dim& d) {
  return std::tuple(static_cast<int>(d.a), d.ca, static_cast<int>(d.b), d.cb, d.product, d.div, d.round);
}
}  // namespace

void Polynomial::add(const Storage& st) {
  Monomial m;
  m.coef = dtype_bytes(st.dtype);
  for (const Dim& d : st.shape) {
    if (d.is_constant()) {
      m.coef = checked_mul(m.coef, d.constant);
      continue;
    }
    if (m.n == static_cast<int>(m.dims.size())) throw std::logic_error("a saved tensor with more than 6 symbolic dims");
    // Insertion in key order: monomials over the same symbols compare equal below.
    int i = m.n++;
    for (; i > 0 && dim_key(d) < dim_key(m.dims[static_cast<std::size_t>(i - 1)]); --i)
      m.dims[static_cast<std::size_t>(i)] = m.dims[static_cast<std::size_t>(i - 1)];
    m.dims[static_cast<std::size_t>(i)] = d;
  }
  for (auto& other : monomials) {
    if (other.n != m.n) continue;
    bool same = true;
    for (int i = 0; i < m.n && same; ++i) same = dim_key(other.dims[static_cast<std::size_t>(i)]) == dim_key(m.dims[static_cast<std::size_t>(i)]);
    if (same) {
      other.coef = checked_add(other.coef, m.coef);
      return;
    }
  }
  monomials.push_back(m);
}

bool Polynomial::eval(const SymValues& v, int64_t& out) const {
  int64_t sum = 0;
  for (const auto& m : monomials) {
    int64_t r = m.coef;
    for (int i = 0; i < m.n; ++i) {
      const Dim& d = m.dims[static_cast<std::size_t>(i)];
      int64_t x = 0;
      if (__builtin_mul_overflow(d.ca, v[static_cast<std::size_t>(d.a)], &x)) return false;
      if (d.padded()) {  // TE fp8 block-scale dims (rare): checked product, then the padding
        if (d.product && __builtin_mul_overflow(x, v[static_cast<std::size_t>(d.b)], &x)) return false;
        if (!d.product && d.b != Sym::kCount) return false;  // not built (Dim::pad)
        x = d.value(v);
      } else if (d.b != Sym::kCount) {
        int64_t y = 0;
        if (__builtin_mul_overflow(d.cb, v[static_cast<std::size_t>(d.b)], &y) || __builtin_add_overflow(x, y, &x))
          return false;
      }
      if (__builtin_mul_overflow(r, x, &r)) return false;
    }
    if (__builtin_add_overflow(sum, r, &sum)) return false;
  }
  out = sum;
  return true;
}

void Graph::compile() {
  none = {};
  selective = {};
  input = {};
  checkpointed = {};
  checkpointed_only = {};
  rerun = {};
  if (records_nothing) return;
  for (const auto& st : storages) {
    if (st.saved(Recompute::kNone) && !st.saved(Recompute::kSelective)) rerun.add(st);
    if (st.saved(Recompute::kNone)) none.add(st);
    if (st.saved(Recompute::kSelective)) selective.add(st);
    if (st.checkpoint_input) checkpointed.add(st);
    if (st.checkpoint_input && !st.saved(Recompute::kNone)) checkpointed_only.add(st);
  }
  if (!storages.empty()) input.add(storages.front());
}

std::vector<std::size_t> layer_kinds(const ModelSpec& model, bool first_layer_own_kind) {
  std::vector<LayerSpec> seen;
  std::vector<std::size_t> kind_of(model.layers.size());
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const auto from = seen.begin() + (first_layer_own_kind && i > 0 ? 1 : 0);
    auto it = first_layer_own_kind && i == 0
                  ? seen.end()
                  : std::find_if(from, seen.end(), [&](const LayerSpec& s) { return graph::same_shape(s, model.layers[i]); });
    if (it == seen.end()) {
      seen.push_back(model.layers[i]);
      it = seen.end() - 1;
    }
    kind_of[i] = static_cast<std::size_t>(it - seen.begin());
  }
  return kind_of;
}

std::vector<LayerGrad> layer_grads(const ModelSpec& model, const Workload& w) {
  std::vector<LayerGrad> out(model.layers.size(), LayerGrad::kTrained);
  // The embedding's output needs no gradient when the token table is frozen and no trained
  // position table (GPT-2's wpe) is added to it; the frozen layers after it keep that so.
  bool no_grad = w.freeze_embeddings && !model.learned_positions;
  const auto frozen = static_cast<std::size_t>(std::clamp<int64_t>(w.frozen_layers, 0, static_cast<int64_t>(out.size())));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (i < frozen) {
      out[i] = no_grad ? LayerGrad::kNoGraph : LayerGrad::kFrozen;
    } else {
      out[i] = no_grad ? LayerGrad::kFirstAfterNoGrad : LayerGrad::kTrained;
      no_grad = false;
    }
  }
  return out;
}

std::vector<std::size_t> layer_kinds(const ModelSpec& model, const std::vector<LayerGrad>& grads) {
  std::vector<std::pair<LayerSpec, LayerGrad>> seen;
  std::vector<std::size_t> kind_of(model.layers.size());
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& s) {
      return s.second == grads[i] && graph::same_shape(s.first, model.layers[i]);
    });
    if (it == seen.end()) {
      seen.emplace_back(model.layers[i], grads[i]);
      it = seen.end() - 1;
    }
    kind_of[i] = static_cast<std::size_t>(it - seen.begin());
  }
  return kind_of;
}

bool hf_version_modeled(const ModelSpec& model, HfVersion version) {
  return version != HfVersion::k4_44 || hf_quirks(model).loss_4_44 != graph::ShiftedLoss::kNone;
}

GraphSet build_graphs(const ModelSpec& model, const Workload& w, Variant variant) {
  const FrameworkRules& rules = rules_for(w.framework);
  const HfQuirks quirks = rules.model_code ? hf_quirks(model) : HfQuirks{};
  graph::Context c{model,
            w,
            rules,
            variant,
            w.dtype,
            rules.dropout_modules ? w.hidden_dropout.value_or(model.hidden_dropout) : 0.0,
            rules.dropout_modules && !quirks.no_attention_dropout ? w.attention_dropout.value_or(model.attention_dropout)
                                                                  : 0.0,
            w.attention != AttentionImpl::kEager,
            // the model's softmax dtype is read under every framework whose softmax is fp32
            rules.softmax_fp32 && !hf_quirks(model).softmax_in_activation_dtype,
            quirks.rms_norm_scale_fp32,
            quirks};
  c.packed = w.packed_docs > 0 && rules.model_code;
  c.hf5 = rules.model_code && w.hf_version == HfVersion::k5;
  GraphSet set;
  const auto grads = layer_grads(model, w);
  const auto kind_of = layer_kinds(model, grads);
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    if (kind_of[i] < set.kinds.size()) continue;
    LayerKind k;
    k.spec = model.layers[i];
    graph::Context layer_c = c;
    layer_c.input_no_grad = grads[i] == LayerGrad::kFirstAfterNoGrad;
    layer_c.weights_frozen = grads[i] == LayerGrad::kFrozen || grads[i] == LayerGrad::kNoGraph;
    k.graph = graph::build_layer(layer_c, k.spec);
    if (rules.mcore_modules && !w.megatron.is_default()) {
      apply_recompute_modules(k.graph, model, w, k.spec.moe);
      k.selective_reruns_core = (w.megatron.recompute_modules & kRecomputeCoreAttn) != 0;
      k.selective_recompute_macs = selective_recompute_macs(model, w, k.spec);
    }
    if (grads[i] == LayerGrad::kNoGraph) {  // nothing is recorded: no storage is kept (frozen-layers.md, row 2)
      k.graph.records_nothing = true;
      for (Storage& st : k.graph.storages)
        st.saved_outside_core = st.saved_by_core = st.core_input = st.checkpoint_input = st.op_sac_kept = false;
    }
    k.graph.compile();
    graph::set_flops(model, k);
    set.kinds.push_back(std::move(k));
  }
  set.embedding = graph::build_embedding(c);
  // Every layer frozen after a frozen embedding: the final norm's input needs no gradient (row 5).
  const bool all_no_grad = !grads.empty() && grads.back() == LayerGrad::kNoGraph;
  graph::Context head_c = c;
  head_c.input_no_grad = all_no_grad;
  set.head = graph::build_head(head_c);
  set.shared = graph::build_shared(c);
  if (all_no_grad)  // no layer records a graph: none saves RoPE's cos/sin or keeps a checkpoint input
    for (Storage& st : set.shared.storages) st.saved_outside_core = st.checkpoint_input = false;
  for (Graph* g : {&set.embedding, &set.head, &set.shared}) g->compile();
  return set;
}

}  // namespace actmem::detail
