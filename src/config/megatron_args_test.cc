#include "config/training_config.h"

#include <algorithm>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "api/library.h"
#include "config/config_test_util.h"

namespace actmem {
namespace {

using testing::find;
using testing::kData;
using testing::report_of;

// The small GPT of Megatron-LM's functional tests (12 layers × hidden 512, 8 heads, s 1024, b 4,
// GPT-2 vocabulary) on 8 GPUs, as their model_config.yaml launch it; each test adds its switches.
const std::string kCiGpt =
    "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 12 --hidden-size 512 "
    "--num-attention-heads 8 --micro-batch-size 4 --global-batch-size 32 --seq-length 1024 "
    "--max-position-embeddings 1024 --vocab-size 50257 ";

/// A launch line read and applied to default settings (the config keeps the model and the sources).
struct ReadLine {
  TrainingConfig config;
  TrainingSettings settings;
};
std::optional<ReadLine> read_line(const std::string& text) {
  auto c = read_megatron_args(text, "ci.sh");
  if (!c) {
    ADD_FAILURE() << c.error().message;
    return std::nullopt;
  }
  ReadLine r{std::move(*c), {}};
  if (auto ok = apply_training_config(r.config, r.settings); !ok) {
    ADD_FAILURE() << ok.error().message;
    return std::nullopt;
  }
  return r;
}


// Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh: TP 8 x PP 16, fp16, s 2048, GPT-2 BPE.
TEST(MegatronArgs, Gpt3_175bExample) {
  auto c = load_training_config(kData + "megatron_gpt3_175b.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.framework, Framework::kMegatron);
  EXPECT_EQ(s.layout.parallel.tp, 8);
  EXPECT_EQ(s.layout.parallel.pp, 16);
  EXPECT_EQ(s.layout.parallel.dp, 1);  // 8 GPUs cannot hold 8 x 16: not read, with a warning
  EXPECT_FALSE(s.layout.parallel.sp);
  EXPECT_EQ(s.layout.seq_len, 2048);
  EXPECT_EQ(s.layout.micro_batch, 1);
  EXPECT_EQ(s.workload.dtype, DType::kFP16);
  EXPECT_EQ(s.workload.weight_dtype, DType::kFP16);
  EXPECT_EQ(s.workload.grad_dtype, DType::kFP16);
  EXPECT_EQ(s.layout.zero_stage, 0);
  EXPECT_EQ(s.workload.hidden_dropout, 0.1);  // Megatron's default
  EXPECT_EQ(find(*c, "tp")->source, "--tensor-model-parallel-size 8 (" + kData + "megatron_gpt3_175b.sh:12)");
  ASSERT_EQ(c->warnings.size(), 2u);
  EXPECT_NE(c->warnings[0].find("8 GPUs cannot hold tp 8 x pp 16"), std::string::npos);
  EXPECT_NE(c->warnings[1].find("--global-batch-size 1536"), std::string::npos);

  ASSERT_TRUE(c->model);
  const ModelSpec& m = *c->model;
  EXPECT_EQ(m.num_layers, 96);
  EXPECT_EQ(m.hidden, 12288);
  EXPECT_EQ(m.num_heads, 96);
  EXPECT_EQ(m.vocab, 51200);  // 50257 padded to a multiple of 128 x 8, as Megatron pads it
  EXPECT_TRUE(m.tied_embeddings);
  const Report r = report_of(m, s);
  // Narayanan et al. 2021 (eq. for P) plus the final LayerNorm: 12·L·h² + 13·L·h + (V + s)·h + 2·h.
  const int64_t L = 96, h = 12288, V = 51200, seq = 2048;
  EXPECT_EQ(r.estimate.params.total(), 12 * L * h * h + 13 * L * h + (V + seq) * h + 2 * h);
  // The bytes: the same job spelled as flags on the gpt-175b preset (Korthikanti et al. 2022 Table 3).
  TrainingSettings flags;
  for (const auto& [name, value] : std::initializer_list<std::pair<std::string_view, OptionValue>>{
           {"framework", std::string("megatron")}, {"transformer_impl", std::string("transformer_engine")}, {"tp", int64_t{8}}, {"pp", int64_t{16}}, {"seq_len", int64_t{2048}},
           {"dtype", std::string("fp16")}, {"weight_dtype", std::string("fp16")}, {"hidden_dropout", 0.1},
           {"attention_dropout", 0.1}})
    ASSERT_TRUE(set_training_option(flags, name, value));
  const Report preset = report_of(load_model("gpt-175b").value(), flags);
  EXPECT_EQ(r.totals.total, preset.totals.total);
  EXPECT_EQ(r.totals.activations, preset.totals.activations);
}

// Megatron-LM examples/llama/train_llama3_8b_h200_bf16.sh: 8 GPUs, TP 1, distributed optimizer.
TEST(MegatronArgs, Llama3_8bExample) {
  auto c = load_training_config(kData + "megatron_llama3_8b.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.parallel.tp, 1);
  EXPECT_EQ(s.layout.parallel.dp, 8);                 // 8 GPUs / (1 x 1 x 1)
  EXPECT_EQ(s.layout.parallel.num_micro_batches, 16);  // 128 / (1 x 8)
  EXPECT_FALSE(s.layout.parallel.sp);                 // Megatron drops --sequence-parallel at TP 1
  EXPECT_EQ(s.layout.seq_len, 8192);
  EXPECT_EQ(s.layout.zero_stage, 1);                  // --use-distributed-optimizer
  EXPECT_EQ(s.workload.dtype, DType::kBF16);
  EXPECT_EQ(s.workload.grad_dtype, DType::kBF16);     // --grad-reduce-in-bf16
  EXPECT_EQ(s.workload.attention, AttentionImpl::kFlash);
  EXPECT_EQ(s.workload.hidden_dropout, 0.0);
  EXPECT_EQ(find(*c, "seq_len")->source, "--seq-length 8192 (" + kData + "megatron_llama3_8b.sh:9)");
  std::vector<std::string> named;
  for (const auto& w : c->warnings) named.push_back(w.substr(0, w.find(' ')));
  EXPECT_EQ(named, (std::vector<std::string>{"--cross-entropy-loss-fusion", "--empty-unused-memory-level",
                                             "--overlap-grad-reduce", "--overlap-param-gather", "--sequence-parallel"}));
  ASSERT_TRUE(c->model);
  const ModelSpec& m = *c->model;
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.vocab, 128256);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);  // the script keeps Megatron's default LayerNorm
  const Report r = report_of(m, s);
  // Llama-3-8B has 8,030,261,248 parameters (HF model card); LayerNorm adds a bias to each of the
  // 2·32 + 1 norms: 65 x 4096.
  const int64_t P = 8'030'261'248 + 65 * 4096;
  EXPECT_EQ(r.estimate.params.total(), P);
  // Static bytes: bf16 weights and gradients (2 + 2 per parameter), fp32 master + Adam (12 per
  // parameter) sharded over dp 8 by the distributed optimizer.
  EXPECT_EQ(r.totals.weights, 2 * P);
  EXPECT_EQ(r.totals.gradients, 2 * P);
  EXPECT_EQ(r.totals.optimizer, 12 * P / 8);
}

TEST(MegatronArgs, ShellForms) {
  auto c = read_megatron_args(R"(
N=2
ARGS=( --num-layers $(($N*2)) --hidden-size 64   # a comment
       --num-attention-heads "4" )
python pretrain_gpt.py ${ARGS[@]} --seq-length=128 \
   --max-position-embeddings 128 --vocab-size 1000 --micro-batch-size 2 2>&1 | tee log
)",
                              "inline");
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE(c->model);
  EXPECT_EQ(c->model->num_layers, 4);
  EXPECT_EQ(c->model->num_heads, 4);
  EXPECT_EQ(c->model->vocab, 1024);  // 1000 padded to a multiple of 128
  EXPECT_EQ(find(*c, "seq_len")->source, "--seq-length 128 (inline:5)");
  EXPECT_EQ(std::get<int64_t>(find(*c, "micro_batch")->value), 2);
}

// Korthikanti et al. 2022 / Narayanan et al. 2021 interleaving: 96 layers, pp 16, 3 layers per virtual
// stage -> 2 virtual stages per rank; recompute-method block N -> the first N layers of each stage.
TEST(MegatronArgs, VirtualStagesAndRecomputation) {
  auto c = read_megatron_args("--num-layers 96 --pipeline-model-parallel-size 16 "
                              "--num-layers-per-virtual-pipeline-stage 3 --recompute-granularity full "
                              "--recompute-method block --recompute-num-layers 2",
                              "v.sh");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(std::get<int64_t>(find(*c, "vpp")->value), 2);
  EXPECT_EQ(std::get<std::string>(find(*c, "recompute")->value), "full");
  EXPECT_EQ(std::get<int64_t>(find(*c, "recompute_layers")->value), 2);
  EXPECT_EQ(find(*c, "checkpoint_every"), nullptr);
  EXPECT_FALSE(c->model);  // no --hidden-size: a layout only
  auto bad = read_megatron_args("--num-layers 96 --pipeline-model-parallel-size 16 --num-layers-per-virtual-pipeline-stage 4",
                                "w.sh");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("96 layers do not split into pp 16 x 4"), std::string::npos);
}

