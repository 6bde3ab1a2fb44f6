"""The hand formulas of EXPECTED.md as code, term by term, so they are checked against the
measurement of every case (`run_validation.py --check-formulas`). Symbols as in
activation-rules.md: s, b, h, a, kv, d, f, V, e (bytes per activation element); T = s·b tokens;
E experts, k experts per token (MoE). Each term is (name, formula text, bytes).
"""
import functools

import models


def _terms_layer(cfg: models.ModelConfig, run: models.RunConfig, index=None):
    """Terms of layer `index` (default: the middle layer, the one per_layer_bytes reports)."""
    index = cfg.layers // 2 if index is None else index
    s, b, h, a, kv, d, f = run.seq_len, run.micro_batch, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn
    T, e = s * b, 2 if run.dtype == "bf16" else 4
    ph, pa = run.hidden_dropout > 0, run.attention_dropout > 0
    gpt, hf = cfg.family == "gpt2", run.framework == "hf"
    traits = cfg.traits if hf else models.FAMILY_TRAITS["gpt2" if gpt else "llama"]
    eager = run.attention == "eager"
    fused_qkv = traits.qkv in ("phi3", "neox")
    t = []
    if run.recompute == "full":
        return [("layer input (checkpoint)", "e·T·h", e * T * h)]
    if hf and cfg.family in FAMILIES_ISSUE_8:
        return _terms_layer_issue_8(cfg, run)

    def norm(label, feeds_linear=True, input_saved_already=False):
        if traits.norm == "layer" or (not hf and gpt):
            if not input_saved_already:
                t.append((f"{label} LayerNorm input", "e·T·h", e * T * h))
            t.append((f"{label} fp32 mean+rstd", "8·T", 8 * T))
        elif hf:
            t.extend([
                (f"{label} RMSNorm fp32 x (copy if e=2, x itself if e=4)", "4·T·h", 4 * T * h),
                (f"{label} RMSNorm rsqrt fp32", "4·T", 4 * T),
            ])  # fmt: skip
            if traits.norm == "gemma_rms":
                t.append((f"{label} Gemma RMSNorm normalized x fp32 (kept by (1 + w)·x)", "4·T·h", 4 * T * h))
                t.append((f"{label} Gemma RMSNorm (1 + w) fp32 vector", "4·h", 4 * h))
            else:
                t.append((f"{label} RMSNorm normalized x (act dtype)", "e·T·h", e * T * h))
        else:
            t.extend([(f"{label} RMSNorm input", "e·T·h", e * T * h), (f"{label} fp32 rstd", "4·T", 4 * T)])
        if feeds_linear:
            t.append((f"{label} output = next linear input", "e·T·h", e * T * h))

    norm("norm1")
    # ---- attention
    qkv_storage = ("fused QKV output (alive through views)", "e·T·(a+2kv)·d", e * T * (a + 2 * kv) * d)
    if hf and gpt:
        if eager:
            t.append(("q, k, v copies made by matmul's reshape", "3·e·T·a·d", 3 * e * T * a * d))
        else:
            t.append(qkv_storage)
    elif hf and traits.qkv == "mla":
        _mla_terms(t, cfg, run)
    elif hf:
        if traits.qk_norm and traits.norm == "gemma_rms":  # Gemma 3: Gemma3RMSNorm over head_dim
            for name, heads, sym in (("q_norm", a, "a"), ("k_norm", kv, "kv")):
                t.extend([
                    (f"{name} fp32 input (copy if e=2, the projection output if e=4)", f"4·T·{sym}·d", 4 * T * heads * d),
                    (f"{name} rsqrt fp32", f"4·T·{sym}", 4 * T * heads),
                    (f"{name} normalized x fp32 (kept by (1 + w)·x)", f"4·T·{sym}·d", 4 * T * heads * d),
                    (f"{name} (1 + w) fp32 vector", "4·d", 4 * d),
                ])  # fmt: skip
        elif traits.qk_norm:
            for name, heads, sym in (("q_norm", a, "a"), ("k_norm", kv, "kv")):
                t.extend([
                    (f"{name} fp32 input (copy if e=2, the projection output if e=4)", f"4·T·{sym}·d", 4 * T * heads * d),
                    (f"{name} rsqrt fp32", f"4·T·{sym}", 4 * T * heads),
                    (f"{name} normalized (act dtype)", f"e·T·{sym}·d", e * T * heads * d),
                ])  # fmt: skip
        t.append(("q after RoPE", "e·T·a·d", e * T * a * d))
        if eager:
            t.append(("k (repeat_kv copy, or RoPE output if a=kv)", "e·T·a·d", e * T * a * d))
            t.append(("v (repeat_kv copy, or matmul's copy if a=kv)", "e·T·a·d", e * T * a * d))
        else:
            t.append(("k after RoPE (kv heads)", "e·T·kv·d", e * T * kv * d))
            if fused_qkv:
                t.append(qkv_storage)
            else:
                t.append(("v = v_proj output (kv heads)", "e·T·kv·d", e * T * kv * d))
    else:  # megatron
        keeps_qkv_storage = gpt or not eager or run.recompute == "selective" or a == kv
        if not gpt:
            t.append(("q after fused RoPE", "e·T·a·d", e * T * a * d))
            if eager and run.recompute != "selective" and a > kv:
                t.append(("k expanded to a heads (copy)", "e·T·a·d", e * T * a * d))
                t.append(("v expanded to a heads (copy)", "e·T·a·d", e * T * a * d))
            else:
                t.append(("k after fused RoPE (kv heads)", "e·T·kv·d", e * T * kv * d))
        if keeps_qkv_storage:
            t.append(qkv_storage)
    core_saved = not (run.framework == "megatron" and run.recompute == "selective")
    if eager and core_saved and traits.qkv != "mla":
        if hf and cfg.attn_softcap:
            t.append(("attention softcap tanh output (act dtype)", "e·b·a·s²", e * b * a * s * s))
        if hf and not gpt:
            t.append(("softmax output fp32", "4·b·a·s²", 4 * b * a * s * s))
            if not pa and e == 2:
                t.append(("probabilities cast to act dtype", "e·b·a·s²", e * b * a * s * s))
        else:
            t.append(("softmax output (act dtype)", "e·b·a·s²", e * b * a * s * s))
        if pa:
            t.append(("attention dropout bool mask", "b·a·s²", b * a * s * s))
            t.append(("attention dropout output", "e·b·a·s²", e * b * a * s * s))
    if not eager and core_saved and traits.qkv != "mla":
        t.append(("flash logsumexp fp32", "4·b·a·s", 4 * b * a * s))
    if traits.qkv != "mla":
        t.append(("attention output = o_proj input", "e·T·a·d", e * T * a * d))
    dropout_masks = ph and (not hf or traits.hidden_dropout)
    if dropout_masks:
        t.append(("hidden dropout bool mask (after o_proj)", "T·h", T * h))
    if traits.sandwich:
        norm("post-attention norm", feeds_linear=False)
        norm("pre-feedforward norm")
    else:
        norm("norm2", input_saved_already=hf and cfg.family == "gpt_neox" and cfg.parallel_residual)
    # ---- MLP
    if hf and traits.moe == "deepseek" and cfg.is_moe_layer(index):
        _deepseek_moe_terms(t, cfg, run)
    elif hf and traits.moe and not cfg.is_moe_layer(index):
        fd = cfg.dense_ffn
        t.append(("dense layer SwiGLU (intermediate_size): silu in, silu out, up out, down input", "4·e·T·f_dense", 4 * e * T * fd))
    elif traits.moe:
        E, k = cfg.experts, cfg.top_k
        t.extend([("router softmax fp32", "4·T·E", 4 * T * E), ("top-k indices int64", "8·T·k", 8 * T * k)])
        if cfg.norm_topk_prob:
            t.extend([
                ("top-k weights fp32 (saved by the in-place normalisation)", "4·T·k", 4 * T * k),
                ("routing weight sum fp32", "4·T", 4 * T),
            ])  # fmt: skip
        if run.hf_version == "5":
            t.extend(_hf5_expert_terms(cfg, run, weight_bytes=e))
        else:
            t.extend([
                ("torch.where indices per expert (one (n_e, 2) int64 storage)", "16·k·T", 16 * k * T),
                ("gathered tokens per expert (gate/up input)", "e·k·T·h", e * k * T * h),
                ("expert SwiGLU (silu in, silu out, up out, down input)", "4·e·k·T·f", 4 * e * k * T * f),
                ("expert output (saved by the routing-weight mul)", "e·k·T·h", e * k * T * h),
                ("routing weight column (mul)", "e·k·T", e * k * T),
                ("weighted expert output (index_add_ source)", "e·k·T·h", e * k * T * h),
            ])  # fmt: skip
        if traits.moe == "qwen2_moe":
            fs = cfg.shared_ffn
            t.extend([
                ("shared expert SwiGLU (silu in, silu out, up out, down input)", "4·e·T·f_s", 4 * e * T * fs),
                ("sigmoid(shared_expert_gate(x)) output (kept by the mul)", "e·T", e * T),
                ("shared expert output (kept by the mul)", "e·T·h", e * T * h),
            ])  # fmt: skip
    elif hf and gpt:
        t.append(("gelu_new: x, tanh, 0.5·x, 1+tanh, c_proj input", "5·e·T·f", 5 * e * T * f))
    elif hf and traits.mlp == "gelu":
        t.append(("exact GeLU input (dense_h_to_4h output), dense_4h_to_h input", "2·e·T·f", 2 * e * T * f))
    elif hf and traits.mlp == "phi3":
        t.append(("gate_up_proj output (silu's input gate is a view of it)", "2·e·T·f", 2 * e * T * f))
        t.append(("silu output, product (down input)", "2·e·T·f", 2 * e * T * f))
    elif hf and traits.mlp == "geglu_tanh":
        t.append(("GeGLU (tanh): gelu input, gelu output, up output, down input", "4·e·T·f", 4 * e * T * f))
    elif hf:
        t.append(("SwiGLU: silu input, silu output, up output, down input", "4·e·T·f", 4 * e * T * f))
    elif gpt:
        t.append(("bias-GeLU input, fc2 input", "2·e·T·f", 2 * e * T * f))
    else:
        t.append(("SwiGLU kernel input [gate|up], fc2 input", "3·e·T·f", 3 * e * T * f))
    if traits.sandwich:
        norm("post-feedforward norm", feeds_linear=False)
    if dropout_masks:
        t.append(("hidden dropout bool mask (after fc2)", "T·h", T * h))
    return t


