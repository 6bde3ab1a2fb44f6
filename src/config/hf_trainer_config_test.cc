// axolotl and LLaMA-Factory example configs (examples/README.md) read into actmem's layout.
#include "config/training_config.h"

#include <algorithm>
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


std::vector<std::string> warned(const TrainingConfig& c) { return testing::warned(c, ':'); }

/// LoRA parameters on Llama-3-8B's seven projections of each of 32 layers: r·(in + out) per matrix,
/// q 4096+4096, k and v 4096+1024, o 4096+4096, gate and up 4096+14336, down 14336+4096: 81,920·r
/// per layer (PEFT's print_trainable_parameters: 41,943,040 at r 16).
constexpr int64_t lora_all_llama3_8b(int64_t r) { return 32 * r * (8192 + 5120 + 5120 + 8192 + 3 * 18432); }

Report same_job_as_flags(std::initializer_list<std::pair<std::string_view, OptionValue>> options) {
  TrainingSettings flags;
  for (const auto& [name, value] : options) EXPECT_TRUE(set_training_option(flags, name, value)) << name;
  return report_of(load_model("llama-3-8b").value(), flags);
}

// axolotl examples/llama-3/lora-8b.yml: LoRA r 32 on every linear of an 8-bit base.
TEST(HfTrainerConfig, AxolotlLora8b) {
  auto c = load_training_config(kData + "axolotl_llama3_lora-8b.yml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->format, "axolotl");
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.seq_len, 4096);
  EXPECT_EQ(s.layout.micro_batch, 2);
  EXPECT_EQ(s.layout.recompute, Recompute::kFull);
  EXPECT_EQ(s.workload.dtype, DType::kBF16);  // bf16: auto
  EXPECT_EQ(s.workload.attention, AttentionImpl::kFlash);
  EXPECT_EQ(s.workload.optimizer, Optimizer::kAdamW8bit);
  EXPECT_EQ(s.workload.lora.rank, 32);
  EXPECT_EQ(s.workload.lora.targets, unsigned{kLoraAll});
  EXPECT_EQ(s.workload.lora.dropout, 0.05);
  EXPECT_EQ(s.workload.lora.base, BaseWeights::kInt8);
  EXPECT_EQ(find(*c, "seq_len")->source, "sequence_len: 4096 (" + kData + "axolotl_llama3_lora-8b.yml:17)");
  EXPECT_EQ(find(*c, "base_weight_dtype")->source, "load_in_8bit: true (" + kData + "axolotl_llama3_lora-8b.yml:7)");
  EXPECT_EQ(find(*c, "optimizer")->source, "optimizer: adamw_bnb_8bit (" + kData + "axolotl_llama3_lora-8b.yml:40)");
  // issue 20: gradient_accumulation_steps was dropped without a word; it is --grad-accum.
  EXPECT_EQ(s.layout.grad_accum, 4);
  EXPECT_EQ(find(*c, "grad_accum")->source,
            "gradient_accumulation_steps: 4 (" + kData + "axolotl_llama3_lora-8b.yml:37)");
  EXPECT_EQ(warned(*c), std::vector<std::string>{"lora_modules_to_save"});  // embed_tokens, lm_head trained in full
  ASSERT_TRUE(c->model);
  EXPECT_EQ(c->model->name, "llama-3-8b");  // NousResearch/Meta-Llama-3-8B by the repo's name
  const Report r = report_of(*c->model, s);
  // fp32 adapters: 4 bytes of gradient per trainable parameter.
  EXPECT_EQ(r.totals.gradients, 4 * lora_all_llama3_8b(32));
  EXPECT_EQ(lora_all_llama3_8b(32), 83'886'080);
  const Report flags = same_job_as_flags({{"seq_len", int64_t{4096}}, {"micro_batch", int64_t{2}},
                                          {"recompute", std::string("full")}, {"attention", std::string("flash")},
                                          {"optimizer", std::string("adamw-8bit")}, {"lora_rank", int64_t{32}},
                                          {"lora_targets", std::string("all")}, {"lora_dropout", 0.05},
                                          {"base_weight_dtype", std::string("int8")}, {"grad_accum", int64_t{4}}});
  EXPECT_EQ(r.totals.total, flags.totals.total);
}

