#!/usr/bin/python3
"""Hold `actmem estimate --framework megatron --cpu-offloading-num-layers N` to Megatron-core's
activation CPU offloading (TransformerEngine's cpu_offload), emulated.

  /usr/bin/python3 validation/cpu_offload_validation.py --actmem build/actmem [--filter X] [--measure-only]

Megatron-LM d98e8a64ddf3 runs every decoder layer `with self.offload_context` (transformer_block.py
l.713-742; the context from get_cpu_offload_context(cpu_offloading, cpu_offloading_num_layers,
num_layers, ...) l.304-317), which is TE d0067d0da6cb's transformer_engine/pytorch/cpu_offload.py
(the default code path; NVTE_CPU_OFFLOAD_V1 unset). TE cannot run here (no CUDA, no streams). What
is emulated, on te_validation.py's Megatron layers (TE spec: TELayer; local spec: models.MegatronLayer)
and models.MegatronModel (embedding, final norm, output layer and loss outside the context):

  push_tensor / _check_if_offload (l.366-400, l.454-475): a tensor saved inside layer i < N is
      offloaded when it has at least 256*1024 elements, is not a Parameter (nor a parameter's
      storage: TE marks its weights _TE_do_not_offload, linear.py l.637), and is contiguous or a view
      with its base's element count (_switch_to_base_tensors l.138-172: the base moves); q, k, v given
      to FusedAttention are marked offload_base_tensor (backends.py l.1422: start_offload(q, k, v,
      offload_base_tensor=True)), so a non-contiguous q/k/v moves its base too. Other
      non-contiguous tensors stay ("Offload of this tensor will be skipped"). Tensors of layers >= N
      are never pushed (DefaultOffloadSynchronizer.push_tensor l.649-654).
  _deduplicate_tensors (l.174-198): one host copy per distinct tensor of a layer.
  DefaultOffloadSynchronizer._init_offload_synchronization_dicts (l.602-626): layer i's GPU
      tensors are released when layer L - N + i starts (finish_offload_map, fwd_step l.628-638) and
      reloaded into new GPU tensors when the backward of layer L - 1 - N + i starts
      (start_reload_map, bwd_step l.640-647, start_reload l.331-364); the previous backward layer is
      released at each bwd_step (OffloadSynchronizer.bwd_step l.534-541).

The forward runs once on CPU torch 1.13 under a saved_tensors_hooks pack that records every save
(region, storage, element count, contiguity, base). The GPU timeline is then replayed from those
records: after each layer's forward, at the end of the forward (head and loss saved), and at each
backward step, the bytes of the storages some active holder keeps (a save not offloaded, an
offloaded save not yet released) plus the reloaded copies alive. Its maximum is held to actmem's
`memory.activations_bytes` within 1 %; the host bytes (the deduplicated copies of the offloaded
layers) are held to `memory.host_activations_bytes` within 1 %.

Also: the layouts Megatron refuses (transformer_config.py l.1884-1899: num_layers >= the model's,
pipeline parallelism, recomputation) must be refused by the CLI, exit 2, naming
--cpu-offloading-num-layers. Ends with `N passed, M failed`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import models  # noqa: E402
import run_validation  # noqa: E402
import megatron_moe_models  # noqa: E402
import te_validation  # noqa: E402

TOLERANCE = 0.01
MIN_ELEMENTS = 256 * 1024  # cpu_offload.py l.457: `if t.numel() < 256 * 1024: return False`
TE = te_validation.TE
MegatronOpts = te_validation.MegatronOpts

# Four layers (N = 1, 2, 3 offloaded); s·b = 1024 tokens: an h = 256 hidden state has 262,144
# elements (moved), a GQA k or v (2 heads × 32) 65,536 (kept), an fp32 rsigma 1,024 (kept).
LLAMA4L = dict(te_validation.LLAMA, layers=4)
GPT4L = dict(te_validation.GPT, layers=4, max_positions=1024)
LLAMA_MHA4L = dict(te_validation.LLAMA_MHA, layers=4)
# Megatron-core MoE layers (megatron_moe_models.py): Mixtral-like, and Qwen2-MoE-like with layer 0
# dense (unequal layers: the window walk over layer kinds)
MIXTRAL4L = dict(run_validation.MIXTRAL, layers=4)
QWEN2_MOE4L = dict(run_validation.QWEN2_MOE, layers=4, mlp_only_layers=(0,))
# ... and with a wide dense layer 0 and a small vocabulary: the peak is reached mid-forward (and again
# in backward), while layer 0 is still resident, not at the end of the forward with the head and loss
BIG_DENSE4L = dict(QWEN2_MOE4L, dense_ffn=4000, vocab=200)


def _storage_key(t):
    return t.storage().data_ptr()


_FusedAttnFn = te_validation.FusedAttnFn


class FusedAttnMarked(_FusedAttnFn):
    """FusedAttnFn with TE's start_offload(q, k, v, offload_base_tensor=True) (backends.py l.1422)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        for t in args[:3]:
            if isinstance(t, torch.Tensor):
                t._offload_base_tensor = True
        return _FusedAttnFn.forward(ctx, *args, **kwargs)


