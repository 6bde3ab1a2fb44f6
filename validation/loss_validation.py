#!/usr/bin/python3
"""Measure the chunked and fused linear-cross-entropy losses (actmem --loss) and hold actmem to them.

  /usr/bin/python3 validation/loss_validation.py --actmem build/actmem

Two reference implementations, written here from their sources (torch 1.13 CPU, no torchtune or
Liger installed; policies/loss_impl.h cites the files):

* chunked:N   torchtune CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py) with
              TransformerDecoder's chunked output: `[output(chunk) for chunk in h.tensor_split(N, dim=1)]`,
              labels tensor_split the same way and reshape(-1), each chunk `F.cross_entropy(logits.float(),
              labels, reduction="sum")`, the sum divided by the token count; the recipe deletes the logits
              before backward (full_finetune_single_device.py: `del logits`).
* fused-linear-ce  Liger LigerFusedLinearCrossEntropyFunction (src/liger_kernel/ops/
              fused_linear_cross_entropy.py, fused_linear_cross_entropy_forward) on its CUDA path: grad
              disabled inside forward, so `_can_use_mm_out`: one preallocated (chunk, V) logits buffer filled
              by torch.mm(out=), the cross-entropy kernel's in-place softmax gradient (written here as
              in-place torch ops), grad_input rows by torch.mm(out=), grad_weight by in-place addmm;
              save_for_backward(grad_input, grad_weight); backward only scales (skipped for grad 1.0).

Per case: the saved storages of the LM head + loss (saved_tensors_hooks, each storage once, the LM
head weight excluded as a parameter) against actmem's head tensors other than the final norm's own,
and the transient: the profiler's allocation timeline (alloc_timeline.py) replayed, its peak
minus what stays saved, against actmem's `chunked_loss` / `fused_linear_ce_chunk` transient. The
gradients of the input and the weight are excluded (actmem counts gradients as static memory).
Liger's transient is held in fp32 only: in bf16, torch 1.13's CPU matmul packs its operands into
temporary buffers (oneDNN), which cuBLAS does not (its workspace is preallocated). Ends with
`N passed, M failed`.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import runner
from alloc_timeline import allocation_events, replay

TOLERANCE = 0.01
NORM_OWN = {"head.input", "final_norm.input_fp32", "final_norm.rstd", "final_norm.normalized"}  # the norm's own (fp32: its input)


class SavedStorages:
    """Storages saved for backward, each once, parameters excluded."""

    def __init__(self, params):
        self.param_ptrs = {p.storage().data_ptr() for p in params}
        self.storages = {}

    def pack(self, t):
        if t.dim() > 0:
            st = t.storage()
            if st.data_ptr() not in self.param_ptrs:
                self.storages[st.data_ptr()] = st.nbytes()
        return t

    def total(self):
        return sum(self.storages.values())


def chunked_loss(x, weight, labels, n):
    logits = [F.linear(chunk, weight) for chunk in x.tensor_split(n, dim=1)]  # TransformerDecoder chunked output
    total_elements = (labels != -100).sum()
    targets = [t.reshape(-1) for t in labels.tensor_split(n, dim=1)]
    flat = [c.reshape(-1, c.size(-1)) for c in logits]
    total = 0.0
    for logits_chunk, labels_chunk in zip(flat, targets):
        total = total + F.cross_entropy(logits_chunk.float(), labels_chunk, ignore_index=-100, reduction="sum")
    del logits, flat  # the recipe: `del logits` before backward
    return total / total_elements


def next_power_of_2(n):
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def cdiv(a, b):
    return -(-a // b)


class LigerFusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, weight, target):
        bt, hidden = inp.shape
        vocab = weight.shape[0]
        inc_factor = cdiv(vocab, hidden)
        chunk_size = min(next_power_of_2(cdiv(bt, inc_factor)), bt)
        num_chunks = cdiv(bt, chunk_size)
        grad_input = torch.zeros_like(inp)
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        loss_1d = torch.zeros(bt, dtype=torch.float32)
        target_mask = target != -100
        total_n_non_ignore = target_mask.sum().item()
        logits_storage = torch.empty((chunk_size, vocab), dtype=inp.dtype)
        for chunk_id in range(num_chunks):
            start, end = chunk_id * chunk_size, min((chunk_id + 1) * chunk_size, bt)
            input_chunk = inp[start:end]
            logits_chunk = logits_storage[: end - start]
            torch.mm(input_chunk, weight.t(), out=logits_chunk)
            target_chunk = target[start:end]
            # liger_cross_entropy_kernel: loss per row, then X <- (softmax(X) − onehot(y)) / n in place
            row_max = logits_chunk.max(dim=-1, keepdim=True).values
            logits_chunk.sub_(row_max).exp_()
            row_sum = logits_chunk.sum(dim=-1, keepdim=True)
            logits_chunk.div_(row_sum)
            loss_1d[start:end] = -torch.log(logits_chunk.gather(1, target_chunk[:, None]).squeeze(1).float())
            logits_chunk.scatter_add_(1, target_chunk[:, None],
                                      torch.full((end - start, 1), -1.0, dtype=logits_chunk.dtype))
            logits_chunk.div_(total_n_non_ignore)
            del row_max, row_sum
            torch.mm(logits_chunk, weight, out=grad_input[start:end])
            if grad_weight is not None:
                grad_weight.addmm_(logits_chunk.t(), input_chunk)
            del logits_chunk, input_chunk, target_chunk
        del logits_storage
        loss = torch.sum(loss_1d) / total_n_non_ignore
        ctx.save_for_backward(grad_input, grad_weight)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors
        if not torch.equal(grad_output, torch.tensor(1.0, dtype=grad_output.dtype)):
            grad_input = grad_input * grad_output
            grad_weight = grad_weight * grad_output if grad_weight is not None else None
        return grad_input, grad_weight, None


def measure(kind, s, b, h, vocab, dtype, chunks):
    """(saved bytes, transient bytes) of one forward + backward of the LM head and loss."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(vocab, h, dtype=dtype) * 0.05)
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)  # the final norm's output
    labels = torch.randint(0, vocab, (b, s))

    def forward(saved):
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
            if kind == "chunked":
                return chunked_loss(x, weight, labels, chunks)
            return LigerFusedLinearCrossEntropy.apply(x.view(-1, h), weight, labels.view(-1))

    forward(SavedStorages([weight])).backward()  # warm up
    x.grad = None
    weight.grad = None
    saved = SavedStorages([weight])
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = forward(saved)
        if kind == "chunked":
            loss.backward()
    events = allocation_events(prof)
    if kind == "chunked":
        # x is allocated outside the profile; a saved view of it (b = 1) is not in the timeline.
        in_timeline = saved.total() - (x.storage().nbytes() if x.storage().data_ptr() in saved.storages else 0)
        peak, _ = replay(events, [x.grad.data_ptr(), weight.grad.data_ptr()])
        return saved.total(), peak - in_timeline
    # Liger: everything transient happens in forward (backward is a no-op for a grad of 1.0).
    peak, alive = replay(events)
    loss.backward()
    return saved.total(), peak - alive


