// Renderers for a training estimate: a readable table, stable JSON, and `explain` (every term's
// formula, values and bytes). Renderers only print what the Breakdown holds; they compute nothing.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "breakdown.h"
#include "model_spec.h"
#include "training.h"

namespace actmem {

/// What was asked, for headers and the JSON `inputs` object.
struct TrainingRequest {
  std::string model_name;              // preset or path, or "--params N"
  const ModelSpec* model = nullptr;    // null for --params
  TrainingOptions options;
};

/// JSON with stable keys: params.*, memory.*_bytes, activations.{per_layer_bytes, total_bytes,
/// in_flight_bytes, tensors[]}, transients[], notes[].
nlohmann::json training_json(const TrainingRequest& request, const TrainingEstimate& estimate);

/// The default human-readable report.
std::string render_training_table(const TrainingRequest& request, const TrainingEstimate& estimate);

/// `actmem explain`: each term as `label: formula = substituted = bytes`, as the seed cards derive.
std::string render_training_explain(const TrainingRequest& request, const TrainingEstimate& estimate);

/// A Term as JSON: {key, label, formula, substituted, bytes, exact, note}.
nlohmann::json term_json(const Term& term);
/// Every term of a Breakdown as a JSON array of term_json objects.
nlohmann::json terms_json(const Breakdown& breakdown);
/// The terms of a Breakdown as table rows: label, GiB, exact bytes, exact/allowance; with
/// `derivation`, each term's formula and values on the line below it (what `explain` shows).
std::string render_terms(const Breakdown& breakdown, bool with_total, bool derivation);

}  // namespace actmem
