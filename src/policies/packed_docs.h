// --packed-docs N: padding-free packing (transformers DataCollatorWithFlattening, TRL's padding_free):
// N documents of s/N tokens in each row of s tokens, with position_ids restarting at 0 per document
// and no attention_mask, so that no document attends to another. What changes in the saved
// tensors (validation/notes/packed-sequences.md; transformers 4.57 and 5, src/transformers/
// masking_utils.py and modeling_flash_attention_utils.py; measured by validation/packed_validation.py):
//
//   every attention   position_ids are the collator's (b, s) int64 tensor, passed to every decoder
//                     layer (a checkpoint input under full recomputation, beside cache_position), and
//                     the rotary embedding computes cos/sin from them: (b, s, d) instead of (1, s, d).
//   flash_attention_2 _is_packed_sequence (batch 1 only) sends the row to flash_attn_varlen_func with
//                     cu_seqlens built per layer from position_ids (prepare_fa_kwargs_from_position_ids:
//                     int32, N + 1 entries, cu_seq_lens_k the same tensor), which the varlen Function
//                     saves: 4·(N+1) bytes per layer. q, k, v, out and the fp32 logsumexp are as today.
//   sdpa              create_causal_mask and-s the packed-document mask function in (torch ≥ 2.6) and
//                     may not skip the mask: sdpa_mask materializes a (b, 1, s, s) bool mask, one
//                     model-level storage passed to every layer. With a mask, sdpa_attention_forward
//                     repeats k and v to every query head (use_gqa_in_sdpa is False), and torch's SDPA
//                     converts the bool mask to a float bias in the activation dtype per call
//                     (attention.cpp convert_boolean_attn_mask) and runs the memory-efficient kernel
//                     (the flash kernel takes no mask), which saves the bias for backward: e·b·s² per
//                     layer. Read from the source and emulated on torch 1.13 (no GPU measurement).
//   eager             the (b, 1, s, s) additive mask is the one already counted; nothing else changes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/arch.h"  // hf_quirks: Llama 4
#include "model/model_spec.h"
#include "policies/options.h"

namespace actmem {

/// Notes for explain: what packing changed, and what the attention FLOPs count.
/// Example: packed_docs_notes({.packed_docs = 4}, {.seq_len = 4096})[0] starts "packed rows: 4 documents".
std::vector<std::string> packed_docs_notes(const Workload& w, const Layout& l);

/// Keys each query attends to in the attention FLOPs (the full square of each document, as the unpacked
/// count takes the full s×s): s/N under flash_attention_2's varlen kernel, which computes per document;
/// s otherwise (sdpa and eager compute the whole masked s×s). `window` > 0: a sliding window caps it.
double packed_attention_keys(const Workload& w, int64_t seq_len, int64_t window);

}  // namespace actmem

namespace actmem::detail {

/// --packed-docs against the model, the workload and the layout; a Reporter as in layout_checks.h.
template <typename Reporter>
bool check_packed_docs(const ModelSpec& m, const Workload& w, const Layout& l, Reporter& r) {
  if (w.packed_docs == 0) return true;
  if (w.packed_docs < 2 || w.packed_docs > l.seq_len)
    return r.fail(ErrorKind::kInvalid, "packed_docs", [&] {
      return fmt::format("@packed_docs {} is out of range; use 2..{} (documents per row of @seq_len {} tokens), or 0 "
                         "for unpacked rows",
                         w.packed_docs, l.seq_len, l.seq_len);
    });
  if (w.framework != Framework::kHF)
    return r.fail(ErrorKind::kIncompatible, "packed_docs", [] {
      return std::string("@packed_docs: packed rows are modelled for @framework hf (transformers' padding-free "
                         "packing); drop @packed_docs or use @framework hf");
    });
  if (m.encoder)
    return r.fail(ErrorKind::kIncompatible, "packed_docs", [] {
      return std::string("@packed_docs: encoders (bert, roberta) take no packed position ids in transformers; drop "
                         "@packed_docs");
    });
  if (m.learned_positions)
    return r.fail(ErrorKind::kIncompatible, "packed_docs", [] {
      return std::string("@packed_docs: packed rows are modelled for RoPE decoders; a learned position table "
                         "(gpt2, gpt_bigcode) is not; drop @packed_docs");
    });
  if (hf_quirks(m).llama4)
    return r.fail(ErrorKind::kIncompatible, "packed_docs", [] {
      return std::string("@packed_docs: Llama 4's complex RoPE table and chunked attention mask under packed rows "
                         "are not modelled; drop @packed_docs");
    });
  if (w.hf_version == HfVersion::k4_44)
    return r.fail(ErrorKind::kIncompatible, "packed_docs", [] {
      return std::string("@packed_docs: transformers 4.44 builds no packed-document mask (masking_utils came "
                         "later); use @hf_version 4.57 or 5");
    });
  if (w.attention == AttentionImpl::kFlash && l.micro_batch > 1)
    return r.fail(ErrorKind::kIncompatible, "packed_docs", [&] {
      return fmt::format("@packed_docs with @attention flash needs @micro_batch 1: transformers sends packed rows "
                         "to flash_attn_varlen_func only at batch 1 (_is_packed_sequence), and at {} its documents "
                         "would attend to each other; pack the micro-batch into one row (DataCollatorWithFlattening "
                         "does) with @seq_len {}",
                         l.micro_batch, l.seq_len * l.micro_batch);
    });
  if (l.parallel.cp > 1)
    return r.fail(ErrorKind::kIncompatible, "packed_docs", [] {
      return std::string("@packed_docs with @cp > 1 is not modelled (documents split across ranks); drop one");
    });
  return true;
}

}  // namespace actmem::detail
