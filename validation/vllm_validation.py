#!/usr/bin/python3
"""`actmem serve` against vLLM v0.19.0's own startup logs (../shared/data/vllm-0.19, README.md there:
46 startup logs on H100-80GB from llm-d-planner's accuracy sweep, 35 started, 11 failed).

Each run's settings become the `vllm serve` line its user ran (vLLM's own flags: the data's
config.json as MODEL, --tensor-parallel-size, --pipeline-parallel-size, --data-parallel-size,
--max-model-len, --gpu-memory-utilization, --max-num-batched-tokens, --max-num-seqs 1024 (the
sweep's default), --block-size, --dtype, --kv-cache-dtype, --quantization fp8 for runtime fp8),
written to a script and read by `actmem serve --from SCRIPT --gpu h100-80gb --batch 1 --json`. A
checkpoint's own quantization (compressed-tensors W8A8) comes from its config.json's
quantization_config, as vLLM loads it. A run actmem refuses (exit 2) for its model or a flag value it does not
know is not expressible; they are counted and grouped by reason.

Started runs, per field, mean absolute % error (and mean signed error) of actmem's `vllm` block
(the first worker's lines, as the log reports them) vs the log:
  weights     vllm.weights_bytes      vs "Model loading took X GiB"
  activation  vllm.activation_bytes   vs "torch peak memory increase"
  non_torch   vllm.non_torch_bytes    vs "non-torch forward increase memory"
  kv_cache    vllm.kv_cache_bytes     vs "Available KV cache memory"
  kv_tokens   vllm.kv_tokens          vs "GPU KV cache size: N tokens"
  concurrency vllm.max_concurrency    vs "Maximum concurrency for T tokens per request"
beside llm-d-planner's published errors on the same sweep (quoted in actmem issue 22).
Failed runs: actmem's verdict: fails for memory when the budget does not hold one request of
max_model_len (capacity.fits false), fails for configuration when it refuses the settings
(exit 2 naming e.g. --tp) or the context exceeds the model's own limit (capacity.max_context_len);
held against the log's cause where that is a property of the settings (memory, configuration,
parallelism), not of the machine (GPU contention, hub outage, launcher bug). Started runs that actmem
says would fail are counted as false alarms.

Figures are held to validation/vllm_floor.json (exit 1 if one is worse; a hint when one is better;
--update-floor rewrites it). Without the data folder: a line saying so, exit 0.

  /usr/bin/python3 validation/vllm_validation.py --actmem build/actmem [--data DIR] [-v]
"""
import argparse
import collections
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "..", "shared", "data", "vllm-0.19")
FLOOR = os.path.join(REPO, "validation", "vllm_floor.json")
GIB = float(1 << 30)
MAX_NUM_SEQS = 1024     # vLLM's default on this sweep (data README)
DEFAULT_MNBT = 8192     # max_num_batched_tokens where a failed run's log did not print it
FIELDS = [  # name, actmem JSON path (its `vllm` block: the log's lines), measured key, scale
    ("weights", ("vllm", "weights_bytes"), "model_loading_gib", GIB),
    ("activation", ("vllm", "activation_bytes"), "torch_peak_increase_gib", GIB),
    ("non_torch", ("vllm", "non_torch_bytes"), "non_torch_increase_gib", GIB),
    ("kv_cache", ("vllm", "kv_cache_bytes"), "available_kv_cache_gib", GIB),
    ("kv_tokens", ("vllm", "kv_tokens"), "gpu_kv_cache_size_tokens", 1.0),
    ("concurrency", ("vllm", "max_concurrency"), "max_concurrency", 1.0),
]
# llm-d-planner's own errors on this sweep as quoted in actmem issue 22 (from its
# accuracy/accuracy_report.md @ d3121e0); activation and non-torch are signed as quoted.
PLANNER = {"weights": "0.75%", "activation": "+189%", "non_torch": "-44%", "kv_cache": "6.70%",
           "kv_tokens": "-", "concurrency": "9.90%"}
SETTINGS_CAUSES = {"memory": "memory", "configuration": "config", "parallelism": "config"}
UNEXPRESSIBLE = ("not supported", "unknown", "not expected", "missing required", "is not in")


def num(s):
    return float(str(s).replace(",", "")) if s not in (None, "") else None


def degree(r, name):
    """pp/dp from the settings, or from the run's name where the failed log never printed them."""
    m = re.search(r"tp\d+pp(\d+)dp(\d+)", r["id"])
    named = int(m.group(1 if name == "pp" else 2)) if m else 1
    return max(int(r["settings"].get(name) or 1), named)


