// Megatron-core choices that change what a layer saves (framework megatron only), named like
// Megatron-LM's own flags (megatron/training/arguments.py):
//   --transformer-impl local|transformer_engine   which layer spec builds the layer
//   --fp8-recipe delayed|tensorwise|mxfp8|blockwise  TransformerEngine fp8 (actmem's --fp8)
//   --fp8-gpu hopper|blackwell|ampere             (actmem's own) the GPU generation: TE's fp8 copies, workspaces
//   --cublas-workspace-config :4096:8             CUBLAS_WORKSPACE_CONFIG: PyTorch's cuBLAS workspace per handle
//   --disable-parameter-transpose-cache           TE quantizes the weights anew per micro-batch
//   --activation-func-fp8-input-store             the SwiGLU input kept in float8_e4m3fn
//   --recompute-modules core_attn,layernorm,mlp   what --recompute-granularity selective reruns
//   --moe-token-dispatcher-type allgather|alltoall  the MoE token dispatcher (op_graph.cc mcore_moe)
//   --moe-router-score-function, --moe-router-enable-expert-bias, --moe-router-num-groups,
//   --moe-router-group-topk, --moe-router-topk-scaling-factor, --moe-router-load-balancing-type,
//   --moe-aux-loss-coeff, --moe-z-loss-coeff, --moe-router-dtype   TopKRouter (MoeRouterOptions)
//   --no-rope-fusion                              apply_rope_fusion False: MLA's unfused RoPE (latent_attention)
//   --moe-grouped-gemm                            the experts as TE's GroupedLinear: its cuBLAS workspaces
// Rules: src/tensors/te_rules.h; sources and lines: validation/EXPECTED.md, "megatron-te".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "actmem/expected.h"
#include "util/names.h"

