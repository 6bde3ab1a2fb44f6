// What the training-config reader tests share: the fixture folder, a setting by option name, the
// report of a model under read settings, and the warnings' first words.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "api/library.h"
#include "config/training_config.h"

namespace actmem::testing {

inline const std::string kData = std::string(ACTMEM_SOURCE_DIR) + "/examples/";

/// The last setting a file gave for `option`, or null.
inline const ConfigSetting* find(const TrainingConfig& c, std::string_view option) {
  const ConfigSetting* found = nullptr;
  for (const auto& s : c.settings)
    if (s.option == option) found = &s;
  return found;
}

/// explain() of `model` under the settings read (a failure is a test failure).
inline Report report_of(const ModelSpec& model, const TrainingSettings& s) {
  auto prepared = prepare(model, s.workload);
  EXPECT_TRUE(prepared) << prepared.error().message;
  auto r = explain(*prepared, s.layout);
  EXPECT_TRUE(r) << r.error().message;
  return *r;
}

/// Each warning up to the first `stop` character: what it names (a key, or the file).
inline std::vector<std::string> warned(const TrainingConfig& c, char stop = ' ') {
  std::vector<std::string> out;
  for (const auto& w : c.warnings) out.push_back(w.substr(0, w.find(stop)));
  return out;
}

}  // namespace actmem::testing
