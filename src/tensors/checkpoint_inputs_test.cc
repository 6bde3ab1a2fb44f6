// What full recomputation keeps of the model-level tensors passed into every checkpointed layer
// (op_graph.cc build_shared, validation/EXPECTED.md "Checkpoint inputs"): GPT-2's eager causal mask.
//
// issue 20 said the mask GPT-2 keeps under transformers 4.5x is one (1, 1, s, s+1) storage expanded
// over the batch (2·s·(s+1) bytes in bf16). That is the mask of the older GPT2Model._update_causal_mask /
// _prepare_4d_causal_attention_mask_with_cache_position (a copy of LlamaModel's: target_length =
// past_seen_tokens + s + 1 without an attention_mask, `causal_mask[None, None, :, :].expand(b, 1, -1, -1)`).
// The 4.57 code that --hf-version 4.57 follows builds it otherwise, read for this test:
//  - modeling_gpt2.py GPT2Model.forward, 4.57.3 (feisenyu/transformers_4573 @ 9c66b2210393d4bb7421896e6456d58fc369dfbf,
//    a copy of the 4.57.3 tree): `causal_mask = create_causal_mask(config=..., input_embeds=inputs_embeds,
//    attention_mask=..., cache_position=..., past_key_values=..., position_ids=...)`, then
//    `block(hidden_states, None, cache_position, causal_mask, ...)` (positional: kept by the checkpoint);
//  - masking_utils.py (huggingface/transformers @ 2ccc6cae21faaf11631efa5fb9054687ae5dc931, 4.5x): eager_mask =
//    `torch.where(sdpa_mask(..., allow_is_causal_skip=False), torch.tensor(0.0, dtype=dtype), min_dtype)`,
//    where sdpa_mask is the (b, 1, s, kv) bool pattern (vmapped over the batch, or (1, 1, s, kv) expanded):
//    `where` writes a new (b, 1, s, s) tensor in the activation dtype, e·b·s² bytes. 5.x masking_utils
//    (@ 00c4411cbe15d4c56d54d3b56d4d171e9c289dac) does the same (`attention_mask.expand(batch_size, ...)`, then
//    the same `torch.where`). validation/models.py builds it so (HFModel.forward, eager) and measure.py
//    holds it to the byte (cases gpt2-hf-eager-full-*).
#include <gtest/gtest.h>

#include "api/library.h"

namespace actmem {
namespace {

int64_t shared_bytes(const Report& r, const std::string& name) {
  for (const auto& t : r.estimate.activations->tensors)
    if (t.name == name) return t.bytes.count();
  return -1;
}

Report gpt2_full(AttentionImpl attention, HfVersion version, int64_t s, int64_t b) {
  Workload w;
  w.attention = attention;
  w.hf_version = version;
  auto p = prepare(load_model("gpt2").value(), w).value();
  return explain(p, {.seq_len = s, .micro_batch = b, .recompute = Recompute::kFull}).value();
}

TEST(CheckpointInputs, Gpt2EagerMaskIsMaterializedOverTheBatch) {
  for (HfVersion v : {HfVersion::k4_57, HfVersion::k5}) {
    // bf16 (the default activation dtype), s 1024, b 4: 2·4·1024·1024, not 2·1024·1025.
    EXPECT_EQ(shared_bytes(gpt2_full(AttentionImpl::kEager, v, 1024, 4), "checkpoint.causal_mask"), 8'388'608);
    EXPECT_EQ(shared_bytes(gpt2_full(AttentionImpl::kEager, v, 1024, 1), "checkpoint.causal_mask"), 2'097'152);
    // sdpa: sdpa_mask returns None (_ignore_causal_mask_sdpa: no padding, q = kv length): nothing kept.
    EXPECT_EQ(shared_bytes(gpt2_full(AttentionImpl::kSdpa, v, 1024, 4), "checkpoint.causal_mask"), -1);
  }
}

}  // namespace
}  // namespace actmem
