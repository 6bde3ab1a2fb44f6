"""actmem.plan() against `actmem plan --json`: the same dict for the same arguments (plan.search_ms, the
search's own wall time, aside), and the CLI's one-line errors as ValueError, options spelled as keywords.

Run by CTest (label python) with PYTHONPATH=build/python and ACTMEM_BINARY=build/actmem."""
import json

import pytest

import actmem
from test_actmem import as_keywords, cli, cli_flags

# (model, keywords): a free search, pins, and a job that fits nowhere (the answer is the closest layout).
CASES = [
    ("llama-3-8b", dict(gpus=16, gpu="h100-80gb", seq_len=8192, global_batch=64, framework="megatron")),
    ("llama-3-8b", dict(gpus=16, gpu="h100-80gb", global_batch_tokens=524288, tp=2, pp=2, recompute="selective",
                        top=3, max_micro_batch=4)),
    ("qwen2.5-7b", dict(gpus=8, gpu="a100-80gb", seq_len=4096, global_batch=32, framework="hf", zero=3, sp=False,
                        gpus_per_node=4, fragmentation=0.1)),
    ("llama-3-70b", dict(gpus=2, gpu="a100-40gb", global_batch=8)),
    # Workload keywords of the training option table (estimate's): a LoRA fine-tune under HF.
    ("llama-3-8b", dict(gpus=8, gpu="h100-80gb", global_batch=64, framework="hf", attention="sdpa", lora_rank=16,
                        top=2)),
]


def without_search_time(d):
    d = json.loads(json.dumps(d))
    d["plan"].pop("search_ms")
    return d


@pytest.mark.parametrize("model,options", CASES, ids=lambda c: c if isinstance(c, str) else ",".join(c))
def test_plan_equals_cli(model, options):
    code, out, err = cli("plan", "--model", model, *cli_flags(options), "--json")
    expected = json.loads(out)
    got = actmem.plan(model, **options)
    assert without_search_time(got) == without_search_time(expected)
    assert code == (0 if expected["plan"]["fitting"] > 0 else 2), err


def test_plan_values():
    # 524,288 tokens of 8,192 per sequence = 64 sequences; three layouts kept (top=3), all with the pins.
    p = actmem.plan("llama-3-8b", **CASES[1][1])["plan"]
    assert p["global_batch"] == 64 and p["gpus"] == 16 and p["gpu"] == "h100-80gb"
    assert len(p["layouts"]) == 3
    for layout in p["layouts"]:
        assert (layout["tp"], layout["pp"]) == (2, 2)
        assert layout["dp"] == 16 // (2 * 2 * layout["cp"])
        assert " --tp 2 " in layout["flags"] and " --pp 2 " in layout["flags"]
        assert layout["flags"].endswith(" --gpu h100-80gb")


def test_nothing_fits_gives_the_closest():
    # Llama-3-70B's bf16 weights alone are 2 x 70.6e9 bytes = 141 GB, more than two 40 GB A100s hold.
    p = actmem.plan("llama-3-70b", **CASES[3][1])["plan"]
    assert p["fitting"] == 0 and p["layouts"] == []
    assert p["closest"]["needed_bytes"] > p["capacity_bytes"]


@pytest.mark.parametrize("model,options", [
    ("llama-3-8b", dict(gpus=16, gpu="h100-80gbx", global_batch=64)),              # unknown GPU
    ("llama-3-8b", dict(gpus=16, gpu="h100-80gb")),                               # no global batch
    ("llama-3-8b", dict(gpus=16, gpu="h100-80gb", global_batch_tokens=100)),      # not a multiple of seq_len
    ("llama-3-8b", dict(gpu="h100-80gb", global_batch=64)),                       # no GPU count
    ("llama-3-8b", dict(gpus=16, gpu_memory="80GiB", global_batch=64)),           # no catalog speeds
    ("llama-3-8b", dict(gpus=16, gpu="h100-80gb", global_batch=64, framework="jax")),
    ("llama-3-8b", dict(gpus=16, gpu="h100-80gb", global_batch=64, recompute="most")),
    ("no-such-model", dict(gpus=16, gpu="h100-80gb", global_batch=64)),
])
def test_plan_errors_as_cli(model, options):
    code, out, err = cli("plan", "--model", model, *cli_flags(options), "--json")
    assert code == 2 and out == ""
    with pytest.raises(ValueError) as e:
        actmem.plan(model, **options)
    assert str(e.value) == as_keywords(err)


def test_plan_unknown_keyword():
    with pytest.raises(ValueError, match=r"^unknown option max_tpp; did you mean max_tp\?$"):
        actmem.plan("llama-3-8b", gpus=16, gpu="h100-80gb", global_batch=64, max_tpp=4)
    assert "max_tp" in actmem.plan_options() and "gpu" not in actmem.plan_options()
