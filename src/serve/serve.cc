#include "serve/serve.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/weight_tensors.h"
#include "serve/serve_vllm.h"

namespace actmem {

namespace {

bool is_quantized(DType t) { return t == DType::kINT4 || t == DType::kINT8 || t == DType::kFP8; }
bool is_float_storage(DType t) { return t == DType::kFP32 || t == DType::kBF16 || t == DType::kFP16; }

/// One symbol with its value as text (values like "4/8" are not integers).
struct Sym {
  std::string symbol;
  std::string value;
};

Term text_term(std::string key, std::string label, const std::vector<Sym>& factors, Bytes bytes,
               Exactness exactness = Exactness::kExact) {
  Term t;
  t.key = std::move(key);
  t.label = std::move(label);
  t.exactness = exactness;
  for (size_t i = 0; i < factors.size(); ++i) {
    t.formula += (i ? "·" : "") + factors[i].symbol;
    t.substituted += (i ? " × " : "") + factors[i].value;
  }
  t.bytes = bytes;
  return t;
}

std::string shard_symbol(const std::string& symbol, bool split) {
  if (!split) return symbol;
  return "(" + symbol + "/tp)";
}

struct ResolvedQuant {
  DType weight = DType::kBF16;
  int64_t group = 0;       // > 0: input columns per scale; 0: one per output row; -1: one per tensor
  int64_t block_rows = 0;  // > 0 with group > 0: one scale per block_rows × group block
  DType scale = DType::kFP16;
  bool zero_points = false;
  bool vision = false;     // a vision tower's linear layers are quantized too (the checkpoint's ignore list)
  bool mxfp4_experts = false;  // mxfp4: the routed experts only, in vLLM's layout (vllm_mxfp4_experts)
  std::string source;      // "config.json quantization_config (compressed-tensors)" or empty: the flags
};

/// The checkpoint's own quantization (model/quant_config.h) where no @weight_dtype is given;
/// @quant_group_size, @quant_scale_dtype and @quant_zero_point still replace its fields.
std::optional<ResolvedQuant> checkpoint_quant(const ModelSpec& model, const WeightQuantOptions& q, DType base) {
  if (q.dtype || !model.quant || !model.quant->weight) return std::nullopt;
  const CheckpointQuant& c = *model.quant;
  ResolvedQuant r;
  r.weight = *c.weight;
  r.group = q.group_size.value_or(c.group_size);
  r.block_rows = q.group_size ? 0 : c.block_rows;
  r.scale = q.scale_dtype.value_or(c.scale_dtype.value_or(base));
  r.zero_points = q.zero_points || c.zero_points;
  r.vision = c.vision_quantized && model.vision && model.vision->takes_quant_config;
  r.mxfp4_experts = c.mxfp4_experts;  // a dense model: nothing quantized (Mxfp4Config: linears unquantized)
  r.source = fmt::format("config.json quantization_config ({})", c.method);
  return r;
}

Expected<ResolvedQuant> resolve_quant(const ModelSpec& model, const WeightQuantOptions& q, DType base) {
  if (auto c = checkpoint_quant(model, q, base)) {  // the flags that adjust it, checked as they are alone
    if (q.group_size && *q.group_size < 0)
      return Error{ErrorKind::kInvalid, "quant_group_size",
                   fmt::format("@quant_group_size {}: use a positive group (128) or 0 for one scale per output row",
                               *q.group_size)};
    if (q.scale_dtype && !is_float_storage(*q.scale_dtype))
      return Error{ErrorKind::kInvalid, "quant_scale_dtype",
                   fmt::format("@quant_scale_dtype {}: use fp16, bf16 or fp32", dtype_name(*q.scale_dtype))};
    if (q.zero_points && c->weight == DType::kFP8)
      return Error{ErrorKind::kIncompatible, "quant_zero_point",
                   "@quant_zero_point: fp8 weights are symmetric; drop the flag or use int4/int8"};
    return *c;
  }
  ResolvedQuant r;
  r.weight = q.dtype.value_or(base);
  if (!is_quantized(r.weight) && !is_float_storage(r.weight))
    return Error{ErrorKind::kInvalid, "weight_dtype",
                 fmt::format("@weight_dtype {}: use bf16, fp16, fp32, fp8, int8 or int4", dtype_name(r.weight))};
  if (!is_quantized(r.weight)) {
    if (q.group_size || q.zero_points)
      return Error{ErrorKind::kIncompatible, "quant_group_size",
                   fmt::format("@quant_group_size/@quant_zero_point apply to int4, int8 or fp8 weights, not {}",
                               dtype_name(r.weight))};
    return r;
  }
  r.group = q.group_size.value_or(r.weight == DType::kFP8 ? -1 : 128);
  if (q.group_size && *q.group_size < 0)
    return Error{ErrorKind::kInvalid, "quant_group_size",
                 fmt::format("@quant_group_size {}: use a positive group (128) or 0 for one scale per output row",
                             *q.group_size)};
  r.scale = q.scale_dtype.value_or(r.weight == DType::kFP8 ? DType::kFP32 : DType::kFP16);
  if (!is_float_storage(r.scale))
    return Error{ErrorKind::kInvalid, "quant_scale_dtype",
                 fmt::format("@quant_scale_dtype {}: use fp16, bf16 or fp32", dtype_name(r.scale))};
  r.zero_points = q.zero_points;
  if (r.zero_points && r.weight == DType::kFP8)
    return Error{ErrorKind::kIncompatible, "quant_zero_point",
                 "@quant_zero_point: fp8 weights are symmetric; drop the flag or use int4/int8"};
  return r;
}

/// Per-GPU weight terms, one per tensor kind, plus its scales and zero points when quantized.
Breakdown weight_breakdown(const ModelSpec& model, const std::vector<WeightTensor>& tensors, int64_t tp, DType base,
                           const ResolvedQuant& q) {
  Breakdown b;
  b.title = "Weights per GPU";
  int64_t mxfp4_layers = 0;  // MoE layers on this rank whose experts vLLM holds in its mxfp4 layout
  for (const WeightTensor& t : tensors) {
    if (q.mxfp4_experts && t.part == WeightPart::kRoutedExperts) {
      if (t.role == WeightRole::kLinear && t.name.ends_with("down_proj"))
        mxfp4_layers += t.count / model.moe->num_experts;
      continue;
    }
    const bool rows_split = tp > 1 && (t.shard == WeightShard::kColumn || t.shard == WeightShard::kVocab ||
                                       t.shard == WeightShard::kKvHeads);
    const bool cols_split = tp > 1 && t.shard == WeightShard::kRow;
    const int64_t rows = t.rank_rows(tp);
    const int64_t cols = t.rank_cols(tp);
    std::string rows_symbol = t.shard == WeightShard::kKvHeads && tp > t.heads
                                  ? std::string("d")  // one KV head per rank
                                  : shard_symbol(t.rows_symbol, rows_split);
    std::vector<Sym> shape{{"n", fmt::format("{}", t.count)}, {rows_symbol, fmt::format("{}", rows)}};
    if (t.cols > 1) shape.push_back({shard_symbol(t.cols_symbol, cols_split), fmt::format("{}", cols)});
    const int64_t numel = checked_mul(rows, cols);
    const bool linear =
        t.role == WeightRole::kLinear && (t.part != WeightPart::kVision || q.vision) && !q.mxfp4_experts;
    const bool quantized = linear && is_quantized(q.weight);
    const DType dtype = linear ? q.weight : base;
    std::vector<Sym> factors = shape;
    Bytes bytes;
    if (dtype == DType::kINT4) {
      factors.push_back({"bits/8", "4/8"});
      bytes = Bytes{checked_mul(t.count, ceil_div(checked_mul(numel, 4), 8))};
    } else {
      factors.push_back({"e", fmt::format("{}", dtype_bytes(dtype))});
      bytes = Bytes{checked_mul(checked_mul(t.count, numel), dtype_bytes(dtype))};
    }
    b.add(text_term("weights." + t.name, fmt::format("{} ({})", t.name, dtype_name(dtype)), factors, bytes));
    if (!quantized) continue;

    // Scales: group-wise along the input columns a rank holds, per output row, or one per tensor.
    std::vector<Sym> scale_factors{shape[0]};
    int64_t scales_per_tensor = 1;
    if (q.group > 0 && q.block_rows > 0) {
      scale_factors.push_back({"⌈" + shape[1].symbol + "/" + std::to_string(q.block_rows) + "⌉",
                               fmt::format("{}", ceil_div(rows, q.block_rows))});
      scale_factors.push_back({"⌈" + shape[2].symbol + "/g⌉", fmt::format("{}", ceil_div(cols, q.group))});
      scales_per_tensor = checked_mul(ceil_div(rows, q.block_rows), ceil_div(cols, q.group));
    } else if (q.group > 0) {
      scale_factors.push_back(shape[1]);
      scale_factors.push_back({"⌈" + shape[2].symbol + "/g⌉", fmt::format("{}", ceil_div(cols, q.group))});
      scales_per_tensor = checked_mul(rows, ceil_div(cols, q.group));
    } else if (q.group == 0) {
      scale_factors.push_back(shape[1]);
      scales_per_tensor = rows;
    }
    std::vector<Sym> scale_bytes_factors = scale_factors;
    scale_bytes_factors.push_back({"e_s", fmt::format("{}", dtype_bytes(q.scale))});
    b.add(text_term("weights." + t.name + ".scales", fmt::format("{} scales ({})", t.name, dtype_name(q.scale)),
                    scale_bytes_factors,
                    Bytes{checked_mul(checked_mul(t.count, scales_per_tensor), dtype_bytes(q.scale))}));
    if (q.zero_points) {
      const int bits = dtype_bits(q.weight);
      scale_factors.push_back({"bits/8", fmt::format("{}/8", bits)});
      b.add(text_term("weights." + t.name + ".zeros", fmt::format("{} zero points ({}-bit)", t.name, bits),
                      scale_factors, Bytes{checked_mul(t.count, ceil_div(checked_mul(scales_per_tensor, bits), 8))}));
    }
  }
  if (mxfp4_layers > 0)
    for (Term& t : vllm_mxfp4_experts(model, tp, mxfp4_layers)) b.add(std::move(t));
  return b;
}

/// One forward pass: P tokens, attending over T keys each (MLA decompresses T; eager keeps P×T
/// scores), and the LM head on head_rows positions (0: no logits in this pass).
struct ForwardShape {
  int64_t P = 0;
  int64_t T = 0;
  int64_t head_rows = 0;
  bool flash = true;
};

/// The candidate peaks of one forward pass (see serve.h for the model).
Breakdown activation_candidates(const ModelSpec& m, int64_t tp, const ForwardShape& shape, int64_t e) {
  Breakdown b;
  b.title = "Activation workspace candidates (largest wins)";
  const int64_t T = shape.T;
  const int64_t P = shape.P;
  const int64_t a_r = m.num_heads / tp;
  const Factor Pf{"P", P}, ef{"e", e}, hf{"h", m.hidden};

  std::vector<std::vector<Factor>> attn{{{"2", 2}, Pf, hf, ef}};
  if (m.mla) {
    const MlaSpec& mla = *m.mla;
    attn.push_back({Pf, {"(a/tp)·(d_nope+d_rope)", a_r * mla.qk_head_dim()}, ef});
    attn.push_back({Pf, {"(r_kv+d_rope)", mla.kv_lora_rank + mla.qk_rope_head_dim}, ef});
    attn.push_back({{"T", T}, {"(a/tp)·(d_nope+d_rope+d_v)", a_r * (mla.qk_head_dim() + mla.v_head_dim)}, ef});
    attn.push_back({Pf, {"(a/tp)·d_v", a_r * mla.v_head_dim}, ef});
  } else {
    const int64_t kv_r = m.kv_heads_per_rank(tp);
    attn.push_back({Pf, {"(a/tp)·d", a_r * m.head_dim}, ef});
    attn.push_back({{"2", 2}, Pf, {"(kv/tp)·d", kv_r * m.head_dim}, ef});
    attn.push_back({Pf, {"(a/tp)·d", a_r * m.head_dim}, ef});
  }
  if (!shape.flash) attn.push_back({{"(a/tp)", a_r}, Pf, {"T", T}, {"(4+e)", 4 + e}});
  b.add(sum_term("activation.attention",
                 shape.flash ? "attention block (flash: no P×T scores)" : "attention block with P×T scores",
                 attn));

  int64_t f = 0;
  for (const auto& l : m.layers)
    if (!l.moe) f = std::max(f, l.ffn);
  if (f > 0) {
    const int64_t f_r = ceil_div(f, tp);
    b.add(sum_term("activation.mlp", m.gated_mlp ? "dense MLP block (gate|up, activation)" : "dense MLP block",
                   {{{"2", 2}, Pf, hf, ef},
                    {Pf, {m.gated_mlp ? "2·(f/tp)" : "(f/tp)", (m.gated_mlp ? 2 : 1) * f_r}, ef},
                    {Pf, {"(f/tp)", f_r}, ef}}));
  }
  if (m.is_moe()) {
    const MoeSpec& moe = *m.moe;
    const int64_t fe_r = ceil_div(moe.expert_ffn, tp);
    const int64_t per_copy = (m.gated_mlp ? 3 : 2) * fe_r + m.hidden;
    b.add(sum_term("activation.moe", "MoE block (k routed copies of each token, fp32 router logits)",
                   {{{"2", 2}, Pf, hf, ef},
                    {Pf, {"k", moe.experts_per_token}, {m.gated_mlp ? "(3·f_e/tp+h)" : "(2·f_e/tp+h)", per_copy}, ef},
                    {Pf, {"E", moe.num_experts}, {"4", 4}}}));
  }
  if (shape.head_rows > 0)
    b.add(sum_term("activation.lm_head", "LM head on the b sampled positions (logits, then fp32)",
                   {{{"b", shape.head_rows}, hf, ef}, {{"b", shape.head_rows}, {"V", m.vocab}, {"(e+4)", e + 4}}}));
  return b;
}

/// The memory term of the activation peak: the largest candidate (vLLM: plus a later rank's
/// receive buffer), or the measured peak given.
Term activation_term(Breakdown& activation, const ModelSpec& model, const ServeOptions& options, bool first_stage,
                     int64_t e) {
  if (options.activation_peak)
    return Term{"activation_workspace", "activation peak (measured, given)", "given",
                format_binary(*options.activation_peak), *options.activation_peak, Exactness::kAllowance,
                "replaces the modelled workspace"};
  auto peak = std::max_element(activation.terms.begin(), activation.terms.end(),
                               [](const Term& x, const Term& y) { return x.bytes < y.bytes; });
  Term t = *peak;
  t.note = "peak: " + t.label;
  t.key = "activation_workspace";
  t.label = options.vllm ? "profile peak (vLLM's torch peak increase)"
                         : "activation workspace (forward only, largest live set)";
  if (options.vllm && !first_stage) {
    // A rank after the first receives hidden states and residual into a buffer of
    // max_num_batched_tokens rows made in the profile run and kept (GMR:5440-5448).
    const int64_t P = options.vllm->max_num_batched_tokens;
    Term buffer = product_term("activation.pp_receive", "pipeline receive buffer (hidden, residual)",
                               {{"2", 2}, {"P", P}, {"h", model.hidden}, {"e", e}});
    t.formula = "max(candidates) + " + buffer.formula;
    t.substituted = fmt::format("{} + {}", t.bytes.count(), buffer.substituted);
    t.bytes += buffer.bytes;
    activation.add(std::move(buffer));
  }
  return t;
}

/// How the workspace was found, for the notes.
void add_profile_notes(std::vector<std::string>& notes, const ServeOptions& options, bool last_stage) {
  if (options.activation_peak) return;
  if (!options.vllm) {
    notes.push_back(fmt::format("prefill pass of P = {} tokens; attention {}",
                                options.prefill_chunk > 0
                                    ? std::min(options.prefill_chunk, options.context_len * options.batch)
                                    : options.context_len,
                                options.flash_attention ? "flash (no score matrix)" : "eager (fp32 scores)"));
    return;
  }
  const VllmOptions& v = *options.vllm;
  const int64_t n = std::min(v.max_num_seqs, v.max_num_batched_tokens);
  notes.push_back(fmt::format(
      "vLLM 0.19 profile run: one eager forward of max_num_batched_tokens = {} tokens in n = {} requests{}",
      v.max_num_batched_tokens, n,
      last_stage ? ", then the sampler warm-up over n requests with full-vocabulary logits (not divided by TP)"
                 : " (not the last pipeline rank: no sampler)"));
  if (last_stage && n < 8)
    notes.push_back("fewer than 8 sampler requests: vLLM's top-k/top-p falls back to a sort, whose buffers are "
                    "not modelled (the sampler term is low)");
}

/// The weights term of the memory breakdown.
Term weights_term(const ServeReport& r, const ResolvedQuant& quant, DType base) {
  return Term{"weights",
              quant.mxfp4_experts
                  ? fmt::format("weights (mxfp4 experts, rest {})", dtype_name(base))
                  : fmt::format("weights ({}{})", dtype_name(quant.weight),
                                is_quantized(quant.weight) ? fmt::format(", rest {}", dtype_name(base)) : ""),
              "Σ weight tensors per GPU", fmt::format("{} tensor kinds", r.weights.terms.size()), r.weights.total()};
}

/// How the weights were counted (quantization, a vision tower) and what was read and not counted.
void add_weight_notes(ServeReport& r, const ModelSpec& model, const ServeOptions& options, const ResolvedQuant& quant,
                      DType base) {
  if (is_quantized(quant.weight))
    r.notes.push_back(fmt::format(
        "{} linear layers with {} scales {}{}; embeddings, LM head, norms, biases and routers stay {}{}",
        dtype_name(quant.weight), dtype_name(quant.scale),
        quant.group > 0 && quant.block_rows > 0 ? fmt::format("per {}×{} block", quant.block_rows, quant.group)
        : quant.group > 0                       ? fmt::format("per group of {} inputs", quant.group)
                                                : (quant.group == 0 ? "per output row" : "per tensor"),
        quant.zero_points ? " and zero points" : "", dtype_name(base),
        quant.source.empty() ? "" : "; as " + quant.source));
  r.warnings = model.warnings;
  if (model.vision)
    r.notes.push_back(fmt::format("the '{}' wrapper's vision tower ({}, {} layers of h_v {}) and projector: {} "
                                  "weights, vllm's TP sharding ({}); the encoder's share of the profile run is not "
                                  "modelled",
                                  model.wrapper_model_type, model.vision->model_type, model.vision->layers,
                                  model.vision->hidden, quant.vision ? dtype_name(quant.weight) : dtype_name(base),
                                  options.tp > 1 ? "qkv/fc1 by column, o/fc2 by row, norms and embeddings whole"
                                                 : "one GPU"));
  if (model.quant) {
    if (options.weights.dtype && model.quant->weight)
      r.warnings.push_back(fmt::format("the weight dtype given ({}) replaces config.json's quantization_config ({}); vLLM "
                                       "loads the checkpoint as it is stored",
                                       dtype_name(*options.weights.dtype), model.quant->summary));
    r.warnings.insert(r.warnings.end(), model.quant->warnings.begin(), model.quant->warnings.end());
  }
}

/// One serving process's memory: the whole model, or one vLLM pipeline rank's layers.
Expected<ServeReport> serve_stage(const ModelSpec& model, const ServeOptions& options, DType base,
                                  const ResolvedQuant& quant, int64_t first_layer, int64_t num_layers, bool first_stage,
                                  bool last_stage) {
  ModelSpec stage = model;
  if (num_layers != model.num_layers) {
    stage.layers.assign(model.layers.begin() + first_layer, model.layers.begin() + first_layer + num_layers);
    stage.num_layers = num_layers;
  }
  KvCacheOptions kv_options = options.kv;
  kv_options.tp = options.tp;
  auto kv = estimate_kv_cache(stage, kv_options, options.context_len, options.batch);
  if (!kv) return kv.error();

  ServeReport r;
  r.base_dtype = base;
  r.weight_dtype = quant.weight;
  r.mxfp4_experts = quant.mxfp4_experts;
  r.first_layer = first_layer;
  r.num_layers = num_layers;
  r.vllm = options.vllm;
  std::vector<WeightTensor> tensors = stage_weight_tensors(model, first_layer, num_layers, first_stage, last_stage);
  if (model.vision) {  // built whole on every pipeline rank (the wrappers' __init__ has no PP split)
    auto vision = vision_weight_tensors(*model.vision, model.hidden);
    tensors.insert(tensors.end(), vision.begin(), vision.end());
  }
  r.weights = weight_breakdown(model, tensors, options.tp, base, quant);
  if (options.vllm)
    if (auto rope = vllm_rope_cache(model, dtype_bytes(base))) r.weights.add(std::move(*rope));
  r.kv = std::move(*kv);
  const int64_t e = dtype_bytes(base);
  if (options.vllm) {
    // The profile forward: max_num_batched_tokens tokens in n requests of their own few tokens (GMR:5286-5290).
    const VllmOptions& v = *options.vllm;
    const int64_t P = v.max_num_batched_tokens;
    r.activation = activation_candidates(stage, options.tp, {P, P, 0, true}, e);
    if (last_stage)
      r.activation.add(vllm_sampler_warmup(model, std::min(v.max_num_seqs, P), P, e, v.gpu_sms));
  } else {
    const int64_t T = options.context_len;
    const int64_t P = options.prefill_chunk > 0 ? std::min(options.prefill_chunk, checked_mul(T, options.batch)) : T;
    r.activation = activation_candidates(stage, options.tp, {P, T, options.batch, options.flash_attention}, e);
  }
  r.memory.title = fmt::format("Serving memory per GPU (tp {})", options.tp);

  r.memory.add(weights_term(r, quant, base));

  Term kv_term;
  if (r.kv.breakdown.terms.size() == 1) {
    kv_term = r.kv.breakdown.terms.front();
  } else {
    kv_term.formula = "Σ layer groups";
    for (const auto& t : r.kv.breakdown.terms)
      kv_term.substituted += (kv_term.substituted.empty() ? "" : " + ") + fmt::format("{}", t.bytes.count());
  }
  kv_term.key = "kv_cache";
  kv_term.label = fmt::format("KV cache ({}, {} × {} tokens)", dtype_name(kv_options.dtype), options.batch,
                              options.context_len);
  kv_term.bytes = r.kv.total;
  r.memory.add(std::move(kv_term));

  r.memory.add(activation_term(r.activation, model, options, first_stage, e));

  if (options.non_torch) {
    r.memory.add(Term{"non_torch", "non-torch memory (given)", "given", format_binary(*options.non_torch),
                      *options.non_torch, Exactness::kAllowance, ""});
  } else if (options.vllm) {
    r.memory.add(vllm_non_torch(options.tp, options.vllm->pp));
  } else {
    r.memory.add(Term{"non_torch", "non-torch allowance (cuBLAS/NCCL workspaces, CUDA graphs)", "given",
                      format_binary(kDefaultNonTorch), kDefaultNonTorch, Exactness::kAllowance,
                      "vLLM measures 0.10-1.79 GiB; CUDA context is outside the utilization budget"});
  }

  r.notes = r.kv.layout.notes;
  add_weight_notes(r, model, options, quant, base);
  add_profile_notes(r.notes, options, last_stage);
  return r;
}

}  // namespace

DType serving_dtype(const ModelSpec& model, std::optional<DType> dtype, std::optional<DType> weight_dtype) {
  if (dtype) return *dtype;
  if (weight_dtype && is_float_storage(*weight_dtype)) return *weight_dtype;
  return model.dtype == DType::kFP32 ? DType::kFP16 : model.dtype;
}

Bytes ServeReport::weights_bytes() const { return memory.find("weights")->bytes; }
Bytes ServeReport::activation_bytes() const { return memory.find("activation_workspace")->bytes; }
Bytes ServeReport::non_torch_bytes() const { return memory.find("non_torch")->bytes; }

Expected<ServeReport> estimate_serving(const ModelSpec& model, const ServeOptions& options) {
  if (auto ok = model.validate(); !ok) return ok.error();
  if (auto ok = check_vllm_context(model, options); !ok) return ok.error();
  if (model.encoder)  // BERT / RoBERTa: bidirectional, no KV cache, nothing to decode token by token
    return Error{ErrorKind::kIncompatible, "model",
                 fmt::format("@model: model_type '{}' is an encoder (bidirectional attention, no KV cache); "
                             "serving models decoders; use `actmem estimate` for its training memory",
                             model.model_type)};
  if (options.tp < 1) return Error{ErrorKind::kInvalid, "tp", fmt::format("@tp {}: must be at least 1", options.tp)};
  if (model.num_heads % options.tp != 0)
    return Error{ErrorKind::kIncompatible, "tp",
                 fmt::format("@tp {}: num_attention_heads ({}) is not divisible by it; valid @tp values: {}",
                             options.tp, model.num_heads, [&] {
                               std::string v;
                               for (int64_t t = 1; t <= model.num_heads; ++t)
                                 if (model.num_heads % t == 0) v += (v.empty() ? "" : ", ") + std::to_string(t);
                               return v;
                             }())};
  // Bounds that keep every product in int64 and reject typos: 16M tokens of context, 1M sequences.
  struct Bound {
    const char* field;
    int64_t value, lo, hi;
  };
  const Bound bounds[] = {{"context_len", options.context_len, 1, int64_t{1} << 24},
                          {"batch", options.batch, 1, int64_t{1} << 20},
                          {"tp", options.tp, 1, int64_t{1} << 14},
                          {"block_size", options.kv.block_size, 0, int64_t{1} << 16},
                          {"prefill_chunk", options.prefill_chunk, 0, int64_t{1} << 24}};
  for (const auto& b : bounds)
    if (b.value < b.lo || b.value > b.hi)
      return Error{ErrorKind::kInvalid, b.field,
                   fmt::format("@{} {} is out of range; use {}..{}", b.field, b.value, b.lo, b.hi)};
  if (model.learned_positions && model.max_positions > 0 && options.context_len > model.max_positions)
    return Error{ErrorKind::kIncompatible, "context_len",
                 fmt::format("@context_len {} exceeds the model's learned position table ({} positions); use "
                             "@context_len <= {}",
                             options.context_len, model.max_positions, model.max_positions)};
  if (options.weights.group_size && *options.weights.group_size > 0 && model.hidden % *options.weights.group_size != 0)
    return Error{ErrorKind::kIncompatible, "quant_group_size",
                 fmt::format("@quant_group_size {}: groups must divide the input width (hidden_size {}); use e.g. 128",
                             *options.weights.group_size, model.hidden)};
  if (options.prefill_chunk < 0)
    return Error{ErrorKind::kInvalid, "prefill_chunk",
                 fmt::format("@prefill_chunk {}: must be a positive number of tokens, or 0 for the whole context",
                             options.prefill_chunk)};

  const DType base = serving_dtype(model, options.dtype, options.weights.dtype);
  if (!is_float_storage(base))
    return Error{ErrorKind::kInvalid, "dtype",
                 fmt::format("@dtype {}: the activation/base dtype must be bf16, fp16 or fp32", dtype_name(base))};
  auto quant = resolve_quant(model, options.weights, base);
  if (!quant) return quant.error();

  if (auto ok = check_vllm_options(model, options); !ok) return ok.error();

  try {
    if (!options.vllm || options.vllm->pp == 1)
      return serve_stage(model, options, base, *quant, 0, model.num_layers, true, true);
    // vLLM pipeline ranks: each its layers, the first the embedding, the last the head and the sampler.
    const std::vector<int64_t> parts = vllm_pp_partition(model.num_layers, options.vllm->pp);
    std::vector<ServeReport> stages;
    int64_t first = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      auto r = serve_stage(model, options, base, *quant, first, parts[i], i == 0, i + 1 == parts.size());
      if (!r) return r.error();
      stages.push_back(std::move(*r));
      first += parts[i];
    }
    auto fullest = std::max_element(stages.begin(), stages.end(),
                                    [](const ServeReport& x, const ServeReport& y) { return x.total() < y.total(); });
    ServeReport r = *fullest;
    r.memory.title = fmt::format("Serving memory per GPU (tp {}, pp {}: rank {} of layers {}..{}, the fullest)",
                                 options.tp, options.vllm->pp, fullest - stages.begin(), r.first_layer,
                                 r.first_layer + r.num_layers - 1);
    r.stages = std::move(stages);
    return r;
  } catch (const OverflowError&) {
    return Error{ErrorKind::kOverflow, "context_len",
                 "serving memory overflowed int64; check @context_len, @batch and the model's sizes"};
  }
}

