#!/usr/bin/env python3
"""A PyTorch memory snapshot (torch.cuda.memory._snapshot(), the pickle pytorch.org/memory_viz opens)
as an actmem allocator trace (format actmem-allocator-trace-1, src/runtime/allocator_trace.h), for
`actmem allocator --trace`. Needs no torch: the snapshot is plain Python data.

The trace is the device's allocations (their requested sizes) and frees, in order; a free is taken
where the block returned to the pool (free_completed). A run of segment_free entries becomes an
empty_cache event: it is torch.cuda.empty_cache(), or, where a segment_alloc follows it after the
trace's first allocation, malloc's out-of-memory retry on a full GPU, which (max_split_size_mb not
set) frees exactly what empty_cache frees, just before that allocation; "recorded" counts those
retries. With expandable segments the same release unmaps pages (segment_unmap). A recording made
under set_per_process_memory_fraction with garbage_collection_threshold can also free old blocks
before an allocation; that too would be read as empty_cache, which frees more: replay such a trace
with the same --memory-fraction and --alloc-conf, and read its reserved figures as a lower bound.
When the recording began after the allocator was in use, the
state at its start is rebuilt from the snapshot's final segments:
  - a segment with no segment_alloc in the trace existed at the start; of its blocks, those still
    allocated at the end and never allocated in the trace were allocated then, the rest was free;
  - a segment freed in the trace before any segment_alloc at its address existed, and was free;
  - a free of a block never allocated in the trace would need that block's size at the start, which
    the snapshot does not keep: such a trace is refused.
The segment events the real allocator recorded are written under "recorded", for a comparison.

  snapshot_to_trace.py snapshot.pickle trace.json [--device N] [--source TEXT]
"""
import argparse
import json
import pickle
import sys

MIB = 1 << 20


class Refused(Exception):
    pass


def device_trace(snap, device):
    traces = snap.get("device_traces") or []
    if device is None:
        device = max(range(len(traces)), key=lambda d: len(traces[d])) if traces else 0
    if device >= len(traces) or not traces[device]:
        raise Refused(f"device {device} has no trace entries (record with torch.cuda.memory._record_memory_history())")
    return device, traces[device]


def convert(snap, device=None, source=""):
    device, entries = device_trace(snap, device)
    # Streams numbered in the order of their cudaStream_t values: the pools order blocks by it first
    # (BlockComparatorSize), which decides the order empty_cache frees them in.
    raw = sorted({e["stream"] for e in entries if "stream" in e} |
                 {s["stream"] for s in snap.get("segments", []) if s.get("device", device) == device})
    streams = {s: k for k, s in enumerate(raw)}

    def stream_id(s):
        return streams[s]

    events, recorded = [], []
    allocated_in_trace, alive = set(), set()
    seg_alloc_addrs = set()
    mapped = []  # expandable segments: the address ranges mapped in the trace
    seg_freed_at_start = {}  # address -> (size, stream): freed before any segment_alloc there
    retries = 0
    i = 0
    while i < len(entries):
        e = entries[i]
        a = e["action"]
        if a == "alloc":
            events.append(["alloc", e["addr"], e["size"], stream_id(e["stream"])])
            allocated_in_trace.add(e["addr"])
            alive.add(e["addr"])
        elif a == "free_completed":
            if e["addr"] not in alive:
                raise Refused(f"entry {i} frees {e['addr']:#x}, a block allocated before the recording began")
            alive.discard(e["addr"])
            events.append(["free", e["addr"]])
        elif a in ("segment_free", "segment_unmap"):  # release_cached_blocks: frees, or unmaps (expandable)
            j = i
            while j < len(entries) and entries[j]["action"] in ("segment_free", "segment_unmap"):
                j += 1
            followed = j < len(entries) and entries[j]["action"] == "segment_alloc"
            for k in range(i, j):
                f = entries[k]
                recorded.append([f["action"], f["size"], len(events)])
                if f["action"] == "segment_free" and f["addr"] not in seg_alloc_addrs:
                    seg_freed_at_start.setdefault(f["addr"], (f["size"], stream_id(f["stream"])))
            if followed and allocated_in_trace:
                retries += 1
            events.append(["empty_cache"])
            i = j
            continue
        elif a in ("segment_alloc", "segment_map"):
            seg_alloc_addrs.add(e["addr"])
            if a == "segment_map":
                mapped.append((e["addr"], e["addr"] + e["size"]))
            recorded.append([a, e["size"], len(events)])
        elif a == "oom":
            raise Refused(f"entry {i}: the recorded job ran out of memory; replay the part before it")
        i += 1

    segments = []
    for seg in snap.get("segments", []):
        if seg.get("device", device) != device or seg["address"] in seg_alloc_addrs:
            continue
        # An expandable segment is listed once per mapped run, which need not start where a map did.
        end = seg["address"] + seg["total_size"]
        if seg.get("is_expandable") and any(lo < end and seg["address"] < hi for lo, hi in mapped):
            continue
        if seg.get("is_expandable"):
            raise Refused("an expandable segment existed before the recording began; record from the start")
        blocks = []
        for b in seg["blocks"]:
            held = b["state"] == "active_allocated" and b["address"] not in allocated_in_trace
            if held or not blocks or blocks[-1]["allocated"]:
                blocks.append({"size": b["size"], "allocated": held})
                if held:
                    blocks[-1]["requested"] = b.get("requested_size", b["size"])
            else:
                blocks[-1]["size"] += b["size"]
        segments.append({"address": seg["address"], "stream": stream_id(seg["stream"]),
                         "pool": seg["segment_type"], "blocks": blocks})
    known = {s["address"] for s in segments}
    for addr, (size, stream) in seg_freed_at_start.items():
        if addr not in known:
            segments.append({"address": addr, "stream": stream, "pool": "small" if size <= 2 * MIB else "large",
                             "blocks": [{"size": size, "allocated": False}]})
    segments.sort(key=lambda s: s["address"])
    return {"format": "actmem-allocator-trace-1", "source": source, "device": device,
            "segments": segments, "events": events,
            "recorded": {"segment_events": recorded, "out_of_memory_retries": retries}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("out")
    ap.add_argument("--device", type=int)
    ap.add_argument("--source", default="")
    args = ap.parse_args()
    with open(args.snapshot, "rb") as f:
        snap = pickle.load(f)
    try:
        trace = convert(snap, args.device, args.source)
    except Refused as e:
        sys.exit(f"snapshot_to_trace: {args.snapshot}: {e}")
    with open(args.out, "w") as f:
        json.dump(trace, f, separators=(",", ":"))
    print(f"{args.out}: {len(trace['events'])} events, {len(trace['segments'])} segments at the start, "
          f"{len(trace['recorded']['segment_events'])} segment events recorded")


if __name__ == "__main__":
    main()
