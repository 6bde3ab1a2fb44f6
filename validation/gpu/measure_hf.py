#!/usr/bin/env python3
"""Measure real HF transformers models on a CUDA GPU (torch 2.x + transformers installed).

  python3 validation/gpu/measure_hf.py [--actmem build/actmem] [--filter SUBSTR]

For each case: build the model from a config (random init, nothing downloaded), run one
forward + backward training step in bf16, and record
  * saved-tensor-hook bytes (distinct storages, params/buffers/0-dim excluded) per region
    (embedding / layer i / shared / head), as validation/measure.py does on CPU;
  * torch.cuda memory: allocated after forward minus before, and the step's max_memory_allocated;
  * EXPECTED.md's formulas (validation/expected.py) for the same case, and `actmem estimate --json`
    when --actmem is given.
Writes validation/gpu/results/<timestamp>.json. Runs in well under 5 minutes on one GPU.
Not runnable on the CPU-only development machine (needs CUDA and transformers).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import expected  # noqa: E402
import models  # noqa: E402

SEQ, BATCH = 1024, 2
LLAMA = dict(model_type="llama", hidden_size=1024, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=4, head_dim=64, intermediate_size=2816, vocab_size=32003,
             rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0)  # fmt: skip
QWEN2 = dict(LLAMA, model_type="qwen2", num_attention_heads=14, num_key_value_heads=2, head_dim=80, attention_bias=True)
MIXTRAL = dict(LLAMA, model_type="mixtral", intermediate_size=704, num_local_experts=8, num_experts_per_tok=2)
GPT2 = dict(model_type="gpt2", n_embd=768, n_layer=4, n_head=12, n_inner=3072, n_positions=2048, vocab_size=50257,
            resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, activation_function="gelu_new")  # fmt: skip

CASES = [  # (name, config, attn_implementation, gradient checkpointing)
    ("llama-eager", LLAMA, "eager", False),
    ("llama-sdpa", LLAMA, "sdpa", False),
    ("llama-flash", LLAMA, "flash_attention_2", False),
    ("llama-sdpa-full", LLAMA, "sdpa", True),
    ("qwen2-sdpa", QWEN2, "sdpa", False),
    ("mixtral-sdpa", MIXTRAL, "sdpa", False),
    ("gpt2-eager", GPT2, "eager", False),
    ("gpt2-sdpa", GPT2, "sdpa", False),
]


def reference_configs(cfg, attn, full):
    """The same case as validation/models.py's ModelConfig + RunConfig."""
    gpt = cfg["model_type"] == "gpt2"
    model = models.ModelConfig(
        family=cfg["model_type"],
        hidden=cfg["n_embd"] if gpt else cfg["hidden_size"],
        layers=cfg["n_layer"] if gpt else cfg["num_hidden_layers"],
        heads=cfg["n_head"] if gpt else cfg["num_attention_heads"],
        kv_heads=cfg["n_head"] if gpt else cfg["num_key_value_heads"],
        head_dim=cfg["n_embd"] // cfg["n_head"] if gpt else cfg["head_dim"],
        ffn=cfg["n_inner"] if gpt else cfg["intermediate_size"],
        vocab=cfg["vocab_size"],
        experts=cfg.get("num_local_experts", 0),
        top_k=cfg.get("num_experts_per_tok", 0),
    )
    run = models.RunConfig(
        "hf", {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash"}[attn], "full" if full else "none",
        "bf16", SEQ, BATCH,
        hidden_dropout=cfg.get("resid_pdrop", 0.0) if gpt else 0.0,
        attention_dropout=cfg.get("attn_pdrop", 0.0) if gpt else cfg.get("attention_dropout", 0.0),
    )  # fmt: skip
    return model, run


def measure_case(name, cfg, attn, full):
    config = transformers.AutoConfig.for_model(**cfg)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn, torch_dtype=torch.bfloat16)
    model = model.cuda().train()
    if full:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    region = ["embedding"]
    base = model.transformer if cfg["model_type"] == "gpt2" else model.model
    layers = base.h if cfg["model_type"] == "gpt2" else base.layers
    final_norm = base.ln_f if cfg["model_type"] == "gpt2" else base.norm
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda *_, i=i: region.__setitem__(0, f"layer {i}"))
    final_norm.register_forward_pre_hook(lambda *_: region.__setitem__(0, "head"))

    excluded = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    storages = {}  # data_ptr -> [bytes, first region, set of regions]

    def pack(t):
        if t.dim() > 0 and t.numel() > 0 and t.untyped_storage().data_ptr() not in excluded:
            rec = storages.setdefault(t.untyped_storage().data_ptr(), [t.untyped_storage().nbytes(), region[0], set()])
            rec[2].add(region[0])
        return t

    ids = torch.randint(0, cfg["vocab_size"], (BATCH, SEQ), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids).loss
    after_forward = torch.cuda.memory_allocated()
    loss.backward()
    torch.cuda.synchronize()

    regions = {}
    for nbytes, first, seen in storages.values():
        key = "shared" if len({r for r in seen if r.startswith("layer ")}) > 1 else first
        regions[key] = regions.get(key, 0) + nbytes
    n_layers = len(layers)
    ref_model, ref_run = reference_configs(cfg, attn, full)
    exp_layer, exp_total, _, _ = expected.expected(ref_model, ref_run)
    result = {
        "case": name, "attn_implementation": attn, "gradient_checkpointing": full, "seq_len": SEQ, "micro_batch": BATCH,
        "config": cfg, "torch": torch.__version__, "transformers": transformers.__version__,
        "hooks": {"per_layer_bytes": regions.get(f"layer {n_layers // 2}", 0),
                  "total_bytes": sum(v[0] for v in storages.values()), "regions": regions},
        "cuda": {"forward_allocated_delta_bytes": after_forward - before,
                 "max_memory_allocated_bytes": torch.cuda.max_memory_allocated(), "before_bytes": before},
        "expected_md": {"per_layer_bytes": exp_layer, "total_bytes": exp_total},
    }  # fmt: skip
    del model, loss
    torch.cuda.empty_cache()
    return result, ref_run


