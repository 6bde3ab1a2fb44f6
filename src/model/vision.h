// The vision tower and multimodal projector of a multimodal wrapper's config.json (vision_config
// beside text_config), as vLLM v0.19 builds them for serving (vllm/model_executor/models/siglip.py,
// clip.py, pixtral.py, mllama4.py, gemma3_mm.py, llava.py, llava_next.py, mistral3.py @8b141ed8c;
// validation/notes/vllm_019_vision.md). One home for their shapes: vision_weight_tensors().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "actmem/expected.h"

namespace actmem {

struct WeightTensor;
struct ModelSpec;

enum class VisionTower {
  kSiglip,  // SigLIP: biased conv patches, (image/patch)² positions, LayerNorm, biased q/k/v/o, fc1/fc2
  kClip,    // CLIP: a class token, unbiased conv patches, positions + 1, pre-LayerNorm
  kLlama4,  // Llama 4: unbiased linear patches, class token, positions + 1, pre and post LayerNorm
  kPixtral, // Pixtral: unbiased conv patches, 2-D RoPE (no position table), RMSNorm, SwiGLU, no biases
};

enum class VisionProjector {
  kGemma3,    // mm_input_projection_weight [h_v, H] and mm_soft_emb_norm
  kLlava,     // linear_1 [h_v·n_feat → H], linear_2 [H → H] (LLaVA, LLaVA-NeXT: + image_newline)
  kLlama4,    // vision_adapter (pixel-shuffle MLP) and multi_modal_projector.linear_1
  kMistral3,  // RMSNorm, patch_merger (s²·h_v → h_v), linear_1 [h_v → H], linear_2 [H → H]
};

struct VisionSpec {
  std::string model_type;  // vision_config.model_type: "siglip_vision_model", "pixtral", ...
  VisionTower tower = VisionTower::kSiglip;
  VisionProjector projector = VisionProjector::kLlava;
  int64_t hidden = 0;        // h_v
  int64_t intermediate = 0;  // I_v
  int64_t layers = 0;        // layers vLLM builds (up to the deepest vision_feature_layer)
  int64_t patch = 0;
  int64_t image_size = 0;
  int64_t channels = 3;
  bool post_norm = false;       // SigLIP post_layernorm (Gemma 3 yes, LLaVA no)
  int64_t feature_layers = 1;   // LLaVA: len(vision_feature_layer), the projector's input is h_v·this
  bool projector_bias = true;   // multimodal_projector_bias
  bool image_newline = false;   // LLaVA-NeXT
  int64_t spatial_merge = 2;    // Mistral 3
  int64_t adapter_in = 0;       // Llama 4: vision_adapter fc1 input (intermediate_size)
  int64_t adapter_mid = 0;      // Llama 4: projector_input_dim
  int64_t adapter_out = 0;      // Llama 4: projector_output_dim
  int64_t vision_output = 0;    // Llama 4: vision_output_dim (multi_modal_projector input)
  bool takes_quant_config = true;  // Llama 4 builds its tower with quant_config=None (mllama4.py:760-770)

  friend bool operator==(const VisionSpec&, const VisionSpec&) = default;
};

/// Reads a wrapper's vision_config (nullopt without one). `wrapper_type` is the wrapper's
/// model_type ("gemma3", "llava_next", "llama4", "mistral3", "llava"); a tower or wrapper vLLM
/// builds differently from these gives nullopt and a line in `warnings`. Malformed values are Errors.
Expected<std::optional<VisionSpec>> read_vision_config(const nlohmann::json& root, const std::string& wrapper_type,
                                                       const std::string& source, std::vector<std::string>& warnings);

/// The tower's and projector's tensors with vLLM's TP sharding (qkv, fc1/gate_up and the
/// projectors' first linears column-parallel; o, fc2/down and linear_2 row-parallel with their
/// biases whole; norms, patch embedding, position and class embeddings, Gemma 3's projection and
/// Mistral 3's patch merger whole on every rank). `text_hidden` is H.
/// Example: Gemma 3 4B's SigLIP (h 1152, I 4304, 27 layers, 896/14) and projector hold 419,816,304.
std::vector<WeightTensor> vision_weight_tensors(const VisionSpec& vision, int64_t text_hidden);

}  // namespace actmem
