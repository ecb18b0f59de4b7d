"""Growth-law measurement on late windows (claim A3).

Two complementary measurements of how a positive quantity y(t) grows:

* the *local exponent in log t*, p(t) = d log y / d log log t: y ~ (log t)^p has p constant,
  y ~ log log t has p -> 0, y ~ t^a has p -> infinity. Read at several late times it shows both
  the law and how fast it is approached;
* least-squares fits on a late window [t1, t2] of y = a phi(t) + c for the candidate families
  phi in {log t, log^2 t, log log t} and of log y = a log t + c (a power t^a); the family with the
  smallest relative residual wins.
"""
from __future__ import annotations

import numpy as np

FAMILIES = {
    "log t": lambda L: L,
    "log^2 t": lambda L: L**2,
    "log log t": lambda L: np.log(L),
}


def local_exponent(t: np.ndarray, log_y: np.ndarray) -> np.ndarray:
    """p(t) = d log y / d log log t by centred differences (t > 1 only)."""
    return np.gradient(log_y, np.log(np.log(t)))


def fit_families(t: np.ndarray, y: np.ndarray) -> dict[str, dict]:
    """Fit every family on the samples (t, y); residuals relative to the spread of y."""
    L = np.log(t)
    spread = max(np.ptp(y), 1e-300)
    fits = {}
    for name, phi in FAMILIES.items():
        basis = np.column_stack([phi(L), np.ones_like(L)])
        coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
        residual = y - basis @ coef
        fits[name] = {"a": float(coef[0]), "c": float(coef[1]),
                      "rel_rms": float(np.sqrt(np.mean(residual**2)) / spread)}
    basis = np.column_stack([L, np.ones_like(L)])
    coef, *_ = np.linalg.lstsq(basis, np.log(np.maximum(y, 1e-300)), rcond=None)
    residual = y - np.exp(basis @ coef)
    fits["t^a"] = {"a": float(coef[0]), "c": float(coef[1]),
                   "rel_rms": float(np.sqrt(np.mean(residual**2)) / spread)}
    return fits


def best_family(fits: dict[str, dict]) -> str:
    return min(fits, key=lambda name: fits[name]["rel_rms"])
