// The op-graph builder shared by the files that build layers (op_graph.cc, mcore_moe_graph.cc): the
// graph under construction, what every builder reads, and the op builders more than one file calls.
// Internal to tensors/ (op_graph.h is the module's interface).
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "model/arch.h"               // HfQuirks
#include "tensors/framework_rules.h"  // FrameworkRules (and op_graph.h)

namespace actmem::detail::graph {

// ---------------------------------------------------------------------------------------------
// The graph under construction.

using Shape = std::vector<Dim>;

inline Shape cat(Shape a, std::initializer_list<Dim> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Builder {
  Graph g;
  // torchtitan op-level SAC (activation_checkpoint.py, _apply_op_sac._custom_policy): every
  // storage follows the per-op rule; the block's aten.mm calls are counted in forward order and
  // odd counts (the 1st, 3rd, ...) are MUST_SAVE, even ones PREFER_RECOMPUTE.
  bool op_sac = false;
  int mm_count = 0;
  uint16_t mcore_tag = 0;  // framework megatron: the module being built (te_rules.h McoreTag)

  int add(std::string name, Group group, const char* op, Shape shape, DType dtype, std::string note = {}) {
    Storage st;
    st.name = std::move(name);
    st.group = group;
    st.op = op;
    st.shape = std::move(shape);
    st.dtype = dtype;
    st.note = std::move(note);
    st.op_sac_rule = op_sac;
    st.mcore_tag = mcore_tag;
    g.storages.push_back(std::move(st));
    return static_cast<int>(g.storages.size()) - 1;
  }
  void save(int id) { at(id).saved_outside_core = true; }
  void op_sac_keep(int id) { at(id).op_sac_kept = true; }
  /// One aten.mm ran producing `out`: under the per-op policy an odd count keeps its output.
  void mm(int out) {
    if (op_sac && ++mm_count % 2 == 1) op_sac_keep(out);
  }
  void save_core(int id) { at(id).saved_by_core = true; }
  Storage& at(int id) { return g.storages[static_cast<std::size_t>(id)]; }
};

/// What every builder reads: the model, the rules, the workload's choices, the variant.
struct Context {
  const ModelSpec& model;
  const Workload& workload;
  const FrameworkRules& rules;
  Variant variant;
  DType e;  // activation dtype
  double hidden_p;
  double attention_p;
  bool flash;
  bool softmax_fp32;
  bool norm_scale_fp32;  // HF Gemma RMSNorm (HfQuirks::rms_norm_scale_fp32)
  HfQuirks hf;           // the model's HF quirks; the defaults (none) under other frameworks
  bool input_no_grad = false;  // the norm's input needs no gradient (layer 0 after a frozen embedding)
  // Megatron-core TE spec (megatron_options.h): FusedAttention's saves; fp8 (set inside layers
  // only: the output layer is Megatron's own ColumnParallelLinear, not a TE module).
  bool te = false;
  bool fp8 = false;
  bool weights_frozen = false;  // a frozen layer (--frozen-layers) whose input needs a gradient (LayerGrad::kFrozen)
  bool packed = false;  // --packed-docs under the hf rules (policies/packed_docs.h)
  bool hf5 = false;     // transformers 5's modeling code (fused experts, the experts kernels)
  bool no_rope = false;         // the layer being built is a NoPE layer (Llama 4)
  /// The layer's weights take no gradient: every base weight under LoRA, or a frozen layer's.
  bool frozen() const { return workload.lora.enabled() || weights_frozen; }

  // The symbols every builder uses.
  Dim s_rep = Dim::of(Sym::kSeqRep);
  Dim s_tp = Dim::of(Sym::kSeqTp);
  Dim s_key = Dim::of(Sym::kSeqKey);
  Dim b = Dim::of(Sym::kBatch);
  Dim h = Dim::of(Sym::kHidden);
  Dim q_heads = Dim::of(Sym::kQHeads);
  Dim kv_heads = Dim::of(Sym::kKvHeads);
  Dim d = Dim::of(Sym::kHeadDim);
  Dim vocab = Dim::of(Sym::kVocab);
};

/// nn.Linear / a Megatron parallel linear (op_graph.cc): keeps its input for its weight's gradient.
int linear(Builder& g, const Context& c, int input, Shape out_shape, std::string name, Group group);
/// The MLP activation on `input` of `shape` (op_graph.cc); returns its output.
int activation(Builder& g, const Context& c, int input, const Shape& shape, const std::string& prefix, Group group);
/// Dense MLP (or one expert bank) on `rows` tokens with intermediate `ffn` (op_graph.cc); returns down's output.
int mlp(Builder& g, const Context& c, int input, const Shape& rows, Sym ffn, const std::string& prefix, Group group,
        bool fused_gate_up = false);

/// Megatron-core's MoELayer (mcore_moe_graph.cc); returns the layer's output.
int mcore_moe(Builder& g, const Context& c, int x);
/// The shared experts beside the routed ones (mcore_moe_graph.cc); returns `out`.
int moe_shared(Builder& g, const Context& c, int x, const Shape& tokens, int out);

}  // namespace actmem::detail::graph
