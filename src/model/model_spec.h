// ModelSpec: the plain description of a transformer that every estimate starts from.
// It is filled from a HuggingFace config.json (hf_config.h) or a built-in preset (presets.h),
// and read, never written, by the parameter, static-memory, activation and serving code.
// Where layers differ (dense vs MoE, sliding-window vs global), the difference is per-layer data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/quant_config.h"
#include "model/vision.h"
#include "util/dtype.h"
#include "actmem/expected.h"

namespace actmem {

/// Bounds on what a model may say; beyond them it is a typo, not a model (the largest public
/// configs are ~1e5 hidden, ~1e6 vocab). They keep every later product of sizes inside int64.
/// The config reader and ModelSpec::validate() both check against these.
namespace limits {
constexpr int64_t kMaxDim = int64_t{1} << 24;      // hidden, heads, head_dim, ranks
constexpr int64_t kMaxFfn = kMaxDim * 16;          // intermediate sizes
constexpr int64_t kMaxLayers = 100000;
constexpr int64_t kMaxVocab = int64_t{1} << 31;
constexpr int64_t kMaxPositions = int64_t{1} << 31;
constexpr int64_t kMaxExperts = int64_t{1} << 20;
}  // namespace limits

enum class NormKind { kLayerNorm, kRMSNorm };

/// The MLP's activation, as HF spells it in `hidden_act`; the spelling matters for activation
/// memory because the Python-formula gelu_new saves four tensors and the fused ops save one.
enum class ActFn {
  kGelu,          // "gelu": exact erf GeLU, one fused op
  kGeluNew,       // "gelu_new": the tanh approximation written as a Python formula (GPT-2)
  kGeluTanh,      // "gelu_pytorch_tanh" / "gelu_fast": tanh approximation as one fused op
  kSilu,          // "silu" / "swish"
  kRelu,          // "relu"
  kSquaredRelu,   // Megatron --squared-relu: torch.pow(F.relu(x), 2) (megatron/core/activations.py)
};

/// What sits on an encoder (BERT, RoBERTa) instead of an LM head: HF's AutoModel (BertModel with
/// its pooler), *ForMaskedLM (transform dense + act + LayerNorm, decoder tied to the word
/// embeddings, a bias of V) or *ForSequenceClassification (BERT: pooler + dropout + classifier;
/// RoBERTa: RobertaClassificationHead, dropout + dense + tanh + dropout + out_proj, no pooler).
enum class EncoderHead { kNone, kMaskedLM, kClassifier };

/// Mixture-of-experts shape, shared by all MoE layers of a model.
struct MoeSpec {
  int64_t num_experts = 0;          // routed experts (E)
  int64_t experts_per_token = 0;    // top-k
  int64_t expert_ffn = 0;           // intermediate size of one routed expert
  int64_t shared_ffn = 0;           // total intermediate size of the shared expert(s), 0 = none
  bool shared_expert_gate = false;  // Qwen2-MoE: sigmoid(Linear(h, 1)) scales the shared expert
  bool router_bias = false;         // E values per MoE layer: DeepSeek-V3's score correction, GPT-OSS's bias
  double capacity_factor = 0.0;     // 0 = dropless (HF, Megatron default); else tokens per expert cap
  bool normalize_topk = true;       // norm_topk_prob: top-k weights divided by their sum (Mixtral: always)
  // DeepSeek-V3's router (scoring_func, n_group, topk_group, routed_scaling_factor): what Megatron's
  // TopKRouter defaults to for the model (policies/megatron_options.h MoeRouterOptions).
  bool sigmoid_scores = false;
  int64_t router_groups = 0;       // n_group (0: no group-limited routing)
  int64_t router_group_topk = 0;   // topk_group
  double routed_scaling_factor = 0;
  friend bool operator==(const MoeSpec&, const MoeSpec&) = default;
};

/// Multi-head latent attention (DeepSeek-V2/V3).
struct MlaSpec {
  int64_t q_lora_rank = 0;  // 0 = q is projected directly from h
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  friend bool operator==(const MlaSpec&, const MlaSpec&) = default;
};

/// What differs from layer to layer.
struct LayerSpec {
  bool moe = false;            // routed experts instead of the dense MLP
  int64_t ffn = 0;             // dense MLP intermediate size (unused when moe)
  int64_t sliding_window = 0;  // 0 = global attention; else the window in tokens
  // A NoPE layer applies no RoPE: Llama 4's no_rope_layers[i] == 0 (iRoPE), every layer under
  // Megatron's --position-embedding-type none. Llama 4's RoPE layers attend within chunks of
  // attention_chunk tokens (chunked local mask; 0 = full causal attention).
  bool no_rope = false;
  int64_t attention_chunk = 0;
  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

/// KV heads one tensor-parallel rank holds: kv/tp, and at least one (when kv < tp each rank keeps
/// one head, replicated tp/kv times, as vLLM and TransformerEngine do). Layouts are validated so that
/// kv % tp == 0 or tp % kv == 0. Example: kv_heads_per_rank(8, 4) == 2, kv_heads_per_rank(8, 16) == 1.
inline int64_t kv_heads_per_rank(int64_t kv_heads, int64_t tp) { return kv_heads >= tp ? kv_heads / tp : 1; }

struct ModelSpec {
  std::string name;        // preset name or config path, for display
  // HF model_type ("llama", "gpt2", ...): the row of model/arch.h whose modeling file's quirks apply.
  // A Megatron-LM launch line whose switches are no HF family's is "megatron_gpt" (config/megatron_args.cc).
  std::string model_type;

