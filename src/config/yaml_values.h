// YAML values as the config readers need them: as JSON (HF TrainingArguments YAML, a vLLM
// --config's nested keys) and a vLLM --config file as the arguments vLLM inserts for it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/shell_words.h"
#include "actmem/expected.h"

namespace YAML {
class Node;  // yaml-cpp, included by the .cc only: the WebAssembly build, which has no yaml-cpp, still compiles callers
}  // namespace YAML

namespace actmem {

/// Quoted scalars stay strings; plain ones become booleans, null or numbers where they read as such.
/// Example: yaml_to_json(YAML::Load("{a: 1, b: 'x', c: true}")) == {"a": 1, "b": "x", "c": true}.
nlohmann::json yaml_to_json(const YAML::Node& node);

/// A `vllm serve --config FILE` YAML as vLLM's FlexibleArgumentParser.load_config_file turns it into
/// arguments (vllm/utils/argparse_utils.py:525-590 @8b141ed8c): `key: true` is `--key`, false adds
/// nothing, a list is `--key item...`, a mapping `--key JSON`, anything else `--key value`. Each
/// word carries the file (`display`) and the key's line. Errors: not .yaml/.yml, unreadable,
/// malformed, not a mapping.
Expected<std::vector<shell::Token>> vllm_config_arguments(const std::string& path, const std::string& display);

}  // namespace actmem
