#include "policies/finetune.h"

#include <algorithm>
#include <array>
#include <bit>  // std::popcount
#include <stdexcept>

#include "util/text_table.h"  // group_digits, format_binary
#include "policies/frozen_layers.h"  // frozen_parts: what a label calls frozen

namespace actmem {

namespace {

// Each LoRA target: its short name here and the module name PEFT's target_modules match (the end
// of the module's dotted name).
struct TargetName {
  unsigned bit;
  std::string_view name;
  std::string_view module;
};
constexpr std::array<TargetName, 7> kTargets{{{kLoraQ, "q", "q_proj"},
                                              {kLoraK, "k", "k_proj"},
                                              {kLoraV, "v", "v_proj"},
                                              {kLoraO, "o", "o_proj"},
                                              {kLoraGate, "gate", "gate_proj"},
                                              {kLoraUp, "up", "up_proj"},
                                              {kLoraDown, "down", "down_proj"}}};

// bitsandbytes, bitsandbytes/functional.py quantize_4bit: 64 weights per absmax block (Params4bit's
// default blocksize); with compress_statistics the absmax is itself quantized blockwise, 256 per block.
constexpr int64_t kNf4Block = 64;
constexpr int64_t kNf4DoubleQuantBlock = 256;
// bitsandbytes, bitsandbytes/optim/optimizer.py (Optimizer2State.init_state): 8-bit state in
// blocks of 2048 with one fp32 absmax each; tensors under min_8bit_size = 4096 elements keep fp32
// state; get_state_buffer pages (cudaMallocManaged) only buffers of tensors with >= 1e5 elements.
constexpr int64_t k8bitBlock = 2048;
constexpr int64_t k8bitMinSize = 4096;
constexpr int64_t kPagedMinSize = 100'000;

int64_t element_bytes(DType t) { return dtype_bits(t) / 8; }

bool is_matrix(const WeightTensor& t) { return t.cols > 1; }

int64_t quant_scale_bytes(int64_t rows, int64_t cols, BaseWeights base, bool double_quant) {
  const int64_t n = checked_mul(rows, cols);
  switch (base) {
    case BaseWeights::kNF4: {
      const int64_t blocks = ceil_div(n, kNf4Block);
      if (!double_quant) return checked_mul(4, blocks);
      return blocks + 4 * ceil_div(blocks, kNf4DoubleQuantBlock) + 4;  // uint8 absmax, fp32 per 256, offset
    }
    case BaseWeights::kInt8:
      return checked_mul(4, rows);  // SCB: one fp32 scale per output row
    default:
      return 0;
  }
}

// Muon is refused with weight-shape static memory (check_options), so it never reaches here.
[[noreturn]] void muon_unreachable() {
  throw std::logic_error("Muon reached the fine-tuning static memory, which does not model it");
}

/// Adds `copies` trainable tensors of rows × cols in dtype `param`, their gradients in `grad`.
void add_trainable(FinetuneStatic& s, const Workload& w, int64_t rows, int64_t cols, int64_t copies, DType param,
                   DType grad) {
  const int64_t n = checked_mul(rows, cols);
  const int64_t all = checked_mul(n, copies);
  s.trainable = checked_add(s.trainable, all);
  s.largest_trainable = std::max(s.largest_trainable, n);
  s.trainable_weights += Bytes{checked_mul(all, element_bytes(param))};
  s.gradients += Bytes{checked_mul(all, element_bytes(grad))};
  const bool mixed = w.precision == Precision::kMixed;
  if (mixed && param != DType::kFP32 && w.optimizer != Optimizer::kAdafactor)
    s.master += Bytes{checked_mul(all, 4)};
  // Moments: fp32 under mixed precision; under pure precision torch.optim's zeros_like(p) makes
  // them the parameter's dtype.
  const int64_t moment = mixed ? 4 : element_bytes(param);
  const bool paged = n >= kPagedMinSize;
  int64_t state = 0;        // one tensor instance
  int64_t paged_state = 0;  // of which in unified memory
  switch (w.optimizer) {
    case Optimizer::kAdamW:
      state = 2 * moment * n;
      break;
    case Optimizer::kPagedAdamW:
      // bitsandbytes' 32-bit optimizers keep fp32 state whatever the parameter dtype (optim_bits=32).
      state = 2 * 4 * n;
      paged_state = paged ? state : 0;
      break;
    case Optimizer::kAdamW8bit:
    case Optimizer::kPagedAdamW8bit:
      if (n < k8bitMinSize) {
        state = 2 * 4 * n;
      } else {
        state = 2 * n + 2 * 4 * ceil_div(n, k8bitBlock);
        if (w.optimizer == Optimizer::kPagedAdamW8bit && paged) paged_state = 2 * n;  // absmax stays on the GPU
      }
      break;
    case Optimizer::kSGD:
      state = moment * n;  // momentum_buffer (torch.optim.SGD)
      break;
    case Optimizer::kSGDPlain:
      state = 0;
      break;
    case Optimizer::kAdafactor:
      // transformers' Adafactor (optimization.py): grad.float(); a matrix keeps exp_avg_sq_row
      // (shape[:-1]) and exp_avg_sq_col (shape[-1:]) in fp32, a vector a full fp32 exp_avg_sq; no
      // exp_avg unless beta1 is set (default None); no master copy (the update runs on p.float()).
      state = cols > 1 ? 4 * (rows + cols) : 4 * n;
      break;
    case Optimizer::kMuon:
      muon_unreachable();
  }
  s.state += Bytes{checked_mul(state, copies)};
  s.paged_state += Bytes{checked_mul(paged_state, copies)};
}

}  // namespace

Expected<unsigned> parse_lora_targets(std::string_view text) {
  if (text == "all") return unsigned{kLoraAll};
  unsigned out = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view word = text.substr(start, comma - start);
    bool found = false;
    for (const TargetName& t : kTargets)
      if (word == t.name || word == t.module) {
        out |= t.bit;
        found = true;
      }
    if (!found)
      return Error{ErrorKind::kUnknownName, "lora_targets",
                   fmt::format("@lora_targets: unknown layer '{}'; use a comma-separated subset of "
                               "q,k,v,o,gate,up,down, or all",
                               word)};
    start = comma + 1;
  }
  return out;
}

