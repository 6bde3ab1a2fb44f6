#!/usr/bin/env python3
"""Measure real HF transformers models on a CUDA GPU and write what actmem is held to.

  python3 validation/gpu/measure_hf.py --out DIR [--actmem build/actmem] [--filter SUBSTR] [--budget-s 240]
  python3 validation/gpu/measure_hf.py --dry-run [--actmem build/actmem]      # no CUDA, no transformers
  python3 validation/gpu/measure_hf.py --reference --out DIR [--seq-len 64]   # CPU: validation/models.py

Every case builds a model from an HF config (random init, nothing downloaded: the config is
run_validation.hf_config of a run_validation.py shape, so it is the same config.json that actmem
reads), in bf16 with `attn_implementation` eager / sdpa / flash_attention_2 (skipped, and said so
in the results, when flash_attn is not importable), full recomputation by
`gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True|False})`, and,
for MoE families, transformers 5's `experts_implementation` grouped_mm / eager / batched_mm (a
from_config keyword; PreTrainedModel._from_config sets config._experts_implementation, which
@use_experts_implementation reads at each forward). It runs one warm-up step, then one measured
forward + backward and records:

  * saved-tensor-hook bytes (distinct storages on the device, parameters/buffers/0-dim excluded,
    regions embedding / layer i / shared / head as validation/measure.py; recompute none only:
    the checkpoints hide their inputs from the hooks), the middle layer's storages with the autograd
    node that saved each (which SDPA backend ran, for instance);
  * torch.cuda: memory_allocated after the forward minus before (what the forward left alive),
    max_memory_allocated minus before (the step's peak above weights), and after backward (grads);
  * parameter bytes, EXPECTED.md's formulas (validation/expected.py) for the same case, and the
    `actmem estimate --json` figures when --actmem runs on that machine (compare_results.py
    recomputes them with the current build anyway, from the config and flags kept per case).

A time guard stops starting cases after --budget-s seconds (default 240) and records which were not
run; the results file is rewritten after every case, so a killed run still leaves one. Cases run in
priority order: every family with sdpa, then eager, flash_attention_2, full recomputation, the other
experts implementations, dropout, then larger models.

--dry-run lists the cases, the HF calls and the actmem command lines without CUDA or transformers;
with --actmem it runs every actmem command and fails when one is refused (ctest gpu_cases_dry_run).
--reference runs the same measurement code on validation/models.py's reference models on the CPU
(recompute none only): the input of compare_results' self-test (test_compare_results.py), which
also runs the HF path with --device cpu and stand_in/transformers in place of transformers.
"""
import argparse
import contextlib
import dataclasses
import datetime
import gc
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import compare_results  # noqa: E402  (the actmem call and the results format, shared)

SEQ, BATCH = 512, 2
BUDGET_S = 240.0
CASE_TIMEOUT_S = 120
ATTN_FOR_ACTMEM = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash"}
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3")


@dataclasses.dataclass
class Case:
    name: str
    shape: dict  # models.ModelConfig keyword arguments (run_validation.py shapes); family "mistral" is built here
    attn: str  # HF attn_implementation: eager | sdpa | flash_attention_2
    recompute: str = "none"  # none | full
    reentrant: bool = False  # with full: gradient_checkpointing_kwargs use_reentrant
    experts_impl: str = "grouped_mm"  # MoE: experts_implementation (transformers 5)
    seq_len: int = SEQ
    micro_batch: int = BATCH
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0

    @property
    def family(self):
        return self.shape["family"]

    @property
    def checkpoint(self):
        return None if self.recompute == "none" else ("reentrant" if self.reentrant else "non-reentrant")