def _terms_outside(cfg: models.ModelConfig, run: models.RunConfig):
    s, b, h, d, V = run.seq_len, run.micro_batch, cfg.hidden, cfg.head_dim, cfg.vocab
    T, e = s * b, 2 if run.dtype == "bf16" else 4
    gpt, hf = cfg.family == "gpt2", run.framework == "hf"
    traits = cfg.traits if hf else models.FAMILY_TRAITS["gpt2" if gpt else "llama"]
    t = [("input ids int64 (embedding)", "8·T", 8 * T)]
    if gpt or (hf and traits.learned_positions):
        t.append(("position ids int64", "8·s" if hf else "8·T", 8 * s if hf else 8 * T))
    if run.hidden_dropout > 0 and (not hf or traits.embedding_dropout):
        t.append(("embedding dropout bool mask", "T·h", T * h))
    full = run.recompute == "full"
    if hf and traits.rope:  # saved by the RoPE muls; under full recompute kept by the checkpoints
        rot = models._rotary_dims(cfg)
        sym = "dr" if traits.qkv == "mla" else "d" if rot == d else "d_rot"
        kept = "kept by every checkpoint (position_embeddings)" if full else "saved by the RoPE muls"
        t.append((f"RoPE cos + sin (shared by all layers, {kept})", f"2·e·s·{sym}", 2 * e * s * rot))
        if _two_window_kinds(cfg):
            t.append((f"Gemma 3 local RoPE cos + sin (the sliding layers', {kept})", f"2·e·s·{sym}", 2 * e * s * rot))
    if hf and full and not traits.learned_positions:  # GPT-2: the same storage is wpe's saved position ids
        t.append(("cache_position int64 (position_ids is a view), kept by every checkpoint", "8·s", 8 * s))
    if hf and full and run.attention == "eager":
        t.append(("eager causal mask (b, 1, s, s) act dtype, kept by every checkpoint", "e·b·s²", e * b * s * s))
        if _two_window_kinds(cfg):
            t.append(("Gemma 3 sliding-window eager mask (b, 1, s, s), kept by the sliding layers' checkpoints", "e·b·s²", e * b * s * s))
    if not hf and full and not gpt:
        t.append(("rotary_pos_emb fp32 (s, 1, 1, d), a positional checkpoint input", "4·s·d", 4 * s * d))
    if traits.norm == "layer":
        t.extend([("final LayerNorm input", "e·T·h", e * T * h), ("final LN fp32 mean+rstd", "8·T", 8 * T)])
    elif hf:
        t.extend([("final RMSNorm fp32 x", "4·T·h", 4 * T * h), ("final RMSNorm rsqrt", "4·T", 4 * T)])
        if traits.norm == "gemma_rms":
            t.extend([("final Gemma RMSNorm normalized x fp32", "4·T·h", 4 * T * h),
                      ("final Gemma RMSNorm (1 + w) fp32", "4·h", 4 * h)])  # fmt: skip
        elif traits.norm == "olmo2_rms":
            t.append(("final Olmo2 RMSNorm normalized x fp32 (kept by weight·x)", "4·T·h", 4 * T * h))
        else:
            t.append(("final RMSNorm normalized x", "e·T·h", e * T * h))
    else:
        t.extend([("final RMSNorm input", "e·T·h", e * T * h), ("final RMSNorm fp32 rstd", "4·T", 4 * T)])
    t.append(("LM head input (final norm output)", "e·T·h", e * T * h))
    if hf and cfg.final_softcap:
        t.append(("final logit softcap tanh output (act dtype)", "e·T·V", e * T * V))
    if hf and run.hf_version == "4.44":  # CrossEntropyLoss on logits[..., :-1, :].contiguous()
        Ts, el = (s - 1) * b, (e if gpt else 4)
        t.extend([(f"{'act-dtype' if gpt else 'fp32'} log-softmax over s-1 shifted rows (4.44)", f"{'e' if gpt else '4'}·(s-1)·b·V", el * Ts * V),
                  ("shifted targets int64 (labels[..., 1:].contiguous())", "8·(s-1)·b", 8 * Ts)])  # fmt: skip
        return t
    label = "fp32 log-softmax (HF CE)" if hf else "fp32 softmax (fused CE)"
    t.extend([(label, "4·T·V", 4 * T * V), ("targets int64", "8·T", 8 * T)])
    if not hf:
        t.append(("CE target_mask bool (vocab-parallel CE, also at t = 1)", "T", T))
    return t


