#!/usr/bin/python3
"""Measure the memory transient of the HF loss (logits -> fp32 -> log_softmax -> nll) and hold
actmem's `logits_grad` transient to it.

  /usr/bin/python3 validation/loss_transient.py --actmem build/actmem

Saved-tensor hooks see what backward keeps, not what exists only for a moment; this measures the
moment. torch.profiler(profile_memory=True) records every allocation and free as its own event;
replaying them in order gives the allocated-bytes curve, whose peak during one forward +
backward of the LM head and loss is compared with what actmem counts there: the saved fp32
log-softmax (in activations) plus the `logits_grad` transient. The caller holds the logits, as a
loop that keeps `outputs` does. Ends with `N passed, M failed`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

from alloc_timeline import peak_while

TOLERANCE = 0.01


def measured_peak(s, b, h, vocab, dtype):
    """Peak bytes allocated inside one forward + backward of lm_head + HF's causal-LM loss."""
    torch.manual_seed(0)
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    weight = torch.randn(vocab, h, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, vocab, (b * s,))

    def step():
        logits = F.linear(x, weight)  # held by the caller, like outputs.logits
        upcast = logits.float()  # HF ForCausalLMLoss: logits = logits.float()
        loss = F.cross_entropy(upcast.view(-1, vocab), labels)
        del upcast
        loss.backward()
        return logits

    step()  # warm up lazily allocated state outside the measurement
    x.grad = None
    weight.grad = None
    return peak_while(step)


def actmem_counts(actmem, s, b, h, vocab, dtype_name):
    config = dict(model_type="llama", hidden_size=h, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, intermediate_size=2 * h, vocab_size=vocab, max_position_embeddings=4 * s,
                  torch_dtype="bfloat16" if dtype_name == "bf16" else "float32")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        out = subprocess.run([actmem, "estimate", "--model", path, "--seq-len", str(s), "--micro-batch", str(b),
                              "--dtype", dtype_name, "--framework", "hf", "--json"],
                             capture_output=True, text=True, check=True)
    j = json.loads(out.stdout)
    transient = next(t["bytes"] for t in j["transients"] if t["key"] == "logits_grad")
    log_softmax = next(t["bytes"] for t in j["activations"]["tensors"] if t["name"] == "loss.log_softmax")
    # The logits themselves: the lm_head output in the activation dtype (e·s·b·V), allocated in the
    # measured region and held; actmem's transient includes them.
    return transient, log_softmax


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actmem", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    cases = [(96, 2, 64, 1003, "bf16"), (64, 3, 48, 2048, "fp32"), (130, 1, 32, 4099, "bf16")]
    passed = failed = 0
    print(f"{'case':<28}{'measured peak':>15}{'actmem':>15}{'err%':>8}")
    for s, b, h, vocab, dtype_name in cases:
        dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
        peak = measured_peak(s, b, h, vocab, dtype)
        try:
            transient, log_softmax = actmem_counts(args.actmem, s, b, h, vocab, dtype_name)
        except (subprocess.CalledProcessError, OSError, StopIteration, KeyError) as e:
            print(f"s{s} b{b} V{vocab} {dtype_name}: actmem failed: {e}")
            failed += 1
            continue
        estimate = transient + log_softmax
        err = (estimate - peak) / peak
        ok = abs(err) <= TOLERANCE
        passed += ok
        failed += not ok
        name = f"hf-loss s{s} b{b} V{vocab} {dtype_name}"
        print(f"{name:<28}{peak:>15}{estimate:>15}{100 * err:>+8.2f}  {'ok' if ok else 'FAIL'}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
