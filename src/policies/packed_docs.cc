#include "policies/packed_docs.h"

#include <algorithm>

namespace actmem {

std::vector<std::string> packed_docs_notes(const Workload& w, const Layout& l) {
  std::vector<std::string> notes;
  if (w.packed_docs == 0) return notes;
  const int64_t n = w.packed_docs;
  notes.push_back(fmt::format(
      "packed rows: {} documents of ~{} tokens in each row of s = {} (padding-free packing, position_ids restarting "
      "per document): the (b, s) int64 position ids are passed to every layer and RoPE's cos/sin are (b, s, d)",
      n, l.seq_len / n, l.seq_len));
  switch (w.attention) {
    case AttentionImpl::kFlash:
      notes.push_back(fmt::format(
          "packed rows, flash: flash_attn_varlen_func saves each layer's int32 cu_seqlens ({} + 1 entries, "
          "prepare_fa_kwargs_from_position_ids); attention FLOPs are per document, 2·b·a·s·(s/N)·(d_qk + d_v) for "
          "N equal documents (each document's full square, no causal halving; unequal ones cost more: Σ len²)",
          n));
      break;
    case AttentionImpl::kSdpa:
      notes.push_back(
          "packed rows, sdpa: a (b, 1, s, s) bool mask (sdpa_mask, torch ≥ 2.6) passed to every layer; with a mask "
          "k and v are repeated to every query head and torch's memory-efficient kernel saves the mask converted to "
          "a float bias, e·b·s² per layer (torch attention.cpp; emulated, not measured on a GPU; padded to a "
          "multiple of 16 keys, the logsumexp to 32 rows); below torch 2.6 transformers applies no packed mask "
          "and documents attend to each other. Attention FLOPs stay s×s (the masked square is computed)");
      break;
    case AttentionImpl::kEager:
      notes.push_back(
          "packed rows, eager: the (b, 1, s, s) additive mask keeps its shape (the packed-document pattern is "
          "and-ed in, torch ≥ 2.6); attention FLOPs stay s×s (the masked square is computed)");
      break;
  }
  return notes;
}

double packed_attention_keys(const Workload& w, int64_t seq_len, int64_t window) {
  double keys = static_cast<double>(seq_len);
  if (w.packed_docs > 0 && w.attention == AttentionImpl::kFlash)
    keys = static_cast<double>(seq_len) / static_cast<double>(w.packed_docs);
  if (window > 0) keys = std::min(keys, static_cast<double>(window));
  return keys;
}

}  // namespace actmem