// Megatron-LM's CI launch line of gpt/gpt3_mcore_te_tp1_pp4_resume_torch_dist_disable_bias_linear/lts_dgx_a100
// (data/megatron-ci/megatron_ci_memory.json, a recommended_core record; model_config.yaml at 60166922d3,
// 8 GPUs on 1 node): every argument is one of Megatron-LM's, so the line is read. --async-save,
// --deterministic-mode, --attention-softmax-in-fp32 and --no-gradient-accumulation-fusion change memory
// in ways actmem leaves out (each named in a warning); --log-memory-to-tensorboard and the other
// logging, data and checkpoint arguments are accepted silently.
TEST(MegatronArgs, MegatronCiLaunchLine) {
  const std::string args =
      "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --log-params-norm --log-num-zeros-in-grad "
      "--log-validation-ppl-to-tensorboard --log-timers-to-tensorboard --tensorboard-dir ${TENSORBOARD_PATH} "
      "--micro-batch-size 4 --global-batch-size 32 --seq-length 1024 --max-position-embeddings 1024 "
      "--train-iters 100 --timing-log-level 2 --lr-decay-iters 320000 --save ${CHECKPOINT_SAVE_PATH} "
      "--load ${CHECKPOINT_LOAD_PATH} --data-path ${DATA_PATH}/my-gpt3_00_text_document "
      "--vocab-file ${DATA_PATH}/bpe/vocab.json --merge-file ${DATA_PATH}/bpe/merges.txt --split 949,50,1 "
      "--distributed-backend nccl --lr 0.00015 --lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 1e-2 "
      "--clip-grad 1.0 --lr-warmup-fraction .01 --log-interval 1 --save-interval 50 --eval-interval 1000 "
      "--eval-iters 10 --transformer-impl transformer_engine --tensor-model-parallel-size 1 "
      "--pipeline-model-parallel-size 4 --disable-bias-linear --async-save --deterministic-mode "
      "--no-gradient-accumulation-fusion --attention-softmax-in-fp32 --use-checkpoint-opt_param-scheduler "
      "--use-mcore-models --ckpt-format torch_dist --data-cache-path ${DATA_CACHE_PATH} --bf16 "
      "--log-memory-to-tensorboard";
  auto c = read_megatron_args("torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py " + args, "ci.sh");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(std::get<int64_t>(find(*c, "pp")->value), 4);
  EXPECT_EQ(std::get<int64_t>(find(*c, "dp")->value), 2);  // 8 GPUs / (tp 1 x pp 4 x cp 1)
  std::vector<std::string> named;
  for (const auto& w : c->warnings) named.push_back(w.substr(0, w.find(' ')));
  for (const char* flag : {"--async-save", "--attention-softmax-in-fp32", "--no-gradient-accumulation-fusion"})
    EXPECT_NE(std::find(named.begin(), named.end(), flag), named.end()) << flag;
  EXPECT_EQ(std::find(named.begin(), named.end(), "--log-memory-to-tensorboard"), named.end());
  // --deterministic-mode is read (the MoE unpermute's index_add_, megatron_options.h MegatronCore).
  EXPECT_EQ(std::find(named.begin(), named.end(), "--deterministic-mode"), named.end());
  EXPECT_TRUE(std::get<bool>(find(*c, "deterministic")->value));
  for (const auto& w : c->warnings) {
    if (w.starts_with("--async-save")) {
      EXPECT_NE(w.find("not modelled: a host/GPU copy of the checkpoint while saving"), std::string::npos) << w;
    }
  }

  // The same line with one argument misspelt: Megatron-LM has no --log-memmory-to-tensorboard.
  auto typo = read_megatron_args(args + " --log-memmory-to-tensorboard", "ci.sh");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("unknown Megatron-LM argument --log-memmory-to-tensorboard (did you mean "
                                      "--log-memory-to-tensorboard?)"),
            std::string::npos)
      << typo.error().message;
}

