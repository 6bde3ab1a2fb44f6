#!/usr/bin/python3
"""Megatron-core multi-latent attention (DeepSeek-V3 style), measured: what a dense MLA layer of
the local and the TransformerEngine spec keeps for backward, under recompute none / selective
(recompute_modules core_attn, mla_up_proj, mlp) / full, eager and flash, bf16 and fp32, and
`actmem estimate --framework megatron --transformer-impl ... --recompute-modules ...` held to it
within 1 % per layer (the middle one) and in total.

The reference layer is megatron_mla_models.MegatronMLALayer (Megatron-LM main @d98e8a64ddf3,
multi_latent_attention.py and gpt_layer_specs.py; its docstring names the lines), every layer
dense (the config's first_k_dense_replace = num_hidden_layers), MLA's RoPE fused (Megatron-LM's
default apply_rope_fusion with yarn). The TE modules are te_validation.py's emulations of TE's
save lists (TELinear, TELayerNormColumnParallelLinear, FusedAttention). Measurement:
te_validation.measure (saved-tensor hooks, each storage once, parameters excluded, a storage
freed by CheckpointWithoutOutput counts 0).

    /usr/bin/python3 validation/megatron_mla_validation.py --actmem build/actmem
    /usr/bin/python3 validation/megatron_mla_validation.py --measure-only [--filter X]
    /usr/bin/python3 validation/megatron_mla_validation.py --self-check
"""
import dataclasses
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import run_validation  # noqa: E402
import runner  # noqa: E402
import te_validation as te  # noqa: E402
from megatron_mla_models import MegatronMLALayer, MegatronMLAUnfusedRopeLayer  # noqa: E402

TE = "transformer_engine"
# run_validation.DSV3's attention (q_lora_rank 96, kv_lora_rank 72, nope 32 + rope 16 = 48 != v 40),
# every layer dense (dense_ffn 640); and q_proj straight from h (no q LoRA), v head dim = q/k's
DSV3_DENSE = dict(run_validation.DSV3, first_dense=3)
DSV3_NOLORA_DENSE = dict(run_validation.DSV3_NOLORA, layers=3, first_dense=3)


@dataclasses.dataclass(frozen=True)
class MLAOpts(te.MegatronOpts):
    rope_fusion: bool = True  # False: --no-rope-fusion (MegatronMLAUnfusedRopeLayer)


def build(cfg, run, opts, seed=0):
    torch.manual_seed(seed)
    model = models.MegatronModel(cfg, run)
    if opts.fp8 != "none":  # the fp8-* cases
        from megatron_mla_models import MegatronMLAFp8Layer

        model.layers = nn.ModuleList(MegatronMLAFp8Layer(cfg, run, opts.fp8, opts.modules) for _ in range(cfg.layers))
        return model.to(run.torch_dtype).train()
    layer = MegatronMLALayer if getattr(opts, "rope_fusion", True) else MegatronMLAUnfusedRopeLayer
    model.layers = nn.ModuleList(layer(cfg, run, opts.impl, opts.modules) for _ in range(cfg.layers))
    return model.to(run.torch_dtype).train()


def measure(cfg, run, opts, backward=False):
    return te.measure(cfg, run, opts, backward=backward, build_fn=build)


# one TP / SP rank (local spec): heads, q_lora_rank, kv_lora_rank + rope dim and dense ffn divisible by 4
DSV3_TP = dict(DSV3_DENSE, heads=4, kv_heads=4)


