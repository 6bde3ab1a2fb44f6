#!/usr/bin/python3
"""Self-test of compare_results.py on a results file made on the CPU (no GPU, no transformers).

  /usr/bin/python3 validation/gpu/test_compare_results.py --actmem build/actmem

measure_hf.py --reference runs the GPU script's own measurement code (measure_step: saved-tensor
hooks, regions, the results layout) on validation/models.py's reference models at s = 32, for a
dense Llama (sdpa), a GPT-2 with dropout (eager), a Mixtral under transformers 5's grouped_mm and a
BERT classifier. Then:

  * compare_results passes on that file: the reference models are the ones the CPU validation
    holds actmem to within 1 %, so the measured side and actmem's side must agree here too;
  * check_case fails a per-layer or total figure 3 % off and passes one 0.5 % off; fails a CUDA
    forward figure 3 % off and passes one within 1 % + 256 KiB; fails a step peak 5 % above
    actmem's bound and passes one below it; fails gradients 5 % off; fails a parameter count one
    off; leaves the hooks of a recomputed case alone;
  * a case recorded with an error is listed and not counted, a command line actmem refuses fails,
    a file of another format fails, and an empty results folder says "no GPU results committed";
  * the script's HF path (model build, layer hooks for the regions, the flash_attn skip, an error
    case, full recomputation without hooks, the time guard) runs on the CPU with stand_in/transformers
    (validation/models.py's Llama and Mixtral behind transformers' calls) and its results pass too.
"""
import argparse
import contextlib
import copy
import glob
import io
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_results as cr  # noqa: E402

CASES = ["llama-sdpa", "gpt2-eager-drop", "mixtral-sdpa", "bert_cls-eager"]


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def expect(self, what, ok):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        self.passed += bool(ok)
        self.failed += not ok


