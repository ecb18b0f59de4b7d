"""A circuit spec: a model of the orthogonal-data setting (docs/setting.md section 1) written as data.

A :class:`Spec` names, for each of the two circuits (QK and OV), how its matrix is parameterised,
plus what the rest of the model does:

* ``CircuitSpec(form="collapsed")``: one matrix W_c;
* ``CircuitSpec(form="factorized", depth=L, inner="class" | "rank", rank=r, imbalance=lam)``:
  W_c = W_1 W_2 ... W_L with L >= 2. The inner indices are either *class-aligned* (one inner index per
  class, the relabelling of classes acts on them) or *rank r* (r inner indices, relabelled freely).
  The init is the balanced factorisation of the canonical init product (equal singular values
  sigma^(1/L) in every factor), then the first factor is multiplied by ``imbalance`` and the last
  divided by it (the product is unchanged; imbalance 1 is balanced);
* ``CircuitSpec(form="coupled", rank=r, integrator=..., steps=n, dt=..., learn_dt=..., coupling=...)``
  (QK only): paper B's coupled query-key dynamics in this setting. Every token x has a query
  q_x = W_Q[x, :] and a key k_x = W_K[x, :] (rank-r inner index); before scoring, ``steps`` steps of
  Euler (q' = q + dt k, k' = k + dt f(q)) or leapfrog (k_half = k + dt/2 f(q), q' = q + dt k_half,
  k' = k_half + dt/2 f(q')) act on every position, with f(q) = q A (``coupling="linear"``, A r x r) or
  f(q) = silu(q W_1) W_2 (``"mlp"``, ``hidden`` units, no biases, as :mod:`qkdyn.empirical.coupled`);
  score_x = s q'_q . k'_x. ``uncoupled`` is paper B's MLP-only control: Euler steps q' = q + dt f_q(q),
  k' = k + dt f_k(k), two fields of the same form each acting on its own variable (so query and key never
  mix). dt is fixed or (``learn_dt``) a parameter; the coupling's parameters learn
  with eta_QK. Init: the balanced factorized init for W_Q, W_K, A = ``coupling_init`` I (W_1, W_2
  all ``coupling_init``): with one Euler step the initial scores are the plain ones (k_q = 0 and the
  context queries are 0); with leapfrog or more steps f(q_q) already moves the query's own key, so
  the initial qk differs from qk0 (``qkdyn solve`` prints it in its first row);
* ``weight_decay``: lambda_c >= 0 per circuit, the loss gains (lambda_c / 2) * (sum of squares of the
  circuit's parameters);
* ``loss``: ``"cross_entropy"`` (the setting's) or ``"square"``: (1/2) sum_j (logit_j - y_j)^2 over
  the K label logits;
* ``self_attention``: the query also attends to itself (score s W_QK[q, q], value W_OV[:, q]), as in
  the authors' code;
* ``token_weights``: sampling weights of the D distinct tokens of a class (the authors use 0.1, ...,
  1.0), normalised; they fix D = len(token_weights) and need ``context_distinct`` (= m), because the
  population loss is then an exact finite sum over the count vectors of the m distinct draws.

Every size and number is bounded before any derivation (:data:`MAX_DEPTH`, :data:`MAX_EVALUATIONS`,
:data:`MAX_TOKEN_WEIGHTS`, :data:`MAX_COUNT_VECTORS`, :data:`MIXED_LIMITS`, :data:`RANGES`: limits chosen
from measured derivation times, docs/derivation.md section 6). Specs are frozen and hashable (derivations
are cached per spec). :func:`load` reads one from a small TOML or JSON file; every error in it is an
:class:`~qkdyn.errors.InputError` naming the field.
:data:`NAMED` holds the four exact forms of ``qkdyn.PARAMS`` as specs. ``paper``, the authors'
two-variable system, is the CACO spec at the authors' constants: :func:`paper_model` maps a setting
to that model's (its (qk, ov) flow is the authors' form exactly; ``qkdyn.check("paper")`` tests it).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from qkdyn.errors import InputError, shown_value

FORMS = ("collapsed", "factorized", "coupled")
INNER = ("class", "rank")
LOSSES = ("cross_entropy", "square")
INTEGRATORS = ("euler", "leapfrog")
COUPLINGS = ("linear", "mlp")


#: Size limits, checked before any derivation: within them every spec derives (``qkdyn derive --spec``:
#: flow, conserved polynomials, rates) in about a minute of one core and under 200 MiB. Measured on the
#: project's 2-core machine (CPU seconds of a fresh ``qkdyn derive --spec`` process; docs/derivation.md
#: section 6 has the table):
#:   depth, class-aligned QK / OV: 4 -> 18 / 26 s, 5 -> 81 / 54 s; rank inner (r >= L - 1): 4 -> 6 s,
#:     5 -> 11 s, 6 -> 29 s (r = 2); rank 1: 12 -> 11 s, 13 -> 18 s and 0.8 GiB, 14 -> out of 4 GiB;
#:     both class-aligned at depth 4 with self_attention: 40 s
#:   coupled steps (field evaluations: a leapfrog step is two): linear 4 -> 12 s, 6 -> 27 s, 8 -> 49 s;
#:     MLP flow alone 4 -> 1.5 s, 8 -> 16 s, 10 -> 63 s; at 4 evaluations with self_attention, learn_dt
#:     and a depth-4 class-aligned OV: 41-43 s. rank and hidden only enter as numbers (64 and 64: 1.6 s)
#:   token weights, collapsed circuits: D = 10, m = 1 (the authors' weights): 48-58 s, 59 s with
#:     self_attention; count vectors C(D+m-1, m): 17 -> 13 s, 36 -> 35 s, 45 -> 36 s
#:   token weights with factorized or coupled circuits multiply: D = 2, m = 2 with both circuits
#:     class-aligned at depth 3 and self_attention 33 s; D = 3 there > 120 s; with a coupled QK at 4
#:     evaluations 61 s
#:   coupled MLP field at 4 evaluations: the whole ``qkdyn.derive`` 4 s (Euler, hidden 64, rank 64) and 17 s
#:     (examples/specs/coupled_leapfrog.json); its symbolic Jacobian (minutes of sympy) is derived only when
#:     read (``Derived.jacobian``) and its M_QK (~10^4 operations) is left unsimplified
MAX_DEPTH = 4
MAX_RANK = 64
MAX_HIDDEN = 64
#: a coupled QK's evaluations of its field f: ``steps`` (Euler) or 2 ``steps`` (leapfrog)
MAX_EVALUATIONS = 4
MAX_TOKEN_WEIGHTS = 10
MAX_CONTEXT_DISTINCT = 64
#: the multinomial count vectors C(D + m - 1, m) of the m distinct draws over D token weights
MAX_COUNT_VECTORS = 36
#: the tighter limits on a spec with token weights and a factorized or coupled circuit (the costs multiply)
MIXED_LIMITS = {"depth": 3, "evaluations": 2, "token_weights": 2, "count_vectors": 3}
#: [low, high] of each number (a spec's numbers become exact rationals: far outside these the init or
#: the flow overflows; below 1e-17 a number rounds to 0)
RANGES = {"imbalance": (1e-3, 1e3), "weight_decay": (1e-12, 10.0), "dt": (1e-4, 1.0), "coupling_init": (1e-4, 10.0),
          "token_weights": (1e-6, 1e6)}
#: why each limit: the derivation's cost, or (rank, hidden: they enter the flow as factors) its numbers
SLOW = "more takes over a minute to derive"
FACTOR = "it enters the flow as a factor; a huge one overflows it"


def _choice(value, choices, field) -> None:
    if value not in choices:
        raise InputError(f"must be one of {', '.join(choices)}, got {shown_value(value)}", field)


def _integer(value, field, low, high=None, why=SLOW) -> None:
    """InputError unless ``value`` is an integer in [low, high] (no upper bound when ``high`` is None);
    ``why`` says why the upper bound."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"from {low} to {high} ({why})"
        raise InputError(f"must be an integer {bound}, got {shown_value(value)}", field)