// axolotl examples/llama-3/qlora.yml: QLoRA (nf4, double quantization), paged AdamW.
TEST(HfTrainerConfig, AxolotlQlora) {
  auto c = load_training_config(kData + "axolotl_llama3_qlora.yml");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.lora.base, BaseWeights::kNF4);
  EXPECT_TRUE(s.workload.lora.double_quant);  // axolotl loaders/model.py: bnb_4bit_use_double_quant True
  EXPECT_EQ(s.workload.optimizer, Optimizer::kPagedAdamW);
  EXPECT_EQ(s.workload.lora.rank, 32);
  EXPECT_TRUE(c->warnings.empty());
  const Report r = report_of(*c->model, s);
  EXPECT_EQ(r.totals.gradients, 4 * lora_all_llama3_8b(32));
  const Report flags = same_job_as_flags({{"seq_len", int64_t{4096}}, {"micro_batch", int64_t{2}},
                                          {"recompute", std::string("full")}, {"attention", std::string("flash")},
                                          {"optimizer", std::string("paged-adamw")}, {"lora_rank", int64_t{32}},
                                          {"lora_targets", std::string("all")}, {"lora_dropout", 0.05},
                                          {"base_weight_dtype", std::string("nf4")}, {"double_quant", true}});
  EXPECT_EQ(r.totals.total, flags.totals.total);
}

// LLaMA-Factory examples/train_lora/llama3_lora_sft.yaml: its defaults fill the rest (gradient
// checkpointing on, AdamW, attention "auto").
TEST(HfTrainerConfig, LlamaFactoryLoraSft) {
  auto c = load_training_config(kData + "llamafactory_llama3_lora_sft.yaml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->format, "llama-factory");
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.seq_len, 2048);
  EXPECT_EQ(s.layout.micro_batch, 1);
  EXPECT_EQ(s.layout.recompute, Recompute::kFull);  // disable_gradient_checkpointing defaults to false
  EXPECT_EQ(s.workload.attention, AttentionImpl::kSdpa);
  EXPECT_EQ(s.workload.optimizer, Optimizer::kAdamW);
  EXPECT_EQ(s.workload.lora.rank, 8);
  EXPECT_EQ(s.workload.lora.targets, unsigned{kLoraAll});
  EXPECT_EQ(s.workload.lora.base, BaseWeights::kBF16);
  EXPECT_EQ(find(*c, "micro_batch")->source,
            "per_device_train_batch_size: 1 (" + kData + "llamafactory_llama3_lora_sft.yaml:28)");
  EXPECT_EQ(s.layout.grad_accum, 8);  // issue 20: read, not dropped
  EXPECT_EQ(find(*c, "grad_accum")->source,
            "gradient_accumulation_steps: 8 (" + kData + "llamafactory_llama3_lora_sft.yaml:29)");
  EXPECT_EQ(find(*c, "lora_rank")->source, "finetuning_type: lora (" + kData + "llamafactory_llama3_lora_sft.yaml:8), "
                                           "lora_rank: 8 (" + kData + "llamafactory_llama3_lora_sft.yaml:9)");
  EXPECT_TRUE(c->warnings.empty());
  ASSERT_TRUE(c->model);
  EXPECT_EQ(c->model->name, "llama-3-8b");  // meta-llama/Meta-Llama-3-8B-Instruct: the base's architecture
  const Report r = report_of(*c->model, s);
  EXPECT_EQ(r.totals.gradients, 4 * lora_all_llama3_8b(8));
  // The frozen bf16 base: every parameter in 2 bytes, plus the fp32 adapters.
  EXPECT_EQ(r.totals.weights, 2 * 8'030'261'248 + 4 * lora_all_llama3_8b(8));
}

// LLaMA-Factory examples/train_qlora/llama3_lora_sft_otfq.yaml: bitsandbytes 4-bit on the fly.
TEST(HfTrainerConfig, LlamaFactoryQlora) {
  auto c = load_training_config(kData + "llamafactory_llama3_qlora_sft_otfq.yaml");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.workload.lora.base, BaseWeights::kNF4);
  EXPECT_TRUE(s.workload.lora.double_quant);  // double_quantization defaults to True
  EXPECT_EQ(find(*c, "base_weight_dtype")->source,
            "quantization_bit: 4 (" + kData + "llamafactory_llama3_qlora_sft_otfq.yaml:4), quantization_method: bnb (" +
                kData + "llamafactory_llama3_qlora_sft_otfq.yaml:5)");
  const Report r = report_of(*c->model, s);
  EXPECT_EQ(r.totals.gradients, 4 * lora_all_llama3_8b(8));
}

