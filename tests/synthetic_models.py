"""Models of the synthetic head for the tests: every entry drawn, so that the model lies off the symmetric subspace
and each entry that reaches the loss has its own gradient.

(``tests/`` is on ``sys.path`` because ``tests/conftest.py`` lives there.)"""
from __future__ import annotations

import torch
from qkdyn.empirical.synthetic.layout import Layout
from qkdyn.empirical.synthetic.model import AttentionHead


def random_model(param: str, setting, seed: int, width: int | None = 5) -> AttentionHead:
    """The head of form ``param`` for ``setting`` (inner width ``width``; None: V), its entries standard normal."""
    model = AttentionHead(param, Layout.of(setting), setting.scale, width=width)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return model
