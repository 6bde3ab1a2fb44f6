#include "config/megatron_theory.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/prepared.h"
#include "config/training_config.h"
#include "util/text_table.h"  // group_digits

namespace actmem {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;  // NUM_BYTES_IN_MEGABYTE

double mib(int64_t bytes) { return static_cast<double>(bytes) / kMiB; }

}  // namespace

Expected<MegatronTheoreticalMemory> megatron_theoretical_memory(const ModelSpec& model, const Layout& layout,
                                                                std::optional<int64_t> num_micro_batches) {
  if (model.mla)
    return Error{ErrorKind::kIncompatible, "model",
                 "Megatron's theoretical memory for multi-latent attention needs q_lora_rank etc.; not reimplemented"};
  if (model.num_layers < 1 || model.hidden < 1 || model.num_heads < 1)
    return Error{ErrorKind::kInvalid, "model", "a model with layers, hidden size and heads"};
  const auto& p = layout.parallel;
  const double h = static_cast<double>(model.hidden);
  const double a = static_cast<double>(model.num_heads);
  const double L = static_cast<double>(model.num_layers);
  const double tp = static_cast<double>(p.tp), pp = static_cast<double>(p.pp), dp = static_cast<double>(p.dp);
  const double s = static_cast<double>(layout.seq_len), b = static_cast<double>(layout.micro_batch);
  const double V = static_cast<double>(model.vocab);  // the reader's vocabulary is already padded
  const double ffn = static_cast<double>(model.layers.empty() ? 0 : model.layers.front().ffn);

  // compute_weight_and_optimizer_memory (l.12-293).
  const double query_projection_ratio = static_cast<double>(model.head_dim) * a / h;  // kv_channels·a / h
  const double groups = static_cast<double>(model.num_kv_heads);                     // num_query_groups
  const double gated = model.gated_mlp ? 1.5 : 1.0;                                    // 3/2 with --swiglu
  const double norm_size = model.norm == NormKind::kRMSNorm ? 1.0 : 2.0;
  const double moe_layers = model.is_moe() ? static_cast<double>(model.num_moe_layers()) : 0.0;
  const double dense_layers = L - moe_layers;
  const double experts = model.moe ? static_cast<double>(model.moe->num_experts) : 0.0;
  const double moe_ffn = model.moe ? static_cast<double>(model.moe->expert_ffn) : 0.0;
  const double shared_ffn = model.moe ? static_cast<double>(model.moe->shared_ffn) : 0.0;

  const double attention = 2 * h * h * ((1 + groups / a) * query_projection_ratio);
  const double embedding = h * V;
  const double final_norm = norm_size * h;
  const double dense_mlp = 2 * h * ffn * gated;
  const double shared_expert = 2 * h * shared_ffn * gated;
  const double routed_experts = 2 * h * moe_ffn * experts * gated;
  const double layernorms = 2 * h * norm_size;
  const double router = model.moe ? h * experts + (model.mlp_bias ? experts : 0.0) : 0.0;
  const double shared_gate = model.moe && model.moe->shared_expert_gate && shared_ffn > 0 ? h : 0.0;

  const double tp_sharded_block = (attention + dense_mlp) * dense_layers + (attention + shared_expert) * moe_layers;
  const double replicated_block = layernorms * dense_layers + (layernorms + router + shared_gate) * moe_layers + final_norm;
  const double expert_block = routed_experts * moe_layers;
  const double etp = static_cast<double>(p.expert_tp());  // --expert-tensor-parallel-size, default the TP size
  const double ep = static_cast<double>(p.ep);
  double tp_sharded = (tp_sharded_block / pp + embedding) / tp;
  const double replicated = replicated_block / pp;
  const double expert_sharded = (expert_block / pp) / (etp * ep);
  if (!model.tied_embeddings && p.pp == 1) tp_sharded += embedding / tp;  // the output layer on the same stage
  const bool distributed = layout.zero_stage >= 1;                          // --use-distributed-optimizer
  const double world = tp * pp * dp * static_cast<double>(p.cp);
  const double expert_dp = std::floor(world / (etp * ep * pp));
  auto bytes_per_param = [&](double data_parallel) { return distributed ? 6 + 12 / data_parallel : 18.0; };

  MegatronTheoreticalMemory out;
  out.parameters_on_most_loaded_shard = tp_sharded + replicated + expert_sharded;
  out.bytes_per_parameter = bytes_per_param(dp);
  const double weight_and_optimizer =
      (tp_sharded + replicated) * bytes_per_param(dp) + expert_sharded * bytes_per_param(std::max(expert_dp, 1.0));
  out.weight_and_optimizer_mib = weight_and_optimizer / kMiB;

  // report_theoretical_memory (l.456-489): the SP formula with --sequence-parallel and selective
  // recomputation, else the one without SP.
  const bool vpp = p.vpp > 1;  // args.virtual_pipeline_model_parallel_size is not None
  const double penalty = vpp ? 1 + (pp - 1) / (pp * static_cast<double>(p.vpp)) : 1.0;
  const double discount = !vpp && p.pp > 1 && num_micro_batches
                              ? std::min(1.0, static_cast<double>(*num_micro_batches) / pp)
                              : 1.0;
  double activation = 0;
  out.sequence_parallel_formula = p.sp && layout.recompute == Recompute::kSelective;
  if (out.sequence_parallel_formula) {
    // compute_activation_memory (l.296-372): Korthikanti et al. 2022 Table 2.
    activation = s * b * h * (18 + 4 * (ffn / h)) * L;
    activation += 8 * s * b * pp;  // input to embedding
    activation += s * b * h * pp;  // embedding dropout
    activation *= penalty * discount;
    if (p.pp == 1) activation += s * b * h * 4 * (1 + V / h);  // output layer and CE loss
    activation /= tp;
    out.activation_formula = "s·b·h·(18 + 4·f/h) per layer (compute_activation_memory)";
  } else {
    // compute_activation_memory_without_sp (l.375-453).
    activation = s * b * h * (10 + 24 / tp) * L;
    activation += 8 * s * b * pp;
    activation += s * b * h * pp;
    activation *= penalty * discount;
    if (p.pp == 1) activation += (s * b * V / tp + s * b * h) * 2;  // logits and the final norm's output
    activation *= 1.05;  // "buffer for optimizer and miscellaneous temporaries"
    out.activation_formula = "s·b·h·(10 + 24/t) per layer, ×1.05 (compute_activation_memory_without_sp)";
  }
  out.activation_mib = activation / kMiB;
  out.total_mib = out.weight_and_optimizer_mib + out.activation_mib;
  return out;
}

