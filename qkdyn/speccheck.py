"""``qkdyn.check(spec, setting)``: the reduced flow of a spec against autograd on its full matrices.

Two comparisons, both on the full torch model of :mod:`qkdyn.empirical.synthetic.specmodel` with the
exact population loss (every count vector of the setting with its probability):

1. *Gradient.* At ``points`` random states x of the symmetric subspace (reduced values embedded in
   every entry of their orbits, all else 0), -eta_c times the autograd gradient must, on every entry
   of every orbit, equal the derived dx_i/dt (relative error: |full - reduced| / max_i |dx_i/dt|), and
   vanish on every other entry (the flow stays on the subspace). Passes at ``rtol`` (1e-9).
2. *Flow.* The full parameter vector integrated by gradient flow to ``t_flow`` from the spec's init
   (DOP853, rtol 1e-10), its orbit means compared with the reduced solution (relative to the largest
   |x_i|); it passes at ``flow_rtol`` (1e-7).

The result names each variable where they disagree. The authors' two-variable form ``paper`` is checked
the same way against the full CACO matrices at D = b, s = sqrt(N / (b (N + K b))) (:func:`check_paper`). Use small settings (K, D, N, m, n of 2-3): the
population has K C(m+D-1, m) C(n+N-1, n) count vectors.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from qkdyn.theory.setting import Setting
from qkdyn.theory.spec import NAMED, Spec, paper_model


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """Errors of the reduced flow against the full model (module docstring) and where they are."""

    spec: str
    rhs_error: float  # max over points and variables, relative to max |dx/dt|
    off_subspace: float  # largest gradient off the subspace, relative to max |dx/dt|
    flow_error: float  # reduced vs full orbit means at t_flow, relative to max |x|
    flow_moved: float  # how far the reduced state moved by t_flow, relative to max |x| (the flow test's reach)
    rtol: float
    flow_rtol: float
    disagreements: tuple[str, ...]  # one line per variable (or "off the subspace") that fails

    @property
    def passed(self) -> bool:
        return not self.disagreements

    def __str__(self) -> str:
        head = (f"{self.spec}: rhs error {self.rhs_error:.2e}, off-subspace {self.off_subspace:.2e} "
                f"(tolerance {self.rtol:g}); flow error {self.flow_error:.2e} (tolerance {self.flow_rtol:g}) "
                f"over a move of {self.flow_moved:.2e}")
        return head + ("" if self.passed else ": DISAGREE " + "; ".join(self.disagreements))


def _population(model, setting):
    from qkdyn.empirical.synthetic import data

    return data.count_support(setting, model.spec.token_weights)


def _gradients(model, batch, eta):
    """-eta_c dL/dW for every factor, as numpy arrays keyed (circuit, index)."""
    model.zero_grad()
    model.loss(*batch).backward()
    return {(c, j): -eta[c] * W.grad.detach().numpy().copy() for c in ("QK", "OV")
            for j, W in enumerate(model.factors(c))}


def check(spec: Spec | str, setting: Setting | None = None, *, points: int = 3, t_flow: float = 1.0,
          rtol: float = 1e-9, flow_rtol: float = 1e-7, seed: int = 0, derivation=None) -> CheckResult:
    """Compare the derived reduced flow of ``spec`` with autograd on its full matrices (module docstring).

    Parameters
    ----------
    spec : Spec or str
        The spec, or a name of :data:`qkdyn.theory.spec.NAMED` (``"CACO"`` ...); ``"paper"`` checks the
        authors' reduced form against the full CACO matrices it is (:func:`check_paper`).
    setting : Setting or None
        The setting; None: a small one (K = 3, N = m = n = 2: the population has
        $K\\binom{m+D-1}{m}\\binom{n+N-1}{n}$ count vectors).
    points : int
        Random states of the symmetric subspace at which the gradients are compared.
    t_flow : float
        How long the full and the reduced flows are integrated before their states are compared.
    rtol : float
        Tolerance of the gradient comparison, relative to $\\max_i |\\dot x_i|$.
    flow_rtol : float
        Tolerance of the flow comparison, relative to $\\max_i |x_i|$.
    seed : int
        Seeds the random states.
    derivation : Derived or None
        Replaces the derived flow (to test the check itself).

    Returns
    -------
    CheckResult
        The errors and where they are; ``result.passed`` is True when both comparisons pass.

    Runs torch on one thread (tiny matrices: more threads only contend).
    """
    from qkdyn.empirical.synthetic.stability import one_thread

    if spec == "paper":
        return check_paper(setting, points=points, t_flow=t_flow, rtol=rtol, flow_rtol=flow_rtol, seed=seed)

    with one_thread():
        return _check(NAMED[spec] if isinstance(spec, str) else spec, setting, points, t_flow, rtol, flow_rtol, seed,
                      derivation)


def _check(spec, setting, points, t_flow, rtol, flow_rtol, seed, derivation) -> CheckResult:
    from qkdyn.empirical.synthetic.layout import Layout
    from qkdyn.empirical.synthetic.specmodel import SpecHead, embed, orbit_entries
    from qkdyn.theory.specflow import derive_spec
    from qkdyn.theory.specnumeric import numeric

    if setting is None:
        setting = Setting(classes=3, distinct=len(spec.token_weights or (0, 0)), commons=2,
                          m=spec.context_distinct or 2, n=2, scale=0.8, eta_qk=1.7, eta_ov=0.6, qk0=0.3, ov0=0.4)
    spec.check_setting(setting)
    d = derivation if derivation is not None else derive_spec(spec)
    p = np.array(setting.numeric())
    eta = {"QK": setting.eta_qk, "OV": setting.eta_ov}
    rhs = numeric(spec).rhs if derivation is None else _rhs_of(d)
    model = SpecHead(d, Layout.of(setting), setting.scale)
    batch = _population(model, setting)
    where = orbit_entries(model)
    rng = np.random.default_rng(seed)
    bad: dict[str, float] = {}
    rhs_error = off = 0.0
    for _ in range(points):
        x = rng.uniform(-1.0, 1.0, len(where))
        reduced = rhs(x, p)
        grads = _gradients(embed(model, x), batch, eta)
        scale = max(float(np.abs(reduced).max()), 1e-300)
        covered = {key: np.zeros(g.shape, bool) for key, g in grads.items()}
        for value, (name, (circuit, j, rows, cols)) in zip(reduced, where.items(), strict=True):
            err = float(np.abs(grads[(circuit, j)][rows, cols] - value).max()) / scale
            covered[(circuit, j)][rows, cols] = True
            rhs_error = max(rhs_error, err)
            if err > rtol:
                bad[name] = max(bad.get(name, 0.0), err)
        off = max(off, max(float(np.abs(g[~covered[key]]).max(initial=0.0)) / scale for key, g in grads.items()))
    flow_error, flow_bad, moved = _flow(model, batch, eta, d, rhs, setting, p, where, t_flow)
    lines = [f"{name}: dx/dt off by {err:.2e} (relative)" for name, err in bad.items()]
    if off > rtol:
        lines.append(f"off the subspace: gradient {off:.2e} where the spec has no orbit")
    if flow_error > flow_rtol:
        lines.append(f"flow to t = {t_flow:g}: {flow_bad} off by {flow_error:.2e} (relative)")
    return CheckResult(spec.name, rhs_error, off, flow_error, moved, rtol, flow_rtol, tuple(lines))


def check_paper(setting: Setting | None = None, *, points: int = 3, t_flow: float = 1.0, rtol: float = 1e-9,
                flow_rtol: float = 1e-7, seed: int = 0, model_setting: Setting | None = None) -> CheckResult:
    """The authors' two-variable form against the full CACO matrices of :func:`paper_model` (torch
    autograd): at random symmetric states x, d qk/dt and d ov/dt of the full model (qk = s (W_QK[q, d] -
    W_QK[q, c]), ov = W_OV[label_k, d of k] - W_OV[label_j, d of k]) must equal the paper form's
    d mu_QK/dt, d mu_OV/dt at (mu_QK, mu_OV) = (qk, ov), relative to their largest; and the full gradient
    flow's (qk, ov) at t_flow that of the paper form. ``model_setting`` replaces the mapped setting (the
    negative control: at another scale the QK rate is off by D s^2 (D K + N) / N)."""
    from qkdyn.empirical.synthetic.stability import one_thread

    setting = setting or Setting(classes=3, commons=2, m=2, n=2, eta_qk=1.7, eta_ov=0.6, qk0=0.3, ov0=0.4, b=2.0)
    with one_thread():
        return _check_paper(setting, model_setting or paper_model(setting), points, t_flow, rtol, flow_rtol, seed)


def _check_paper(setting, full_setting, points, t_flow, rtol, flow_rtol, seed) -> CheckResult:
    from scipy.integrate import solve_ivp

    from qkdyn.empirical.synthetic.layout import Layout
    from qkdyn.empirical.synthetic.specmodel import SpecHead, embed, orbit_entries
    from qkdyn.theory.compiled import load
    from qkdyn.theory.specflow import named

    d, paper = named("CACO"), load("paper")
    p, s = np.array(setting.numeric()), full_setting.scale
    eta = {"QK": full_setting.eta_qk, "OV": full_setting.eta_ov}
    model = SpecHead(d, Layout.of(full_setting), s)
    batch = _population(model, full_setting)
    where = orbit_entries(model)

    def features(values):  # (qk, ov) of a symmetric state given as orbit values
        x = dict(zip(where, values, strict=True))
        return np.array([s * (x["qk_distinct"] - x["qk_common"]), x["ov_own"] - x["ov_cross"]])

    rng = np.random.default_rng(seed)
    rhs_error = 0.0
    for _ in range(points):
        x = rng.uniform(-1.0, 1.0, len(where))
        grads = _gradients(embed(model, x), batch, eta)
        rates = [float(grads[(c, j)][rows, cols].mean()) for c, j, rows, cols in where.values()]
        full = features(rates)  # (qk, ov) are linear in x: their rates are the same combinations of dx/dt
        reduced = paper.rhs(features(x), p)
        rhs_error = max(rhs_error, float(np.abs(full - reduced).max()) / max(float(np.abs(reduced).max()), 1e-300))
    x0 = np.array([full_setting.qk0 / s, 0.0, full_setting.ov0, 0.0, 0.0])  # the CACO init: qk = qk0, ov = ov0
    full_end = features(_full_flow(model, batch, eta, where, x0, t_flow))
    mu0 = np.array([setting.qk0, setting.ov0])
    paper_end = solve_ivp(lambda t, mu: paper.rhs(mu, p), (0, t_flow), mu0, method="DOP853", rtol=1e-10,
                          atol=1e-12).y[:, -1]
    scale = max(float(np.abs(paper_end).max()), 1e-300)
    flow_error = float(np.abs(full_end - paper_end).max()) / scale
    lines = []
    if rhs_error > rtol:
        lines.append(f"d(qk, ov)/dt off by {rhs_error:.2e} (relative) against the full model")
    if flow_error > flow_rtol:
        lines.append(f"flow to t = {t_flow:g}: (qk, ov) off by {flow_error:.2e} (relative)")
    return CheckResult("paper", rhs_error, 0.0, flow_error, float(np.abs(paper_end - mu0).max()) / scale, rtol,
                       flow_rtol, tuple(lines))


def _rhs_of(d):
    """Numeric rhs of a hand-built derivation (the negative controls)."""
    from qkdyn.theory.model import PARAMS
    from qkdyn.theory.specnumeric import lambdify

    return lambdify([list(d.symbols), list(PARAMS)], list(d.rhs))


def _full_flow(model, batch, eta, where, x0, t_flow) -> np.ndarray:
    """The orbit means, at t_flow, of the full parameter vector's gradient flow from the embedded x0."""
    import torch
    from scipy.integrate import solve_ivp

    from qkdyn.empirical.synthetic.specmodel import embed

    embed(model, x0)
    params = list(model.parameters())
    shapes = [tuple(w.shape) for w in params]
    sizes = [math.prod(s) for s in shapes]
    rates = np.concatenate([np.full(n, eta["QK" if i < len(model.factors("QK")) else "OV"]) for i, n in enumerate(sizes)])

    def full_field(t, theta):
        with torch.no_grad():
            for w, chunk in zip(params, np.split(theta, np.cumsum(sizes)[:-1]), strict=True):
                w.copy_(torch.as_tensor(chunk.reshape(w.shape)))
        model.zero_grad()
        model.loss(*batch).backward()
        return -rates * np.concatenate([w.grad.detach().numpy().ravel() for w in params])

    theta0 = np.concatenate([w.detach().numpy().ravel() for w in params])
    full = solve_ivp(full_field, (0, t_flow), theta0, method="DOP853", rtol=1e-10, atol=1e-12).y[:, -1]
    pieces = dict(zip([(c, j) for c in ("QK", "OV") for j in range(len(model.factors(c)))],
                      [c.reshape(s) for c, s in zip(np.split(full, np.cumsum(sizes)[:-1]), shapes, strict=True)], strict=True))
    return np.array([pieces[(c, j)][rows, cols].mean() for c, j, rows, cols in where.values()])


def _flow(model, batch, eta, d, rhs, setting, p, where, t_flow):
    """(error, worst variable, relative move) of the reduced solution against the full gradient flow at t_flow."""
    from scipy.integrate import solve_ivp

    from qkdyn.theory.model import PARAMS, ov0, qk0

    values = {**dict(zip(PARAMS, p.tolist(), strict=True)), qk0: setting.qk0, ov0: setting.ov0}
    x0 = np.array([float(d.init[v].subs(values)) for v in d.symbols])
    means = _full_flow(model, batch, eta, where, x0, t_flow)
    reduced = solve_ivp(lambda t, x: rhs(x, p), (0, t_flow), x0, method="DOP853", rtol=1e-10, atol=1e-12).y[:, -1]
    scale = max(float(np.abs(reduced).max()), 1e-300)
    errors = np.abs(means - reduced) / scale
    worst = int(np.argmax(errors))
    return float(errors[worst]), list(where)[worst], float(np.abs(reduced - x0).max()) / scale
