#!/usr/bin/python3
"""Megatron-core MoE layers measured (validation/megatron_moe_models.py: TopKRouter with the aux
loss, allgather dispatcher, grouped SwiGLU experts, shared experts; EP = TP = 1), and
`actmem estimate --framework megatron [--transformer-impl transformer_engine] [--recompute-modules
...] [--moe-router-* ...]` held to them within 1 % per layer (the middle one) and in total. The router-*
cases set TopKRouter's options (megatron_moe_models.RouterOpts: sigmoid scores, expert bias,
group-limited top-k, scaling, load-balancing type / coefficient 0, z-loss, router dtype).

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


def case(name, shape, impl, rc, s, b, modules=("core_attn",), dtype="bf16", fp8_store=False, dispatcher="allgather",
         router=None, deterministic=False):
    attention = "flash" if impl == TE else "eager"
    opts = tv.MegatronOpts(impl, modules=modules, act_fp8_store=fp8_store, dispatcher=dispatcher,
                           deterministic=deterministic)
    return dict(name=name, model=models.ModelConfig(**shape), opts=opts, router=router,
                run=models.RunConfig("megatron", attention, rc, dtype, seq_len=s, micro_batch=b))


# TopKRouter options (megatron_moe_models.RouterOpts): DeepSeek-style routing on 8 experts, top-4
# (4 groups of 2, 2 groups kept: topk // group_topk = 2 per group)
MOE_E8 = dict(MIXTRAL, experts=8, top_k=4, ffn=96)
R = mm.RouterOpts
DEEPSEEK = R(score="sigmoid", expert_bias=True, num_groups=4, group_topk=2, scaling=2.5, lb="seq_aux_loss",
             aux_coeff=1e-4)


A2A = dict(dispatcher="alltoall")  # --moe-token-dispatcher alltoall


def fp8_case(name, shape, recipe, rc, s, b, modules=("core_attn",), fp8_store=False, deterministic=False):
    """The TE spec under --fp8 delayed|tensorwise (megatron_moe_models.py experts_fp8: per-expert
    fp8 inputs of GroupedLinear, Fp8Padding; shared experts as TE linears; balanced routing)."""
    opts = tv.MegatronOpts(TE, fp8=recipe, modules=modules, act_fp8_store=fp8_store, deterministic=deterministic)
    return dict(name=name, model=models.ModelConfig(**shape), opts=opts, router=None,
                run=models.RunConfig("megatron", "flash", rc, "bf16", seq_len=s, micro_batch=b))


# TE fp8 (fp8-*): 64·2 tokens top-2 of 4 give each expert 64 rows (aligned); 40·2 give 40, padded to
# 48 by Fp8Padding; MOE_NONORM's 96 tokens top-3 of 5 give 57 or 58 rows, padded to 64
FP8_CASES = [
    fp8_case("fp8-mixtral-delayed-none", MIXTRAL, "delayed", "none", 64, 2),
    fp8_case("fp8-mixtral-delayed-none-pad", MIXTRAL, "delayed", "none", 40, 2),
    fp8_case("fp8-mixtral-tensorwise-none-pad", MIXTRAL, "tensorwise", "none", 40, 2),
    fp8_case("fp8-mixtral-delayed-selective", MIXTRAL, "delayed", "selective", 64, 2),
    fp8_case("fp8-mixtral-delayed-full", MIXTRAL, "delayed", "full", 64, 2),
    fp8_case("fp8-mixtral-tensorwise-moe_act", MIXTRAL, "tensorwise", "selective", 64, 2, ("core_attn", "moe_act")),
    fp8_case("fp8-mixtral-tensorwise-moe_act-pad", MIXTRAL, "tensorwise", "selective", 40, 2, ("moe_act",)),
    fp8_case("fp8-mixtral-delayed-moe", MIXTRAL, "delayed", "selective", 64, 2, ("core_attn", "moe")),
    fp8_case("fp8-mixtral-delayed-store", MIXTRAL, "delayed", "none", 40, 2, fp8_store=True),
    fp8_case("fp8-nonorm-delayed-none-pad", MOE_NONORM, "delayed", "none", 48, 2),
    fp8_case("fp8-qwen2moe-delayed-none", QWEN2_MOE, "delayed", "none", 64, 2),
    fp8_case("fp8-qwen2moe-tensorwise-none", QWEN2_MOE, "tensorwise", "none", 40, 2),
    fp8_case("fp8-qwen2moe-tensorwise-layernorm-moe_act", QWEN2_MOE, "tensorwise", "selective", 64, 2,
             ("layernorm", "moe_act")),
    fp8_case("fp8-qwen2moe-tensorwise-layernorm-shared_experts", QWEN2_MOE, "tensorwise", "selective", 64, 2,
             ("layernorm", "shared_experts")),
    fp8_case("fp8-qwen2moe-delayed-shared_experts", QWEN2_MOE, "delayed", "selective", 64, 2, ("shared_experts",)),
    fp8_case("fp8-qwen2moe-tensorwise-full", QWEN2_MOE, "tensorwise", "full", 40, 2),
    # --deterministic-mode: unpermute's index_add_ keeps the unpadded expert output
    fp8_case("det-fp8-mixtral-delayed-none-pad", MIXTRAL, "delayed", "none", 40, 2, deterministic=True),
]
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
    # --moe-router-score-function sigmoid, --moe-router-enable-expert-bias, --moe-router-num-groups /
    # --moe-router-group-topk, --moe-router-topk-scaling-factor, --moe-router-load-balancing-type,
    # --moe-aux-loss-coeff 0, --moe-z-loss-coeff, --moe-router-dtype
    case("router-sigmoid-local-none", MOE_E8, LOCAL, "none", 64, 2, router=R(score="sigmoid")),
    case("router-sigmoid-bias-local-none", MOE_E8, LOCAL, "none", 64, 2, router=R(score="sigmoid", expert_bias=True)),
    case("router-sigmoid-groups-local-none", MOE_E8, LOCAL, "none", 64, 2,
         router=R(score="sigmoid", num_groups=4, group_topk=2)),
    case("router-softmax-groups-local-none", MOE_E8, LOCAL, "none", 64, 2, router=R(num_groups=4, group_topk=2)),
    case("router-deepseek-local-none", MOE_E8, LOCAL, "none", 64, 2, router=DEEPSEEK),
    case("router-deepseek-te-selective", MOE_E8, TE, "selective", 64, 2, router=DEEPSEEK),
    case("router-deepseek-local-none-fp32", MOE_E8, LOCAL, "none", 40, 2, dtype="fp32", router=DEEPSEEK),
    case("router-deepseek-a2a-local-none", MOE_E8, LOCAL, "none", 64, 2, router=DEEPSEEK, **A2A),
    case("router-deepseek-k2-local-none", dict(MOE_E8, top_k=2), LOCAL, "none", 64, 2,
         router=R(score="sigmoid", expert_bias=True, num_groups=4, group_topk=2)),
    case("router-lb-none-local-none", MIXTRAL, LOCAL, "none", 64, 2, router=R(lb="none")),
    case("router-aux-coeff0-te-none", MIXTRAL, TE, "none", 64, 2, router=R(aux_coeff=0.0)),
    case("router-seq-aux-local-none", MIXTRAL, LOCAL, "none", 64, 3, router=R(lb="seq_aux_loss")),
    case("router-global-aux-local-none", MIXTRAL, LOCAL, "none", 64, 2, router=R(lb="global_aux_loss")),
    case("router-global-aux-local-none-fp32", MIXTRAL, LOCAL, "none", 40, 2, dtype="fp32",
         router=R(lb="global_aux_loss")),
    case("router-zloss-local-none", MIXTRAL, LOCAL, "none", 64, 2, router=R(z_coeff=1e-3)),
    case("router-zloss-nonorm-local-none", MOE_NONORM, LOCAL, "none", 48, 2, router=R(z_coeff=1e-3)),
    case("router-fp32-local-none", MIXTRAL, LOCAL, "none", 64, 2, router=R(dtype="fp32")),
    case("router-fp64-local-none", MIXTRAL, LOCAL, "none", 64, 2, router=R(dtype="fp64")),
    case("router-fp32-a2a-qwen2moe-te-none", QWEN2_MOE, TE, "none", 64, 2, router=R(dtype="fp32"), **A2A),
    case("router-fp64-nonorm-zloss-local-none", MOE_NONORM, LOCAL, "none", 48, 2, router=R(dtype="fp64", z_coeff=1e-3)),
    case("router-deepseek-fp32-local-moe_act", MOE_E8, LOCAL, "selective", 64, 2, ("moe_act",),
         router=R(**{**DEEPSEEK.__dict__, "dtype": "fp32"})),
    # --deterministic-mode (torch.use_deterministic_algorithms(True)): unpermute runs index_add_,
    # whose backward keeps the experts' output (moe_utils.py l.604-612, Megatron-core 0.15 on)
    case("det-mixtral-te-none", MIXTRAL, TE, "none", 64, 2, deterministic=True),
    case("det-mixtral-local-none", MIXTRAL, LOCAL, "none", 64, 2, deterministic=True),
    case("det-qwen2moe-te-moe", QWEN2_MOE, TE, "selective", 64, 2, ("moe",), deterministic=True),
    case("det-mixtral-te-moe_act", MIXTRAL, TE, "selective", 64, 2, ("moe_act",), deterministic=True),
    case("det-a2a-mixtral-local-none", MIXTRAL, LOCAL, "none", 64, 2, deterministic=True, **A2A),
] + FP8_CASES


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
    # RouterGatingLinearFn with --moe-router-dtype: its backward against autograd's; the router
    # options' layers run backward (sigmoid, bias gather, groups, seq / global aux loss, z-loss)
    torch.manual_seed(0)
    x, w = torch.randn(6, 2, 16, dtype=torch.float32), torch.randn(4, 16)
    g = torch.randn(6, 2, 4, dtype=torch.float64)
    got = mm._grads(lambda a, b: mm.RouterGatingLinearFn.apply(a, b, torch.float64), (x, w), g)
    want = mm._grads(lambda a, b: (a.double() @ b.double().t()), (x, w), g)
    router_ok = all(torch.allclose(u, v.to(u.dtype), rtol=1e-5, atol=1e-6) for u, v in zip(got, want))
    run = models.RunConfig("megatron", "eager", "none", "fp32", 16, 2)
    cfg8 = models.ModelConfig(**dict(MOE_E8, layers=2))
    for r in (DEEPSEEK, R(lb="global_aux_loss", z_coeff=1e-3, dtype="fp64")):
        m = mm.measure(cfg8, run, tv.MegatronOpts(LOCAL), backward=True, router=r)
        router_ok &= all(p.grad is not None and bool(torch.isfinite(p.grad).all())
                         for n, p in m["model"].named_parameters() if "router_w" in n)
    print("self-check: the router dtype's gating backward matches autograd; router options run backward" if router_ok
          else "self-check: router gating or router options' backward failed")
    fp8_ok = self_check_fp8()
    return ok and same and router_ok and fp8_ok


def self_check_fp8():
    """The fp8 emulation computes what the bf16 path does (fp32): Fp8Padding + GroupedLinearFp8Fn +
    Fp8Unpadding equal GroupedLinearFn in output and gradients, with and without save_original; and
    the fp8 layer under moe_act, layernorm, shared_experts (tensorwise) or moe (delayed) gives the
    gradients of the plain fp8 layer (rows padded: 20 per expert -> 32)."""
    ok = True
    g = torch.Generator().manual_seed(0)
    splits, padded = [5, 7, 3], [16, 16, 16]
    x = torch.randn(15, 8, generator=g, requires_grad=True)
    ws = [torch.randn(6, 8, generator=g, requires_grad=True) for _ in splits]
    grad = torch.randn(15, 6, generator=g)
    ref = mm.GroupedLinearFn.apply(x, splits, *ws)
    want = torch.autograd.grad(ref, [x, *ws], grad)
    for save_original in (False, True):
        y = mm.Fp8UnpaddingFn.apply(
            mm.GroupedLinearFp8Fn.apply(mm.Fp8PaddingFn.apply(x, splits, padded), padded, save_original, *ws),
            splits, padded)
        got = torch.autograd.grad(y, [x, *ws], grad)
        if not torch.allclose(y, ref, atol=1e-6) or not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, want)):
            print(f"self-check: padded fp8 GroupedLinear (save_original {save_original}) differs from GroupedLinearFn")
            ok = False
    cfg = models.ModelConfig(**dict(QWEN2_MOE, layers=2, mlp_only_layers=()))
    for recipe, modules in (("tensorwise", ("core_attn", "moe_act", "layernorm")),
                            ("tensorwise", ("layernorm", "shared_experts")), ("delayed", ("moe",))):
        grads = []
        for rc, mods in (("none", ("core_attn",)), ("selective", modules)):
            run = models.RunConfig("megatron", "flash", rc, "fp32", 20, 2)
            m = mm.measure(cfg, run, tv.MegatronOpts(TE, fp8=recipe, modules=mods), backward=True)
            grads.append([p.grad.clone() if p.grad is not None else None for p in m["model"].parameters()])
        for g0, g1 in zip(*grads):
            if (g0 is None) != (g1 is None) or (g0 is not None and not torch.allclose(g0, g1, rtol=1e-4, atol=1e-6)):
                print(f"self-check: fp8 {recipe} {modules}: gradients differ from the plain fp8 layer's")
                ok = False
                break
    if ok:
        print("self-check: the fp8 grouped experts (padding, per-expert fp8 inputs, save_original) give the bf16 "
              "path's values and gradients; moe_act, layernorm, shared_experts and moe under fp8 the plain ones")
    return ok


WIDTH = 38


def measure_only_row(c, m):
    print(f"{c['name']:<{WIDTH}}{m['layer']:>11}{'':>11}{'':>7}{m['total']:>12}")
    runner.print_storages(m)


def estimate(c, actmem, workdir):
    extra = tv.cli_extra(c["opts"], c["run"].recompute) + (c["router"].cli() if c["router"] else [])
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
    return runner.run_cases(CASES, lambda c: mm.measure(c["model"], c["run"], c["opts"], router=c["router"]), estimate, row,
                            runner.layer_total_header(WIDTH), measure_only=measure_only_row, self_check=self_check,
                            check_first=False)


if __name__ == "__main__":
    sys.exit(main())
