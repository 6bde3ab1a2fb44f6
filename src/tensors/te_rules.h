// Megatron-core save rules that depend on MegatronOptions (policies/megatron_options.h): the
// TransformerEngine layer spec, TE fp8 and --recompute-modules. op_graph.cc builds the layer and
// calls these; every rule, with its TE / Megatron-LM source lines, is in validation/EXPECTED.md
// ("megatron-te") and measured by validation/te_validation.py.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/expected.h"
#include "model/model_spec.h"
#include "policies/options.h"
#include "tensors/op_graph.h"

namespace actmem::detail {

/// Which Megatron module created a storage (Storage::mcore_tag bits), for --recompute-modules.
enum McoreTag : uint8_t {
  kTagAttnNorm = 1u << 0,  // input_layernorm (a module of its own in the local spec)
  kTagMlpNorm = 1u << 1,   // pre_mlp_layernorm (local spec; TE: fused into fc1 for dense layers)
  kTagMlp = 1u << 2,       // inside self.mlp (TE: fc1's LayerNormLinear norm included)
  kTagMlpInput = 1u << 3,  // what self.mlp receives: the checkpoint input under recompute "mlp"
  kTagMoeAct = 1u << 4,    // the routed experts' activation output (fc2's input): recompute "moe_act"
  kTagShared = 1u << 5,    // inside the shared experts (their input excluded): recompute "shared_experts"
  kTagMoeActInput = 1u << 6,  // fc1's output: the "moe_act" checkpoint keeps it (in bf16 even with the fp8 store)
};

/// The Megatron options against the model and the rest of the workload: they apply to framework
/// megatron only; fp8 needs the TE spec; the TE spec models fused attention (flash/sdpa); the
/// modeled recompute modules are all but mla_up_proj. Errors name the field at fault.
Expected<void> check_megatron_workload(const ModelSpec& model, const Workload& workload);

/// Whether a layer's norm is fused into the following TE LayerNormLinear (TE spec, dense layer,
/// no MLA): gpt_layer_specs.py l.145 (input_layernorm IdentityOp), l.157 (pre_mlp_layernorm
/// IdentityOp for dense, TENorm with experts), l.117 (MLA: TENorm).
bool te_fused_input_norm(const ModelSpec& model, const Workload& workload);
bool te_fused_mlp_norm(const ModelSpec& model, const Workload& workload, bool moe_layer);

/// Sets Storage::selective_rule on a megatron layer graph from workload.megatron.recompute_modules
/// (Megatron-core transformer_layer.py l.475-539, attention.py l.446/l.1555, random.py
/// CheckpointFunction / CheckpointWithoutOutput):
///  - core_attn: what core attention saves is dropped; q, k, v (its checkpoint inputs) are kept;
///  - layernorm: a separate norm module's saves and output are dropped (its input is kept);
///  - mlp (dense layers): everything the MLP creates is dropped; its input is kept;
///  - moe (MoE layers, moe_layer.py l.701-717): the same for everything the MoE layer creates;
///  - shared_experts (moe_layer.py l.508-534): what the shared experts create is dropped;
///  - moe_act (experts.py l.1019-1030, CheckpointWithoutOutput): the experts' activation output is freed.
void apply_recompute_modules(Graph& g, const ModelSpec& model, const Workload& workload, bool moe_layer);

/// Multiply-accumulates per token that --recompute-modules reruns in linears: the dense MLP's
/// (fc1 h·2f or h·f, fc2 f·h, per the whole layer; /t is the layout's) with mlp; with moe the
/// router's h·E, k routed experts' and the shared experts' MLPs; with shared_experts (without moe)
/// the shared experts' MLP; 0 otherwise.
double selective_recompute_macs(const ModelSpec& model, const Workload& workload, const LayerSpec& layer);

/// Report notes for the Megatron options (empty for the default local spec).
/// With fp8, the TE fp8 weight copies (not counted in the totals) are sized for `tp` in the note.
std::vector<std::string> megatron_notes(const ModelSpec& model, const Workload& workload, Recompute recompute,
                                        int64_t tp);

/// TE's cached fp8 weight copies (the `wt_save` workspace, layernorm_linear.py l.643-648; Float8Tensor
/// with rowwise and columnwise data on Hopper): 2 bytes per weight of each TE linear of every layer,
/// per tensor-parallel rank. 0 without fp8.
int64_t te_fp8_weight_workspace_bytes(const ModelSpec& model, const Workload& workload, int64_t tp);

}  // namespace actmem::detail
