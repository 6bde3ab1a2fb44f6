#include "report/fp8_report.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "tensors/te_rules.h"  // the cache rules

namespace actmem::detail {

Term describe_fp8_param_extras(const MegatronOptions& o, int64_t elements, int64_t layers, int64_t tp,
                               int64_t copies) {
  const bool hopper = o.fp8_gpu == Fp8Gpu::kHopper;
  std::vector<std::vector<Factor>> products;
  if (hopper) products.push_back({{"Ψ_TE linears", elements}});
  products.push_back({{"4", kTeFp8ScaleInvBytes}, {"n_fp8 weights", copies}});
  Term c = sum_term("fp8_weight_cache",
                    hopper ? "TE fp8 weights' columnwise transposes and fp32 scale_inv (the fp8 data is the weight)"
                           : "TE fp8 weights' fp32 scale_inv (the fp8 data is the weight; no transpose on Blackwell)",
                    products);
  c.note = fmt::format(
      "@fp8_param_gather: the {} TE linear weights of the stage's {} layers at tp {} are Float8Tensors, their data "
      "counted in the weights term; {}",
      copies, layers, tp,
      hopper ? "Megatron builds each one's transpose after the parameter all-gather (fp8_utils.py "
               "post_all_gather_processing; TE Float8Tensor _transpose, no non-TN fp8 GEMM on Hopper)"
             : "Blackwell's fp8 GEMM takes the data in either layout (TE csrc/quantizer.cpp, "
               "nvte_is_non_tn_fp8_gemm_supported)");
  return c;
}

Term describe_fp8_weight_cache(const MegatronOptions& o, int64_t bytes, int64_t elements, int64_t layers, int64_t tp,
                               int64_t copies) {
  const bool per_tensor = o.fp8 == Fp8Recipe::kDelayed || o.fp8 == Fp8Recipe::kTensorwise;
  Term c;
  if (per_tensor) {  // Blackwell: one buffer serves rowwise and columnwise usage
    const bool four_per_layer = copies == kTeLinearsPerLayer * layers;
    std::vector<Factor> scale_factors{{"4", kTeFp8ScaleInvBytes}};
    if (four_per_layer) {
      scale_factors.push_back({"4 linears", kTeLinearsPerLayer});
      scale_factors.push_back({"L_stage", layers});
    } else {
      scale_factors.push_back({"n_fp8 weight copies", copies});
    }
    c = sum_term("fp8_weight_cache", "TE fp8 weight copies cached per TE linear (one data buffer, fp32 scale_inv)",
                 {{{"Ψ_TE linears", elements}}, scale_factors});
    c.note = fmt::format(
        "{} of the stage's {} layers at tp {}: on Blackwell a Float8Tensor keeps its data (out, "
        "in) for both usages, no _transpose (TE csrc/quantizer.cpp Float8Quantizer::create_tensor l.361-376, "
        "nvte_is_non_tn_fp8_gemm_supported); kept in _fp8_workspaces across micro-batches (TE linear.py "
        "l.1958-2071)",
        four_per_layer ? std::string("qkv, proj, fc1, fc2")
                       : fmt::format("the {} TE linear weight copies (MLA's projections, one per local routed expert "
                                     "of GroupedLinear fc1 and fc2, the shared experts')",
                                     copies),
        layers, tp);
    return c;
  }
  const bool mx = o.fp8 == Fp8Recipe::kMxfp8;
  const int64_t scales = bytes - 2 * elements;
  c = sum_term("fp8_weight_cache",
               mx ? "TE MXFP8 weight copies cached per TE linear (rowwise + columnwise data, padded e8m0 scales)"
                  : "TE blockwise fp8 weight copies cached per TE linear (data + transposed data, fp32 128x128 "
                    "block scales)",
               {{{"2", 2}, {"Ψ_TE linears", elements}}, {{"scales", scales}}});
  c.note = fmt::format(
      "qkv, proj, fc1, fc2 of the stage's {} layers at tp {}, each weight (out, in): {}; kept in _fp8_workspaces "
      "across micro-batches (TE linear.py l.1958-2071)",
      layers, tp,
      mx ? "rowwise scales pad(out, 128) x pad(in/32, 4) + columnwise pad(out/32, 4) x pad(in, 128), one byte each "
           "(TE csrc/quantizer.cpp MXFP8Quantizer::get_scale_shape l.1852-1881)"
         : "4 bytes x (⌈out/128⌉ x pad(⌈in/128⌉, 4) + ⌈in/128⌉ x pad(⌈out/128⌉, 4)) (TE csrc/quantizer.cpp "
           "Float8BlockQuantizer::get_scale_shape l.1441-1493, block_scaling_dim 2 for weights)");
  return c;
}

}  // namespace actmem::detail
