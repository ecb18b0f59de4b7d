"""The canonical orthogonal-data setting of DESIGN.md section 1, as plain numbers.

K classes, D distinct tokens per class, N common tokens, a context of m distinct + n common tokens,
score scale s, learning rates eta_QK and eta_OV, initial gap ``qk0`` and margin ``ov0``. ``b`` is the
scale constant of the authors' reduced form (used by the ``paper`` parameterisation only).
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
    """One point of the canonical setting (symbols as in DESIGN.md)."""

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

    def __post_init__(self) -> None:
        for name in ("classes", "distinct", "commons", "m", "n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"must be a positive integer, got {value!r}", name)
        if self.classes < 2:
            raise InputError(f"must be at least 2 (one class has nothing to predict), got {self.classes}", "classes")
        for name in ("scale", "eta_qk", "eta_ov", "b"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"must be a positive finite number, got {value!r}", name)
        for name in ("qk0", "ov0"):
            if not math.isfinite(getattr(self, name)):
                raise InputError(f"must be finite, got {getattr(self, name)!r}", name)

    @property
    def rho(self) -> float:
        """The learning-rate ratio eta_QK / eta_OV."""
        return self.eta_qk / self.eta_ov

    def numeric(self) -> tuple[float, ...]:
        """The parameter vector the generated numeric functions take (order of qkdyn.theory.model.PARAMS)."""
        return (
            float(self.classes), float(self.distinct), float(self.commons), float(self.m),
            float(self.n), self.scale, self.eta_qk, self.eta_ov, self.b,
        )

    def replace(self, **changes) -> "Setting":
        return dataclasses.replace(self, **changes)
