"""Steps 1-3 of a spec's derivation (:mod:`qkdyn.theory.specflow`, whose module docstring states them): the
factors of each circuit, their orbits as the reduced variables, the collapsed entries on each (row, col) orbit
(for a coupled QK circuit, its scores after the coupled flow); and the canonical init as balanced factors.

Symbols as in docs/setting.md; nothing circuit-specific is typed in: the orbits come from
:func:`qkdyn.theory.orbits.enumerate_orbits` and the products from :func:`qkdyn.theory.orbits.contract`.
"""
from __future__ import annotations

import dataclasses
import itertools

import sympy as sp
from qkdyn.theory import orbits
from qkdyn.theory.model import D, K, N, Variable, ov0, qk0, s
from qkdyn.theory.spec import CircuitSpec, Spec

from qkdyn.errors import InputError

ROWS = {"QK": "query", "OV": "label"}
#: names of the factors of a chain of depth L (L = 1: the collapsed matrix)
FIRST, LAST = {"QK": "q", "OV": "o"}, {"QK": "k", "OV": "v"}


@dataclasses.dataclass(frozen=True)
class Factor:
    """Factor j of a circuit's chain: its name, circuit, row and column index types, inner type."""

    name: str
    circuit: str
    index: int
    depth: int
    rows: tuple[str, ...]
    cols: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Entry:
    """One reduced variable: the Variable (name, circuit, orbit size, meaning), its factor and orbit."""

    variable: Variable
    factor: Factor
    orbit: orbits.Orbit


def context_types(spec: Spec) -> tuple[str, ...]:
    return ("distinct", "common") + (("query",) if spec.self_attention else ())


def chain(spec: Spec, circuit: str) -> tuple[Factor, ...]:
    """The factors of ``circuit`` (:mod:`qkdyn.theory.specflow`, step 1)."""
    cs: CircuitSpec = spec.qk if circuit == "QK" else spec.ov
    row, cols = (ROWS[circuit],), context_types(spec)
    if cs.form == "coupled":
        tokens = ("query", "distinct", "common")
        factors = [Factor("q", circuit, 0, 0, tokens, ("rinner",)), Factor("k", circuit, 1, 0, tokens, ("rinner",))]
        for suffix in ("q", "k") if cs.uncoupled else ("",):  # the MLP-only control: one field per variable
            if cs.coupling == "linear":
                factors.append(Factor("A" + suffix, circuit, len(factors), 0, ("rinner",), ("rinner",)))
            else:
                factors += [Factor("f1" + suffix, circuit, len(factors), 0, ("rinner",), ("hinner",)),
                            Factor("f2" + suffix, circuit, len(factors) + 1, 0, ("hinner",), ("rinner",))]
        if cs.learn_dt:
            factors.append(Factor("dt", circuit, len(factors), 0, ("unit",), ("unit",)))
        return tuple(factors)
    if cs.form == "collapsed":
        return (Factor(circuit.lower(), circuit, 0, 1, row, cols),)
    if circuit == "OV" and cs.inner == "rank":
        raise InputError("must be class for a factorized OV circuit: a rank-r inner index carries no class, so the "
                         "symmetric OV circuit could never tell classes apart (ov stays 0)", "ov.inner")
    inner = ("cinner",) if cs.inner == "class" else ("rinner",)
    L = cs.depth
    names = [FIRST[circuit]] + [f"{circuit.lower()}m{j}" for j in range(1, L - 1)] + [LAST[circuit]]
    types = [row] + [inner] * (L - 1) + [cols]
    return tuple(Factor(names[j], circuit, j, L, types[j], types[j + 1]) for j in range(L))


def _word(orbit: orbits.Orbit) -> str:
    """The name of an orbit of a (row, col) pair: own / cross between two class indices, diag / off
    between two rank indices, self for (q, q), else the token the entry is about."""
    a, b = orbit.types
    if a in ("label", "cinner") and b in ("label", "cinner", "distinct"):
        word = "own" if orbit.classes[0] == orbit.classes[1] else "cross"
    elif a == b == "rinner":
        word = "diag" if orbit.ranks[0] == orbit.ranks[1] else "off"
    elif a == b == "query":
        word = "self"
    elif {"distinct", "common", "query"} & {a, b}:
        word = next(t for t in ("distinct", "common", "query") if t in (a, b))
    else:
        word = "all"  # the one orbit of a (rank, hidden) pair or of a scalar
    return word


