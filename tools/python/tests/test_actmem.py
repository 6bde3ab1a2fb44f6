"""The Python module against the CLI it must agree with: the same dicts as `--json` for every preset,
the same one-line errors (options spelled as keywords), models as preset, path, dict or JSON text.

Run by CTest (label python) with PYTHONPATH=build/python and ACTMEM_BINARY=build/actmem."""
import json
import os
import re
import subprocess

import pytest

import actmem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BINARY = os.environ.get("ACTMEM_BINARY", os.path.join(ROOT, "build", "actmem"))
CONFIGS = os.path.join(ROOT, "tests", "data", "configs")


def cli(*args):
    """(exit code, stdout, stderr) of the real CLI."""
    p = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def cli_flags(options):
    """Keyword options as the CLI's flags: seq_len=8192 -> --seq-len 8192, sp=True -> --sp."""
    out = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not False:
            out += [flag, str(value)]
    return out


def as_keywords(cli_message):
    """The CLI's message as the module words it: `--tp 3` -> `tp=3`, `--gpu 'x'` -> `gpu='x'`, other `--x-y` -> `x_y`."""
    text = cli_message.strip()
    assert text.startswith("actmem: ")
    text = text[len("actmem: "):]
    text = re.sub(r"--([a-z][a-z-]*) (?=-?[0-9]|')", lambda m: m.group(1).replace("-", "_") + "=", text)
    return re.sub(r"--([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"), text)


def cli_presets():
    code, out, _ = cli("models", "--json")
    assert code == 0
    return [p["name"] for p in json.loads(out)]


PRESETS = cli_presets()

# Two layouts per preset: the CLI's defaults, and a parallel job with most options set. Where the
# CLI refuses one (e.g. TP 2 for a model with an odd head count), the module must refuse it alike.
TRAINING_CASES = [
    {},
    dict(seq_len=4096, micro_batch=2, framework="megatron", attention="flash", recompute="selective", tp=2, sp=True,
         pp=2, dp=4, zero=1, optimizer="adamw", grad_dtype="fp32", reserve="1GiB"),
]


def test_presets_match_the_cli():
    assert actmem.presets() == PRESETS
    assert "llama-3-70b" in PRESETS and len(PRESETS) >= 20


@pytest.mark.parametrize("case", range(len(TRAINING_CASES)))
@pytest.mark.parametrize("preset", PRESETS)
def test_estimate_equals_cli_json(preset, case):
    options = TRAINING_CASES[case]
    code, out, err = cli("estimate", "--model", preset, *cli_flags(options), "--json")
    if code == 0:
        assert actmem.estimate(preset, **options) == json.loads(out)
        assert actmem.explain(preset, **options) == json.loads(out)
    else:
        assert code == 2
        with pytest.raises(ValueError) as e:
            actmem.estimate(preset, **options)
        assert str(e.value) == as_keywords(err)


# Frozen layers (with the embedding) and gradient accumulation (policies/frozen_layers.h, grad_accum.h).
@pytest.mark.parametrize("options", [dict(frozen_layers=2, freeze_embeddings=True, grad_accum=4),
                                     dict(frozen_layers=1, grad_accum=2, loss="fused-linear-ce", recompute="full")])
def test_frozen_layers_and_grad_accum_equal_cli_json(options):
    code, out, err = cli("estimate", "--model", "llama-3-8b", *cli_flags(options), "--json")
    assert code == 0, err
    assert actmem.estimate("llama-3-8b", **options) == json.loads(out)


SERVE_CASES = [dict(context_len=1024), dict(context_len=8192, batch=4, gpu="h100-80gb")]


@pytest.mark.parametrize("case", range(len(SERVE_CASES)))
@pytest.mark.parametrize("preset", PRESETS)
def test_serve_equals_cli_json(preset, case):
    options = SERVE_CASES[case]
    code, out, err = cli("serve", "--model", preset, *cli_flags(options), "--json")
    if code == 0 or case == 0:  # every preset serves 1024 tokens
        assert code == 0, err
        assert actmem.serve(preset, **options) == json.loads(out)
    else:
        assert code == 2
        with pytest.raises(ValueError) as e:
            actmem.serve(preset, **options)
        assert str(e.value) == as_keywords(err)


def test_serve_quantized_with_custom_memory_equals_cli():
    options = dict(context_len=32768, batch=2, tp=2, weight_dtype="int4", quant_group_size=128, kv_dtype="fp8",
                   gpu_memory="79.2GiB", gpu_memory_utilization=0.85, non_torch_memory="1GiB")
    code, out, err = cli("serve", "--model", "llama-3.1-70b", *cli_flags(options), "--json")
    assert code == 0, err
    assert actmem.serve("llama-3.1-70b", **options) == json.loads(out)


