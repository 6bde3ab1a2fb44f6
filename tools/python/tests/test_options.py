"""Every option of the library's table reaches Python as a keyword, and the CLI as a flag, with the
same result: the table walked, each option set to its example value through actmem.options(**kw)
and `actmem options --json --FLAG VALUE`, the value read back through the table compared.

Run by CTest (label python) with PYTHONPATH=build/python and ACTMEM_BINARY=build/actmem."""
import json
import os
import subprocess

import pytest

import actmem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BINARY = os.environ.get("ACTMEM_BINARY", os.path.join(ROOT, "build", "actmem"))

TABLE = actmem.options()


def typed(option):
    """The example as a Python keyword value: a flag is True, a count an int, a real a float."""
    example = option["example"]
    if option["kind"] == "flag":
        return True
    if option["kind"] == "count":
        return int(example)
    if option["kind"] == "real":
        return float(example)
    return example  # text, size


def cli_value(option):
    flag = "--" + option["name"].replace("_", "-")
    args = [flag] if option["kind"] == "flag" else [flag, option["example"]]
    p = subprocess.run([BINARY, "options", "--json", *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return next(o for o in json.loads(p.stdout) if o["name"] == option["name"])["value"]


def test_table_is_every_training_keyword():
    assert [o["name"] for o in TABLE] == list(actmem.training_options())
    assert len(TABLE) >= 62


@pytest.mark.parametrize("option", TABLE, ids=[o["name"] for o in TABLE])
def test_option_arrives_through_python_and_cli(option):
    value = next(o for o in actmem.options(**{option["name"]: typed(option)}) if o["name"] == option["name"])["value"]
    assert value is not None
    assert value != option["default"], "the example must differ from the default"
    assert value == cli_value(option)


def test_an_option_reaches_the_estimate():
    """The keyword the table names is the one estimate() takes: the JSON echo agrees."""
    r = actmem.estimate("llama-3-8b", seq_len=1024, tp=2, recompute="full", optimizer="adafactor")
    assert r["inputs"]["seq_len"] == 1024 and r["inputs"]["tp"] == 2 and r["inputs"]["recompute"] == "full"


def test_help_names_keywords():
    assert "@" not in "".join(actmem.training_options().values())
    assert actmem.training_options()["zero"].startswith("ZeRO stage over dp")
