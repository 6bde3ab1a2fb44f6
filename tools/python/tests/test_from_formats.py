"""from_config= with torchtitan TOML and axolotl / LLaMA-Factory YAML files: the same dict as the CLI's
`estimate --from FILE --json`, and the same one-line errors. Megatron scripts add Megatron-LM's own
theoretical memory report (megatron_theory), as the CLI does."""
import json
import os
import subprocess

import pytest

import actmem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BINARY = os.environ.get("ACTMEM_BINARY", os.path.join(ROOT, "build", "actmem"))
DATA = os.path.join(ROOT, "examples")


def cli(*args):
    p = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


FILES = ["torchtitan_llama3_8b.toml", "torchtitan_llama3_70b.toml", "torchtitan_llama3_405b.toml",
         "torchtitan_debug_model.toml", "axolotl_llama3_lora-8b.yml", "axolotl_llama3_qlora.yml",
         "llamafactory_llama3_lora_sft.yaml", "llamafactory_llama3_qlora_sft_otfq.yaml"]


@pytest.mark.parametrize("name", FILES)
def test_from_config_equals_cli(name):
    path = os.path.join(DATA, name)
    code, out, err = cli("estimate", "--from", path, "--dp", "8", "--json")
    assert code == 0, err
    got = actmem.estimate(from_config=path, dp=8)
    assert got == json.loads(out)
    assert got["config"]["format"] in ("torchtitan", "axolotl", "llama-factory")
    assert "megatron_theory" not in got


def test_megatron_theory_in_the_dict():
    path = os.path.join(DATA, "megatron_llama3_8b.sh")
    got = actmem.estimate(from_config=path)
    assert round(got["megatron_theory"]["weight_and_optimizer_mib"], 2) == 57438.81
    assert round(got["megatron_theory"]["activation_mib"], 2) == 38761.87


def test_errors_match_the_cli(tmp_path):
    bad = tmp_path / "job.toml"
    bad.write_text("[training]\nseq_len = 4096\nmicro_batch = 2\n")
    code, _, err = cli("estimate", "--from", str(bad))
    assert code == 2
    with pytest.raises(ValueError) as e:
        actmem.estimate(from_config=bad)
    assert str(e.value) == err.strip()[len("actmem: "):]
    assert 'unknown torchtitan key "training.micro_batch"' in str(e.value)


# The fit verdict: the machine keywords are the CLI's fit flags (machine_options()).
FIT_CASES = [
    ("llama-3-8b", dict(dp=8), dict(gpu="h100-80gb")),
    ("llama-3-70b", dict(seq_len=8192), dict(gpu="h100-80gb")),  # does not fit: "changes" too
    ("llama-3-8b", dict(dp=8, zero=1), dict(gpu_memory="40GiB", fragmentation=0.1, cuda_context="1GiB",
                                             nccl_per_group="128MiB")),
]


@pytest.mark.parametrize("case", range(len(FIT_CASES)))
def test_fit_keywords_equal_cli(case):
    model, options, machine = FIT_CASES[case]
    flags = []
    for k, v in {**options, **machine}.items():
        flags += ["--" + k.replace("_", "-"), str(v)]
    code, out, err = cli("estimate", "--model", model, *flags, "--json")
    assert code == 0, err
    got = actmem.estimate(model, **options, **machine)
    assert got == json.loads(out)
    assert "fit" in got and got["fit"]["capacity_bytes"] > 0
    if case == 1:
        assert got["fit"]["fits"] is False and got["fit"]["changes"]


def test_fit_with_from_config_equals_cli():
    path = os.path.join(DATA, "megatron_llama3_8b.sh")
    code, out, err = cli("estimate", "--from", path, "--gpu", "h200-141gb", "--json")
    assert code == 0, err
    got = actmem.estimate(from_config=path, gpu="h200-141gb")
    assert got == json.loads(out)
    assert got["config"]["format"] == "megatron" and "megatron_theory" in got and "fit" in got


def test_fit_errors_match_the_cli():
    code, _, err = cli("estimate", "--model", "llama-3-8b", "--gpu-memory", "lots", "--json")
    assert code == 2
    with pytest.raises(ValueError) as e:
        actmem.estimate("llama-3-8b", gpu_memory="lots")
    assert str(e.value).replace("gpu_memory", "--gpu-memory") == err.strip()[len("actmem: "):]


def test_training_arguments_json_equals_cli():
    # TrainingArguments.to_json_string() as tyronechen/genomenlp publishes it (examples/README.md): no
    # model and no sequence length in it, so both come as keywords / flags.
    path = os.path.join(DATA, "hf_training_args_genomenlp.json")
    code, out, err = cli("estimate", "--from", path, "--model", "gpt2", "--seq-len", "512", "--json")
    assert code == 0, err
    got = actmem.estimate("gpt2", from_config=path, seq_len=512)
    assert got == json.loads(out)
    assert got["config"]["format"] == "hf-trainer"
    assert got["inputs"]["micro_batch"] == 16
