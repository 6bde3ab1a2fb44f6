// What actmem models of an encoder (BERT, RoBERTa; ModelSpec::encoder), checked once: HF
// transformers' BertModel / RobertaModel (4.5x layout: eager and sdpa attention, flash read as sdpa; called
// with input_ids and labels only) trained in full on one GPU per data-parallel rank. Everything
// else is refused with the option at fault rather than estimated with rules that do not hold.
#pragma once

#include <string>

#include <fmt/format.h>

#include "actmem/expected.h"
#include "model/model_spec.h"
#include "policies/options.h"

namespace actmem::detail {

inline Expected<void> check_encoder_workload(const ModelSpec& m, const Workload& w) {
  if (!m.encoder) return {};
  if (w.framework != Framework::kHF)
    return Error{ErrorKind::kIncompatible, "framework",
                 fmt::format("@framework {}: model_type '{}' is an encoder modeled as HF transformers runs it; use "
                             "@framework hf",
                             kFrameworkNames.name(w.framework), m.model_type)};
  // @attention flash is taken as sdpa: BertSdpaSelfAttention's scaled_dot_product_attention runs the flash
  // kernel on CUDA in bf16/fp16 and keeps what flash keeps (BertModel offers no flash_attention_2 here).
  if (w.lora.enabled())
    return Error{ErrorKind::kIncompatible, "lora_rank",
                 "@lora_rank: LoRA on an encoder (frozen embeddings LayerNorm, post-LN layers) is not modeled yet; "
                 "drop @lora_rank"};
  if (w.freeze_embeddings)
    return Error{ErrorKind::kIncompatible, "freeze_embeddings",
                 "@freeze_embeddings: a frozen encoder embedding (its LayerNorm still trained) is not modeled; drop "
                 "@freeze_embeddings"};
  if (w.loss != LossImpl::kFull)
    return Error{ErrorKind::kIncompatible, "loss",
                 "@loss: chunked and fused losses are written for causal LM heads; an encoder's head uses "
                 "CrossEntropyLoss; use @loss full"};
  return {};
}

/// Data parallelism only (HF Trainer / accelerate DDP or ZeRO): no tensor, pipeline, context or
/// expert parallelism for an encoder.
template <typename Reporter>
bool check_encoder_layout(const ModelSpec& m, const Layout& l, Reporter& r) {
  if (!m.encoder) return true;
  const auto& p = l.parallel;
  if (p.tp > 1 || p.pp > 1 || p.cp > 1 || p.ep > 1)
    return r.fail(ErrorKind::kIncompatible, "tp", [&] {
      return fmt::format("model_type '{}' (an encoder) is modeled with data parallelism only; @tp, @pp, @cp and @ep "
                         "must be 1",
                         m.model_type);
    });
  return true;
}

}  // namespace actmem::detail