def record_saves(cfg, run, opts, seed=0, build=None, par=None):
    """One forward; every saved tensor as (region, tensor, key, nbytes of its storage, offloadable).
    With `par`, one tensor/sequence/context-parallel rank (te_validation.build's MegatronRankModel):
    TE checks each rank's own tensors against the threshold."""
    model = build(cfg, run, opts, seed) if build else te_validation.build(cfg, run, opts, seed, par)
    g = torch.Generator().manual_seed(seed)
    seq = run.seq_len // (par.cp if par else 1)  # a CP rank's tokens
    ids = torch.randint(0, cfg.vocab, (run.micro_batch, seq), generator=g)
    labels = torch.randint(0, cfg.vocab, (run.micro_batch, seq), generator=g)
    params = {_storage_key(p) for p in model.parameters()}
    saves = []

    def pack(t):
        if t.dim() == 0 or t.numel() == 0 or _storage_key(t) in params:
            return t  # wrapped scalars; parameters (never offloaded, not activations)
        base_moves = t._base is not None and (t._base.numel() == t.numel() or getattr(t, "_offload_base_tensor", False))
        offloadable = t.numel() >= MIN_ELEMENTS and (t.is_contiguous() or base_moves)
        moved = t._base if (base_moves and not t.is_contiguous()) or (t._base is not None and t._base.numel() == t.numel()) else t
        # TE deduplicates by id() after switching views to their base; the reference Functions here
        # build some views inside autograd Functions, where `_base` is not the real one, so a copy is
        # keyed by the memory it covers (storage, offset, element count): what id() finds in TE.
        copy_key = (_storage_key(moved), moved.storage_offset(), moved.numel())
        saves.append(dict(region=models.current_region(), tensor=t, key=_storage_key(t), offloadable=offloadable,
                          copy_key=copy_key, copy_bytes=moved.numel() * moved.element_size()))
        return t

    te_validation.FusedAttnFn = FusedAttnMarked
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(ids, labels)
    finally:
        te_validation.FusedAttnFn = _FusedAttnFn
    for s in saves:
        s["nbytes"] = s["tensor"].storage().nbytes()
    del loss
    return saves


def layer_of(region):
    return int(region.split()[1]) if region.startswith("layer ") else None


def replay(saves, num_layers, n):
    """The GPU timeline of DefaultOffloadSynchronizer(num_layers, n) over the recorded saves:
    (peak bytes, the step where it is reached, host bytes, per-step list)."""
    w = num_layers - n
    released_at = {i: w + i for i in range(n)}            # finish_offload_map
    reload_at = {i: num_layers - 1 - n + i for i in range(n)}  # start_reload_map
    offloaded = [s for s in saves if layer_of(s["region"]) is not None and layer_of(s["region"]) < n
                 and s["offloadable"]]
    # host: one copy per distinct tensor of an offloaded layer (_deduplicate_tensors)
    copies = {}
    for s in offloaded:
        copies[(layer_of(s["region"]), s["copy_key"])] = s["copy_bytes"]
    host = sum(copies.values())
    nbytes = {}
    for s in saves:
        nbytes[s["key"]] = s["nbytes"]

    def resident(phase, k):
        """phase 'fwd': during layer k's forward (k = num_layers: the head and loss too);
        'bwd': during layer k's backward (head and loss done, layers > k done)."""
        held = set()
        for s in saves:
            i = layer_of(s["region"])
            if i is None:
                if s["region"] == "embedding" or phase == "fwd" and k == num_layers:
                    held.add(s["key"])
                continue
            if phase == "fwd" and i > k or phase == "bwd" and i > k:
                continue
            if i < n and s["offloadable"]:
                # the GPU original: from its save until layer w + i starts (fwd_step)
                if phase == "fwd" and k < released_at[i]:
                    held.add(s["key"])
                continue
            held.add(s["key"])
        total = sum(nbytes[key] for key in held)
        if phase == "bwd":  # reloaded copies: from bwd step reload_at[i] through layer i's backward
            total += sum(b for (i, _), b in copies.items() if reload_at[i] >= k >= i)
        return total

    steps = [("fwd", k, resident("fwd", k)) for k in range(num_layers + 1)]
    steps += [("bwd", k, resident("bwd", k)) for k in range(num_layers - 1, -1, -1)]
    peak = max(steps, key=lambda x: x[2])
    return peak[2], f"{peak[0]} {peak[1]}", host, steps


