"""The LM's training loss, cross-entropy through the output head, without materialising the logits.

For hidden states h_i (N x d, after the final LayerNorm), the head W (V x d, tied to the token
embedding) and targets t_i (``IGNORE`` = -100 skipped), with n the number of counted targets:

    L = (1/n) sum_i [lse_i - z_i[t_i]],   z_i = W h_i,   lse_i = log sum_v exp z_i[v],
    dL/dh_i = (1/n) W^T (softmax(z_i) - e_{t_i}),   dL/dW = (1/n) sum_i (softmax(z_i) - e_{t_i}) h_i^T.

``F.cross_entropy(h @ W.T, t)`` computes the same numbers through an N x V logit tensor, its
softmax and its gradient: at 2048 tokens x 8192 ids each buffer is 64 MiB, mapped and unmapped at
every step on the CPU (page faults: most of a CPU run's system time). Here the rows go through in
chunks of ``CHUNK_ELEMENTS / V`` tokens; each chunk's logits are turned in place into its softmax
and its gradient, and both gradients are accumulated in the forward pass (while the chunk is in
the cache), so the backward pass only scales them by the incoming gradient. The matrix products
are those of autograd's forward and backward (no recomputation); the largest buffer is one chunk.
The result equals ``F.cross_entropy`` to round-off (a test, loss and both gradients).
"""
from __future__ import annotations

import torch

IGNORE = -100
#: logits held at a time: 2^19 float32 = 2 MiB (64 tokens at a vocabulary of 8192)
CHUNK_ELEMENTS = 1 << 19


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the logits ``hidden @ weight.T`` (float32) against ``targets``, targets
    equal to ``IGNORE`` not counted (the mean of ``F.cross_entropy(..., ignore_index=-100)``)."""
    return _LinearCrossEntropy.apply(hidden.reshape(-1, hidden.size(-1)), weight, targets.reshape(-1))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        grads = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        rows, vocab = hidden.size(0), weight.size(0)
        chunk = max(1, min(rows, CHUNK_ELEMENTS // vocab))
        counted = targets != IGNORE
        n = int(counted.sum())
        safe = targets.masked_fill(~counted, 0)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if grads else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if grads else None
        direct = (hidden.dtype == weight.dtype == torch.float32
                  and not torch.is_autocast_enabled(hidden.device.type))
        buffer = torch.empty(chunk, vocab, dtype=torch.float32, device=hidden.device)
        for start in range(0, rows, chunk):
            h, t, keep = hidden[start:start + chunk], safe[start:start + chunk], counted[start:start + chunk]
            z = buffer[:len(h)]
            if direct:
                torch.mm(h, weight.t(), out=z)
            else:  # bf16 autocast or half inputs: the product in their precision, then float32 (as .float())
                z.copy_(h @ weight.t())
            target_logit = z.gather(1, t[:, None]).squeeze(1)
            peak = z.amax(dim=1, keepdim=True)
            z.sub_(peak).exp_()  # z <- exp(z - max): the softmax's numerator
            norm = z.sum(dim=1, keepdim=True)
            lse = peak.squeeze(1) + norm.squeeze(1).log()
            total += ((lse - target_logit) * keep).sum()
            if grads:
                z.div_(norm)  # softmax
                z[torch.arange(len(h), device=z.device), t] -= 1.0
                z.mul_((keep / max(n, 1)).to(z.dtype)[:, None])  # dL/dz: ignored rows 0
                grad_hidden[start:start + chunk] = (z @ weight.float()).to(hidden.dtype)
                grad_weight.addmm_(z.t(), h.float())
        if grads:
            ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return total / n if n else total * float("nan")

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_output, grad_weight * grad_output, None
