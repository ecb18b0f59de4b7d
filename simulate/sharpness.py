"""Attention and time at matched loss in closed form: the first integral instead of the ODE.

The loss depends on (qk, ov) only: L = softplus(log(K-1) - z), z = alpha ov, alpha = m e^qk / (m e^qk + n).
A loss level L therefore fixes z* = log(K-1) - log(expm1(L)), and the state at which the flow
reaches L is the intersection of the first-integral line (rho = eta_QK / eta_OV)

    Phi(qk) - Phi(qk0) = rho (Psi(ov) - Psi(ov0))                                    (L1)

with the level set alpha(qk) ov = z* (L2). No time integration is involved:

* ov increases along the flow (dov/dt = eta_OV M_OV alpha g > 0, g = expit(log(K-1) - z)), so we
  parameterise the line by ov: qk(ov) solves (L1), in the normal form of
  :mod:`qkdyn.theory.sharpness`, Phi = (A/n)(m G(u) + n u), qk = u (collapsed QK, paper; G = e^u) or
  qk = beta sinh u (factorized QK; G = int e^{beta sinh v} dv, tabulated once per setting by
  piecewise Chebyshev quadrature, exact to round-off). Phi is increasing and convex in u, so the
  inversion is a monotone Newton iteration.
* the loss decreases along the flow, so z(ov) = alpha(qk(ov)) ov - z* has exactly one root on the
  trajectory: the *first* (and only) time the loss reaches L. Safeguarded Newton in s = ov - ov0 (qk from
  the factored gain Psi(ov0 + s) - Psi(ov0): ov itself to eps ov0 would leave qk off by rho Psi'/Phi' times that).
* the time is the quadrature t = int_{ov0}^{ov*} dov / (eta_OV M_OV(ov) alpha(qk(ov)) g(z(ov))),
  composite Gauss-Legendre (16 nodes per panel; in log ov for a factorized OV circuit, whose M_OV
  vanishes like ov) on panels that split the path into steps of 6 units of progress (z, attention's
  logit and the integration variable: see :meth:`_Problem.time_to`).

The arithmetic is one numba kernel over all points (:mod:`qkdyn.simulate.closedform`); this module
validates the inputs, derives each setting's constants from the generated functions, and shapes the
results.

rho = 0 (frozen attention) is a legal value: qk stays at qk0. A level at or above the initial loss,
or a circuit that cannot move (a factorized circuit started at 0, eta_OV = 0) is an InputError.

>>> from qkdyn.theory.setting import Setting
>>> r = sharpness(Setting(), "CACO", rho=[0.1, 1.0, 10.0], loss=1e-3)
>>> bool(r.attn[0] < r.attn[1] < r.attn[2])
True
"""
from __future__ import annotations

import dataclasses
import decimal
import functools
import math
import sys
from collections.abc import Mapping
from time import process_time

import numpy as np
from numpy.typing import ArrayLike
from qkdyn.simulate import closedform, integrate, qkline
from qkdyn.simulate.coldstart import FIRST_CLOSED_FORMS, PLAIN_SECONDS_PER_POINT
from qkdyn.simulate.grid import LabelledGrid, arrange
from qkdyn.theory.compiled import Compiled, load
from qkdyn.theory.setting import ALL_PARAMS, Setting
from qkdyn.theory.spec import Spec

from qkdyn.errors import InputError

_INT_FIELDS = ("classes", "distinct", "commons", "m", "n")
#: the positive rho the closed form takes: its line's right-hand side rho (Psi(ov) - Psi(ov0)) is formed in doubles,
#: and from attention 1e-200 the gain alone passes the largest double (a subnormal rho then gave qk = inf)
RHO_RANGE = (1e-300, 1e300)


@dataclasses.dataclass
class Sharpness(LabelledGrid):
    """The state where the loss first reaches each level, and when (arrays of the broadcast shape);
    with ``grid=True`` the named axes too, and :meth:`to_xarray` / :meth:`to_pandas` (:mod:`qkdyn.simulate.grid`)."""

    qk: np.ndarray
    ov: np.ndarray
    attn: np.ndarray
    t: np.ndarray | None  # None when time=False
    axes: dict[str, np.ndarray] | None = None  # axis name -> values (grid=True only)