// llama3_lora_sft_ds3.yaml names examples/deepspeed/ds_z3_config.json, read by the DeepSpeed reader
// (found beside the YAML by its file name).
TEST(HfTrainerConfig, LlamaFactoryDeepSpeedPath) {
  auto c = load_training_config(kData + "llamafactory_llama3_lora_sft_ds3.yaml");
  ASSERT_TRUE(c) << c.error().message;
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.zero_stage, 3);
  EXPECT_EQ(s.workload.dtype, DType::kBF16);  // the YAML's bf16: true; the JSON says "auto"
  const ConfigSetting* zero = find(*c, "zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->source, "\"zero_optimization.stage\": 3 (" + kData + "ds_z3_config.json) via deepspeed: "
                          "examples/deepspeed/ds_z3_config.json (" + kData + "llamafactory_llama3_lora_sft_ds3.yaml:11)");
  // The DeepSpeed config's own warnings come along (not its "auto" ones: the YAML gives those values).
  for (const auto& w : c->warnings) EXPECT_EQ(w.find("\"auto\" is filled in"), std::string::npos) << w;
  EXPECT_FALSE(c->warnings.empty());
  // LoRA under ZeRO-3 is refused, saying why (the frozen base partitioned and gathered layer by layer,
  // small parameters kept whole) and what to run instead (ZeRO-2: an upper bound for the weights).
  auto prepared = prepare(*c->model, s.workload);
  ASSERT_TRUE(prepared);
  auto r = explain(*prepared, s.layout);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().field, "zero_stage");
  EXPECT_EQ(r.error().message.rfind("@zero_stage 3: LoRA under ZeRO-3 is not modelled: ZeRO-3 partitions the frozen "
                                    "base", 0), 0u) << r.error().message;
  EXPECT_NE(r.error().message.find("stage3_param_persistence_threshold"), std::string::npos);
  EXPECT_NE(r.error().message.find("use @zero_stage 2"), std::string::npos);
  // The suggested run works: the same job at ZeRO-2 over 8 GPUs.
  s.layout.zero_stage = 2;
  s.layout.parallel.dp = 8;
  auto r2 = explain(*prepared, s.layout);
  ASSERT_TRUE(r2) << r2.error().message;
  EXPECT_EQ(r2->totals.gradients, 4 * lora_all_llama3_8b(8) / 8);  // fp32 adapter gradients over 8
}

// TrainingArguments.to_json_string() as tyronechen/genomenlp's docs publish it (examples/README.md):
// every field of transformers ~4.26, most at their defaults. It names no model and no sequence length.
TEST(HfTrainerConfig, TrainingArgumentsJson) {
  const std::string file = kData + "hf_training_args_genomenlp.json";
  auto c = load_training_config(file);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->format, "hf-trainer");
  EXPECT_FALSE(c->model);
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.micro_batch, 16);
  EXPECT_EQ(s.layout.recompute, Recompute::kNone);
  EXPECT_EQ(s.workload.dtype, DType::kFP32);  // bf16 false, fp16 false
  EXPECT_EQ(s.workload.weight_dtype, DType::kFP32);
  EXPECT_EQ(s.workload.optimizer, Optimizer::kAdamW);
  EXPECT_EQ(s.layout.zero_stage, 0);  // "fsdp": [], "deepspeed": null, "sharded_ddp": []
  EXPECT_EQ(find(*c, "micro_batch")->source, "per_device_train_batch_size: 16 (" + file + ":9)");
  EXPECT_EQ(find(*c, "optimizer")->source, "optim: adamw_hf (" + file + ":75)");
  EXPECT_EQ(find(*c, "recompute")->source, "gradient_checkpointing: false (" + file + ":93)");
  // Only the missing sequence length is warned: every other field is at a value with no memory effect.
  EXPECT_EQ(warned(*c), std::vector<std::string>{file});
  EXPECT_NE(c->warnings[0].find("TrainingArguments holds none"), std::string::npos) << c->warnings[0];
  // GPT-2 small (124,439,808 parameters, HF num_parameters()): fp32 weights, fp32 gradients, AdamW's
  // fp32 m and v: 4 + 4 + 8 bytes per parameter.
  s.layout.seq_len = 512;
  const Report r = report_of(load_model("gpt2").value(), s);
  EXPECT_EQ(r.totals.weights, 4 * 124'439'808);
  EXPECT_EQ(r.totals.gradients, 4 * 124'439'808);
  EXPECT_EQ(r.totals.optimizer, 8 * 124'439'808);
}

