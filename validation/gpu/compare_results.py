#!/usr/bin/env python3
"""Hold the current actmem build to every committed GPU measurement (validation/gpu/results/*.json).

  python3 validation/gpu/compare_results.py --actmem build/actmem [FILE.json ...]

With no files named it reads validation/gpu/results/*.json; when there are none it says so
("no GPU results committed") and exits 0. For every case measured without an error it runs
`actmem estimate --model <the case's config.json> <the case's flags> --json` (the flags and the
config measure_hf.py recorded, so a case is recomputed with today's build) and checks:

  hooks      recompute none: activations.per_layer_bytes and total_bytes against the saved-tensor
             bytes (middle layer; whole model) within HOOKS_TOL (1 %, as validation/run_validation.py)
  forward    the CUDA memory the forward left allocated against activations.total_bytes within
             FORWARD_TOL (1 %) + FORWARD_SLACK (256 KiB: the allocator's 512-byte rounding of each
             saved tensor, the loss scalar); every case with CUDA figures, recomputation included
  peak       the step's max_memory_allocated above the weights is at most actmem's gradients +
             activations + transients, times 1 + PEAK_TOL (2 %) + PEAK_SLACK (1 MiB): actmem's peak
             is meant as an upper bound (all gradients and all activations at once)
  gradients  the memory left allocated after backward (the gradients, activations freed) against
             memory.gradients_bytes within GRAD_TOL (1 %) + GRAD_SLACK (1 MiB)
  params     the model's parameter count equals params.total

Exit status 1 when a check fails or actmem refuses a recorded command line. A results file of
source "reference" (measure_hf.py --reference: validation/models.py on the CPU, no CUDA figures) is
checked the same way, hooks and params only; test_compare_results.py uses one.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = 1  # results file layout (measure_hf.py writes it)
HOOKS_TOL = 0.01
FORWARD_TOL, FORWARD_SLACK = 0.01, 256 * 1024
PEAK_TOL, PEAK_SLACK = 0.02, 1 << 20
GRAD_TOL, GRAD_SLACK = 0.01, 1 << 20


def actmem_version(actmem):
    """`actmem --version`, or None when the binary is missing or does not run here."""
    try:
        proc = subprocess.run([actmem, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout.strip() or "unknown") if proc.returncode == 0 else None


def actmem_figures(actmem, config, args, workdir):
    """Runs `actmem estimate --model CONFIG ARGS` (ARGS include --json) on the config dict; returns
    the figures compared here, or {"error": text} when actmem refuses or fails."""
    os.makedirs(workdir, exist_ok=True)
    fd, path = tempfile.mkstemp(suffix=".json", dir=workdir)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f, indent=1)
    cmd = [actmem, "estimate", "--model", path] + list(args)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{' '.join(cmd)}: {e}"}
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        return {"error": f"{' '.join(cmd)}\nexit {proc.returncode}: {proc.stderr.strip()}"}
    try:
        d = json.loads(proc.stdout)
        return {
            "per_layer_bytes": int(d["activations"]["per_layer_bytes"]),
            "total_bytes": int(d["activations"]["total_bytes"]),
            "weights_bytes": int(d["memory"]["weights_bytes"]),
            "gradients_bytes": int(d["memory"]["gradients_bytes"]),
            "transient_bytes": int(d["memory"]["transient_bytes"]),
            "params": int(d["params"]["total"]),
        }
    except (ValueError, KeyError, TypeError) as e:
        return {"error": f"{' '.join(cmd)}: unreadable JSON ({e!r})"}


def _rel(estimated, measured):
    return (estimated - measured) / measured if measured else float(estimated != 0)


def check_case(record, figures):
    """The checks of one measured case against actmem's figures: a list of (name, ok, text)."""
    checks = []
    measured = record["measured"]
    hooks, cuda = measured.get("hooks"), measured.get("cuda")
    if hooks is not None and record["recompute"] == "none":
        for key, label in (("per_layer_bytes", "per layer"), ("total_bytes", "total")):
            err = _rel(figures[key], hooks[key])
            checks.append((f"hooks {label}", abs(err) <= HOOKS_TOL,
                           f"saved {hooks[key]} B, actmem {figures[key]} B ({100 * err:+.2f} %, tolerance ±{100 * HOOKS_TOL:g} %)"))  # fmt: skip
    if cuda is not None:
        delta, est = cuda["forward_delta_bytes"], figures["total_bytes"]
        ok = abs(est - delta) <= FORWARD_TOL * delta + FORWARD_SLACK
        checks.append(("forward", ok, f"allocated after forward {delta} B, actmem {est} B ({100 * _rel(est, delta):+.2f} %, "
                                      f"tolerance ±{100 * FORWARD_TOL:g} % + {FORWARD_SLACK // 1024} KiB)"))  # fmt: skip
        bound = figures["gradients_bytes"] + figures["total_bytes"] + figures["transient_bytes"]
        peak = cuda["peak_delta_bytes"]
        checks.append(("peak", peak <= bound * (1 + PEAK_TOL) + PEAK_SLACK,
                       f"step peak above weights {peak} B, actmem gradients + activations + transients {bound} B "
                       f"({100 * _rel(bound, peak):+.2f} %; must not be exceeded by more than {100 * PEAK_TOL:g} % + 1 MiB)"))  # fmt: skip
        grads, est_grads = cuda["after_backward_delta_bytes"], figures["gradients_bytes"]
        checks.append(("gradients", abs(est_grads - grads) <= GRAD_TOL * grads + GRAD_SLACK,
                       f"allocated after backward {grads} B, actmem gradients {est_grads} B "
                       f"({100 * _rel(est_grads, grads):+.2f} %, tolerance ±{100 * GRAD_TOL:g} % + 1 MiB)"))  # fmt: skip
    if "params" in measured:
        checks.append(("params", figures["params"] == measured["params"],
                       f"model {measured['params']} parameters, actmem {figures['params']}"))  # fmt: skip
    return checks


