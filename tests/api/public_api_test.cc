// The public header as a program outside this repository uses it: this target's include path is
// include/ alone (CMakeLists.txt, actmem_api_tests), so it compiling at all is the check that
// actmem.h stands on its own. The numbers are the CLI's (run here, the same job as its flags) and
// values checked by hand from the model's shapes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>  // the test reads the JSON text; the header does not need it

#include "actmem/actmem.h"

namespace {

/// The CLI's stdout for `actmem <args>`.
std::string run_cli(const std::string& args) {
  std::string out;
  FILE* p = popen((std::string(ACTMEM_BINARY) + " " + args + " 2>/dev/null").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  return out;
}

const actmem::Job kSeed70B{.model = "llama-3-70b",
                           .options = {{"framework", "megatron"},
                                       {"seq_len", int64_t{8192}},
                                       {"tp", int64_t{8}},
                                       {"sp", true},
                                       {"dp", int64_t{8}}}};

// The seed card's 70B at 8k, as `actmem estimate ... --json` prints it: the same numbers and text.
TEST(PublicApi, EstimateIsTheClisJson) {
  const auto json = actmem::estimate_json(kSeed70B);
  ASSERT_TRUE(json) << json.error().message;
  const auto cli = nlohmann::json::parse(run_cli(
      "estimate --model llama-3-70b --framework megatron --seq-len 8192 --tp 8 --sp --dp 8 --json"));
  EXPECT_EQ(nlohmann::json::parse(*json), cli);

  const auto totals = actmem::evaluate(kSeed70B);
  ASSERT_TRUE(totals) << totals.error().message;
  EXPECT_EQ(totals->total, cli["memory"]["total_bytes"].get<int64_t>());
  EXPECT_EQ(totals->activations, cli["memory"]["activations_bytes"].get<int64_t>());
}

// Llama-3-8B in bf16 on one GPU: 8,030,261,248 parameters (Meta's model card: 8.03 B; 32 layers of
// 4096² · 2 + 4096 · 1024 · 2 + 3 · 4096 · 14336 + 2 · 4096, two 128,256 × 4096 tables and a norm),
// 2 bytes each.
TEST(PublicApi, WeightsOfLlama3_8BAreTwoBytesAParameter) {
  const auto t = actmem::evaluate({.model = "llama-3-8b", .options = {{"seq_len", int64_t{4096}}}});
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->weights, int64_t{2} * 8'030'261'248);
  EXPECT_EQ(t->params_on_gpu, 8'030'261'248);
}

// One prepared model, many layouts: each equals the whole job evaluated afresh.
TEST(PublicApi, EstimatorEqualsEvaluatingEachJob) {
  auto e = actmem::Estimator::prepare({.model = "llama-3-70b", .options = {{"framework", "megatron"}}});
  ASSERT_TRUE(e) << e.error().message;
  for (int64_t tp : {1, 2, 4, 8}) {
    const auto fast = e->evaluate({{"tp", tp}, {"seq_len", int64_t{4096}}, {"recompute", "selective"}});
    ASSERT_TRUE(fast) << fast.error().message;
    const auto whole = actmem::evaluate({.model = "llama-3-70b",
                                         .options = {{"framework", "megatron"},
                                                     {"tp", tp},
                                                     {"seq_len", int64_t{4096}},
                                                     {"recompute", "selective"}}});
    ASSERT_TRUE(whole);
    EXPECT_EQ(fast->total, whole->total) << "tp " << tp;
    EXPECT_EQ(fast->activations, whole->activations) << "tp " << tp;
  }
  // A workload option is the prepared model's: refused by name, with what to do instead.
  const auto refused = e->evaluate({{"attention", "eager"}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "attention");
  EXPECT_EQ(refused.error().kind, actmem::ErrorKind::kIncompatible);
  EXPECT_NE(refused.error().message.find("Estimator::prepare"), std::string::npos);
  // An impossible layout: the engine's message, as the CLI gives it (64 heads, tp 3).
  const auto bad = e->evaluate({{"tp", int64_t{3}}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "tp");
  EXPECT_EQ(bad.error().message.rfind("@tp 3: num_attention_heads (64) is not divisible by 3", 0), 0u)
      << bad.error().message;
}

// Errors: a kind, the option at fault, and a message each front end spells (here as --flags).
TEST(PublicApi, ErrorsNameTheOption) {
  const auto r = actmem::estimate_json({.model = "llama-3-70b", .options = {{"tp", int64_t{3}}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, actmem::ErrorKind::kIncompatible);
  EXPECT_EQ(r.error().field, "tp");
  const std::string spelled = actmem::render_message(r.error().message, [](const std::string& o) { return "--" + o; });
  EXPECT_EQ(spelled.rfind("--tp 3: num_attention_heads (64) is not divisible by 3", 0), 0u) << spelled;

  const auto typo = actmem::estimate_json({.model = "llama-3-70b", .options = {{"seqlen", int64_t{4096}}}});
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error().kind, actmem::ErrorKind::kUnknownName);
  EXPECT_NE(typo.error().message.find("did you mean"), std::string::npos) << typo.error().message;

  const auto table = actmem::option_help("trainnig");
  ASSERT_FALSE(table);
  EXPECT_EQ(table.error().kind, actmem::ErrorKind::kUnknownName);
}

// Serving: Llama-3-8B's KV cache at 8,192 tokens, one sequence, bf16: 2 (K and V) · 2 bytes · 32
// layers · 8 KV heads · 128 · 8,192 = 1 GiB (the seed card's 2·2·L·kv·d·s·b).
TEST(PublicApi, ServeKvCacheIsTheSeedCardsFormula) {
  const auto json = actmem::serve_json({.model = "llama-3-8b", .options = {{"context_len", int64_t{8192}}}});
  ASSERT_TRUE(json) << json.error().message;
  const auto j = nlohmann::json::parse(*json);
  EXPECT_EQ(j["memory"]["kv_cache_bytes"].get<int64_t>(), int64_t{2} * 2 * 32 * 8 * 128 * 8192);
  EXPECT_EQ(nlohmann::json::parse(run_cli("serve --model llama-3-8b --context-len 8192 --json")), j);

  const auto missing = actmem::serve_json({.model = "llama-3-8b"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().field, "context_len");
}

// The option tables and presets, as `actmem options` and `actmem presets` list them.
TEST(PublicApi, TablesAndPresets) {
  const auto training = actmem::option_help("training");
  ASSERT_TRUE(training);
  ASSERT_FALSE(training->empty());
  EXPECT_EQ(training->front().name, "seq_len");
  const auto presets = actmem::preset_names();
  EXPECT_NE(std::find(presets.begin(), presets.end(), "llama-3-70b"), presets.end());
  const auto options = actmem::options_json({{"tp", int64_t{8}}});
  ASSERT_TRUE(options);
  int seen = 0;
  for (const auto& o : nlohmann::json::parse(*options)) {
    if (o["name"] != "tp") continue;
    EXPECT_EQ(o["value"], 8);
    ++seen;
  }
  EXPECT_EQ(seen, 1);
}

// A training config read as --from reads it, the options over it: the CLI's JSON, echo included.
TEST(PublicApi, FromAConfigWithAnOverride) {
  const std::string script = std::string(ACTMEM_SOURCE_DIR) + "/examples/megatron_llama3_8b.sh";
  const auto json = actmem::estimate_json({.from = script, .options = {{"micro_batch", int64_t{2}}}, .origin = "the command line"});
  ASSERT_TRUE(json) << json.error().message;
  const auto cli = nlohmann::json::parse(run_cli("estimate --from " + script + " --micro-batch 2 --json"));
  EXPECT_EQ(nlohmann::json::parse(*json)["memory"], cli["memory"]);
}

}  // namespace