std::string lora_targets_name(unsigned targets) {
  std::string out;
  for (const TargetName& t : kTargets)
    if (targets & t.bit) out += (out.empty() ? "" : ",") + std::string(t.name);
  return out;
}

Expected<LoraTargets> resolve_lora_targets(const std::vector<WeightTensor>& tensors, bool fused_qkv,
                                           bool fused_gate_up, unsigned targets) {
  unsigned has = (fused_qkv ? kLoraQ | kLoraK | kLoraV : 0u) | (fused_gate_up ? kLoraGate | kLoraUp : 0u);
  for (const TargetName& target : kTargets)
    for (const WeightTensor& t : tensors)
      if (lora_targets(t, target.bit)) {
        has |= target.bit;
        break;
      }
  if (has == 0)
    return Error{ErrorKind::kIncompatible, "lora_targets",
                 fmt::format("@lora_targets {}: this model has none of the projections LoRA targets (q_proj, k_proj, "
                             "v_proj, o_proj, gate_proj, up_proj, down_proj)", lora_targets_name(targets))};
  if (targets == kLoraAll) return LoraTargets{has, 0};
  if ((targets & has) == 0)  // PEFT: ValueError, target modules not found in the base model
    return Error{ErrorKind::kIncompatible, "lora_targets",
                 fmt::format("@lora_targets {}: this model has no {} projection{}; target some of {}, or all",
                             lora_targets_name(targets), lora_targets_name(targets),
                             std::popcount(targets) > 1 ? "s" : "", lora_targets_name(has))};
  return LoraTargets{targets & has, targets & ~has};
}

bool lora_targets(const WeightTensor& t, unsigned targets) {
  if (t.role != WeightRole::kLinear || !is_matrix(t) || t.part == WeightPart::kRoutedExperts) return false;
  const std::string_view name = t.name;
  for (const TargetName& target : kTargets) {  // "….q_proj": a whole module name, no allocation
    const std::string_view module = target.module;
    if ((targets & target.bit) && name.size() > module.size() && name.ends_with(module) &&
        name[name.size() - module.size() - 1] == '.')
      return true;
  }
  return false;
}

bool needs_weight_shapes(const Workload& w) {
  return w.lora.enabled() || w.optimizer_in_backward || w.freeze_embeddings || w.frozen_layers != 0 ||
         w.optimizer == Optimizer::kAdafactor ||
         w.optimizer == Optimizer::kPagedAdamW || w.optimizer == Optimizer::kPagedAdamW8bit;
}