def test_explain_text_equals_cli():
    options = dict(seq_len=2048, tp=4, sp=True, recompute="full", checkpoint_every=2, framework="megatron")
    code, out, _ = cli("explain", "--model", "llama-2-7b", *cli_flags(options))
    assert code == 0
    assert actmem.explain_text("llama-2-7b", **options) == out


def test_llama_3_8b_parameter_count():
    # Meta's model card and HF's safetensors index: Llama-3-8B has 8,030,261,248 parameters.
    r = actmem.estimate("llama-3-8b", seq_len=1024)
    assert r["params"]["total"] == 8030261248


CONFIG_FILES = sorted(f for f in os.listdir(CONFIGS) if f.endswith(".json"))


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_model_as_path_dict_or_json_text(name):
    path = os.path.join(CONFIGS, name)
    options = dict(seq_len=2048, micro_batch=2)
    code, out, err = cli("estimate", "--model", path, *cli_flags(options), "--json")
    assert code == 0, err
    expected = json.loads(out)
    assert actmem.estimate(path, **options) == expected
    with open(path) as f:
        text = f.read()
    config = json.loads(text)
    for model in (config, text):
        got = actmem.estimate(model, **options)
        assert got["model"].pop("name") in ("config.json", config.get("_name_or_path"))
        want = json.loads(out)
        want["model"].pop("name")
        assert got == want


def test_dict_model_is_named_by_name_or_path():
    with open(os.path.join(CONFIGS, "qwen2-0.5b.json")) as f:
        config = json.load(f)
    config["_name_or_path"] = "Qwen/Qwen2-0.5B"  # as transformers' model.config.to_dict() carries it
    assert actmem.estimate(config, seq_len=512)["model"]["name"] == "Qwen/Qwen2-0.5B"


# Bad input: the CLI's message, options spelled as keywords.
BAD_TRAINING = [
    dict(tp=3),                         # 64 heads are not divisible by 3
    dict(seq_len=0),
    dict(recompute="fulll"),
    dict(dtype="fp7"),
    dict(zero=4),
    dict(sp=True),                      # sequence parallelism without TP
    dict(attention="eager", cp=2),
    dict(reserve="2GX"),
    dict(hidden_dropout=1.5),
    dict(frozen_layers=81),             # Llama-3-70B has 80 layers
    dict(grad_accum=4, pp=2),           # with a pipeline: num_micro_batches
]