// Megatron-LM's CI, gpt/gpt3_mcore_te_tp1_pp1_resume_torch_dist_dist_optimizer (lts, dgx_a100): the
// persistent state after a step, torch.cuda.memory_allocated() on the last rank, was 552,128,512 B
// (../shared/data/megatron-ci; validation/notes/megatron_persistent_state.md §6 A works it by hand):
// P = 12·(12h² + 13h) + 2h + V·h + s·h = 64,109,568 at h 512, V 50,304, s 1024; bf16 weights 2P,
// the fp32 grad buffer 4P, the distributed optimizer's fp32 master + Adam 12P/8 over dp 8, and the
// cuBLAS workspaces: CUBLAS_WORKSPACE_CONFIG=:4096:8 (exported by the script) on two threads, 2 × 32 MiB,
// + TE's 4 MiB on Ampere. 552,124,928 B: 3,584 B (seven 512-B scalar blocks) under the measurement.
// torchrun --nproc_per_node 0 (a libFuzzer find: it divided the global batch by dp 0): no GPUs,
// so no data parallelism and no micro-batch count, each a warning.
TEST(MegatronArgs, ZeroGpusReadNoDataParallelism) {
  auto c = read_megatron_args(
      "torchrun --nproc_per_node 0 --nnodes 1 pretrain_gpt.py --num-layers 12 --hidden-size 512 "
      "--num-attention-heads 8 --micro-batch-size 4 --global-batch-size 32 --seq-length 1024 "
      "--max-position-embeddings 1024 --vocab-size 50257\n",
      "ci.sh");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(find(*c, "dp"), nullptr);
  EXPECT_EQ(find(*c, "num_micro_batches"), nullptr);
  bool gpus = false, micro = false;
  for (const auto& w : c->warnings) {
    gpus = gpus || w.find("0 GPUs cannot hold") != std::string::npos;
    micro = micro || w.find("micro-batches per step not read") != std::string::npos;
  }
  EXPECT_TRUE(gpus && micro);
}

