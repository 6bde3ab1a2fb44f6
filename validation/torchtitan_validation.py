"""torchtitan's Llama 3 on Debian's torch 1.13 CPU: what each activation-checkpointing mode keeps,
measured, and `actmem estimate --framework torchtitan` held to it within 1 %.

The reference model follows torchtitan v0.2.2 (github.com/pytorch/torchtitan, tag v0.2.2):
  torchtitan/models/llama3/model/model.py   precompute_freqs_cis, reshape_for_broadcast,
                                            apply_rotary_emb, Attention, FeedForward,
                                            TransformerBlock, Transformer (sdpa attention,
                                            positions None, no dropout, untied output)
  torchtitan/components/loss.py             cross_entropy_loss (pred.flatten(0, 1).float(), sum)
  torchtitan/distributed/activation_checkpoint.py
                                            _apply_full_ac, _apply_layer_sac (every N-th block,
                                            a global counter from 1), _apply_op_sac (the policy)
  torchtitan/models/llama3/infra/parallelize.py
                                            _op_sac_save_list
Written here, line for line where torch 1.13 allows; what differs:
  * nn.RMSNorm does not exist in 1.13: torch >= 2.8 on CUDA runs nn.RMSNorm as the fused
    _fused_rms_norm, whose backward (_fused_rms_norm_backward(grad, input, shape, rstd, weight))
    reads the input and the fp32 rstd: emulated_ops.RMSNormFn saves exactly those.
  * F.scaled_dot_product_attention does not exist in 1.13: SdpaFlashFn stands for
    aten._scaled_dot_product_flash_attention (and the cuDNN kernel torchtitan puts first): it
    saves q, k, v, its output and the fp32 logsumexp, and its output is allocated (b, s, a, d)
    and returned transposed, so the model's .transpose(1, 2).contiguous() is a no-op view.
  * Per-op SAC: 1.13 has no create_selective_checkpoint_contexts. OpSacCheckpoint emulates it
    with the same two parts torch's implementation has: a TorchDispatchMode that runs the
    policy on every aten op of the block (torchtitan's _custom_policy verbatim: aten.mm counted
    per forward, odd counts and the other _save_list ops MUST_SAVE, the rest recomputed) and
    caches the MUST_SAVE outputs, and saved_tensors_hooks that keep nothing else: the forward
    keeps the block's inputs and the cache; unpacking in backward reruns the block once under
    a replay mode that returns the cached outputs for the MUST_SAVE ops (in order) instead of
    recomputing them. The emulated sdpa Function counts as a _save_list op: its outputs are
    cached and kept like the mm outputs, its internal ops are not policed; the rerun calls it
    again (the same values; torch returns the cached outputs instead, which changes backward
    time, not what the forward keeps). Gradients are checked against the model without
    checkpointing (`--self-check`).

Measured: the distinct storages the forward keeps for backward (saved_tensors_hooks, each
storage once, a view counts its storage, parameters and buffers such as freqs_cis excluded),
plus what a checkpoint keeps outside the hooks (its inputs, the SAC cache).

    /usr/bin/python3 validation/torchtitan_validation.py --actmem build/actmem
    /usr/bin/python3 validation/torchtitan_validation.py --measure-only [--filter X]
    /usr/bin/python3 validation/torchtitan_validation.py --self-check
"""
import dataclasses
import json
import os
import subprocess
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402
from emulated_ops import RMSNormFn, _attention_math  # noqa: E402

aten = torch.ops.aten

# ---------------------------------------------------------------------------------------------
# what the measurement sees

_REGION = ["embedding"]
_KEPT = []  # (tensor, region): held by a checkpoint outside the saved-tensor hooks


def _storage_key(t):
    return t.storage().data_ptr()


# ---------------------------------------------------------------------------------------------
# emulated torch 2.x CUDA kernels


class SdpaFlashFn(torch.autograd.Function):
    """aten._scaled_dot_product_flash_attention(q, k, v, is_causal=True), enable_gqa: inputs
    (b, heads, s, d) (k, v with kv heads, not repeated); saves q, k, v, out, fp32 logsumexp."""

    @staticmethod
    def forward(ctx, q, k, v):
        with torch.no_grad():
            out, lse = _attention_math(q, k, v)
            out = out.transpose(1, 2).contiguous().transpose(1, 2)  # allocated (b, s, a, d)
        ctx.save_for_backward(q, k, v, out, lse)
        _sac_cache_outputs(out, lse)  # a _save_list op under per-op SAC
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, _, _ = ctx.saved_tensors
        with torch.enable_grad():
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            o, _ = _attention_math(qq, kk, vv)
            return torch.autograd.grad(o, (qq, kk, vv), grad)