// The newer to_dict() shape, written here by hand (not from a repository): deepspeed as a dict,
// gradient_checkpointing_kwargs, fsdp "" beside the fsdp_config defaults, fused AdamW, max_seq_length
// (TRL's SFTConfig), torch_compile.
TEST(HfTrainerConfig, TrainingArgumentsJsonDeepSpeedDict) {
  const std::string text = R"({
  "output_dir": "out",
  "per_device_train_batch_size": 4,
  "gradient_accumulation_steps": 8,
  "bf16": true,
  "fp16": false,
  "fsdp": "",
  "fsdp_config": {"min_num_params": 0, "xla": false, "xla_fsdp_v2": false, "xla_fsdp_grad_ckpt": false},
  "deepspeed": {"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"},
                "train_micro_batch_size_per_gpu": "auto"},
  "label_smoothing_factor": 0.0,
  "optim": "adamw_torch_fused",
  "adafactor": false,
  "gradient_checkpointing": true,
  "gradient_checkpointing_kwargs": {"use_reentrant": false},
  "torch_compile": true,
  "max_seq_length": 2048
})";
  auto c = read_hf_training_json(text, "args.json");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->format, "hf-trainer");
  TrainingSettings s;
  ASSERT_TRUE(apply_training_config(*c, s));
  EXPECT_EQ(s.layout.micro_batch, 4);
  EXPECT_EQ(s.layout.seq_len, 2048);
  EXPECT_EQ(s.workload.dtype, DType::kBF16);
  EXPECT_EQ(s.workload.optimizer, Optimizer::kAdamW);
  EXPECT_EQ(s.layout.recompute, Recompute::kFull);
  EXPECT_EQ(s.layout.zero_stage, 2);  // from the deepspeed dict; fsdp "" is off
  EXPECT_EQ(find(*c, "zero")->source,
            "\"zero_optimization.stage\": 2 (args.json:9) via deepspeed: {zero_optimization: {stage: 2}, bf16: {enabled: "
            "auto}, train_micro_batch_size_per_gpu: auto} (args.json:9)");
  EXPECT_EQ(find(*c, "recompute")->source,
            "gradient_checkpointing: true (args.json:14), gradient_checkpointing_kwargs: {use_reentrant: false} "
            "(args.json:15): either way each layer keeps only its input");
  EXPECT_EQ(find(*c, "micro_batch")->source, "per_device_train_batch_size: 4 (args.json:3)");  // not DeepSpeed's "auto"
  EXPECT_EQ(s.layout.grad_accum, 8);  // issue 20: TrainingArguments.gradient_accumulation_steps is --grad-accum
  EXPECT_EQ(find(*c, "grad_accum")->source, "gradient_accumulation_steps: 8 (args.json:4)");
  // torch_compile: true, and the DeepSpeed reader's own "give --dp" (its "auto" values are the JSON's to fill).
  EXPECT_EQ(warned(*c), (std::vector<std::string>{"torch_compile", "args.json"}));
  EXPECT_NE(c->warnings[1].find("give --dp"), std::string::npos) << c->warnings[1];
}