TEST(MegatronArgs, CiPersistentStateAfterTheStep) {
  const std::string line =
      "export CUBLAS_WORKSPACE_CONFIG=:4096:8\n"
      "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 12 --hidden-size 512 "
      "--num-attention-heads 8 --micro-batch-size 4 --global-batch-size 32 --seq-length 1024 "
      "--max-position-embeddings 1024 --vocab-size 50257 --transformer-impl transformer_engine "
      "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --use-distributed-optimizer --bf16\n";
  auto c = read_megatron_args(line, "ci.sh");
  ASSERT_TRUE(c) << c.error().message;
  const auto ws = find(*c, "cublas_workspace_config");
  ASSERT_NE(ws, nullptr);
  EXPECT_EQ(std::get<std::string>(ws->value), ":4096:8");
  EXPECT_EQ(ws->source, "CUBLAS_WORKSPACE_CONFIG=:4096:8 (ci.sh:1)");
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  ASSERT_TRUE(set_training_option(s, "fp8_gpu", OptionValue{std::string("ampere")}));
  const Report r = report_of(*c->model, s);
  EXPECT_EQ(r.estimate.params.total(), 64'109'568);
  EXPECT_EQ(r.totals.weights + r.totals.gradients + r.totals.optimizer, 480'821'760);
  EXPECT_EQ(r.totals.workspaces, 2 * 33'554'432 + 4'194'304);
  EXPECT_EQ(r.totals.weights + r.totals.gradients + r.totals.optimizer + r.totals.workspaces, 552'124'928);
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0].workspaces, r.totals.workspaces);
}

