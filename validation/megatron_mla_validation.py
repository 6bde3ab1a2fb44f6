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
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import run_validation  # noqa: E402
import runner  # noqa: E402
import te_validation as te  # noqa: E402
from megatron_mla_models import MegatronMLALayer  # noqa: E402

TE = "transformer_engine"
# run_validation.DSV3's attention (q_lora_rank 96, kv_lora_rank 72, nope 32 + rope 16 = 48 != v 40),
# every layer dense (dense_ffn 640); and q_proj straight from h (no q LoRA), v head dim = q/k's
DSV3_DENSE = dict(run_validation.DSV3, first_dense=3)
DSV3_NOLORA_DENSE = dict(run_validation.DSV3_NOLORA, layers=3, first_dense=3)


def build(cfg, run, opts, seed=0):
    torch.manual_seed(seed)
    model = models.MegatronModel(cfg, run)
    model.layers = nn.ModuleList(MegatronMLALayer(cfg, run, opts.impl, opts.modules) for _ in range(cfg.layers))
    return model.to(run.torch_dtype).train()


def measure(cfg, run, opts, backward=False):
    return te.measure(cfg, run, opts, backward=backward, build_fn=build)


# one TP / SP rank (local spec): heads, q_lora_rank, kv_lora_rank + rope dim and dense ffn divisible by 4
DSV3_TP = dict(DSV3_DENSE, heads=4, kv_heads=4)


def measure_rank(cfg, run, par):
    """measure.measure of one tensor/sequence-parallel rank (parallel_models.py) whose layers are
    MegatronMLARankLayer."""
    import measure
    import parallel_models
    from megatron_mla_models import MegatronMLARankLayer

    build_rank = parallel_models.build

    def mla_rank(c, r, p, seed=0):
        torch.manual_seed(seed)
        model = parallel_models.MegatronRankModel(c, r, p)
        model.layers = nn.ModuleList(MegatronMLARankLayer(c, r, p) for _ in range(c.layers))
        return model.to(r.torch_dtype).train()

    parallel_models.build = mla_rank
    try:
        return measure.measure(cfg, run, par=par)
    finally:
        parallel_models.build = build_rank


def self_check():
    """Gradients with recompute_modules mla_up_proj (+ core_attn, mlp) equal the plain layer's
    (fp32), local eager and TE flash: the checkpoint, the freed-and-restored q/k/v storages and
    the fused-RoPE Functions' backwards."""
    cfg = models.ModelConfig(**dict(DSV3_DENSE, layers=2, first_dense=2))
    ok = True
    for impl, attention in (("local", "eager"), ("local", "flash"), (TE, "flash")):
        grads = []
        for rc, o in (("none", te.MegatronOpts(impl)),
                      ("selective", te.MegatronOpts(impl, modules=("core_attn", "mla_up_proj", "mlp")))):
            m = measure(cfg, models.RunConfig("megatron", attention, rc, "fp32", 12, 2), o, backward=True)
            grads.append([p.grad.clone() for p in m["model"].parameters()])
        for g0, g1 in zip(*grads):
            if not torch.allclose(g0, g1, rtol=1e-4, atol=1e-6):
                print(f"self-check: {impl} {attention}: gradients with mla_up_proj differ from the plain layer's")
                ok = False
                break
    if ok:
        print("self-check: local and TE MLA layers with recompute_modules mla_up_proj give the plain gradients")
    return ok


def opts(impl="local", *modules):
    return te.MegatronOpts(impl, modules=modules or ("core_attn",))


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
    ("te-flash-none-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "none", opts(TE)),
    ("te-flash-none-fp32", DSV3_DENSE, "flash", "fp32", 29, 2, "none", opts(TE)),
    ("te-flash-coreattn-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "selective", opts(TE)),
    ("te-flash-mlaup-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "selective", opts(TE, "mla_up_proj")),
    ("te-flash-mlaup-mlp-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "selective", opts(TE, "mla_up_proj", "mlp")),
    ("te-flash-full-bf16", DSV3_DENSE, "flash", "bf16", 41, 3, "full", opts(TE)),
    ("nolora-te-flash-none-bf16", DSV3_NOLORA_DENSE, "flash", "bf16", 33, 2, "none", opts(TE)),
    ("nolora-te-flash-mlaup-bf16", DSV3_NOLORA_DENSE, "flash", "bf16", 33, 2, "selective", opts(TE, "mla_up_proj")),
]


def setup(case):
    """A case's ModelConfig, RunConfig and ParallelConfig (None: whole layers, te_validation.measure)."""
    name, model, attention, dtype, seq, batch, rc, mopts, *rest = case
    cfg = models.ModelConfig(**model)
    p = rest[0] if rest else 0.0
    run = models.RunConfig("megatron", attention, rc, dtype, seq, batch, hidden_dropout=p, attention_dropout=p)
    par = None
    if len(rest) > 1:
        import parallel_models

        par = parallel_models.ParallelConfig(tp=rest[1][0], sp=rest[1][1])
    return cfg, run, par


def measure_case(case):
    cfg, run, par = setup(case)
    if par is None:
        return measure(cfg, run, case[7])
    r = measure_rank(cfg, run, par)
    return {"layer": r.per_layer_bytes, "total": r.total_bytes, "middle": f"layer {cfg.layers // 2}",
            "storages": [(st.region, st.shape, st.dtype, st.bytes) for st in r.storages]}


def estimate_case(case, actmem, workdir):
    cfg, run, par = setup(case)
    return run_validation.call_actmem(actmem, f"mla-{case[0]}", cfg, run, workdir, par=par,
                                      extra=te.cli_extra(case[7], case[6]))


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