def _shapes():
    """The model shapes: run_validation.py's (accepted by actmem, measured on the CPU there), with
    max_positions >= s + 2 (learned positions; RoBERTa's start at padding_idx + 1), plus a
    Llama of realistic width."""
    import run_validation as rv

    shapes = {
        "llama": rv.LLAMA_GQA, "mistral": dict(rv.LLAMA_GQA, family="mistral"), "qwen2": rv.QWEN2,
        "qwen3": rv.QWEN3, "gemma": rv.GEMMA, "gemma2": rv.GEMMA2, "gemma3_text": rv.GEMMA3, "phi3": rv.PHI3_GQA,
        "phi": rv.PHI, "gpt2": rv.GPT2, "gpt_neox": rv.NEOX, "gpt_bigcode": rv.BIGCODE, "olmo2": rv.OLMO2_GQA,
        "falcon": rv.FALCON, "falcon_new": rv.FALCON_NEW, "bert": rv.BERT, "bert_cls": rv.BERT_CLS,
        "roberta": rv.ROBERTA, "roberta_cls": rv.ROBERTA_CLS, "mixtral": rv.MIXTRAL, "qwen2_moe": rv.QWEN2_MOE,
        "qwen3_moe": rv.QWEN3_MOE, "deepseek_v3": rv.DSV3,
        "llama_wide": dict(family="llama", hidden=2048, layers=4, heads=16, kv_heads=8, head_dim=128, ffn=5632,
                           vocab=32000, eps=1e-5),
    }  # fmt: skip
    return {k: dict(v) for k, v in shapes.items()}


def build_cases():
    shapes = _shapes()
    families = [k for k in shapes if k != "llama_wide"]
    cases = []

    def add(tag, shape_key, attn, **kw):
        name = f"{shape_key}-{attn.replace('_attention_2', '')}" + (f"-{tag}" if tag else "")
        cases.append(Case(name, shapes[shape_key], attn, **kw))

    for attn in ("sdpa", "eager", "flash_attention_2"):  # every family, no recomputation
        for key in families:
            add("", key, attn)
    for key in ("llama", "gpt2", "gemma2", "phi3", "gpt_neox", "falcon", "bert", "mixtral", "deepseek_v3"):
        add("full-reentrant", key, "sdpa", recompute="full", reentrant=True)
        add("full", key, "sdpa", recompute="full", reentrant=False)
    for key in ("llama", "gpt2", "gemma3_text"):
        add("full-reentrant", key, "eager", recompute="full", reentrant=True)
        add("full", key, "eager", recompute="full", reentrant=False)
    for key in MOE_FAMILIES:
        for impl in ("eager", "batched_mm"):
            add(f"experts-{impl}", key, "sdpa", experts_impl=impl)
    add("experts-eager", "mixtral", "eager", experts_impl="eager")
    add("experts-batched_mm-full", "qwen3_moe", "sdpa", experts_impl="batched_mm", recompute="full")
    for key, attn in (("gpt2", "eager"), ("gpt2", "sdpa"), ("llama", "eager"), ("phi3", "sdpa"), ("bert", "sdpa"),
                      ("gpt_neox", "eager"), ("gpt2", "flash_attention_2")):
        add("drop", key, attn, hidden_dropout=0.1, attention_dropout=0.1)
    add("", "llama_wide", "sdpa", seq_len=2048)
    add("", "llama_wide", "flash_attention_2", seq_len=2048)
    add("full", "llama_wide", "sdpa", seq_len=2048, recompute="full")
    add("", "llama_wide", "eager", seq_len=1024)
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return cases


# ---------------------------------------------------------------------------------------------
# the config.json (actmem and transformers read the same one) and the actmem flags


def model_and_run(case: Case, hf_version="5"):
    """(models.ModelConfig, models.RunConfig) of the case; a mistral case is modelled as llama."""
    import models

    shape = dict(case.shape, max_positions=max(case.shape.get("max_positions", 0), case.seq_len + 2))
    if shape["family"] == "mistral":
        shape["family"] = "llama"
    run = models.RunConfig("hf", ATTN_FOR_ACTMEM[case.attn], case.recompute, "bf16", case.seq_len, case.micro_batch,
                           hidden_dropout=case.hidden_dropout, attention_dropout=case.attention_dropout,
                           checkpoint=case.checkpoint or "reentrant", hf_version=hf_version,
                           experts_impl=case.experts_impl)  # fmt: skip
    return models.ModelConfig(**shape), run


def hf_config(case: Case):
    """The config.json dict: run_validation.hf_config, plus the keys transformers 5 reads in place
    of older ones (gemma3_text layer_types), use_cache false (no KV cache in a training step)."""
    import run_validation as rv

    model, run = model_and_run(case)
    config = rv.hf_config(model, run)
    if case.family == "mistral":
        config.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=None)
        config.pop("attention_bias", None)
        config.pop("mlp_bias", None)
    if case.family == "gemma3_text":
        config["layer_types"] = ["sliding_attention" if model.is_sliding(i) else "full_attention"
                                 for i in range(model.layers)]  # fmt: skip
    config["use_cache"] = False
    return config