// arguments.py l.3536 @d98e8a64: --moe-aux-loss-coeff defaults to 0.0 (no aux loss, router.py
// is_aux_loss_enabled); a launch line without it is read so, one with it keeps its value.
TEST(MegatronArgs, MoeAuxLossCoeffDefaultsToMegatrons) {
  const std::string moe = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
                          "--max-position-embeddings 128 --vocab-size 1000 --num-experts 4 --moe-router-topk 2";
  auto without = read_megatron_args(moe, "m.sh");
  ASSERT_TRUE(without) << without.error().message;
  const auto* coeff = find(*without, "moe_aux_loss_coeff");
  ASSERT_NE(coeff, nullptr);
  EXPECT_EQ(std::get<double>(coeff->value), 0.0);
  EXPECT_EQ(coeff->source, "Megatron's default (no --moe-aux-loss-coeff): no aux loss");
  auto with = read_megatron_args(moe + " --moe-aux-loss-coeff 1e-2", "m.sh");
  ASSERT_TRUE(with) << with.error().message;
  EXPECT_EQ(std::get<double>(find(*with, "moe_aux_loss_coeff")->value), 0.01);
  auto dense = read_megatron_args("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 1000", "d.sh");
  ASSERT_TRUE(dense);
  EXPECT_EQ(find(*dense, "moe_aux_loss_coeff"), nullptr);
}

// Megatron-LM's CI, gpt/gpt3_mcore_te_tp2_pp1_multi_dist_optimizer_instances (dev_dgx_a100): tp 2, dp 4,
// --num-distributed-optimizer-instances 2, measured 462,388,736 B after the step. The distributed
// optimizer shards over dp·cp / 2 = 2 ranks (parallel_state.py l.924-929 @d98e8a64), so its fp32
// master + Adam are 12 B/param over 2: three times the bf16 weights (over 4 it would be 1.5 times).
// The sum is 0.6% under the measurement, with the learned position table whole on every TP rank
// (LanguageModelEmbedding's nn.Embedding, not vocab-parallel): 524,288 params × 12 B.
TEST(MegatronArgs, DistributedOptimizerInstances) {
  auto read = read_line("export CUBLAS_WORKSPACE_CONFIG=:4096:8\n" + kCiGpt +
                        "--transformer-impl transformer_engine --tensor-model-parallel-size 2 "
                        "--use-distributed-optimizer --num-distributed-optimizer-instances 2 --bf16\n");
  ASSERT_TRUE(read);
  const TrainingConfig* c = &read->config;
  TrainingSettings& s = read->settings;
  EXPECT_EQ(s.layout.parallel.optimizer_instances, 2);
  ASSERT_TRUE(set_training_option(s, "fp8_gpu", OptionValue{std::string("ampere")}));
  const Report r = report_of(*c->model, s);
  EXPECT_EQ(r.totals.optimizer, 3 * r.totals.weights);
  EXPECT_EQ(r.totals.gradients, 2 * r.totals.weights);  // the fp32 grad buffer
  const int64_t after_step = r.totals.weights + r.totals.gradients + r.totals.optimizer + r.totals.workspaces;
  EXPECT_EQ(after_step, 459'726'848);
  EXPECT_NEAR(static_cast<double>(after_step) / 462'388'736, 1.0, 0.02);
  // N must divide dp: 8 GPUs / tp 2 = dp 4; three instances cannot split it.
  s.layout.parallel.optimizer_instances = 3;
  auto p = prepare(*c->model, s.workload);
  ASSERT_TRUE(p);
  auto bad = explain(*p, s.layout);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "distributed_optimizer_instances");
}