def _two_window_kinds(cfg):
    sliding = [cfg.is_sliding(i) for i in range(cfg.layers)]
    return any(sliding) and not all(sliding)


FAMILIES_ISSUE_8 = ("gpt_bigcode", "phi", "olmo2", "falcon")


def _terms_layer_issue_8(cfg: models.ModelConfig, run: models.RunConfig):
    """A layer of GPTBigCode, Phi and OLMo 2 (hf, recompute none): EXPECTED.md, "Families for
    fine-tuning"."""
    s, b, h, a, kv, d, f = run.seq_len, run.micro_batch, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn
    T, e = s * b, 2 if run.dtype == "bf16" else 4
    ph, pa, eager = run.hidden_dropout > 0, run.attention_dropout > 0, run.attention == "eager"
    fam = cfg.family
    t = []

    def layer_norm(label):
        t.extend([(f"{label} LayerNorm input", "e·T·h", e * T * h), (f"{label} fp32 mean+rstd", "8·T", 8 * T),
                  (f"{label} output = next linear input", "e·T·h", e * T * h)])  # fmt: skip

    def olmo2_norm(label, rows_sym, width, width_sym):
        t.extend([
            (f"{label} fp32 x (copy if e=2, x itself if e=4)", f"4·T·{width_sym}", 4 * T * width),
            (f"{label} rsqrt fp32 (one per token)", "4·T", 4 * T),
            (f"{label} normalized x fp32 (kept by weight·x)", f"4·T·{width_sym}", 4 * T * width),
        ])  # fmt: skip

    if fam == "falcon":
        return _falcon_terms(cfg, run)
    if fam == "olmo2":
        t.append(("layer input = q/k/v projection input (no input norm)", "e·T·h", e * T * h))
        olmo2_norm("q_norm (whole projection)", "T", a * d, "a·d")
        olmo2_norm("k_norm (whole projection)", "T", kv * d, "kv·d")
    else:
        layer_norm("input_layernorm" if fam == "phi" else "ln_1")
    if fam == "gpt_bigcode":
        if eager:
            t.append(("q, k, v: matmul's copies (k, v broadcast to a heads under multi_query)", "3·e·T·a·d", 3 * e * T * a * d))
        else:
            t.append(("c_attn output (q, k, v are views of it)", "e·T·(a+2kv)·d", e * T * (a + 2 * kv) * d))
    else:
        t.append(("q after RoPE", "e·T·a·d", e * T * a * d))
        if eager:
            t.append(("k (repeat_kv copy, or RoPE output if a=kv)", "e·T·a·d", e * T * a * d))
            t.append(("v (repeat_kv copy, or matmul's copy if a=kv)", "e·T·a·d", e * T * a * d))
        else:
            t.append(("k after RoPE (kv heads)", "e·T·kv·d", e * T * kv * d))
            t.append(("v = v_proj output (kv heads)", "e·T·kv·d", e * T * kv * d))
    if eager:
        t.append(("softmax output fp32", "4·b·a·s²", 4 * b * a * s * s))
        if not pa and e == 2:
            t.append(("probabilities cast to act dtype", "e·b·a·s²", e * b * a * s * s))
        if pa:
            t.append(("attention dropout bool mask", "b·a·s²", b * a * s * s))
            t.append(("attention dropout output", "e·b·a·s²", e * b * a * s * s))
    else:
        t.append(("flash logsumexp fp32", "4·b·a·s", 4 * b * a * s))
    t.append(("attention output = o_proj / dense / c_proj input", "e·T·a·d", e * T * a * d))
    if ph and fam != "olmo2":
        t.append(("resid dropout bool mask (after the attention projection)", "T·h", T * h))
    if fam == "gpt_bigcode":
        layer_norm("ln_2")
        t.append(("gelu_pytorch_tanh input (c_fc output), c_proj input", "2·e·T·f", 2 * e * T * f))
    elif fam == "phi":
        t.append(("gelu_new: x, tanh, 0.5·x, 1+tanh, fc2 input (fc1 reads input_layernorm's output)", "5·e·T·f", 5 * e * T * f))
    else:
        olmo2_norm("post_attention_layernorm", "T", h, "h")
        t.append(("residual after attention = gate/up input", "e·T·h", e * T * h))
        t.append(("SwiGLU: silu input, silu output, up output, down input", "4·e·T·f", 4 * e * T * f))
        olmo2_norm("post_feedforward_layernorm", "T", h, "h")
    if ph and fam != "olmo2":
        t.append(("resid dropout bool mask (after the MLP)", "T·h", T * h))
    return t