int64_t base_matrix_bytes(int64_t rows, int64_t cols, BaseWeights base, bool double_quant) {
  const int64_t n = checked_mul(rows, cols);
  switch (base) {
    case BaseWeights::kNF4:
      return ceil_div(n, 2) + quant_scale_bytes(rows, cols, base, double_quant);
    case BaseWeights::kInt8:
      return n + quant_scale_bytes(rows, cols, base, double_quant);
    case BaseWeights::kFP32:
      return checked_mul(n, 4);
    case BaseWeights::kBF16:
    case BaseWeights::kFP16:
      return checked_mul(n, 2);
  }
  return 0;
}

FinetuneStatic finetune_static(const std::vector<WeightTensor>& tensors, const Workload& w, int64_t tp) {
  FinetuneStatic s;
  const LoraOptions& lora = w.lora;
  for (const WeightTensor& t : tensors) {
    const int64_t rows = t.rank_rows(tp);
    const int64_t cols = t.rank_cols(tp);
    const int64_t n = checked_mul(rows, cols);
    if (!lora.enabled()) {
      // get_input_embeddings(): the token embedding (a tied head is this tensor too), not GPT-2's wpe.
      if (t.frozen || (w.freeze_embeddings && t.role == WeightRole::kEmbedding && t.name == "embed_tokens")) {
        s.frozen = checked_add(s.frozen, checked_mul(n, t.count));
        s.frozen_weights += Bytes{checked_mul(checked_mul(n, element_bytes(w.weight_dtype)), t.count)};
        continue;
      }
      add_trainable(s, w, rows, cols, t.count, w.weight_dtype, w.grad_dtype);
      continue;
    }
    // LoRA: the base model is frozen. bitsandbytes (through transformers' quantizer) replaces the
    // nn.Linear layers; embeddings, norms, biases, routers and the LM head (llm_int8_skip_modules)
    // stay in the model dtype.
    s.frozen = checked_add(s.frozen, checked_mul(n, t.count));
    if (t.role == WeightRole::kLinear && is_matrix(t)) {
      s.frozen_weights += Bytes{checked_mul(base_matrix_bytes(rows, cols, lora.base, lora.double_quant), t.count)};
      s.quant_scales += Bytes{checked_mul(quant_scale_bytes(rows, cols, lora.base, lora.double_quant), t.count)};
    } else {
      s.frozen_weights += Bytes{checked_mul(checked_mul(n, element_bytes(w.weight_dtype)), t.count)};
    }
    if (lora_targets(t, lora.targets)) {
      // PEFT lora.Linear: lora_A = Linear(in, r) (an r × in weight), lora_B = Linear(r, out)
      // (out × r), no biases. Under TP a column-parallel layer splits B's rows, a row-parallel one
      // A's columns, as the base layer's own split (Megatron's LoRA layers).
      const int64_t before = s.trainable;
      add_trainable(s, w, lora.rank, cols, t.count, lora.adapter_dtype, lora.adapter_dtype);
      add_trainable(s, w, rows, lora.rank, t.count, lora.adapter_dtype, lora.adapter_dtype);
      s.adapter_params = checked_add(s.adapter_params, s.trainable - before);
    }
  }
  if (w.optimizer_in_backward) {
    // torchtune's optimizer_in_bwd: a post-accumulate-grad hook steps each parameter and frees its
    // gradient, so at most one parameter's gradient exists at a time: the largest one.
    const DType grad = lora.enabled() ? lora.adapter_dtype : w.grad_dtype;
    s.gradients = Bytes{checked_mul(s.largest_trainable, element_bytes(grad))};
  }
  return s;
}

StageStatic finetune_stage_static(const FinetuneStatic& s, int zero_stage, bool offload, int64_t dp) {
  auto shard = [&](Bytes b, int stage_needed) {
    return zero_stage >= stage_needed && dp > 1 ? Bytes{ceil_div(b.count(), dp)} : b;
  };
  StageStatic m;
  m.weights = s.frozen_weights + s.trainable_weights;
  m.gradients = shard(s.gradients, 2);
  const Bytes optimizer = shard(s.optimizer(), 1);
  if (offload)
    m.cpu_optimizer = optimizer;
  else
    m.optimizer = optimizer;
  return m;
}

