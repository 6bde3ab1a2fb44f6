#!/usr/bin/python3
"""Megatron-core MoE layers measured (validation/megatron_moe_models.py: TopKRouter with the aux
loss, allgather dispatcher, grouped SwiGLU experts, shared experts; EP = TP = 1), and
`actmem estimate --framework megatron [--transformer-impl transformer_engine] [--recompute-modules
...]` held to them within 1 % per layer (the middle one) and in total.

  /usr/bin/python3 validation/megatron_moe_validation.py --actmem build/actmem
  /usr/bin/python3 validation/megatron_moe_validation.py --measure-only [--filter X]
  /usr/bin/python3 validation/megatron_moe_validation.py --self-check

--self-check: the recompute modules (moe_act's CheckpointWithoutOutput, the moe and shared_experts
checkpoints, layernorm) give the gradients of the plain layer (fp32). Ends with `N passed, M failed`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import megatron_moe_models as mm  # noqa: E402
import models  # noqa: E402
import run_validation  # noqa: E402
import runner  # noqa: E402
import te_validation as tv  # noqa: E402

torch.set_num_threads(2)

# every layer MoE: Mixtral (top-2 of 4: softmax over the top-k logits, i.e. renormalized); Qwen3-MoE's
# shapes (a·d != h, top-2 of 4) on a Mixtral-style layer (the reference layers have no
# --qk-layernorm); Qwen2-MoE: dense layer 2 (mlp_only_layers) and a sigmoid-gated shared expert;
# no renormalization (norm_topk_prob false: --moe-router-pre-softmax) on Qwen2-MoE without a shared expert
MIXTRAL = run_validation.MIXTRAL
MIXTRAL_TOP3 = run_validation.MIXTRAL_TOP3
QWEN3_MOE = dict(run_validation.QWEN3_MOE, family="mixtral")
QWEN2_MOE = run_validation.QWEN2_MOE
MOE_NONORM = dict(QWEN2_MOE, heads=5, kv_heads=5, head_dim=64, experts=5, top_k=3, ffn=160, shared_ffn=0,
                  mlp_only_layers=(), norm_topk_prob=False)
TE, LOCAL = "transformer_engine", "local"


def case(name, shape, impl, rc, s, b, modules=("core_attn",), dtype="bf16", fp8_store=False, dispatcher="allgather"):
    attention = "flash" if impl == TE else "eager"
    opts = tv.MegatronOpts(impl, modules=modules, act_fp8_store=fp8_store, dispatcher=dispatcher)
    return dict(name=name, model=models.ModelConfig(**shape), opts=opts,
                run=models.RunConfig("megatron", attention, rc, dtype, seq_len=s, micro_batch=b))


A2A = dict(dispatcher="alltoall")  # --moe-token-dispatcher alltoall
CASES = [
    case("mixtral-local-none", MIXTRAL, LOCAL, "none", 64, 2),
    case("mixtral-local-selective", MIXTRAL, LOCAL, "selective", 64, 2),
    case("mixtral-local-full", MIXTRAL, LOCAL, "full", 64, 2),
    case("mixtral-te-none", MIXTRAL, TE, "none", 64, 2),
    case("mixtral-te-selective", MIXTRAL, TE, "selective", 64, 2),
    case("mixtral-te-full", MIXTRAL, TE, "full", 64, 2),
    case("mixtral-top3-local-none", MIXTRAL_TOP3, LOCAL, "none", 48, 3),
    case("mixtral-local-none-fp32", MIXTRAL, LOCAL, "none", 40, 2, dtype="fp32"),
    case("qwen3moe-local-none", QWEN3_MOE, LOCAL, "none", 64, 2),
    case("qwen3moe-te-none", QWEN3_MOE, TE, "none", 64, 2),
    case("nonorm-local-none", MOE_NONORM, LOCAL, "none", 48, 2),
    case("nonorm-te-selective", MOE_NONORM, TE, "selective", 48, 2),
    case("qwen2moe-local-none", QWEN2_MOE, LOCAL, "none", 64, 2),
    case("qwen2moe-te-none", QWEN2_MOE, TE, "none", 64, 2),
    case("qwen2moe-local-full", QWEN2_MOE, LOCAL, "full", 64, 2),
    # --recompute-modules moe_act, moe, shared_experts (and with layernorm, core_attn)
    case("mixtral-local-moe_act", MIXTRAL, LOCAL, "selective", 64, 2, ("moe_act",)),
    case("mixtral-te-moe_act", MIXTRAL, TE, "selective", 64, 2, ("core_attn", "moe_act")),
    case("mixtral-local-moe", MIXTRAL, LOCAL, "selective", 64, 2, ("moe",)),
    case("mixtral-te-moe", MIXTRAL, TE, "selective", 64, 2, ("core_attn", "moe")),
    case("mixtral-local-moe-layernorm", MIXTRAL, LOCAL, "selective", 64, 2, ("moe", "layernorm")),
    case("mixtral-te-moe_act-layernorm", MIXTRAL, TE, "selective", 64, 2, ("moe_act", "layernorm")),
    case("qwen2moe-local-shared_experts", QWEN2_MOE, LOCAL, "selective", 64, 2, ("shared_experts",)),
    case("qwen2moe-te-shared_experts-moe_act", QWEN2_MOE, TE, "selective", 64, 2, ("shared_experts", "moe_act")),
    case("qwen2moe-local-moe-mlp", QWEN2_MOE, LOCAL, "selective", 64, 2, ("moe", "mlp")),
    case("qwen2moe-te-moe", QWEN2_MOE, TE, "selective", 64, 2, ("moe",)),
    # --activation-func-fp8-input-store (TE spec): WeightedSwiGLUFunction and the shared expert's
    # SwiGLUFunction keep their input as float8_e4m3fn
    case("qwen2moe-te-fp8-store", QWEN2_MOE, TE, "none", 64, 2, fp8_store=True),
    case("mixtral-te-fp8-store-moe_act", MIXTRAL, TE, "selective", 64, 2, ("moe_act",), fp8_store=True),
    # --moe-token-dispatcher alltoall (MoEAlltoAllTokenDispatcher at EP = TP = 1): the permute's
    # probs[flat_sorted] keeps the int64 argsort of all E·T entries instead of masked_select's two
    case("a2a-mixtral-local-none", MIXTRAL, LOCAL, "none", 64, 2, **A2A),
    case("a2a-mixtral-te-selective", MIXTRAL, TE, "selective", 64, 2, **A2A),
    case("a2a-mixtral-local-full", MIXTRAL, LOCAL, "full", 64, 2, **A2A),
    case("a2a-mixtral-local-none-fp32", MIXTRAL, LOCAL, "none", 40, 2, dtype="fp32", **A2A),
    case("a2a-nonorm-local-none", MOE_NONORM, LOCAL, "none", 48, 2, **A2A),
    case("a2a-qwen2moe-local-none", QWEN2_MOE, LOCAL, "none", 64, 2, **A2A),
    case("a2a-qwen2moe-te-none", QWEN2_MOE, TE, "none", 64, 2, **A2A),
    case("a2a-qwen2moe-te-moe_act-shared_experts", QWEN2_MOE, TE, "selective", 64, 2, ("moe_act", "shared_experts"),
         **A2A),
    case("a2a-qwen2moe-local-full", QWEN2_MOE, LOCAL, "full", 64, 2, **A2A),
]


def self_check():
    """fp32 gradients with each recompute module equal those of the plain layer."""
    cfg = models.ModelConfig(**dict(QWEN2_MOE, layers=2, mlp_only_layers=()))
    ok = True
    for impl, modules in ((LOCAL, ("moe_act", "shared_experts", "layernorm")), (LOCAL, ("moe",)),
                          (TE, ("core_attn", "moe_act", "layernorm")), (TE, ("moe", "shared_experts"))):
        attention = "flash" if impl == TE else "eager"
        grads = []
        for rc, mods in (("none", ("core_attn",)), ("selective", modules)):
            run = models.RunConfig("megatron", attention, rc, "fp32", 16, 2)
            m = mm.measure(cfg, run, tv.MegatronOpts(impl, modules=mods), backward=True)
            grads.append([p.grad.clone() if p.grad is not None else None for p in m["model"].parameters()])
        for g0, g1 in zip(*grads):
            if (g0 is None) != (g1 is None) or (g0 is not None and not torch.allclose(g0, g1, rtol=1e-4, atol=1e-6)):
                print(f"self-check: {impl} {modules}: gradients differ from the plain layer's")
                ok = False
                break
    if ok:
        print("self-check: moe_act, moe, shared_experts and layernorm recompute give the plain gradients")
    # the alltoall dispatcher (EP = TP = 1) computes what the allgather one does: same gradients
    run = models.RunConfig("megatron", "eager", "none", "fp32", 16, 2)
    grads = []
    for dispatcher in ("allgather", "alltoall"):
        m = mm.measure(cfg, run, tv.MegatronOpts(LOCAL, dispatcher=dispatcher), backward=True)
        grads.append([p.grad.clone() if p.grad is not None else None for p in m["model"].parameters()])
    same = all((g0 is None) == (g1 is None) and (g0 is None or torch.allclose(g0, g1, rtol=1e-4, atol=1e-6))
               for g0, g1 in zip(*grads))
    print("self-check: the alltoall dispatcher gives the allgather one's gradients" if same else
          "self-check: alltoall and allgather gradients differ")
    return ok and same


WIDTH = 38


def measure_only_row(c, m):
    print(f"{c['name']:<{WIDTH}}{m['layer']:>11}{'':>11}{'':>7}{m['total']:>12}")
    runner.print_storages(m)


def estimate(c, actmem, workdir):
    extra = tv.cli_extra(c["opts"], c["run"].recompute)
    return run_validation.call_actmem(actmem, c["name"], c["model"], c["run"], workdir, extra=extra)


def row(c, m, a):
    measured = run_validation.measure.Measurement(m["layer"], m["total"], 0, 0, {}, [])
    ok = run_validation.layer_and_total_row(c["name"], WIDTH, measured, a)
    if not ok:
        for region, shape, dt, nbytes in m["storages"]:
            if region == m["middle"]:
                print(f"    {str(shape):24s} {dt:9s} {nbytes:9d}")
    return ok


def main():
    return runner.run_cases(CASES, lambda c: mm.measure(c["model"], c["run"], c["opts"]), estimate, row,
                            runner.layer_total_header(WIDTH), measure_only=measure_only_row, self_check=self_check,
                            check_first=False)


if __name__ == "__main__":
    sys.exit(main())
