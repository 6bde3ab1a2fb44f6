#include "policies/static_memory.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "policies/pipeline_split.h"  // which layers each stage holds

#include "util/dtype.h"       // dtype_bits, dtype_name
#include "util/text_table.h"  // group_digits

namespace actmem {

namespace {
// bitsandbytes' 8-bit Adam quantizes each moment blockwise (2048 values per block) with one fp32
// absmax per block: Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization".
constexpr double kAdam8bitBlock = 2048.0;

// ZeRO shards a part over `group` ranks with equal (padded) partitions.
int64_t shard(int64_t n, int64_t group) { return ceil_div(n, group); }

Bytes bytes_of(int64_t params, double bytes_each) {
  // Whole bytes per parameter (2, 4, 12, 16 ...) and a product below 2^53: the double product is
  // exact and whole, so the integer product is the same number (the planner's hot path).
  if (const auto whole = static_cast<int64_t>(bytes_each);
      whole >= 0 && whole <= 64 && static_cast<double>(whole) == bytes_each && params >= 0 &&
      params <= (int64_t{1} << 46))
    return Bytes{params * whole};
  const double b = std::ceil(static_cast<double>(params) * bytes_each);
  if (b > 9.0e18) throw OverflowError("static memory overflowed int64");
  return Bytes{static_cast<int64_t>(b)};
}
}  // namespace

BytesPerParam bytes_per_param(const Workload& workload) {
  BytesPerParam b;
  b.weights = dtype_bits(workload.weight_dtype) / 8.0;
  b.gradients = dtype_bits(workload.grad_dtype) / 8.0;
  // Mixed precision keeps an fp32 master copy for the update (ZeRO paper §3.1: K = 12 for Adam).
  // Pure low precision (torchtune with dtype=bf16, LitGPT "bf16-true") keeps none, and
  // torch.optim creates its state like the parameter (zeros_like(p)): moments in the weight dtype.
  const bool mixed = workload.precision == Precision::kMixed;
  const bool master = mixed && workload.weight_dtype != DType::kFP32;
  const double master_bytes = master ? 4.0 : 0.0;
  const std::string master_text = master ? "4 (fp32 master) + " : "";
  const double moment = mixed ? 4.0 : b.weights;
  const std::string m = fmt::format("{}", moment);
  switch (workload.optimizer) {
    case Optimizer::kAdamW:
      b.optimizer = master_bytes + 2 * moment;
      b.optimizer_formula = master_text + m + " (m) + " + m + " (v)";
      break;
    case Optimizer::kPagedAdamW:
      // bitsandbytes' 32-bit optimizers keep fp32 state whatever the parameter dtype.
      b.optimizer = master_bytes + 8.0;
      b.optimizer_formula = master_text + "4 (m) + 4 (v)";
      break;
    case Optimizer::kAdamW8bit:
    case Optimizer::kPagedAdamW8bit:
      b.optimizer = master_bytes + 2.0 + 2 * 4.0 / kAdam8bitBlock;
      b.optimizer_formula = master_text + "1 (m, int8) + 1 (v, int8) + 2·4/2048 (block absmax)";
      break;
    case Optimizer::kSGD:
      b.optimizer = master_bytes + moment;
      b.optimizer_formula = master_text + m + " (momentum)";
      break;
    case Optimizer::kSGDPlain:
      // torch.optim.SGD with momentum = 0 keeps no momentum_buffer.
      b.optimizer = master_bytes;
      b.optimizer_formula = master ? "4 (fp32 master)" : "0 (no state)";
      break;
    case Optimizer::kAdafactor:
      // transformers' Adafactor keeps no master copy (it updates p.float() in place and copies
      // back); its factored state depends on the shapes: finetune_static().
      b.optimizer = 0.0;
      b.optimizer_formula = "factored second moments (by shape)";
      break;
    case Optimizer::kMuon:
      // Megatron's Muon (core/optimizer/emerging_optimizers.py at d98e8a64): the 2-D weights go to
      // TensorParallelMuon, an OrthogonalizedOptimizer whose only state is momentum_buffer =
      // zeros_like(grad) of the fp32 master (Emerging-Optimizers orthogonalized_optimizer.py); the rest
      // to its scalar optimizer, Adam by default (--muon-scalar-optimizer). Both under
      // Float16OptimizerWithFloat16Params with --bf16 (core/optimizer/__init__.py): an fp32 master each.
      b.optimizer = master_bytes + 2 * moment;
      b.optimizer_formula = master_text + m + " (m) + " + m + " (v)";
      b.optimizer_matrix = master_bytes + moment;
      b.optimizer_matrix_formula = master_text + m + " (momentum)";
      break;
  }
  return b;
}

ParamCounts param_only_counts(int64_t params, int64_t pp) {
  ParamCounts c;
  pp = std::max<int64_t>(pp, 1);
  for (int64_t i = 0; i < pp; ++i) {
    LayerParams l;
    l.attention = params / pp + (i < params % pp ? 1 : 0);
    c.layers.push_back(l);
  }
  return c;
}

std::vector<StageParams> stage_params(const ParamCounts& counts, const ParallelLayout& layout) {
  const int64_t num_layers = static_cast<int64_t>(counts.layers.size());
  const int64_t pp = std::max<int64_t>(layout.pp, 1);
  const int64_t tp = std::max<int64_t>(layout.tp, 1);
  const int64_t ep = std::max<int64_t>(layout.ep, 1);
  const auto split = detail::PipelineSplit::of(num_layers, layout);
  std::vector<StageParams> stages;
  for (int64_t s = 0; s < pp; ++s) {
    StageParams st;
    st.stage = s;
    st.first_layer = split.chunk_begin(split.chunk_of(s, 0));
    for (int64_t j = 0; j < split.vpp; ++j) {  // rank s holds model chunks j·pp + s
      const int64_t c = split.chunk_of(s, j);
      for (int64_t i = split.chunk_begin(c); i < split.chunk_begin(c) + split.chunk_size(c); ++i) {
        const auto& l = counts.layers[static_cast<size_t>(i)];
        st.dense = checked_add(st.dense, l.per_rank(tp, ep) - l.experts_per_rank(ep, tp));
        st.expert = checked_add(st.expert, l.experts_per_rank(ep, layout.expert_tp()));
        st.dense_scalar = checked_add(st.dense_scalar, l.dense_vectors_per_rank(tp));
        st.expert_scalar = checked_add(st.expert_scalar, l.expert_vectors_per_rank(ep, layout.expert_tp()));
        ++st.num_layers;
      }
    }
    add_embedding_and_head(st, counts, tp, pp);
    stages.push_back(st);
  }
  return stages;
}

void add_embedding_and_head(StageParams& st, const ParamCounts& counts, int64_t tp, int64_t pp) {
  // Megatron places the embedding on the first stage (LanguageModelEmbedding: the vocab-parallel
  // word table, and a learned position table that every TP rank holds whole) and the LM head with
  // the final norm on the last stage; when tied and pp > 1 the last stage allocates its own copy of
  // the word table only (gpt_model.py: output_layer with skip_weight_param_allocation = pre_process
  // and share_embeddings_and_output_weights; the position table stays on the first stage).
  if (st.stage == 0) {
    st.dense = checked_add(st.dense, checked_add(ceil_div(counts.embedding, tp), counts.embedding_replicated));
    st.dense_scalar = checked_add(st.dense_scalar, ceil_div(counts.embedding, tp) + counts.embedding_vectors);
  }
  if (st.stage == pp - 1) {
    int64_t head = counts.lm_head;
    if (head == 0 && pp > 1) head = counts.embedding;  // tied: the last stage keeps its own copy
    st.dense = checked_add(st.dense, ceil_div(head, tp) + counts.lm_head_bias + counts.final_norm);
    st.dense_scalar = checked_add(st.dense_scalar, ceil_div(head, tp) + counts.lm_head_bias + counts.final_norm);
  }
}

StageStatic stage_static_bytes(const StageParams& st, const BytesPerParam& per, int z, bool offload,
                               const ParallelLayout& par) {
  // Context-parallel ranks hold the same parameters and join the data-parallel ranks in sharding them
  // (Megatron's DDP and distributed optimizer over intra_dp_cp_group, distributed_data_parallel.py
  // l.149-289; torchtitan's FSDP over the dp_shard_cp mesh); the routed experts over the expert-DP
  // group (ParallelLayout::expert_dp).
  const int64_t dp = checked_mul(par.dp, std::max<int64_t>(par.cp, 1));
  const int64_t expert_dp = par.expert_dp();
  const int64_t instances = std::max<int64_t>(par.optimizer_instances, 1);
  // Each part is sharded once ZeRO reaches it; the optimizer state over DP / instances (Megatron's
  // --num-distributed-optimizer-instances).
  auto part_of = [&](int stage_needed, double bytes_each, int64_t dense, int64_t expert) {
    const int64_t group = stage_needed == 1 ? instances : 1;
    if (z >= stage_needed) {
      dense = shard(dense, std::max<int64_t>(dp / group, 1));
      expert = shard(expert, std::max<int64_t>(expert_dp / group, 1));
    }
    return bytes_of(dense, bytes_each) + bytes_of(expert, bytes_each);
  };
  auto part = [&](int stage_needed, double bytes_each) { return part_of(stage_needed, bytes_each, st.dense, st.expert); };
  StageStatic m;
  m.weights = part(3, per.weights);
  m.gradients = part(2, per.gradients);
  // Muon: the 2-D weights' state and the scalar parameters' Adam state, each sharded as a whole.
  const Bytes optimizer =
      per.split_matrix()
          ? part_of(1, per.optimizer, st.dense_scalar, st.expert_scalar) +
                part_of(1, per.optimizer_matrix, st.dense - st.dense_scalar, st.expert - st.expert_scalar)
          : part(1, per.optimizer);
  if (offload)
    m.cpu_optimizer = optimizer;
  else
    m.optimizer = optimizer;
  return m;
}

void describe_static(StaticMemory& m, const BytesPerParam& per, const Workload& workload, const Layout& layout,
                     int64_t fp8_weights) {
  const auto& par = layout.parallel;
  const int64_t dp = par.dp * std::max<int64_t>(par.cp, 1);
  const int z = layout.zero_stage;
  auto sharding = [&](int stage_needed) {
    std::string s;
    if (par.tp > 1) s += fmt::format(" / TP {}", par.tp);
    if (par.pp > 1) s += fmt::format(", stage {} of {}", m.stage.stage + 1, par.pp);  // 1-based for people
    const int64_t n = stage_needed == 1 ? std::max<int64_t>(par.optimizer_instances, 1) : 1;
    if (z >= stage_needed && dp > 1) s += fmt::format(", ZeRO-{} over {} {}", z, par.cp > 1 ? "DP·CP" : "DP", dp / n);
    if (z >= stage_needed && n > 1) s += fmt::format(" ({} optimizer instances)", n);
    return s;
  };
  auto term = [&](const char* key, const std::string& label, double bytes_each, std::string each_formula,
                  Bytes bytes, int stage_needed) {
    Term t;
    t.key = key;
    t.label = label;
    t.formula = fmt::format("Ψ_gpu · {}", each_formula);
    t.substituted = fmt::format("{} params{} × {} B", group_digits(m.stage.total()), sharding(stage_needed), bytes_each);
    t.bytes = bytes;
    return t;
  };
  m.breakdown.title = "Static memory per GPU (parameters only)";
  m.breakdown.add(term("weights", fmt::format("Weights ({})", dtype_name(workload.weight_dtype)), per.weights,
                          fmt::format("{}", per.weights), m.weights, 3));
  if (fp8_weights > 0) {  // Megatron's --fp8-param-gather: the TE linears' weights are fp8 (te_rules.h)
    Term& t = m.breakdown.terms.back();
    t.label = fmt::format("Weights ({}, the TE linears' fp8)", dtype_name(workload.weight_dtype));
    t.formula = fmt::format("(Ψ_gpu − Ψ_TE linears) · {} + Ψ_TE linears · 1", per.weights);
    t.substituted = fmt::format("({} − {}) params{} × {} B + {} × 1 B", group_digits(m.stage.total()),
                                group_digits(fp8_weights), sharding(3), per.weights, group_digits(fp8_weights));
    t.note = "fp8 primary weights (@fp8_param_gather): Float8Tensor data in DDP's uint8 param buffer "
             "(Megatron param_and_grad_buffer.py, TE quantized_model_init)";
  }
  m.breakdown.add(term("gradients", fmt::format("Gradients ({})", dtype_name(workload.grad_dtype)), per.gradients,
                          fmt::format("{}", per.gradients), m.gradients, 2));
  m.breakdown.add(term("optimizer",
                          fmt::format("Optimizer state ({}{})", kOptimizerNames.name(workload.optimizer),
                                      layout.offload_optimizer ? ", offloaded to CPU: 0 on GPU" : ""),
                          per.optimizer, "(" + per.optimizer_formula + ")", m.optimizer, 1));
  if (per.split_matrix()) {  // Muon: its 2-D weights and the scalar optimizer's parameters apart
    Term& t = m.breakdown.terms.back();
    const int64_t scalar = m.stage.dense_scalar + m.stage.expert_scalar;
    t.formula = fmt::format("Ψ_2D · ({}) + Ψ_rest · ({})", per.optimizer_matrix_formula, per.optimizer_formula);
    t.substituted = fmt::format("{} 2-D params × {} B + {} other params × {} B{}",
                                group_digits(m.stage.total() - scalar), per.optimizer_matrix, group_digits(scalar),
                                per.optimizer, sharding(1));
    t.note = "Muon for 2-D weights, Adam for 1-D tensors, the word embedding and the output layer "
             "(Megatron emerging_optimizers.py)";
  }
  if (layout.offload_optimizer)
    m.breakdown.terms.back().note = fmt::format("{} in host memory", format_binary(m.cpu_optimizer));
}

}  // namespace actmem