def vllm_line(data, r):
    """The run's `vllm serve` command as its user typed it (vLLM's own flags), from its settings."""
    s = r["settings"]
    line = ["vllm", "serve", os.path.join(data, r["config_file"]),
            "--tensor-parallel-size", str(s["tp"]),
            "--max-model-len", str(s["max_model_len"]),
            "--gpu-memory-utilization", str(s["gpu_memory_utilization"]),
            "--max-num-batched-tokens", str(s.get("max_num_batched_tokens") or DEFAULT_MNBT),
            "--max-num-seqs", str(MAX_NUM_SEQS),
            "--block-size", str(s.get("block_size") or 16),
            "--dtype", s.get("dtype_arg") or "auto",
            "--kv-cache-dtype", s.get("kv_cache_dtype") or "auto"]
    for name, flag in (("pp", "--pipeline-parallel-size"), ("dp", "--data-parallel-size")):
        if degree(r, name) > 1:
            line += [flag, str(degree(r, name))]
    if s.get("quant_scheme") == "fp8-runtime":
        line += ["--quantization", "fp8"]
    return " ".join(line) + "\n"


def command(actmem, data, r, scripts, batch):
    """`actmem serve --from` the run's vllm serve line (written under `scripts`) on the run's GPU,
    or (None, reason). A checkpoint's own quantization (compressed-tensors W8A8) is read from its
    config.json's quantization_config, as vLLM reads it (MXFP4 only warns: gpt-oss is not read)."""
    s = r["settings"]
    if not r.get("config_file"):
        return None, "no config.json in the data (model not published)"
    script = os.path.join(scripts, r["id"] + ".sh")
    with open(script, "w") as f:
        f.write(vllm_line(data, r))
    return [actmem, "serve", "--from", script, "--gpu", s["gpu"].lower(), "--batch", str(batch), "--json"], None


def first_error(stderr):
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("actmem: warning")]
    return lines[0].strip() if lines else "(no stderr)"


def reason_of(line, data):
    """A refusal's group: the message less the config's path and the list of what is supported."""
    line = re.sub(r"^.*configs/[^:\s]+:\s*", "", line.replace(data + os.sep, "").replace("actmem: ", ""))
    return line.split("; supported")[0][:110]


def call(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else None), p.stderr


def evaluate(actmem, data, scripts, r):
    """{'refused': reason} or {'out': json, 'verdict': starts|memory|config, 'cmd': str}."""
    args, why = command(actmem, data, r, scripts, 1)
    if args is None:
        return {"refused": why}
    rc, out, err = call(args)
    if rc != 0:
        line = first_error(err)
        named = re.search(r"--[a-z][a-z-]*", line)
        if rc == 2 and named and named.group(0) != "--model" and not any(u in line for u in UNEXPRESSIBLE):
            return {"verdict": "config", "why": line, "cmd": " ".join(args)}
        return {"refused": reason_of(line, data) if rc == 2 else "exit %d: %s" % (rc, line)}
    cap = out.get("capacity", {})
    verdict = "starts"
    if not cap.get("fits", True):
        verdict = "memory"
    elif cap.get("context_limited_by_model") and r["settings"]["max_model_len"] > cap.get("max_context_len", 0):
        verdict = "config"
    return {"out": out, "verdict": verdict, "cmd": vllm_line(data, r).strip() + "  |  " + " ".join(args[1:])}


def pct(pred, meas):
    return 100.0 * (pred - meas) / meas if meas else None


