// Breakdown: named terms, each with its formula in symbols, the values plugged in, and its bytes.
// Producers (params, static memory, activations, serving) build terms; renderers only print them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "util/bytes.h"

namespace actmem {

/// Whether a term is exact arithmetic on shapes (checked against measured PyTorch) or an
/// allowance (allocator slack, CUDA context) that the user may tune.
enum class Exactness { kExact, kAllowance };

/// One factor of a product formula: its symbol and the value plugged in.
struct Factor {
  std::string symbol;  // "s", "h", "2" (a literal prints as itself)
  int64_t value = 0;
};

struct Term {
  std::string key;          // stable machine key, e.g. "weights", "layer.mlp.act_in"
  std::string label;        // what a person reads, e.g. "SwiGLU input (gate output)"
  std::string formula;      // in symbols, e.g. "2·s·b·f"
  std::string substituted;  // the same with values, e.g. "2 × 4096 × 1 × 14336"
  Bytes bytes;
  Exactness exactness = Exactness::kExact;
  std::string note;         // optional why, e.g. "view of qkv output keeps it alive"
};

/// Builds a product term: product_term("mlp.up", "up output", {{"2",2},{"s",s},{"b",b},{"f",f}})
/// gives formula "2·s·b·f", substituted "2 × 4096 × 1 × 14336" and the checked product as bytes.
Term product_term(std::string key, std::string label, std::initializer_list<Factor> factors,
                  Exactness exactness = Exactness::kExact);
Term product_term(std::string key, std::string label, const std::vector<Factor>& factors,
                  Exactness exactness = Exactness::kExact);
/// A sum of products, one term: sum_term(k, l, {{{"2", 2}, {"P", P}}, {{"P", P}, {"f", f}}}) is
/// "2·P + P·f" with its values and bytes.
Term sum_term(std::string key, std::string label, const std::vector<std::vector<Factor>>& products);

/// A titled list of terms with their sum.
struct Breakdown {
  std::string title;
  std::vector<Term> terms;

  Bytes total() const;
  void add(Term t) { terms.push_back(std::move(t)); }
  const Term* find(const std::string& key) const;
};

}  // namespace actmem
