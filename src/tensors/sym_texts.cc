// The symbols' texts under a layout (op_graph.h SymTexts): how explain writes each dimension of a
// saved tensor, e.g. "s/t" under sequence parallelism, "k·s·b/t" for the experts' rows under MoE
// parallel folding.
#include <string>

#include <fmt/format.h>

#include "tensors/op_graph.h"

namespace actmem::detail {

namespace {
std::string seq_text(int64_t cp, int64_t t) {
  if (cp == 1 && t == 1) return "s";
  if (t == 1) return "s/cp";
  if (cp == 1) return "s/t";
  return "s/(t·cp)";
}
std::string split_text(const char* symbol, int64_t t) { return t == 1 ? symbol : fmt::format("{}/t", symbol); }
}  // namespace

SymTexts sym_texts(const ModelSpec& model, const Layout& layout) {
  const auto& p = layout.parallel;
  const int64_t t = p.tp;
  SymTexts x;
  auto set = [&](Sym s, std::string text) { x.text[static_cast<std::size_t>(s)] = std::move(text); };
  set(Sym::kSeqRep, seq_text(p.cp, p.sp ? t : 1));
  set(Sym::kSeqTp, seq_text(p.cp, 1));
  set(Sym::kSeqKey, "s");
  set(Sym::kBatch, "b");
  set(Sym::kHidden, "h");
  set(Sym::kQHeads, split_text("a", t));
  set(Sym::kKvHeads, model.num_kv_heads >= t ? split_text("kv", t) : "1");  // one replicated head per rank
  set(Sym::kHeadDim, "d");
  set(Sym::kVocab, t > 1 ? "V/t" : "V");
  set(Sym::kFfn, split_text("f", t));
  const int64_t etp = p.expert_tp();  // MoE parallel folding: the experts' own TP (engine's bind_moe)
  set(Sym::kExpertFfn, etp == t ? split_text("fe", t) : etp == 1 ? std::string("fe") : std::string("fe/etp"));
  set(Sym::kSharedFfn, split_text("fs", t));
  std::string rows = model.moe && model.moe->capacity_factor > 0.0 ? "E·C" : "k·s·b";
  if (etp != t) rows += etp == 1 ? "/t" : "·etp/t";
  if (p.cp > 1) rows += " (s/cp)";
  set(Sym::kMoeRows, rows);
  set(Sym::kSeqShifted, p.cp > 1 ? "(s/cp−1)" : "(s−1)");
  set(Sym::kExpertRows, rows + "↑16");  // Megatron TE fp8: each expert's rows up to a multiple of 16
  set(Sym::kLocalExperts, p.ep > 1 ? "E/ep" : "E");
  set(Sym::kRngWords, p.cp > 1 ? "2·cp" : "2");
  return x;
}

std::string dim_text(const Dim& d, const SymTexts& texts) {
  if (d.is_constant()) return d.literal ? d.literal : std::to_string(d.constant);
  auto one = [&](Sym s, int64_t coef) {
    const std::string& t = texts.text[static_cast<std::size_t>(s)];
    return coef == 1 ? t : fmt::format("{}·{}", coef, t);
  };
  if (d.padded()) {  // pad(x, m): x rounded up to a multiple of m; ⌈x/n⌉ a ceiling division
    std::string x = d.product ? fmt::format("{}·{}", one(d.a, d.ca), texts.text[static_cast<std::size_t>(d.b)])
                              : one(d.a, d.ca);
    if (d.div != 1) x = fmt::format("⌈{}/{}⌉", x, d.div);
    return d.round != 1 ? fmt::format("pad({}, {})", x, d.round) : x;
  }
  if (d.b == Sym::kCount) return one(d.a, d.ca);
  return fmt::format("({}+{})", one(d.a, d.ca), one(d.b, d.cb));
}

}  // namespace actmem::detail
