#!/usr/bin/env python3
"""Golden outputs of the actmem CLI: every preset (and the test configs) over a seeded grid of
layouts and options, for `estimate --json`, `serve --json`, and some tables and `explain` texts.

  golden.py record --actmem build/actmem   writes tests/golden/outputs.jsonl.xz
  golden.py check  --actmem build/actmem   runs the same commands and compares (exit 1 on a diff)

Recorded before the engine redesign (issue: engine) so that the redesign is held to the same
bytes. Numbers compare exactly; a float may differ in its last bits only (relative 1e-12), since
summing FLOPs in another order is not a change of behaviour."""
import argparse
import json
import lzma
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.path.join(HERE, "outputs.jsonl.xz")

PRESETS = ["gpt2", "gpt3-175b", "gpt-22b", "gpt-175b", "gpt-530b", "gpt-1t", "llama-2-7b", "llama-2-13b",
           "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
           "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-30b-a3b", "gemma-2-9b",
           "deepseek-v3"]
# The configs recorded first keep their place in the one seeded command stream; configs added later
# come after them (sorted), so adding one leaves every earlier command, and its output, unchanged.
_RECORDED = ["gemma-2-2b.json", "llava-1.5-7b.json", "phi-3-mini-4k-instruct.json", "pythia-160m.json",
             "qwen1.5-moe-a2.7b.json", "qwen2-0.5b.json",
             # the issue-8 families, recorded in sorted order before the encoders came
             "falcon-7b.json", "gemma-3-1b-it.json", "olmo-2-1124-7b.json", "phi-2.json", "starcoderbase-1b.json"]
_ALL = sorted(os.listdir(os.path.join(ROOT, "tests/data/configs")))
CONFIGS = ["tests/data/configs/" + n for n in [c for c in _RECORDED if c in _ALL] + [c for c in _ALL if c not in _RECORDED]]


def estimate_commands(rng, model, n):
    moe = any(w in model for w in ("mixtral", "a3b", "deepseek", "moe"))
    cmds = []
    for i in range(n):
        a = ["estimate", "--model", model]
        a += ["--seq-len", str(rng.choice([512, 2048, 4096, 8192, 6000, 32768]))]
        a += ["--micro-batch", str(rng.choice([1, 1, 2, 4]))]
        a += ["--framework", rng.choice(["hf", "megatron"])]
        a += ["--attention", rng.choice(["eager", "sdpa", "flash", "flash"])]
        rec = rng.choice(["none", "selective", "full", "full-layers", "full-every"])
        if rec == "full-layers":
            a += ["--recompute", "full", "--recompute-layers", str(rng.choice([0, 1, 2, 3]))]
        elif rec == "full-every":
            a += ["--recompute", "full", "--checkpoint-every", str(rng.choice([1, 2, 4]))]
        else:
            a += ["--recompute", rec]
        if rng.random() < 0.2:
            a += ["--dtype", rng.choice(["fp32", "fp16", "bf16"])]
        if rng.random() < 0.2:
            a += ["--hidden-dropout", rng.choice(["0", "0.1"]), "--attention-dropout", rng.choice(["0", "0.1"])]
        tp = rng.choice([1, 1, 2, 4, 8])
        pp = rng.choice([1, 1, 2, 4, 8])
        dp = rng.choice([1, 2, 8, 64])
        a += ["--tp", str(tp), "--pp", str(pp), "--dp", str(dp)]
        if tp > 1 and rng.random() < 0.6:
            a += ["--sp"]
        if pp > 1 and rng.random() < 0.4:
            a += ["--vpp", str(rng.choice([2, 4]))]
        if pp > 1 and rng.random() < 0.4:
            a += ["--num-micro-batches", str(rng.choice([1, 4, 8, 16]))]
        if rng.random() < 0.25 and "eager" not in a:
            a += ["--cp", str(rng.choice([2, 4]))]
        if rng.random() < (0.5 if moe else 0.03):
            a += ["--ep", str(rng.choice([2, 4, 8]))]
        a += ["--zero", str(rng.choice([0, 1, 2, 3]))]
        if rng.random() < 0.3:
            a += ["--optimizer", rng.choice(["adamw-8bit", "sgd", "adamw"])]
        if rng.random() < 0.2:
            a += ["--weight-dtype", rng.choice(["fp32", "fp16"])]
        if rng.random() < 0.2:
            a += ["--grad-dtype", "fp32"]
        if rng.random() < 0.15:
            a += ["--offload-optimizer"]
        if rng.random() < 0.15:
            a += ["--reserve", rng.choice(["2GiB", "1.5GB", "0"])]
        fmt = rng.random()
        if fmt < 0.85:
            a += ["--json"]
        elif fmt < 0.93:
            a[0] = "explain"
        cmds.append(a)
    return cmds