Expected<CapacityReport> estimate_capacity(const ModelSpec& model, const ServeReport& serving,
                                           const CapacityOptions& options) {
  if (options.gpu_memory.count() <= 0)
    return Error{ErrorKind::kInvalid, "gpu_memory", "@gpu_memory: must be a positive size, e.g. 80GiB, or pick @gpu"};
  if (!(options.utilization > 0.0 && options.utilization <= 1.0))
    return Error{ErrorKind::kInvalid, "gpu_memory_utilization",
                 fmt::format("@gpu_memory_utilization {}: must be in (0, 1], e.g. 0.9", options.utilization)};
  try {
    CapacityReport c;
    c.gpu_memory = options.gpu_memory;
    c.utilization = options.utilization;
    c.usable = Bytes{static_cast<int64_t>(std::floor(static_cast<double>(options.gpu_memory.count()) *
                                                     options.utilization))};
    c.budget.title = "KV cache budget per GPU (vLLM)";
    c.budget.add(Term{"usable", "GPU memory × utilization", "M·u",
                      fmt::format("{} × {}", options.gpu_memory.count(), options.utilization), c.usable});
    subtract_from_budget(c.budget, serving);
    c.kv_budget = c.budget.total();
    c.fits = serving.total() <= c.usable;
    if (options.kv_cache_memory) {
      if (!serving.vllm)
        return Error{ErrorKind::kIncompatible, "kv_cache_memory",
                     "@kv_cache_memory is vLLM's --kv-cache-memory-bytes; drop it or use @vllm_version 0.19"};
      if (options.kv_cache_memory->count() <= 0)
        return Error{ErrorKind::kInvalid, "kv_cache_memory", "@kv_cache_memory: must be a positive size, e.g. 40GiB"};
      c.kv_budget = *options.kv_cache_memory;
    }

    const KvCacheLayout& layout = serving.kv.layout;
    const int64_t budget = std::max<int64_t>(0, c.kv_budget.count());
    if (layout.block_size > 0) {
      c.kv_blocks = budget / checked_mul(layout.block_size, layout.per_token.count());
      c.kv_tokens = c.kv_blocks * layout.block_size;
    } else {
      c.kv_tokens = budget / layout.per_token.count();
    }
    c.max_sequences = budget / layout.per_sequence(serving.kv.context_len).count();

    // Longest context for b sequences: per_sequence is non-decreasing in T, so bisect.
    const int64_t batch = serving.kv.batch;
    const int64_t limit = model.max_positions > 0 ? model.max_positions : int64_t{1} << 31;
    auto fits_tokens = [&](int64_t t) { return checked_mul(batch, layout.per_sequence(t).count()) <= budget; };
    int64_t lo = 0, hi = limit;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits_tokens(mid))
        lo = mid;
      else
        hi = mid - 1;
    }
    c.max_context_len = lo;
    c.context_limited_by_model = model.max_positions > 0 && lo == model.max_positions;

    if (serving.vllm)
      if (auto v = apply_vllm_capacity(c, model, serving, options); !v) return v.error();
    return c;
  } catch (const OverflowError&) {
    return Error{ErrorKind::kOverflow, "gpu_memory", "capacity arithmetic overflowed int64; check @gpu_memory"};
  }
}

}  // namespace actmem
