"""The canonical orthogonal-data setting of docs/setting.md section 1, as plain numbers.

K classes, D distinct tokens per class, N common tokens, a context of m distinct + n common tokens,
score scale s, learning rates eta_QK and eta_OV, initial gap ``qk0`` and margin ``ov0``. ``b`` is the
scale constant of the authors' reduced form (used by the ``paper`` parameterisation only).

Frozen circuits: a rate of 0 is legal and freezes that circuit (eta_QK = 0 holds the attention at its
initial value, the authors' fixed-attention experiment; eta_OV = 0 holds the margin); freezing both is
rejected (nothing would move). ``attn0`` sets the initial attention instead of ``qk0``: the gap is then

    qk0 = logit(attn0) - log(m/n)        (inverse of alpha = m e^qk / (m e^qk + n))

and ``qk0`` must be left at its default (giving both is ambiguous and an InputError naming ``attn0``).
"""
from __future__ import annotations

import dataclasses
import math

from qkdyn.errors import InputError

#: the four exact parameterisations (QK circuit first, OV circuit second)
EXACT_PARAMS = ("CACO", "FACO", "CAFO", "FAFO")
#: everything ``solve`` accepts: the exact ones and the authors' reduced form
ALL_PARAMS = EXACT_PARAMS + ("paper",)


def factorized(param: str) -> tuple[bool, bool]:
    """Whether the (QK, OV) circuits of form ``param`` are factorized: "FACO" -> (True, False).

    The authors' reduced form ``paper`` has collapsed circuits; anything else is an InputError.
    """
    if param == "paper":
        return False, False
    if param not in EXACT_PARAMS:
        raise InputError(f"must be one of {', '.join(ALL_PARAMS)}, got {param!r}", "param")
    return param[0] == "F", param[2] == "F"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One point of the canonical setting (symbols as in docs/setting.md section 1).

    Frozen and validated on construction: a bad value raises :class:`~qkdyn.errors.InputError` naming
    the field. The population loss of the setting is $L = \\log(1 + (K-1) e^{-\\alpha\\,\\mathrm{ov}})$, with
    $\\alpha = m e^{\\mathrm{qk}} / (m e^{\\mathrm{qk}} + n)$ the attention on the distinct tokens.

    Parameters
    ----------
    classes : int
        K, the number of classes (at least 2).
    distinct : int
        D, the distinct tokens of each class.
    commons : int
        N, the common tokens, shared by every class.
    m : int
        Distinct tokens drawn into a context.
    n : int
        Common tokens drawn into a context.
    scale : float
        s, the score scale (the attention logit is s times the QK bilinear form).
    eta_qk : float
        Learning rate of the QK circuit; 0 freezes it (the attention stays at its initial value).
    eta_ov : float
        Learning rate of the OV circuit; 0 freezes it. At most one of the two rates may be 0.
    qk0 : float
        Initial attention logit gap qk (distinct against common tokens).
    ov0 : float
        Initial output margin ov.
    b : float
        The authors' scale constant, read by the ``paper`` parameterisation only.
    attn0 : float or None
        Initial attention on the distinct tokens, in (0, 1); when given it sets
        ``qk0 = logit(attn0) - log(m/n)``, and ``qk0`` must be left at its default.

    Examples
    --------
    >>> s = Setting(eta_qk=10.0)
    >>> s.rho
    10.0
    """

    classes: int = 4  # K
    distinct: int = 10  # D
    commons: int = 10  # N
    m: int = 8  # distinct tokens in a context
    n: int = 24  # common tokens in a context
    scale: float = 1.0  # s
    eta_qk: float = 1.0
    eta_ov: float = 1.0
    qk0: float = 0.01  # initial attention logit gap
    ov0: float = 0.01  # initial output margin
    b: float = 50.0  # the authors' scale constant (paper form only)
    attn0: float | None = None  # initial attention on the distinct tokens; sets qk0 when given

    def __post_init__(self) -> None:
        for name in ("classes", "distinct", "commons", "m", "n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"must be a positive integer, got {value!r}", name)
        if self.classes < 2:
            raise InputError(f"must be at least 2 (one class has nothing to predict), got {self.classes}", "classes")
        for name in ("scale", "b"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"must be a positive finite number, got {value!r}", name)
        for name in ("eta_qk", "eta_ov"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"must be a non-negative finite number (0 freezes the circuit), got {value!r}", name)
        if self.eta_qk == 0 and self.eta_ov == 0:
            raise InputError("and eta_qk are both 0: freeze at most one circuit", "eta_ov")
        for name in ("qk0", "ov0"):
            if not math.isfinite(getattr(self, name)):
                raise InputError(f"must be finite, got {getattr(self, name)!r}", name)
        if self.attn0 is not None:
            attn0 = self.attn0
            if isinstance(attn0, bool) or not isinstance(attn0, (int, float)) or not 0 < attn0 < 1:
                raise InputError(f"must lie strictly between 0 and 1, got {attn0!r}", "attn0")
            implied = math.log(attn0 / (1 - attn0)) - math.log(self.m / self.n)
            if self.qk0 not in (_DEFAULT_QK0, implied):
                raise InputError(f"and qk0 both set the initial attention: give one (qk0 = {self.qk0!r})", "attn0")
            object.__setattr__(self, "qk0", implied)

    @property
    def rho(self) -> float:
        """The learning-rate ratio eta_QK / eta_OV (inf when the OV circuit is frozen)."""
        return self.eta_qk / self.eta_ov if self.eta_ov > 0 else math.inf

    @property
    def frozen(self) -> str | None:
        """"QK" or "OV" when that circuit's rate is 0, else None."""
        return "QK" if self.eta_qk == 0 else "OV" if self.eta_ov == 0 else None

    def numeric(self) -> tuple[float, ...]:
        """The parameter vector the generated numeric functions take (order of qkdyn.theory.model.PARAMS)."""
        return (
            float(self.classes), float(self.distinct), float(self.commons), float(self.m),
            float(self.n), self.scale, self.eta_qk, self.eta_ov, self.b,
        )

    def replace(self, **changes) -> Setting:
        """A copy with ``changes``; a new ``attn0`` (or ``qk0``) replaces the other way of setting the gap."""
        if "attn0" in changes and "qk0" not in changes:
            changes["qk0"] = _DEFAULT_QK0
        elif "qk0" in changes and "attn0" not in changes:
            changes["attn0"] = None
        elif "attn0" not in changes and self.attn0 is not None and {"m", "n"} & set(changes):
            changes["qk0"] = _DEFAULT_QK0  # the gap implied by attn0 depends on m/n: recompute it
        return dataclasses.replace(self, **changes)


_DEFAULT_QK0 = Setting.__dataclass_fields__["qk0"].default
