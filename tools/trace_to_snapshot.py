#!/usr/bin/env python3
"""An allocator trace replayed by actmem, written as a PyTorch memory snapshot: the pickle that
torch.cuda.memory._dump_snapshot() writes and pytorch.org/memory_viz opens (its "Active Memory
Timeline" and "Allocator State History" tabs), with the model's addresses and driver calls.

The snapshot holds what torch.cuda.memory._snapshot() returns: "segments" (the allocator's state at
the end, blocks with their state) and "device_traces" (one list per device of entries with action
alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap).
actmem knows no stack frames: a tensor the trace names (actmem estimate --timeline names each) has
one frame whose "name" is that name, so memory_viz shows it; other "frames" lists are empty, and
"time_us" counts entries.

  trace_to_snapshot.py --actmem build/actmem trace.json snapshot.pickle [--alloc-conf TEXT] [...]
Further arguments go to `actmem allocator` (--capacity, --gpu-total, --memory-fraction).
"""
import argparse
import json
import pickle
import subprocess
import sys


def snapshot_of(replay, device=0):
    entries = []

    def add(action, addr, size, stream, name):
        frames = [{"name": name, "filename": "actmem step timeline", "line": 0}] if name else []
        entries.append({"action": action, "addr": addr, "size": size, "stream": stream,
                        "time_us": len(entries), "frames": frames})

    for action, addr, size, stream, *name in replay["timeline"]:
        name = name[0] if name else ""
        if action == "free":  # the block returns at once: no other stream holds it
            add("free_requested", addr, size, stream, name)
            add("free_completed", addr, size, stream, name)
        else:
            add(action, addr, size, stream, name)
    segments = []
    for seg in replay["segments_end"]:
        blocks = [{"address": b["address"], "size": b["size"], "requested_size": b["requested"],
                   "state": "active_allocated" if b["allocated"] else "inactive", "frames": []}
                  for b in seg["blocks"]]
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        segments.append({"device": device, "address": seg["address"], "total_size": seg["size"],
                         "allocated_size": allocated, "active_size": allocated,
                         "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
                         "stream": seg["stream"], "segment_type": seg["pool"], "segment_pool_id": (0, 0),
                         "is_expandable": seg["expandable"], "frames": [], "blocks": blocks})
    return {"segments": segments, "device_traces": [entries] if device == 0 else [[]] * device + [entries],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": replay["alloc_conf"]}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actmem", required=True)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--alloc-conf", default="")
    args, rest = ap.parse_known_args()
    run = subprocess.run([args.actmem, "allocator", "--trace", args.trace, "--alloc-conf", args.alloc_conf, "--json",
                          *rest], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(run.stderr.strip() or f"actmem exited with {run.returncode}")
    replay = json.loads(run.stdout)
    with open(args.out, "wb") as f:
        pickle.dump(snapshot_of(replay), f)
    print(f"{args.out}: {len(replay['timeline'])} timeline entries, {len(replay['segments_end'])} segments, "
          f"peak reserved {replay['reserved_peak_bytes']} B")


if __name__ == "__main__":
    main()
