#!/usr/bin/python3
"""Pipeline parallel: activation memory in flight per rank, measured by executing Megatron's
schedules, against `actmem estimate --framework megatron --pp P [--vpp V] --num-micro-batches M`
(`activations.in_flight_by_stage[r]`).

  /usr/bin/python3 validation/pipeline_validation.py --actmem build/actmem [--filter SUBSTR]
  /usr/bin/python3 validation/pipeline_validation.py --list
  /usr/bin/python3 validation/pipeline_validation.py --measure-only [--filter SUBSTR] [--trace]

What runs (one process, all ranks):

* The megatron-style reference model of models.py (MegatronLayer, its fused-kernel emulations)
  split into pp ranks × vpp model chunks as Megatron assigns layers: chunk j of rank r holds layers
  [(j·pp + r)·L/(pp·vpp), (j·pp + r + 1)·L/(pp·vpp)); the embedding runs on rank 0's chunk 0, the
  final norm + output layer + fused cross entropy on the last rank's last chunk.
* Each rank's op list in Megatron-LM's order (megatron/core/pipeline_parallel/schedules.py):
    - forward_backward_pipelining_without_interleaving (vpp 1): num_warmup_microbatches =
      min(pp − r − 1, M) forwards; steady 1F1B, each step one forward then one backward; cool-down
      backwards.
    - forward_backward_pipelining_with_interleaving (vpp > 1): get_pp_rank_microbatches (warm-up
      (pp − r − 1)·2 + (vpp − 1)·microbatch_group_size_per_vp_stage, all forwards when that reaches
      M·vpp), get_schedule_table (virtual micro-batch k -> (micro-batch, chunk), groups of
      microbatch_group_size_per_vp_stage (pp, its default, or the case's; the last group m mod it),
      forward chunk = table chunk, backward
      chunk = vpp − 1 − table chunk on the oldest micro-batch of that chunk (input_tensors[chunk]
      .pop(0)); steady state: forward k + warm-up, then backward k; cool-down backwards.
  The ranks' lists are executed interleaved as their data dependencies allow (a forward needs the
  previous virtual stage's output, a backward the next virtual stage's input gradient); each rank's
  own order is exactly Megatron's, which is all its memory depends on.
* Stage to stage: the sender's output is handed over as a new tensor (p2p recv buffer,
  requires_grad, as p2p_communication's recv); the sender then pseudo-frees its output's data
  (deallocate_output_tensor: Megatron training always sets deallocate_pipeline_outputs = True in
  megatron/training/arguments.py core_transformer_config_from_args) and runs its backward later
  through the autograd engine directly (custom_backward). The receiver keeps the received tensor in
  input_tensors[chunk] until that micro-batch's backward on the chunk; it is the stage's first
  layer's saved input (the norm, or under full recompute the checkpoint's input), so it counts once,
  inside the first layer's bytes, as actmem counts it (a layer's input is part of the layer).
* Memory: saved_tensors_hooks during each forward record, per (rank, chunk, micro-batch), the
  storages saved for backward (data_ptr dedup, parameters/buffers and 0-dim tensors excluded, a
  view counts its whole storage; as measure.py). A rank holds the union of its in-flight records;
  a record goes when that (chunk, micro-batch)'s backward has run. The rank's peak is the maximum
  after each of its forwards. Backward really runs (reentrant checkpoint recomputation included,
  outside the hooks).

Self-check per case: the records of one micro-batch over all chunks add up to measure.measure()'s
total_bytes of the unsplit model (the split changes no saved tensor).
Exit status 1 when a rank's peak and actmem's in_flight_by_stage differ by more than 1 %.
"""
import argparse
import dataclasses
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.autograd.variable import Variable  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import emulated_ops as ops  # noqa: E402
import measure  # noqa: E402
import models  # noqa: E402
from run_validation import call_actmem  # noqa: E402

TOLERANCE = 0.01

torch.set_num_threads(2)