def _falcon_terms(cfg, run):
    """FalconDecoderLayer, parallel block, no alibi (EXPECTED.md, "Families for fine-tuning")."""
    s, b, h, a, kv, d, f = run.seq_len, run.micro_batch, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn
    T, e = s * b, 2 if run.dtype == "bf16" else 4
    norms = 2 if cfg.new_arch and cfg.num_ln == 2 else 1
    t = [("LayerNorm input = the layer input (both norms read it)", "e·T·h", e * T * h)]
    t += [(f"LayerNorm {i + 1} fp32 mean+rstd", "8·T", 8 * T) for i in range(norms)]
    t += [(f"LayerNorm {i + 1} output (query_key_value / dense_h_to_4h input)", "e·T·h", e * T * h) for i in range(norms)]
    if cfg.new_arch or kv == 1:
        t.append(("index tensors of qkv[..., [-2]] and [..., [-1]] (int64, one element each)", "16", 16))
    t.append(("q after RoPE", "e·T·a·d", e * T * a * d))
    if run.attention == "eager":
        t.append(("k: matmul's broadcast copy (multi_query) or RoPE output at a heads", "e·T·a·d", e * T * a * d))
        t.append(("v: matmul's broadcast copy (multi_query) or the transpose-reshape copy", "e·T·a·d", e * T * a * d))
        t.append(("softmax output in the activation dtype (no attention dropout)", "e·b·a·s²", e * b * a * s * s))
    elif kv == 1 and not cfg.new_arch:
        t.append(("k after RoPE (one head)", "e·T·d", e * T * d))
        t.append(("v: the copy made by the list index [..., [-1], :] (one head)", "e·T·d", e * T * d))
        t.append(("flash logsumexp fp32", "4·b·a·s", 4 * b * a * s))
    else:
        t.append(("k after RoPE (a heads)", "e·T·a·d", e * T * a * d))
        t.append(("v: the transpose-reshape copy (a heads)", "e·T·a·d", e * T * a * d))
        t.append(("flash logsumexp fp32", "4·b·a·s", 4 * b * a * s))
    t.append(("attention output = dense input", "e·T·a·d", e * T * a * d))
    t.append(("exact gelu input (dense_h_to_4h output), dense_4h_to_h input", "2·e·T·f", 2 * e * T * f))
    if run.hidden_dropout > 0:
        t.append(("dropout_add bool mask on mlp_output + attention_output", "T·h", T * h))
    return t