def compare_file(path, actmem, workdir, verbose=False):
    """(passed, failed, lines) over one results file's cases."""
    with open(path) as f:
        results = json.load(f)
    env = results.get("environment", {})
    lines = [f"{os.path.relpath(path)}: {env.get('gpu', {}).get('name')} torch {env.get('torch')} "
             f"transformers {env.get('transformers', '-')} flash_attn {env.get('flash_attn')} ({env.get('source')})"]  # fmt: skip
    passed = failed = 0
    if results.get("format") != FORMAT:
        return 0, 1, lines + [f"  FAIL results format {results.get('format')!r}, this script reads {FORMAT}"]
    for record in results["cases"]:
        if "error" in record:
            lines.append(f"  {record['case']:34s} not measured: {record['error'][:160]}")
            continue
        figures = actmem_figures(actmem, record["hf_config"], record["actmem_args"], workdir)
        if "error" in figures:
            failed += 1
            lines.append(f"  {record['case']:34s} FAIL actmem refused: {figures['error']}")
            continue
        checks = check_case(record, figures)
        bad = [c for c in checks if not c[1]]
        passed += not bad
        failed += bool(bad)
        lines.append(f"  {record['case']:34s} {'ok' if not bad else 'FAIL'}  " + ", ".join(
            f"{name} {'ok' if ok else 'FAIL'}" for name, ok, _ in checks))  # fmt: skip
        for name, ok, text in checks:
            if verbose or not ok:
                lines.append(f"      {name}: {text}")
    for s in results.get("skipped", []):
        lines.append(f"  {s['case']:34s} skipped: {s['why']}")
    if results.get("not_run"):
        lines.append(f"  not run (time guard): {', '.join(results['not_run'])}")
    return passed, failed, lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actmem", required=True, help="the actmem binary to hold to the measurements")
    parser.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    parser.add_argument("--verbose", action="store_true", help="every check's figures, not only failures")
    parser.add_argument("files", nargs="*", help="results files (default: RESULTS_DIR/*.json)")
    args = parser.parse_args(argv)

    files = args.files or sorted(glob.glob(os.path.join(args.results_dir, "*.json")))
    if not files:
        print(f"no GPU results committed ({os.path.relpath(args.results_dir)}/*.json): nothing to compare; "
              "validation/gpu/README.md says how to make them")  # fmt: skip
        return 0
    if actmem_version(args.actmem) is None:
        print(f"FAIL: {args.actmem} is missing or does not run")
        return 1
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="actmem-gpu-compare-") as workdir:
        for path in files:
            p, f, lines = compare_file(path, args.actmem, workdir, args.verbose)
            passed, failed = passed + p, failed + f
            print("\n".join(lines))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
