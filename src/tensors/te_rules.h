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
enum McoreTag : uint16_t {
  kTagAttnNorm = 1u << 0,  // input_layernorm (a module of its own in the local spec)
  kTagMlpNorm = 1u << 1,   // pre_mlp_layernorm (local spec; TE: fused into fc1 for dense layers)
  kTagMlp = 1u << 2,       // inside self.mlp (TE: fc1's LayerNormLinear norm included)
  kTagMlpInput = 1u << 3,  // what self.mlp receives: the checkpoint input under recompute "mlp"
  kTagMlaUpOut = 1u << 4,  // MLA query, key, value: qkv_up_proj_and_rope_apply's outputs
  kTagMlaUpNorm = 1u << 5, // MLA q/kv layernorm inside the TE up projections (LayerNormLinear)
  kTagMoeAct = 1u << 6,    // the routed experts' activation output (fc2's input): recompute "moe_act"
  kTagShared = 1u << 7,    // inside the shared experts (their input excluded): recompute "shared_experts"
  kTagMoeActInput = 1u << 8,  // fc1's output: the "moe_act" checkpoint keeps it (in bf16 even with the fp8 store)
  // MLA under SP: a storage only the mla_up_proj checkpoint keeps (its k_pos_emb input: the
  // sequence-gathered rope key, or the gathered kv_combined it is a view of)
  kTagMlaUpInput = 1u << 11,
};

/// The Megatron options against the model and the rest of the workload: they apply to framework
/// megatron only; fp8 needs the TE spec; the TE spec models fused attention (flash/sdpa); the
/// seven recompute modules are all modeled. Errors name the field at fault.
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
///  - moe_act (experts.py l.1019-1030, CheckpointWithoutOutput): the experts' activation output is freed;
///  - mla_up_proj (MLA): query, key, value are dropped (CheckpointWithoutOutput frees them after
///    core attention saved them), and under the TE spec the q/kv norms fused into the up
///    projections (their rstd and output); the up projections' inputs stay (checkpoint inputs).
void apply_recompute_modules(Graph& g, const ModelSpec& model, const Workload& workload, bool moe_layer);

/// Multiply-accumulates per token that --recompute-modules reruns in linears: the dense MLP's
/// (fc1 h·2f or h·f, fc2 f·h, per the whole layer; /t is the layout's) with mlp; with moe the
/// router's h·E, k routed experts' and the shared experts' MLPs; with shared_experts (without moe)
/// the shared experts' MLP; plus MLA's up projections (q_up rq·n·dqk or q_proj h·n·dqk, kv_up
/// rkv·n·(dn+dv)) with mla_up_proj; 0 otherwise.
double selective_recompute_macs(const ModelSpec& model, const Workload& workload, const LayerSpec& layer);

/// Report notes for the Megatron options (empty for the default local spec); `cp` the layout's
/// context-parallel size.
std::vector<std::string> megatron_notes(const ModelSpec& model, const Workload& workload, Recompute recompute,
                                        int64_t cp);

/// TE's cached fp8 copies of the TE linear weights (framework megatron, @fp8), a static term of
/// its own (Totals::fp8_weight_cache). Per TE linear (qkv and fc1 LayerNormLinear, proj and fc2
/// Linear) quantize_weight() makes a Float8Tensor (TE linear.py l.479-490, layernorm_linear.py
/// l.340-364) with rowwise usage and, in training, columnwise usage; on Hopper (no non-TN fp8
/// GEMM) each is its own uint8 buffer, the data (out, in) and the transpose (in, out)
/// (csrc/quantizer.cpp Float8Quantizer::create_tensor l.355-385, Float8CurrentScalingQuantizer
/// l.670-705), plus a one-element fp32 scale_inv. Megatron passes is_first_microbatch True then
/// False (extensions/transformer_engine.py l.1338-1345; None only with
/// --disable-parameter-transpose-cache), so TE keeps the copy in _fp8_workspaces["weight"] across
/// micro-batches and steps (linear.py l.1958-2071): 2 bytes per weight element + 4 bytes per linear.
/// Under ZeRO-3 (FSDP) TE caches nothing (cache_name None for FSDP2, l.1958) and the term is 0.
inline constexpr int64_t kTeLinearsPerLayer = 4;  // qkv, proj, fc1, fc2
inline constexpr int64_t kTeFp8CopyBytesPerWeight = 2;  // rowwise data + columnwise transpose, 1 byte each
inline constexpr int64_t kTeFp8ScaleInvBytes = 4;  // fp32 _scale_inv, one element per tensor