def _mla_terms(t, cfg, run):
    """DeepSeek-V3 multi-head latent attention, hf (after the input norm's terms)."""
    s, b, a, T = run.seq_len, run.micro_batch, cfg.heads, run.seq_len * run.micro_batch
    e = 2 if run.dtype == "bf16" else 4
    rq, rkv, dn, dr, dv = cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
    dqk = dn + dr
    if rq:
        t.extend([
            ("q_a_layernorm fp32 input (copy if e=2, the q_a_proj output if e=4)", "4·T·rq", 4 * T * rq),
            ("q_a_layernorm rsqrt fp32", "4·T", 4 * T),
            ("q_a_layernorm normalized (act dtype)", "e·T·rq", e * T * rq),
            ("q_a_layernorm output = q_b_proj input", "e·T·rq", e * T * rq),
        ])  # fmt: skip
    if e == 2:
        t.append(("kv_a_layernorm fp32 copy of the compressed kv (a strided view of kv_a output)", "4·T·rkv", 4 * T * rkv))
    else:
        t.append(("kv_a_layernorm input = view of the kv_a_proj_with_mqa output: its whole storage", "4·T·(rkv+dr)", 4 * T * (rkv + dr)))
    t.extend([
        ("kv_a_layernorm rsqrt fp32", "4·T", 4 * T),
        ("kv_a_layernorm normalized (act dtype)", "e·T·rkv", e * T * rkv),
        ("kv_a_layernorm output = kv_b_proj input", "e·T·rkv", e * T * rkv),
        ("query = cat(q_nope, rope(q_rope))", "e·T·a·dqk", e * T * a * dqk),
        ("key = cat(k_nope, rope(k_rope) expanded)", "e·T·a·dqk", e * T * a * dqk),
    ])  # fmt: skip
    pa = run.attention_dropout > 0
    if run.attention == "eager":
        t.append(("softmax output fp32", "4·b·a·s²", 4 * b * a * s * s))
        if not pa and e == 2:
            t.append(("probabilities cast to act dtype", "e·b·a·s²", e * b * a * s * s))
        if pa:
            t.append(("attention dropout bool mask", "b·a·s²", b * a * s * s))
            t.append(("attention dropout output", "e·b·a·s²", e * b * a * s * s))
        t.append(("v: matmul's copy of the strided kv_b_proj slice", "e·T·a·dv", e * T * a * dv))
        t.append(("attention output = o_proj input", "e·T·a·dv", e * T * a * dv))
        return
    t.append(("flash logsumexp fp32", "4·b·a·s", 4 * b * a * s))
    if run.attention == "flash" and dqk != dv:
        t.extend([
            ("v padded to dqk (F.pad, flash_attention_2 only)", "e·T·a·dqk", e * T * a * dqk),
            ("flash output (padded head dim)", "e·T·a·dqk", e * T * a * dqk),
            ("o_proj input: reshape copy of the output sliced to dv", "e·T·a·dv", e * T * a * dv),
        ])  # fmt: skip
    else:
        t.extend([
            ("v = view of kv_b_proj output: its whole storage", "e·T·a·(dn+dv)", e * T * a * (dn + dv)),
            ("attention output = o_proj input", "e·T·a·dv", e * T * a * dv),
        ])  # fmt: skip


