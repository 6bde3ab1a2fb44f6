// Framework save rules: data, one row per framework (activation-rules.md, the two tables). Read by
// the op builders of op_graph.cc only (an internal header: Context holds the row it builds under).
#pragma once

#include <array>

#include "tensors/op_graph.h"  // Framework (policies/options.h)

namespace actmem::detail {

/// What a normalization keeps for backward.
struct NormSaves {
  bool input;       // the input itself (fused kernels, nn.LayerNorm)
  bool input_fp32;  // an fp32 copy of the input: HF RMSNorm's x.to(float32) (the input itself when already fp32)
  bool mean;        // LayerNorm's fp32 mean (RMSNorm has none)
  bool rstd;        // fp32 1/std per row
  bool normalized;  // x·rstd cast back to the activation dtype, saved by the `weight *` multiply
};

/// What the MoE block keeps beyond its experts' MLPs (HF: the MixtralSparseMoeBlock loop, verified
/// in validation/EXPECTED.md; Megatron builds its own, mcore_moe).
struct MoeSaves {
  bool topk_row_sums;     // the in-place `weights /= weights.sum(-1)` keeps the fp32 row sums
  bool topk_weights_kept_by_normalization;  // only `/=` keeps the fp32 top-k weights (topk keeps indices)
  int index_bytes;        // per routed row: torch.where's (row, token) pair is one (n, 2) int64 storage
  bool index_add_source;  // index_add_ keeps its source, the weighted expert output
};

/// HF eager attention: torch.matmul folds (b, heads) with reshape, so a q, k or v that is a strided
/// view (a slice of a fused QKV output, a transposed projection output) is copied and the copy is
/// what bmm keeps; Megatron's bmm on [s, b·a, d] views keeps the views (and their whole storage).
struct FrameworkRules {
  Framework framework;
  // Whose code builds the layers. The op builders read these, never the framework's name.
  bool model_code;     // the model's own HF modeling file runs: its HfQuirks apply (model/arch.cc), Falcon's
                       // _split_heads copies k and v, softcapping is a Python tanh, the mask and RoPE's
                       // cos/sin are built once and passed to every layer
  bool mcore_modules;  // Megatron-core modules: the TE or local spec (te_rules.h), MLA's fused kernels,
                       // MoELayer (mcore_moe), vocab-parallel embedding and cross entropy, a model-level
                       // rotary_pos_emb, --recompute-modules
  bool dropout_modules;  // the model has dropout modules (torchtitan's Llama has none)
  bool op_sac;           // selective recomputation is per op (torchtitan's _apply_op_sac), not per module
  NormSaves rms_norm;
  NormSaves layer_norm;
  bool fused_qkv;           // always one QKV linear (q, k, v are views of its output)
  bool fused_gate_up;       // always one [gate|up] fc1
  bool fused_gated_kernel;  // SwiGLU as one kernel saving only its input (else act and mul save theirs)
  bool rope_saves_cos_sin;  // q·cos + rotate_half(q)·sin saves cos and sin (shared across layers)
  bool python_gelu_new;     // gelu_new written as its Python formula: saves x, tanh, 0.5·x, 1 + tanh
  bool softmax_fp32;        // eager softmax(dtype=float32) saves an fp32 output (unless the model says otherwise)
  bool eager_matmul_copies_views;  // eager QKᵀ / AV keep copies of strided q, k, v views, not their storage
  bool flash_pads_v;        // MLA with flash_attention_2: v padded to the q/k head dim (HF DeepSeek-V3; not sdpa)
  const char* loss_name;    // what the loss keeps: HF log_softmax, Megatron's fused softmax
  MoeSaves moe;
  bool embedding_dropout_is_hidden;  // Megatron applies hidden_dropout to the embeddings
  bool position_ids_batched;         // Megatron collates position ids as (b, s); HF passes (1, s)
};

inline constexpr std::array<FrameworkRules, 3> kRules{{
    // HuggingFace transformers, eager PyTorch op by op (modeling_llama.py, modeling_gpt2.py, ...).
    {Framework::kHF, /*model_code=*/true, /*mcore_modules=*/false, /*dropout_modules=*/true, /*op_sac=*/false,
     /*rms_norm=*/{false, true, false, true, true},
     /*layer_norm=*/{true, false, true, true, false},
     /*fused_qkv=*/false, /*fused_gate_up=*/false, /*fused_gated_kernel=*/false,
     /*rope_saves_cos_sin=*/true, /*python_gelu_new=*/true, /*softmax_fp32=*/true,
     /*eager_matmul_copies_views=*/true, /*flash_pads_v=*/true, "loss.log_softmax",
     /*moe=*/{true, true, 16, true}, /*embedding_dropout_is_hidden=*/false, /*position_ids_batched=*/false},
    // Megatron-LM with fused kernels (TransformerEngine norms, fused RoPE, bias-SwiGLU/GeLU).
    {Framework::kMegatron, /*model_code=*/false, /*mcore_modules=*/true, /*dropout_modules=*/true, /*op_sac=*/false,
     /*rms_norm=*/{true, false, false, true, false},
     /*layer_norm=*/{true, false, true, true, false},
     /*fused_qkv=*/true, /*fused_gate_up=*/true, /*fused_gated_kernel=*/true,
     /*rope_saves_cos_sin=*/false, /*python_gelu_new=*/false, /*softmax_fp32=*/false,
     /*eager_matmul_copies_views=*/false, /*flash_pads_v=*/false, "loss.softmax",
     /*moe=*/{false, false, 8, false}, /*embedding_dropout_is_hidden=*/true, /*position_ids_batched=*/true},
    // torchtitan's Llama 3 (v0.2.2, torchtitan/models/llama3/model/model.py), validation/EXPECTED.md
    // "torchtitan":
    //  - nn.RMSNorm (TransformerBlock.attention_norm / ffn_norm, Transformer.norm) runs torch's fused
    //    _fused_rms_norm on CUDA (torch >= 2.8), whose backward reads the input and the fp32 rstd.
    //  - Attention.__init__: separate wq, wk, wv; FeedForward.forward: w2(F.silu(w1(x)) * w3(x)),
    //    silu keeps its input, the mul both factors, w2 the product.
    //  - apply_rotary_emb: view_as_complex(xq.float()) * freqs_cis keeps only freqs_cis, a buffer
    //    (complex64, precomputed once by precompute_freqs_cis): nothing per layer. The fp32 copies
    //    of q and k are transient (measured on torch 1.13: the mul saves only the operand the
    //    other's gradient needs, and freqs_cis needs none).
    //  - cross_entropy_loss (components/loss.py): F.cross_entropy(pred.flatten(0, 1).float(), ...):
    //    an fp32 log-softmax and the int64 targets, as HF's.
    {Framework::kTorchtitan, /*model_code=*/false, /*mcore_modules=*/false, /*dropout_modules=*/false, /*op_sac=*/true,
     /*rms_norm=*/{true, false, false, true, false},
     /*layer_norm=*/{true, false, true, true, false},
     /*fused_qkv=*/false, /*fused_gate_up=*/false, /*fused_gated_kernel=*/false,
     /*rope_saves_cos_sin=*/false, /*python_gelu_new=*/false, /*softmax_fp32=*/true,
     /*eager_matmul_copies_views=*/false, /*flash_pads_v=*/false, "loss.log_softmax",
     /*moe=*/{false, false, 8, false}, /*embedding_dropout_is_hidden=*/false, /*position_ids_batched=*/false},
}};

inline const FrameworkRules& rules_for(Framework f) {
  for (const auto& r : kRules)
    if (r.framework == f) return r;
  return kRules[0];
}

}  // namespace actmem::detail
