// Megatron-core choices that change what a layer saves (framework megatron only), named like
// Megatron-LM's own flags (megatron/training/arguments.py):
//   --transformer-impl local|transformer_engine   which layer spec builds the layer
//   --fp8-recipe delayed|tensorwise|mxfp8|blockwise  TransformerEngine fp8 (actmem's --fp8)
//   --fp8-gpu hopper|blackwell                    (actmem's own) the GPU generation TE's fp8 copies follow
//   --disable-parameter-transpose-cache           TE quantizes the weights anew per micro-batch
//   --activation-func-fp8-input-store             the SwiGLU input kept in float8_e4m3fn
//   --recompute-modules core_attn,layernorm,mlp   what --recompute-granularity selective reruns
//   --moe-token-dispatcher-type allgather|alltoall  the MoE token dispatcher (op_graph.cc mcore_moe)
// Rules: src/tensors/te_rules.h; sources and lines: validation/EXPECTED.md, "megatron-te".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/expected.h"
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
enum class Fp8Gpu { kHopper, kBlackwell };
inline constexpr NameTable<Fp8Gpu, 2> kFp8GpuNames{
    "fp8 GPU generation", "fp8_gpu", {{{Fp8Gpu::kHopper, "hopper"}, {Fp8Gpu::kBlackwell, "blackwell"}}}};

/// TransformerConfig.moe_token_dispatcher_type (Megatron's default allgather; flex is not modeled):
/// which of token_dispatcher.py's MoEAllGatherTokenDispatcher / MoEAlltoAllTokenDispatcher runs.
enum class MoeDispatcher { kAllgather, kAlltoall };
inline constexpr NameTable<MoeDispatcher, 2> kMoeDispatcherNames{
    "MoE token dispatcher",
    "moe_token_dispatcher",
    {{{MoeDispatcher::kAllgather, "allgather"}, {MoeDispatcher::kAlltoall, "alltoall"}}}};

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
  Fp8Gpu fp8_gpu = Fp8Gpu::kHopper;                      // --fp8-gpu (with --fp8)
  bool no_transpose_cache = false;                       // --disable-parameter-transpose-cache (with --fp8)
  bool is_default() const {
    return impl == TransformerImpl::kLocal && fp8 == Fp8Recipe::kNone && !fp8_act_input_store &&
           recompute_modules == kRecomputeCoreAttn;  // the dispatcher is not part of it (mcore_moe reads it)
  }
};

/// "core_attn,mlp" -> bits; commas or spaces separate (Megatron's --recompute-modules takes a list).
/// Example: parse_recompute_modules("core_attn,mlp").value() == (kRecomputeCoreAttn | kRecomputeMlp).
Expected<unsigned> parse_recompute_modules(std::string_view text);
/// Bits -> "core_attn,layernorm,mlp" in Megatron's order.
std::string recompute_modules_name(unsigned bits);

}  // namespace actmem