class _Problem:
    """One setting: its constants for the compiled kernel (:mod:`qkdyn.simulate.closedform`)."""

    def __init__(self, setting: Setting, param: str):
        compiled: Compiled = load(param)
        self.compiled, self.p, self.setting = compiled, setting.numeric(), setting
        x0 = compiled.init(self.p, setting.qk0, setting.ov0)
        self.kappa = float(compiled.kappa(x0, self.p))
        qk0, ov0 = (float(v) for v in compiled.features(x0, self.p))
        self.qk0, self.ov0 = qk0, ov0
        a, beta = (float(v) for v in compiled.line_scale(self.kappa, self.p))
        u0 = math.asinh(qk0 / beta) if beta > 0 else qk0
        self.loss0 = float(compiled.loss(qk0, ov0, self.p))
        self.log_k1 = math.log(setting.classes - 1)
        self.factorized_ov = param in ("CAFO", "FAFO")
        log_eta_ov = math.log(setting.eta_ov) if setting.eta_ov > 0 else -math.inf
        self.constants = (a, beta, float(setting.m), float(setting.n), u0, qk0, ov0, self.kappa,
                          math.log(setting.m / setting.n), self.log_k1, log_eta_ov, float(self.factorized_ov),
                          math.exp(u0) if beta == 0 else 0.0)  # qkline.CONSTANTS

    def alpha(self, qk):
        return self.compiled.attention(qk, self.p)

    def time_to(self, ov_star, rho, per_panel: float = 6.0, polish: bool = False):
        """t = int dov / (eta_OV M_OV alpha g) by Gauss-Legendre (in ov, or log |ov| for a factorized OV
        circuit) on panels along which the progress v changes by about ``per_panel``:
        v = z + 2x + 4 |qk| + 2 |u| (x = log |ov| for a factorized OV circuit, else 0; u the line
        coordinate of a factorized QK circuit; |.| the distance travelled since the start: qk first
        falls when ov0 < 0). Every term increases along the path, so each panel of 6 units resolves
        changes of 6 in the loss exponent, of 3 in either circuit and of 3/2 in qk: 1/alpha =
        1 + (n/m) e^{-qk} has a pole where e^{qk(ov)} -> 0; across a panel on which e^qk grows by
        e^w it lies at Bernstein-ellipse parameter coth(w/4) (e^qk about linear in ov), and w = 3/2
        keeps 16 Gauss nodes at coth(3/8)^-32 ~ 5e-15, as w = 1/2 kept 8 nodes (8^-16 ~ 3e-15; w = 3 gave
        errors of 1e-8 with 8 nodes: issue 21); the loss exponent's e^z over 6 units with 16 nodes is off by
        3^32 / 32! ~ 1e-20 (over 2 units with 8 nodes, 1 / 16! ~ 5e-14). Per unit of progress that is 16/6
        nodes instead of 8/2, and each panel's split at a nearer level costs a third as often: the A4/A5
        grid's quadrature 1.2-1.35x faster, every time unchanged to 1e-13 on 325 random settings with attention from
        1e-40 and rho to 1e11 (against 16 nodes per 1/2 unit, polished). Before that change, against the quadrature the
        panels of 1/5 unit of z + x + 4|qk| + |u| give (polished), on 2 x 2600 points
        of random settings of every form (starts below 0, attention down to 1e-30, rho from 1e-3 to 1e4,
        levels down to 1e-8 of the way): 3.2e-13 at worst, as with the 3/4 unit of that v used before
        (3.6e-13); 3 units of this v gave 3.2e-12 (and z + x + 4|qk| + |u| at 3 units 1.1e-11 on the
        A4/A5 grid: FACO, limited by u, and CAFO/FAFO by x, hence their weight 2). A fast QK from a tiny
        attention (paper form, rho = 3e11, attn0 = 1e-36, level 2e-12, once 3.9e-8 off mpmath at 3 units)
        is 1.6e-15 off at every panel size from 1/20 to 3 units (v for a collapsed circuit is z + 4|qk| in either).

        The panel edges are placed by monotone interpolation of v sampled at 38 points of the path
        (fractions dense near both ends, geometric steps over its positive part, and ov = 0 where crossed;
        73 before the panels widened to 6 units, the same times to 1e-13 on those 325 settings); a path gets
        max(4, needed) panels; points of one rho, contiguous, share the path to the farthest
        of them, on whose panels (the one holding each nearer point split there) the nearer times are
        partial sums (the same to the quadrature's accuracy as their own paths'). Each panel's sum is formed in
        doubles, dt/dx = (1 + e^{z - log(K-1)}) (1 + e^{-(qk + log(m/n))}) / (eta_OV M_OV), where it lies
        in (1e-290, 1e290) (no value overflowed or came near it) and the panel's integral is finite, else in logs
        (sum w e^{log f - M}), and the panels are summed in logs (t = e^M sum e^{log P_j - M}), so a time near the
        largest double is finite even where the integrand alone would overflow; a time beyond it is inf
        (:func:`sharpness` reports it). Unless ``polish``, the line is inverted at the nodes from its inverse table
        (no Newton; a collapsed QK line where the table reaches, Phi up to 1e300)."""
        ov_star = np.ascontiguousarray(ov_star, dtype=float).ravel()
        rho = np.ascontiguousarray(np.broadcast_to(np.asarray(rho, dtype=float), ov_star.shape))
        return _run([self], np.zeros(ov_star.size, dtype=np.int64), None, rho, ov_star, time=True, state=False,
                    per_panel=per_panel, polish=polish)[2]


