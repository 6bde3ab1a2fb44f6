#!/usr/bin/python3
"""Hold `actmem estimate --packed-docs N` to the measured activations of packed rows: N documents
of s/N tokens in each row of s tokens, as transformers' padding-free packing feeds them
(DataCollatorWithFlattening: position_ids restarting at 0 per document, no attention_mask).

  /usr/bin/python3 validation/packed_validation.py --actmem build/actmem

The reference is models.py's HF model with RunConfig.packed_docs (validation/notes/packed-sequences.md):
the (b, s) position ids go to every layer and RoPE's cos/sin are computed from them, (b, s, d);
flash_attention_2 runs emulated_ops.VarlenFlashAttentionFn (flash_attn_varlen_func's saves: q, k, v,
out, lse and the per-layer int32 cu_seqlens); sdpa gets the materialized (b, 1, s, s) bool mask, repeats
k and v, and runs emulated_ops.EfficientAttentionBiasFn (torch's memory-efficient kernel saving the
mask converted to a float bias, read from attention.cpp: emulated, not measured on a GPU); eager gets
its usual (b, 1, s, s) additive mask with the documents and-ed in. Measurement: measure.py.

Each case is measured twice, unpacked and packed, and passes when the packed row lies within 1 % per
layer (the middle one) and in total AND the change that packing makes (packed - unpacked, per layer
and in total) is the estimate's change to the byte: the cu_seqlens are a few bytes per layer, far
inside 1 %. Ends with `N passed, M failed`.
"""
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure  # noqa: E402
import models  # noqa: E402
import run_validation  # noqa: E402
import runner  # noqa: E402

MISTRAL = dict(run_validation.LLAMA_GQA, family="mistral", heads=8, kv_heads=2, head_dim=40, ffn=736)


def case(name, shape, attention, recompute, s, b, docs, checkpoint="reentrant", hf_version="4.57"):
    return dict(name=name, model=models.ModelConfig(**shape),
                run=models.RunConfig("hf", attention, recompute, "bf16", seq_len=s, micro_batch=b,
                                     checkpoint=checkpoint, hf_version=hf_version, packed_docs=docs))


CASES = [
    # flash_attention_2: varlen only at batch 1 (actmem refuses b > 1: the documents would attend across)
    case("llama-flash-none-b1", run_validation.LLAMA_GQA, "flash", "none", 64, 1, 4),
    case("llama-flash-full-b1", run_validation.LLAMA_GQA, "flash", "full", 64, 1, 4),
    case("llama-flash-full-b1-hf5", run_validation.LLAMA_GQA, "flash", "full", 64, 1, 3, "nonreentrant", "5"),
    case("qwen2-flash-none-b1", run_validation.QWEN2, "flash", "none", 96, 1, 3),
    case("mistral-flash-full-b1", MISTRAL, "flash", "full", 64, 1, 2),
    # eager: the mask keeps its shape; position ids and cos/sin change
    case("llama-eager-none-b2", run_validation.LLAMA_GQA, "eager", "none", 64, 2, 4),
    case("llama-eager-full-b2", run_validation.LLAMA_GQA, "eager", "full", 64, 2, 4),
    case("qwen2-eager-full-b1", run_validation.QWEN2, "eager", "full", 96, 1, 3),
    case("mistral-eager-none-b2", MISTRAL, "eager", "none", 64, 2, 2),
    # sdpa: the bool mask (shared), the per-layer float bias, k and v repeated under GQA
    case("llama-sdpa-none-b1", run_validation.LLAMA_GQA, "sdpa", "none", 64, 1, 4),
    case("llama-sdpa-none-b2", run_validation.LLAMA_GQA, "sdpa", "none", 64, 2, 4),
    case("llama-sdpa-full-b2", run_validation.LLAMA_GQA, "sdpa", "full", 64, 2, 4),
    case("llama-mha-sdpa-none-b2", run_validation.LLAMA_MHA, "sdpa", "none", 64, 2, 2),
    case("qwen2-sdpa-full-b2", run_validation.QWEN2, "sdpa", "full", 96, 2, 3, "nonreentrant", "5"),
    case("mistral-sdpa-none-b2", MISTRAL, "sdpa", "none", 64, 2, 2),
]


def measure_case(c):
    """(unpacked, packed) measurements."""
    flat = dataclasses.replace(c["run"], packed_docs=0)
    return measure.measure(c["model"], flat, backward=True), measure.measure(c["model"], c["run"], backward=True)


def estimate(c, actmem, workdir):
    """(unpacked, packed) estimates."""
    flat = dataclasses.replace(c["run"], packed_docs=0)
    a_flat, error = run_validation.call_actmem(actmem, c["name"] + "-unpacked", c["model"], flat, workdir)
    if not error:
        a, error = run_validation.call_actmem(actmem, c["name"], c["model"], c["run"], workdir)
    return (None, error) if error else ((a_flat, a), None)


def row(c, measured, estimated):
    (m_flat, m), (a_flat, a) = measured, estimated
    ok = run_validation.layer_and_total_row(c["name"], 26, m, a)
    d_meas = (m.per_layer_bytes - m_flat.per_layer_bytes, m.total_bytes - m_flat.total_bytes)
    d_est = (a["per_layer_bytes"] - a_flat["per_layer_bytes"], a["total_bytes"] - a_flat["total_bytes"])
    same = d_meas == d_est
    print(f"{'':<26}packing adds: layer {d_meas[0]:+d} measured, {d_est[0]:+d} estimated; "
          f"total {d_meas[1]:+d} measured, {d_est[1]:+d} estimated  {'ok' if same else 'FAIL'}")
    if not same:
        print(measure.format_storages(m))
    return ok and same


def main():
    return runner.run_cases(CASES, measure_case, estimate, row,
                            runner.layer_total_header(26) + f"  {'packing adds (measured = estimated): layer, total':s}",
                            actmem_required=True)


if __name__ == "__main__":
    sys.exit(main())
