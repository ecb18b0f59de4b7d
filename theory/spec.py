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

Specs are frozen and hashable (derivations are cached per spec). :func:`load` reads one from a small
TOML or JSON file; every error in it is an :class:`~qkdyn.errors.InputError` naming the field.
:data:`NAMED` holds the four exact forms of ``qkdyn.PARAMS`` as specs. ``paper``, the authors'
two-variable system, is the CACO spec at the authors' constants: :func:`paper_model` maps a setting
to that model's (its (qk, ov) flow is the authors' form exactly; ``qkdyn.check("paper")`` tests it).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from qkdyn.errors import InputError

FORMS = ("collapsed", "factorized", "coupled")
INNER = ("class", "rank")
LOSSES = ("cross_entropy", "square")
INTEGRATORS = ("euler", "leapfrog")
COUPLINGS = ("linear", "mlp")


def _choice(value, choices, field) -> None:
    if value not in choices:
        raise InputError(f"must be one of {', '.join(choices)}, got {value!r}", field)


def _integer(value, field, low) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"must be an integer >= {low}, got {value!r}", field)


def _number(value, field, positive: bool) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or (value <= 0 if positive else value < 0):
        raise InputError(f"must be a {'positive' if positive else 'non-negative'} finite number, got {value!r}", field)


@dataclasses.dataclass(frozen=True)
class CircuitSpec:
    """How one circuit is parameterised (see the module docstring for each field's maths)."""

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
        _integer(self.depth, "depth", 2)
        _choice(self.inner, INNER, "inner")
        _integer(self.rank, "rank", 1)
        _integer(self.steps, "steps", 1)
        _integer(self.hidden, "hidden", 1)
        _number(self.coupling_init, "coupling_init", positive=True)
        _choice(self.integrator, INTEGRATORS, "integrator")
        _choice(self.coupling, COUPLINGS, "coupling")
        _number(self.imbalance, "imbalance", positive=True)
        _number(self.weight_decay, "weight_decay", positive=False)
        _number(self.dt, "dt", positive=True)
        for flag in ("learn_dt", "uncoupled"):
            if not isinstance(getattr(self, flag), bool):
                raise InputError(f"must be true or false, got {getattr(self, flag)!r}", flag)
        if self.uncoupled and self.integrator != "euler":
            raise InputError("must be false with the leapfrog integrator: the MLP-only control has no coupled "
                             "field for a symplectic step (paper B updates q and k each from itself)", "uncoupled")

    @property
    def factorized(self) -> bool:
        return self.form == "factorized"


@dataclasses.dataclass(frozen=True)
class Spec:
    """A model of the orthogonal-data setting (module docstring)."""

    name: str = "custom"
    qk: CircuitSpec = CircuitSpec()
    ov: CircuitSpec = CircuitSpec()
    loss: str = "cross_entropy"
    self_attention: bool = False
    token_weights: tuple[float, ...] | None = None
    context_distinct: int | None = None  # m, required with token_weights

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InputError(f"must be a non-empty string, got {self.name!r}", "name")
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
                raise InputError(f"must be a list of positive numbers, got {weights!r}", "token_weights")
            weights = tuple(weights)
            for w in weights:
                _number(w, "token_weights", positive=True)
            if not weights:
                raise InputError("must list at least one weight", "token_weights")
            object.__setattr__(self, "token_weights", weights)
            if self.context_distinct is None:
                raise InputError("is required with token_weights (the number m of distinct draws: the population "
                                 "loss is a finite sum over their count vectors)", "context_distinct")
        if self.context_distinct is not None:
            if self.token_weights is None:
                raise InputError("is only used with token_weights (otherwise m comes from the setting)",
                                 "context_distinct")
            _integer(self.context_distinct, "context_distinct", 1)

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
    """Read a spec from a ``.toml`` or ``.json`` file (data only: nothing in it is executed). The file must
    be a regular file of at most :data:`MAX_SPEC_BYTES` (a FIFO or a device node is refused before it is
    read, :mod:`qkdyn.inputs`); every error names the file and, for a bad field, the field."""
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
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"is not valid TOML: {path}: {exc}", "spec") from None
        except RecursionError:
            raise InputError(f"is not valid TOML: {path}: it nests deeper than the parser recurses", "spec") from None
    else:
        try:
            record = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"is not valid JSON: {path}: {exc}", "spec") from None
    if isinstance(record, dict):
        record.setdefault("name", path.stem)
    try:
        return from_dict(record)
    except InputError as exc:
        if exc.field in (None, "spec"):
            raise InputError(f"{path}: {exc.problem}", "spec") from None
        raise InputError(f"{path}: field {exc.field} {exc.problem}", "spec") from None