@pytest.mark.parametrize("options", BAD_TRAINING, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_bad_training_input_raises_the_cli_message(options):
    code, out, err = cli("estimate", "--model", "llama-3-70b", *cli_flags(options), "--json")
    assert code == 2 and out == ""
    with pytest.raises(ValueError) as e:
        actmem.estimate("llama-3-70b", **options)
    assert str(e.value) == as_keywords(err)
    assert "--" not in str(e.value)


def test_tp_message_reads_as_a_keyword():
    with pytest.raises(ValueError, match=r"^tp=3: num_attention_heads \(64\) is not divisible by 3"):
        actmem.estimate("llama-3-70b", tp=3)


BAD_SERVE = [
    dict(context_len=8192, kv_dtype="fp5"),
    dict(context_len=8192, tp=3),
    dict(context_len=8192, gpu="h100-80gb", gpu_memory="80GiB"),
    dict(context_len=8192, gpu_memory="80"),
    dict(context_len=8192, gpu="h1000"),
    dict(context_len=8192, gpu_memory_utilization=1.5),
    dict(context_len=0),
]


@pytest.mark.parametrize("options", BAD_SERVE, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_bad_serve_input_raises_the_cli_message(options):
    code, out, err = cli("serve", "--model", "llama-3-8b", *cli_flags(options), "--json")
    assert code == 2 and out == ""
    with pytest.raises(ValueError) as e:
        actmem.serve("llama-3-8b", **options)
    assert str(e.value) == as_keywords(err)


def test_unknown_keyword_is_named_with_a_suggestion():
    with pytest.raises(ValueError, match=r"^unknown option seqlen; did you mean seq_len\?$"):
        actmem.estimate("llama-3-8b", seqlen=4096)
    with pytest.raises(ValueError, match=r"^unknown option contextlen; did you mean context_len\?$"):
        actmem.serve("llama-3-8b", contextlen=4096)


def test_wrong_value_types():
    with pytest.raises(ValueError, match=r"^tp='8': expected a whole number$"):
        actmem.estimate("llama-3-8b", tp="8")
    with pytest.raises(ValueError, match=r"^sp=1: expected true or false$"):
        actmem.estimate("llama-3-8b", tp=2, sp=1)
    with pytest.raises(ValueError, match=r"^tp=2.0: expected a whole number$"):
        actmem.estimate("llama-3-8b", tp=2.0)
    with pytest.raises(ValueError, match=r"^tp \[8\]: expected a number, True/False or a string$"):
        actmem.estimate("llama-3-8b", tp=[8])
    with pytest.raises(ValueError):
        actmem.estimate("llama-3-8b", seq_len=2**70)


def test_serve_needs_context_len():
    with pytest.raises(ValueError, match=r"^serve needs context_len"):
        actmem.serve("llama-3-8b")


def test_unknown_model():
    code, _, err = cli("estimate", "--model", "lama-3-8b", "--json")
    assert code == 2
    with pytest.raises(ValueError) as e:
        actmem.estimate("lama-3-8b")
    assert str(e.value) == as_keywords(err)


def test_option_tables_list_the_cli_flags():
    # Every estimate flag of the CLI but --model/--params/--json/--from/--timeline is a keyword, and no more:
    # the training options, and the fit verdict's machine (--gpu and its allowances, the planner's machine).
    _, help_text, _ = cli("estimate", "--help")
    fit = {"gpu", "gpu-memory", "cuda-context", "nccl-per-group", "fragmentation", "gpus-per-node",
           "inter-node-bandwidth", "compute-efficiency", "collective-efficiency"}
    own = {"help", "model", "params", "json", "from", "timeline"}  # the CLI's own inputs and outputs
    flags = set(re.findall(r"^ {2}--([a-z0-9-]+)", help_text, re.M)) - own - fit
    assert set(actmem.training_options()) == {f.replace("-", "_") for f in flags}
    assert set(actmem.machine_options()) == {f.replace("-", "_") for f in fit}
    _, help_text, _ = cli("serve", "--help")
    flags = set(re.findall(r"^ {2}--([a-z0-9-]+)", help_text, re.M)) - {"help", "model", "json", "explain", "from"}
    # --generate and its own flags are actmem.generate()'s keywords (with batch, dtype, attention).
    generate_only = {"generate", "prompt-len", "new-tokens"}
    assert set(actmem.serve_options()) == {f.replace("-", "_") for f in flags - generate_only}
    assert generate_only <= flags


# HF generate() (serve --generate): the same dict as the CLI, and its errors as ValueError.
def test_generate_equals_the_cli():
    for kw, args in (({"prompt_len": 4096, "new_tokens": 512}, ["--prompt-len", "4096", "--new-tokens", "512"]),
                     ({"prompt_len": 2048, "new_tokens": 64, "batch": 4, "attention": "eager"},
                      ["--prompt-len", "2048", "--new-tokens", "64", "--batch", "4", "--attention", "eager"])):
        code, out, err = cli("serve", "--model", "llama-3-8b", "--generate", *args, "--json")
        assert code == 0, err
        assert actmem.generate("llama-3-8b", **kw) == json.loads(out)
    with pytest.raises(ValueError):
        actmem.generate("llama-3-8b", prompt_len=0, new_tokens=1)
    with pytest.raises(ValueError):
        actmem.generate("llama-3-8b", prompt_len=16, new_tokens=1, context_len=8)


TRAINING_FILES = [os.path.join(ROOT, "examples", f)
                  for f in ("megatron_gpt3_175b.sh", "megatron_llama3_8b.sh")]


@pytest.mark.parametrize("name", ["deepspeed_zero3_offload.json", "deepspeed_zero2_auto.json"])
def test_deepspeed_config_with_model_equals_cli(name):
    path = os.path.join(ROOT, "examples", name)
    code, out, err = cli("estimate", "--from", path, "--model", "llama-3-8b", "--dp", "8", "--seq-len", "2048", "--json")
    assert code == 0, err
    got = actmem.estimate("llama-3-8b", from_config=path, dp=8, seq_len=2048)
    assert got == json.loads(out)
    assert got["config"]["format"] == "deepspeed"
    assert got["inputs"]["offload_optimizer"] is True


@pytest.mark.parametrize("path", TRAINING_FILES, ids=os.path.basename)
def test_from_config_equals_cli_from(path):
    code, out, err = cli("estimate", "--from", path, "--json")
    assert code == 0, err
    got = actmem.estimate(from_config=path)
    assert got == json.loads(out)
    assert got["config"]["format"] == "megatron"
    # Keywords override the file, as flags do after --from.
    code, out, err = cli("estimate", "--from", path, "--recompute", "selective", "--micro-batch", "2", "--json")
    assert code == 0, err
    got = actmem.estimate(from_config=path, recompute="selective", micro_batch=2)
    want = json.loads(out)
    # The echo names the front end: the command line's flags there, the keywords here.
    for settings in (got["config"]["settings"], want["config"]["settings"]):
        for s in settings:
            if s["option"] == "micro_batch":
                s["source"] = s["source"].replace("the command line (--micro-batch 2)", "the keywords (micro_batch=2)")
            if s["option"] == "recompute":
                s["source"] = s["source"].replace("the command line (--recompute selective)",
                                                  "the keywords (recompute='selective')")
    mb = [s for s in got["config"]["settings"] if s["option"] == "micro_batch"]
    assert mb and mb[0]["value"] == 2 and mb[0]["source"].startswith("the keywords (micro_batch=2), over ")
    assert got == want
    assert got["inputs"]["recompute"] == "selective" and got["inputs"]["micro_batch"] == 2


def test_from_config_settings_name_their_source():
    r = actmem.estimate(from_config=TRAINING_FILES[1])
    tp = [s for s in r["config"]["settings"] if s["option"] == "dp"]
    assert tp == [{"option": "dp", "value": 8,
                   "source": "8 GPUs / (tp 1 x pp 1 x cp 1) from --nproc-per-node 8 (%s:29), --nnodes 1 (%s:29)"
                             % (TRAINING_FILES[1], TRAINING_FILES[1])}]
    assert any(w.startswith("--overlap-grad-reduce") for w in r["config"]["warnings"])


def test_from_config_errors(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 1000 --frobnicate 3\n")
    code, _, err = cli("estimate", "--from", str(bad))
    assert code == 2
    with pytest.raises(ValueError) as e:
        actmem.estimate(from_config=bad)
    assert str(e.value) == err.strip()[len("actmem: "):]  # the file's own flags stay as written
    assert "unknown Megatron-LM argument --frobnicate" in str(e.value)
    with pytest.raises(ValueError, match="give a model"):
        actmem.estimate()


def test_serve_from_vllm_line_equals_cli_from(tmp_path):
    """from_config= with a `vllm serve` line: the dict of `actmem serve --from FILE --json`; keywords override it."""
    line = tmp_path / "serve.sh"
    line.write_text("export VLLM_USE_FLASHINFER_SAMPLER=1\nvllm serve %s \\\n  --tensor-parallel-size 2 --max-model-len 4k "
                    "--enable-lora --port 8000\n" % os.path.join(CONFIGS, "qwen2-0.5b.json"))
    code, out, err = cli("serve", "--from", str(line), "--json")
    assert code == 0, err
    got = actmem.serve(from_config=line)
    assert got == json.loads(out)
    assert got["context_len"] == 4000 and got["config"]["format"] == "vllm"
    assert any(w.startswith("--enable-lora (%s:3): not modelled" % line) for w in got["config"]["warnings"])
    code, out, err = cli("serve", "--from", str(line), "--tp", "1", "--gpu", "h100-80gb", "--json")
    assert code == 0, err
    got = actmem.serve(from_config=line, tp=1, gpu="h100-80gb")
    want = json.loads(out)
    for settings in (got["config"]["settings"], want["config"]["settings"]):
        for s in settings:
            s["source"] = s["source"].replace("the command line (--tp 1)", "the keywords (tp=1)")
    assert got == want
    tp = [s for s in got["config"]["settings"] if s["option"] == "tp"]
    assert tp == [{"option": "tp", "value": 1,
                   "source": "the keywords (tp=1), over 2 <- --tensor-parallel-size 2 (%s:3)" % line}]


def test_serve_from_vllm_line_errors(tmp_path):
    typo = tmp_path / "typo.sh"
    typo.write_text("vllm serve %s --tensor-paralel-size 2\n" % os.path.join(CONFIGS, "qwen2-0.5b.json"))
    code, _, err = cli("serve", "--from", str(typo))
    assert code == 2
    with pytest.raises(ValueError) as e:
        actmem.serve(from_config=typo)
    assert str(e.value) == err.strip()[len("actmem: "):]
    assert "did you mean --tensor-parallel-size?" in str(e.value)
    with pytest.raises(ValueError, match="give a model"):
        actmem.serve()