def measure_rank(cfg, run, par, modules=("core_attn",)):
    """measure.measure of one tensor/sequence-parallel rank (parallel_models.py) whose layers are
    MegatronMLARankLayer (recompute_modules `modules` under run.recompute selective)."""
    import measure
    import parallel_models
    from megatron_mla_models import MegatronMLARankLayer

    build_rank = parallel_models.build

    def mla_rank(c, r, p, seed=0):
        torch.manual_seed(seed)
        model = parallel_models.MegatronRankModel(c, r, p)
        model.layers = nn.ModuleList(MegatronMLARankLayer(c, r, p, modules) for _ in range(c.layers))
        return model.to(r.torch_dtype).train()

    if "mla_up_proj" in modules and run.recompute == "selective":
        # CheckpointWithoutOutput frees query, key, value (resize_(0)) and their addresses are
        # reused: te_validation.measure reads each storage's bytes after the forward (a freed one
        # counts 0) and retires freed entries; measure.measure does not
        m = te.measure(cfg, run, None, par=par, build_fn=lambda c, r, o, seed: mla_rank(c, r, par, seed))
        return m
    parallel_models.build = mla_rank
    try:
        return measure.measure(cfg, run, par=par)
    finally:
        parallel_models.build = build_rank


def measure_cp_rank(cfg, run, par, opts):
    """te_validation.measure of one context-parallel rank (tp 1; parallel_models.MegatronRankModel,
    s/cp tokens) whose layers are MegatronMLACPLayer (TE spec)."""
    import parallel_models
    from megatron_mla_models import MegatronMLACPLayer

    def build_cp(c, r, o, seed=0):
        torch.manual_seed(seed)
        model = parallel_models.MegatronRankModel(c, r, par)
        model.layers = nn.ModuleList(MegatronMLACPLayer(c, r, o.modules, par.cp) for _ in range(c.layers))
        return model.to(r.torch_dtype).train()

    return te.measure(cfg, run, opts, par=par, build_fn=build_cp)


def self_check():
    """Gradients with recompute_modules mla_up_proj (+ core_attn, mlp) equal the plain layer's
    (fp32), local eager and TE flash: the checkpoint, the freed-and-restored q/k/v storages and
    the fused-RoPE Functions' backwards."""
    cfg = models.ModelConfig(**dict(DSV3_DENSE, layers=2, first_dense=2))
    ok = True
    for impl, attention, fused in (("local", "eager", True), ("local", "flash", True), (TE, "flash", True),
                                   ("local", "eager", False), (TE, "flash", False)):
        grads = []
        for rc, o in (("none", MLAOpts(impl, rope_fusion=fused)),
                      ("selective", MLAOpts(impl, modules=("core_attn", "mla_up_proj", "mlp"), rope_fusion=fused))):
            m = measure(cfg, models.RunConfig("megatron", attention, rc, "fp32", 12, 2), o, backward=True)
            grads.append([p.grad.clone() for p in m["model"].parameters()])
        for g0, g1 in zip(*grads):
            if not torch.allclose(g0, g1, rtol=1e-4, atol=1e-6):
                print(f"self-check: {impl} {attention}: gradients with mla_up_proj differ from the plain layer's")
                ok = False
                break
    # the CP ring attention with MLA's head dims (v's 8 != q/k's 12) against plain attention
    q, k, v = (torch.randn(4, 2, 3, d, requires_grad=True) for d in (12, 12, 8))
    got = torch.autograd.grad(te.CPAttnP2PFn.apply(q, k, v, 2).square().sum(), (q, k, v))
    p = (1, 2, 0, 3)
    o, _ = te._attention_math(q.permute(p), torch.cat([k, k]).permute(p), torch.cat([v, v]).permute(p), causal=False)
    ref = torch.autograd.grad(o.permute(2, 0, 1, 3).square().sum(), (q, k, v))
    if not all(torch.allclose(a, r, rtol=1e-4, atol=1e-5) for a, r in zip(got, ref)):
        print("self-check: CPAttnP2PFn with dv != dqk: gradients differ")
        ok = False
    if ok:
        print("self-check: local and TE MLA layers with recompute_modules mla_up_proj give the plain gradients; "
              "so does the CP ring attention with dv != dqk")
    return self_check_fp8() and ok


