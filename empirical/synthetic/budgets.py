"""The configurations of the synthetic studies (:mod:`.study`): one frozen dataclass per study, whose
fields declare their domains (:mod:`qkdyn.configflags`), and its instance at each budget.

``quick`` is ``qkdyn verify --quick``; ``cpu``, ``gpu`` and ``paper`` are the full run (these
experiments are small: a GPU adds nothing), so those three budgets are one instance.

This module imports neither torch nor matplotlib: ``qkdyn verify`` plans every study's runs in the
driver before any worker starts, and reading these configurations through the experiment modules
loaded torch, scipy and matplotlib there first (~3.5 s before the first run began).
"""
from __future__ import annotations

import dataclasses

from qkdyn.theory.setting import EXACT_PARAMS

from qkdyn.configflags import Domain, check_config, choice_list, int_list, number_list, positive, positive_int

#: the OV forms the fixed-attention experiment trains, one run each
FORMS = ("collapsed", "factorized")
#: attention on the distinct tokens at which the fixed-attention experiment trains OV (:mod:`.fixed_attention`)
ALPHAS = (0.2, 0.4, 0.6, 0.8, 1.0)
#: the authors' notebooks' test set: 200 batches of 32 (:mod:`.authors`)
AUTHORS_TEST_SIZE = 6400


def full_and_quick(full, quick) -> dict:
    """The budgets of a synthetic study: ``quick``, and ``full`` at ``cpu``, ``gpu`` and ``paper``."""
    return {"quick": quick, "cpu": full, "gpu": full, "paper": full}


@dataclasses.dataclass(frozen=True)
class A6Config:
    """Claim A6 (:mod:`.claim_a6`): horizon T, GD steps h, SGD batches and seeds, Adam's sweep."""

    T: float = dataclasses.field(default=40.0, metadata=positive("horizon T of the GD and SGD runs", flag="--T"))
    steps: tuple[float, ...] = dataclasses.field(default=(0.04, 0.02, 0.01), metadata=number_list(
        0.0, "GD step sizes h"))
    sgd_batches: tuple[int, ...] = dataclasses.field(default=(8, 32, 128, 512), metadata=int_list(
        1, "SGD batch sizes"))
    sgd_seeds: int = dataclasses.field(default=3, metadata=positive_int("SGD seeds per batch size"))
    overlay_batch: int = dataclasses.field(default=32, metadata=positive_int("SGD batch size of the overlay figure"))
    adam_rhos: tuple[float, ...] = dataclasses.field(default=(0.1, 1.0, 10.0), metadata=number_list(
        0.0, "rate ratios rho of Adam's sweep"))
    adam_params: tuple[str, ...] = dataclasses.field(default=tuple(EXACT_PARAMS), metadata=choice_list(
        tuple(EXACT_PARAMS), "parameterisations of Adam's sweep", empty_ok=False))
    adam_cap: int = dataclasses.field(default=3000, metadata=positive_int("cap on Adam's steps"))
    adam_loss: float = dataclasses.field(default=0.1, metadata=positive("loss at which Adam's runs stop"))

    def __post_init__(self):
        check_config(self)


A6_FULL = A6Config()
A6 = full_and_quick(A6_FULL, dataclasses.replace(
    A6_FULL, T=10.0, steps=(0.04, 0.02), sgd_batches=(8, 64, 512), sgd_seeds=1, adam_rhos=(0.1, 10.0),
    adam_params=("CACO", "FAFO"), adam_cap=800, adam_loss=0.3))


@dataclasses.dataclass(frozen=True)
class SampledConfig:
    """The sampled claims (:mod:`.claims_sampled`): seeds, horizons (clean: SGD steps; authors: the
    factor compressing every notebook horizon) and test sizes; quick keeps >= 2 seeds."""

    seeds: tuple[int, ...] = dataclasses.field(default=(0, 1, 2), metadata=int_list(0, "seeds"))
    clean_steps: int = dataclasses.field(default=3000, metadata=positive_int("SGD steps of the clean generator"))
    authors_compression: int = dataclasses.field(default=80, metadata=positive_int(
        "factor compressing every horizon of the authors' notebooks"))
    clean_test: int = dataclasses.field(default=2000, metadata=positive_int("test samples of the clean generator"))
    authors_test: int = dataclasses.field(default=AUTHORS_TEST_SIZE, metadata=positive_int(
        "test samples of the authors' generator"))

    def __post_init__(self):
        check_config(self)


