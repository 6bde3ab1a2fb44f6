#!/usr/bin/python3
"""Measure the KV-cache peak of HF generate()'s DynamicCache and hold `actmem serve --generate`'s
last-decode-step terms (kv_cache + transient) to it.

  /usr/bin/python3 validation/generate_cache.py --actmem build/actmem

The loop follows transformers src/transformers/cache_utils.py DynamicLayer.update: per layer the
keys and values start as an empty tensor and grow by `torch.cat([self.keys, key_states], dim=-2)`
(then the same for values), prefill with P tokens, then N - 1 decode steps of one token (the N-th
new token is sampled and never fed back). Only the cache is exercised: the key/value states come
from torch.randn in place of the projections, so the measured peak is the cache plus what
torch.cat keeps alive, the part of the model this checks (in cases where the last decode step, not
the prefill, is the cache's peak). Allocation peaks as in
alloc_timeline.py (torch.profiler's allocation events replayed in order). Ends with
`N passed, M failed`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

from alloc_timeline import peak_while

TOLERANCE = 0.01


class DynamicLayer:
    def __init__(self):
        self.keys = None
        self.values = None

    def update(self, key_states, value_states):
        if self.keys is None:  # lazy_initialization
            self.keys = torch.tensor([], dtype=key_states.dtype)
            self.values = torch.tensor([], dtype=key_states.dtype)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values


def generate_cache(layers, b, kv, d, prompt, new_tokens, dtype):
    cache = [DynamicLayer() for _ in range(layers)]
    for t in [prompt] + [1] * (new_tokens - 1):
        for layer in cache:
            k = torch.randn(b, kv, t, d, dtype=dtype)
            v = torch.randn(b, kv, t, d, dtype=dtype)
            layer.update(k, v)
            del k, v
    return cache


def measured_peak(*args):
    return peak_while(lambda: generate_cache(*args))


def actmem_counts(actmem, layers, b, heads, kv, d, prompt, new_tokens, dtype_name):
    config = dict(model_type="llama", hidden_size=heads * d, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv, intermediate_size=2 * heads * d, vocab_size=256,
                  max_position_embeddings=4 * (prompt + new_tokens),
                  torch_dtype="bfloat16" if dtype_name == "bf16" else "float32")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        out = subprocess.run([actmem, "serve", "--model", path, "--generate", "--prompt-len", str(prompt),
                              "--new-tokens", str(new_tokens), "--batch", str(b), "--dtype", dtype_name, "--json"],
                             capture_output=True, text=True, check=True)
    terms = {t["key"]: t["bytes"] for t in json.loads(out.stdout)["decode"]["terms"]}
    return terms["kv_cache"] + terms["transient"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actmem", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    # (layers, b, heads, kv, d, prompt, new_tokens, dtype)
    cases = [(3, 2, 4, 2, 16, 200, 100, "bf16"), (4, 1, 8, 8, 32, 64, 300, "fp32"), (2, 3, 4, 1, 64, 500, 300, "bf16")]
    passed = failed = 0
    print(f"{'case':<40}{'measured peak':>15}{'actmem':>15}{'err%':>8}")
    for layers, b, heads, kv, d, prompt, new_tokens, dtype_name in cases:
        dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
        peak = measured_peak(layers, b, kv, d, prompt, new_tokens, dtype)
        try:
            estimate = actmem_counts(args.actmem, layers, b, heads, kv, d, prompt, new_tokens, dtype_name)
        except (subprocess.CalledProcessError, OSError, KeyError) as e:
            print(f"L{layers} b{b} kv{kv} d{d} P{prompt} N{new_tokens}: actmem failed: {e}")
            failed += 1
            continue
        err = (estimate - peak) / peak
        ok = abs(err) <= TOLERANCE
        passed += ok
        failed += not ok
        name = f"cache L{layers} b{b} kv{kv} d{d} P{prompt} N{new_tokens} {dtype_name}"
        print(f"{name:<40}{peak:>15}{estimate:>15}{100 * err:>+8.2f}  {'ok' if ok else 'FAIL'}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