def self_check_fp8():
    """The fp8 layer (MegatronMLAFp8Layer, fp32) with recompute_modules layernorm, mla_up_proj,
    core_attn, mlp (tensorwise) gives the plain fp8 layer's gradients, and those of the bf16 TE
    layer (the emulation's backward is exact)."""
    cfg = models.ModelConfig(**dict(DSV3_DENSE, layers=2, first_dense=2))
    ok = True
    grads = []
    for rc, o in (("none", te.MegatronOpts(TE)), ("none", te.MegatronOpts(TE, fp8="tensorwise")),
                  ("selective", te.MegatronOpts(TE, fp8="tensorwise",
                                                modules=("layernorm", "mla_up_proj", "core_attn", "mlp")))):
        m = measure(cfg, models.RunConfig("megatron", "flash", rc, "fp32", 12, 2), o, backward=True)
        grads.append([p.grad.clone() for p in m["model"].parameters()])
    for other in grads[1:]:
        for g0, g1 in zip(grads[0], other):
            if not torch.allclose(g0, g1, rtol=1e-4, atol=1e-6):
                print("self-check: the fp8 MLA layer's gradients differ from the bf16 TE layer's")
                ok = False
                break
    if ok:
        print("self-check: the fp8 MLA layer (with layernorm, mla_up_proj, core_attn, mlp) gives the plain gradients")
    return ok


def opts(impl="local", *modules):
    return te.MegatronOpts(impl, modules=modules or ("core_attn",))


def fp8opts(recipe, *modules):
    """The TE spec under --fp8 (megatron_mla_models.MegatronMLAFp8Layer)."""
    return te.MegatronOpts(TE, fp8=recipe, modules=modules or ("core_attn",))


# TE fp8 on MLA: the down/up projections' and linear_proj's fp8 inputs (fp8-* cases)
FP8_CASES = [
    ("fp8-te-flash-none-delayed", DSV3_DENSE, "flash", "bf16", 41, 3, "none", fp8opts("delayed")),
    ("fp8-te-flash-none-tensorwise", DSV3_DENSE, "flash", "bf16", 41, 3, "none", fp8opts("tensorwise")),
    ("fp8-te-flash-coreattn-delayed", DSV3_DENSE, "flash", "bf16", 41, 3, "selective", fp8opts("delayed")),
    ("fp8-te-flash-mlaup-delayed", DSV3_DENSE, "flash", "bf16", 41, 3, "selective", fp8opts("delayed", "mla_up_proj")),
    ("fp8-te-flash-mlaup-mlp-tensorwise", DSV3_DENSE, "flash", "bf16", 41, 3, "selective",
     fp8opts("tensorwise", "mla_up_proj", "mlp")),
    ("fp8-te-flash-layernorm-tensorwise", DSV3_DENSE, "flash", "bf16", 41, 3, "selective",
     fp8opts("tensorwise", "layernorm")),
    ("fp8-te-flash-layernorm-mlaup-coreattn-tensorwise", DSV3_DENSE, "flash", "bf16", 41, 3, "selective",
     fp8opts("tensorwise", "layernorm", "mla_up_proj", "core_attn")),
    ("fp8-te-flash-full-delayed", DSV3_DENSE, "flash", "bf16", 41, 3, "full", fp8opts("delayed")),
    ("fp8-nolora-te-flash-none-delayed", DSV3_NOLORA_DENSE, "flash", "bf16", 33, 2, "none", fp8opts("delayed")),
    ("fp8-nolora-te-flash-mlaup-tensorwise", DSV3_NOLORA_DENSE, "flash", "bf16", 33, 2, "selective",
     fp8opts("tensorwise", "mla_up_proj")),
    ("fp8-nolora-te-flash-layernorm-tensorwise", DSV3_NOLORA_DENSE, "flash", "bf16", 33, 2, "selective",
     fp8opts("tensorwise", "layernorm")),
]
def unfused(impl="local", *modules):  # --no-rope-fusion
    return MLAOpts(impl, modules=modules or ("core_attn",), rope_fusion=False)