def call_actmem(actmem, cfg, run):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(dict(cfg, torch_dtype="bfloat16"), f)
        args = [actmem, "estimate", "--model", path, "--seq-len", str(run.seq_len), "--micro-batch", str(run.micro_batch),
                "--dtype", "bf16", "--framework", "hf", "--attention", run.attention, "--recompute", run.recompute,
                "--hidden-dropout", str(run.hidden_dropout), "--attention-dropout", str(run.attention_dropout), "--json"]  # fmt: skip
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            return {"error": proc.stderr.strip()}
        act = json.loads(proc.stdout)["activations"]
        return {"per_layer_bytes": act["per_layer_bytes"], "total_bytes": act["total_bytes"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--actmem", help="path to the actmem binary (optional)")
    parser.add_argument("--filter", default="")
    args = parser.parse_args()
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    results = []
    for name, cfg, attn, full in CASES:
        if args.filter not in name:
            continue
        started = time.time()
        try:
            result, run = measure_case(name, cfg, attn, full)
        except Exception as e:  # e.g. flash_attn not installed: record and go on
            results.append({"case": name, "error": repr(e)})
            print(f"{name:18s} error: {e!r}")
            continue
        if args.actmem and os.path.exists(args.actmem):
            result["actmem"] = call_actmem(args.actmem, cfg, run)
        results.append(result)
        hooks, exp = result["hooks"], result["expected_md"]
        print(f"{name:18s} hooks/layer {hooks['per_layer_bytes']:>12d} expected {exp['per_layer_bytes']:>12d}  "
              f"hooks total {hooks['total_bytes']:>12d} expected {exp['total_bytes']:>12d}  "
              f"cuda fwd delta {result['cuda']['forward_allocated_delta_bytes']:>12d}  "
              f"actmem {result.get('actmem', '-')}  ({time.time() - started:.1f} s)")  # fmt: skip
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", time.strftime("%Y%m%d-%H%M%S") + ".json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1, default=str)
    print("wrote", out)


if __name__ == "__main__":
    main()