def _number(value, field, zero: bool = False) -> None:
    """InputError unless ``value`` is a finite number in ``RANGES[field]`` (or 0 where ``zero``)."""
    low, high = RANGES[field.rsplit(".", 1)[-1]]
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or not (low <= value <= high or (zero and value == 0)):
        raise InputError(f"must be {'0 or ' if zero else ''}a finite number from {low:g} to {high:g}, got "
                         f"{shown_value(value)}", field)


def _evaluations(cs: CircuitSpec) -> int:
    """How often a coupled circuit's integrator evaluates its field f (a leapfrog step: twice)."""
    return cs.steps * (2 if cs.integrator == "leapfrog" else 1)


@dataclasses.dataclass(frozen=True)
class CircuitSpec:
    """How one circuit (QK or OV) is parameterised; the module docstring writes out each form's maths.

    Frozen and validated on construction: a bad value raises :class:`~qkdyn.errors.InputError` naming
    the field (a spec read by :func:`load` names it as ``qk.depth`` and so on).

    Parameters
    ----------
    form : {"collapsed", "factorized", "coupled"}
        One matrix $W_c$; a product $W_c = W_1 W_2 \\cdots W_L$; or paper B's coupled queries and keys
        (QK only).
    depth : int
        Factorized: the number of factors $L$, from 2 to :data:`MAX_DEPTH`.
    inner : {"rank", "class"}
        Factorized or coupled: ``"rank"``, $r$ inner indices relabelled freely, or ``"class"``, one inner
        index per class (factorized only).
    rank : int
        The inner width $r$ (``inner="rank"``), at most :data:`MAX_RANK`.
    imbalance : float
        At init the first factor is multiplied by it and the last divided by it (1: balanced).
    weight_decay : float
        $\\lambda_c \\ge 0$: the loss gains $(\\lambda_c/2)$ times the sum of squares of the circuit's parameters.
    integrator : {"euler", "leapfrog"}
        Coupled: the step that moves queries and keys before scoring.
    steps : int
        Coupled: the number of integrator steps $n$ (a leapfrog step evaluates the field twice; at most
        :data:`MAX_EVALUATIONS` evaluations).
    dt : float
        Coupled: the step size.
    learn_dt : bool
        Coupled: whether ``dt`` is a parameter trained with $\\eta_{QK}$.
    uncoupled : bool
        Coupled: paper B's MLP-only control (query and key each moved by a field of its own; Euler only).
    coupling : {"linear", "mlp"}
        Coupled: the field $f(q) = q A$ or $f(q) = \\mathrm{silu}(q W_1) W_2$.
    hidden : int
        Coupled MLP field: its hidden units.
    coupling_init : float
        $A = $ ``coupling_init`` $I$ at init, or every entry of $W_1$ and $W_2$.

    Examples
    --------
    >>> CircuitSpec("factorized", depth=3).factorized
    True
    """

    form: str = "collapsed"
    depth: int = 2  # factorized: number of factors L
    inner: str = "rank"  # factorized: "class" (one inner index per class) or "rank" (r free inner indices)
    rank: int = 1  # inner width r when inner == "rank"
    imbalance: float = 1.0  # first factor * imbalance, last factor / imbalance at init
    weight_decay: float = 0.0  # lambda_c
    # coupled QK (paper B): integrator, steps, step dt (learnable or fixed), coupling f
    integrator: str = "euler"
    steps: int = 1
    dt: float = 0.1
    learn_dt: bool = False
    uncoupled: bool = False  # paper B's MLP-only control (module docstring); Euler only
    coupling: str = "linear"
    hidden: int = 4  # units of the coupling MLP
    coupling_init: float = 0.5  # A = coupling_init I, or every entry of W_1 and W_2

    def __post_init__(self) -> None:
        _choice(self.form, FORMS, "form")
        _choice(self.inner, INNER, "inner")
        _choice(self.integrator, INTEGRATORS, "integrator")
        _choice(self.coupling, COUPLINGS, "coupling")
        _integer(self.depth, "depth", 2, MAX_DEPTH)
        _integer(self.rank, "rank", 1, MAX_RANK, FACTOR)
        _integer(self.hidden, "hidden", 1, MAX_HIDDEN, FACTOR)
        _integer(self.steps, "steps", 1)
        if _evaluations(self) > MAX_EVALUATIONS:
            raise InputError(f"must be at most {MAX_EVALUATIONS} Euler or {MAX_EVALUATIONS // 2} leapfrog steps "
                             f"({SLOW}), got {self.steps} {self.integrator} steps", "steps")
        _number(self.coupling_init, "coupling_init")
        _number(self.imbalance, "imbalance")
        _number(self.weight_decay, "weight_decay", zero=True)
        _number(self.dt, "dt")
        for flag in ("learn_dt", "uncoupled"):
            if not isinstance(getattr(self, flag), bool):
                raise InputError(f"must be true or false, got {shown_value(getattr(self, flag))}", flag)
        if self.uncoupled and self.integrator != "euler":
            raise InputError("must be false with the leapfrog integrator: the MLP-only control has no coupled "
                             "field for a symplectic step (paper B updates q and k each from itself)", "uncoupled")

    @property
    def factorized(self) -> bool:
        return self.form == "factorized"