def _deepseek_moe_terms(t, cfg, run):
    """DeepseekV3MoE (router, expert loop, shared experts), after the post-attention norm's terms."""
    T, h, E, k, f = run.seq_len * run.micro_batch, cfg.hidden, cfg.experts, cfg.top_k, cfg.ffn
    e = 2 if run.dtype == "bf16" else 4
    if e == 2:  # x.type(float32) and W.type(float32) are new tensors only when the model is not fp32
        t.extend([
            ("router input x.float() (F.linear keeps it)", "4·T·h", 4 * T * h),
            ("router weight W.float(): a new fp32 copy of the parameter (F.linear keeps it)", "4·E·h", 4 * E * h),
        ])  # fmt: skip
    t.extend([("sigmoid scores fp32", "4·T·E", 4 * T * E), ("top-k indices int64 (gather)", "8·T·k", 8 * T * k)])
    if cfg.norm_topk_prob:
        t.extend([
            ("top-k weights fp32 (the in-place /= keeps them)", "4·T·k", 4 * T * k),
            ("denominator sum + 1e-20 fp32", "4·T", 4 * T),
        ])  # fmt: skip
    if run.hf_version == "5":
        t.extend(_hf5_expert_terms(cfg, run, weight_bytes=4))
    else:
        t.extend([
            ("torch.where indices per expert (one (n_e, 2) int64 storage)", "16·k·T", 16 * k * T),
            ("gathered tokens per expert (gate/up input)", "e·k·T·h", e * k * T * h),
            ("expert SwiGLU (silu in, silu out, up out, down input)", "4·e·k·T·f", 4 * e * k * T * f),
            ("expert output (kept by the weight mul)", "e·k·T·h", e * k * T * h),
            ("routing weight column fp32 (kept by the mul)", "4·k·T", 4 * k * T),
            ("weighted expert output fp32 (promoted; index_add_ source)", "4·k·T·h", 4 * k * T * h),
        ])  # fmt: skip
    t.append(("shared experts SwiGLU (n_shared·moe_ffn)", "4·e·T·f_s", 4 * e * T * cfg.shared_ffn))


def _hf5_expert_terms(cfg, run, weight_bytes):
    """transformers 5 fused experts (EXPECTED.md "transformers 5"), S = k·T rows; `weight_bytes`:
    the routing weights' dtype (the router's cast: e; DeepSeek's fp32 weights: 4)."""
    T, h, E, k, f = run.seq_len * run.micro_batch, cfg.hidden, cfg.experts, cfg.top_k, cfg.ffn
    e = 2 if run.dtype == "bf16" else 4
    S, w = k * T, weight_bytes
    wsym = "e·S" if w == e else f"{w}·S"
    swiglu = ("[gate|up] output (chunk views), act(gate), product", "4·e·S·f", 4 * e * S * f)
    if run.experts_impl == "eager":
        return [
            ("torch.where indices per expert (one (n_e, 2) int64 storage)", "16·S", 16 * S),
            ("gathered tokens x[token_idx] (fused gate_up linear input)", "e·S·h", e * S * h),
            swiglu,
            ("expert output (kept by the weight mul)", "e·S·h", e * S * h),
            ("routing weight column (kept by the mul)", wsym, w * S),
            ("weighted output .to(dtype) (index_add_ source)", "e·S·h", e * S * h),
        ]
    if run.experts_impl == "grouped_mm":
        return [
            ("token_idx int64 (x[token_idx])", "8·S", 8 * S),
            ("perm, inv_perm int64 (the [perm] / [inv_perm] gathers)", "16·S", 16 * S),
            ("expert-sorted tokens (grouped_mm #1 input)", "e·S·h", e * S * h),
            ("offsets int32 (both grouped_mm)", "4·E", 4 * E),
            swiglu,
            ("down output (kept by the weight mul)", "e·S·h", e * S * h),
            ("sample_weights[perm] (kept by the mul)", wsym, w * S),
        ]
    return [  # batched_mm
        ("token_idx int64, clamped expert ids int64", "16·S", 16 * S),
        ("gathered tokens (bmm #1)", "e·S·h", e * S * h),
        ("gate_up_proj[ids] (S, 2f, h), down_proj[ids] (S, h, f): weight copies kept by the bmm's", "3·e·S·f·h",
         3 * e * S * f * h),
        swiglu,
        ("down output (kept by the weight mul)", "e·S·h", e * S * h),
        ("sample weights (kept by the mul)", wsym, w * S),
        # `out * sample_weights` is promoted to fp32 by fp32 weights: the mask is cast to that dtype
        ("valid mask .to(out.dtype) (kept by `* valid_mask`)", wsym, max(w, e) * S),
    ]