@functools.cache
def _log_split(classes: int) -> tuple[float, float]:
    """log K as hi + lo: hi the nearest double, lo its rounding error (from 40 decimal digits, stdlib)."""
    hi = math.log(classes)
    with decimal.localcontext(decimal.Context(prec=40)):
        return hi, float(decimal.Decimal(classes).ln() - decimal.Decimal(hi))


def z_at_loss(classes: int, loss: np.ndarray) -> np.ndarray:
    """z* = alpha ov with L(z*) = loss, where L(z) = log(1 + (K-1) e^-z): z* = log(K-1) - log(expm1(L)).

    Near the start (L -> log K, z* -> 0) those two logs cancel: the double nearest log K is off by up to
    eps/2 log K, which against the gap log K - L (2e-9 for a level just below log 8) is a relative error of
    1e-7 in z*. There z* = -log1p(K expm1(d) / (K-1)) with d = L - log K formed from log K = hi + lo
    (L - hi is exact by Sterbenz's lemma where L is within a factor 2 of hi); the first form is kept where
    that log1p's argument falls below -1/2 (small L, where the second form would cancel instead)."""
    hi, lo = _log_split(classes)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        near = classes * np.expm1((loss - hi) - lo) / (classes - 1)
        return np.where(near > -0.5, -np.log1p(near), math.log(classes - 1) - np.log(np.expm1(loss)))


def _run(problems: list, which, zstar, rho, ov=None, *, time: bool, state: bool = True, per_panel: float = 6.0,
         polish: bool = False):
    """(qk, ov, t) of every point from the closed form's kernel (the points of one setting contiguous in
    ``which``); ``state=False``: only the time to the given ``ov``. Compiled, or, while numba's cache lacks it and
    compiling does not yet pay, its code as plain Python (:mod:`qkdyn.simulate.coldstart`: the same numbers to
    round-off).
    Every array is passed C-contiguous and writable, so the kernel has one signature whatever the caller's
    shapes: one compilation serves them all (the warm-up's too), and one cache entry per function."""
    compiled = problems[0].compiled
    size = which.size
    qk, t = np.empty(size), np.empty(size)
    ov = np.empty(size) if ov is None else _writable(ov, float)
    arguments = (np.array([p.constants for p in problems]), np.array([p.p for p in problems], dtype=float),
                 _writable(which, np.int64), np.empty(0) if zstar is None else _writable(zstar, float),
                 _writable(rho, float), ov, state, time, per_panel, polish, *_table(), qk, t)
    if not FIRST_CLOSED_FORMS.choose("closed form", lambda: integrate.ready(closedform.solve_points),
                                     size * _plain_rate[time]):
        try:
            _run_plain(compiled.name, arguments, size, time)
            return qk, ov, t
        except (ArithmeticError, ValueError):  # an IEEE inf or nan that compiled code carries on with
            FIRST_CLOSED_FORMS.ready.add("closed form")
    first = compiled.name not in _checked  # the process's first call of this form: compiled now, unless cached
    _checked.add(compiled.name)
    with integrate.compiling(f"the closed form and {compiled.name}'s kernels", first and not (
            compiled.psi_gain_kernel.cached() and compiled.m_ov_kernel.cached() and integrate.ready(closedform.solve_points))):
        addresses = np.array([compiled.psi_gain_kernel.address, compiled.m_ov_kernel.address, *closedform.SPECIAL])
        closedform.solve_points(*arguments[:2], addresses, *arguments[2:])
    return qk, ov, t