def case(name, model, dtype, seq, batch, n, opts, dropout=0.0, recompute="none", extra=(), refuse=False,
         moe=False, par=None):
    return dict(name=name, model=model, dtype=dtype, seq=seq, batch=batch, n=n, opts=opts, dropout=dropout,
                recompute=recompute, extra=list(extra), refuse=refuse, moe=moe, par=par)


P = te_validation.parallel_models.ParallelConfig
LLAMA_TP4L = dict(te_validation.LLAMA_TP, layers=4)


CASES = [
    case("te-llama-gqa-n1-bf16", LLAMA4L, "bf16", 512, 2, 1, MegatronOpts(TE)),
    case("te-llama-gqa-n2-bf16", LLAMA4L, "bf16", 512, 2, 2, MegatronOpts(TE)),
    case("te-llama-gqa-n3-bf16", LLAMA4L, "bf16", 512, 2, 3, MegatronOpts(TE)),
    case("te-llama-gqa-n2-fp32", LLAMA4L, "fp32", 256, 4, 2, MegatronOpts(TE)),
    # 512 tokens: the hidden-sized tensors (131,072 elements) stay, the FFN-wide ones (360,448) move
    case("te-llama-gqa-n2-bf16-small", LLAMA4L, "bf16", 256, 2, 2, MegatronOpts(TE)),
    case("te-llama-gqa-n2-fp8", LLAMA4L, "bf16", 512, 2, 2, MegatronOpts(TE, fp8="delayed")),
    case("te-llama-gqa-n2-drop", LLAMA4L, "bf16", 512, 2, 2, MegatronOpts(TE), dropout=0.1),
    case("te-gpt-n1-bf16", GPT4L, "bf16", 512, 3, 1, MegatronOpts(TE)),
    case("local-llama-gqa-n1-bf16", LLAMA4L, "bf16", 512, 2, 1, MegatronOpts("local")),
    case("local-llama-gqa-n2-bf16", LLAMA4L, "bf16", 512, 2, 2, MegatronOpts("local")),
    case("local-llama-gqa-n3-bf16", LLAMA4L, "bf16", 512, 2, 3, MegatronOpts("local")),
    case("local-gpt-n2-fp32", GPT4L, "fp32", 256, 4, 2, MegatronOpts("local")),
    # MHA with RoPE: q and k are new RoPE outputs, v still a strided slice of the fused QKV output
    case("local-llama-mha-n2-bf16", LLAMA_MHA4L, "bf16", 512, 4, 2, MegatronOpts("local")),
    case("te-llama-mha-n3-bf16", LLAMA_MHA4L, "bf16", 512, 4, 3, MegatronOpts(TE)),
    case("moe-mixtral-te-n2-bf16", MIXTRAL4L, "bf16", 512, 2, 2, MegatronOpts(TE), moe=True),
    case("moe-qwen2-local-n1-bf16", QWEN2_MOE4L, "bf16", 512, 2, 1, MegatronOpts("local"), moe=True),
    case("moe-qwen2-te-n3-bf16", QWEN2_MOE4L, "bf16", 512, 2, 3, MegatronOpts(TE), moe=True),
    case("moe-bigdense-te-n1-bf16", BIG_DENSE4L, "bf16", 512, 2, 1, MegatronOpts(TE), moe=True),
    case("moe-bigdense-te-n2-bf16", BIG_DENSE4L, "bf16", 512, 2, 2, MegatronOpts(TE), moe=True),
    # One TP 2 + SP rank (s/t tokens per rank in the norms: 1024 · 256 / 2 = 131,072 elements, kept)
    # and one TP 2 rank without SP (the h-wide tensors move). Not a CP rank: there the emulated ring
    # buffer (k|v in one 262,144-element tensor) moves while actmem keeps k and v as two storages
    # under the threshold (+1.8 % GPU, one layer input's bytes per layer); not modelled.
    case("te-llama-tp2-sp-n2-bf16", LLAMA_TP4L, "bf16", 512, 2, 2, MegatronOpts(TE), par=P(2, True)),
    case("te-llama-tp2-n2-bf16", LLAMA_TP4L, "bf16", 512, 2, 2, MegatronOpts(TE), par=P(2)),
    # Refused by Megatron (transformer_config.py l.1884-1899), so by actmem: exit 2 naming the flag.
    case("refuse-n-equals-layers", LLAMA4L, "bf16", 512, 2, 4, MegatronOpts(TE), refuse=True),
    case("refuse-full-recompute", LLAMA4L, "bf16", 512, 2, 2, MegatronOpts(TE), recompute="full", refuse=True),
    case("refuse-selective-recompute", LLAMA4L, "bf16", 512, 2, 2, MegatronOpts(TE), recompute="selective",
         refuse=True),
    case("refuse-pp2", LLAMA4L, "bf16", 512, 2, 2, MegatronOpts(TE), extra=["--pp", "2"], refuse=True),
]


