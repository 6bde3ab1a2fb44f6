"""The allocated-bytes curve of a piece of CPU code, from torch.profiler's memory events.

Every allocation and free is an Allocation event (size > 0 or < 0) with its own timestamp, in the
order the allocator saw them: replaying them gives the exact allocated-bytes curve. Shared by the
runners that measure a transient (loss_transient.py, loss_validation.py, generate_cache.py).
"""
from torch.profiler import ProfilerActivity, profile


def allocation_events(prof):
    """(time_ns, size, ptr) for each allocation (size > 0) and free (size < 0), in time order."""
    events = []

    def walk(node):
        if str(node.tag).endswith("Allocation"):
            events.append((node.start_time_ns, node.extra_fields.alloc_size, node.extra_fields.ptr))
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    events.sort(key=lambda e: e[0])
    return events


def replay(events, exclude_ptrs=()):
    """Peak and final allocated bytes; for each pointer in exclude_ptrs its last allocation (a
    gradient created in backward and kept) is left out."""
    skip = set()
    for ptr in exclude_ptrs:
        idx = [i for i, e in enumerate(events) if e[2] == ptr]
        if idx and events[idx[-1]][1] > 0:
            skip.add(idx[-1])
    current = peak = 0
    for i, (_, size, _) in enumerate(events):
        if i in skip:
            continue
        current += size
        peak = max(peak, current)
    return peak, current


def peak_while(fn):
    """The peak allocated bytes (above what was allocated before) while fn() runs; its result is
    dropped after the measurement."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        held = fn()
    del held
    return replay(allocation_events(prof))[0]
