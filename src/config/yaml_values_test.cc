#include "config/yaml_values.h"

#include <fstream>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

namespace actmem {
namespace {

TEST(YamlValues, ToJson) {
  EXPECT_EQ(yaml_to_json(YAML::Load("{a: 1, b: 'x', c: true, d: 0.5, e: ~, f: [1, two]}")),
            nlohmann::json::parse(R"({"a": 1, "b": "x", "c": true, "d": 0.5, "e": null, "f": [1, "two"]})"));
}

// vllm/utils/argparse_utils.py load_config_file (@8b141ed8c): PyYAML reads yes/on as True (a flag)
// and no/off as False (nothing); a list is the key then its items; null is str(None).
TEST(YamlValues, VllmConfigArguments) {
  const std::string path = ::testing::TempDir() + "/vllm_args.yaml";
  {
    std::ofstream f(path);
    f << "enforce-eager: yes\nenable-prefix-caching: off\nserved-model-name: [a, b]\nseed: null\nport: 8000\n";
  }
  auto words = vllm_config_arguments(path, "args.yaml");
  ASSERT_TRUE(words.has_value()) << words.error().message;
  std::vector<std::string> text;
  for (const auto& w : *words) text.push_back(w.text);
  EXPECT_EQ(text, (std::vector<std::string>{"--enforce-eager", "--served-model-name", "a", "b", "--seed", "None",
                                            "--port", "8000"}));
  EXPECT_EQ(words->front().file, "args.yaml");
  EXPECT_EQ(words->back().line, 5);
  {
    std::ofstream f(path);
    f << "a: [1\n";
  }
  auto bad = vllm_config_arguments(path, "args.yaml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("args.yaml:"), std::string::npos);
  EXPECT_NE(bad.error().message.find("malformed YAML"), std::string::npos);
}

}  // namespace
}  // namespace actmem