def _writable(values: np.ndarray, dtype) -> np.ndarray:
    """``values`` (an array) as a C-contiguous writable array of ``dtype`` (a copy where it is not one already;
    checked here, not by ``np.require``, which costs 8 us a call)."""
    if values.dtype == dtype and values.flags.c_contiguous and values.flags.writeable:
        return values
    return np.array(values, dtype=dtype)


def _run_plain(name: str, arguments: tuple, size: int, time: bool) -> None:
    """The closed form's kernel as plain Python on ``arguments`` (:func:`_run`'s, less the addresses), its CPU
    time rented (:data:`~qkdyn.simulate.coldstart.FIRST_CLOSED_FORMS`) and its rate per point kept; the
    process's first such call says so on stderr."""
    if not _said_plain:
        _said_plain.append(True)
        sys.stderr.write("qkdyn: numba's cache lacks the compiled closed form: sharpness runs its code as plain "
                         f"Python (the same numbers to round-off) until that has cost about one compilation "
                         f"({FIRST_CLOSED_FORMS.rent_seconds:.0f} CPU-s), then compiles; `qkdyn warm` compiles it "
                         "ahead\n")
        sys.stderr.flush()
    solve_points, addresses = closedform.plain_solve_points(name)
    start = process_time()
    try:
        with np.errstate(all="ignore"):
            solve_points(*arguments[:2], addresses, *arguments[2:])
    finally:
        seconds = process_time() - start
        FIRST_CLOSED_FORMS.rent(seconds)
    _plain_rate[time] = max(_plain_rate[time], seconds / max(size, 1))


_checked: set[str] = set()  # the forms whose compiled code this process has looked for (_run)
_said_plain: list[bool] = []  # whether this process has said that the closed form runs as plain Python
#: CPU seconds per point of a plain run, with the time and without (the largest this process has measured)
_plain_rate = dict(PLAIN_SECONDS_PER_POINT)


@functools.lru_cache(maxsize=1)
def _table():
    """The buffers of the line's table (qkline.new_table: one set per process, reused, 10 MB)."""
    return qkline.new_table()


def initial_loss(setting: Setting, param: str) -> float:
    """L0, the loss at the docs/setting.md initial state: the levels ``sharpness`` accepts lie in (0, L0)."""
    return _Problem(setting, param).loss0


def reachable_losses(setting: Setting, param: str) -> tuple[float, float]:
    """(L_inf, L0): ``sharpness`` accepts exactly the levels in this open interval (see _reachable)."""
    return _reachable(_Problem(setting, param))


def _reachable(problem: _Problem) -> tuple[float, float]:
    """(L_inf, L0): the levels the flow crosses are exactly those in the open interval.

    L_inf = 0, except for a factorized OV circuit started below 0: its factors shrink towards the saddle
    at ov = 0 (dov/dt = eta_OV M_OV alpha g with M_OV ~ |ov|, so ov rises to 0 only as t -> infinity),
    and L = softplus(log(K-1) - alpha ov) > softplus(log(K-1)) = log K while ov < 0."""
    floor = math.log(problem.setting.classes) if problem.factorized_ov and problem.ov0 < 0 else 0.0
    return floor, problem.loss0


def _validate(problem: _Problem, param: str, rho, loss) -> None:
    s = problem.setting
    if not (s.eta_ov > 0):
        raise InputError("must be positive: a frozen OV circuit never changes the loss", "eta_ov")
    if param in ("FACO", "FAFO") and s.qk0 == 0:
        raise InputError("must be non-zero for a factorized QK circuit (0 is a saddle of the flow: its factors "
                         "never move)", "qk0")
    if param in ("CAFO", "FAFO") and s.ov0 == 0:
        raise InputError("must be non-zero for a factorized OV circuit (0 is a saddle of the flow: the loss "
                         "stays at its initial value)", "ov0")
    floor, loss0 = _reachable(problem)
    bad = ~(np.isfinite(loss) & (loss > floor) & (loss < loss0))
    if np.any(bad):
        why = (f" (a factorized OV circuit started at ov0 = {s.ov0!r} < 0 shrinks towards its saddle at 0: "
               f"the loss tends to log K = {floor:.6g} and never goes below it)" if floor > 0 else
               " (the initial loss)")
        raise InputError(f"levels must lie in ({floor:.6g}, {loss0:.6g}){why} to be reachable; "
                         f"got {float(np.asarray(loss)[bad].ravel()[0])!r}", "loss")


