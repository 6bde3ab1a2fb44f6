"""The main() the case runners share (megatron_mla_validation.py, megatron_moe_validation.py,
te_validation.py, torchtitan_validation.py, freeze_validation.py, frozen_layers_validation.py,
offload_validation.py, packed_validation.py, loss_validation.py): parse --actmem (and --filter,
--measure-only, --self-check, --list where the runner has them), run the self-check, then per case
measure, estimate and print one row, end with `N passed, M failed` and return the exit code
(1 when a case failed or the self-check did, else 0).

Each runner keeps its cases, its measurement and its row; run_cases only sequences them:

    sys.exit(runner.run_cases(CASES, measure=..., estimate=..., row=..., header=...))
"""
import argparse
import os
import tempfile

# The CPU stands in for a GPU here. On CPUs with AMX (Sapphire Rapids on), oneDNN's AMX bf16 matmul
# allocates reordered copies of its operands for each call, which cuBLAS does not (its workspace is
# preallocated; actmem counts it apart): torchtune's chunked loss in bf16 measured 65 KB (12%) more
# there than on AVX-512 machines. Cap oneDNN below AMX before the first matmul; a cap, so a machine
# without AVX-512 BF16 keeps its own kernels. A user's own setting wins.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")


def layer_total_header(width):
    """The header over run_validation.layer_and_total_row's rows."""
    return (f"{'case':<{width}}{'meas/layer':>11}{'est/layer':>11}{'err%':>7}{'meas total':>12}{'est total':>12}"
            f"{'err%':>7}")


def worst_header(width):
    """The header over worst_row's rows."""
    return f"{'case':{width}s} {'layer meas':>11s} {'est':>11s} {'total meas':>11s} {'est':>11s}  err"


def worst_row(name, width, layer, total, activations, tolerance=0.01):
    """Prints measured / estimated per layer and in total with the larger relative error of the two,
    and returns whether it is within tolerance."""
    e_layer, e_total = int(activations["per_layer_bytes"]), int(activations["total_bytes"])
    worst = max(abs(e_layer - layer) / layer, abs(e_total - total) / total)
    ok = worst <= tolerance
    print(f"{name:{width}s} {layer:11d} {e_layer:11d} {total:11d} {e_total:11d}  {worst * 100:.3f}%"
          f"{'' if ok else '  FAIL'}")
    return ok


def print_storages(m):
    """--measure-only: the middle layer's and the shared storages of a te_validation.measure-style
    dict (m["storages"]: (region, shape, dtype, bytes); m["middle"]: the middle layer's region)."""
    for region, shape, dt, nbytes in m["storages"]:
        if region in (m["middle"], "shared"):
            print(f"    {region:9s} {str(shape):24s} {dt:9s} {nbytes:9d}")


def case_name(c):
    return c["name"] if isinstance(c, dict) else c[0]


def run_cases(cases, measure, estimate, row, header, *, name=case_name, measure_only=None, self_check=None,
              check_first=True, listing=False, actmem_required=False, error_line=None, threads=2, argv=None):
    """Runs a validation runner's cases and returns its exit code.

    measure(c) -> m; estimate(c, actmem, workdir) -> (estimate, None) or (None, error text);
    row(c, m, estimate) prints the case's row(s) and returns whether it passed; header: the line
    printed above the rows. Options:
      measure_only(c, m)  prints a case under --measure-only (no CLI); gives --measure-only and --filter
      self_check()        returns whether the runner's self-check passed; gives --self-check (run it
                          alone), and with check_first runs it before the cases (not under --measure-only)
      listing             gives --list (print the selected case names and exit 0)
      error_line(n, err)  the line for a case whose estimate failed (default `NAME: ERROR`)
      threads             torch.set_num_threads before anything runs (None: leave it)"""
    ap = argparse.ArgumentParser()
    ap.add_argument("--actmem", required=actmem_required)
    if measure_only:
        ap.add_argument("--filter", default="")
        ap.add_argument("--measure-only", action="store_true")
    if self_check:
        ap.add_argument("--self-check", action="store_true")
    if listing:
        ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if threads:
        import torch

        torch.set_num_threads(threads)
    if self_check and args.self_check:
        return 0 if self_check() else 1
    if measure_only:
        cases = [c for c in cases if args.filter in name(c)]
    if listing and args.list:
        print("\n".join(name(c) for c in cases))
        return 0
    only_measure = bool(measure_only) and args.measure_only
    if self_check and check_first and not only_measure and not self_check():
        return 1
    passed = failed = 0
    print(header)
    with tempfile.TemporaryDirectory() as workdir:
        for c in cases:
            m = measure(c)
            if only_measure:
                measure_only(c, m)
                continue
            est, err = estimate(c, args.actmem, workdir)
            if err:
                print(error_line(name(c), err) if error_line else f"{name(c)}: {err}")
                failed += 1
                continue
            ok = row(c, m, est)
            passed += ok
            failed += not ok
    if not only_measure:
        print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
