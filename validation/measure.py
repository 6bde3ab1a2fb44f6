"""Measure activation memory of a reference model: the distinct storages its forward pass saves
for backward (activation-rules.md), observed with torch.autograd.graph.saved_tensors_hooks.

  * each storage counts once (keyed by its data_ptr; every saved storage is kept alive by the
    graph until backward, so no address can be reused by another saved storage meanwhile);
  * a saved view counts its whole storage (storage().nbytes());
  * parameters and buffers are excluded, and so are 0-dim tensors (wrapped Python scalars such as
    the 2 in x / 2, nll_loss's total_weight: at most 8 bytes each, and on CUDA the wrapped
    scalars are host tensors);
  * a storage belongs to the region (embedding / layer i / head) where it was first saved; one
    saved by two or more layers (RoPE cos/sin) is "shared": outside per_layer_bytes, inside
    total_bytes.

Only the forward pass is hooked: recomputation during backward (torch.utils.checkpoint) is never
counted. The reentrant checkpoint's Function saves its positional tensor inputs through
save_for_backward, which the hooks see, and holds the function (a functools.partial with its
keyword tensors) in ctx.run_function, which they do not; the non-reentrant one keeps args and
kwargs in a closure and its own hooks hide everything inside (checked: the hooks see nothing at
all under it). So the tensors a model passes into checkpointed layers are also watched
(models.watch): each one still alive after the forward has returned, with every reference of the
model's own dropped, is kept until backward by a checkpoint and counts as saved (once per storage,
"shared" unless a layer's own input).
"""
import dataclasses
import gc

import torch

import models


@dataclasses.dataclass
class SavedStorage:
    bytes: int
    shape: tuple
    dtype: str
    region: str  # region of the first save
    regions: set
    savers: set  # grad_fn class names that hold it


@dataclasses.dataclass
class Measurement:
    per_layer_bytes: int
    total_bytes: int
    middle_layer: int
    shared_bytes: int
    region_bytes: dict
    storages: list  # SavedStorage, in first-save order


def _storage_key(t):
    return t.storage().data_ptr()


def saved_tensors(root, errors=RuntimeError):
    """Walks the autograd graph from `root` and yields (node type name, value) for each value a node
    keeps for backward: its _saved_* attributes (tuples and lists flattened) and, for custom
    Functions (incl. the reentrant checkpoint), ctx.saved_tensors. Values may be non-tensors (ints,
    None): the caller filters them and keys the storages. An attribute whose read raises `errors`
    (e.g. the saved tensor has been freed) is passed over. Shared with gpu/measure_hf.py."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        saver = type(node).__name__
        for name in dir(node):
            if name.startswith("_saved_"):
                try:
                    value = getattr(node, name)
                except errors:
                    continue
                for t in value if isinstance(value, (tuple, list)) else [value]:
                    yield saver, t
        if hasattr(node, "saved_tensors"):
            try:
                saved = node.saved_tensors
            except errors:
                saved = ()
            for t in saved:
                yield saver, t
        stack.extend(fn for fn, _ in getattr(node, "next_functions", ()))


def _saver_names(root, by_key):
    """Note which node type saved each storage."""
    for saver, t in saved_tensors(root):
        if isinstance(t, torch.Tensor) and t.dim() > 0 and _storage_key(t) in by_key:
            by_key[_storage_key(t)].savers.add(saver)


def _add_kept_by_checkpoint(watched, by_key, excluded):
    """Watched tensors alive after the forward that no hook saw: held by a checkpoint (a closure,
    ctx.run_function). A model-level one (watched outside a layer) is shared by all layers."""
    gc.collect()
    for ref, where in watched:
        t = ref()
        if t is None or t.dim() == 0 or _storage_key(t) in excluded:
            continue
        record = by_key.get(_storage_key(t))
        if record is None:
            region = where if where.startswith("layer ") else "shared"
            record = SavedStorage(t.storage().nbytes(), tuple(t.shape), str(t.dtype).replace("torch.", ""),
                                  region, {where}, set())
            by_key[_storage_key(t)] = record
        if not record.savers:
            record.savers.add("(kept by checkpoint)")


def measure(cfg: models.ModelConfig, run: models.RunConfig, seed=0, backward=False, par=None):
    """`par` (parallel_models.ParallelConfig): measure one tensor/sequence/context-parallel rank
    of the megatron model instead; its tokens are s/cp of the sequence."""
    if par is None:
        model, seq = models.build(cfg, run, seed), run.seq_len
    else:
        import parallel_models

        model, seq = parallel_models.build(cfg, run, par, seed), run.seq_len // par.cp
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, cfg.vocab, (run.micro_batch, seq), generator=generator)
    labels = torch.randint(0, cfg.vocab, (run.micro_batch, seq), generator=generator)
    excluded = {_storage_key(t) for t in list(model.parameters()) + list(model.buffers())}
    by_key = {}

    def pack(t):
        if t.dim() == 0 or t.numel() == 0:
            return t
        key = _storage_key(t)
        if key in excluded:
            return t
        where = models.current_region()
        record = by_key.get(key)
        if record is None:
            dtype = str(t.dtype).replace("torch.", "")
            record = SavedStorage(t.storage().nbytes(), tuple(t.shape), dtype, where, set(), set())
            by_key[key] = record
        record.regions.add(where)
        return t

    models.take_watched()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids, labels)
    _saver_names(loss.grad_fn, by_key)
    _add_kept_by_checkpoint(models.take_watched(), by_key, excluded)
    if backward:
        loss.backward()

    layer_regions = lambda r: {x for x in r.regions if x.startswith("layer ")}  # noqa: E731
    middle = cfg.layers // 2
    region_bytes, shared = {}, 0
    for record in by_key.values():
        if record.region == "shared" or len(layer_regions(record)) > 1:
            record.region = "shared"
            shared += record.bytes
        region_bytes[record.region] = region_bytes.get(record.region, 0) + record.bytes
    return Measurement(
        per_layer_bytes=region_bytes.get(f"layer {middle}", 0),
        total_bytes=sum(r.bytes for r in by_key.values()),
        middle_layer=middle,
        shared_bytes=shared,
        region_bytes=region_bytes,
        storages=list(by_key.values()),
    )


def format_storages(m: Measurement, only_region=None):
    lines = [f"    {'region':10s} {'saved by':42s} {'shape':22s} {'dtype':9s} {'bytes':>10s}"]
    for r in m.storages:
        if only_region and r.region != only_region:
            continue
        savers = ",".join(sorted(r.savers)) or "?"
        lines.append(f"    {r.region:10s} {savers[:42]:42s} {str(list(r.shape)):22s} {r.dtype:9s} {r.bytes:>10d}")
    return "\n".join(lines)