def _settings(setting, shape_of_rest) -> tuple[tuple, list[Setting], np.ndarray]:
    """(broadcast shape, unique Settings, index of each point's setting)."""
    if isinstance(setting, Setting):
        return shape_of_rest, [setting], np.zeros(int(np.prod(shape_of_rest)), dtype=int)
    if not isinstance(setting, Mapping):
        raise InputError(f"must be a Setting or a mapping of Setting fields to values, got {type(setting).__name__}",
                         "setting")
    unknown = set(setting) - {f.name for f in dataclasses.fields(Setting)}
    if unknown:
        raise InputError(f"unknown field {sorted(unknown)[0]!r}", "setting")
    # attn0 (default None) is a field only when given; it then sets qk0 unless qk0 is given too (an error)
    optional = {"attn0"} - set(setting) | ({"qk0"} if "attn0" in setting and "qk0" not in setting else set())
    names = [f.name for f in dataclasses.fields(Setting) if f.name not in optional]
    defaults = Setting()
    arrays = {name: np.asarray(setting.get(name, getattr(defaults, name)), dtype=float) for name in names}
    # the unique settings of the fields' own broadcast (e.g. 316 rows), not of the full one with rho and
    # loss (1e5 points: sorting that table cost more than the solves); each point's index is then broadcast
    fields_shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    shape = np.broadcast_shapes(shape_of_rest, fields_shape)
    table = np.column_stack([np.broadcast_to(arrays[name], fields_shape).ravel() for name in names])
    unique, inverse = np.unique(table, axis=0, return_inverse=True)
    inverse = np.broadcast_to(np.asarray(inverse).reshape(fields_shape), shape)
    settings = []
    for row in unique:
        values = dict(zip(names, row, strict=True))
        for name in _INT_FIELDS:
            if values[name] != round(values[name]):
                raise InputError(f"must be a positive integer, got {values[name]!r}", name)
            values[name] = int(values[name])
        settings.append(Setting(**values))
    return shape, settings, np.asarray(inverse).ravel()