def _encoder_layer_terms(cfg, run):
    """BertLayer / RobertaLayer (EXPECTED.md, "Encoders"): post-LN, bidirectional attention."""
    s, b, h, a, f = run.seq_len, run.micro_batch, cfg.hidden, cfg.heads, cfg.ffn
    T, e = s * b, 2 if run.dtype == "bf16" else 4
    ph, pa, eager = run.hidden_dropout > 0, run.attention_dropout > 0, run.attention == "eager"
    if run.recompute == "full":
        return [("layer input (checkpoint)", "e·T·h", e * T * h)]
    t = [("layer input = query/key/value input (previous LayerNorm output)", "e·T·h", e * T * h)]
    if eager:
        t.append(("q, kᵀ, v: matmul's copies of the transpose_for_scores views", "3·e·T·h", 3 * e * T * h))
        t.append(("softmax output (activation dtype)", "e·b·a·s²", e * b * a * s * s))
        if pa:
            t.append(("attention dropout bool mask", "b·a·s²", b * a * s * s))
            t.append(("attention dropout output", "e·b·a·s²", e * b * a * s * s))
    else:
        t.append(("query, key, value outputs (sdpa keeps its inputs, views of them)", "3·e·T·h", 3 * e * T * h))
        t.append(("flash logsumexp fp32", "4·b·a·s", 4 * b * a * s))
    t.append(("context = attention.output.dense input", "e·T·h", e * T * h))
    if ph:
        t.append(("hidden dropout bool mask (attention output)", "T·h", T * h))
    t.extend([("attention.output.LayerNorm input (residual sum)", "e·T·h", e * T * h),
              ("attention.output.LayerNorm fp32 mean+rstd", "8·T", 8 * T),
              ("LayerNorm output = intermediate.dense input", "e·T·h", e * T * h),
              ("exact gelu input (intermediate.dense output), output.dense input", "2·e·T·f", 2 * e * T * f)])  # fmt: skip
    if ph:
        t.append(("hidden dropout bool mask (MLP output)", "T·h", T * h))
    t.extend([("output.LayerNorm input (residual sum)", "e·T·h", e * T * h),
              ("output.LayerNorm fp32 mean+rstd", "8·T", 8 * T)])  # fmt: skip
    return t


def _encoder_outside_terms(cfg, run):
    """BertEmbeddings and the head (EXPECTED.md, "Encoders")."""
    s, b, h, V, n = run.seq_len, run.micro_batch, cfg.hidden, cfg.vocab, cfg.num_labels
    T, e = s * b, 2 if run.dtype == "bf16" else 4
    ph = run.hidden_dropout > 0
    p = run.hidden_dropout if cfg.classifier_dropout is None else cfg.classifier_dropout
    t = [("input ids int64 (word_embeddings)", "8·T", 8 * T)]
    if cfg.family == "roberta":
        t.append(("position ids int64 (create_position_ids_from_input_ids)", "8·T", 8 * T))
    t.extend([("embeddings.LayerNorm input (word + token type + position)", "e·T·h", e * T * h),
              ("embeddings.LayerNorm fp32 mean+rstd", "8·T", 8 * T)])  # fmt: skip
    if ph:
        t.append(("embedding dropout bool mask", "T·h", T * h))
    if run.recompute == "full" and run.attention == "eager":
        t.append(("extended attention mask (b, 1, 1, s) act dtype, kept by every checkpoint", "e·b·s", e * b * s))
    if cfg.head == "mlm":
        t.extend([("last layer output = transform.dense input", "e·T·h", e * T * h),
                  ("gelu input (transform.dense output)", "e·T·h", e * T * h),
                  ("transform.LayerNorm input (gelu output)", "e·T·h", e * T * h),
                  ("transform.LayerNorm fp32 mean+rstd", "8·T", 8 * T),
                  ("decoder input (LayerNorm output)", "e·T·h", e * T * h),
                  ("log-softmax (activation dtype, no upcast)", "e·T·V", e * T * V),
                  ("labels int64", "8·T", 8 * T)])  # fmt: skip
        return t
    roberta_cls = cfg.family == "roberta" and cfg.head == "classifier"
    if roberta_cls and p > 0:
        t.extend([("features[:, 0] dropout bool mask", "b·h", b * h), ("dropout output = dense input", "e·b·h", e * b * h)])
    else:
        t.append(("last layer output (the dense reads hidden_states[:, 0], a view)", "e·T·h", e * T * h))
    t.append(("tanh output", "e·b·h", e * b * h))
    if cfg.head == "none":
        return t
    if p > 0:
        t.extend([("classifier dropout bool mask", "b·h", b * h), ("dropout output = classifier input", "e·b·h", e * b * h)])
    t.extend([("log-softmax over the labels (activation dtype)", "e·b·n", e * b * n), ("labels int64", "8·b", 8 * b)])
    return t