@dataclasses.dataclass(frozen=True)
class Spec:
    """A model of the orthogonal-data setting, written as data: how each circuit is parameterised and
    what the rest of the model does (the module docstring writes out the maths). Frozen, hashable and
    validated on construction (an :class:`~qkdyn.errors.InputError` names the bad field);
    ``qkdyn.derive(spec)`` derives its exact reduced flow, ``qkdyn.solve(setting, spec)`` integrates it.

    Parameters
    ----------
    name : str
        What the spec is called in outputs (a file read by :func:`load` defaults to its stem).
    qk : CircuitSpec
        The QK circuit (collapsed, factorized or coupled).
    ov : CircuitSpec
        The OV circuit (collapsed or factorized).
    loss : {"cross_entropy", "square"}
        The setting's cross-entropy, or $\\tfrac12 \\sum_j (\\mathrm{logit}_j - y_j)^2$ over the $K$ label logits.
    self_attention : bool
        Whether the query also attends to itself (score $s W_{QK}[q, q]$, value $W_{OV}[:, q]$), as in the
        authors' code.
    token_weights : tuple of float or None
        Sampling weights of the $D$ distinct tokens of a class (normalised); they fix
        $D$ = ``len(token_weights)`` and need ``context_distinct``.
    context_distinct : int or None
        $m$, the distinct draws of a context, with ``token_weights`` only (the population loss is then an
        exact sum over their count vectors).

    Examples
    --------
    >>> spec = Spec("deep", qk=CircuitSpec("factorized", depth=3))
    >>> spec.qk.depth, spec.ov.form
    (3, 'collapsed')
    """

    name: str = "custom"
    qk: CircuitSpec = CircuitSpec()
    ov: CircuitSpec = CircuitSpec()
    loss: str = "cross_entropy"
    self_attention: bool = False
    token_weights: tuple[float, ...] | None = None
    context_distinct: int | None = None  # m, required with token_weights

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.isprintable():
            raise InputError(f"must be a non-empty string of printable characters (no line break or escape), "
                             f"got {self.name!r}", "name")
        for field in ("qk", "ov"):
            if not isinstance(getattr(self, field), CircuitSpec):
                raise InputError(f"must be a table of circuit fields, got {getattr(self, field)!r}", field)
        if self.qk.form == "coupled" and self.qk.inner != "rank":
            raise InputError("must be rank for a coupled QK circuit (queries and keys live in R^r)", "qk.inner")
        if self.ov.form == "coupled":
            raise InputError("coupled is a QK mechanism (paper B); the OV circuit is collapsed or factorized", "ov.form")
        _choice(self.loss, LOSSES, "loss")
        if not isinstance(self.self_attention, bool):
            raise InputError(f"must be true or false, got {self.self_attention!r}", "self_attention")
        if self.token_weights is not None:
            weights = self.token_weights
            if isinstance(weights, (str, bytes)) or not hasattr(weights, "__iter__"):
                raise InputError(f"must be a list of positive numbers, got {shown_value(weights)}", "token_weights")
            weights = tuple(weights)
            if not weights:
                raise InputError("must list at least one weight", "token_weights")
            if len(weights) > MAX_TOKEN_WEIGHTS:
                raise InputError(f"must list at most {MAX_TOKEN_WEIGHTS} weights ({SLOW}), got {len(weights)}",
                                 "token_weights")
            for w in weights:
                _number(w, "token_weights")
            object.__setattr__(self, "token_weights", weights)
            if self.context_distinct is None:
                raise InputError("is required with token_weights (the number m of distinct draws: the population "
                                 "loss is a finite sum over their count vectors)", "context_distinct")
        if self.context_distinct is not None:
            if self.token_weights is None:
                raise InputError("is only used with token_weights (otherwise m comes from the setting)",
                                 "context_distinct")
            _integer(self.context_distinct, "context_distinct", 1, MAX_CONTEXT_DISTINCT, "m! enters the loss")
            self._check_mixed_size(self.token_weights, self.context_distinct)

    def _check_mixed_size(self, weights: tuple[float, ...], m: int) -> None:
        """The count-vector limit, and the tighter ones of :data:`MIXED_LIMITS` where token weights meet
        a factorized or coupled circuit (module comment at the limits)."""
        d = len(weights)
        vectors = math.comb(d + m - 1, m)
        plain = [c for c in ("qk", "ov") if getattr(self, c).form != "collapsed"]
        mixed = f" with token_weights and a {getattr(self, plain[0]).form} {plain[0]} circuit" if plain else ""
        limit = MIXED_LIMITS["count_vectors"] if plain else MAX_COUNT_VECTORS
        if plain and d > MIXED_LIMITS["token_weights"]:
            raise InputError(f"must list at most {MIXED_LIMITS['token_weights']} weights with a "
                             f"{getattr(self, plain[0]).form} {plain[0]} circuit ({SLOW}), got {d}", "token_weights")
        if vectors > limit:
            raise InputError(f"must leave at most {limit} count vectors C(D+m-1, m) of the m distinct draws over "
                             f"the D token weights{mixed} ({SLOW}), got C({d}+{m}-1, {m}) = {vectors}",
                             "context_distinct")
        for circuit in plain:
            cs = getattr(self, circuit)
            if cs.form == "factorized" and cs.depth > MIXED_LIMITS["depth"]:
                raise InputError(f"must be at most {MIXED_LIMITS['depth']} with token_weights ({SLOW}), got "
                                 f"{cs.depth}", f"{circuit}.depth")
            if cs.form == "coupled" and _evaluations(cs) > MIXED_LIMITS["evaluations"]:
                raise InputError(f"must be at most {MIXED_LIMITS['evaluations']} Euler or "
                                 f"{MIXED_LIMITS['evaluations'] // 2} leapfrog step with token_weights ({SLOW}), "
                                 f"got {cs.steps} {cs.integrator} steps", f"{circuit}.steps")

    def check_setting(self, setting) -> None:
        """InputError where ``setting`` contradicts the spec (D and m fixed by token weights)."""
        if self.token_weights is not None:
            if setting.distinct != len(self.token_weights):
                raise InputError(f"must equal len(token_weights) = {len(self.token_weights)} for spec "
                                 f"{self.name!r}, got {setting.distinct}", "distinct")
            if setting.m != self.context_distinct:
                raise InputError(f"must equal context_distinct = {self.context_distinct} for spec {self.name!r}, "
                                 f"got {setting.m}", "m")