def sharpness(setting: Setting | Mapping, param: str | Spec, rho: ArrayLike, loss: ArrayLike, *, time: bool = True,
              grid: bool = False) -> Sharpness:
    """qk, ov, attn and t at the first time the loss reaches ``loss``, for rho = eta_QK / eta_OV.

    See the module docstring for the mathematics; exact to round-off for (qk, ov, attn), t to about 1e-10
    relative (a test checks 1e-8 against an 8x finer quadrature). The arithmetic is one compiled kernel
    (:mod:`qkdyn.simulate.closedform`): where numba's cache lacks it, a process runs that kernel's code as plain
    Python until compiling pays (the same numbers to round-off; a call too large for that compiles at once), and
    says which on stderr before it starts (``make install`` / ``qkdyn warm`` compile it ahead;
    :mod:`qkdyn.simulate.coldstart`).

    Parameters
    ----------
    setting : Setting or mapping
        A :class:`~qkdyn.theory.setting.Setting`, or a mapping of Setting field names to scalars or arrays
        (missing fields take the defaults). Its ``eta_qk`` is not used (eta_QK = rho eta_OV); ``eta_ov`` sets
        the unit of time.
    param : str or Spec
        A named form (CACO, FACO, CAFO, FAFO, paper), or a :class:`~qkdyn.theory.spec.Spec`: the closed form
        where the spec is an exact form's model, else the crossings of the spec's ODE (one ``setting``, a
        Setting; :func:`qkdyn.simulate.specsolve.events_sharpness`).
    rho : array_like
        The rate ratios eta_QK / eta_OV, finite and non-negative (0: frozen attention).
    loss : array_like
        The loss levels, each within the reachable interval (:func:`reachable_losses`).
    time : bool
        Also compute t, the time of the crossing (a quadrature along the path); False leaves ``t`` None.
    grid : bool
        False: ``rho``, ``loss`` and the array-valued fields broadcast against each other (numpy rules; a
        clear error says how to shape them when they do not). True: their outer product, one named axis per
        input (rho, loss, then the fields; :mod:`qkdyn.simulate.grid`).

    Returns
    -------
    Sharpness
        ``qk``, ``ov``, ``attn`` and ``t`` (None without ``time``) at the first crossing of each level, arrays
        of the broadcast shape; with ``grid=True`` also ``axes`` and :meth:`~Sharpness.to_xarray` /
        :meth:`~Sharpness.to_pandas`.

    Raises
    ------
    InputError
        For an unknown form, a negative or non-finite rho, a level outside the reachable interval, a circuit
        that cannot move (eta_OV = 0, a factorized circuit started at its saddle 0), shapes that do not
        broadcast, or a crossing reached only after a time beyond the largest double (with ``time``).

    Examples
    --------
    >>> r = sharpness({"m": [4, 8, 16]}, "FAFO", rho=1.0, loss=1e-2)
    >>> r.attn.shape
    (3,)
    >>> sharpness({"m": [4, 8, 16]}, "FAFO", rho=[0.1, 1.0], loss=[0.1, 1e-2], grid=True).attn.shape
    (2, 2, 3)
    """
    if isinstance(param, Spec):  # a spec: the closed form where it is an exact form's model, else ODE events
        from qkdyn.theory.specclosed import exact_form

        form = exact_form(param)
        if form is None:
            from qkdyn.simulate.specsolve import events_sharpness

            return events_sharpness(setting, param, rho, loss, time=time, grid=grid)
        param = form
    setting, rho, loss, axes = arrange(setting, rho, loss, grid)
    if param not in ALL_PARAMS:
        raise InputError(f"must be one of {', '.join(ALL_PARAMS)}, got {param!r}", "param")
    rho_a, loss_a = np.asarray(rho, dtype=float), np.asarray(loss, dtype=float)
    if np.any(~np.isfinite(rho_a) | (rho_a < 0)):
        raise InputError(f"must be finite and non-negative, got {float(rho_a[~(np.isfinite(rho_a) & (rho_a >= 0))].ravel()[0])!r}",
                         "rho")
    beyond = (rho_a != 0) & ((rho_a < RHO_RANGE[0]) | (rho_a > RHO_RANGE[1]))
    if np.any(beyond):
        raise InputError(f"must be 0 or from {RHO_RANGE[0]:g} to {RHO_RANGE[1]:g} (beyond, the line's rho (Psi(ov) - "
                         f"Psi(ov0)) can leave the doubles), got {float(rho_a[beyond].ravel()[0])!r}", "rho")
    shape, settings, which = _settings(setting, np.broadcast_shapes(rho_a.shape, loss_a.shape))
    rho_f = np.broadcast_to(rho_a, shape).ravel()
    loss_f = np.broadcast_to(loss_a, shape).ravel()
    # the kernel takes each setting's points contiguous: already so for a grid whose fields vary slowest
    ordered = bool(np.all(which[1:] >= which[:-1]))
    # z* of each distinct level, once per class count K (not once per point: 1e6 points share one level)
    levels, level_of = np.unique(loss_a, return_inverse=True)
    level_f = np.broadcast_to(level_of.reshape(loss_a.shape), shape).ravel()
    z_levels = {classes: z_at_loss(classes, levels) for classes in {one.classes for one in settings}}
    problems, masks, zstar = [], [], np.empty(rho_f.size)
    for index, one in enumerate(settings):
        problem = _Problem(one, param)
        mask = slice(*np.searchsorted(which, [index, index + 1])) if ordered else which == index
        _validate(problem, param, rho_f[mask], loss_f[mask])
        zstar[mask] = z_levels[one.classes][level_f[mask]]
        problems.append(problem)
        masks.append(mask)
    order = None if ordered else np.argsort(which, kind="stable")
    qk, ov, t = _run(problems, which if ordered else which[order], zstar if ordered else zstar[order],
                     rho_f if ordered else np.ascontiguousarray(rho_f[order]), time=time)
    if order is not None:
        qk[order], ov[order], t[order] = qk.copy(), ov.copy(), t.copy()
    if time and not np.all(np.isfinite(t)):
        bad = int(np.flatnonzero(~np.isfinite(t))[0])
        raise InputError(f"{float(loss_f[bad])!r} at rho = {float(rho_f[bad])!r} is reached only "
                         f"after a time beyond the largest double (t > {np.finfo(float).max:.3g}); "
                         "without the time (time=False, --no-time) the state there is finite", "loss")
    attn = np.empty(rho_f.size)
    for problem, mask in zip(problems, masks, strict=True):
        attn[mask] = problem.alpha(qk[mask])
    out = {"qk": qk, "ov": ov, "attn": attn, "t": t}
    result = {key: value.reshape(shape) for key, value in out.items()}
    return Sharpness(result["qk"], result["ov"], result["attn"], result["t"] if time else None, axes)
