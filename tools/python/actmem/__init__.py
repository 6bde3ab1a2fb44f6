"""actmem: GPU memory of transformer training and serving, tensor by tensor, from Python.

    import actmem
    r = actmem.estimate("llama-3-70b", seq_len=8192, tp=8, pp=4, dp=8, sp=True, recompute="selective")
    r["memory"]["total_bytes"]          # the same dict as `actmem estimate ... --json`

`model` is a preset name (actmem.presets()), a path to a config.json, a config.json as a dict
(e.g. transformers' `model.config.to_dict()`) or as a JSON string. Options are the CLI's flags
as keywords (--seq-len 8192 is seq_len=8192, --sp is sp=True, --zero 3 is zero=3). Bad input
raises ValueError with the CLI's one-line message, options spelled as keywords ("tp=3: ...").
"""
import json as _json
import os as _os

from . import _native

__all__ = ["estimate", "explain", "explain_text", "serve", "generate", "plan", "presets", "training_options", "options",
           "serve_options", "machine_options", "plan_options"]


def _model(model):
    """(text, is_json, display_name) for the native layer; "" is no model (from_config gives it)."""
    if model is None:
        return "", False, ""
    if isinstance(model, dict):
        name = model.get("_name_or_path") or "config.json"
        return _json.dumps(model), True, str(name)
    if isinstance(model, _os.PathLike):
        return _os.fspath(model), False, ""
    if isinstance(model, str):
        if model.lstrip().startswith("{"):
            return model, True, "config.json"
        return model, False, ""
    raise ValueError(f"model {model!r}: give a preset name, a config.json path, dict or JSON string")


def _training(model, from_config):
    if model is None and from_config is None:
        raise ValueError("give a model (preset, config.json path, dict or JSON string) or from_config=")
    return (*_model(model), _os.fspath(from_config) if from_config is not None else "")


def estimate(model=None, *, from_config=None, **options):
    """Peak training memory per GPU, as `actmem estimate --json` prints it (a dict).
    from_config: a training config, as the CLI's --from reads it (a Megatron-LM script or argument
    line, a DeepSpeed JSON, a torchtitan TOML, an axolotl / LLaMA-Factory YAML); its settings come
    first, keywords override them, and the dict gains "config" (every setting with its source, warnings).
    The machine keywords (machine_options(): gpu="h100-80gb", gpu_memory="80GiB", cuda_context=, ...)
    add the fit verdict, dict["fit"], as `--gpu` does."""
    model, is_json, name, path = _training(model, from_config)
    return _json.loads(_native.estimate_json(model, is_json, name, options, path))


def explain(model=None, *, from_config=None, **options):
    """The same dict as `actmem explain --json` (its terms carry formula, values and bytes)."""
    return estimate(model, from_config=from_config, **options)


def explain_text(model=None, *, from_config=None, **options):
    """The derivation as `actmem explain` prints it: `label: formula = values = bytes` per term."""
    model, is_json, name, path = _training(model, from_config)
    return _native.explain_text(model, is_json, name, options, path)


def serve(model=None, *, from_config=None, **options):
    """Inference memory per GPU and, with gpu= or gpu_memory=, capacity: `actmem serve --json` as a dict.
    context_len is required, as --context-len is, unless from_config gives it.
    from_config: a `vllm serve` command line or script (vLLM 0.19), as the CLI's `serve --from` reads it;
    its settings come first, keywords override them, its model is served unless model= is given (no
    --max-model-len: the model's own max_model_len), and the dict gains "config" (every setting with
    its source, the environment, the warnings)."""
    if model is None and from_config is None:
        raise ValueError("give a model (preset, config.json path, dict or JSON string) or from_config=")
    path = _os.fspath(from_config) if from_config is not None else ""
    return _json.loads(_native.serve_json(*_model(model), options, path))


def generate(model, **options):
    """HF generate() on one GPU: `actmem serve --generate --json` as a dict. prompt_len= and new_tokens=
    are required; batch=, dtype=, attention= (eager, sdpa, flash) as the CLI's flags."""
    return _json.loads(_native.generate_json(*_model(model), options))


def plan(model, **options):
    """Which layout fits and runs fastest: `actmem plan --json` as a dict (its plan.search_ms is the
    search's own time and varies). Keywords as the CLI's flags: gpus=, gpu=, global_batch= or
    global_batch_tokens=, seq_len=, pins (tp=, pp=, zero=, recompute=, sp=True, ...), bounds (max_tp=,
    ...), top=, the machine keywords (machine_options()) and every workload keyword of estimate()
    (framework=, default "megatron" here; attention=, lora_rank=, loss=, ...: training_options()). When nothing fits, the dict has
    plan.fitting == 0 and plan.closest (the valid layout needing the least memory), as the CLI prints it."""
    return _json.loads(_native.plan_json(*_model(model), options))


def plan_options():
    """{keyword: help} for plan() (besides machine_options())."""
    return dict(_native.plan_options())


def presets():
    """The built-in model presets' names (`actmem models`)."""
    return list(_native.presets())


def training_options():
    """{keyword: help} for estimate() and explain()."""
    return dict(_native.training_options())


def options(**options):
    """The training option table (docs/options.md) as a list of dicts: name, kind, scope, group,
    frameworks, advanced, help, example, default, default_text, choices, min, max, and value: the
    option's value under the keywords given (options(tp=8)[...]["value"] == 8 for tp)."""
    return _json.loads(_native.options_json(options))


def machine_options():
    """{keyword: help} for the GPU a job runs on (estimate()'s fit verdict)."""
    return dict(_native.machine_options())


def serve_options():
    """{keyword: help} for serve()."""
    return dict(_native.serve_options())