#: the four exact forms of qkdyn.PARAMS as specs (factorized QK: rank 1; factorized OV: class-aligned)
NAMED = {
    "CACO": Spec("CACO"),
    "FACO": Spec("FACO", qk=CircuitSpec("factorized")),
    "CAFO": Spec("CAFO", ov=CircuitSpec("factorized", inner="class")),
    "FAFO": Spec("FAFO", qk=CircuitSpec("factorized"), ov=CircuitSpec("factorized", inner="class")),
}

def paper_model(setting):
    """The authors' reduced form ``paper`` as a spec: it is ``NAMED["CACO"]`` at the Setting returned here.
    That circuit model has M = K classes, D = b distinct tokens per class (b must be a whole number) and
    the scale s = sqrt(N / (b (N + K b))), at which M_QK = s^2 (1/(KD) + 1/N) is the authors' 1/(M b^2) and
    M_OV = 1/((K-1) D) their 1/(b (M-1)), so its (qk, ov) flow is the authors' (mu_QK, mu_OV) flow
    exactly; everything else (N, m, n, rates, init) is ``setting``'s. ``qkdyn.check("paper")`` checks it
    against the full matrices."""
    b = setting.b
    if b != int(b):
        raise InputError(f"must be a whole number for a circuit model of the paper form (b distinct tokens per "
                         f"class), got {b!r}", "b")
    b = int(b)
    return setting.replace(distinct=b, scale=math.sqrt(setting.commons / (b * (setting.commons + setting.classes * b))))


