#!/usr/bin/python3
"""Hold `actmem estimate --offload-activations` to torchtune's activation offloading, emulated.

  /usr/bin/python3 validation/offload_validation.py --actmem build/actmem

torchtune's OffloadActivations (torchtune/training/_activation_offloading.py) is a
saved_tensors_hooks pair around the model's forward (the recipes: `with self.activations_handling_ctx:
logits = self._model(**batch)`; the loss runs outside it). Its pack_tensor copies every saved tensor
of `x.element_size() * x.nelement() >= min_offload_size` (1024 bytes) that is not a Parameter or
Buffer into a new CPU tensor (`torch.empty_like(..., device="cpu")`, one copy per pack: no
deduplication) and keeps only an id; smaller tensors are kept as they are.
get_act_offloading_ctx_manager wraps the output projection (`model.output`) in NoOpManager: the LM
head's saved input stays on the GPU. So after forward the GPU holds: the LM head's input, what the
loss saves, tensors under 1024 bytes, and what the model keeps outside the autograd graph (under
full recomputation, the keyword tensors a checkpointed layer was passed: HF's
GradientCheckpointingLayer passes position_embeddings etc. through functools.partial, which the
checkpoint holds rather than saves).

Emulated here on models.py's HF reference models (torch 1.13 CPU): the same hook logic, with a
"CPU copy" being a byte count. Per case: the GPU-resident saved storages after forward (each
storage once; exact rule, 1 % tolerance) against actmem's `memory.activations_bytes`, and the host
bytes (sum of the per-pack copies) against actmem's `memory.host_activations_bytes` (the distinct
offloaded storages: a lower bound, since torchtune copies a storage once per save; the ratio is
printed, not checked). The forward stash of the streamed version (up to 5 offloaded tensors kept on
the GPU until backward starts) and the tensors brought back per autograd node in backward are
actmem's `offload_working_set` transient, an allowance, not measured here. The MoE case is 0.9 %
low: at this size its per-expert index tensors and routing-weight columns are under 1024 bytes and
stay on the GPU (actmem assumes no saved tensor is that small). Ends with
`N passed, M failed`.
"""
import gc
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import measure  # noqa: E402
import models  # noqa: E402
import run_validation  # noqa: E402
import runner  # noqa: E402

TOLERANCE = 0.01
MIN_OFFLOAD_SIZE = 1024  # OffloadActivations(min_offload_size=1024)


def measure_offload(cfg, run, seed=0):
    """(GPU-resident saved bytes, host bytes) after one forward under emulated OffloadActivations."""
    model = models.build(cfg, run, seed)
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, cfg.vocab, (run.micro_batch, run.seq_len), generator=generator)
    labels = torch.randint(0, cfg.vocab, (run.micro_batch, run.seq_len), generator=generator)
    excluded = {measure._storage_key(t) for t in list(model.parameters()) + list(model.buffers())}
    state = {"noop": False}
    kept, offloaded = {}, set()
    host = [0]
    linear = F.linear

    def patched_linear(*args, **kwargs):
        if models.current_region() == "head":  # the LM head: NoOpManager from here on (then the loss,
            state["noop"] = True               # outside the offloading context)
        return linear(*args, **kwargs)

    def pack(t):
        if t.dim() == 0 or t.numel() == 0:
            return t  # wrapped scalars (measure.py excludes them too)
        key = measure._storage_key(t)
        if key in excluded:
            return t
        nbytes = t.element_size() * t.nelement()
        if not state["noop"] and nbytes >= MIN_OFFLOAD_SIZE:
            host[0] += nbytes
            offloaded.add(key)
        else:
            kept[key] = t.storage().nbytes()
        return t

    models.take_watched()
    torch.nn.functional.linear = patched_linear
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(input_ids, labels)
    finally:
        torch.nn.functional.linear = linear
    # Tensors a checkpoint holds without saving them (keyword arguments): on the GPU.
    gc.collect()
    for ref, _ in models.take_watched():
        t = ref()
        if t is None or t.dim() == 0:
            continue
        key = measure._storage_key(t)
        if key not in excluded and key not in offloaded:
            kept.setdefault(key, t.storage().nbytes())
    del loss
    return sum(kept.values()), host[0]


def case(name, shape, attention, recompute, dtype, s, b):
    return dict(name=name, model=models.ModelConfig(**shape),
                run=models.RunConfig("hf", attention, recompute, dtype, seq_len=s, micro_batch=b))


CASES = [
    case("llama-gqa-flash-bf16", run_validation.LLAMA_GQA, "flash", "none", "bf16", 128, 2),
    case("llama-gqa-eager-bf16", run_validation.LLAMA_GQA, "eager", "none", "bf16", 96, 3),
    case("llama-mha-flash-fp32", run_validation.LLAMA_MHA, "flash", "none", "fp32", 256, 1),
    case("llama-gqa-flash-full-bf16", run_validation.LLAMA_GQA, "flash", "full", "bf16", 128, 2),
    case("llama-gqa-eager-full-bf16", run_validation.LLAMA_GQA, "eager", "full", "bf16", 96, 3),
    case("qwen2-flash-bf16", run_validation.QWEN2, "flash", "none", "bf16", 128, 2),
    case("mixtral-flash-bf16", run_validation.MIXTRAL, "flash", "none", "bf16", 128, 2),
]


def estimate(c, actmem, workdir):
    """actmem's `memory` for the case, or its command line and stderr."""
    path = os.path.join(workdir, c["name"] + ".json")
    with open(path, "w") as f:
        json.dump(run_validation.hf_config(c["model"], c["run"]), f)
    cli = run_validation.cli_args(actmem, path, c["run"], extra=["--offload-activations"])
    proc = subprocess.run(cli, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"{' '.join(cli)}\n{proc.stderr.strip()}"
    return json.loads(proc.stdout)["memory"], None


def row(c, measured, memory):
    gpu, host = measured
    est_gpu = memory["activations_bytes"]
    est_host = memory["host_activations_bytes"]
    e = (est_gpu - gpu) / gpu
    ok = abs(e) <= TOLERANCE
    print(f"{c['name']:<30}{gpu:>10}{est_gpu:>10}{100 * e:>+8.2f}{host:>12}{est_host:>12}"
          f"{host / est_host:>7.2f}  {'ok' if ok else 'FAIL'}")
    return ok


def main():
    return runner.run_cases(CASES, lambda c: measure_offload(c["model"], c["run"]), estimate, row,
                            f"{'case':<30}{'gpu':>10}{'actmem':>10}{'err%':>8}{'host':>12}{'actmem':>12}{'ratio':>7}",
                            actmem_required=True)


if __name__ == "__main__":
    sys.exit(main())