def ceil1(x):
    return math.ceil(x * 10.0 - 1e-9) / 10.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actmem", default=os.path.join(REPO, "build", "actmem"))
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--update-floor", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    path = os.path.join(a.data, "vllm019_runs.json")
    if not os.path.exists(path):
        print("vllm validation: no data at %s (../shared/data/vllm-0.19); skipped" % os.path.abspath(a.data))
        return 0
    data = os.path.abspath(a.data)
    with open(path) as f:
        runs = json.load(f)["runs"]
    scripts = tempfile.mkdtemp(prefix="vllm_lines_")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        res = list(pool.map(lambda r: evaluate(a.actmem, data, scripts, r), runs))
    shutil.rmtree(scripts, ignore_errors=True)

    errs = collections.defaultdict(list)
    refused = collections.Counter()
    false_alarms = []
    started = [(r, e) for r, e in zip(runs, res) if r["status"] == "ok"]
    for r, e in started:
        if "out" not in e:
            refused[e.get("refused") or "refused as config: " + e["why"]] += 1
            continue
        if e["verdict"] != "starts":
            false_alarms.append(r["id"])
        row = []
        for name, (sec, key), mkey, scale in FIELDS:
            meas = num(r["measured"].get(mkey))
            p = pct(e["out"][sec][key] / scale, meas) if meas is not None else None
            if p is not None:
                errs[name].append(p)
            row.append("%s %+.1f%%" % (name, p) if p is not None else name + " -")
        if a.verbose:
            print("  %-58s %s\n      %s" % (r["id"][:58], ", ".join(row), e["cmd"]))
    n_expr = len(started) - sum(refused.values())
    print("vLLM v0.19.0 startup logs (H100-80GB): %d runs, %d started, %d failed"
          % (len(runs), len(started), len(runs) - len(started)))
    print("\nStarted runs actmem can express: %d of %d" % (n_expr, len(started)))
    print("  %-12s %4s %13s %12s %18s" % ("field", "n", "actmem |err|", "mean err", "llm-d-planner"))
    mae = {}
    for name, *_ in FIELDS:
        v = errs[name]
        if v:
            mae[name] = sum(abs(x) for x in v) / len(v)
            print("  %-12s %4d %12.1f%% %+11.1f%% %18s" % (name, len(v), mae[name], sum(v) / len(v),
                                                           PLANNER[name]))
    print("  (llm-d-planner: its published errors on the same sweep, as quoted in actmem issue 22;"
          " activation and non-torch signed)")
    if false_alarms:
        print("  started runs actmem says would fail: %s" % ", ".join(false_alarms))

    print("\nFailed runs: log's cause -> actmem's verdict")
    judged = predicted = matched = 0
    for r, e in zip(runs, res):
        if r["status"] == "ok":
            continue
        cls = r["failure"]["class"]
        want = SETTINGS_CAUSES.get(cls)
        got = "not expressible" if "refused" in e else ("starts" if e["verdict"] == "starts"
                                                        else "fails (%s)" % e["verdict"])
        mark = "n/a (not the settings)" if want is None else "-"
        if want and "refused" in e:
            refused["(failed run) " + e["refused"]] += 1
            mark = "not judged"
        elif want:
            judged += 1
            predicted += e["verdict"] != "starts"
            matched += e["verdict"] == want
            mark = "agrees" if e["verdict"] == want else ("fails, other reason" if e["verdict"] != "starts"
                                                           else "MISSED")
        elif "refused" in e:
            refused["(failed run) " + e["refused"]] += 1
        print("  %-58s %-14s %-18s %s" % (r["id"][:58], cls, got, mark))
    print("  failures caused by the settings, expressible: %d; actmem predicts failure: %d; same reason: %d"
          % (judged, predicted, matched))

    n_failed = sum(n for why, n in refused.items() if why.startswith("(failed run)"))
    print("\nNot expressible: %d runs (%d started, %d failed)"
          % (sum(refused.values()), sum(refused.values()) - n_failed, n_failed))
    for why, n in refused.most_common():
        print("  %3d  %s" % (n, why))

    now = {"expressible": n_expr, "failures_predicted": predicted, "failures_same_reason": matched,
           "false_alarms": len(false_alarms), "mae_pct": {k: ceil1(v) for k, v in mae.items()}}
    if a.update_floor:
        with open(FLOOR, "w") as f:
            json.dump(now, f, indent=2, sort_keys=True)
            f.write("\n")
        print("\nwrote %s" % os.path.relpath(FLOOR, REPO))
        return 0
    with open(FLOOR) as f:
        floor = json.load(f)
    worse, better = [], []
    for k in ("expressible", "failures_predicted", "failures_same_reason"):
        (worse if now[k] < floor[k] else better if now[k] > floor[k] else []).append(
            "%s %d (floor %d)" % (k, now[k], floor[k]))
    if now["false_alarms"] != floor["false_alarms"]:
        (worse if now["false_alarms"] > floor["false_alarms"] else better).append(
            "false_alarms %d (ceiling %d)" % (now["false_alarms"], floor["false_alarms"]))
    for k, ceil in floor["mae_pct"].items():
        v = mae.get(k)
        if v is None or v > ceil:
            worse.append("%s mean |err| %s (ceiling %.1f%%)" % (k, "-" if v is None else "%.2f%%" % v, ceil))
        elif ceil1(v) < ceil:
            better.append("%s mean |err| %.2f%% (ceiling %.1f%%)" % (k, v, ceil))
    if better:
        print("\nbetter than validation/vllm_floor.json: %s; run with --update-floor to record it"
              % "; ".join(better))
    if worse:
        print("\nFAIL: worse than validation/vllm_floor.json: %s" % "; ".join(worse))
        return 1
    print("\nvllm validation: within validation/vllm_floor.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