# tiny shapes: the head's fp32 softmax (4·s·b·V) is about one chunk of layers, so which chunks are
# in flight on the last rank shows in the bytes; odd V / heads on purpose
GPT = dict(family="gpt2", hidden=64, layers=0, heads=4, kv_heads=4, head_dim=16, ffn=256, vocab=1003, max_positions=64)
LLAMA_GQA = dict(family="llama", hidden=80, layers=0, heads=5, kv_heads=1, head_dim=16, ffn=216, vocab=1009, eps=1e-6)


@dataclasses.dataclass
class Case:
    name: str
    model: models.ModelConfig
    run: models.RunConfig
    pp: int
    vpp: int
    m: int  # micro-batches per flush
    first: int = 0  # uneven stages: layers on the first stage (Megatron --decoder-first-pipeline-num-layers)
    last: int = 0  # and on the last stage; the other stages split the rest evenly
    group: int = 0  # interleaved: --microbatch-group-size-per-virtual-pipeline-stage (0: pp, its default)

    def chunk_range(self, rank, chunk):
        """Layers [begin, end) of chunk `chunk` of pipeline rank `rank`, as Megatron-core assigns them
        (megatron/core/transformer/transformer_block.py get_num_layers_to_build and
        transformer_layer.py get_transformer_layer_offset): a stage's layers are split evenly over
        its vpp chunks; with uneven stages the first (last) stage holds `first` (`last`) layers,
        first/vpp per chunk, and the other stages split the rest evenly; virtual stage j holds the
        j-th chunk of every rank in rank order, so chunk j of rank r starts after j whole virtual
        stages and after ranks 0..r-1's j-th chunks."""
        if not (self.first or self.last):
            per = self.model.layers // (self.pp * self.vpp)
            c = chunk * self.pp + rank
            return c * per, (c + 1) * per
        given = (self.first > 0) + (self.last > 0)
        middle_stages = self.pp - given
        middle = (self.model.layers - self.first - self.last) // middle_stages if middle_stages else 0
        stage_layers = [self.first or middle] + [middle] * (self.pp - 2) + [self.last or middle]
        per_chunk = [n // self.vpp for n in stage_layers]
        virtual_stage = sum(per_chunk)
        begin = chunk * virtual_stage + sum(per_chunk[:rank])
        return begin, begin + per_chunk[rank]


def _case(base, tag, attn, rc, s, b, drop, pp, vpp, m, per_chunk=2):
    cfg = models.ModelConfig(**dict(base, layers=per_chunk * pp * vpp))
    run = models.RunConfig("megatron", attn, rc, "bf16", seq_len=s, micro_batch=b, hidden_dropout=drop, attention_dropout=drop)
    sched = f"pp{pp}" + (f"-vpp{vpp}" if vpp > 1 else "") + f"-m{m}"
    return Case(f"{tag}-{attn}-{rc}-{sched}", cfg, run, pp, vpp, m)


def _cases():
    out = []
    for base, tag, attn, s, b, drop in ((GPT, "gpt", "eager", 24, 2, 0.1), (LLAMA_GQA, "llama-gqa", "flash", 20, 2, 0.0)):
        for rc in ("none", "full"):
            # 1F1B: M < pp, M = pp, M = 2·pp
            for pp, ms in ((2, (1, 2, 4)), (4, (2, 4, 8))):
                for m in ms:
                    out.append(_case(base, tag, attn, rc, s, b, drop, pp, 1, m, per_chunk=3))
            # interleaved: M = pp, 2·pp (Megatron needs M >= pp, a multiple of pp here)
            for pp, vpp in ((2, 2), (4, 2)):
                for m in (pp, 2 * pp):
                    out.append(_case(base, tag, attn, rc, s, b, drop, pp, vpp, m))
        out.append(_case(base, tag, attn, "none", s, b, drop, 2, 3, 4, per_chunk=1))  # vpp 3 (Korthikanti's 175B/530B use 3)
        out.append(_case(base, tag, attn, "none", s, b, drop, 4, 3, 12, per_chunk=1))
        # --microbatch-group-size-per-virtual-pipeline-stage: schedules.py's own example (PP2 N3 M5
        # VP2: a last group of 2), a last group of pp exactly (M 8), and Megatron's CI *_tunable_overlap
        # cases (pp 4, vpp 3, one group of all 5 micro-batches)
        for pp, vpp, m, group in ((2, 2, 5, 3), (2, 2, 8, 3), (4, 3, 5, 5)):
            out.append(dataclasses.replace(_case(base, tag, attn, "none", s, b, drop, pp, vpp, m, per_chunk=1),
                                           group=group))
            out[-1].name += f"-group{group}"
        # uneven 1F1B stages (Llama 3 405B runs 7 + 14 × 8 + 7): first 1, middle 3, last 2 at pp 4;
        # only the last stage given at pp 3 (2 + 2 + 1)
        for rc in ("none", "full"):
            out.append(_uneven(base, tag, attn, rc, s, b, drop, pp=4, m=8, first=1, last=2, layers=1 + 3 * 2 + 2))
        out.append(_uneven(base, tag, attn, "none", s, b, drop, pp=3, m=2, first=0, last=1, layers=5))
        # uneven stages with the interleaved schedule (Megatron-core: first/vpp and last/vpp layers
        # per chunk on the first and last stage): Llama 3 405B's 126 layers on pp 16 at vpp 2 need
        # e.g. first 6, last 8. Here pp 4 vpp 2: first 2 (1 per chunk), middle 4 (2 per chunk), last 4;
        # pp 3 vpp 2: only the first stage given (2 + 4 + 4).
        for rc in ("none", "full"):
            out.append(_uneven(base, tag, attn, rc, s, b, drop, pp=4, m=8, first=2, last=4, layers=2 + 4 * 2 + 4, vpp=2))
        out.append(_uneven(base, tag, attn, "none", s, b, drop, pp=3, m=6, first=2, last=0, layers=10, vpp=2))
    return out


def _uneven(base, tag, attn, rc, s, b, drop, pp, m, first, last, layers, vpp=1):
    cfg = models.ModelConfig(**dict(base, layers=layers))
    run = models.RunConfig("megatron", attn, rc, "bf16", seq_len=s, micro_batch=b, hidden_dropout=drop, attention_dropout=drop)
    sched = f"pp{pp}" + (f"-vpp{vpp}" if vpp > 1 else "")
    return Case(f"{tag}-{attn}-{rc}-{sched}-first{first}-last{last}-m{m}", cfg, run, pp, vpp, m, first, last)


CASES = _cases()

# ---------------------------------------------------------------------------------------------
# Megatron's schedules, per rank: a list of ("F" | "B", chunk, micro-batch)


def schedule_table(m, vpp, group):
    """schedules.py get_schedule_table: virtual micro-batch k -> (micro-batch, chunk)."""
    table = []
    for first in range(0, m, group):
        last = m if first + group >= m else first + group
        table += [(mb, chunk) for chunk in range(vpp) for mb in range(first, last)]
    return table


def rank_schedule(pp, vpp, m, rank, group=0):
    if vpp == 1:  # forward_backward_pipelining_without_interleaving
        warmup = min(pp - rank - 1, m)
        ops_ = [("F", 0, i) for i in range(warmup)]
        for i in range(m - warmup):
            ops_ += [("F", 0, warmup + i), ("B", 0, i)]
        ops_ += [("B", 0, i) for i in range(m - warmup, m)]
        return ops_
    # forward_backward_pipelining_with_interleaving, microbatch_group_size_per_vp_stage (default pp)
    group = group or pp
    if not (pp <= group <= m) or 0 < m % group < pp:
        raise ValueError(f"pp {pp} vpp {vpp} M {m}: Megatron rejects this interleaved layout")
    total = m * vpp
    table = schedule_table(m, vpp, group)
    warmup = (pp - rank - 1) * 2 + (vpp - 1) * group  # get_pp_rank_microbatches
    if warmup >= total:
        warmup = total  # are_all_microbatches_in_warmup
    fifo = [[] for _ in range(vpp)]  # input_tensors[chunk]: forwards not yet backwarded, oldest first
    ops_ = []

    def forward(k):
        mb, chunk = table[k]
        fifo[chunk].append(mb)
        ops_.append(("F", chunk, mb))

    def backward(k):
        chunk = vpp - 1 - table[k][1]  # get_model_chunk_id(k, forward=False)
        ops_.append(("B", chunk, fifo[chunk].pop(0)))

    for k in range(warmup):
        forward(k)
    for k in range(total - warmup):
        forward(k + warmup)
        backward(k)
    for k in range(total - warmup, total):
        backward(k)
    return ops_


# ---------------------------------------------------------------------------------------------
# the model split into chunks (MegatronModel.forward, cut at chunk boundaries)


class Chunks:
    def __init__(self, c: Case, seed=0):
        self.c = c
        self.model = models.build(c.model, c.run, seed)
        self.excluded = {measure._storage_key(t) for t in list(self.model.parameters()) + list(self.model.buffers())}


    def forward(self, rank, chunk, input_tensor, input_ids, labels):
        model, cfg, run = self.model, self.c.model, self.c.run
        s, b = run.seq_len, run.micro_batch
        pre = rank == 0 and chunk == 0
        post = rank == self.c.pp - 1 and chunk == self.c.vpp - 1
        rope = None
        if cfg.family != "gpt2":  # GPTModel computes rotary_pos_emb on every stage (lru_cache'd: one tensor);
            rope = models.megatron_rotary_freqs(s, cfg.head_dim)  # fused RoPE saves none of it, the checkpoint does
        if pre:
            with models.region("embedding"):
                x = model.embed(input_ids)
                if cfg.family == "gpt2":
                    x = x + model.pos_embed(torch.arange(s).repeat(b, 1))
                x = x.transpose(0, 1).contiguous()
                x = ops.dropout(x, run.hidden_dropout)
        else:
            x = input_tensor
        first, end = self.c.chunk_range(rank, chunk)
        for i in range(first, end):
            layer = model.layers[i]
            with models.region(f"layer {i}"):
                if run.recompute == "full":
                    x = checkpoint(layer, x, rope, use_reentrant=True)  # rotary_pos_emb positional
                else:
                    x = layer(x, rope)
        if not post:
            return x
        with models.region("head"):
            if cfg.family == "gpt2":
                x = ops.LayerNormFn.apply(x, model.final_w, model.final_b, cfg.eps)
            else:
                x = ops.RMSNormFn.apply(x, model.final_w, cfg.eps)
            weight = model.embed.weight if cfg.tie_embeddings else model.output_layer.weight
            logits = torch.nn.functional.linear(x, weight)
            losses = ops.FusedCrossEntropyFn.apply(logits, labels.transpose(0, 1).contiguous())
            return losses.sum() / losses.numel() / self.c.m  # forward_step: loss / num_microbatches


def custom_backward(output, grad_output):
    """schedules.py custom_backward: the C++ engine directly (the output's data was pseudo-freed)."""
    if grad_output is None:
        grad_output = torch.ones_like(output)
    Variable._execution_engine.run_backward(
        tensors=(output,), grad_tensors=(grad_output,), keep_graph=False, create_graph=False,
        inputs=tuple(), allow_unreachable=True, accumulate_grad=True,
    )  # fmt: skip


@dataclasses.dataclass
class Result:
    peak: list  # per rank, bytes
    at_peak: list  # per rank: {chunk: micro-batches in flight} at its peak
    record_bytes: dict  # (rank, chunk) -> bytes one micro-batch's forward saved
    one_micro_batch: int  # micro-batch 0's storages over all chunks (each once)
    trace: list


def execute(c: Case, seed=0):
    chunks = Chunks(c, seed)
    pp, vpp, m = c.pp, c.vpp, c.m
    gen = torch.Generator().manual_seed(seed)
    data = [
        (torch.randint(0, c.model.vocab, (c.run.micro_batch, c.run.seq_len), generator=gen),
         torch.randint(0, c.model.vocab, (c.run.micro_batch, c.run.seq_len), generator=gen))
        for _ in range(m)
    ]  # fmt: skip
    queues = [list(rank_schedule(pp, vpp, m, r, c.group)) for r in range(pp)]
    sent = {}  # (rank, chunk, mb) -> the tensor its successor receives (p2p recv buffer)
    grads = {}  # (rank, chunk, mb) -> gradient of its output, sent back by the successor
    pending = {}  # (rank, chunk, mb) -> (input tensor, output tensor) until its backward
    live = [dict() for _ in range(pp)]  # rank -> (chunk, mb) -> {storage key: (bytes, tensor)}
    peak, at_peak = [0] * pp, [None] * pp
    record_bytes, one_mb, trace = {}, {}, []  # one_mb: micro-batch 0's storages over all chunks

    def prev_stage(r, j):
        return (r - 1, j) if r > 0 else (pp - 1, j - 1)

    def next_stage(r, j):
        return (r + 1, j) if r < pp - 1 else (0, j + 1)

    def is_first(r, j):
        return r == 0 and j == 0

    def is_last(r, j):
        return r == pp - 1 and j == vpp - 1

    def ready(r, op):
        kind, j, mb = op
        if kind == "F":
            return is_first(r, j) or (*prev_stage(r, j), mb) in sent
        return is_last(r, j) or (*next_stage(r, j), mb) in grads

    def run_op(r, op):
        kind, j, mb = op
        if kind == "F":
            input_tensor = None if is_first(r, j) else sent.pop((*prev_stage(r, j), mb))
            record = {}

            def pack(t):
                if t.dim() > 0 and t.numel() > 0:
                    key = measure._storage_key(t)
                    if key not in chunks.excluded and key not in record:
                        record[key] = (t.storage().nbytes(), t)
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                output = chunks.forward(r, j, input_tensor, *data[mb])
            nbytes = sum(v[0] for v in record.values())
            record_bytes.setdefault((r, j), nbytes)
            if mb == 0:  # a storage saved by several chunks (the lru_cache'd rotary_pos_emb) counts once
                one_mb.update(record)
            live[r][(j, mb)] = record
            if not is_last(r, j):
                # send_forward / recv_forward: the receiver gets its own buffer, requires_grad
                sent[(r, j, mb)] = output.detach().clone().requires_grad_()
                assert output._base is None
                output.data = torch.empty((1,), dtype=output.dtype)  # deallocate_output_tensor
            pending[(r, j, mb)] = (input_tensor, output)
            alive = {}
            for rec in live[r].values():
                alive.update(rec)
            now = sum(v[0] for v in alive.values())
            if now > peak[r]:
                peak[r] = now
                counts = {}
                for jj, _ in live[r]:
                    counts[jj] = counts.get(jj, 0) + 1
                at_peak[r] = dict(sorted(counts.items()))
            trace.append(f"rank {r}: F chunk {j} mb {mb}  alive {now}")
        else:
            input_tensor, output = pending.pop((r, j, mb))
            grad = None if is_last(r, j) else grads.pop((*next_stage(r, j), mb))
            custom_backward(output, grad)
            if not is_first(r, j):
                grads[(r, j, mb)] = input_tensor.grad
            del live[r][(j, mb)]
            trace.append(f"rank {r}: B chunk {j} mb {mb}")

    while any(queues):
        progressed = False
        for r in range(pp):
            while queues[r] and ready(r, queues[r][0]):
                run_op(r, queues[r].pop(0))
                progressed = True
        if not progressed:
            heads = {r: q[0] for r, q in enumerate(queues) if q}
            raise RuntimeError(f"{c.name}: schedule deadlock, next ops {heads}")
    assert not pending and not sent and not grads and not any(live)
    return Result(peak, at_peak, record_bytes, sum(v[0] for v in one_mb.values()), trace)


# ---------------------------------------------------------------------------------------------
# actmem


def run_cli(actmem, c: Case, workdir):
    """Returns (activations dict, None) or (None, error text)."""

    def check(activations):
        by_stage = [int(x) for x in activations["in_flight_by_stage"]]
        if len(by_stage) != c.pp:
            raise ValueError(f"in_flight_by_stage has {len(by_stage)} entries, pp is {c.pp}")

    extra = ["--pp", str(c.pp), "--vpp", str(c.vpp), "--num-micro-batches", str(c.m)]
    if c.first:
        extra += ["--first-stage-layers", str(c.first)]
    if c.last:
        extra += ["--last-stage-layers", str(c.last)]
    if c.group:
        extra += ["--microbatch-group", str(c.group)]
    return call_actmem(actmem, c.name, c.model, c.run, workdir, extra=extra, check=check)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actmem", help="path to the actmem binary")
    parser.add_argument("--filter", default="", help="run only cases whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the cases (and each rank's schedule) and exit")
    parser.add_argument("--measure-only", action="store_true", help="measure, no CLI")
    parser.add_argument("--trace", action="store_true", help="print every schedule step (rank, op, bytes alive)")
    args = parser.parse_args()
    cases = [c for c in CASES if args.filter in c.name]
    if args.list:
        for c in cases:
            print(c.name)
            for r in range(c.pp):
                print(f"    rank {r}: " + " ".join(f"{k}{j}.{mb}" for k, j, mb in rank_schedule(c.pp, c.vpp, c.m, r, c.group)))
        print(f"{len(cases)} cases")
        return 0
    if not cases:
        print(f"no case matches {args.filter!r}", file=sys.stderr)
        return 2
    if not args.measure_only and not args.actmem:
        parser.error("--actmem PATH is required unless --list or --measure-only")

    started = time.time()
    passed, failed = 0, 0
    whole = {}  # unsplit model total per (model, run): the self-check
    print(f"{'case':34s} {'rank':>4s} {'in flight (chunk: micro-batches)':34s} {'measured':>10s} {'actmem':>10s} {'err%':>7s}")
    with tempfile.TemporaryDirectory(prefix="actmem-pipeline-") as workdir:
        for c in cases:
            res = execute(c)
            key = (repr(c.model), repr(c.run))
            if key not in whole:
                whole[key] = measure.measure(c.model, c.run).total_bytes
            problems = []
            if res.one_micro_batch != whole[key]:
                problems.append(f"self-check: one micro-batch over all chunks {res.one_micro_batch} != unsplit model {whole[key]}")
            est, error = (None, None) if args.measure_only else run_cli(args.actmem, c, workdir)
            if error:
                problems.append("CLI failed: " + error)
            ok_case = not problems
            for r in range(c.pp):
                flight = ", ".join(f"{j}: {n}" for j, n in res.at_peak[r].items())
                if est is None:
                    print(f"{c.name if r == 0 else '':34s} {r:>4d} {flight:34s} {res.peak[r]:>10d}")
                    continue
                e = int(est["in_flight_by_stage"][r])
                err = (e - res.peak[r]) / res.peak[r]
                ok = abs(err) <= TOLERANCE
                ok_case &= ok
                print(f"{c.name if r == 0 else '':34s} {r:>4d} {flight:34s} {res.peak[r]:>10d} {e:>10d} {100 * err:>+7.2f}  {'ok' if ok else 'FAIL'}")
            for p in problems:
                print("    " + p.replace("\n", "\n    "))
            if args.trace or (not ok_case and not args.measure_only):
                per_chunk = ", ".join(f"r{r}c{j}: {n}" for (r, j), n in sorted(res.record_bytes.items()))
                print(f"    one micro-batch's saved bytes per (rank, chunk): {per_chunk}")
            if args.trace:
                print("    " + "\n    ".join(res.trace))
            if not args.measure_only or problems:
                passed += ok_case
                failed += not ok_case
    print(f"({time.time() - started:.1f} s)")
    if args.measure_only:
        print(f"{len(cases)} cases measured, {failed} self-check failures")
        return 1 if failed else 0
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