def circuit_spec(spec: Spec, circuit: str) -> CircuitSpec:
    return spec.qk if circuit == "QK" else spec.ov


def _rank(spec: Spec, circuit: str) -> int | None:
    cs = circuit_spec(spec, circuit)
    return cs.rank if cs.form != "collapsed" and cs.inner == "rank" else None


def _fixed_within(spec: Spec) -> int | None:
    return None if spec.token_weights is None else len(spec.token_weights)


def _key(orbit: orbits.Orbit, fixed: bool) -> str:
    """:func:`_word`, with the distinct token's fixed within-class index (1-based) appended."""
    return _word(orbit) + (str(orbit.within[0] + 1) if fixed and "distinct" in orbit.types else "")


def circuit_entries(spec: Spec, circuit: str) -> tuple[list[Entry], dict]:
    """The reduced variables of ``circuit`` and its collapsed entries on each (row, col) orbit."""
    fixed, rank = _fixed_within(spec), _rank(spec, circuit)
    cs = circuit_spec(spec, circuit)
    hidden = cs.hidden if cs.form == "coupled" else None
    factors = chain(spec, circuit)
    entries, lookup = [], {}
    for factor in factors:
        for row, col in itertools.product(factor.rows, factor.cols):
            for orbit in orbits.enumerate_orbits((row, col), fixed, rank, hidden):
                name = "dt" if factor.name == "dt" else f"{factor.name}_{_key(orbit, fixed is not None)}"
                size = orbits.size(orbit, K, D, N, rank, fixed is not None, hidden)
                meaning = (f"factor {factor.index + 1} of {factor.depth} of W_{circuit}, index types ({row}, {col}), "
                           f"{_word(orbit)} orbit")
                variable = Variable(name, circuit, sp.factor(size), meaning)
                entries.append(Entry(variable, factor, orbit))
                lookup[(factor.index, orbit)] = variable.symbol
    if cs.form == "coupled":
        return entries, coupled_scores(spec, lookup)
    features = {}
    for col in context_types(spec):
        for target in orbits.enumerate_orbits((ROWS[circuit], col), fixed, None):
            key = _key(target, fixed is not None)
            if len(factors) == 1:
                features[key] = lookup[(0, target)]
            else:
                inner = tuple(factors[0].cols) * (len(factors) - 1)
                features[key] = orbits.contract(target, inner, lambda j, o: lookup.get((j, o), sp.S(0)),
                                                K, D, N, rank, fixed)
    return entries, features


