// torchtitan's own llama3 train_configs (examples/README.md) read into actmem's layout.
#include "config/training_config.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/library.h"
#include "config/config_test_util.h"

namespace actmem {
namespace {

using testing::find;
using testing::kData;
using testing::report_of;


using testing::warned;  // the warnings' first words (what each names)

/// Llama parameters from the shapes: 2·V·h (embedding + untied output) + L·(attention q,o h² each and
/// k,v h·kv·d each + SwiGLU 3·h·f + two RMSNorms) + the final RMSNorm.
int64_t llama_params(int64_t L, int64_t h, int64_t kv_dim, int64_t f, int64_t V) {
  return 2 * V * h + L * (2 * h * h + 2 * h * kv_dim + 3 * h * f + 2 * h) + h;
}

TEST(TorchtitanConfig, Llama3_8b) {
  auto c = load_training_config(kData + "torchtitan_llama3_8b.toml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->format, "torchtitan");
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.seq_len, 8192);
  EXPECT_EQ(s.layout.micro_batch, 1);         // training.local_batch_size
  EXPECT_EQ(s.layout.parallel.tp, 1);
  EXPECT_EQ(s.layout.parallel.pp, 1);
  EXPECT_EQ(s.layout.parallel.cp, 1);
  EXPECT_EQ(s.layout.parallel.dp, 1);         // shard degree -1: the GPUs are not in the file (warned)
  EXPECT_EQ(s.layout.zero_stage, 3);          // FSDP, resharded after forward without PP
  EXPECT_EQ(s.layout.recompute, Recompute::kSelective);  // "op" (warned: not modelled)
  EXPECT_EQ(s.workload.dtype, DType::kBF16);             // mixed_precision_param default
  EXPECT_EQ(s.workload.weight_dtype, DType::kFP32);      // training.dtype default float32
  EXPECT_EQ(s.workload.grad_dtype, DType::kFP32);
  EXPECT_EQ(s.workload.attention, AttentionImpl::kFlash);
  EXPECT_EQ(s.workload.optimizer, Optimizer::kAdamW);
  EXPECT_EQ(find(*c, "seq_len")->source, "training.seq_len = 8192 (" + kData + "torchtitan_llama3_8b.toml:32)");
  EXPECT_EQ(find(*c, "micro_batch")->source, "training.local_batch_size = 1 (" + kData + "torchtitan_llama3_8b.toml:31)");
  EXPECT_EQ(find(*c, "zero")->source,
            "parallelism.data_parallel_shard_degree = -1 (" + kData +
                "torchtitan_llama3_8b.toml:39): FSDP (weights resharded after forward)");
  // FSDP alone: torchtitan's own rules (--framework torchtitan), its per-op SAC as the file asks.
  EXPECT_EQ(s.workload.framework, Framework::kTorchtitan);
  EXPECT_EQ(s.layout.recompute, Recompute::kSelective);
  EXPECT_EQ(s.layout.selective_ac_every, 0);  // "op"
  EXPECT_EQ(warned(*c), (std::vector<std::string>{"parallelism.data_parallel_shard_degree"}));

  ASSERT_TRUE(c->model);
  const ModelSpec& m = *c->model;
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.layers[0].ffn, 14336);  // 1024·⌈int(1.3·10922)/1024⌉
  EXPECT_EQ(m.vocab, 128256);
  EXPECT_FALSE(m.tied_embeddings);
  // 8,030,261,248: Llama 3.1 8B's count (HF model card), from the shapes.
  const int64_t P = llama_params(32, 4096, 1024, 14336, 128256);
  EXPECT_EQ(P, 8'030'261'248);
  s.layout.parallel.dp = 64;  // the file's note: "a preset for 64 A100 GPUs"
  const Report r = report_of(m, s);
  EXPECT_EQ(r.estimate.params.total(), P);
  // FSDP over 64: fp32 weights 4, fp32 gradients 4, AdamW 8 bytes per parameter, each 1/64.
  EXPECT_EQ(r.totals.weights, 4 * P / 64);
  EXPECT_EQ(r.totals.gradients, 4 * P / 64);
  EXPECT_EQ(r.totals.optimizer, 8 * P / 64);
  // The bytes: the same job as flags on the llama-3.1-8b preset (its config.json has the same shapes).
  TrainingSettings flags;
  for (const auto& [name, value] : std::initializer_list<std::pair<std::string_view, OptionValue>>{
           {"seq_len", int64_t{8192}}, {"framework", std::string("torchtitan")},
           {"recompute", std::string("selective")}, {"selective_ac_option", std::string("op")},
           {"dp", int64_t{64}}, {"attention", std::string("flash")}})
    ASSERT_TRUE(set_training_option(flags, name, value));
  const Report preset = report_of(load_model("llama-3.1-8b").value(), flags);
  EXPECT_EQ(r.totals.total, preset.totals.total);
  // Per-op SAC keeps 497 MiB per block at 8k (src/engine/torchtitan_test.cc, by hand).
  EXPECT_EQ(r.totals.activations, preset.totals.activations);
  EXPECT_EQ(r.totals.activations, 21'013'626'880);
}

TEST(TorchtitanConfig, Llama3_70b) {
  auto c = load_training_config(kData + "torchtitan_llama3_70b.toml");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.parallel.tp, 8);
  EXPECT_TRUE(s.layout.parallel.sp);          // torchtitan's TP: SequenceParallel norms
  EXPECT_EQ(s.layout.micro_batch, 8);
  EXPECT_EQ(s.layout.recompute, Recompute::kFull);
  EXPECT_EQ(s.layout.recompute_layers, -1);   // every layer
  EXPECT_EQ(s.layout.zero_stage, 3);
  EXPECT_EQ(find(*c, "tp")->source, "parallelism.tensor_parallel_degree = 8 (" + kData + "torchtitan_llama3_70b.toml:40)");
  EXPECT_EQ(find(*c, "recompute")->source, "activation_checkpoint.mode = \"full\" (" + kData + "torchtitan_llama3_70b.toml:53)");
  ASSERT_TRUE(c->model);
  EXPECT_EQ(c->model->layers[0].ffn, 28672);  // 4096·⌈int(1.3·21845)/4096⌉
  const int64_t P = llama_params(80, 8192, 1024, 28672, 128256);
  EXPECT_EQ(P, 70'553'706'496);  // Llama 3.1 70B
  s.layout.parallel.dp = 8;  // 64 GPUs / tp 8
  const Report r = report_of(*c->model, s);
  EXPECT_EQ(r.estimate.params.total(), P);
  TrainingSettings flags;
  for (const auto& [name, value] : std::initializer_list<std::pair<std::string_view, OptionValue>>{
           {"seq_len", int64_t{8192}}, {"micro_batch", int64_t{8}}, {"recompute", std::string("full")},
           {"tp", int64_t{8}}, {"sp", true}, {"zero", int64_t{3}}, {"dp", int64_t{8}},
           {"weight_dtype", std::string("fp32")}, {"attention", std::string("flash")}})
    ASSERT_TRUE(set_training_option(flags, name, value));
  const Report preset = report_of(load_model("llama-3.1-70b").value(), flags);
  EXPECT_EQ(r.totals.total, preset.totals.total);
  // Full recomputation keeps each layer's input: 80 layers × s·b·h·2 bytes / tp (sequence parallel).
  EXPECT_GE(r.totals.activations, int64_t{80} * 8192 * 8 * 8192 * 2 / 8);
}

TEST(TorchtitanConfig, Llama3_405bNamesWhatItCannotHonour) {
  auto c = load_training_config(kData + "torchtitan_llama3_405b.toml");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.micro_batch, 2);
  EXPECT_EQ(s.layout.parallel.tp, 8);
  EXPECT_EQ(s.layout.recompute, Recompute::kFull);
  // TP 8: torchtitan's rules are modelled for FSDP alone, so HF's Llama rules count it (a warning).
  EXPECT_EQ(s.workload.framework, Framework::kHF);
  EXPECT_EQ(warned(*c), (std::vector<std::string>{"compile.enable", "parallelism.enable_async_tensor_parallel",
                                                  "quantize.linear.float8.enable_fsdp_float8_all_gather",
                                                  "model.converters", "parallelism.data_parallel_shard_degree",
                                                  kData + "torchtitan_llama3_405b.toml:"}));
  EXPECT_NE(c->warnings[3].find("float8 linears"), std::string::npos);
  ASSERT_TRUE(c->model);
  EXPECT_EQ(c->model->layers[0].ffn, 53248);  // 4096·⌈int(1.2·43690)/4096⌉
  EXPECT_EQ(llama_params(126, 16384, 1024, 53248, 128256), 405'853'388'800);  // Llama 3.1 405B
  s.layout.parallel.dp = 16;  // the file's note: "a preset for 128 H100 GPUs", over tp 8
  const Report r = report_of(*c->model, s);
  EXPECT_EQ(r.estimate.params.total(), 405'853'388'800);
  TrainingSettings flags;
  for (const auto& [name, value] : std::initializer_list<std::pair<std::string_view, OptionValue>>{
           {"seq_len", int64_t{8192}}, {"micro_batch", int64_t{2}}, {"recompute", std::string("full")},
           {"tp", int64_t{8}}, {"sp", true}, {"zero", int64_t{3}}, {"dp", int64_t{16}},
           {"weight_dtype", std::string("fp32")}, {"attention", std::string("flash")}})
    ASSERT_TRUE(set_training_option(flags, name, value));
  const Report preset = report_of(load_model("llama-3.1-405b").value(), flags);
  EXPECT_EQ(r.totals.total, preset.totals.total);
}

// debug_model.toml: selective_ac_option '2' wraps every 2nd block in full AC: 3 of the 6 layers.
TEST(TorchtitanConfig, DebugModelEveryNthLayer) {
  auto c = load_training_config(kData + "torchtitan_debug_model.toml");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.seq_len, 2048);
  EXPECT_EQ(s.layout.micro_batch, 8);
  // FSDP alone: torchtitan's own "every 2nd block checkpointed" (--selective-ac-option 2).
  EXPECT_EQ(s.workload.framework, Framework::kTorchtitan);
  EXPECT_EQ(s.layout.recompute, Recompute::kSelective);
  EXPECT_EQ(s.layout.selective_ac_every, 2);
  EXPECT_EQ(find(*c, "selective_ac_option")->source,
            "activation_checkpoint.selective_ac_option = \"2\" (" + kData + "torchtitan_debug_model.toml:65)");
  s.layout.parallel.dp = 8;  // data_parallel_shard_degree -1: the GPUs the job gets
  ASSERT_TRUE(c->model);
  const ModelSpec& m = *c->model;
  EXPECT_EQ(m.hidden, 256);
  EXPECT_EQ(m.num_heads, 16);
  EXPECT_EQ(m.num_kv_heads, 16);      // n_kv_heads None: n_heads
  EXPECT_EQ(m.layers[0].ffn, 768);    // 256·⌈int(2·1024/3)/256⌉
  EXPECT_EQ(m.vocab, 2048);
  const Report r = report_of(m, s);
  EXPECT_EQ(r.estimate.params.total(), llama_params(6, 256, 256, 768, 2048));
  EXPECT_EQ(r.estimate.params.total(), 6'163'712);
  // Blocks 2, 4, 6 keep only their input, 1, 3, 5 everything: between all-full and none.
  TrainingSettings none = s, full = s;
  ASSERT_TRUE(set_training_option(none, "recompute", std::string("none")));
  ASSERT_TRUE(set_training_option(full, "recompute", std::string("full")));
  none.layout.selective_ac_every = full.layout.selective_ac_every = 0;
  const Report r_none = report_of(m, none), r_full = report_of(m, full);
  EXPECT_EQ(r.totals.activations - r_full.totals.activations, 3 * (r_none.totals.per_layer - r_full.totals.per_layer));
}

TEST(TorchtitanConfig, UnknownKeysAndFlavors) {
  auto typo = read_torchtitan_toml("[parallelism]\ntensor_paralel_degree = 2\n", "t.toml");
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error().message,
            "parallelism.tensor_paralel_degree = 2 (t.toml:2): unknown torchtitan key "
            "\"parallelism.tensor_paralel_degree\" (did you mean \"parallelism.tensor_parallel_degree\"?); actmem cannot "
            "tell whether it changes memory (remove it from the file, or give the job as actmem flags)");
  auto not_table = read_torchtitan_toml("parallelism = 4\n", "n.toml");
  ASSERT_FALSE(not_table);
  EXPECT_EQ(not_table.error().message, "parallelism = 4 (n.toml:1): expected a table [parallelism]");
  // Keys of tables without memory effect pass whatever they are.
  auto free = read_torchtitan_toml("[metrics]\nanything = 1\n[model]\nname = \"qwen3\"\nflavor = \"0.6B\"\n", "q.toml");
  ASSERT_TRUE(free) << free.error().message;
  EXPECT_FALSE(free->model);  // not a llama3 flavor: --model is needed
  EXPECT_NE(free->model_from.back().find("give this model with --model"), std::string::npos);
  auto bad_ac = read_torchtitan_toml("[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"x\"\n", "a.toml");
  ASSERT_FALSE(bad_ac);
  EXPECT_NE(bad_ac.error().message.find("use \"op\" or a whole number"), std::string::npos);
  auto hsdp = read_torchtitan_toml("[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 8\n",
                                   "h.toml");
  ASSERT_TRUE(hsdp) << hsdp.error().message;
  EXPECT_EQ(std::get<int64_t>(find(*hsdp, "dp")->value), 8);
  EXPECT_EQ(std::get<int64_t>(find(*hsdp, "zero")->value), 3);
  auto pp = read_torchtitan_toml("[model]\nflavor = \"8B\"\n[training]\nlocal_batch_size = 8\n[parallelism]\n"
                                 "pipeline_parallel_degree = 4\npipeline_parallel_microbatch_size = 2\n"
                                 "pipeline_parallel_schedule = \"Interleaved1F1B\"\npipeline_parallel_layers_per_stage = 4\n"
                                 "data_parallel_shard_degree = 2\n",
                                 "p.toml");
  ASSERT_TRUE(pp) << pp.error().message;
  EXPECT_EQ(std::get<int64_t>(find(*pp, "micro_batch")->value), 2);
  EXPECT_EQ(std::get<int64_t>(find(*pp, "num_micro_batches")->value), 4);
  EXPECT_EQ(std::get<int64_t>(find(*pp, "vpp")->value), 2);   // 32 / (4 × 4)
  EXPECT_EQ(std::get<int64_t>(find(*pp, "zero")->value), 2);  // "default" does not reshard with PP
}

// Found by fuzzing (fuzz/config_fuzzer.cc): pipeline_parallel_degree = 0 with an every-N-th-layer
// checkpoint divided the layer count by zero. A degree below 1 is refused, naming the key.
TEST(TorchtitanConfig, ParallelDegreeBelowOneIsRefused) {
  auto zero = read_torchtitan_toml("[model]\nflavor = \"8B\"\n[activation_checkpoint]\nmode = \"selective\"\n"
                                   "selective_ac_option = \"2\"\n[parallelism]\npipeline_parallel_degree = 0\n",
                                   "z.toml");
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().message,
            "parallelism.pipeline_parallel_degree = 0 (z.toml:7): a parallel degree is a whole number >= 1 (1: not split)");
  auto tp = read_torchtitan_toml("[parallelism]\ntensor_parallel_degree = -2\n", "t.toml");
  ASSERT_FALSE(tp);
}

// Found by fuzzing (fuzz/reader_fuzzer.cc, torchtitan, 2026-12-03): a float where a whole number
// belongs, past int64's range, was cast by toml++'s value<int64_t>() (undefined behaviour). It is
// refused, naming the key; a float that is whole (4096.0) is refused too, as before.
TEST(TorchtitanConfig, FloatWhereAWholeNumberBelongsIsRefused) {
  auto huge = read_torchtitan_toml("[training]\nlocal_batch_size = 31\nseq_len = -2888888888888888888888.0\n", "f.toml");
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().message, "training.seq_len = -2.8888888888888887e+21 (f.toml:3): expected a whole number");
  auto whole = read_torchtitan_toml("[training]\nseq_len = 4096.0\n", "f.toml");
  ASSERT_FALSE(whole);
  EXPECT_NE(whole.error().message.find("expected a whole number"), std::string::npos);
}

}  // namespace
}  // namespace actmem