def rms_norm(x, weight, eps):
    return RMSNormFn.apply(x, weight, eps)


# ---------------------------------------------------------------------------------------------
# torchtitan v0.2.2 models/llama3/model/model.py


@dataclasses.dataclass
class Args:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn: int  # FeedForward's hidden_dim after torchtitan's multiple_of rounding (HF intermediate_size)
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    max_seq_len: int = 256


def precompute_freqs_cis(dim, end, theta):
    # model.py precompute_freqs_cis without the Llama 3.1 scaling (which changes values, not sizes)
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    seqlen = x.shape[1]
    freqs_cis = freqs_cis[0:seqlen]
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Attention(nn.Module):
    def __init__(self, a: Args):
        super().__init__()
        self.n_heads, self.n_kv_heads = a.n_heads, a.n_kv_heads
        self.head_dim = a.dim // a.n_heads
        self.wq = nn.Linear(a.dim, a.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(a.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(a.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * self.head_dim, a.dim, bias=False)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
        output = SdpaFlashFn.apply(xq, xk, xv).transpose(1, 2).contiguous()
        output = output.view(bs, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, a: Args):
        super().__init__()
        self.layer_id = layer_id
        self.attention = Attention(a)
        self.feed_forward = FeedForward(a.dim, a.ffn)
        self.attention_norm_weight = nn.Parameter(torch.ones(a.dim))
        self.ffn_norm_weight = nn.Parameter(torch.ones(a.dim))
        self.eps = a.norm_eps

    def forward(self, x, freqs_cis):
        h = x + self.attention(rms_norm(x, self.attention_norm_weight, self.eps), freqs_cis)
        out = h + self.feed_forward(rms_norm(h, self.ffn_norm_weight, self.eps))
        return out


class Transformer(nn.Module):
    def __init__(self, a: Args):
        super().__init__()
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        self.register_buffer("freqs_cis", precompute_freqs_cis(a.dim // a.n_heads, a.max_seq_len * 2, a.rope_theta),
                             persistent=False)
        self.layers = nn.ModuleList(TransformerBlock(i, a) for i in range(a.n_layers))
        self.norm_weight = nn.Parameter(torch.ones(a.dim))
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)
        self.eps = a.norm_eps
        self.wrappers = [None] * a.n_layers  # activation checkpointing per block (apply_ac)

    def forward(self, tokens, labels):
        _REGION[0] = "embedding"
        h = self.tok_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            _REGION[0] = f"layer {i}"
            wrap = self.wrappers[i]
            h = wrap(layer, h, self.freqs_cis) if wrap else layer(h, self.freqs_cis)
        _REGION[0] = "head"
        h = rms_norm(h, self.norm_weight, self.eps)
        pred = self.output(h)
        # components/loss.py cross_entropy_loss
        return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum", ignore_index=-100)


# ---------------------------------------------------------------------------------------------
# torchtitan v0.2.2 distributed/activation_checkpoint.py, emulated on torch 1.13


def full_ac(block, x, freqs_cis):
    """_apply_full_ac: ptd_checkpoint_wrapper (non-reentrant torch.utils.checkpoint)."""
    _KEPT.append((x, _REGION[0]))  # the non-reentrant checkpoint holds its inputs until backward
    return torch.utils.checkpoint.checkpoint(block, x, freqs_cis, use_reentrant=False)


# parallelize.py _op_sac_save_list, the ops this model dispatches: aten.mm and the sdpa kernel
# (SdpaFlashFn, cached by itself); aten.max and reduce_scatter_tensor never run in this block.
_SAVE_LIST = {aten.mm.default, aten.max.default}
_SAC = []  # the active per-op SAC forward, if any


def _sac_cache_outputs(*outs):
    if _SAC and _SAC[-1].recording:
        _SAC[-1].cache.extend(outs)


class _PolicyMode(TorchDispatchMode):
    """torchtitan's _custom_policy on every aten op: record (forward) or replay (recompute)."""

    def __init__(self, sac, recompute):
        super().__init__()
        self.sac, self.recompute = sac, recompute
        self.meta = defaultdict(int)
        self.replayed = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        mode = "recompute" if self.recompute else "forward"
        key = f"{mode}_mm_count"
        if func == aten.mm.default:
            self.meta[key] += 1
        to_save = func in _SAVE_LIST and not (func == aten.mm.default and self.meta[key] % 2 == 0)
        if not to_save:
            return func(*args, **kwargs)
        if self.recompute:  # MUST_SAVE: the cached output, not a recomputation
            out = self.sac.mm_cache[self.replayed]
            self.replayed += 1
            return out
        out = func(*args, **kwargs)
        self.sac.mm_cache.append(out.detach())  # an alias: the same storage, outside this graph
        self.sac.cache.append(out)
        return out


class OpSacCheckpoint:
    """_apply_op_sac for one block's forward: keeps the inputs and the MUST_SAVE outputs."""

    def __init__(self):
        self.cache = []      # everything kept: mm outputs and sdpa outputs
        self.mm_cache = []   # the aten ops' outputs, replayed in order
        self.recording = False

    def __call__(self, block, x, freqs_cis):
        self.cache, self.mm_cache = [], []
        state = {"grads": None}
        handles = []

        def pack(t):
            handles.append(None)
            return len(handles) - 1

        def unpack(i):
            if state["grads"] is None:  # rerun the block once, replaying the cache
                with torch.enable_grad(), _PolicyMode(self, recompute=True):
                    xx = x.detach().requires_grad_(x.requires_grad)
                    saved = []
                    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or len(saved) - 1,
                                                                  lambda j: saved[j]):
                        block(xx, freqs_cis)  # run for its saves; the output is not needed
                state["grads"] = saved
            return state["grads"][i]

        self.recording = True
        _SAC.append(self)
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack), _PolicyMode(self, recompute=False):
                out = block(x, freqs_cis)
        finally:
            _SAC.pop()
            self.recording = False
        _KEPT.append((x, _REGION[0]))
        for t in self.cache:
            _KEPT.append((t, _REGION[0]))
        return out


