#!/usr/bin/python3
"""Hold `actmem estimate --lora-rank ...` to the measured activation memory of a LoRA fine-tune.

  /usr/bin/python3 validation/lora_validation.py --actmem build/actmem
  /usr/bin/python3 validation/lora_validation.py --probe      # what torch 1.13 saves, op by op

The reference is models.py's HF Llama-like model with PEFT's LoRA applied as PEFT does it: every
base parameter frozen, each targeted nn.Linear wrapped by LoraLinear (PEFT tuners/lora/layer.py,
Linear.forward: result = base_layer(x) + lora_B(lora_A(dropout(x))) * scaling, with dropout an
nn.Identity when lora_dropout == 0), and the embedding output made to require grad as transformers'
enable_input_require_grads() does (PEFT's prepare_model_for_kbit_training and gradient
checkpointing call it). The adapters compute in the activation dtype (torchtune's bf16 adapters;
PEFT's fp32 adapters run under autocast). Measurement: measure.py (saved-tensor hooks, each
storage once, parameters excluded). Tolerance as run_validation.py: 1 % per layer and in total.

Per layer the estimate is exact; the total is 8·s·b bytes high: actmem's embedding region still
keeps input_ids, which a frozen embedding (no grad_fn) does not save.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch import nn  # noqa: E402

import emulated_ops as ops  # noqa: E402
import measure  # noqa: E402
import models  # noqa: E402
import run_validation  # noqa: E402  (config.json writer, shapes)

TOLERANCE = 0.01

TARGETS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
           "down": "down_proj"}


class LoraLinear(nn.Module):
    """PEFT lora.Linear's forward, for one adapter."""

    def __init__(self, base: nn.Linear, rank: int, dropout: float, alpha: float = 16.0):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False).to(base.weight.dtype)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False).to(base.weight.dtype)
        nn.init.normal_(self.lora_B.weight, std=0.02)  # PEFT zero-inits B; nonzero keeps the graph honest
        self.p = dropout
        self.scaling = alpha / rank

    def forward(self, x):
        result = self.base_layer(x)
        # nn.Dropout on CUDA keeps a bool mask (emulated: ops.dropout); nn.Identity at p == 0
        return result + self.lora_B(self.lora_A(ops.dropout(x, self.p))) * self.scaling


def apply_lora(model, rank, targets, dropout):
    """PEFT's target_modules matching: every nn.Linear whose name is one of the targets' module
    names, wherever it sits (attention, dense MLP, shared experts), except routed experts, which
    actmem does not target (finetune.h, lora_targets())."""
    for p in model.parameters():
        p.requires_grad_(False)
    names = {TARGETS[t] for t in targets}
    for path, module in list(model.named_modules()):
        if "experts." in path + "." and "shared" not in path:
            continue
        for name in names:
            child = getattr(module, name, None)
            if isinstance(child, nn.Linear):
                setattr(module, name, LoraLinear(child, rank, dropout))
    # transformers PreTrainedModel.enable_input_require_grads()
    model.embed.register_forward_hook(lambda module, inputs, output: output.requires_grad_(True))
    return model


def lora_case(name, shape, attn, recompute, dtype, s, b, rank, targets, dropout):
    return dict(name=name, model=models.ModelConfig(**shape),
                run=models.RunConfig("hf", attn, recompute, dtype, seq_len=s, micro_batch=b),
                rank=rank, targets=targets, dropout=dropout)


