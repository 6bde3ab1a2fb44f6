#include "model/encoder_head.h"

#include <charconv>
#include <string>

#include <fmt/format.h>

namespace actmem {

Expected<void> set_encoder_head(ModelSpec& model, std::string_view text) {
  if (!model.encoder)
    return Error{ErrorKind::kIncompatible, "head",
                 fmt::format("@head applies to encoders (model_type bert, roberta); model_type '{}' has an LM head",
                             model.model_type)};
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  if (kind == "mlm" && colon == std::string_view::npos) {
    model.head = EncoderHead::kMaskedLM;
    return {};
  }
  if (kind == "none" && colon == std::string_view::npos) {
    model.head = EncoderHead::kNone;
    return {};
  }
  if (kind == "classifier") {
    int64_t labels = model.num_labels;
    if (colon != std::string_view::npos) {
      const std::string_view digits = text.substr(colon + 1);
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), labels);
      if (ec != std::errc{} || end != digits.data() + digits.size() || labels < 2 || labels > limits::kMaxVocab)
        return Error{ErrorKind::kInvalid, "head",
                     fmt::format("@head '{}': the number of labels must be an integer >= 2 (num_labels 1 is "
                                 "regression, MSELoss, not modelled), e.g. classifier:3",
                                 text.substr(0, 64))};
    }
    model.head = EncoderHead::kClassifier;
    model.num_labels = labels;
    return {};
  }
  return Error{ErrorKind::kInvalid, "head",
               fmt::format("@head '{}' is not a head; use mlm, classifier, classifier:N or none", text.substr(0, 64))};
}

std::string encoder_head_name(const ModelSpec& model) {
  switch (model.head) {
    case EncoderHead::kMaskedLM: return "mlm";
    case EncoderHead::kClassifier: return fmt::format("classifier:{}", model.num_labels);
    case EncoderHead::kNone: break;
  }
  return "none";
}

}  // namespace actmem