namespace actmem {

/// kLocal: Megatron-core's local spec (get_gpt_layer_local_spec: separate fused norm modules, its
/// own linears and DotProductAttention); what `--framework megatron` has always modeled, and the
/// default here. kTransformerEngine: get_gpt_layer_with_transformer_engine_spec (TE LayerNormLinear,
/// DotProductAttention -> FusedAttention, Megatron's fused SwiGLU); Megatron-LM's own default.
enum class TransformerImpl { kLocal, kTransformerEngine };
/// TE fp8 recipes (Megatron's --fp8-recipe, megatron/core/enums.py Fp8Recipe; "custom" is not
/// modeled): kDelayed (DelayedScaling, amax history; Megatron's default fp8_recipe) and kTensorwise
/// (Float8CurrentScaling) keep a saved fp8 tensor as 1 byte per element plus one fp32 scale_inv;
/// kMxfp8 (MXFP8BlockScaling, Blackwell only) adds one e8m0 scale byte per 32 elements, its scale
/// tensors padded to 128x4; kBlockwise (Float8BlockScaling) one fp32 scale per 1x128 activation
/// tile and per 128x128 weight block. Rules and sources: tensors/te_rules.h.
enum class Fp8Recipe { kNone, kDelayed, kTensorwise, kMxfp8, kBlockwise };

inline constexpr NameTable<TransformerImpl, 2> kTransformerImplNames{
    "transformer implementation",
    "transformer_impl",
    {{{TransformerImpl::kLocal, "local"}, {TransformerImpl::kTransformerEngine, "transformer_engine"}}}};
inline constexpr NameTable<Fp8Recipe, 5> kFp8RecipeNames{
    "fp8 recipe",
    "fp8",
    {{{Fp8Recipe::kNone, "none"},
      {Fp8Recipe::kDelayed, "delayed"},
      {Fp8Recipe::kTensorwise, "tensorwise"},
      {Fp8Recipe::kMxfp8, "mxfp8"},
      {Fp8Recipe::kBlockwise, "blockwise"}}}};

/// The GPU generation TE's per-tensor fp8 copies follow (delayed, tensorwise): on Hopper (sm90, no
/// non-TN fp8 GEMM) a Float8Tensor's columnwise usage is a separate transposed buffer; on Blackwell
/// (nvte_is_non_tn_fp8_gemm_supported) the rowwise data serves both (TE csrc/quantizer.cpp
/// Float8Quantizer::create_tensor l.361-376). MXFP8 runs on Blackwell only and keeps both copies
/// on any; blockwise keeps its transposed columnwise copy on both. Default: Hopper (what was modeled).
/// The same option sizes the cuBLAS workspaces (policies/workspaces.h): kAmpere (sm80, A100) takes
/// TE's 4 MiB workspace and PyTorch's smaller default; it has no fp8 (refused with @fp8).
enum class Fp8Gpu { kHopper, kBlackwell, kAmpere };
inline constexpr NameTable<Fp8Gpu, 3> kFp8GpuNames{
    "GPU generation",
    "fp8_gpu",
    {{{Fp8Gpu::kHopper, "hopper"}, {Fp8Gpu::kBlackwell, "blackwell"}, {Fp8Gpu::kAmpere, "ampere"}}}};

/// The Megatron-core release whose code the rules follow where it changed memory: k0_15 covers
/// core_v0.15.0 and later (main at d98e8a64 is 0.20); k0_14 the releases up to core_v0.14.x.
/// Difference read: under --deterministic-mode the MoE unpermute runs index_add_, which keeps the
/// experts' output for backward, from 56818f9e50 (2025-10-16, first in core_v0.15.0); before it
/// scatter_add_, which keeps only the index (transformer/moe/moe_utils.py unpermute).
enum class MegatronCore { k0_15, k0_14 };
inline constexpr NameTable<MegatronCore, 2> kMegatronCoreNames{
    "Megatron-core release",
    "megatron_core",
    {{{MegatronCore::k0_15, "0.15"}, {MegatronCore::k0_14, "0.14"}}}};

/// TransformerConfig.moe_token_dispatcher_type (Megatron's default allgather; flex is not modeled):
/// which of token_dispatcher.py's MoEAllGatherTokenDispatcher / MoEAlltoAllTokenDispatcher runs.
enum class MoeDispatcher { kAllgather, kAlltoall };
inline constexpr NameTable<MoeDispatcher, 2> kMoeDispatcherNames{
    "MoE token dispatcher",
    "moe_token_dispatcher",
    {{{MoeDispatcher::kAllgather, "allgather"}, {MoeDispatcher::kAlltoall, "alltoall"}}}};

/// TopKRouter's score function (moe_utils.py topk_routing_with_score_function l.900-931): kModel
/// takes it from the model (sigmoid for DeepSeek-V3, scoring_func "sigmoid"; softmax otherwise).
enum class MoeScoreFunction { kModel, kSoftmax, kSigmoid };
inline constexpr NameTable<MoeScoreFunction, 2> kMoeScoreFunctionNames{
    "MoE router score function",
    "moe_router_score_function",
    {{{MoeScoreFunction::kSoftmax, "softmax"}, {MoeScoreFunction::kSigmoid, "sigmoid"}}}};
/// --moe-router-load-balancing-type (router.py l.388-551): which aux loss; kModel: seq_aux_loss for
/// DeepSeek-V3 (seq_aux true; Megatron's DeepSeek-V3 recipe), aux_loss otherwise. sinkhorn
/// (sinkhorn_load_balancing, l.280-311): Sinkhorn-balanced expert choice, no aux loss.
enum class MoeLoadBalancing { kModel, kAuxLoss, kSeqAuxLoss, kGlobalAuxLoss, kNone, kSinkhorn };
inline constexpr NameTable<MoeLoadBalancing, 5> kMoeLoadBalancingNames{
    "MoE load-balancing type",
    "moe_router_load_balancing_type",
    {{{MoeLoadBalancing::kAuxLoss, "aux_loss"},
      {MoeLoadBalancing::kSeqAuxLoss, "seq_aux_loss"},
      {MoeLoadBalancing::kGlobalAuxLoss, "global_aux_loss"},
      {MoeLoadBalancing::kNone, "none"},
      {MoeLoadBalancing::kSinkhorn, "sinkhorn"}}}};
/// --moe-router-dtype (Router.gating l.105-111): the logits, hence the routing probs, in fp32 / fp64.
enum class MoeRouterDtype { kInput, kFp32, kFp64 };
inline constexpr NameTable<MoeRouterDtype, 2> kMoeRouterDtypeNames{
    "MoE router dtype", "moe_router_dtype", {{{MoeRouterDtype::kFp32, "fp32"}, {MoeRouterDtype::kFp64, "fp64"}}}};

/// TopKRouter's options (Megatron-LM @d98e8a64ddf3 moe/router.py, moe_utils.py). A negative or kModel
/// value means "from the model" (MoeSpec: DeepSeek-V3's sigmoid scores, expert bias, n_group /
/// topk_group, routed_scaling_factor). What each keeps: op_graph.cc mcore_router, EXPECTED.md
/// "megatron-moe-router".
struct MoeRouterOptions {
  MoeScoreFunction score = MoeScoreFunction::kModel;  // --moe-router-score-function
  int expert_bias = -1;                               // --moe-router-enable-expert-bias (1 on, 0 off)
  int64_t num_groups = -1;                            // --moe-router-num-groups (0: no groups)
  int64_t group_topk = -1;                            // --moe-router-group-topk
  double topk_scaling_factor = -1;                    // --moe-router-topk-scaling-factor: saves nothing
  MoeLoadBalancing load_balancing = MoeLoadBalancing::kModel;  // --moe-router-load-balancing-type
  double aux_loss_coeff = -1;  // --moe-aux-loss-coeff; unset: a nonzero one (every recipe's); 0: no aux loss
  double z_loss_coeff = 0;     // --moe-z-loss-coeff (0: Megatron's None, no z-loss)
  MoeRouterDtype dtype = MoeRouterDtype::kInput;  // --moe-router-dtype
  bool is_default() const {
    return score == MoeScoreFunction::kModel && expert_bias < 0 && num_groups < 0 && group_topk < 0 &&
           topk_scaling_factor < 0 && load_balancing == MoeLoadBalancing::kModel && aux_loss_coeff < 0 &&
           z_loss_coeff == 0 && dtype == MoeRouterDtype::kInput;
  }
};

/// TransformerConfig.recompute_modules (transformer_config.py l.560-582), as bits.
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1u << 0,
  kRecomputeLayernorm = 1u << 1,
  kRecomputeMlp = 1u << 2,
  kRecomputeMoeAct = 1u << 3,
  kRecomputeMoe = 1u << 4,
  kRecomputeSharedExperts = 1u << 5,
  kRecomputeMlaUpProj = 1u << 6,
};
/// The modules modeled here (the others are refused with the field named).
inline constexpr unsigned kRecomputeModulesModeled =
    kRecomputeCoreAttn | kRecomputeLayernorm | kRecomputeMlp | kRecomputeMoeAct | kRecomputeMoe |
    kRecomputeSharedExperts | kRecomputeMlaUpProj;