CASES = [
    lora_case("llama-lora-qv-flash-bf16", run_validation.LLAMA_GQA, "flash", "none", "bf16", 37, 3, 8, "q,v", 0.0),
    lora_case("llama-lora-all-flash-bf16", run_validation.LLAMA_GQA, "flash", "none", "bf16", 48, 2, 8,
              "q,k,v,o,gate,up,down", 0.0),
    lora_case("llama-lora-all-drop-flash-bf16", run_validation.LLAMA_MHA, "flash", "none", "bf16", 45, 3, 16,
              "q,k,v,o,gate,up,down", 0.1),
    lora_case("llama-lora-qkvo-drop-eager-fp32", run_validation.LLAMA_HD, "eager", "none", "fp32", 29, 2, 4,
              "q,k,v,o", 0.05),
    lora_case("llama-lora-all-full-bf16", run_validation.LLAMA_GQA, "flash", "full", "bf16", 48, 3, 8,
              "q,k,v,o,gate,up,down", 0.1),
    # Qwen2 (q/k/v biases), Gemma ((1 + w) RMSNorm in fp32, tied head), Mixtral (routed experts
    # not targeted; the frozen router keeps no input)
    lora_case("qwen2-lora-qkv-drop-flash-bf16", run_validation.QWEN2, "flash", "none", "bf16", 40, 2, 8, "q,k,v", 0.1),
    lora_case("gemma-lora-all-eager-bf16", run_validation.GEMMA, "eager", "none", "bf16", 33, 2, 8,
              "q,k,v,o,gate,up,down", 0.0),
    lora_case("mixtral-lora-qvo-flash-bf16", run_validation.MIXTRAL, "flash", "none", "bf16", 40, 2, 8, "q,v,o", 0.1),
    # Qwen2-MoE's and DeepSeek-V3's shared experts carry adapters (gate/up/down_proj); DeepSeek's
    # fp32 router, frozen, keeps only its weight's fp32 copy; MLA: q_proj (q_lora_rank 0) and o_proj
    lora_case("qwen3moe-lora-qkvo-drop-flash-bf16", run_validation.QWEN3_MOE, "flash", "none", "bf16", 24, 2, 8,
              "q,k,v,o", 0.1),
    lora_case("qwen2moe-lora-qv-mlp-drop-flash-bf16", run_validation.QWEN2_MOE, "flash", "none", "bf16", 24, 2, 8,
              "q,v,gate,up,down", 0.1),
    lora_case("dsv3-lora-qo-flash-bf16", run_validation.DSV3_NOLORA, "flash", "none", "bf16", 24, 2, 8, "q,o", 0.0),
    lora_case("dsv3-lora-o-mlp-drop-flash-bf16", run_validation.DSV3, "flash", "none", "bf16", 24, 2, 8,
              "q,o,gate,up,down", 0.1),
]


def measure_case(c):
    build = models.build

    def build_with_lora(cfg, run, seed=0):
        return apply_lora(build(cfg, run, seed), c["rank"], c["targets"].split(","), c["dropout"])

    models.build = build_with_lora
    try:
        return measure.measure(c["model"], c["run"], backward=True)
    finally:
        models.build = build


def estimate(actmem, c, config_path):
    run = c["run"]
    args = [actmem, "estimate", "--model", config_path, "--seq-len", str(run.seq_len), "--micro-batch",
            str(run.micro_batch), "--dtype", run.dtype, "--weight-dtype", run.dtype, "--framework", "hf",
            "--attention", run.attention, "--recompute", run.recompute, "--lora-rank", str(c["rank"]),
            "--lora-targets", c["targets"], "--lora-dropout", str(c["dropout"]), "--adapter-dtype", run.dtype,
            "--hf-version", run.hf_version, "--json"]  # the reference models' layout (4.57's expert loop)
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}\n{out.stderr}")
    return json.loads(out.stdout)


def probe():
    """torch 1.13: what a frozen linear and PEFT's LoRA branch save (shape, dtype, bytes)."""
    x = torch.randn(3, 7, 32, dtype=torch.bfloat16, requires_grad=True)
    base = nn.Linear(32, 48, bias=False).to(torch.bfloat16).requires_grad_(False)
    for label, fn in [("frozen linear", base),
                      ("LoRA p=0", LoraLinear(base, 4, 0.0)),
                      ("LoRA p=0.1", LoraLinear(base, 4, 0.1))]:
        params = {p.storage().data_ptr() for p in fn.parameters()}
        saved = []

        def pack(t):
            if t.dim() and t.storage().data_ptr() not in params:
                saved.append((tuple(t.shape), str(t.dtype), t.storage().nbytes(),
                              "x" if t.storage().data_ptr() == x.storage().data_ptr() else ""))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(x)
        print(f"{label:14s} {saved}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actmem", default="build/actmem")
    ap.add_argument("--probe", action="store_true")
    args = ap.parse_args()
    if args.probe:
        probe()
        return 0
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for c in CASES:
            config = os.path.join(tmp, c["name"] + ".json")
            with open(config, "w") as f:
                json.dump(run_validation.hf_config(c["model"], c["run"]), f)
            m = measure_case(c)
            est = estimate(args.actmem, c, config)["activations"]
            rows = [("per layer", m.per_layer_bytes, est["per_layer_bytes"]),
                    ("total", m.total_bytes, est["total_bytes"])]
            ok = all(abs(e - meas) <= TOLERANCE * meas for _, meas, e in rows)
            failed += not ok
            detail = "  ".join(f"{k} {meas} / {e} ({(e - meas) / meas:+.2%})" for k, meas, e in rows)
            print(f"{'ok  ' if ok else 'FAIL'} {c['name']:34s} measured / actmem: {detail}")
            if not ok:
                print(measure.format_storages(m, f"layer {m.middle_layer}"))
    print(f"{len(CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
