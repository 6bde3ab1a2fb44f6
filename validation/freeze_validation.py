#!/usr/bin/python3
"""Hold `actmem estimate --freeze-embeddings` to the measured activations of a model whose input
embedding is frozen.

  /usr/bin/python3 validation/freeze_validation.py --actmem build/actmem

The reference is models.py's HF model with `model.embed.weight.requires_grad_(False)`, as
`model.get_input_embeddings().requires_grad_(False)` does in transformers (a tied LM head is the
same parameter, so it is frozen too). Measurement: measure.py (saved-tensor hooks, each storage
once, parameters excluded). What changes (validation/notes/frozen-layers.md): the embedding saves
nothing (no input_ids, no dropout mask: its output needs no gradient); layer 0's input RMSNorm keeps
only the normalized x for its weight's gradient (no fp32 copy of x, no rstd); a frozen tied head
keeps no input. Full recomputation uses the non-reentrant checkpoint: the reentrant one gives no
gradient to layer 0's weights when its input needs none (transformers warns; with
enable_input_require_grads() the embedding output requires grad and nothing here changes).
Tolerance 1 % per layer (the middle one) and in total. Ends with `N passed, M failed`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure  # noqa: E402
import models  # noqa: E402
import run_validation  # noqa: E402
import runner  # noqa: E402


def measure_frozen(cfg, run):
    build = models.build

    def frozen(c, r, seed=0):
        m = build(c, r, seed)
        m.embed.weight.requires_grad_(False)  # not m.pos_embed: get_input_embeddings() is wte
        return m

    models.build = frozen
    try:
        return measure.measure(cfg, run, backward=True)
    finally:
        models.build = build


def case(name, shape, attention, recompute, dtype, s, b, checkpoint="reentrant", hidden_dropout=0.0):
    return dict(name=name, model=models.ModelConfig(**shape),
                run=models.RunConfig("hf", attention, recompute, dtype, seq_len=s, micro_batch=b,
                                     hidden_dropout=hidden_dropout, checkpoint=checkpoint))


CASES = [
    case("llama-gqa-flash-bf16", run_validation.LLAMA_GQA, "flash", "none", "bf16", 40, 3),
    case("llama-gqa-eager-fp32", run_validation.LLAMA_GQA, "eager", "none", "fp32", 33, 2),
    case("llama-tied-flash-bf16", run_validation.LLAMA_TIED, "flash", "none", "bf16", 48, 2),
    case("gemma-eager-bf16", run_validation.GEMMA, "eager", "none", "bf16", 37, 2),
    case("llama-gqa-flash-full-bf16", run_validation.LLAMA_GQA, "flash", "full", "bf16", 40, 3, "nonreentrant"),
    case("mixtral-flash-bf16", run_validation.MIXTRAL, "flash", "none", "bf16", 40, 2),
    # GPT-2: get_input_embeddings() is wte only; the trained wpe keeps the sum in need of a gradient
    # (dropout mask, layer 0 as usual); the tied head is wte, frozen: it keeps no input.
    case("gpt2-eager-drop-bf16", dict(run_validation.GPT2, tie_embeddings=True), "eager", "none", "bf16", 40, 2,
         hidden_dropout=0.1),
]


def estimate(c, actmem, workdir):
    return run_validation.call_actmem(actmem, c["name"], c["model"], c["run"], workdir, extra=["--freeze-embeddings"])


def main():
    return runner.run_cases(CASES, lambda c: measure_frozen(c["model"], c["run"]), estimate,
                            lambda c, m, a: run_validation.layer_and_total_row(c["name"], 28, m, a),
                            runner.layer_total_header(28), actmem_required=True)


if __name__ == "__main__":
    sys.exit(main())