def run_cli(actmem, c, cfg, run, workdir):
    path = os.path.join(workdir, c["name"] + ".json")
    with open(path, "w") as f:
        json.dump(run_validation.hf_config(cfg, run), f)
    args = run_validation.cli_args(actmem, path, run, c["par"], extra=te_validation.cli_extra(c["opts"], c["recompute"]) +
                                   ["--cpu-offloading-num-layers", str(c["n"])] + c["extra"])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return args, proc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actmem")
    ap.add_argument("--filter", default="")
    ap.add_argument("--measure-only", action="store_true")
    opts = ap.parse_args()
    torch.set_num_threads(2)
    passed = failed = 0
    print(f"{'case':30s}{'gpu meas':>11s}{'actmem':>11s}{'err%':>8s}{'host meas':>11s}{'actmem':>11s}{'err%':>8s}"
          "  peak at")
    with tempfile.TemporaryDirectory() as workdir:
        for c in CASES:
            if opts.filter not in c["name"]:
                continue
            cfg = models.ModelConfig(**c["model"])
            attention = "flash" if c["opts"].impl == TE else "eager"
            run = models.RunConfig("megatron", attention, c["recompute"], c["dtype"], c["seq"], c["batch"],
                                   hidden_dropout=c["dropout"], attention_dropout=c["dropout"])
            if c["refuse"]:
                if opts.measure_only:
                    continue
                args, proc = run_cli(opts.actmem, c, cfg, run, workdir)
                ok = proc.returncode == 2 and "--cpu-offloading-num-layers" in proc.stderr
                passed += ok
                failed += not ok
                print(f"{c['name']:30s} refused (exit {proc.returncode}): {proc.stderr.strip()[:110]}"
                      f"{'' if ok else '  FAIL'}")
                continue
            saves = record_saves(cfg, run, c["opts"], build=megatron_moe_models.build if c["moe"] else None,
                                 par=c["par"])
            gpu, where, host, steps = replay(saves, cfg.layers, c["n"])
            if opts.measure_only:
                print(f"{c['name']:30s}{gpu:>11d}{'':>11s}{'':>8s}{host:>11d}{'':>11s}{'':>8s}  {where}")
                print("    " + "  ".join(f"{p} {k}: {b}" for p, k, b in steps))
                for s in saves:
                    if s["region"] == "layer 0":
                        t = s["tensor"]
                        print(f"    {str(tuple(t.shape)):22s} {str(t.dtype):15s} numel {t.numel():>8d} "
                              f"contig {int(t.is_contiguous())} base {int(t._base is not None)} "
                              f"storage {s['nbytes']:>9d} {'moved' if s['offloadable'] else 'kept'}")
                continue
            args, proc = run_cli(opts.actmem, c, cfg, run, workdir)
            if proc.returncode != 0:
                print(f"{c['name']:30s} FAIL {' '.join(args)}\n{proc.stderr.strip()}")
                failed += 1
                continue
            memory = json.loads(proc.stdout)["memory"]
            e_gpu, e_host = memory["activations_bytes"], memory["host_activations_bytes"]
            err_gpu = (e_gpu - gpu) / gpu
            err_host = (e_host - host) / host if host else float(e_host != 0)
            ok = abs(err_gpu) <= TOLERANCE and abs(err_host) <= TOLERANCE
            passed += ok
            failed += not ok
            print(f"{c['name']:30s}{gpu:>11d}{e_gpu:>11d}{100 * err_gpu:>+8.2f}{host:>11d}{e_host:>11d}"
                  f"{100 * err_host:>+8.2f}  {where}{'' if ok else '  FAIL'}")
    if not opts.measure_only:
        print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
