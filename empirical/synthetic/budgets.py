"""The run configurations of the synthetic studies (:mod:`.study`) at ``quick`` and at the full budgets.

This module imports neither torch nor matplotlib: ``qkdyn verify`` plans every study's runs in the
driver before any worker starts, and reading these configurations through the experiment modules
loaded torch, scipy and matplotlib there first (~3.5 s before the first run began).
"""
from __future__ import annotations

from qkdyn.theory.setting import EXACT_PARAMS

#: the OV forms the fixed-attention experiment trains, one run each
FORMS = ("collapsed", "factorized")
#: attention on the distinct tokens at which the fixed-attention experiment trains OV (:mod:`.fixed_attention`)
ALPHAS = (0.2, 0.4, 0.6, 0.8, 1.0)
#: the authors' notebooks' test set: 200 batches of 32 (:mod:`.authors`)
AUTHORS_TEST_SIZE = 6400


def a6(quick: bool) -> dict:
    """Claim A6 (:mod:`.claim_a6`): horizon T, GD steps h, SGD batches and seeds, Adam's sweep."""
    if quick:
        return dict(T=10.0, steps=[0.04, 0.02], sgd_batches=[8, 64, 512], sgd_seeds=1, overlay_batch=32,
                    adam_rhos=[0.1, 10.0], adam_params=["CACO", "FAFO"], adam_cap=800, adam_loss=0.3)
    return dict(T=40.0, steps=[0.04, 0.02, 0.01], sgd_batches=[8, 32, 128, 512], sgd_seeds=3, overlay_batch=32,
                adam_rhos=[0.1, 1.0, 10.0], adam_params=list(EXACT_PARAMS), adam_cap=3000, adam_loss=0.1)


def sampled(quick: bool) -> dict:
    """The sampled claims (:mod:`.claims_sampled`): horizons (clean: SGD steps; authors: the factor
    compressing every notebook horizon), seeds, test sizes; quick keeps >= 2 seeds."""
    if quick:
        return {"seeds": [0, 1], "clean_steps": 1000, "authors_compression": 500, "clean_test": 800,
                "authors_test": 800}
    return {"seeds": [0, 1, 2], "clean_steps": 3000, "authors_compression": 80, "clean_test": 2000,
            "authors_test": AUTHORS_TEST_SIZE}


def fixed_attention(quick: bool) -> dict:
    """Claim FA (:mod:`.fixed_attention`): alphas, seeds, SGD steps, evaluation size, checkpoints."""
    if quick:
        return {"alphas": (0.2, 0.6, 1.0), "seeds": [0, 1], "steps": 250, "eval_size": 1024, "checkpoints": 6}
    return {"alphas": ALPHAS, "seeds": [0, 1, 2], "steps": 1200, "eval_size": 4096, "checkpoints": 13}