  int64_t hidden = 0;        // h
  int64_t num_layers = 0;    // L
  int64_t num_heads = 0;     // a
  int64_t num_kv_heads = 0;  // kv (== a for MHA, 1 for MQA)
  int64_t head_dim = 0;      // d (may differ from h/a)
  int64_t vocab = 0;         // V
  int64_t max_positions = 0; // learned position table size (GPT-2); context limit otherwise
  int64_t derived_max_len = 0;  // vLLM's derived max_model_len where RoPE scaling extends it; 0: max_positions

  NormKind norm = NormKind::kRMSNorm;
  bool norm_bias = false;          // LayerNorm with bias
  double norm_eps = 1e-5;
  bool gated_mlp = true;           // SwiGLU/GeGLU: gate, up, down
  ActFn act = ActFn::kSilu;
  bool fused_qkv = false;          // one projection whose output holds q, k, v (GPT-2, NeoX, Phi-3)
  bool fused_gate_up = false;      // one projection whose output holds gate and up (Phi-3)
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool lm_head_bias = false;
  bool tied_embeddings = false;
  bool learned_positions = false;  // absolute position embedding table (GPT-2)
  bool parallel_residual = false;  // GPT-NeoX: attention and MLP read the same input
  bool qk_norm = false;            // Qwen3: RMSNorm over head_dim on q and k
  bool sandwich_norms = false;     // Gemma 2: extra norms after attention and after the MLP
  bool embedding_scaled = false;   // Gemma: embeddings multiplied by sqrt(h)
  bool shared_input_norm = false;  // Phi, Falcon-7B: one norm per layer, read by attention and the MLP
  bool post_norms_only = false;    // OLMo 2: norms on the attention and MLP outputs, none on their inputs
  bool qk_norm_full_width = false; // OLMo 2: q_norm / k_norm over the whole projection (a·d, kv·d)
  bool attention_sinks = false;    // GPT-OSS: a learned sink logit per head joins each softmax (a values per layer)
  // Llama 4: use_qk_norm is Llama4TextL2Norm (no weight) on q and k after RoPE, on RoPE layers only;
  // attn_temperature_tuning scales q on NoPE layers by a per-position fp32 factor.
  bool qk_l2_norm = false;
  bool attn_temperature_tuning = false;
  // The config.json was a multimodal wrapper (Llava, Llama 4, ...): its model_type, e.g. "llama4";
  // the fields here describe its text_config model, `vision` the tower and projector vLLM builds
  // (serving counts their weights; training estimates leave them out). Empty otherwise.
  std::string wrapper_model_type;
  std::optional<VisionSpec> vision;
  std::vector<std::string> warnings;  // what the reader read and the estimates do not count
  // Falcon: FalconAttention._split_heads makes k and v new tensors (list indexing `[..., [-2], :]`,
  // or `.transpose(1, 2).reshape(...)` of strided slices): kv heads each, or, under
  // new_decoder_architecture (broadcast_to + flatten), a heads each (kv_expanded_in_split).
  bool kv_copied_in_split = false;
  bool kv_expanded_in_split = false;
  // Encoders (BERT, RoBERTa): bidirectional attention, post-LN layers (LayerNorm(x + dropout(out))
  // after attention and after the MLP, no final norm), word + position + token-type embeddings
  // summed and normalized (embeddings.LayerNorm), `head` instead of an LM head.
  bool encoder = false;
  int64_t type_vocab = 0;                // type_vocab_size: token_type_embeddings rows
  bool position_ids_from_input = false;  // RoBERTa: create_position_ids_from_input_ids, a (b, s) int64 tensor
  EncoderHead head = EncoderHead::kNone;
  int64_t num_labels = 2;                // classifier outputs
  double classifier_dropout = 0.0;       // classifier_dropout, or hidden_dropout_prob when null
  double rotary_fraction = 1.0;    // GPT-NeoX rotary_pct: share of head_dim that is rotated
  // config.json's rope_scaling / rope_parameters: rope_type ("" = default, "linear", "dynamic",
  // "yarn", "llama3", "longrope", ...), factor and original_max_position_embeddings (0: absent).
  struct RopeScaling {
    std::string type;
    double factor = 1.0;
    int64_t original_max_positions = 0;
    friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
  } rope_scaling;
  double attn_logit_softcap = 0.0; // Gemma 2
  double final_logit_softcap = 0.0;

  double hidden_dropout = 0.0;     // after attention output projection and after the MLP
  double attention_dropout = 0.0;  // on the attention probabilities
  double embedding_dropout = 0.0;

  DType dtype = DType::kBF16;  // the config's torch_dtype / dtype
  std::optional<CheckpointQuant> quant;  // config.json's quantization_config (model/quant_config.h)

  std::optional<MoeSpec> moe;
  std::optional<MlaSpec> mla;
  std::vector<LayerSpec> layers;  // size num_layers

  // Derived sizes (llama.cpp style accessors).
  int64_t q_dim() const { return mla ? num_heads * mla->qk_head_dim() : num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t v_dim() const { return mla ? num_heads * mla->v_head_dim : num_kv_heads * head_dim; }
  int64_t attn_out_dim() const { return mla ? num_heads * mla->v_head_dim : num_heads * head_dim; }
  /// KV heads per TP rank (see the free function). Example: Llama-3-70B (kv 8) at tp 16 keeps 1.
  int64_t kv_heads_per_rank(int64_t tp) const { return actmem::kv_heads_per_rank(num_kv_heads, tp); }
  int64_t num_moe_layers() const;
  bool is_moe() const { return moe.has_value() && num_moe_layers() > 0; }
  /// Whether some layer rotates q and k (RoPE, or MLA's decoupled RoPE): not with learned positions,
  /// nor when every layer is a NoPE layer.
  bool has_rope() const;

  /// Checks that the shape is self-consistent and within sane bounds; the Error names the field.
  Expected<void> validate() const;
  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

}  // namespace actmem
