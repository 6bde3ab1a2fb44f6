// Renderers for a training report: a readable table, stable JSON, and `explain` (every term's
// formula, values and bytes). Renderers only print what the report holds; they compute nothing.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/prepared.h"  // Report
#include "report/breakdown.h"
#include "model/model_spec.h"

namespace actmem {

/// Stable JSON: params.*, memory.*_bytes, activations.{per_layer_bytes, total_bytes, in_flight_bytes,
/// tensors[]}, transients[], notes[] (README "JSON keys").
nlohmann::json report_json(const Report& report);
/// The default human-readable table.
std::string render_table(const Report& report);
/// Each term as `label: formula = values = bytes`, as the seed cards derive.
std::string render_explain(const Report& report);


/// A Term as JSON: {key, label, formula, substituted, bytes, exact, note}.
nlohmann::json term_json(const Term& term);
/// Every term of a Breakdown as a JSON array of term_json objects.
nlohmann::json terms_json(const Breakdown& breakdown);
/// The terms of a Breakdown as table rows: label, GiB, exact bytes, exact/allowance; with
/// `derivation`, each term's formula and values on the line below it (what `explain` shows).
std::string render_terms(const Breakdown& breakdown, bool with_total, bool derivation);

}  // namespace actmem
