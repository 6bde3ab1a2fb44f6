#include "serve/generate.h"

#include <algorithm>

#include <fmt/format.h>

#include "report/render.h"  // terms_json, render_terms
#include "serve/kv_cache.h"
#include "serve/serve.h"
#include "util/text_table.h"

namespace actmem {

namespace {

Term kv_term(const std::string& key, const KvCacheReport& kv, DType dtype, int64_t tokens, int64_t batch) {
  Term t;
  if (kv.breakdown.terms.size() == 1) {
    t = kv.breakdown.terms.front();
  } else {
    t.formula = "Σ layer groups";
    for (const auto& g : kv.breakdown.terms)
      t.substituted += (t.substituted.empty() ? "" : " + ") + fmt::format("{}", g.bytes.count());
  }
  t.key = key;
  t.label = fmt::format("KV cache (DynamicCache, {}, {} × {} tokens)", dtype_name(dtype), batch, tokens);
  t.bytes = kv.total;
  return t;
}

}  // namespace

Expected<GenerateReport> estimate_generate(const ModelSpec& m, const GenerateOptions& o) {
  if (auto ok = m.validate(); !ok) return ok.error();
  if (m.encoder)  // BERT / RoBERTa: bidirectional, no KV cache, nothing to decode token by token
    return Error{ErrorKind::kIncompatible, "model",
                 fmt::format("@model: model_type '{}' is an encoder (bidirectional attention, no KV cache); "
                             "generate models decoders; use `actmem estimate` for its training memory",
                             m.model_type)};
  struct Bound {
    const char* field;
    int64_t value, lo, hi;
  };
  const Bound bounds[] = {{"prompt_len", o.prompt_len, 1, int64_t{1} << 24},
                          {"new_tokens", o.new_tokens, 1, int64_t{1} << 24},
                          {"batch", o.batch, 1, int64_t{1} << 20}};
  for (const auto& b : bounds)
    if (b.value < b.lo || b.value > b.hi)
      return Error{ErrorKind::kInvalid, b.field,
                   fmt::format("@{} {} is out of range; use {}..{}", b.field, b.value, b.lo, b.hi)};
  if (m.max_positions > 0 && o.prompt_len + o.new_tokens > m.max_positions)
    return Error{ErrorKind::kIncompatible, "new_tokens",
                 fmt::format("@prompt_len {} + @new_tokens {} = {} exceeds the model's max_position_embeddings ({}); "
                             "use @new_tokens <= {}",
                             o.prompt_len, o.new_tokens, o.prompt_len + o.new_tokens, m.max_positions,
                             std::max<int64_t>(0, m.max_positions - o.prompt_len))};
  const DType dtype = o.dtype.value_or(m.dtype);
  if (dtype != DType::kBF16 && dtype != DType::kFP16 && dtype != DType::kFP32)
    return Error{ErrorKind::kInvalid, "dtype",
                 fmt::format("@dtype {}: generate runs in bf16, fp16 or fp32", dtype_name(dtype))};
  const int64_t e = dtype_bytes(dtype);
  const int64_t P = o.prompt_len, N = o.new_tokens, b = o.batch;
  const int64_t T = P + N - 1;

  // Weights as serve counts them, unquantized, one GPU.
  ServeOptions so;
  so.context_len = T;
  so.batch = b;
  so.dtype = dtype;
  so.kv.dtype = dtype;
  so.kv.block_size = 0;
  so.kv.mla_layout = MlaCacheLayout::kDecompressed;
  auto serving = estimate_serving(m, so);
  if (!serving) return serving.error();
  KvCacheOptions kvo{dtype, 0, 1, MlaCacheLayout::kDecompressed};
  auto kv_prefill = estimate_kv_cache(m, kvo, P, b);
  if (!kv_prefill) return kv_prefill.error();
  auto kv_final = estimate_kv_cache(m, kvo, T, b);
  if (!kv_final) return kv_final.error();

  try {
    GenerateReport r;
    r.dtype = dtype;
    r.prompt_len = P;
    r.new_tokens = N;
    r.batch = b;
    r.final_tokens = T;
    Term weights{"weights", fmt::format("weights ({})", dtype_name(dtype)), "Σ weight tensors",
                 fmt::format("{} tensor kinds", serving->weights.terms.size()), serving->weights_bytes()};

    // Prefill workspace candidates.
    const Factor bf{"b", b}, Pf{"P", P}, ef{"e", e}, hf{"h", m.hidden};
    r.workspace.title = "Prefill workspace candidates (largest wins)";
    std::vector<std::vector<Factor>> attn{{{"2", 2}, bf, Pf, hf, ef},
                                          {bf, Pf, {"a·d", m.q_dim()}, ef},
                                          {bf, Pf, {"(k+v)", m.kv_dim() + m.v_dim()}, ef},
                                          {bf, Pf, {"a·d_v", m.attn_out_dim()}, ef}};
    if (m.mla) attn[2] = {bf, Pf, {"a·(d_qk+d_v)", m.num_heads * (m.mla->qk_head_dim() + m.mla->v_head_dim)}, ef};
    const bool eager = o.attention == GenerateAttention::kEager;
    if (eager) attn.push_back({bf, {"a", m.num_heads}, Pf, Pf, {"(2e+4)", 2 * e + 4}});
    r.workspace.add(sum_term("workspace.attention",
                           eager ? "attention block with eager P×P scores (e), fp32 softmax, cast back"
                                 : fmt::format("attention block ({}: no P×P scores)",
                                               kGenerateAttentionNames.name(o.attention)),
                           attn));
    int64_t f = 0;
    for (const auto& l : m.layers) f = std::max(f, l.moe ? int64_t{0} : l.ffn);
    if (f > 0)
      r.workspace.add(sum_term("workspace.mlp", m.gated_mlp ? "MLP block (gate|up, activation)" : "MLP block",
                             {{{"2", 2}, bf, Pf, hf, ef},
                              {bf, Pf, {m.gated_mlp ? "2·f" : "f", (m.gated_mlp ? 2 : 1) * f}, ef},
                              {bf, Pf, {"f", f}, ef}}));
    if (m.is_moe()) {
      const MoeSpec& moe = *m.moe;
      r.workspace.add(sum_term("workspace.moe", "MoE block (k routed copies, fp32 router logits)",
                             {{{"2", 2}, bf, Pf, hf, ef},
                              {bf, Pf, {"k", moe.experts_per_token},
                               {"(3·f_e+h)", (m.gated_mlp ? 3 : 2) * moe.expert_ffn + m.hidden}, ef},
                              {bf, Pf, {"E", moe.num_experts}, {"4", 4}}}));
    }
    Term lm_head = sum_term("workspace.lm_head", "LM head, last position only (logits_to_keep = 1), then fp32",
                          {{bf, hf, ef}, {bf, {"V", m.vocab}, {"(e+4)", e + 4}}});
    r.workspace.add(lm_head);

    r.prefill.title = fmt::format("Prefill: {} × {} prompt tokens in one forward pass", b, P);
    r.prefill.add(weights);
    r.prefill.add(kv_term("kv_cache", *kv_prefill, dtype, P, b));
    auto peak = std::max_element(r.workspace.terms.begin(), r.workspace.terms.end(),
                                 [](const Term& x, const Term& y) { return x.bytes < y.bytes; });
    Term ws = *peak;
    ws.note = "peak: " + ws.label;
    ws.key = "workspace";
    ws.label = "prefill workspace (largest block)";
    r.prefill.add(std::move(ws));

    r.decode.title = fmt::format("Last decode step: cache grows to {} tokens", T);
    r.decode.add(weights);
    r.decode.add(kv_term("kv_cache", *kv_final, dtype, T, b));
    // torch.cat keeps the old K (or V) of one layer alive next to the new one.
    const int64_t k_width = m.mla ? m.num_heads * m.mla->qk_head_dim() : m.kv_dim();
    Term cat = product_term("transient", "torch.cat: the old K of one layer beside the new (DynamicLayer.update)",
                            {bf, {m.mla ? "a·d_qk" : "kv·d", k_width}, {"(T-1)", T - 1}, ef});
    if (N == 1) cat.bytes = Bytes{0};  // no decode step: the prefill's cat copies an empty cache
    Term head = lm_head;
    head.key = "transient";
    Term t = cat.bytes < head.bytes ? head : cat;
    t.note = cat.bytes < head.bytes ? "the LM head's logits exceed the cat transient" : "";
    r.decode.add(std::move(t));
    r.peak_phase = r.decode_bytes() > r.prefill_bytes() ? "decode" : "prefill";

    r.notes.push_back(fmt::format(
        "HF generate() with the default DynamicCache: {} prompt(s) of {} tokens, {} new tokens; the cache ends at "
        "P + N - 1 = {} tokens (the last sampled token is not fed back)",
        b, P, N, T));
    r.notes.push_back(fmt::format("attention {}",
                                  eager ? "eager: b·a·P·P scores in e, their fp32 softmax and the cast back coexist"
                                        : (o.attention == GenerateAttention::kSdpa
                                               ? "sdpa (flash / memory-efficient kernel): no P×P matrix"
                                               : "flash_attention_2: no P×P matrix")));
    for (const auto& n : kv_final->layout.notes) r.notes.push_back(n);
    if (std::any_of(m.layers.begin(), m.layers.end(), [](const LayerSpec& l) { return l.sliding_window > 0; }))
      r.notes.push_back(
          "sliding-window layers counted at min(T, window) tokens; HF's DynamicSlidingWindowLayer keeps window - 1 "
          "and Gemma 2/3 may default to a static HybridCache (not modelled); the cat transient assumes a global layer");
    r.notes.push_back(
        "not counted: the CUDA context, allocator slack (reserved - allocated) and the 4D causal mask (b·P·P·e when "
        "sdpa or eager build one; flash_attention_2 builds none)");
    return r;
  } catch (const OverflowError&) {
    return Error{ErrorKind::kOverflow, "prompt_len",
                 "generate memory overflowed int64; check @prompt_len, @new_tokens and @batch"};
  }
}

nlohmann::json generate_json(const std::string& model_name, const GenerateReport& r) {
  nlohmann::json j;
  j["model"] = model_name;
  j["mode"] = "generate";
  j["dtype"] = std::string(dtype_name(r.dtype));
  j["prompt_len"] = r.prompt_len;
  j["new_tokens"] = r.new_tokens;
  j["batch"] = r.batch;
  j["final_cache_tokens"] = r.final_tokens;
  j["peak_phase"] = r.peak_phase;
  j["memory"] = {{"weights_bytes", r.weights_bytes().count()},
                 {"prefill_bytes", r.prefill_bytes().count()},
                 {"decode_bytes", r.decode_bytes().count()},
                 {"peak_bytes", r.peak().count()}};
  j["prefill"] = {{"total_bytes", r.prefill_bytes().count()}, {"terms", terms_json(r.prefill)}};
  j["decode"] = {{"total_bytes", r.decode_bytes().count()}, {"terms", terms_json(r.decode)}};
  j["workspace"] = {{"candidates", terms_json(r.workspace)}};
  j["notes"] = r.notes;
  return j;
}

std::string generate_table(const std::string& model_name, const GenerateReport& r, bool explain) {
  std::string out = fmt::format("Model      {}\nGenerate   {} prompt(s) × {} tokens + {} new tokens ({})\n\n",
                                model_name, r.batch, r.prompt_len, r.new_tokens, dtype_name(r.dtype));
  out += render_terms(r.prefill, true, explain);
  out += "\n" + render_terms(r.decode, true, explain);
  if (explain) out += "\n" + render_terms(r.workspace, false, true);
  out += fmt::format("\nPeak       {} B ({}) in the {}\n", group_digits(r.peak().count()), format_binary(r.peak()),
                     r.peak_phase == "decode" ? "last decode step" : "prefill");
  for (const auto& n : r.notes) out += wrap("note: " + n, 100, "      ") + "\n";
  return out;
}

}  // namespace actmem