namespace {

/// The optimizer state per trainable tensor, as the optimizer term's formula writes it.
std::string finetune_state_rule(const Workload& w) {
  switch (w.optimizer) {
    case Optimizer::kAdamW:
      return w.precision == Precision::kMixed ? "4 (m) + 4 (v) per param" : "e (m) + e (v) per param";
    case Optimizer::kPagedAdamW:
      return "4 (m) + 4 (v) per param, fp32 (bitsandbytes 32-bit)";
    case Optimizer::kAdamW8bit:
    case Optimizer::kPagedAdamW8bit:
      return "2 + 2·4·⌈n/2048⌉ per tensor of n ≥ 4096, else 8·n (bitsandbytes)";
    case Optimizer::kSGD:
      return w.precision == Precision::kMixed ? "4 (momentum) per param" : "e (momentum) per param";
    case Optimizer::kSGDPlain:
      return "none";
    case Optimizer::kAdafactor:
      return "4·(rows + cols) per matrix, 4·n per vector (transformers Adafactor)";
    case Optimizer::kMuon:
      muon_unreachable();
  }
  return {};
}

}  // namespace

std::vector<Term> describe_finetune_static(const FinetuneStatic& s, const Workload& w, int zero_stage, int64_t dp,
                                           bool offload, Bytes weights, Bytes gradients, Bytes optimizer) {
  const LoraOptions& lora = w.lora;
  const DType param = lora.enabled() ? lora.adapter_dtype : w.weight_dtype;
  const DType grad = lora.enabled() ? lora.adapter_dtype : w.grad_dtype;
  auto sharded = [&](int stage_needed) {
    return zero_stage >= stage_needed && dp > 1 ? fmt::format(", ZeRO-{} over DP {}", zero_stage, dp) : std::string();
  };
  std::vector<Term> terms;
  Term wt;
  wt.key = "weights";
  wt.bytes = weights;
  if (lora.enabled()) {
    wt.label = fmt::format("Weights: frozen base (linear layers {}{}) + LoRA adapters r={} on {} ({})",
                           kBaseWeightNames.name(lora.base), lora.double_quant ? ", double-quantized" : "", lora.rank,
                           lora_targets_name(lora.targets), dtype_name(param));
    wt.formula = "Σ frozen tensors in their storage + Ψ_adapters · e_a (adapters: Σ r·(in + out) per targeted linear)";
    wt.substituted = fmt::format("{} B ({} params; {} B of them block scales) + {} × {} B", group_digits(s.frozen_weights.count()),
                                 group_digits(s.frozen), group_digits(s.quant_scales.count()),
                                 group_digits(s.adapter_params), element_bytes(param));
  } else {
    wt.label = fmt::format("Weights ({}{})", dtype_name(param), s.frozen > 0 ? ", " + frozen_parts(w) + " frozen" : "");
    wt.formula = fmt::format("Ψ_gpu · {}", element_bytes(param));
    wt.substituted = s.frozen > 0 ? fmt::format("({} trainable + {} frozen) params × {} B", group_digits(s.trainable),
                                                group_digits(s.frozen), element_bytes(param))
                                  : fmt::format("{} params × {} B", group_digits(s.trainable), element_bytes(param));
  }
  terms.push_back(wt);

  Term gt;
  gt.key = "gradients";
  gt.bytes = gradients;
  const std::string whose = lora.enabled() ? "adapters only" : s.frozen > 0 ? "all but " + frozen_parts(w) : "all parameters";
  if (w.optimizer_in_backward) {
    gt.label = fmt::format("Gradients ({}): one parameter at a time, optimizer step in backward", dtype_name(grad));
    gt.formula = "Ψ_largest · e_g (each gradient is freed after its own update)";
    gt.substituted = fmt::format("{} params × {} B", group_digits(s.largest_trainable), element_bytes(grad));
  } else {
    gt.label = fmt::format("Gradients ({}, {})", dtype_name(grad), whose);
    gt.formula = "Ψ_trainable · e_g";
    gt.substituted =
        fmt::format("{} params × {} B{}", group_digits(s.trainable), element_bytes(grad), sharded(2));
  }
  terms.push_back(gt);

  Term ot;
  ot.key = "optimizer";
  ot.bytes = optimizer;
  ot.label = fmt::format("Optimizer state ({}, {} precision, {}{})", kOptimizerNames.name(w.optimizer),
                         kPrecisionNames.name(w.precision), whose, offload ? ", offloaded to CPU: 0 on GPU" : "");
  const std::string state_rule = finetune_state_rule(w);
  ot.formula = (s.master > Bytes{0} ? std::string("4·Ψ_trainable (fp32 master) + ") : std::string()) + state_rule;
  ot.substituted = fmt::format("{}{} B{}", s.master > Bytes{0} ? group_digits(s.master.count()) + " + " : "",
                               group_digits(s.state.count()), sharded(1));
  if (s.paged_state > Bytes{0})
    ot.note = fmt::format("{} of it in unified memory (paged): counted here, on the GPU", format_binary(s.paged_state));
  terms.push_back(ot);
  return terms;
}