def run_main(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cr.main(argv)
    return rc, out.getvalue()


def names_failing(checks):
    return {name for name, ok, _ in checks if not ok}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actmem", required=True)
    args = parser.parse_args()
    t = Checks()
    with tempfile.TemporaryDirectory(prefix="actmem-gpu-selftest-") as d:
        cmd = [sys.executable, os.path.join(HERE, "measure_hf.py"), "--reference", "--out", d, "--seq-len", "32",
               "--actmem", args.actmem] + [x for c in CASES for x in ("--case", c)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        print(proc.stdout, proc.stderr, sep="")
        files = glob.glob(os.path.join(d, "*.json"))
        t.expect("measure_hf.py --reference wrote one results file", proc.returncode == 0 and len(files) == 1)
        if len(files) != 1:
            print(f"{t.passed} passed, {t.failed} failed")
            return 1
        with open(files[0]) as f:
            results = json.load(f)
        measured = [r for r in results["cases"] if "error" not in r]
        t.expect(f"all {len(CASES)} reference cases measured", len(measured) == len(CASES))
        t.expect("actmem's figures recorded beside the measured ones",
                 all("per_layer_bytes" in r.get("actmem", {}) for r in measured))

        rc, text = run_main(["--actmem", args.actmem, files[0]])
        print(text)
        t.expect("compare_results passes on the reference results", rc == 0 and f"{len(CASES)} passed, 0 failed" in text)

        # check_case on the real figures, then perturbed ones
        work = os.path.join(d, "work")
        record = next(r for r in measured if r["case"] == "llama-sdpa")
        figures = cr.actmem_figures(args.actmem, record["hf_config"], record["actmem_args"], work)
        t.expect("actmem_figures reads activations, memory and params",
                 all(k in figures for k in ("per_layer_bytes", "total_bytes", "gradients_bytes", "transient_bytes", "params")))

        def perturbed(change):
            r = copy.deepcopy(record)
            change(r)
            return names_failing(cr.check_case(r, figures))

        def scale(key, factor):
            return lambda r: r["measured"]["hooks"].__setitem__(key, round(r["measured"]["hooks"][key] * factor))

        t.expect("unchanged: no check fails", perturbed(lambda r: None) == set())
        t.expect("per layer 3 % high fails 'hooks per layer'", perturbed(scale("per_layer_bytes", 1.03)) == {"hooks per layer"})
        t.expect("per layer 0.5 % low passes", perturbed(scale("per_layer_bytes", 0.995)) == set())
        t.expect("total 3 % low fails 'hooks total'", perturbed(scale("total_bytes", 0.97)) == {"hooks total"})

        bound = figures["gradients_bytes"] + figures["total_bytes"] + figures["transient_bytes"]

        def cuda(forward, peak, grads=figures["gradients_bytes"]):
            return lambda r: r["measured"].__setitem__("cuda", {"before_bytes": 0, "forward_delta_bytes": forward,
                                                                 "peak_delta_bytes": peak, "after_backward_delta_bytes": grads})  # fmt: skip

        total = figures["total_bytes"]
        t.expect("CUDA forward within 1 % + 256 KiB passes, peak under the bound passes",
                 perturbed(cuda(total + 200 * 1024, int(bound * 0.9))) == set())
        t.expect("CUDA forward 3 % above actmem fails 'forward'", perturbed(cuda(round(total * 1.03) + 300 * 1024, bound)) == {"forward"})
        t.expect("step peak 5 % above actmem's bound fails 'peak'", perturbed(cuda(total, round(bound * 1.05) + (2 << 20))) == {"peak"})
        t.expect("gradients left after backward 5 % above actmem fails 'gradients'",
                 perturbed(cuda(total, bound, round(figures["gradients_bytes"] * 1.05) + (2 << 20))) == {"gradients"})
        t.expect("a parameter count one off fails 'params'",
                 perturbed(lambda r: r["measured"].__setitem__("params", figures["params"] + 1)) == {"params"})
        t.expect("the right parameter count passes",
                 perturbed(lambda r: r["measured"].__setitem__("params", figures["params"])) == set())

        def recomputed(r):
            r["recompute"] = "full"
            r["measured"]["hooks"]["per_layer_bytes"] *= 2

        t.expect("hooks of a recomputed case are not compared (checkpoints hide their inputs)", perturbed(recomputed) == set())

        # whole-file behaviour: an error case, a refused command line, another format, no files
        broken = copy.deepcopy(results)
        broken["cases"][0] = {"case": "x-error", "error": "ValueError: flash_attention_2 not supported"}
        flags = broken["cases"][1]["actmem_args"]
        flags[flags.index("--attention") + 1] = "bogus"  # a value actmem refuses
        path = os.path.join(d, "broken.json")
        with open(path, "w") as f:
            json.dump(broken, f)
        rc, text = run_main(["--actmem", args.actmem, path])
        print(text)
        t.expect("an error case is listed, not counted; a refused command line fails",
                 rc == 1 and "x-error" in text and "not measured" in text and "actmem refused" in text
                 and f"{len(CASES) - 2} passed, 1 failed" in text)  # fmt: skip
        broken["format"] = cr.FORMAT + 1
        with open(path, "w") as f:
            json.dump(broken, f)
        rc, text = run_main(["--actmem", args.actmem, path])
        t.expect("a results file of another format fails", rc == 1 and "results format" in text)
        # the HF path itself (build_hf, layer hooks, skips, errors, time guard, results file), with
        # stand_in/transformers in place of transformers, on the CPU
        hf_dir = os.path.join(d, "hf")
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "stand_in"))
        hf_cases = ["llama-sdpa", "llama-eager", "llama-flash", "mixtral-sdpa", "llama-sdpa-full", "gpt2-sdpa"]
        cmd = [sys.executable, os.path.join(HERE, "measure_hf.py"), "--device", "cpu", "--out", hf_dir, "--seq-len", "32",
               "--actmem", args.actmem] + [x for c in hf_cases for x in ("--case", c)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        print(proc.stdout, proc.stderr, sep="")
        hf_files = glob.glob(os.path.join(hf_dir, "*.json"))
        t.expect("measure_hf.py's HF path ran with the stand-in", proc.returncode == 0 and len(hf_files) == 1)
        if hf_files:
            with open(hf_files[0]) as f:
                hf = json.load(f)
            by_name = {r["case"]: r for r in hf["cases"]}
            t.expect("flash_attention_2 skipped without flash_attn, and said so",
                     [x["case"] for x in hf["skipped"]] == ["llama-flash"] and "flash_attn" in hf["skipped"][0]["why"])
            t.expect("a model transformers cannot build is recorded as an error", "error" in by_name.get("gpt2-sdpa", {}))
            full = by_name.get("llama-sdpa-full", {})
            t.expect("full recomputation: checkpointing on, no hooks (checkpoints hide their inputs)",
                     full.get("effective", {}).get("gradient_checkpointing") is True and "hooks" not in full.get("measured", {"hooks": 1}))
            sdpa = by_name.get("llama-sdpa", {})
            t.expect("layer hooks mark the regions: 3 layers, embedding and head",
                     {"layer 0", "layer 1", "layer 2", "embedding", "head"} <= set(sdpa.get("measured", {}).get("hooks", {}).get("regions", {})))
            rc, text = run_main(["--actmem", args.actmem, hf_files[0]])
            print(text)
            t.expect("compare_results passes on the stand-in HF results", rc == 0 and "4 passed, 0 failed" in text)
        proc = subprocess.run(cmd + ["--budget-s", "0"], capture_output=True, text=True, timeout=600, env=env)
        newest = max(glob.glob(os.path.join(hf_dir, "*.json")), key=os.path.getmtime)
        with open(newest) as f:
            guarded = json.load(f)
        t.expect("time guard 0 s: no case started, every one listed as not run",
                 proc.returncode == 0 and guarded["cases"] == [] and len(guarded["not_run"]) == len(hf_cases) - 1)

        empty = os.path.join(d, "empty")
        os.makedirs(empty)
        rc, text = run_main(["--actmem", args.actmem, "--results-dir", empty])
        print(text)
        t.expect("no results files: 'no GPU results committed', exit 0", rc == 0 and "no GPU results committed" in text)
    print(f"{t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
