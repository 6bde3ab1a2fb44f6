#!/usr/bin/python3
"""Megatron-LM's own CI memory measurements (../shared/data/megatron-ci, README.md there) fed to
`actmem estimate --from script --json` as a user would: each `recommended_core` GPT / MoE record's
launch line (`export K=V` for its env, then `torchrun --nproc_per_node G --nnodes N pretrain_gpt.py
MODEL_ARGS`), read (exit 0) or refused (exit 2: the first stderr line, grouped by the flag named).

Compared on the read ones, against the LAST rank (the last pipeline stage), where Megatron logs:
  static: the last stage's memory.by_stage static_bytes (weights, gradients, optimizer state, cuBLAS
          workspaces, TE's fp8 weight copies) vs measured.allocated_bytes
          (the persistent state after the step, activations freed);
  peak:   that stage's total_bytes (no --reserve allowance: not an allocation; without by_stage,
          memory.total_bytes - memory.reserve_bytes) vs measured.max_allocated_bytes (torch.cuda.max_memory_allocated since start).
Without memory.by_stage (older builds) the most loaded stage (memory.pipeline_stage) stands in, with
static + workspaces; with pp > 1 that stage may not be the last one: such records are counted.
megatron_theory (Megatron's theoretical report: weight_and_optimizer_mib, total_mib, for the most
loaded shard) is held to the same measurements when present.

Besides the launch line, each record gets what its user knows of the stack it ran on
(stack_options): --fp8-gpu from its GPU, PyTorch's older cuBLAS default on Blackwell for NGC <= 26.02
without CUBLAS_WORKSPACE_CONFIG, and --attention eager where TransformerEngine <= 1.2 (NGC <= 24.01)
ran deterministically off Hopper, each rule with its source there.

The figures (whole counts) must not fall below validation/megatron_ci_floor.json: exit 1 if one
does; --update-floor rewrites it. Without the data folder: a line saying so, exit 0.

  /usr/bin/python3 validation/megatron_ci_validation.py --actmem build/actmem [--json-out F] [-v]
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "..", "shared", "data", "megatron-ci")
FLOOR = os.path.join(REPO, "validation", "megatron_ci_floor.json")
DATA_FILE = "megatron_ci_memory.json"
MIB = 1024.0 * 1024.0
LEFT_OUT_TAGS = ("hybrid-mamba", "multimodal", "multimodal-mimo", "mamba")


def counted(r):
    """GPT or MoE pretraining through pretrain_gpt.py: the family directory gpt/moe, no Mamba or
    multimodal tags (the hybrid case launched by pretrain_gpt.py is a Mamba hybrid)."""
    return (r.get("recommended_core") and r.get("model_family_dir") in ("gpt", "moe")
            and "pretrain_gpt.py" in (r.get("training_script") or "")
            and not any(t in LEFT_OUT_TAGS for t in r.get("tags") or ()))


def launch_script(r):
    lines = ["#!/bin/bash"]
    lines += ["export %s=%s" % (k, shlex.quote(str(v))) for k, v in sorted((r.get("env") or {}).items())]
    lines.append("torchrun --nproc_per_node %d --nnodes %d pretrain_gpt.py %s"
                 % (r["gpus_per_node"], r["nodes"], r["model_args"]))
    return "\n".join(lines) + "\n"


def error_line(stderr, tmp):
    """The refusal's message: stderr's first line that is not the echo of what was read ("read from",
    its indented settings) nor a warning; the script's temporary folder left out."""
    lines = [ln.replace(tmp + os.sep, "") for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith((" ", "actmem: read from", "actmem: warning:")):
            return ln
    return lines[0] if lines else "(no stderr)"


def refusal_reason(line):
    """The flag (or feature) a refusal names: the first --flag of the message, else its words."""
    for m in re.finditer(r"--[A-Za-z0-9][A-Za-z0-9_-]*", line):
        if m.group(0) not in ("--from", "--json"):
            return m.group(0)
    text = re.sub(r"^(error|actmem)[:\s]+", "", line.strip(), flags=re.I)
    return re.sub(r"\d+", "N", text)[:70] or "(no message)"


def gpu_generation(r):
    """The record's GPU as actmem's --fp8-gpu (it sizes the cuBLAS workspaces): A100 ampere, H100 hopper,
    GB200 blackwell."""
    gpu = (r.get("gpu_type") or "").lower()
    return "ampere" if "a100" in gpu else "blackwell" if ("gb200" in gpu or "b200" in gpu) else "hopper"


def container_version(r):
    """The NGC PyTorch container the record ran in, as (year, month): "nvcr.io/nvidia/pytorch:26.02-py3"
    -> (26, 2); None when the record does not say."""
    m = re.search(r"pytorch:(\d\d)\.(\d\d)", r.get("container_base_image_at_commit") or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def stack_options(r):
    """What the record's user knows of their stack, as actmem options: the GPU generation, the
    attention backend an old TransformerEngine picks (below), and PyTorch's cuBLAS workspace where the job sets no CUBLAS_WORKSPACE_CONFIG and its PyTorch predates the
    Blackwell default of actmem (32 MiB, parseChosenWorkspaceSize "32MiB for Hopper and Blackwell",
    pytorch/pytorch PR #175344, merged 2026-02-19): before it only sm90 took 32 MiB and Blackwell
    ":4096:2:16:8" (CublasHandlePool.cpp at 26a39059). NGC 26.02 and older predate it."""
    gen = gpu_generation(r)
    out = ["--fp8-gpu", gen]
    ver = container_version(r)
    env = r.get("env") or {}
    if gen == "blackwell" and "CUBLAS_WORKSPACE_CONFIG" not in env and ver and ver <= (26, 2):
        out += ["--cublas-workspace-config", ":4096:2:16:8"]
    # TransformerEngine up to v1.2 (tagged 2023-12-15; v1.3 came 2024-02-02, so NGC 24.01 and older),
    # DotProductAttention.forward under NVTE_ALLOW_NONDETERMINISTIC_ALGO=0: flash-attn 2 is off
    # whatever its version ("version 2 does not support deterministic execution", attention.py
    # l.2005-2006 at v1.2), and FusedAttention's F16_arbitrary_seqlen backend is off except on sm90
    # (l.2377-2381): off Hopper the layer runs UnfusedDotProductAttention, actmem's --attention eager.
    # From v1.3 on flash-attn >= 2.4.1 runs deterministically. Only where the line names no
    # --attention-backend (the reader takes that as the user's choice).
    # The Megatron-core release of the values commit: index_add_ in the deterministic MoE unpermute
    # came with 56818f9e50 (2025-10-16, first in core_v0.15.0; moe_utils.py unpermute); the records
    # measured before it ran scatter_add_ (--megatron-core 0.14).
    if r["source"]["commit_date"][:10] < "2025-10-16":
        out += ["--megatron-core", "0.14"]
    args = r["model_args"]
    if (ver and ver <= (24, 1) and gen != "hopper" and env.get("NVTE_ALLOW_NONDETERMINISTIC_ALGO") == "0"
            and "--transformer-impl local" not in args and "--attention-backend" not in args):
        out += ["--attention", "eager"]
    return out


def run_one(actmem, tmp, r):
    path = os.path.join(tmp, re.sub(r"[^A-Za-z0-9_.-]", "_", r["id"]) + ".sh")
    with open(path, "w") as f:
        f.write(launch_script(r))
    try:
        p = subprocess.run([actmem, "estimate", "--from", path] + stack_options(r) + ["--json"],
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return dict(status="error", reason="timeout", message="timed out after 120 s")
    if p.returncode != 0:
        first = error_line(p.stderr, tmp)
        status = "refused" if p.returncode == 2 else "error"
        return dict(status=status, rc=p.returncode, message=first, reason=refusal_reason(first))
    try:
        j = json.loads(p.stdout)
    except ValueError:
        return dict(status="error", rc=0, reason="bad JSON", message="exit 0 without JSON on stdout")
    mem, meas = j["memory"], r["measured"]
    # Megatron logs the last rank: the last pipeline stage's figures (memory.by_stage), the
    # workspaces and TE's fp8 weight copies included (they are allocations after the step).
    last = (mem.get("by_stage") or [None])[-1]
    reserve = mem.get("reserve_bytes") or 0
    if last:
        # after the step: the static part and what the pipeline schedule leaves (pipeline inputs)
        static, peak = last.get("after_step_bytes", last["static_bytes"]), last["total_bytes"]
    else:
        static, peak = mem["static_bytes"] + (mem.get("workspaces_bytes") or 0), mem["total_bytes"] - reserve
    pp = r["features"].get("pp") or 1
    out = dict(status="read", static_bytes=static, peak_bytes=peak, reserve_bytes=reserve,
               stage=len(mem["by_stage"]) - 1 if last else mem.get("pipeline_stage"), pp=pp,
               other_stage=not last and pp > 1 and mem.get("pipeline_stage") not in (None, pp - 1),
               static_err=static / meas["allocated_bytes"] - 1, peak_err=peak / meas["max_allocated_bytes"] - 1)
    th = j.get("megatron_theory")
    if th:
        out["theory_static_err"] = th["weight_and_optimizer_mib"] * MIB / meas["allocated_bytes"] - 1
        out["theory_peak_err"] = th["total_mib"] * MIB / meas["max_allocated_bytes"] - 1
    return out


def figures(rows):
    """Whole counts (the floors) and medians of one group of records."""
    read = [x for x in rows if x["status"] == "read"]
    f = collections.OrderedDict(records=len(rows), read=len(read))
    for key, cuts in (("static", (0.02, 0.05)), ("peak", (0.05, 0.10))):
        errs = [abs(x[key + "_err"]) for x in read]
        for c in cuts:
            f["%s_within_%dpct" % (key, round(c * 100))] = sum(e <= c for e in errs)
        f[key + "_median"] = statistics.median(errs) if errs else None
    for key in ("theory_static", "theory_peak"):
        errs = [abs(x[key + "_err"]) for x in read if key + "_err" in x]
        f[key + "_n"] = len(errs)
        f[key + "_median"] = statistics.median(errs) if errs else None
    return f


def pct(v):
    return "-" if v is None else "%.1f%%" % (100 * v)


def table(groups):
    head = ("group", "n", "read", "static med|err|", "<=2%", "<=5%", "peak med|err|", "<=5%", "<=10%",
            "theory static", "theory peak")
    rows = [head]
    for name, rs in groups:
        f = figures(rs)
        rows.append((name, str(f["records"]), str(f["read"]), pct(f["static_median"]),
                     str(f["static_within_2pct"]), str(f["static_within_5pct"]), pct(f["peak_median"]),
                     str(f["peak_within_5pct"]), str(f["peak_within_10pct"]),
                     pct(f["theory_static_median"]), pct(f["theory_peak_median"])))
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for k, r in enumerate(rows):
        print("  " + "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)))
        if k == 0:
            print("  " + "  ".join("-" * x for x in w))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--actmem", default=os.path.join(REPO, "build", "actmem"))
    ap.add_argument("--data", default=DATA, help="folder holding %s (default ../shared/data/megatron-ci)" % DATA_FILE)
    ap.add_argument("--floor", default=FLOOR)
    ap.add_argument("--update-floor", action="store_true", help="write today's figures as the floor")
    ap.add_argument("--json-out", help="write per-record results here")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--filter", help="only records whose id contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per record")
    a = ap.parse_args()

    data_file = os.path.join(a.data, DATA_FILE)
    if not os.path.isfile(data_file):
        print("megatron_ci_validation: no data at %s (skipped)" % os.path.abspath(data_file))
        return 0
    if not os.access(a.actmem, os.X_OK):
        print("megatron_ci_validation: no actmem binary at %s" % a.actmem)
        return 1
    recs = json.load(open(data_file))
    core = [r for r in recs if r.get("recommended_core")]
    use = [r for r in core if counted(r) and (not a.filter or a.filter in r["id"])]
    fam = collections.Counter(r["model_family_dir"] for r in use)
    left = collections.Counter(r["model_family_dir"] for r in core if not counted(r))
    print("Megatron-LM CI memory (%s): %d records, %d recommended_core" % (data_file, len(recs), len(core)))
    print("counted: %d GPT/MoE records (family gpt/moe, pretrain_gpt.py, no mamba/multimodal tags): %s"
          % (len(use), ", ".join("%s %d" % kv for kv in sorted(fam.items()))))
    print("left out of recommended_core: %s" % ", ".join("%s %d" % kv for kv in sorted(left.items())))

    with tempfile.TemporaryDirectory(prefix="actmem-megatron-ci-") as tmp:
        with concurrent.futures.ThreadPoolExecutor(max(1, a.workers)) as pool:
            results = list(pool.map(lambda r: run_one(a.actmem, tmp, r), use))
    for r, x in zip(use, results):
        x.update(id=r["id"], case=r["case"], gpu_type=r.get("gpu_type"), family=r["model_family_dir"],
                 tags=r.get("tags") or [],
                 measured_allocated=r["measured"]["allocated_bytes"],
                 measured_max_allocated=r["measured"]["max_allocated_bytes"])
    if a.verbose:
        for x in results:
            if x["status"] == "read":
                where = "  (actmem's stage %d of %d)" % (x["stage"] + 1, x["pp"]) if x["other_stage"] else ""
                print("  %-70s static %+7.1f%%  peak %+7.1f%%%s"
                      % (x["id"], 100 * x["static_err"], 100 * x["peak_err"], where))
            else:
                print("  %-70s %s: %s" % (x["id"], x["status"], x["message"]))

    refused = [x for x in results if x["status"] != "read"]
    stack = collections.Counter(f for r in use for f in stack_options(r)[3::2])
    print("\nstack options beyond --fp8-gpu (stack_options): --cublas-workspace-config on %d records (PyTorch "
          "before PR #175344 on Blackwell), --attention eager on %d (TransformerEngine <= 1.2, deterministic, "
          "not Hopper)" % (stack[":4096:2:16:8"], stack["eager"]))
    print("read %d of %d; refused %d (exit 2), other errors %d"
          % (len(results) - len(refused), len(results), sum(x["status"] == "refused" for x in refused),
             sum(x["status"] == "error" for x in refused)))
    if refused:
        print("top refusal reasons (records: flag or feature named; an example message):")
        by = collections.defaultdict(list)
        for x in refused:
            by[x["reason"]].append(x)
        for reason, xs in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:12]:
            print("  %4d  %-40s %s" % (len(xs), reason, xs[0]["message"][:110]))

    read = [x for x in results if x["status"] == "read"]
    other = [x for x in read if x["other_stage"]]
    print("\nerrors: |actmem / measured - 1|, the last pipeline stage (Megatron logs the last rank); static = weights,")
    print("gradients, optimizer, workspaces vs allocated after the step; peak = the stage's total vs max allocated;")
    print("theory = megatron_theory weight_and_optimizer / total (MiB).")
    if other:  # only without memory.by_stage: the most loaded stage's figures stand in for the last one's
        print("no memory.by_stage: of %d read records with pp > 1, %d use actmem's most loaded stage, not the last"
              % (sum(x["pp"] > 1 for x in read), len(other)))
    groups = [("all", results)] + [(f, [x for x in results if x["family"] == f]) for f in sorted(fam)]
    tags = collections.Counter(t for x in results for t in x["tags"])
    groups += [("tag " + t, [x for x in results if t in x["tags"]]) for t, n in sorted(tags.items()) if n >= 3]
    print("per family, then per tag (a record is in each of its tags' rows):")
    table(groups)

    if read:
        print("\nworst 10 by static error (family/case/environment_gpu):")
        for x in sorted(read, key=lambda x: -abs(x["static_err"]))[:10]:
            print("  %+7.1f%%  peak %+7.1f%%  %s  %s" % (100 * x["static_err"], 100 * x["peak_err"], x["id"],
                                                    ",".join(x["tags"])))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(results, f, indent=1)
        print("\nper-record results: %s" % a.json_out)

    now = {k: v for k, v in figures(results).items() if not k.endswith("_median")}
    if a.filter:
        print("\n--filter: floors not checked")
        return 0
    if a.update_floor:
        with open(a.floor, "w") as f:
            json.dump(now, f, indent=1)
            f.write("\n")
        print("\nfloor written: %s" % a.floor)
        return 0
    floor = json.load(open(a.floor)) if os.path.exists(a.floor) else {}
    below = ["%s %d < floor %d" % (k, now.get(k, 0), v) for k, v in floor.items() if now.get(k, 0) < v]
    above = ["%s %d > %d" % (k, now[k], floor[k]) for k in now if k in floor and now[k] > floor[k]]
    print("\nfigures: " + ", ".join("%s %d" % kv for kv in now.items()))
    if below:
        print("FAIL: below the floor (%s): %s" % (a.floor, "; ".join(below)))
        return 1
    if above:
        print("improved (%s): raise the floor with --update-floor" % "; ".join(above))
    print("OK: no figure below the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