CASES = [
    # name, model, attention, dtype, seq, batch, recompute, MegatronOpts[, dropout]
    ("local-eager-none-bf16", DSV3_DENSE, "eager", "bf16", 37, 3, "none", opts()),
    ("local-eager-none-fp32", DSV3_DENSE, "eager", "fp32", 29, 2, "none", opts()),
    ("local-flash-none-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "none", opts()),
    ("local-eager-coreattn-bf16", DSV3_DENSE, "eager", "bf16", 37, 3, "selective", opts()),
    ("local-eager-full-bf16", DSV3_DENSE, "eager", "bf16", 37, 3, "full", opts()),
    ("local-flash-full-bf16", DSV3_DENSE, "flash", "bf16", 41, 2, "full", opts()),
    ("local-eager-mlaup-bf16", DSV3_DENSE, "eager", "bf16", 37, 3, "selective", opts("local", "mla_up_proj")),
    ("local-eager-coreattn-mlaup-bf16", DSV3_DENSE, "eager", "bf16", 37, 3, "selective",
     opts("local", "core_attn", "mla_up_proj")),
    ("local-flash-mlaup-mlp-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "selective",
     opts("local", "mla_up_proj", "mlp")),
    ("local-eager-none-bf16-drop", DSV3_DENSE, "eager", "bf16", 37, 3, "none", opts(), 0.1),
    ("nolora-local-eager-none-bf16", DSV3_NOLORA_DENSE, "eager", "bf16", 29, 3, "none", opts()),
    ("nolora-local-flash-mlaup-fp32", DSV3_NOLORA_DENSE, "flash", "fp32", 33, 2, "selective",
     opts("local", "mla_up_proj")),
    # one rank of tensor (and sequence) parallelism, local spec; MegatronMLARankLayer
    ("tp4-local-eager-none-bf16", DSV3_TP, "eager", "bf16", 40, 2, "none", opts(), 0.0, (4, False)),
    ("tp2-local-flash-coreattn-bf16", DSV3_TP, "flash", "bf16", 40, 2, "selective", opts(), 0.0, (2, False)),
    ("tp4-sp-local-eager-none-bf16", DSV3_TP, "eager", "bf16", 40, 2, "none", opts(), 0.0, (4, True)),
    ("tp2-sp-local-flash-none-fp32", DSV3_TP, "flash", "fp32", 40, 2, "none", opts(), 0.0, (2, True)),
    # mla_up_proj on a rank: under SP the checkpoint's k_pos_emb input is a view of the gathered
    # [s, b, rkv+dr] kv_combined, which it keeps (without SP the norm keeps that storage anyway)
    ("tp2-local-eager-mlaup-bf16", DSV3_TP, "eager", "bf16", 40, 2, "selective", opts("local", "mla_up_proj"), 0.0,
     (2, False)),
    ("tp4-sp-local-eager-mlaup-bf16", DSV3_TP, "eager", "bf16", 40, 2, "selective", opts("local", "mla_up_proj"), 0.0,
     (4, True)),
    ("tp2-sp-local-flash-coreattn-mlaup-fp32", DSV3_TP, "flash", "fp32", 40, 2, "selective",
     opts("local", "core_attn", "mla_up_proj"), 0.0, (2, True)),
    # one context-parallel rank of the TE spec (tp 1, cp 2): AttnFuncWithCPAndKVP2P; MegatronMLACPLayer
    ("te-cp2-flash-none-bf16", DSV3_DENSE, "flash", "bf16", 40, 2, "none", opts(TE), 0.0, (1, False, 2)),
    ("te-cp2-flash-mlaup-fp32", DSV3_DENSE, "flash", "fp32", 48, 2, "selective", opts(TE, "mla_up_proj"), 0.0,
     (1, False, 2)),
    ("te-cp2-flash-coreattn-bf16", DSV3_DENSE, "flash", "bf16", 40, 3, "selective", opts(TE), 0.0, (1, False, 2)),
    # --no-rope-fusion: the unfused RoPE keeps cos_/sin_ per call (MegatronMLAUnfusedRopeLayer)
    ("norope-fusion-local-eager-none-bf16", DSV3_DENSE, "eager", "bf16", 37, 3, "none", unfused()),
    ("norope-fusion-local-flash-coreattn-fp32", DSV3_DENSE, "flash", "fp32", 29, 2, "selective", unfused()),
    ("norope-fusion-local-eager-mlaup-bf16", DSV3_DENSE, "eager", "bf16", 37, 3, "selective",
     unfused("local", "mla_up_proj")),
    ("norope-fusion-te-flash-none-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "none", unfused(TE)),
    ("norope-fusion-nolora-te-flash-full-bf16", DSV3_NOLORA_DENSE, "flash", "bf16", 33, 2, "full", unfused(TE)),
    ("te-flash-none-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "none", opts(TE)),
    ("te-flash-none-fp32", DSV3_DENSE, "flash", "fp32", 29, 2, "none", opts(TE)),
    ("te-flash-coreattn-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "selective", opts(TE)),
    ("te-flash-mlaup-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "selective", opts(TE, "mla_up_proj")),
    ("te-flash-mlaup-mlp-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "selective", opts(TE, "mla_up_proj", "mlp")),
    ("te-flash-full-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "full", opts(TE)),
    ("nolora-te-flash-none-bf16", DSV3_NOLORA_DENSE, "flash", "bf16", 33, 2, "none", opts(TE)),
    ("nolora-te-flash-mlaup-bf16", DSV3_NOLORA_DENSE, "flash", "bf16", 33, 2, "selective", opts(TE, "mla_up_proj")),
] + FP8_CASES


def setup(case):
    """A case's ModelConfig, RunConfig and ParallelConfig (None: whole layers, te_validation.measure)."""
    name, model, attention, dtype, seq, batch, rc, mopts, *rest = case
    cfg = models.ModelConfig(**model)
    p = rest[0] if rest else 0.0
    run = models.RunConfig("megatron", attention, rc, dtype, seq, batch, hidden_dropout=p, attention_dropout=p)
    par = None
    if len(rest) > 1:
        import parallel_models

        par = parallel_models.ParallelConfig(tp=rest[1][0], sp=rest[1][1], cp=rest[1][2] if len(rest[1]) > 2 else 1)
    return cfg, run, par


def measure_case(case):
    cfg, run, par = setup(case)
    if par is None:
        return measure(cfg, run, case[7])
    mopts = case[7]
    r = measure_cp_rank(cfg, run, par, mopts) if par.cp > 1 else measure_rank(cfg, run, par, mopts.modules)
    if isinstance(r, dict):  # te_validation.measure's result (mla_up_proj, CP)
        return r
    return {"layer": r.per_layer_bytes, "total": r.total_bytes, "middle": f"layer {cfg.layers // 2}",
            "storages": [(st.region, st.shape, st.dtype, st.bytes) for st in r.storages]}


def estimate_case(case, actmem, workdir):
    cfg, run, par = setup(case)
    return run_validation.call_actmem(actmem, f"mla-{case[0]}", cfg, run, workdir, par=par,
                                      extra=te.cli_extra(case[7], case[6]) +
                                      ([] if getattr(case[7], "rope_fusion", True) else ["--no-rope-fusion"]))


WIDTH = 34


def measure_only_row(case, m):
    print(f"{case[0]:<{WIDTH}}{m['layer']:>11}{'':>18}{m['total']:>12}")
    runner.print_storages(m)


def row(case, m, est):
    return run_validation.layer_and_total_row(case[0], WIDTH, measured(m["layer"], m["total"], m), est)


def main():
    return runner.run_cases(CASES, measure_case, estimate_case, row, runner.layer_total_header(WIDTH),
                            measure_only=measure_only_row, self_check=self_check)


class measured:  # the fields layer_and_total_row reads (measure.Measurement's names)
    def __init__(self, layer, total, m):
        self.per_layer_bytes, self.total_bytes = layer, total
        self.region_bytes = {}
        for region, _, _, nbytes in m["storages"]:
            self.region_bytes[region] = self.region_bytes.get(region, 0) + nbytes


if __name__ == "__main__":
    sys.exit(main())