std::vector<std::string> megatron_comparison(const MegatronTheoreticalMemory& m, const Report& r) {
  const Totals& t = r.totals;
  const Workload& w = r.workload;
  const Layout& l = r.layout;
  std::vector<std::string> lines;
  const int64_t static_bytes = t.weights + t.gradients + t.optimizer;
  lines.push_back(fmt::format("Megatron-LM's theoretical memory (theoretical_memory_usage.py): weight and optimizer={:.2f} "
                              "MB, activation={:.2f} MB, total={:.2f} MB (MB = MiB)",
                              m.weight_and_optimizer_mib, m.activation_mib, m.total_mib));
  lines.push_back(fmt::format("actmem, the same job: weights + gradients + optimizer={:.2f} MB, activation={:.2f} MB, "
                              "transient={:.2f} MB, total={:.2f} MB",
                              mib(static_bytes), mib(t.activations), mib(t.transient), mib(t.total)));
  lines.push_back("why they differ:");
  auto why = [&lines](std::string text) { lines.push_back("  - " + std::move(text)); };

  // Static memory.
  const double actmem_per_param =
      t.params_on_gpu > 0 ? static_cast<double>(static_bytes) / static_cast<double>(t.params_on_gpu) : 0.0;
  why(fmt::format("bytes per parameter: Megatron assumes bf16 weights 2 + fp32 main gradients 4 + fp32 main weights 4 + "
                  "Adam 8 = 18{}; actmem counts this job's dtypes (weights {}, gradients {}, activations {}): {:.2f} on "
                  "average",
                  l.zero_stage >= 1 ? fmt::format(", 6 + 12/dp = {:.2f} with the distributed optimizer", m.bytes_per_parameter)
                                    : "",
                  dtype_name(w.weight_dtype), dtype_name(w.grad_dtype), dtype_name(w.dtype), actmem_per_param));
  const double param_gap = std::abs(m.parameters_on_most_loaded_shard - static_cast<double>(t.params_on_gpu));
  if (param_gap >= 1)
    why(fmt::format("parameters on the most loaded GPU: Megatron {:.0f}, actmem {} (Megatron's count leaves out biases and "
                    "learned position embeddings{})",
                    m.parameters_on_most_loaded_shard, group_digits(t.params_on_gpu),
                    l.parallel.pp > 1 ? ", and takes the first stage with the embedding where actmem takes the peak "
                                        "stage"
                                      : ""));

  // Activations.
  if (m.sequence_parallel_formula) {
    why("Megatron's activation formula is Korthikanti et al. 2022 Table 2 (sequence parallel, selective "
        "recomputation): 2-byte activations, k and v at full width (no GQA), dropout masks whatever the dropout p; "
        "actmem counts the tensors this model and kernel save (GQA's narrower k/v, flash attention's logsumexp, fp32 "
        "norm statistics, no masks at p = 0)");
  } else {
    why(fmt::format("Megatron uses its formula without sequence parallelism ({}): it does not look at the "
                    "recomputation{}; actmem follows --recompute {} tensor by tensor",
                    m.activation_formula,
                    l.recompute == Recompute::kFull ? " (full recomputation keeps only each layer's input)" : "",
                    kRecomputeNames.name(l.recompute)));
  }
  if (l.parallel.pp > 1)
    why(fmt::format("pipeline: Megatron counts the first stage holding all L layers' worth (L/pp layers × pp "
                    "micro-batches in flight) and no logits; actmem's peak is stage {} with {} micro-batches in flight",
                    t.peak_stage, t.in_flight_micro_batches));
  else
    why("logits: Megatron adds the output layer's input and logits; actmem counts the loss's saved fp32 softmax in "
        "activations and the logits' transient separately");
  why(fmt::format("actmem adds the step's largest transient ({:.2f} MB){}; Megatron has no such term",
                  mib(t.transient), t.reserve > 0 ? fmt::format(" and the reserve ({:.2f} MB)", mib(t.reserve)) : ""));
  if (t.fp8_weight_cache > 0)  // te_rules.h
    why(fmt::format("fp8: actmem adds TransformerEngine's cached fp8 weight copies ({:.2f} MB, rowwise + transpose of "
                    "each TE linear); Megatron's report does not count them",
                    mib(t.fp8_weight_cache)));
  return lines;
}