// Megatron-LM's CI, gpt/gpt3_mcore_te_tp1_pp4_vp1 (lts, dgx_a100): tp 1, pp 4 with 12 layers at one per
// virtual stage (3 chunks per rank), dp 2, no distributed optimizer, measured 730,321,408 B after the
// step on the last rank. That rank holds 3 layers, the final LayerNorm and its own copy of the tied
// word table (no position table: LanguageModelEmbedding is on the first stage only): 35,213,824
// params × 18 B, PyTorch's two 32 MiB cuBLAS workspaces and TE's 4 MiB, and each chunk's last received
// input with its gradient, 3 × 2 × (1024 × 4 × 512 × 2 B). 3,584 B stay unexplained (7 scalars of 512 B).
TEST(MegatronArgs, AfterTheStepOnTheLastPipelineRank) {
  auto read = read_line("export CUBLAS_WORKSPACE_CONFIG=:4096:8\n" + kCiGpt +
                        "--transformer-impl transformer_engine --tensor-model-parallel-size 1 "
                        "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 "
                        "--no-gradient-accumulation-fusion --bf16 --attention-backend unfused\n");
  ASSERT_TRUE(read);
  ASSERT_TRUE(set_training_option(read->settings, "fp8_gpu", OptionValue{std::string("ampere")}));
  const Report r = report_of(*read->config.model, read->settings);
  ASSERT_EQ(r.stages.size(), 4u);
  const StageTotals& last = r.stages.back();
  EXPECT_EQ(last.weights, 2 * 35'213'824);
  EXPECT_EQ(last.pipeline_inputs_kept, 3 * 2 * (1024 * 4 * 512 * 2));
  EXPECT_EQ(last.after_step(), 18 * 35'213'824LL + 2 * 33'554'432 + 4'194'304 + 3 * 2 * 4'194'304);
  EXPECT_EQ(730'321'408 - last.after_step(), 3'584);
  EXPECT_EQ(r.stages.front().pipeline_inputs_kept, 2 * 2 * 4'194'304);  // rank 0: its second and third chunk
}

// Megatron-LM's CI, moe/gpt3_mcore_te_tp2_pp1_te_8experts_etp1_ep4 (8 GPUs): tp 2, ep 4, etp 1. MoE
// parallel folding takes the expert grid (etp 1 × ep 4 × expert-dp 2) from tp 2 × dp 4, so ep 4 need
// not divide dp; each GPU holds 2 of the 8 experts whole.
TEST(MegatronArgs, ExpertTensorParallelFolding) {
  auto read = read_line(kCiGpt + "--transformer-impl transformer_engine --sequence-parallel "
                                 "--tensor-model-parallel-size 2 --expert-model-parallel-size 4 "
                                 "--expert-tensor-parallel-size 1 --num-experts 8 --moe-router-topk 2 --bf16\n");
  ASSERT_TRUE(read);
  const TrainingConfig* c = &read->config;
  const TrainingSettings& s = read->settings;
  EXPECT_EQ(s.layout.parallel.dp, 4);
  EXPECT_EQ(s.layout.parallel.ep, 4);
  EXPECT_EQ(s.layout.parallel.etp, 1);
  EXPECT_EQ(find(*c, "etp")->source, "--expert-tensor-parallel-size 1 (ci.sh:1)");
  const Report r = report_of(*c->model, s);
  // 12 layers × 2 local experts × (fc1 h·4h + bias 4h, fc2 4h·h + bias h), whole (etp 1).
  const int64_t h = 512, expert = 2 * h * 4 * h + 4 * h + h;
  EXPECT_EQ(r.estimate.static_memory.stage.expert, 12 * 2 * expert);
}

// --account-for-embedding/loss-in-pipeline-split (transformer_block.py get_num_layers_to_build at
// d98e8a64): 6 layers + embedding + loss over pp 4 is 2 per stage, the first and last stage building
// one fewer: 1 + 2 + 2 + 1. With interleaving (Megatron-LM's CI case ..._pp4_vp2_account_for_embedding_
// loss_in_pipeline_split) only the first and last chunk lose a layer: refused by name. A
// --pipeline-model-parallel-layout string is refused by name too.
TEST(MegatronArgs, SplitWithTheEmbeddingAndLossCounted) {
  const std::string base =
      "torchrun --nproc_per_node 4 pretrain_gpt.py --num-layers 6 --hidden-size 512 --num-attention-heads 8 "
      "--seq-length 1024 --max-position-embeddings 1024 --vocab-size 50257 --pipeline-model-parallel-size 4 "
      "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split";
  auto c = read_megatron_args(base + "\n", "ci.sh");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.parallel.first_stage_layers, 1);
  EXPECT_EQ(s.layout.parallel.last_stage_layers, 1);
  EXPECT_EQ(find(*c, "first_stage_layers")->source, "8 layers / pp 4 − 1 from --account-for-embedding-in-pipeline-split (ci.sh:1)");
  const Report r = report_of(*c->model, s);
  EXPECT_EQ(r.stages.size(), 4u);
  auto vp = read_megatron_args(base + " --num-virtual-stages-per-pipeline-rank 2\n", "ci.sh");
  ASSERT_FALSE(vp);
  EXPECT_NE(vp.error().message.find("--account-for-embedding-in-pipeline-split (ci.sh:1) with the interleaved schedule"),
            std::string::npos);
  auto layout = read_megatron_args(
      "pretrain_gpt.py --num-layers 15 --hidden-size 512 --num-attention-heads 8 --vocab-size 50257 "
      "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et*3|(tt|)*6mL'\n",
      "ci.sh");
  ASSERT_FALSE(layout);
  EXPECT_NE(layout.error().message.find("a custom pipeline layout (layers per virtual stage) is not modelled"),
            std::string::npos);
  // --num-virtual-stages-per-pipeline-rank N is the interleaved schedule's vpp N.
  auto v = read_megatron_args(
      "pretrain_gpt.py --num-layers 8 --hidden-size 512 --num-attention-heads 8 --vocab-size 50257 "
      "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2\n",
      "ci.sh");
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(std::get<int64_t>(find(*v, "vpp")->value), 2);
}

