"""Cost of per-circuit optimiser groups: training steps/s of the 1-layer classifier with the QK/rest
groups and per-group schedule, as a ratio against one plain AdamW group, measured in the same run."""
from __future__ import annotations

import time


def _steps_per_second(model, opt, sched, ids, lengths, labels, steps: int, warmup: int = 5) -> float:
    """Steps per second over ``steps`` timed steps, after ``warmup`` untimed ones."""
    import torch.nn.functional as F

    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        logits, _ = model(ids, lengths)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    return steps / (time.perf_counter() - start)


def main() -> None:
    import torch

    from qkdyn.empirical.circuits.models import Decoder, ModelConfig
    from qkdyn.empirical.circuits.optim import build_optimizer

    torch.set_num_threads(1)
    cfg = ModelConfig(vocab_size=8000, n_out=2, max_len=48)
    ids = torch.randint(1, 8000, (32, 40))
    lengths, labels = torch.full((32,), 40), torch.randint(0, 2, (32,))
    torch.manual_seed(0)
    plain_model = Decoder(cfg)  # same initialisation as the grouped model below
    plain = _steps_per_second(plain_model, torch.optim.AdamW(plain_model.parameters(), lr=1e-3), None,
                              ids, lengths, labels, 60)
    torch.manual_seed(0)
    model = Decoder(cfg)
    opt, sched = build_optimizer(model, optimizer="adamw", lr=1e-3, weight_decay=0.01, momentum=0.9, qk_lr_mult=30,
                                 qk_ramp_steps=0, qk_embedding=True, warmup=10, total=65)
    grouped = _steps_per_second(model, opt, sched, ids, lengths, labels, 60)
    print(f"1-layer classifier, batch 32 x 40 tokens, 1 thread: plain AdamW {plain:.1f} steps/s, "
          f"QK/rest groups + schedule {grouped:.1f} steps/s, ratio {grouped / plain:.2f}")


if __name__ == "__main__":
    main()
