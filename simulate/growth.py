"""Growth-law measurement on late windows (claim A3).

Two complementary measurements of how a positive quantity y(t) grows:

* the *local exponent in log t*, p(t) = d log y / d log log t: y ~ (log t)^p has p constant,
  y ~ log log t has p -> 0, y ~ t^a has p -> infinity. Read at several late times it shows both
  the law and how fast it is approached;
* least-squares fits on a late window [t1, t2] of y = a phi(t) + c for the candidate families
  phi in {log t, log^2 t, log log t} and of log y = a log t + c (a power t^a); the family with the
  smallest relative residual wins.

Laws written as text (:class:`Law`, as ``qkdyn derive`` prints them) are compared on a window by the
separation between two laws' shapes and the share of it each leaves unexplained (:func:`unexplained_shares`,
:func:`decisive_shares`): what decides whether a window can tell a law from a rival of another order at
all (``qkdyn.testing.check_growth``).
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

FAMILIES = {
    "log t": lambda L: L,
    "log^2 t": lambda L: L**2,
    "log log t": lambda L: np.log(L),
}


def local_exponent(t: np.ndarray, log_y: np.ndarray) -> np.ndarray:
    """p(t) = d log y / d log log t by centred differences (t > 1 only)."""
    exponent: np.ndarray = np.gradient(log_y, np.log(np.log(t)))
    return exponent


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


# --- growth laws written as text: "log t", "(log t)^2 log log t", "2 log log t + log log log t" ---

_FACTORS = (  # (pattern, which power it adds to: 0 log t, 1 log log t, 2 log log log t; fixed amount or None)
    (re.compile(r"\(log log log t\)\^([0-9.]+)"), 2, None),
    (re.compile(r"\(log log t\)\^([0-9.]+)"), 1, None),
    (re.compile(r"\(log t\)\^([0-9.]+)"), 0, None),
    (re.compile(r"log\^([0-9.]+) t"), 0, None),
    (re.compile(r"log log log t"), 2, 1.0),
    (re.compile(r"log log t"), 1, 1.0),
    (re.compile(r"log t"), 0, 1.0),
)
_COEF = re.compile(r"([0-9]+(?:\.[0-9]*)?)")


@dataclasses.dataclass(frozen=True)
class Law:
    """A growth law phi(t) = sum_k c_k (log t)^p_k (log log t)^q_k (log log log t)^r_k.

    Terms are ``(c, p, q, r)`` tuples. :meth:`parse` reads the text ``qkdyn derive`` prints
    ("log t + log log t", "(log t)^2 * log log t", "2 log log t + log log log t") and the short forms
    "log^2 t", "log t log log t"; ``str`` writes it back as a person would ("log t", not "(log t)^1").
    The leading term (largest (p, q, r)) decides the order of growth.
    """

    terms: tuple[tuple[float, float, float, float], ...]

    @classmethod
    def parse(cls, text: str) -> Law:
        terms: list[tuple[float, float, float, float]] = []
        for piece in text.replace("*", " ").split("+"):
            rest, coef, powers = " ".join(piece.split()), 1.0, [0.0, 0.0, 0.0]
            match = _COEF.match(rest)
            if match and not rest.startswith("log"):
                coef, rest = float(match.group(1)), rest[match.end():].strip()
            while rest:
                for pattern, which, amount in _FACTORS:
                    match = pattern.match(rest)
                    if match:
                        powers[which] += amount if amount is not None else float(match.group(1))
                        rest = rest[match.end():].strip()
                        break
                else:
                    raise ValueError(f"cannot read the growth law {text!r} at {rest!r}: write terms such as "
                                     "'log t', '(log t)^2', 'log log t', '(log t)^2 log log t', joined by '+'")
            if powers == [0.0, 0.0, 0.0]:
                raise ValueError(f"the growth law {text!r} has a constant term {piece.strip()!r}")
            terms.append((coef, powers[0], powers[1], powers[2]))
        return cls(tuple(terms))

    @classmethod
    def log_power(cls, p: float) -> Law:
        """The law (log t)^p (``str``: "log t" for p = 1, "(log t)^2" for p = 2)."""
        return cls(((1.0, float(p), 0.0, 0.0),))

    @property
    def leading(self) -> tuple[float, float, float]:
        """(p, q, r) of the fastest-growing term."""
        return max(term[1:] for term in self.terms)

    def __call__(self, t: np.ndarray) -> np.ndarray:
        """phi(t) (t > e^e, where log log log t is defined)."""
        L = np.log(np.asarray(t, dtype=float))
        LL = np.log(L)
        value: np.ndarray = sum(c * L**p * LL**q * np.log(LL) ** r for c, p, q, r in self.terms)
        return value

    def __str__(self) -> str:
        def power(base: str, exponent: float) -> str:
            if exponent == 0:
                return ""
            if exponent == 1:
                return base
            return f"({base})^{exponent:g}"

        def term(c, p, q, r) -> str:
            factors = " ".join(f for f in (power("log t", p), power("log log t", q), power("log log log t", r)) if f)
            return factors if c == 1 else f"{c:g} {factors}"

        return " + ".join(term(*t) for t in self.terms)


#: the rival laws a claimed law must fit at least as well as (those of a different leading order)
RIVALS = tuple(Law.parse(text) for text in (
    "log log t", "log t", "log t log log t", "(log t)^2", "(log t)^2 log log t", "(log t)^3"))


def _fit(phi: np.ndarray, y: np.ndarray) -> tuple[tuple[float, float], np.ndarray]:
    """Least squares y = a phi + c: ((a, c), the residual vector). With the means removed (that fits c),
    a = <phi, y> / <phi, phi> and the residual is y - a phi, both centred: one projection, no solver."""
    phi_c, y_c = phi - phi.mean(), y - y.mean()
    norm2 = float(phi_c @ phi_c)
    a = float(phi_c @ y_c) / norm2 if norm2 > 0 else 0.0
    return (a, float(y.mean() - a * phi.mean())), y_c - a * phi_c


def fit_law(t: np.ndarray, y: np.ndarray, law: Law) -> dict:
    """Least squares y = a phi(t) + c; residual relative to the spread of y (as :func:`fit_families`)."""
    (a, c), residual = _fit(law(t), y)
    spread = max(np.ptp(y), 1e-300)
    return {"a": float(a), "c": float(c), "rel_rms": float(np.sqrt(np.mean(residual**2)) / spread)}


def unexplained_shares(t: np.ndarray, y: np.ndarray, law: Law, rival: Law) -> tuple[float, float]:
    """(u_law, u_rival): the share of the separation between two laws on the samples that each leaves unexplained.

    Fit y = a phi(t) + c (the law) and y = b psi(t) + d (the rival), with residual vectors e_phi, e_psi. The
    separation of the law from the rival is s_phi = |a| ||P_psi phi||, where P_psi removes the span of {psi, 1}:
    it is the rival's residual were y exactly the fitted law. As y = a phi + c + e_phi, P_psi y = a P_psi phi
    + P_psi e_phi and so, a projection being no longer than its argument,

        | ||e_psi|| - s_phi | <= ||e_phi||,  and likewise  | ||e_phi|| - s_psi | <= ||e_psi||.

    u_law = ||e_phi|| / s_phi and u_rival = ||e_psi|| / s_psi (inf where a separation is 0). When u_law <= 1/k
    the rival's residual is at least (k - 1) times the law's, whatever the data: no correction to the law that
    the law's own residual admits can make the rival fit better. Data exactly on the law have shares (0, 1 / cos
    theta), theta the angle between the centred shapes; for two close shapes, data lying between them have shares
    summing to about 1, and both near 1/2 mean that the window cannot tell the two laws apart.
    """
    phi, psi = law(t), rival(t)
    (a, _), e_phi = _fit(phi, y)
    (b, _), e_psi = _fit(psi, y)
    s_phi = abs(a) * float(np.linalg.norm(_fit(psi, phi)[1]))
    s_psi = abs(b) * float(np.linalg.norm(_fit(phi, psi)[1]))

    def share(residual: np.ndarray, separation: float) -> float:
        return float(np.linalg.norm(residual)) / separation if separation > 0 else math.inf

    return share(e_phi, s_phi), share(e_psi, s_psi)


def decisive_shares(t: np.ndarray, y: np.ndarray, law: Law, rival: Law) -> tuple[float, float]:
    """The shares of :func:`unexplained_shares` that decide between ``law`` and ``rival``, allowing for the data's
    drift: each the largest of its value on all the samples (t ascending), on their later half in log t (u_late)
    and that value carried on half a window at the rate it moved from the earlier half (u_early):
    2 u_late - u_early (infinite where a half's share is).

    The laws are asymptotic. Where a slowly converging quantity is still approaching its law, the data move
    toward the law's shape from one half of the window to the next, and a rival may yet fit the whole window
    decisively better; a share decides only if it is small on the window, at its end and half a window
    further at the rate it moves, so that a verdict the data are heading away from is not drawn.
    """
    later = np.log(t) >= 0.5 * (np.log(t[0]) + np.log(t[-1]))
    whole, late, early = (unexplained_shares(t[rows], y[rows], law, rival) for rows in (slice(None), later, ~later))

    def worst(i: int) -> float:
        ahead = 2 * late[i] - early[i] if math.isfinite(late[i]) and math.isfinite(early[i]) else math.inf
        return max(whole[i], late[i], ahead)

    return worst(0), worst(1)
