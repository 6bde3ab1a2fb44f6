// Renderers for a training report: a readable table, stable JSON, and `explain` (every term's
// formula, values and bytes). Renderers only print what the report holds; they compute nothing.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "report/breakdown.h"
#include "model/model_spec.h"

namespace actmem {

// report_json(), render_table() and render_explain() of a training Report are declared in the
// public header (actmem/actmem.h).

/// A Term as JSON: {key, label, formula, substituted, bytes, exact, note}.
nlohmann::json term_json(const Term& term);
/// Every term of a Breakdown as a JSON array of term_json objects.
nlohmann::json terms_json(const Breakdown& breakdown);
/// The terms of a Breakdown as table rows: label, GiB, exact bytes, exact/allowance; with
/// `derivation`, each term's formula and values on the line below it (what `explain` shows).
std::string render_terms(const Breakdown& breakdown, bool with_total, bool derivation);

}  // namespace actmem