// Megatron's fp16 training keeps an fp32 copy of its fp16 gradients after the step (optimizer.py
// l.1092-1105: main_param.grad = main_grad.float(), a copy unless the buffer is fp32), 4 bytes per
// parameter the optimizer holds, until the next step's zero_grad. Megatron-LM's CI fp16 records
// (gpt3_mcore_tp1_pp2_resume_torch_dist) were 24% over actmem's state without it, 7% with it, and
// within 2% with the local spec's global memory buffer too (workspaces.h).
TEST(MegatronArgs, Fp16GradientCopiesAfterTheStep) {
  const std::string line = kCiGpt + "--pipeline-model-parallel-size 2 --fp16";
  auto last_stage = [](const std::string& text) {
    auto read = read_line(text + "\n");
    return read ? report_of(*read->config.model, read->settings).stages.back() : StageTotals{};
  };
  const StageTotals fp16 = last_stage(line);
  EXPECT_EQ(fp16.grad_copies_kept, 2 * fp16.weights);  // 4 B per fp16 weight of 2 B
  EXPECT_EQ(fp16.after_step(), fp16.static_bytes() + fp16.pipeline_inputs_kept + fp16.grad_copies_kept);
  // The distributed optimizer shards the copy with its state: over dp 4.
  EXPECT_EQ(last_stage(line + " --use-distributed-optimizer").grad_copies_kept, 2 * fp16.weights / 4);
  // An fp32 gradient buffer is the main gradient itself: no copy.
  EXPECT_EQ(last_stage(line + " --accumulate-allreduce-grads-in-fp32").grad_copies_kept, 0);
  EXPECT_EQ(last_stage(line.substr(0, line.size() - 6) + " --bf16").grad_copies_kept, 0);
}