def serve_commands(rng, model, n):
    cmds = []
    for i in range(n):
        a = ["serve", "--model", model, "--context-len", str(rng.choice([1024, 4096, 8192, 32768, 131072]))]
        a += ["--batch", str(rng.choice([1, 4, 16, 64]))]
        a += ["--tp", str(rng.choice([1, 1, 2, 4, 8]))]
        if rng.random() < 0.4:
            a += ["--weight-dtype", rng.choice(["bf16", "fp8", "int8", "int4"])]
        if rng.random() < 0.2 and ("int4" in a or "int8" in a):
            a += ["--quant-group-size", str(rng.choice([64, 128]))]
        if rng.random() < 0.1 and ("int4" in a or "int8" in a):
            a += ["--quant-zero-point"]
        if rng.random() < 0.4:
            a += ["--kv-dtype", rng.choice(["bf16", "fp8", "int8", "fp16"])]
        if rng.random() < 0.3:
            a += ["--block-size", str(rng.choice([0, 16, 32]))]
        if rng.random() < 0.2:
            a += ["--mla-cache", rng.choice(["latent", "decompressed"])]
        if rng.random() < 0.2:
            a += ["--max-num-batched-tokens", str(rng.choice([512, 2048]))]
        if rng.random() < 0.2:  # the engine-agnostic model (vLLM has no eager score matrix)
            a += ["--vllm-version", "none", "--attention", "eager"]
        if rng.random() < 0.5:
            a += ["--gpu", rng.choice(["h100-80gb", "a100-40gb", "h200-141gb", "l40s-48gb", "h200"])]
        elif rng.random() < 0.3:
            a += ["--gpu-memory", "79.2GiB"]
        if rng.random() < 0.2:
            a += ["--activation-peak", "9.37GiB", "--non-torch-memory", "0.10GiB"]
        r = rng.random()
        if r < 0.8:
            a += ["--json"]
        elif r < 0.9:
            a += ["--explain"]
        cmds.append(a)
    return cmds