def actmem_args(case: Case):
    """`actmem estimate` flags after --model CONFIG (run_validation.cli_args: --hf-version 5 and
    --experts-impl always, as for every transformers 5 case there)."""
    import run_validation as rv

    _, run = model_and_run(case)
    args = rv.cli_args("actmem", "CONFIG", run)
    assert args[:4] == ["actmem", "estimate", "--model", "CONFIG"]
    return args[4:]


def expected_md(case: Case):
    try:
        import expected

        per_layer, total, _, _ = expected.expected(*model_and_run(case))
        return {"per_layer_bytes": per_layer, "total_bytes": total}
    except Exception as e:  # a shape expected.py has no formula for: say so, measure anyway
        return {"error": repr(e)}


# ---------------------------------------------------------------------------------------------
# the measurement (shared by the HF path on CUDA and the reference path on the CPU)


def _storage(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def _saver_names(root, by_key):
    """The autograd node class that saved each storage (e.g. ScaledDotProductFlashAttentionBackward0)."""
    import measure

    for saver, t in measure.saved_tensors(root, errors=Exception):
        try:
            key = _storage(t).data_ptr() if hasattr(t, "dim") and t.dim() > 0 else None
        except Exception:
            key = None
        if key in by_key:
            by_key[key]["savers"].add(saver)


def measure_step(model, forward, current_region, device, layers, use_hooks, warmup):
    """One training step: `forward()` returns the loss. Returns the measured figures (dict)."""
    import torch

    cuda = device.type == "cuda"
    if warmup:  # cuBLAS / attention workspaces and lazy buffers are allocated here, not in the measured step
        forward().backward()
    model.zero_grad(set_to_none=True)
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    excluded = {_storage(t).data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    by_key, other_device = {}, [0]

    def pack(t):
        if t.dim() == 0 or t.numel() == 0:
            return t
        if t.device.type != device.type:
            other_device[0] += _storage(t).nbytes()
            return t
        key = _storage(t).data_ptr()
        if key in excluded:
            return t
        rec = by_key.get(key)
        if rec is None:
            rec = by_key[key] = {"bytes": _storage(t).nbytes(), "shape": list(t.shape), "dtype": str(t.dtype)[6:],
                                 "region": current_region(), "regions": set(), "savers": set()}  # fmt: skip
        rec["regions"].add(current_region())
        return t

    started = time.time()
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if use_hooks else contextlib.nullcontext()
    with hooks:
        loss = forward()
    out = {}
    if cuda:
        torch.cuda.synchronize()
        out["cuda"] = {"before_bytes": before, "forward_delta_bytes": torch.cuda.memory_allocated() - before}
    if use_hooks:
        _saver_names(loss.grad_fn, by_key)
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
        out["cuda"]["peak_delta_bytes"] = torch.cuda.max_memory_allocated() - before
        out["cuda"]["after_backward_delta_bytes"] = torch.cuda.memory_allocated() - before
    out["step_s"] = round(time.time() - started, 4)
    out["params_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    out["params"] = sum(p.numel() for p in model.parameters())
    if use_hooks:
        middle = f"layer {layers // 2}"
        regions = {}
        for rec in by_key.values():
            if len({r for r in rec["regions"] if r.startswith("layer ")}) > 1:
                rec["region"] = "shared"
            regions[rec["region"]] = regions.get(rec["region"], 0) + rec["bytes"]
        out["hooks"] = {
            "per_layer_bytes": regions.get(middle, 0), "total_bytes": sum(r["bytes"] for r in by_key.values()),
            "middle_layer": layers // 2, "regions": regions, "other_device_bytes": other_device[0],
            # the middle layer's and the model-level storages (other layers repeat the middle one's)
            "storages": [{"region": r["region"], "saved_by": sorted(r["savers"]), "shape": r["shape"],
                          "dtype": r["dtype"], "bytes": r["bytes"]}
                         for r in by_key.values() if not r["region"].startswith("layer ") or r["region"] == middle],
        }  # fmt: skip
    del loss
    return out


# ---------------------------------------------------------------------------------------------
# building the models


def _layer_list(model, n_layers):
    """The decoder/encoder layers: the first nn.ModuleList of num_hidden_layers modules."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers and name.split(".")[-1] in (
            "layers", "h", "layer"
        ):
            return module
    raise RuntimeError(f"no ModuleList of {n_layers} layers in {type(model).__name__}")


def _auto_class(transformers, architecture):
    for suffix, auto in (("ForCausalLM", "AutoModelForCausalLM"), ("LMHeadModel", "AutoModelForCausalLM"),
                         ("ForMaskedLM", "AutoModelForMaskedLM"),
                         ("ForSequenceClassification", "AutoModelForSequenceClassification")):  # fmt: skip
        if architecture.endswith(suffix):
            return getattr(transformers, auto)
    raise RuntimeError(f"no Auto class for {architecture}")


def build_hf(case: Case, config_dict, device):
    import torch
    import transformers

    kwargs = {k: v for k, v in config_dict.items() if k not in ("torch_dtype", "dtype", "model_type")}
    if hasattr(transformers.AutoConfig, "for_model"):
        config = transformers.AutoConfig.for_model(config_dict["model_type"], **kwargs)
    else:
        config = transformers.CONFIG_MAPPING[config_dict["model_type"]](**kwargs)
    extra = {"attn_implementation": case.attn}
    if case.family in MOE_FAMILIES:
        extra["experts_implementation"] = case.experts_impl
    auto = _auto_class(transformers, config_dict["architectures"][0])
    try:
        model = auto.from_config(config, dtype=torch.bfloat16, **extra)
    except TypeError as e:  # a transformers that knows only torch_dtype
        if "dtype" not in str(e):
            raise
        model = auto.from_config(config, torch_dtype=torch.bfloat16, **extra)
    model = model.to(device).train()
    if case.recompute == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": case.reentrant})
    effective = {
        "model_class": type(model).__name__,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", None)
                                       or any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())),
        "dtype": str(next(model.parameters()).dtype)[6:],
    }
    return model, effective


def run_case_hf(case: Case, device):
    import torch

    config = hf_config(case)
    model, effective = build_hf(case, config, device)
    layers = _layer_list(model, config["num_hidden_layers"] if "num_hidden_layers" in config else config["n_layer"])
    region = ["embedding"]
    handles = [layer.register_forward_pre_hook(lambda *_, i=i: region.__setitem__(0, f"layer {i}"))
               for i, layer in enumerate(layers)]  # fmt: skip
    handles.append(layers[-1].register_forward_hook(lambda *_: region.__setitem__(0, "head")))
    generator = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(2, config["vocab_size"], (case.micro_batch, case.seq_len), generator=generator).to(device)
    architecture = config["architectures"][0]
    if architecture.endswith("ForSequenceClassification"):
        labels = torch.randint(0, len(config["id2label"]), (case.micro_batch,), generator=generator).to(device)
    else:
        labels = ids

    def forward():
        region[0] = "embedding"
        out = model(input_ids=ids, labels=labels)
        loss = out.loss
        del out  # the caller drops the logits before backward (as HF's Trainer does)
        return loss

    try:
        measured = measure_step(model, forward, lambda: region[0], device, len(layers),
                                use_hooks=case.recompute == "none", warmup=True)  # fmt: skip
    except RuntimeError as e:  # e.g. a torch.func transform inside that refuses saved-tensor hooks
        if case.recompute != "none" or "hook" not in str(e):
            raise
        model.zero_grad(set_to_none=True)
        measured = measure_step(model, forward, lambda: region[0], device, len(layers), use_hooks=False, warmup=True)
        measured["hooks_error"] = f"{type(e).__name__}: {e}"[:1000]  # CUDA figures only
    for h in handles:
        h.remove()
    return config, effective, measured  # the model goes with this frame; main() collects and empties the cache


def run_case_reference(case: Case, device):
    """The same measurement on validation/models.py's reference model of the case (CPU)."""
    import torch

    import models

    model_cfg, run = model_and_run(case)
    model = models.build(model_cfg, run)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(2, model_cfg.vocab, (case.micro_batch, case.seq_len), generator=generator)
    measured = measure_step(model, lambda: model(ids, ids), models.current_region, device, model_cfg.layers,
                            use_hooks=True, warmup=False)  # fmt: skip
    # models.py keeps HF's saves, not its parameters (GPT-2's head is not tied there): no params check
    measured.pop("params"), measured.pop("params_bytes")
    effective = {"model_class": type(model).__name__, "attn_implementation": run.attention,
                 "experts_implementation": run.experts_impl, "gradient_checkpointing": False, "dtype": run.dtype}  # fmt: skip
    return hf_config(case), effective, measured


# ---------------------------------------------------------------------------------------------
# environment and results


def environment(reference, actmem, device):
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "source": "reference" if reference else "hf"}
    if not reference:
        import transformers

        env["transformers"] = transformers.__version__
    if device.type == "cuda":
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = {"name": props.name, "capability": f"{props.major}.{props.minor}",
                      "total_memory_bytes": props.total_memory, "multiprocessors": props.multi_processor_count}  # fmt: skip
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip() or None  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            env["driver"] = None
    else:
        env["gpu"] = {"name": "cpu"}  # --reference, or --device cpu (hooks only)
    env["flash_attn"] = None
    if importlib.util.find_spec("flash_attn") is not None:
        try:
            import flash_attn

            env["flash_attn"] = flash_attn.__version__
        except Exception as e:
            env["flash_attn_error"] = repr(e)
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                                           timeout=10).stdout.strip() or None  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        env["git_commit"] = None
    env["actmem_version"] = compare_results.actmem_version(actmem) if actmem else None
    return env


def case_header(case: Case):
    return {
        "case": case.name, "family": case.family, "attn_implementation": case.attn, "recompute": case.recompute,
        "checkpoint": case.checkpoint, "experts_implementation": case.experts_impl if case.family in MOE_FAMILIES else None,
        "dtype": "bf16", "seq_len": case.seq_len, "micro_batch": case.micro_batch,
        "hidden_dropout": case.hidden_dropout, "attention_dropout": case.attention_dropout,
    }  # fmt: skip


def mismatch(case: Case, effective):
    """What transformers ran that the case did not ask for (a silent fallback), or None: actmem's
    figures for the case would then describe another run."""
    wrong = []
    if effective.get("attn_implementation") not in (case.attn, ATTN_FOR_ACTMEM[case.attn]):
        wrong.append(f"attn_implementation {effective.get('attn_implementation')!r} for {case.attn!r}")
    if case.family in MOE_FAMILIES and effective.get("experts_implementation") != case.experts_impl:
        wrong.append(f"experts_implementation {effective.get('experts_implementation')!r} for {case.experts_impl!r}")
    if effective.get("gradient_checkpointing") != (case.recompute == "full"):
        wrong.append(f"gradient checkpointing {effective.get('gradient_checkpointing')} for recompute {case.recompute}")
    return "transformers ran " + "; ".join(wrong) if wrong else None


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _alarm(seconds):
    def fire(*_):
        raise _Timeout(f"case took over {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _mib(n):
    return "-" if n is None else f"{n / 2**20:9.2f}"


def dry_run(cases, actmem):
    """Print the case table; with actmem, run every actmem command line and count refusals."""
    failed = 0
    with tempfile.TemporaryDirectory(prefix="actmem-gpu-dry-") as d:
        for case in cases:
            config, args = hf_config(case), actmem_args(case)
            hf_call = (f"{config['architectures'][0]}: from_config(attn_implementation={case.attn!r}"
                       + (f", experts_implementation={case.experts_impl!r}" if case.family in MOE_FAMILIES else "")
                       + ", dtype=bfloat16)"
                       + (f", gradient_checkpointing use_reentrant={case.reentrant}" if case.recompute == "full" else ""))  # fmt: skip
            print(f"{case.name}\n    hf:     {hf_call}, s {case.seq_len}, b {case.micro_batch}")
            print(f"    actmem: actmem estimate --model {case.name}/config.json {' '.join(args)}")
            if actmem:
                figures = compare_results.actmem_figures(actmem, config, args, d)
                if "error" in figures:
                    failed += 1
                    print("    REFUSED: " + figures["error"].replace("\n", "\n    "))
                else:
                    print(f"    actmem per layer {figures['per_layer_bytes']} B, total {figures['total_bytes']} B")
    print(f"{len(cases)} cases")
    if actmem:
        print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actmem", help="actmem binary: dry run checks its command lines; a run records its figures")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable; exact names)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="folder for the results JSON")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="start no case after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="list cases and actmem command lines; no CUDA")
    parser.add_argument("--reference", action="store_true",
                        help="CPU: measure validation/models.py's reference models (recompute none only)")
    parser.add_argument("--seq-len", type=int, help="override every case's sequence length (reference self-test)")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu: hooks only, no CUDA figures (self-test)")
    args = parser.parse_args()

    cases = [c for c in build_cases() if args.filter in c.name and (not args.case or c.name in args.case)]
    if args.seq_len:
        cases = [dataclasses.replace(c, seq_len=args.seq_len) for c in cases]
    if not cases:
        print(f"no case matches {args.filter!r}", file=sys.stderr)
        return 2
    if args.dry_run:
        return dry_run(cases, args.actmem)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: configs only
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    if args.reference:
        device = torch.device("cpu")
        skipped = [c for c in cases if c.recompute != "none" or c.family == "mistral"]
        cases = [c for c in cases if c not in skipped]
        skip_reasons = {c.name: "reference path: recompute none and models.py families only" for c in skipped}
    else:
        device = torch.device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            print("needs a CUDA GPU (use --dry-run or --reference on a CPU)", file=sys.stderr)
            return 2
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
        skip_reasons = {}
    actmem = args.actmem if args.actmem and compare_results.actmem_version(args.actmem) else None
    if args.actmem and not actmem:
        print(f"note: {args.actmem} does not run here; compare_results.py computes actmem's figures later")
    env = environment(args.reference, actmem, device)
    if not args.reference and env["flash_attn"] is None:
        for c in cases:
            if c.attn == "flash_attention_2":
                skip_reasons[c.name] = "flash_attn is not importable here: flash_attention_2 not measured"
        print("flash_attn is not importable: every flash_attention_2 case is skipped (recorded in the results)")
    started = time.time()
    slug = "".join(ch if ch.isalnum() else "-" for ch in env["gpu"]["name"].lower()).strip("-")
    path = os.path.join(args.out, time.strftime("%Y%m%d-%H%M%S") + f"-{slug}.json")
    os.makedirs(args.out, exist_ok=True)
    results = {
        "format": compare_results.FORMAT, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "environment": env, "budget_s": args.budget_s, "cases": [],
        "skipped": [{"case": n, "why": why} for n, why in skip_reasons.items()], "not_run": [],
    }  # fmt: skip

    def write():
        results["elapsed_s"] = round(time.time() - started, 1)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1, default=str)
        os.replace(tmp, path)

    print(f"{'case':34s} {'hooks/layer':>11s} {'actmem':>9s} {'hooks tot':>9s} {'fwd delta':>9s} {'actmem':>9s} "
          f"{'peak':>9s}  MiB")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="actmem-gpu-") as workdir:
        for case in cases:
            if case.name in skip_reasons:
                continue
            if time.time() - started > args.budget_s:
                results["not_run"].append(case.name)
                continue
            record = case_header(case)
            record["hf_config"], record["actmem_args"] = hf_config(case), actmem_args(case)
            record["expected_md"] = expected_md(case)
            t0 = time.time()
            try:
                with _alarm(CASE_TIMEOUT_S):
                    runner = run_case_reference if args.reference else run_case_hf
                    _, record["effective"], record["measured"] = runner(case, device)
            except Exception as e:  # unsupported attention for a class, an OOM, a kernel that refuses a shape: record, go on
                record["error"] = f"{type(e).__name__}: {e}"[:2000]
                print(f"{case.name:34s} error: {record['error'][:300]}")
                results["cases"].append(record)
                write()
                continue
            finally:
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            if mismatch(case, record["effective"]):  # measured, but not what the case asked for: not compared
                record["error"] = mismatch(case, record["effective"])
                print(f"{case.name:34s} error: {record['error']}")
            if actmem:
                record["actmem"] = compare_results.actmem_figures(actmem, record["hf_config"], record["actmem_args"], workdir)
            record["wall_s"] = round(time.time() - t0, 2)
            results["cases"].append(record)
            write()
            m, a = record["measured"], record.get("actmem", {})
            hooks, cuda = m.get("hooks", {}), m.get("cuda", {})
            print(f"{case.name:34s} {_mib(hooks.get('per_layer_bytes')):>11s} {_mib(a.get('per_layer_bytes')):>9s} "
                  f"{_mib(hooks.get('total_bytes')):>9s} {_mib(cuda.get('forward_delta_bytes')):>9s} "
                  f"{_mib(a.get('total_bytes')):>9s} {_mib(cuda.get('peak_delta_bytes')):>9s}  ({record['wall_s']} s)")  # fmt: skip
    write()
    n_err = sum("error" in r for r in results["cases"])
    print(f"{len(results['cases'])} cases run ({n_err} errors), {len(results['skipped'])} skipped, "
          f"{len(results['not_run'])} not run (time guard {args.budget_s:.0f} s), {time.time() - started:.0f} s")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