def coupled_scores(spec: Spec, lookup: dict) -> dict:
    """W_QK[q, x]-equivalents of a coupled QK circuit: q'_q . k'_x / 1 per context token type x (the
    score over s). On the symmetric subspace every row W_Q[x, :], W_K[x, :] is c_x 1_r (one orbit per
    token type), f maps c 1_r to phi(c) 1_r with phi(c) = c (A_diag + (r-1) A_off) (linear) or
    h w_2 silu(r w_1 c) (MLP), so the integrator acts on the scalars c and q'_q . k'_x = r q'_q k'_x. The
    MLP-only control (``uncoupled``) has two such fields, phi_q on the query and phi_k on the key."""
    from qkdyn.theory.functions import expit

    cs, weights = spec.qk, spec.token_weights
    r = cs.rank
    index = {f.name: f.index for f in chain(spec, "QK")}
    row = lambda j, kind, within=(): lookup[(j, orbits.Orbit((kind, "rinner"), (0,) if kind == "distinct" else (),
                                                             within, (0,) if kind == "common" else (), (0,)))]

    def field(suffix: str):
        """phi of the field named by ``suffix`` ("" coupled; "q", "k" the MLP-only control's two)."""
        if cs.coupling == "linear":
            diag = lookup[(index["A" + suffix], orbits.Orbit(("rinner", "rinner"), (), (), (), (0, 0)))]
            off = lookup.get((index["A" + suffix], orbits.Orbit(("rinner", "rinner"), (), (), (), (0, 1))), sp.S(0))
            return lambda c: c * (diag + (r - 1) * off)
        w1 = lookup[(index["f1" + suffix], orbits.Orbit(("rinner", "hinner"), (), (), (), (0,), (0,)))]
        w2 = lookup[(index["f2" + suffix], orbits.Orbit(("hinner", "rinner"), (), (), (), (0,), (0,)))]
        return lambda c: cs.hidden * w2 * (r * w1 * c) * expit(r * w1 * c)

    dt = lookup[(index["dt"], orbits.Orbit(("unit", "unit"), (), (), (), ()))] if cs.learn_dt else sp.nsimplify(cs.dt)
    phi, phi_q, phi_k = (None, field("q"), field("k")) if cs.uncoupled else (field(""), None, None)

    def flow(q, k):
        for _ in range(cs.steps):
            if cs.uncoupled:
                q, k = q + dt * phi_q(q), k + dt * phi_k(k)
            elif cs.integrator == "euler":
                q, k = q + dt * k, k + dt * phi(q)
            else:
                half = k + dt / 2 * phi(q)
                q = q + dt * half
                k = half + dt / 2 * phi(q)
        return q, k

    # token kind -> (within-class index, name suffix) of each of its orbits
    kinds: dict[str, list[tuple[tuple[int, ...], str]]] = {
        "query": [((), "")], "common": [((), "")],
        "distinct": [((i,), str(i + 1)) for i in range(len(weights))] if weights is not None else [((0,), "")]}
    moved = {(kind, key): flow(row(0, kind, w), row(1, kind, w)) for kind, pairs in kinds.items() for w, key in pairs}
    query = moved[("query", "")][0]
    scores = {"distinct" + key: r * query * moved[("distinct", key)][1] for _, key in kinds["distinct"]}
    scores["common"] = r * query * moved[("common", "")][1]
    if spec.self_attention:
        scores["self"] = r * query * moved[("query", "")][1]
    return scores


def init_value(spec: Spec, entry: Entry) -> sp.Expr:
    """The canonical init (docs/setting.md) as balanced factors of depth L (spec module docstring)."""
    factor, orbit, circuit = entry.factor, entry.orbit, entry.variable.circuit
    cs = circuit_spec(spec, circuit)
    if cs.form == "coupled" and factor.index >= 2:  # the coupling's own parameters
        if factor.name == "dt":
            return sp.nsimplify(cs.dt)
        if factor.name.startswith("A"):
            return sp.nsimplify(cs.coupling_init) if orbit.ranks == (0, 0) else sp.S(0)
        return sp.nsimplify(cs.coupling_init)
    if cs.form == "coupled":  # W_Q, W_K: the balanced rank-r init of the plain product
        root = sp.sqrt(sp.Abs(qk0) / s * sp.sqrt(K * D))
        if factor.index == 0:
            return sp.sign(qk0) * root / sp.sqrt(cs.rank) if orbit.types[0] == "query" else sp.S(0)
        return root / sp.sqrt(cs.rank) / sp.sqrt(K * D) if orbit.types[0] == "distinct" else sp.S(0)
    same_class = len(orbit.classes) == 2 and orbit.classes[0] == orbit.classes[1]
    if factor.depth == 1:
        if circuit == "QK":
            return qk0 / s if orbit.types[1] == "distinct" else sp.S(0)
        return ov0 if orbit.types[1] == "distinct" and same_class else sp.S(0)
    L, first, last = factor.depth, factor.index == 0, factor.index == factor.depth - 1
    imbalance = sp.nsimplify(cs.imbalance)
    scale = imbalance if first else 1 / imbalance if last else sp.S(1)
    if circuit == "QK":
        width = cs.rank if cs.inner == "rank" else K
        root = (sp.Abs(qk0) / s * sp.sqrt(K * D)) ** sp.Rational(1, L)
        e = 1 / sp.sqrt(width)
        if first:
            return sp.sign(qk0) * root * e * scale
        if last:
            return root * e / sp.sqrt(K * D) * scale if orbit.types[1] == "distinct" else sp.S(0)
        return root * e**2
    root = (sp.Abs(ov0) * sp.sqrt(D)) ** sp.Rational(1, L)
    if not same_class:
        return sp.S(0)
    if first:
        return sp.sign(ov0) * root * scale
    if last:
        return root / sp.sqrt(D) * scale if orbit.types[1] == "distinct" else sp.S(0)
    return root