_CIRCUIT_FIELDS = {f.name for f in dataclasses.fields(CircuitSpec)}
_SPEC_FIELDS = {f.name for f in dataclasses.fields(Spec)}


def from_dict(record: dict) -> Spec:
    """A Spec from a parsed TOML / JSON table; unknown keys and wrong types are InputErrors."""
    if not isinstance(record, dict):
        raise InputError(f"must be a table (a JSON object), got {type(record).__name__}", "spec")
    unknown = set(record) - _SPEC_FIELDS
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_SPEC_FIELDS))}",
                         "spec")
    fields = dict(record)
    for circuit in ("qk", "ov"):
        table = fields.get(circuit, {})
        if isinstance(table, str):  # shorthand: qk = "factorized"
            table = {"form": table}
        if not isinstance(table, dict):
            raise InputError(f"must be a table or a form name, got {table!r}", circuit)
        bad = set(table) - _CIRCUIT_FIELDS
        if bad:
            raise InputError(f"unknown field(s) {', '.join(sorted(bad))}; known: {', '.join(sorted(_CIRCUIT_FIELDS))}",
                             circuit)
        try:
            fields[circuit] = CircuitSpec(**table)
        except InputError as exc:
            raise InputError(exc.problem, f"{circuit}.{exc.field}") from None
    if fields.get("token_weights") is not None and isinstance(fields["token_weights"], list):
        fields["token_weights"] = tuple(fields["token_weights"])
    return Spec(**fields)