struct MegatronOptions {
  TransformerImpl impl = TransformerImpl::kLocal;
  Fp8Recipe fp8 = Fp8Recipe::kNone;
  bool fp8_act_input_store = false;              // --activation-func-fp8-input-store
  unsigned recompute_modules = kRecomputeCoreAttn;  // Megatron's default ["core_attn"] (l.1940)
  MoeDispatcher dispatcher = MoeDispatcher::kAllgather;  // --moe-token-dispatcher-type
  MoeRouterOptions router;                               // TopKRouter (read by mcore_moe)
  bool no_rope_fusion = false;  // --no-rope-fusion: TransformerConfig.apply_rope_fusion False (MLA only)
  Fp8Gpu fp8_gpu = Fp8Gpu::kHopper;                      // --fp8-gpu (with --fp8)
  bool no_transpose_cache = false;                       // --disable-parameter-transpose-cache (with --fp8)
  bool fp8_param_gather = false;  // --fp8-param-gather: TE linear weights are fp8 Float8Tensors (te_rules.h)
  bool deterministic = false;     // --deterministic-mode: torch.use_deterministic_algorithms(True)
  MegatronCore core = MegatronCore::k0_15;
  bool moe_grouped_gemm = false;  // --moe-grouped-gemm: TEGroupedMLP under the TE spec (its workspaces, workspaces.h)
  // CUBLAS_WORKSPACE_CONFIG as the job sets it (":4096:8"); empty: PyTorch's default for @fp8_gpu
  // (policies/workspaces.h).
  std::string cublas_workspace_config;
  bool is_default() const {
    return impl == TransformerImpl::kLocal && fp8 == Fp8Recipe::kNone && !fp8_act_input_store &&
           recompute_modules == kRecomputeCoreAttn &&  // the dispatcher is not part of it (mcore_moe reads it)
           !no_rope_fusion;
  }
};

/// "core_attn,mlp" -> bits; commas or spaces separate (Megatron's --recompute-modules takes a list).
/// Example: parse_recompute_modules("core_attn,mlp").value() == (kRecomputeCoreAttn | kRecomputeMlp).
Expected<unsigned> parse_recompute_modules(std::string_view text);
/// Bits -> "core_attn,layernorm,mlp" in Megatron's order.
std::string recompute_modules_name(unsigned bits);

}  // namespace actmem