/// Whether the cache exists for this workload and ZeRO stage (see above).
bool te_fp8_weight_cache_on(const Workload& workload, int zero_stage);
/// Weight elements of one layer's TE linears on one TP rank (`ep` the expert-parallel size).
/// Dense attention: qkv (a/t + 2·kv/t)·d·h, proj h·(a/t)·d; dense MLP: fc1 (2)·f/t·h, fc2 h·f/t.
/// Example: Llama-3-8B at tp 2: 109,051,904 (of 218,103,808).
/// MLA (multi_latent_attention.py l.520-610, TELinear / TELayerNormColumnParallelLinear):
/// linear_q_down_proj h·rq and linear_kv_down_proj h·(rkv+dr) (parallel_mode "duplicated": whole on
/// every TP rank), linear_q_up_proj rq·(a/t)·dqk (or linear_q_proj h·(a/t)·dqk without q LoRA),
/// linear_kv_up_proj rkv·(a/t)·(dn+dv), linear_proj (a/t)·dv·h.
/// MoE layer: the shared experts' fc1/fc2 (TE linears, as a dense MLP of fs) and, per local routed
/// expert, TE GroupedLinear's weight{i} of fc1 (2)·fe/t·h and fc2 h·fe/t: GroupedLinear.forward
/// caches each one in _fp8_workspaces["weight{i}"] (grouped_linear.py l.2259-2310, quantize_weight
/// per GEMM l.836-848); the router's weight is not a TE module's (RouterGatingLinearFunction).
int64_t te_fp8_weight_elements(const ModelSpec& model, const LayerSpec& layer, int64_t tp, int64_t ep = 1);
/// TE fp8 weight copies of one layer (each with its own fp32 scale_inv): qkv + proj (or MLA's five,
/// four without q LoRA), fc1 + fc2, or for a MoE layer the shared experts' 2 and 2 per local expert.
int64_t te_fp8_weight_copies(const ModelSpec& model, const LayerSpec& layer, int64_t ep = 1);
/// Bytes of the cache holding `elements` weight elements in `copies` fp8 weight copies.
inline int64_t te_fp8_weight_cache_bytes(int64_t elements, int64_t copies) {
  return kTeFp8CopyBytesPerWeight * elements + kTeFp8ScaleInvBytes * copies;
}

/// Rows the routed experts' GEMMs see under TE fp8 (delayed / tensorwise): TEGroupedMLP pads each
/// local expert's rows to a multiple of 16 (experts.py l.896-904 Fp8Padding; TE fp8_padding.py:
/// (m + 15) // 16 · 16, align 16 for per-tensor recipes). Modeled with balanced routing: each of
/// the `local_experts` experts gets ⌈moe_rows / local_experts⌉ rows. Example: 4096 rows over 8
/// experts: 8·512 = 4096 (no padding); 1000 rows over 8: 8·⌈125/16⌉·16 = 8·128 = 1024.
/// (--moe-router-padding-for-fp8 pads the routing map instead: the same expert rows, and the
/// dispatcher's tensors grow with them, not modeled.)
int64_t te_fp8_expert_rows(int64_t moe_rows, int64_t local_experts);
inline constexpr int64_t kTeFp8RowAlign = 16;

/// Extra McoreTag bits for the fp8 input copy a TE linear named `name` keeps, so that
/// --recompute-modules drops it where Megatron has the module keep its original input instead
/// (set_save_original_input, which the checkpoint then frees) or runs it without grad:
///  - moe.experts.fc2 under moe_act (experts.py l.273-276): kTagMoeAct;
///  - the shared experts' fc1 under layernorm (transformer_layer.py l.526-530, moe_layer.py
///    l.743-750): kTagMlpNorm;
///  - MLA's down projections under layernorm (transformer_layer.py l.476-479,
///    multi_latent_attention.py l.1114-1118): kTagAttnNorm;
///  - MLA's up projections under mla_up_proj (their inputs are norm outputs of the TE spec's
///    LayerNormLinear; the checkpoint runs them under no_grad): kTagMlaUpNorm.
/// Megatron refuses moe_act and layernorm with the delayed recipe (transformer_config.py
/// l.2000-2005), whose Float8Quantizer cannot keep the original input (TE linear.py l.309-326).
uint16_t te_fp8_input_tag(const std::string& linear_name);

}  // namespace actmem::detail
