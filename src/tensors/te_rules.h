// Megatron-core save rules that depend on MegatronOptions (policies/megatron_options.h): the
// TransformerEngine layer spec, TE fp8 and --recompute-modules. op_graph.cc builds the layer and
// calls these; every rule, with its TE / Megatron-LM source lines, is in validation/EXPECTED.md
// ("megatron-te") and measured by validation/te_validation.py.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actmem/expected.h"
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
/// `etp`: the routed experts' TP degree (0: tp).
int64_t te_fp8_weight_elements(const ModelSpec& model, const LayerSpec& layer, int64_t tp, int64_t ep = 1,
                               int64_t etp = 0);
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
// ---------------------------------------------------------------------------------------------
// Block-scaled fp8 recipes (--fp8 mxfp8 | blockwise) and the GPU generation (--fp8-gpu). TE main
// @d0067d0da6cb: csrc/quantizer.cpp MXFP8Quantizer::get_scale_shape l.1852-1881,
// Float8BlockQuantizer::create_tensor l.1061-1116 and get_scale_shape l.1441-1493; recipe defaults
// common/recipe/__init__.py l.392-437 (Float8BlockScaling: x and grad 1x128 tiles, weights 128x128).
// For a tensor of M rows (all dims but the last) and K columns (the last):
//  MXFP8 (e4m3 data, 1 byte; one e8m0 byte per 32 elements; M and K multiples of 32):
//    rowwise    data M·K, scale pad(M, 128) x pad(K/32, 4)
//    columnwise data M·K (same layout), scale pad(M/32, 4) x pad(K, 128)
//  Float8 blockwise (fp32 scales), 1x128 tiles (block_scaling_dim 1, activations):
//    rowwise    data M·K, scale ⌈K/128⌉ x pad(M, 4)
//    columnwise data K·M (transposed), scale ⌈M/128⌉ x pad(K, 4)
//  128x128 blocks (block_scaling_dim 2, weights):
//    rowwise    data M·K, scale ⌈M/128⌉ x pad(⌈K/128⌉, 4)
//    columnwise data K·M, scale ⌈K/128⌉ x pad(⌈M/128⌉, 4)
// A saved linear input keeps its columnwise usage only, with or without sequence parallelism
// (layernorm_linear.py l.478-487: MXFP8 and blockwise ln_out update_usage(rowwise_usage=False)
// even when backward gathers it; linear.py l.600-616: supports_only_rowwise_all_gather() is False
// for both); linear_proj keeps its bf16 input instead (Megatron attention.py l.428-444 for every
// recipe but delayed; TE keeps it: both quantizers are is_requantization_safe()).
inline constexpr int64_t kMxfp8BlockSize = 32;
inline constexpr int64_t kFp8BlockLen = 128;

/// Rounds x up to a multiple of m. Example: pad_up(704, 128) == 768.
inline int64_t pad_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// Scale bytes of one usage of an M x K tensor quantized by `recipe` (`weight_blocks`: blockwise's
/// 128x128 weight blocks, else its 1x128 tiles). delayed / tensorwise: the one fp32 scale_inv.
/// Example: te_fp8_scale_bytes(Fp8Recipe::kMxfp8, 128, 704, true, false) == 4 * 768 (pad(128/32, 4) x pad(704, 128)).
int64_t te_fp8_scale_bytes(Fp8Recipe recipe, int64_t rows, int64_t cols, bool columnwise, bool weight_blocks);

/// Bytes of TE's cached fp8 copy of one (out, in) weight in training (rowwise for fprop, columnwise
/// for dgrad): delayed / tensorwise 2·out·in + 4 on Hopper (data + transpose), out·in + 4 on
/// Blackwell (one buffer); mxfp8 2·out·in + both padded e8m0 scale tensors; blockwise 2·out·in +
/// both fp32 128x128-block scale tensors. Example: Llama-3-8B's fc2 (4096, 14336) under mxfp8:
/// 2·58,720,256 + 4096·448 + 128·14336 = 121,110,528.
int64_t te_fp8_weight_copy_bytes(Fp8Recipe recipe, Fp8Gpu gpu, int64_t out, int64_t in);
/// The cache bytes of one layer's TE linears on one TP rank (`ep` for the routed experts' copies).
/// delayed / tensorwise: bytes per weight element (2 on Hopper: data + transpose, 1 on Blackwell)
/// times te_fp8_weight_elements + 4 per te_fp8_weight_copies, for every layer kind (dense, MoE, MLA);
/// on Hopper this is te_fp8_weight_cache_bytes(elements, copies). With @fp8_param_gather
/// (Megatron's --fp8-param-gather: the weights are built as Float8Tensors under TE's
/// quantized_model_init, core/extensions/transformer_engine.py l.262 at d98e8a64, their data in
/// DDP's uint8 param buffer, param_and_grad_buffer.py l.1277-1290) the rowwise data is the weight
/// itself (counted at 1 byte in the weights term, fp8_param_weight_saving) and TE caches no copy;
/// what stays here is Hopper's transpose, which Megatron builds after each all-gather
/// (fp8_utils.py post_all_gather_processing: "tensorwise: may need to create a transposed view to
/// match backend GEMM"), 1 byte per element (0 on Blackwell), and the 4-byte scale_inv per linear.
/// mxfp8 / blockwise: the sum of
/// te_fp8_weight_copy_bytes over the four linears (qkv, proj, fc1, fc2) of a dense standard-attention
/// layer (MoE and MLA are refused with those recipes: check_megatron_workload).
int64_t te_fp8_weight_cache_layer_bytes(const ModelSpec& model, const LayerSpec& layer, int64_t tp, int64_t ep,
                                        const MegatronOptions& options, int64_t etp = 0);
/// With @fp8_param_gather, what the weights term saves on `elements` TE linear weight elements
/// stored in fp8 (1 byte) instead of `weight_dtype`; 0 without it.
int64_t fp8_param_weight_saving(const Workload& workload, int64_t elements);
/// --disable-parameter-transpose-cache (per-tensor recipes): Megatron passes is_first_microbatch
/// None (extensions/transformer_engine.py l.1338-1340), TE's cache_name is None (linear.py l.1958),
/// so every forward quantizes the weight anew with rowwise and columnwise usage (l.466-490) and
/// saves that copy for dgrad (wt_save = weightmat, l.643-661; layernorm_linear.py alike): no static
/// term, but each micro-batch in flight keeps its own copies, per TE linear (out, in): data, and
/// on Hopper the transpose, 1 byte per weight each, + the 4-byte scale_inv (op_graph.cc linear()).

/// Report notes for mxfp8 / blockwise and --fp8-gpu blackwell (megatron_notes adds them; empty for
/// delayed / tensorwise on Hopper, whose note is megatron_notes' own).
std::vector<std::string> fp8_recipe_notes(const MegatronOptions& options);
/// --fp8-gpu and the recipes against the GPU: fp8_gpu applies with @fp8 only. Called by
/// check_megatron_workload.
Expected<void> check_fp8_gpu(const Workload& workload);

}  // namespace actmem::detail
