// Every option of the library's table reaches the CLI: `actmem options --json --FLAG EXAMPLE` reads
// back, through the table, the value that setting the option by name gives; and the flags' help,
// the repeated-flag message and docs/options.md come from the same table.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/library.h"
#include "cli_test_run.h"

namespace {

using actmem::testing_cli::one_line;
using actmem::testing_cli::Result;
using actmem::testing_cli::run;

std::string flag_of(std::string_view name) {
  std::string flag = "--" + std::string(name);
  for (auto& c : flag)
    if (c == '_') c = '-';
  return flag;
}

const nlohmann::json* entry(const nlohmann::json& table, std::string_view name) {
  for (const auto& o : table)
    if (o["name"] == name) return &o;
  return nullptr;
}

TEST(OptionsCli, EveryTableOptionSetThroughItsFlagArrives) {
  for (const auto& spec : actmem::training_options()) {
    const std::string example(spec.example);
    const std::string args = spec.kind == actmem::OptionKind::kFlag ? flag_of(spec.name)
                                                                     : flag_of(spec.name) + " '" + example + "'";
    Result r = run("options --json " + args);
    ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
    const auto table = nlohmann::json::parse(r.out);
    const auto* o = entry(table, spec.name);
    ASSERT_NE(o, nullptr) << spec.name;

    actmem::TrainingSettings expected;
    const actmem::OptionValue value = spec.kind == actmem::OptionKind::kFlag
                                          ? actmem::OptionValue{true}
                                          : actmem::option_value_from_text(spec.kind, example);
    ASSERT_TRUE(actmem::set_training_option(expected, spec.name, value)) << spec.name;
    const auto want = actmem::get_training_option(expected, spec.name);
    ASSERT_TRUE(want) << spec.name;
    EXPECT_EQ((*o)["value"], actmem::option_value_json(*want)) << args;
    EXPECT_NE((*o)["value"], (*o)["default"]) << args << ": the example must differ from the default";
  }
}

TEST(OptionsCli, DefaultsAreTheLibrarys) {
  Result r = run("options --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto table = nlohmann::json::parse(r.out);
  EXPECT_EQ(table.size(), actmem::training_options().size());
  EXPECT_EQ((*entry(table, "seq_len"))["value"], actmem::kDefaultSeqLen);
  EXPECT_EQ((*entry(table, "framework"))["value"], "hf");
  EXPECT_TRUE((*entry(table, "hidden_dropout"))["value"].is_null());  // from config.json
}

TEST(OptionsCli, BadValueIsTheTablesMessage) {
  Result r = run("options --json --tp eight");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "actmem: --tp 'eight': expected a whole number\n");
  Result e = run("estimate --seq-len 4k");
  EXPECT_EQ(e.code, 2);
  EXPECT_EQ(e.err, "actmem: --seq-len '4k': expected a whole number\n");
}

// A flag given twice names the flag and its values (issue 20), not CLI11's "At Most 1 required".
TEST(OptionsCli, RepeatedFlagIsNamed) {
  Result r = run("estimate --seq-len 4096 --seq-len 8192");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "actmem: --seq-len given twice (4096 and 8192); give it once\n");
  Result m = run("explain --model gpt2 --model llama-3-8b --model gpt2");
  EXPECT_EQ(m.code, 2);
  EXPECT_EQ(m.err, "actmem: --model given 3 times (gpt2, llama-3-8b, gpt2); give it once\n");
  Result s = run("estimate --sp --tp 2 --sp");
  EXPECT_EQ(s.code, 2);
  EXPECT_EQ(s.err, "actmem: --sp given twice; give it once\n");
  Result v = run("serve --model gpt2 --context-len 1024 --context-len 2048");
  EXPECT_EQ(v.code, 2);
  EXPECT_EQ(v.err, "actmem: --context-len given twice (1024 and 2048); give it once\n");
  Result p = run("plan --model gpt2 --gpus 8 --gpus 16 --gpu h100-80gb");
  EXPECT_EQ(p.code, 2);
  EXPECT_TRUE(one_line(p.err)) << p.err;
  EXPECT_NE(p.err.find("--gpus given twice (8 and 16)"), std::string::npos) << p.err;
}

// estimate --help lists every optimizer the name table knows, not a hand-written subset.
TEST(OptionsCli, HelpListsEveryChoice) {
  Result r = run("estimate --help");
  ASSERT_EQ(r.code, 0);
  std::string flat;  // continuation lines joined
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    if (r.out[i] == '\n') {
      while (i + 1 < r.out.size() && r.out[i + 1] == ' ') ++i;
      flat += ' ';
    } else {
      flat += r.out[i];
    }
  }
  for (const auto& row : actmem::kOptimizerNames.rows)
    EXPECT_NE(flat.find(std::string(row.name)), std::string::npos) << row.name << "\n" << r.out;
  EXPECT_NE(flat.find("adamw, adamw-8bit, sgd, paged-adamw, paged-adamw-8bit, adafactor, sgd-nomomentum"),
            std::string::npos)
      << r.out;
}

TEST(OptionsCli, MarkdownHasEveryOption) {
  Result r = run("options --markdown");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& spec : actmem::training_options())
    EXPECT_NE(r.out.find("| `" + flag_of(spec.name) + "` | `" + std::string(spec.name) + "` |"), std::string::npos)
        << spec.name;
}

}  // namespace
