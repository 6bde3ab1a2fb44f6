// Megatron-LM's own theoretical memory report, for the same job, beside actmem's figure.
// Megatron prints, at the first iteration (megatron/training/training.py l.3683):
//   Theoretical memory footprints: weight and optimizer=W MB, activation=A MB, total=T MB
// from megatron/training/theoretical_memory_usage.py @ 1bcb3b9e0b029c6109d8d32872645bd540052963
// (compute_weight_and_optimizer_memory, compute_activation_memory[_without_sp]), reimplemented
// here term by term (MB there is MiB: NUM_BYTES_IN_MEGABYTE = 1024 * 1024).
//
//   auto m = megatron_theoretical_memory(model, layout, num_micro_batches).value();
//   m.weight_and_optimizer_mib   // 18 B/param on the most loaded shard, 6 + 12/dp with the distributed optimizer
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_spec.h"
#include "policies/options.h"
#include "actmem/expected.h"

namespace actmem {

struct Report;          // actmem.h
struct TrainingConfig;  // training_config.h

struct MegatronTheoreticalMemory {
  double parameters_on_most_loaded_shard = 0;  // Megatron's "Number of parameters in most loaded shard"
  double bytes_per_parameter = 0;              // 18, or 6 + 12/dp with --use-distributed-optimizer
  double weight_and_optimizer_mib = 0;
  double activation_mib = 0;
  double total_mib = 0;
  bool sequence_parallel_formula = false;  // compute_activation_memory (SP + selective) or ..._without_sp
  std::string activation_formula;          // the per-layer term as Megatron writes it
};

/// Megatron's numbers for a model and layout (dense or MoE; not MLA). `num_micro_batches` is what
/// get_num_microbatches() returns (global batch / (micro-batch · dp)); nullopt as Megatron's None.
/// The layout's recompute (selective or not) and sp pick Megatron's activation formula, as
/// report_theoretical_memory() does.
Expected<MegatronTheoreticalMemory> megatron_theoretical_memory(const ModelSpec& model, const Layout& layout,
                                                                std::optional<int64_t> num_micro_batches);

/// The side-by-side lines: Megatron's report, actmem's figure, and why they differ (each reason from
/// the job: dtypes, recomputation, pipeline, logits, allowances).
std::vector<std::string> megatron_comparison(const MegatronTheoreticalMemory& megatron, const Report& actmem);

/// For a config read from a Megatron-LM script, the comparison a front end prints after its table:
/// megatron_comparison() for the report's model and layout (micro-batches per step when the script
/// gave them). Empty for other formats, a --params model, or a model Megatron's formula does not cover.
std::vector<std::string> megatron_theory_lines(const TrainingConfig& config, const Report& report);

/// The same as JSON, `megatron_theory` in --json: {weight_and_optimizer_mib, activation_mib, total_mib,
/// parameters_on_most_loaded_shard, bytes_per_parameter, activation_formula, comparison: [lines]};
/// null where megatron_theory_lines() is empty.
nlohmann::json megatron_theory_json(const TrainingConfig& config, const Report& report);

}  // namespace actmem