namespace {

std::optional<MegatronTheoreticalMemory> theory_for(const TrainingConfig& config, const Report& report) {
  if (config.format != "megatron" || report.model == nullptr) return std::nullopt;
  const bool micro_batches_given = std::any_of(config.settings.begin(), config.settings.end(),
                                               [](const ConfigSetting& s) { return s.option == "num_micro_batches"; });
  auto m = megatron_theoretical_memory(*report.model, report.layout,
                                       micro_batches_given ? std::optional<int64_t>(report.layout.parallel.num_micro_batches)
                                                           : std::nullopt);
  if (!m) return std::nullopt;
  return *m;
}

}  // namespace

std::vector<std::string> megatron_theory_lines(const TrainingConfig& config, const Report& report) {
  auto m = theory_for(config, report);
  return m ? megatron_comparison(*m, report) : std::vector<std::string>{};
}

nlohmann::json megatron_theory_json(const TrainingConfig& config, const Report& report) {
  auto m = theory_for(config, report);
  if (!m) return nullptr;
  return {{"weight_and_optimizer_mib", m->weight_and_optimizer_mib},
          {"activation_mib", m->activation_mib},
          {"total_mib", m->total_mib},
          {"parameters_on_most_loaded_shard", m->parameters_on_most_loaded_shard},
          {"bytes_per_parameter", m->bytes_per_parameter},
          {"activation_formula", m->activation_formula},
          {"comparison", megatron_comparison(*m, report)}};
}

}  // namespace actmem