def actmem_counts(actmem, s, b, h, vocab, dtype_name, loss):
    config = dict(model_type="llama", hidden_size=h, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, intermediate_size=2 * h, vocab_size=vocab, max_position_embeddings=4 * s,
                  torch_dtype="bfloat16" if dtype_name == "bf16" else "float32")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        out = subprocess.run([actmem, "estimate", "--model", path, "--seq-len", str(s), "--micro-batch", str(b),
                              "--dtype", dtype_name, "--weight-dtype", dtype_name, "--framework", "hf",
                              "--loss", loss, "--json"],
                             capture_output=True, text=True, check=True)
    j = json.loads(out.stdout)
    key = "fused_linear_ce_chunk" if loss == "fused-linear-ce" else "chunked_loss"
    transient = next(t["bytes"] for t in j["transients"] if t["key"] == key)
    saved = sum(t["bytes"] for t in j["activations"]["tensors"]
                if t["region"] == "head" and t["name"] not in NORM_OWN)
    return saved, transient


CASES = [  # kind, s, b, h, V, dtype, chunks, transient checked
    ("chunked", 96, 2, 64, 1003, "bf16", 8, True),
    ("chunked", 96, 2, 64, 1003, "bf16", 2, True),
    ("chunked", 130, 1, 32, 4099, "bf16", 3, True),
    ("chunked", 64, 3, 48, 2048, "fp32", 4, True),
    ("chunked", 200, 1, 64, 3001, "bf16", 1, True),
    ("fused", 96, 2, 64, 1003, "fp32", 0, True),
    ("fused", 130, 1, 32, 4099, "fp32", 0, True),
    ("fused", 64, 3, 48, 2048, "fp32", 0, True),
    ("fused", 1024, 1, 256, 2000, "fp32", 0, True),
    ("fused", 96, 2, 64, 1003, "bf16", 0, False),
]


def case_name(case):
    kind, s, b, h, vocab, dtype_name, chunks, check_transient = case
    loss = f"chunked:{chunks}" if kind == "chunked" else "fused-linear-ce"
    return f"{loss} s{s} b{b} h{h} V{vocab} {dtype_name}"


def measure_case(case):
    kind, s, b, h, vocab, dtype_name, chunks, check_transient = case
    return measure(kind, s, b, h, vocab, torch.bfloat16 if dtype_name == "bf16" else torch.float32, chunks)


def estimate(case, actmem, workdir):
    kind, s, b, h, vocab, dtype_name, chunks, check_transient = case
    loss = f"chunked:{chunks}" if kind == "chunked" else "fused-linear-ce"
    try:
        return actmem_counts(actmem, s, b, h, vocab, dtype_name, loss), None
    except (subprocess.CalledProcessError, OSError, StopIteration, KeyError) as e:
        return None, f"actmem failed: {e} {getattr(e, 'stderr', '')}"


def row(case, measured, estimated):
    (saved, transient), (est_saved, est_transient), check_transient = measured, estimated, case[7]
    err_saved = (est_saved - saved) / saved
    err_transient = (est_transient - transient) / transient
    ok = abs(err_saved) <= TOLERANCE and (not check_transient or abs(err_transient) <= TOLERANCE)
    shown = f"{100 * err_transient:>+8.2f}" if check_transient else "   (cpu)"
    print(f"{case_name(case):<40}{saved:>10}{est_saved:>10}{100 * err_saved:>+8.2f}{transient:>12}{est_transient:>12}"
          f"{shown}  {'ok' if ok else 'FAIL'}")
    return ok


def main():
    return runner.run_cases(CASES, measure_case, estimate, row,
                            f"{'case':<40}{'saved':>10}{'actmem':>10}{'err%':>8}{'transient':>12}{'actmem':>12}{'err%':>8}",
                            name=case_name, actmem_required=True)


if __name__ == "__main__":
    sys.exit(main())