def expected(cfg: models.ModelConfig, run: models.RunConfig):
    """(per_layer_bytes, total_bytes, layer terms, outside terms). Layers may differ (dense and
    MoE layers of one model): total sums every layer's terms; per_layer is the middle layer's."""
    if cfg.family in models.ENCODER_FAMILIES:
        layer, outside = _encoder_layer_terms(cfg, run), _encoder_outside_terms(cfg, run)
        per_layer = sum(x[2] for x in layer)
        return per_layer, cfg.layers * per_layer + sum(x[2] for x in outside), layer, outside
    if cfg.family == "llama4_text":  # llama4_model.py holds its terms (EXPECTED.md, "Llama 4 text")
        import llama4_model
        terms = functools.partial(llama4_model.expected_layer_terms, cfg, run)
        layer, outside = terms(cfg.layers // 2), llama4_model.expected_outside_terms(cfg, run)
    else:
        terms = functools.partial(_terms_layer, cfg, run)
        layer, outside = _terms_layer(cfg, run), _terms_outside(cfg, run)
    per_layer = sum(x[2] for x in layer)
    layers = sum(sum(x[2] for x in terms(i)) for i in range(cfg.layers))
    return per_layer, layers + sum(x[2] for x in outside), layer, outside


# ---------------------------------------------------------------------------------------------
# One tensor/sequence/context-parallel rank of the megatron model (parallel_models.py)


def _terms_rank(cfg: models.ModelConfig, run: models.RunConfig, par):
    """(layer terms, outside terms) of one rank: heads a_r = a/t, KV heads kv_r = kv/t (or 1 when
    kv < t), FFN f_r = f/t, vocabulary V_r = ceil(V/t); the rank's sequence s_l = s/cp, the
    residual stream s_r = s_l/t under SP (else s_l). T_l = s_l·b, T_r = s_r·b."""
    import parallel_models

    a, kv, f, V = parallel_models.rank_shapes(cfg, par)
    s, b, h, d = run.seq_len // par.cp, run.micro_batch, cfg.hidden, cfg.head_dim
    s_r = s // par.tp if par.sp and par.tp > 1 else s
    T, Tr, e = s * b, s_r * b, 2 if run.dtype == "bf16" else 4
    ph, pa = run.hidden_dropout > 0, run.attention_dropout > 0
    gpt, eager = cfg.family == "gpt2", run.attention == "eager"
    stats = 8 if gpt else 4
    layer = []
    if run.recompute == "full":
        layer.append(("layer input (checkpoint), s_r", "e·T_r·h", e * Tr * h))
    else:
        for label in ("norm1", "norm2"):
            layer += [
                (f"{label} input (s_r)", "e·T_r·h", e * Tr * h),
                (f"{label} fp32 stats (s_r)", f"{stats}·T_r", stats * Tr),
                (f"{label} output = column-parallel input, s_r shard", "e·T_r·h", e * Tr * h),
            ]  # fmt: skip
        qkv = ("fused QKV output, rank shard", "e·T_l·(a_r+2kv_r)·d", e * T * (a + 2 * kv) * d)
        if not gpt:
            layer.append(("q after fused RoPE", "e·T_l·a_r·d", e * T * a * d))
            if eager and run.recompute != "selective" and a > kv:
                layer += [("k expanded (copy)", "e·T_l·a_r·d", e * T * a * d), ("v expanded (copy)", "e·T_l·a_r·d", e * T * a * d)]
            else:
                layer.append(("k after fused RoPE", "e·T_l·kv_r·d", e * T * kv * d))
        if gpt or not eager or run.recompute == "selective" or a == kv:
            layer.append(qkv)
        if run.recompute != "selective":
            if eager:
                layer.append(("softmax output", "e·b·a_r·s²", e * b * a * s * s))
                if pa:
                    layer += [("attn dropout mask", "b·a_r·s²", b * a * s * s), ("attn dropout out", "e·b·a_r·s²", e * b * a * s * s)]
            else:
                layer.append(("flash logsumexp fp32", "4·b·a_r·s_l", 4 * b * a * s))
        layer.append(("context = row-parallel proj input", "e·T_l·a_r·d", e * T * a * d))
        layer.append(("MLP kernel input + fc2 input", f"{2 if gpt else 3}·e·T_l·f_r", (2 if gpt else 3) * e * T * f))
        if ph:
            layer += [("hidden dropout mask after proj (s_r)", "T_r·h", Tr * h), ("hidden dropout mask after fc2 (s_r)", "T_r·h", Tr * h)]
    out = [("input ids int64 (masked_input when t > 1)", "8·T_l", 8 * T)]
    if par.tp > 1:
        out.append(("VocabParallelEmbedding input_mask bool (index_put_)", "T_l", T))
    if gpt:
        out.append(("position ids int64", "8·T_l", 8 * T))
    if ph:
        out.append(("embedding dropout mask (s_r)", "T_r·h", Tr * h))
    if run.recompute == "full" and not gpt:
        out.append(("rotary_pos_emb fp32 (s_l, 1, 1, d), a positional checkpoint input", "4·s_l·d", 4 * s * d))
    out += [
        ("final norm input (s_r)", "e·T_r·h", e * Tr * h),
        ("final norm fp32 stats (s_r)", f"{stats}·T_r", stats * Tr),
        ("LM head input, s_r shard", "e·T_r·h", e * Tr * h),
        ("vocab-parallel CE fp32 softmax", "4·T_l·V_r", 4 * T * V),
        ("CE target_mask bool", "T_l", T),
        ("CE masked_target int64", "8·T_l", 8 * T),
    ]  # fmt: skip
    return layer, out


def expected_rank(cfg: models.ModelConfig, run: models.RunConfig, par):
    """(per_layer_bytes, total_bytes, layer terms, outside terms) of one parallel rank."""
    layer, outside = _terms_rank(cfg, run, par)
    per_layer = sum(x[2] for x in layer)
    return per_layer, cfg.layers * per_layer + sum(x[2] for x in outside), layer, outside
