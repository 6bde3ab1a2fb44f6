// The head on an encoder (BERT, RoBERTa), as a front end's `--head` names it: what the config's
// `architectures` says unless overridden (ModelSpec::head, weight_tensors.cc, op_graph.cc).
#pragma once

#include <string_view>

#include "actmem/expected.h"
#include "model/model_spec.h"

namespace actmem {

/// "mlm" (*ForMaskedLM), "classifier" or "classifier:N" (*ForSequenceClassification with N labels;
/// without N, the config's num_labels), "none" (the bare *Model with its pooler). Errors name
/// the field `head`. Example: set_encoder_head(bert, "classifier:3") -> bert.num_labels == 3.
Expected<void> set_encoder_head(ModelSpec& model, std::string_view text);

/// The name set_encoder_head() reads: "mlm", "classifier:N" or "none".
std::string encoder_head_name(const ModelSpec& model);

}  // namespace actmem