def recent_flag_commands(rng, n):
    """Flags added after the grid above was first recorded (Megatron-core TE and fp8, recompute
    modules, packed rows, Llama 4, transformers versions): their own seeded stream, appended after
    the grid so that adding them left every earlier command unchanged."""
    cmds = []
    for i in range(n):
        kind = rng.choice(["te", "te", "modules", "packed", "llama4", "hf"])
        if kind in ("te", "modules"):
            model = rng.choice(["llama-3-8b", "llama-3.1-70b", "qwen2.5-7b", "gpt2", "mixtral-8x7b",
                                "qwen3-30b-a3b", "deepseek-v3"])
            dense = model not in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3")
            a = ["estimate", "--model", model, "--framework", "megatron",
                 "--seq-len", str(rng.choice([2048, 4096, 8192])), "--micro-batch", str(rng.choice([1, 2])),
                 "--attention", "flash"]
            if kind == "te" or rng.random() < 0.5:
                a += ["--transformer-impl", "transformer_engine"]
            if kind == "te" and dense and rng.random() < 0.6:
                a += ["--fp8", rng.choice(["delayed", "tensorwise"])]
                if model != "gpt2" and rng.random() < 0.4:
                    a += ["--activation-func-fp8-input-store"]
            mods = ["core_attn", "layernorm"] + (["mlp"] if dense else ["moe_act", "moe", "shared_experts", "mlp"])
            if model == "deepseek-v3":
                mods.append("mla_up_proj")
            rec = rng.choice(["none", "selective", "selective", "full"])
            a += ["--recompute", rec]
            if rec == "selective" and rng.random() < 0.7:
                a += ["--recompute-modules", ",".join(sorted(set(rng.sample(mods, rng.choice([1, 2, 3])))))]
            tp = rng.choice([1, 2, 4, 8])
            a += ["--tp", str(tp), "--pp", str(rng.choice([1, 2, 4])), "--dp", str(rng.choice([8, 64]))]
            if tp > 1 and rng.random() < 0.6:
                a += ["--sp"]
            if rng.random() < 0.2:
                a += ["--cp", "2"]
            if not dense and rng.random() < 0.5:
                a += ["--ep", str(rng.choice([2, 4, 8]))]
            a += ["--zero", str(rng.choice([0, 1, 3]))]
        elif kind == "packed":
            model = rng.choice(["llama-3-8b", "qwen2.5-7b", "mistral-7b", "gpt2", "llama-4-scout"])
            attn = rng.choice(["flash", "sdpa", "eager"])
            a = ["estimate", "--model", model, "--seq-len", str(rng.choice([2048, 8192])),
                 "--micro-batch", str(rng.choice([1, 1, 2])), "--attention", attn,
                 "--recompute", rng.choice(["none", "full"]), "--packed-docs", str(rng.choice([2, 8, 0, 1]))]
            if rng.random() < 0.3:
                a += ["--hf-version", rng.choice(["4.57", "4.44"])]
        elif kind == "llama4":
            a = ["estimate", "--model", rng.choice(["llama-4-scout", "llama-4-maverick"]),
                 "--seq-len", str(rng.choice([1024, 8192])), "--attention", rng.choice(["sdpa", "eager", "flash"]),
                 "--recompute", rng.choice(["none", "full"]), "--tp", str(rng.choice([1, 8])),
                 "--dp", str(rng.choice([1, 8])), "--zero", str(rng.choice([0, 3]))]
            if rng.random() < 0.2:
                a += ["--framework", "megatron"]
            if rng.random() < 0.2:
                a += ["--hf-version", rng.choice(["4.57", "4.44"])]
        else:
            model = rng.choice(["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "llama-3-8b", "gpt2"])
            a = ["estimate", "--model", model, "--seq-len", str(rng.choice([2048, 4096])),
                 "--attention", rng.choice(["flash", "sdpa", "eager"]),
                 "--recompute", rng.choice(["none", "full"]), "--hf-version", rng.choice(["5", "4.57", "4.44"])]
            if rng.random() < 0.6:
                a += ["--experts-impl", rng.choice(["grouped_mm", "eager", "batched_mm"])]
        r = rng.random()
        if r < 0.8:
            a += ["--json"]
        elif r < 0.9:
            a[0] = "explain"
        cmds.append(a)
    return cmds


def megatron_fidelity_commands(rng, n):
    """Megatron-core flags added by the fidelity work after recent_flag_commands (fp8 recipes and
    --fp8-gpu, fp8 on MoE / MLA, TopKRouter options, activation CPU offloading, MLA's unfused RoPE):
    a third seeded stream, appended so that every earlier command stays unchanged. Some draws are
    layouts Megatron refuses; their error lines are recorded too."""
    cmds = []
    for _ in range(n):
        kind = rng.choice(["fp8", "fp8", "router", "offload", "rope"])
        moe_models = ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"]
        model = ("deepseek-v3" if kind == "rope" else rng.choice(moe_models) if kind == "router" else
                 rng.choice(["llama-3-8b", "llama-3.1-70b", "qwen2.5-7b"] + moe_models))
        moe = model in moe_models
        a = ["estimate", "--model", model, "--framework", "megatron", "--seq-len", str(rng.choice([2048, 4096])),
             "--micro-batch", str(rng.choice([1, 2])), "--attention", "flash"]
        te = kind == "fp8" or rng.random() < 0.5
        if te:
            a += ["--transformer-impl", "transformer_engine"]
        if kind == "fp8":
            a += ["--fp8", rng.choice(["delayed", "tensorwise", "mxfp8", "blockwise"])]
            if rng.random() < 0.3:
                a += ["--fp8-gpu", rng.choice(["hopper", "blackwell"])]
            if rng.random() < 0.15:
                a += ["--disable-parameter-transpose-cache"]
        elif kind == "router" and moe:
            if rng.random() < 0.5:
                a += ["--moe-router-score-function", rng.choice(["softmax", "sigmoid"])]
            if rng.random() < 0.3:
                a += ["--moe-router-enable-expert-bias"]
            if rng.random() < 0.3:
                a += ["--moe-router-load-balancing-type", rng.choice(["aux_loss", "seq_aux_loss", "global_aux_loss",
                                                                      "none"])]
            if rng.random() < 0.3:
                a += ["--moe-router-dtype", rng.choice(["fp32", "fp64"])]
            if rng.random() < 0.2:
                a += ["--moe-z-loss-coeff", "0.001"]
            if rng.random() < 0.3:
                a += ["--moe-token-dispatcher", "alltoall"]
        elif kind == "offload":
            a += ["--cpu-offloading-num-layers", str(rng.choice([1, 4, 16, 31]))]
        elif kind == "rope":
            a += ["--no-rope-fusion"]
        rec = "none" if kind == "offload" else rng.choice(["none", "none", "selective", "full"])
        a += ["--recompute", rec]
        if rec == "selective" and rng.random() < 0.5:
            mods = ["core_attn", "layernorm", "mlp"] + (["moe_act", "moe"] if moe else [])
            if model == "deepseek-v3":
                mods.append("mla_up_proj")
            a += ["--recompute-modules", ",".join(sorted(set(rng.sample(mods, rng.choice([1, 2])))))]
        tp = rng.choice([1, 2, 4, 8])
        pp = 1 if kind == "offload" or model == "deepseek-v3" else rng.choice([1, 1, 2, 4])
        a += ["--tp", str(tp), "--pp", str(pp), "--dp", str(rng.choice([8, 64]))]
        if tp > 1 and rng.random() < 0.6:
            a += ["--sp"]
        if rng.random() < 0.2:
            a += ["--cp", "2"]
        if moe and rng.random() < 0.5:
            a += ["--ep", str(rng.choice([2, 8]))]
        a += ["--zero", str(rng.choice([0, 1, 3]))]
        r = rng.random()
        if r < 0.8:
            a += ["--json"]
        elif r < 0.9:
            a[0] = "explain"
        cmds.append(a)
    return cmds


def commands():
    rng = random.Random(20261201)
    cmds = [["estimate", "--json"], ["estimate"], ["explain"], ["models"], ["models", "--json"],
            ["estimate", "--params", "7.5e9", "--dp", "64", "--zero", "3", "--json"],
            ["estimate", "--params", "7.5e9", "--dp", "64", "--zero", "1"],
            ["estimate", "--params", "70e9", "--pp", "4", "--tp", "8", "--json"],
            ["estimate", "--params", "1e9", "--cp", "2", "--json"],
            ["estimate", "--model", "nope", "--json"], ["estimate", "--model", "llama-3-70b", "--tp", "3", "--json"],
            ["estimate", "--seq-len", "0", "--json"], ["estimate", "--pp", "7", "--json"]]
    for model in PRESETS + CONFIGS:
        cmds += estimate_commands(rng, model, 100)
        cmds += serve_commands(rng, model, 25)
    cmds += recent_flag_commands(random.Random(20261202), 300)
    cmds += megatron_fidelity_commands(random.Random(20261203), 200)
    return cmds


def run_one(actmem, args):
    p = subprocess.run([actmem] + args, capture_output=True, text=True, cwd=ROOT, timeout=60)
    return {"args": args, "rc": p.returncode, "out": p.stdout, "err": p.stderr}


def run_all(actmem, cmds):
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(lambda a: run_one(actmem, a), cmds))


def same(a, b, path=""):
    """First difference between two JSON values, or None. Floats: relative 1e-12."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            if a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b)):
                return None
        return f"{path}: {a!r} != {b!r}"
    if type(a) != type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'golden' if k in a else 'now'}"
            d = same(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = same(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def timeline_peak_differs(now):
    """Issue 23: the step's timeline (memory.timeline) peaks at exactly the estimate's bytes, the
    total without the @reserve allowance. None when it does, or when the output has no timeline."""
    if now["rc"] != 0 or "--json" not in now["args"] or now["args"][0] != "estimate":
        return None
    m = json.loads(now["out"]).get("memory", {})
    if "timeline" not in m:
        return "memory.timeline missing"
    want = m["total_bytes"] - m["reserve_bytes"]
    got = m["timeline"]["allocated_peak_bytes"]
    return None if got == want else f"memory.timeline.allocated_peak_bytes {got} != total - reserve {want}"


def compare(golden, now):
    if golden["rc"] != now["rc"]:
        return f"exit code {golden['rc']} != {now['rc']} ({now['err'].strip()})"
    if golden["err"] != now["err"]:
        return f"stderr: {golden['err'].strip()!r} != {now['err'].strip()!r}"
    if "--json" in golden["args"] and golden["rc"] == 0:
        return same(json.loads(golden["out"]), json.loads(now["out"]))
    if golden["out"] != now["out"]:
        g, n = golden["out"].splitlines(), now["out"].splitlines()
        for i, (x, y) in enumerate(zip(g, n)):
            if x != y:
                return f"line {i + 1}: {x!r} != {y!r}"
        return f"{len(g)} lines != {len(n)} lines"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("--actmem", required=True)
    ap.add_argument("--max-diffs", type=int, default=10)
    o = ap.parse_args()
    actmem = os.path.abspath(o.actmem)
    if o.mode == "record":
        results = run_all(actmem, commands())
        with lzma.open(GOLDEN, "wt", preset=9) as f:
            for r in results:
                f.write(json.dumps(r, sort_keys=True) + "\n")
        print(f"recorded {len(results)} outputs into {os.path.relpath(GOLDEN, ROOT)}")
        return 0
    with lzma.open(GOLDEN, "rt") as f:
        golden = [json.loads(line) for line in f]
    cmds = [g["args"] for g in golden]
    if cmds != commands():
        print("the command grid changed since the golden file was recorded; record it again on purpose")
    now = run_all(actmem, cmds)
    failed = 0
    timelines = sum(1 for n in now if n["rc"] == 0 and "--json" in n["args"] and n["args"][0] == "estimate")
    for g, n in zip(golden, now):
        d = compare(g, n) or timeline_peak_differs(n)
        if d:
            failed += 1
            if failed <= o.max_diffs:
                print(f"DIFF actmem {' '.join(g['args'])}\n     {d}")
    print(f"{len(golden) - failed} passed, {failed} failed; {timelines} step timelines peak at their estimate's bytes"
          if not failed else f"{len(golden) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
