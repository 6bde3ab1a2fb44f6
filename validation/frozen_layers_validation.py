#!/usr/bin/python3
"""Hold `actmem estimate --frozen-layers N` (with and without --freeze-embeddings) to the measured
activations of a model whose first N decoder layers are frozen.

  /usr/bin/python3 validation/frozen_layers_validation.py --actmem build/actmem

The reference is models.py's HF model with `p.requires_grad_(False)` for every parameter of
`model.layers[i]`, i < N (as a partial fine-tune freezes `model.model.layers[i]` in transformers),
and optionally the token embedding too. Measurement: measure.py (saved-tensor hooks, each storage
once, parameters excluded). The rules (validation/notes/frozen-layers.md): with a trained embedding a
frozen layer keeps only what its input's gradient needs (LoRA's frozen-weight rule: no linear
input, no normalized x for a norm weight); with a frozen embedding the frozen layers record nothing,
the first trained layer's input norm keeps no fp32 x and no rstd, and when every layer is frozen the
final norm does the same and no layer saves RoPE's cos/sin. Full recomputation is the non-reentrant
checkpoint (the reentrant one gives the first trained layer's weights no gradient when its input
needs none). Tolerance 1 % per layer (the middle one) and in total. Ends with `N passed, M failed`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure  # noqa: E402
import models  # noqa: E402
import run_validation  # noqa: E402
import runner  # noqa: E402


def measure_frozen(cfg, run, frozen_layers, freeze_embeddings):
    build = models.build

    def frozen(c, r, seed=0):
        m = build(c, r, seed)
        if freeze_embeddings:
            m.embed.weight.requires_grad_(False)
        for i in range(frozen_layers):
            for p in m.layers[i].parameters():
                p.requires_grad_(False)
        return m

    models.build = frozen
    try:
        return measure.measure(cfg, run, backward=True)
    finally:
        models.build = build


def case(name, shape, attention, recompute, dtype, s, b, frozen, embed, checkpoint="reentrant", hidden_dropout=0.0):
    return dict(name=name, model=models.ModelConfig(**shape), frozen=frozen, embed=embed,
                run=models.RunConfig("hf", attention, recompute, dtype, seq_len=s, micro_batch=b,
                                     hidden_dropout=hidden_dropout, checkpoint=checkpoint))


LLAMA4 = dict(run_validation.LLAMA_GQA, layers=4)
CASES = [
    # validation/notes/frozen-layers.md's rows, as measured there (s 64, b 2, flash, bf16)
    case("llama4-flash-2", LLAMA4, "flash", "none", "bf16", 64, 2, 2, False),
    case("llama4-flash-2-embed", LLAMA4, "flash", "none", "bf16", 64, 2, 2, True),
    case("llama4-flash-4-embed", LLAMA4, "flash", "none", "bf16", 64, 2, 4, True),
    case("llama4-flash-4", LLAMA4, "flash", "none", "bf16", 64, 2, 4, False),
    case("llama4-eager-1-fp32", LLAMA4, "eager", "none", "fp32", 33, 2, 1, False),
    case("llama4-eager-3-embed", LLAMA4, "eager", "none", "bf16", 37, 2, 3, True),
    case("llama4-sdpa-2-embed", LLAMA4, "sdpa", "none", "bf16", 40, 3, 2, True),
    case("llama4-full-2-embed", LLAMA4, "flash", "full", "bf16", 40, 3, 2, True, "nonreentrant"),
    case("llama4-full-2", LLAMA4, "flash", "full", "bf16", 40, 3, 2, False, "nonreentrant"),
    case("gemma-eager-1-embed", run_validation.GEMMA, "eager", "none", "bf16", 37, 2, 1, True),
    case("mixtral-flash-2", run_validation.MIXTRAL, "flash", "none", "bf16", 40, 2, 2, False),
    case("mixtral-flash-1-embed", run_validation.MIXTRAL, "flash", "none", "bf16", 40, 2, 1, True),
    # GPT-2: the trained wpe keeps the embedding output in need of a gradient even with wte frozen
    case("gpt2-eager-drop-2-embed", dict(run_validation.GPT2, tie_embeddings=True), "eager", "none", "bf16", 40, 2,
         2, True, hidden_dropout=0.1),
]


def estimate(c, actmem, workdir):
    extra = ["--frozen-layers", str(c["frozen"])] + (["--freeze-embeddings"] if c["embed"] else [])
    return run_validation.call_actmem(actmem, c["name"], c["model"], c["run"], workdir, extra=extra)


def main():
    return runner.run_cases(CASES, lambda c: measure_frozen(c["model"], c["run"], c["frozen"], c["embed"]), estimate,
                            lambda c, m, a: run_validation.layer_and_total_row(c["name"], 26, m, a),
                            runner.layer_total_header(26), actmem_required=True)


if __name__ == "__main__":
    sys.exit(main())