int64_t dequantized_weight_bytes(const std::vector<WeightTensor>& tensors, const Workload& w, int64_t tp) {
  if (!w.lora.enabled() || w.lora.base != BaseWeights::kNF4) return -1;
  int64_t largest = 0;
  for (const WeightTensor& t : tensors)
    if (t.role == WeightRole::kLinear && is_matrix(t))
      largest = std::max(largest, checked_mul(t.rank_rows(tp), t.rank_cols(tp)));
  return checked_mul(largest, dtype_bits(w.dtype) / 8);
}

std::string finetune_summary(const Workload& w) {
  std::string out;
  if (w.precision == Precision::kPure) out += ", pure precision";
  if (w.optimizer_in_backward) out += ", optimizer step in backward";
  if (w.lora.enabled())
    out += fmt::format(", LoRA r={} on {} ({} base{}, {} adapters)", w.lora.rank, lora_targets_name(w.lora.targets),
                       kBaseWeightNames.name(w.lora.base), w.lora.double_quant ? " double-quantized" : "",
                       dtype_name(w.lora.adapter_dtype));
  return out;
}

std::vector<std::string> finetune_notes(const FinetuneStatic& s, const Workload& w) {
  std::vector<std::string> notes;
  const LoraOptions& lora = w.lora;
  if (lora.enabled()) {
    notes.push_back(fmt::format("LoRA r={} on {}: {} trainable adapter parameters (A r×in and B out×r per targeted "
                                "linear), {} frozen",
                                lora.rank, lora_targets_name(lora.targets), group_digits(s.adapter_params),
                                group_digits(s.frozen)));
    if (lora.unmatched != 0)
      notes.push_back(fmt::format("LoRA target {} names no projection of this model: adapted nowhere, as PEFT "
                                  "matches no module there",
                                  lora_targets_name(lora.unmatched)));
    if (lora.base == BaseWeights::kNF4)
      notes.push_back(lora.double_quant
                          ? "nf4 (bitsandbytes Linear4bit): 4-bit codes + 8-bit absmax per 64 weights + fp32 scale "
                            "per 256 blocks + fp32 offset per tensor; the 16-entry code tables are left out"
                          : "nf4 (bitsandbytes Linear4bit): 4-bit codes + fp32 absmax per 64 weights");
    if (lora.base == BaseWeights::kInt8)
      notes.push_back("int8 (bitsandbytes Linear8bitLt): int8 weights + one fp32 scale per output row");
    if (lora.base == BaseWeights::kInt8 || lora.base == BaseWeights::kNF4)
      notes.push_back("embeddings, norms, biases, routers and the LM head stay in the weight dtype, as transformers' "
                      "bitsandbytes quantizer leaves them");
    notes.push_back("LoRA activations as PEFT's lora.Linear saves them (validation/lora_validation.py): frozen "
                    "linears and norm weights keep no input; each adapter keeps its dropout mask and dropped input "
                    "(or x at lora_dropout 0) and the rank-r intermediate, in the activation dtype (PEFT's fp32 "
                    "adapters outside autocast add an fp32 copy of x: not modelled); the frozen embedding's "
                    "input_ids (8·s·b) are still counted");
  }
  if (w.optimizer == Optimizer::kPagedAdamW || w.optimizer == Optimizer::kPagedAdamW8bit)
    notes.push_back(fmt::format("paged optimizer: {} of state lives in CUDA unified memory (bitsandbytes pages the "
                                "state of tensors with >= 100,000 elements); it is counted on the GPU, where it sits "
                                "when memory allows, and the driver evicts it to host memory under pressure",
                                format_binary(s.paged_state)));
  if (w.precision == Precision::kPure)
    notes.push_back("pure precision: no fp32 master copy; torch.optim keeps its state in the parameter dtype");
  if (w.optimizer_in_backward)
    notes.push_back("optimizer step in backward (torchtune optimizer_in_bwd): no gradient accumulation and no "
                    "gradient clipping over the whole model are possible");
  return notes;
}

}  // namespace actmem
