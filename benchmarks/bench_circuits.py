"""Cost of per-circuit optimiser groups: training steps/s of the 1-layer classifier with the QK/rest
groups and per-group schedule, as a ratio against one plain AdamW group, measured in the same run
(interleaved rounds, CPU time, the median of the per-round ratios)."""
from __future__ import annotations

import statistics
import time

ROUNDS, STEPS, WARMUP = 5, 20, 5


def _step_seconds(model, opt, sched, ids, lengths, labels, steps: int) -> float:
    """CPU seconds per training step over ``steps`` steps."""
    import torch.nn.functional as F

    start = time.process_time()
    for _ in range(steps):
        logits, _ = model(ids, lengths)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    return (time.process_time() - start) / steps


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
    plain = (plain_model, torch.optim.AdamW(plain_model.parameters(), lr=1e-3), None)
    torch.manual_seed(0)
    model = Decoder(cfg)
    total = WARMUP + ROUNDS * STEPS
    grouped = (model, *build_optimizer(model, optimizer="adamw", lr=1e-3, weight_decay=0.01, momentum=0.9,
                                       qk_lr_mult=30, qk_ramp_steps=0, qk_embedding=True, warmup=10, total=total))
    for run in (plain, grouped):
        _step_seconds(*run, ids, lengths, labels, WARMUP)
    rounds = [(_step_seconds(*plain, ids, lengths, labels, STEPS), _step_seconds(*grouped, ids, lengths, labels, STEPS))
              for _ in range(ROUNDS)]
    ratio = statistics.median(p / g for p, g in rounds)
    print(f"1-layer classifier, batch 32 x 40 tokens, 1 thread, CPU (median of {ROUNDS} interleaved rounds of "
          f"{STEPS} steps): plain AdamW {1 / statistics.median(p for p, _ in rounds):.1f} steps/s, QK/rest groups "
          f"+ schedule {1 / statistics.median(g for _, g in rounds):.1f} steps/s, ratio {ratio:.2f} "
          f"(rounds {', '.join(f'{p / g:.2f}' for p, g in rounds)})")


if __name__ == "__main__":
    main()
