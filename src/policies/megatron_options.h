// Megatron-core choices that change what a layer saves (framework megatron only), named like
// Megatron-LM's own flags (megatron/training/arguments.py):
//   --transformer-impl local|transformer_engine   which layer spec builds the layer
//   --fp8-recipe delayed|tensorwise               TransformerEngine fp8 per-tensor scaling
//   --activation-func-fp8-input-store             the SwiGLU input kept in float8_e4m3fn
//   --recompute-modules core_attn,layernorm,mlp   what --recompute-granularity selective reruns
//   --moe-token-dispatcher-type allgather|alltoall  the MoE token dispatcher (op_graph.cc mcore_moe)
//   --no-rope-fusion                              apply_rope_fusion False: MLA's unfused RoPE (latent_attention)
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
/// TE fp8 with per-tensor scaling: kDelayed (DelayedScaling, amax history; Megatron's default
/// fp8_recipe) or kTensorwise (Float8CurrentScaling). Both keep a saved fp8 tensor as 1 byte per
/// element plus one fp32 scale_inv. MXFP8 and blockwise are not modeled.
enum class Fp8Recipe { kNone, kDelayed, kTensorwise };

inline constexpr NameTable<TransformerImpl, 2> kTransformerImplNames{
    "transformer implementation",
    "transformer_impl",
    {{{TransformerImpl::kLocal, "local"}, {TransformerImpl::kTransformerEngine, "transformer_engine"}}}};
inline constexpr NameTable<Fp8Recipe, 3> kFp8RecipeNames{
    "fp8 recipe",
    "fp8",
    {{{Fp8Recipe::kNone, "none"}, {Fp8Recipe::kDelayed, "delayed"}, {Fp8Recipe::kTensorwise, "tensorwise"}}}};

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
  bool no_rope_fusion = false;  // --no-rope-fusion: TransformerConfig.apply_rope_fusion False (MLA only)
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