SAMPLED_FULL = SampledConfig()
SAMPLED = full_and_quick(SAMPLED_FULL, dataclasses.replace(
    SAMPLED_FULL, seeds=(0, 1), clean_steps=1000, authors_compression=500, clean_test=800, authors_test=800))


@dataclasses.dataclass(frozen=True)
class FixedAttentionConfig:
    """Claim FA (:mod:`.fixed_attention`): attention masses alpha, seeds, SGD steps, evaluation size,
    checkpoints (one run per OV form of :data:`FORMS`)."""

    alphas: tuple[float, ...] = dataclasses.field(default=ALPHAS, metadata=number_list(
        0.0, "attention masses on the distinct tokens", at_most=1.0, increasing=True, empty_ok=False))
    seeds: tuple[int, ...] = dataclasses.field(default=(0, 1, 2), metadata=int_list(
        0, "seeds (>= 2 for a verdict)", empty_ok=False))
    steps: int = dataclasses.field(default=1200, metadata=positive_int(
        "SGD steps, lr scaled so lr x steps equals the notebooks' 1e-2 x 125000"))
    eval_size: int = dataclasses.field(default=4096, metadata=positive_int("evaluation samples"))
    checkpoints: int = dataclasses.field(default=13, metadata=positive_int("evaluation points"))

    def __post_init__(self):
        check_config(self)


FIXED_ATTENTION_FULL = FixedAttentionConfig()
FIXED_ATTENTION = full_and_quick(FIXED_ATTENTION_FULL, dataclasses.replace(
    FIXED_ATTENTION_FULL, alphas=(0.2, 0.6, 1.0), seeds=(0, 1), steps=250, eval_size=1024, checkpoints=6))


def _shapes_problem(value) -> str | None:
    ok = isinstance(value, tuple) and bool(value) and all(
        isinstance(shape, tuple) and len(shape) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shape) for shape in value)
    return None if ok else "must be one or more comma-separated shapes KxDxN of positive integers"


#: a non-empty tuple of (K, D, N) shapes, written ``2x1x2,2x2x2`` on a command line
SHAPES = Domain(lambda text: tuple(tuple(int(v) for v in item.split("x")) for item in text.split(",") if item.strip()),
                _shapes_problem, "(K, D, N) shapes of the phase diagrams", words="comma-separated shapes KxDxN")


@dataclasses.dataclass(frozen=True)
class StabilityConfig:
    """Claim SUB (:mod:`.claim_stability`): the grid of its phase diagrams, shapes (K, D, N) x rate ratios rho.

    The full grid: one distinct token per class (D = 1), equal shapes, unequal ones (3, 2, 4) and the most classes
    (5, 2, 2), and rho down to 0.3; ``quick`` keeps the first three shapes and rho from 1 (its numbers are the golden
    file's)."""

    shapes: tuple[tuple[int, int, int], ...] = dataclasses.field(
        default=((2, 1, 2), (2, 2, 2), (3, 3, 3), (3, 2, 4), (5, 2, 2)), metadata=SHAPES.metadata())
    rhos: tuple[float, ...] = dataclasses.field(default=(0.3, 1.0, 3.0, 10.0, 30.0, 100.0), metadata=number_list(
        0.0, "rate ratios rho = eta_QK / eta_OV of the phase diagrams", increasing=True, empty_ok=False))

    def __post_init__(self):
        check_config(self)


STABILITY_FULL = StabilityConfig()
STABILITY = full_and_quick(STABILITY_FULL, dataclasses.replace(
    STABILITY_FULL, shapes=STABILITY_FULL.shapes[:3], rhos=(1.0, 10.0, 30.0, 100.0)))