#: a spec is a few lines; a file above this bound is not one (and is refused before it fills memory)
MAX_SPEC_BYTES = 1 << 20


def load(path) -> Spec:
    """Read a spec from a ``.toml`` or ``.json`` file (data only: nothing in it is executed).

    The file must be a regular file of at most :data:`MAX_SPEC_BYTES` (a FIFO or a device node is
    refused before it is read, :mod:`qkdyn.inputs`). Its keys are :class:`Spec`'s fields, ``qk`` and
    ``ov`` tables of :class:`CircuitSpec`'s (or a form name alone: ``qk = "factorized"``).

    Parameters
    ----------
    path : str or os.PathLike
        The spec file; its suffix (``.toml``, which needs Python 3.11, or ``.json``) says how it is parsed.

    Returns
    -------
    Spec
        The spec, named by the file's ``name`` key or else by the file's stem.

    Raises
    ------
    InputError
        For a file that cannot be read, is not valid TOML/JSON, has an unknown key or a bad value: one
        line naming the file and, for a bad field, the field.

    Examples
    --------
    >>> spec = qkdyn.load_spec("examples/specs/deep_qk_decay.toml")  # doctest: +SKIP
    """
    from qkdyn.inputs import read_text

    path = Path(path)
    if path.suffix not in (".toml", ".json"):
        raise InputError(f"must be a .toml or .json file, got {path.name!r}", "spec")
    try:
        text = read_text(path, MAX_SPEC_BYTES, "spec")
    except InputError as exc:
        problem = exc.problem.removeprefix("spec ")  # "cannot read spec file P: why", "spec path P is a FIFO; ..."
        raise InputError(problem.replace("cannot read spec file ", "cannot be read: ", 1), "spec") from None
    if path.suffix == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise InputError("is TOML, which needs Python >= 3.11 (tomllib); write it as JSON", "spec") from None
        try:
            record = tomllib.loads(text)
        except ValueError as exc:  # TOMLDecodeError, or an integer of over 4300 digits
            raise InputError(f"is not valid TOML: {path}: {exc}", "spec") from None
        except RecursionError:
            raise InputError(f"is not valid TOML: {path}: it nests deeper than the parser recurses", "spec") from None
    else:
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an integer of over 4300 digits
            raise InputError(f"is not valid JSON: {path}: {exc}", "spec") from None
    if isinstance(record, dict):
        record.setdefault("name", path.stem)
    try:
        return from_dict(record)
    except InputError as exc:
        if exc.field in (None, "spec"):
            raise InputError(f"{path}: {exc.problem}", "spec") from None
        raise InputError(f"{path}: field {exc.field} {exc.problem}", "spec") from None
