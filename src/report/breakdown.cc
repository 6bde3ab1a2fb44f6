#include "report/breakdown.h"

namespace actmem {

Term product_term(std::string key, std::string label, const std::vector<Factor>& factors, Exactness exactness) {
  Term t;
  t.key = std::move(key);
  t.label = std::move(label);
  t.exactness = exactness;
  int64_t product = 1;
  for (size_t i = 0; i < factors.size(); ++i) {
    if (i) {
      t.formula += "·";
      t.substituted += " × ";
    }
    t.formula += factors[i].symbol;
    t.substituted += fmt::format("{}", factors[i].value);
    product = checked_mul(product, factors[i].value);
  }
  t.bytes = Bytes{product};
  return t;
}

Term product_term(std::string key, std::string label, std::initializer_list<Factor> factors, Exactness exactness) {
  return product_term(std::move(key), std::move(label), std::vector<Factor>(factors), exactness);
}

Bytes Breakdown::total() const {
  Bytes sum{0};
  for (const auto& t : terms) sum += t.bytes;
  return sum;
}

const Term* Breakdown::find(const std::string& key) const {
  for (const auto& t : terms)
    if (t.key == key) return &t;
  return nullptr;
}

Term sum_term(std::string key, std::string label, const std::vector<std::vector<Factor>>& products) {
  Term t;
  t.key = std::move(key);
  t.label = std::move(label);
  Bytes sum{0};
  for (std::size_t i = 0; i < products.size(); ++i) {
    Term p = product_term("", "", products[i]);
    t.formula += (i ? " + " : "") + p.formula;
    t.substituted += (i ? " + " : "") + p.substituted;
    sum += p.bytes;
  }
  t.bytes = sum;
  return t;
}

}  // namespace actmem