def apply_ac(model, mode, every=0):
    """apply_ac over model.layers: mode none | full | layer (selective N) | op (selective op)."""
    for i in range(len(model.layers)):
        count = i + 1  # _layer_sac_count, incremented before the test
        if mode == "full" or (mode == "layer" and count % every == 0):
            model.wrappers[i] = full_ac
        elif mode == "op":
            model.wrappers[i] = OpSacCheckpoint()
        else:
            model.wrappers[i] = None


# ---------------------------------------------------------------------------------------------
# measurement


def build(args: Args, dtype, seed=0):
    torch.manual_seed(seed)
    model = Transformer(args)
    for p in model.parameters():
        with torch.no_grad():
            p.normal_(0.0, 0.02) if p.dim() > 1 else p.fill_(1.0)
        p.data = p.data.to(dtype)  # parameters only: freqs_cis stays complex64 (as under FSDP2's param_dtype)
    return model


def measure(args: Args, dtype, seq, batch, mode, every=0, backward=False):
    model = build(args, dtype)
    apply_ac(model, mode, every)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, args.vocab_size, (batch, seq), generator=g)
    labels = torch.randint(0, args.vocab_size, (batch, seq), generator=g)
    excluded = {_storage_key(t) for t in list(model.parameters()) + list(model.buffers())}
    storages = {}

    def note(t, region):
        if t.dim() == 0 or t.numel() == 0 or _storage_key(t) in excluded:
            return
        key = _storage_key(t)
        if key not in storages:
            storages[key] = (t.storage().nbytes(), region, tuple(t.shape), str(t.dtype).replace("torch.", ""))

    def pack(t):
        note(t, _REGION[0])
        return t

    _KEPT.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(tokens, labels)
    for t, region in _KEPT:
        note(t, region)
    _KEPT.clear()
    if backward:
        loss.backward()
    regions = defaultdict(int)
    for nbytes, region, _, _ in storages.values():
        regions[region] += nbytes
    return {"total": sum(v[0] for v in storages.values()), "regions": dict(regions), "storages": storages,
            "loss": loss, "model": model}


def self_check():
    """Per-op SAC and full AC give the gradients of the plain model (bf16 tolerance in fp32 here)."""
    a = Args(dim=64, n_layers=3, n_heads=4, n_kv_heads=2, vocab_size=97, ffn=160)
    grads = {}
    for mode in ("none", "full", "op", "layer"):
        r = measure(a, torch.float32, 16, 2, mode, every=2, backward=True)
        grads[mode] = [p.grad.clone() for p in r["model"].parameters()]
    for mode in ("full", "op", "layer"):
        for g0, g1 in zip(grads["none"], grads[mode]):
            if not torch.allclose(g0, g1, rtol=1e-4, atol=1e-6):
                print(f"self-check: {mode} gradients differ from none")
                return False
    print("self-check: full, layer and op SAC gradients equal the plain model's")
    return True