// Megatron's local spec has one core attention, DotProductAttention (models/backends.py
// LocalSpecProvider.core_attention), whatever --attention-backend says: eager. Megatron-LM's CI local
// records (gpt3_mcore_tp1_pp2, ...) run it; read as flash their peaks were 21-36% low.
TEST(MegatronArgs, LocalSpecAttentionIsDotProductAttention) {
  auto c = read_megatron_args("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                              "--vocab-size 1000 --transformer-impl local --attention-backend flash\n",
                              "x.sh");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(std::get<std::string>(find(*c, "attention")->value), "eager");
  EXPECT_NE(find(*c, "attention")->source.find("DotProductAttention"), std::string::npos);
}

// Megatron-FSDP's --data-parallel-sharding-strategy (arguments.py l.3190, default optim_grads_params)
// shards the optimizer state, the gradients and the parameters: ZeRO 1, 2, 3. Megatron-LM's CI
// gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor (H100, tp 2, dp 4): measured 246,999,552 B after the
// step; (2 + 4 + 12) B × 32,368,640 / 4 params + the 96 MiB + 1 KiB of cuBLAS and TE workspaces is
// 246,323,200 B (−0.3%); read as the distributed optimizer alone it was +59%.
TEST(MegatronArgs, MegatronFsdpShardingStrategy) {
  const std::string line = "export CUBLAS_WORKSPACE_CONFIG=:4096:8\n" + kCiGpt +
                           "--transformer-impl transformer_engine --tensor-model-parallel-size 2 --use-megatron-fsdp "
                           "--use-distributed-optimizer --bf16";
  auto zero_of = [](const std::string& text) {
    auto read = read_line(text + "\n");
    return read ? read->settings.layout.zero_stage : -1;
  };
  EXPECT_EQ(zero_of(line), 3);  // the default strategy
  EXPECT_EQ(zero_of(line + " --data-parallel-sharding-strategy optim_grads"), 2);
  EXPECT_EQ(zero_of(line + " --data-parallel-sharding-strategy optim"), 1);
  EXPECT_EQ(zero_of(line + " --data-parallel-sharding-strategy no_shard"), 0);
  auto read = read_line(line + "\n");
  ASSERT_TRUE(read);
  ASSERT_TRUE(set_training_option(read->settings, "fp8_gpu", OptionValue{std::string("hopper")}));
  const StageTotals last = report_of(*read->config.model, read->settings).stages.back();
  EXPECT_EQ(last.weights + last.gradients + last.optimizer, 18 * 32'368'640LL / 4);
  EXPECT_EQ(last.after_step(), 18 * 32'368'640LL / 4 + 2 * 33'554'432 + 33'555'456);
}

TEST(MegatronArgs, UnknownArgumentsAreErrors) {
  auto c = read_megatron_args("--num-layers 2 --hiden-size 64", "x.sh");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message,
            "--hiden-size 64 (x.sh:1): unknown Megatron-LM argument --hiden-size (did you mean --hidden-size?); "
            "Megatron-LM has no such argument, so actmem cannot tell whether it changes memory (remove it from the "
            "file, or give the job as actmem flags)");
  auto no_vocab = read_megatron_args("--num-layers 2 --hidden-size 64 --num-attention-heads 4", "y.sh");
  ASSERT_FALSE(no_vocab);
  EXPECT_NE(no_vocab.error().message.find("add --vocab-size N"), std::string::npos);
}

}  // namespace
}  // namespace actmem