TEST(HfTrainerConfig, TrainingArgumentsJsonRules) {
  auto typo = read_hf_training_json(R"({"per_device_train_batch_size": 2, "gradient_checkpoint": true})", "t.json");
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error().message,
            "gradient_checkpoint: true (t.json:1): unknown key \"gradient_checkpoint\" (did you mean "
            "\"gradient_checkpointing\"?); actmem cannot tell whether it changes memory (remove it from the file, or "
            "give the job as actmem flags)");
  auto not_json = read_hf_training_json("{\"optim\": ", "n.json");
  ASSERT_FALSE(not_json);
  EXPECT_EQ(not_json.error().message, "n.json: not a JSON object of TrainingArguments");
  auto shape = read_hf_training_json("{\"output_dir\": \"o\",\n \"fsdp\": [{\"a\": 1}]}", "s.json");
  ASSERT_FALSE(shape);
  EXPECT_NE(shape.error().message.find("s.json:2: not JSON of the expected shape"), std::string::npos)
      << shape.error().message;
  // fsdp as a list with offload: FSDP full_shard = ZeRO-3 and the optimizer state on the CPU.
  auto fsdp = read_hf_training_json(R"({"output_dir": "o", "fsdp": ["full_shard", "offload", "auto_wrap"]})", "f.json");
  ASSERT_TRUE(fsdp) << fsdp.error().message;
  EXPECT_EQ(std::get<int64_t>(find(*fsdp, "zero")->value), 3);
  EXPECT_TRUE(std::get<bool>(find(*fsdp, "offload_optimizer")->value));
  // adafactor: true sets optim (TrainingArguments.__post_init__); per_gpu_train_batch_size goes first.
  auto old = read_hf_training_json(
      R"({"per_device_train_batch_size": 8, "per_gpu_train_batch_size": 3, "optim": "adamw_hf", "adafactor": true})",
      "o.json");
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_EQ(std::get<std::string>(find(*old, "optimizer")->value), "adafactor");
  EXPECT_EQ(std::get<int64_t>(find(*old, "micro_batch")->value), 3);
  // Memory-relevant fields actmem does not model are warned when set, silent at their defaults.
  auto smoothing = read_hf_training_json(R"({"output_dir": "o", "label_smoothing_factor": 0.1,
    "auto_find_batch_size": false, "neftune_noise_alpha": null})", "l.json");
  ASSERT_TRUE(smoothing) << smoothing.error().message;
  std::vector<std::string> w = warned(*smoothing);
  EXPECT_EQ(std::count(w.begin(), w.end(), "label_smoothing_factor"), 1);
  EXPECT_EQ(std::count(w.begin(), w.end(), "auto_find_batch_size"), 0);
  EXPECT_EQ(std::count(w.begin(), w.end(), "neftune_noise_alpha"), 0);
  // A DeepSpeed config is still read as one.
  auto ds = load_training_config(kData + "deepspeed_zero2_auto.json");
  ASSERT_TRUE(ds) << ds.error().message;
  EXPECT_EQ(ds->format, "deepspeed");
}

TEST(HfTrainerConfig, UnknownKeysAndModels) {
  auto typo = read_hf_training_yaml("base_model: x/y\nmicro_batch_sise: 2\n", "t.yml");
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error().message,
            "micro_batch_sise: 2 (t.yml:2): unknown key \"micro_batch_sise\" (did you mean \"micro_batch_size\"?); "
            "actmem cannot tell whether it changes memory (remove it from the file, or give the job as actmem flags)");
  auto unknown_model = read_hf_training_yaml("base_model: someone/my-model\nsequence_len: 1024\n", "u.yml");
  ASSERT_TRUE(unknown_model) << unknown_model.error().message;
  EXPECT_FALSE(unknown_model->model);
  EXPECT_NE(unknown_model->model_from.back().find("give --model"), std::string::npos);
  auto qlora_without_4bit = read_hf_training_yaml("base_model: x/y\nadapter: qlora\nlora_r: 8\n", "q.yml");
  ASSERT_FALSE(qlora_without_4bit);
  EXPECT_NE(qlora_without_4bit.error().message.find("qlora needs load_in_4bit"), std::string::npos);
  auto shape = read_hf_training_yaml("base_model: x/y\nlora_target_modules:\n  - {a: b}\nadapter: lora\nlora_r: 8\n", "s.yml");
  ASSERT_FALSE(shape);
  EXPECT_NE(shape.error().message.find("s.yml:3: not YAML of the expected shape"), std::string::npos)
      << shape.error().message;
  auto fsdp = read_hf_training_yaml("model_name_or_path: x/y\nper_device_train_batch_size: 4\nfsdp: full_shard auto_wrap\n"
                                    "optim: sgd\nmax_seq_length: 512\n",
                                    "f.yml");
  ASSERT_TRUE(fsdp) << fsdp.error().message;
  EXPECT_EQ(fsdp->format, "hf-trainer");
  EXPECT_EQ(std::get<int64_t>(find(*fsdp, "zero")->value), 3);
  EXPECT_EQ(std::get<std::string>(find(*fsdp, "optimizer")->value), "sgd-nomomentum");
  EXPECT_EQ(std::get<std::string>(find(*fsdp, "recompute")->value), "none");
}

}  // namespace
}  // namespace actmem