# ---------------------------------------------------------------------------------------------
# cases

# GQA Llama-3-8B-like proportions at small size: h = 128·k, a/kv = 4, f = 3.5·h.
SMALL = Args(dim=256, n_layers=4, n_heads=8, n_kv_heads=2, vocab_size=512, ffn=896)
WIDE = Args(dim=128, n_layers=5, n_heads=4, n_kv_heads=4, vocab_size=1000, ffn=352)
CASES = []
for seq, batch in ((64, 1), (128, 2), (96, 3)):
    for mode, every in (("none", 0), ("full", 0), ("layer", 2), ("layer", 3), ("op", 0)):
        CASES.append((f"titan-gqa-{mode}{every or ''}-s{seq}-b{batch}-bf16", SMALL, "bf16", seq, batch, mode, every))
for mode, every in (("none", 0), ("full", 0), ("layer", 2), ("op", 0)):
    CASES.append((f"titan-mha-{mode}{every or ''}-s80-b2-fp32", WIDE, "fp32", 80, 2, mode, every))
    CASES.append((f"titan-mha-{mode}{every or ''}-s80-b2-bf16", WIDE, "bf16", 80, 2, mode, every))


def hf_config(a: Args, dtype):
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": a.dim,
            "num_hidden_layers": a.n_layers, "num_attention_heads": a.n_heads,
            "num_key_value_heads": a.n_kv_heads, "intermediate_size": a.ffn, "vocab_size": a.vocab_size,
            "max_position_embeddings": 2 * a.max_seq_len, "rms_norm_eps": a.norm_eps, "hidden_act": "silu",
            "rope_theta": a.rope_theta, "tie_word_embeddings": False,
            "torch_dtype": {"bf16": "bfloat16", "fp32": "float32"}[dtype]}


def call_actmem(actmem, name, a, dtype, seq, batch, mode, every, workdir):
    path = os.path.join(workdir, name + ".json")
    with open(path, "w") as f:
        json.dump(hf_config(a, dtype), f)
    recompute = {"none": "none", "full": "full", "layer": "selective", "op": "selective"}[mode]
    args = [actmem, "estimate", "--model", path, "--framework", "torchtitan", "--attention", "sdpa",
            "--seq-len", str(seq), "--micro-batch", str(batch), "--dtype", dtype, "--recompute", recompute, "--json",
            "--dp", "2"]  # FSDP2 needs a shard group (torchtitan: fsdp_enabled); activations are per GPU
    if mode in ("layer", "op"):
        args += ["--selective-ac-option", str(every) if mode == "layer" else "op"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None, f"{' '.join(args)}\nexit {proc.returncode}: {proc.stderr.strip()}"
    return json.loads(proc.stdout)["activations"], None


def layer_region(case):
    """The per-layer figure's region: a layer that runs normally under selective N (layer 0), else the
    middle one."""
    name, a, dtype, seq, batch, mode, every = case
    return "layer 0" if mode == "layer" else f"layer {a.n_layers // 2}"


def measure_case(case):
    """(measurement, per-layer bytes)."""
    name, a, dtype, seq, batch, mode, every = case
    m = measure(a, {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype], seq, batch, mode, every)
    return m, m["regions"].get(layer_region(case), 0)


def measure_only_row(case, measured):
    m, layer = measured
    print(f"{case[0]:36s} {layer:11d} {'':11s} {m['total']:11d}")
    for key, (nbytes, region, shape, dt) in m["storages"].items():
        if region in (layer_region(case), "embedding", "head"):
            print(f"    {region:9s} {str(shape):24s} {dt:9s} {nbytes:9d}")


def main():
    return runner.run_cases(CASES, measure_case, lambda case, actmem, workdir: call_actmem(actmem, *case, workdir),
                            lambda case, m, est: runner.worst_row(case[0], 36, m[1], m[0]["total"], est),
                            runner.worst_header(36), measure_only=measure_only_row, self_check=self_check,
                            listing=True, error_line=lambda name, err: f"{name:36s} FAIL {err}", threads=None)


if __name__ == "__main__":
    sys.exit(main())
