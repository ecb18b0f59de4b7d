"""A spec's right-hand side and Jacobian compiled by numba (theory/specjit.py): the same printed expressions as the
uncompiled function, so the same values to round-off; compiled once the uncompiled calls have cost the estimated
compile time and not before; and a call whose outputs are not finite answered by the NumPy function, as
uncompiled."""
import dataclasses
import inspect
import re

import numpy as np
import pytest
import sympy as sp
from qkdyn.simulate.specsolve import solve_spec
from qkdyn.theory import specjit
from qkdyn.theory.model import PARAMS
from qkdyn.theory.spec import NAMED, Spec
from qkdyn.theory.spec import CircuitSpec as C
from qkdyn.theory.specflow import derive_spec
from qkdyn.theory.specnumeric import OneState, expressions
from repo_paths import ROOT

import qkdyn

SETTING = qkdyn.Setting(classes=3, distinct=2, commons=5, eta_qk=3.0)
P = np.asarray(SETTING.numeric(), dtype=float)
DECAY = qkdyn.load_spec(ROOT / "examples" / "specs" / "deep_qk_decay.toml")
SQUARE = dataclasses.replace(NAMED["CAFO"], name="cafo_square", loss="square")
LEAPFROG = qkdyn.load_spec(ROOT / "examples" / "specs" / "coupled_leapfrog.json")


def fresh(spec: Spec, jacobian: bool = False) -> OneState:
    """The spec's right-hand side (or Jacobian) as a new OneState, uncompiled whatever this process did before."""
    d = derive_spec(spec)
    return OneState([list(d.symbols), list(PARAMS)], d.stable_jacobian if jacobian else list(d.stable_rhs))


def states(spec: Spec) -> list[np.ndarray]:
    """Six states of the spec's solution from t = 0 to 1e15, and three random ones about its start."""
    solved = solve_spec(SETTING, spec, t_max=1e15, points=6).state.T
    rng = np.random.default_rng(11)
    return list(solved) + [solved[0] + rng.uniform(-0.5, 0.5, solved.shape[1]) for _ in range(3)]


@pytest.mark.parametrize(("spec", "jacobian"), [(DECAY, False), (DECAY, True), (SQUARE, False), (SQUARE, True),
                                                (LEAPFROG, False)], ids=["decay", "decay-jac", "square", "square-jac",
                                                                         "leapfrog"])
def test_the_compiled_function_is_the_uncompiled_one_to_round_off(spec, jacobian):
    one = fresh(spec, jacobian)
    xs = states(spec)
    uncompiled = [one(x, P) for x in xs]
    assert not one.compiled
    one.jit.buy()
    assert one.compiled and one.jit.compile_time > 0
    for x, expected in zip(xs, uncompiled, strict=True):
        got = one(x, P)
        assert got.shape == expected.shape and np.isfinite(got).all()
        np.testing.assert_array_max_ulp(got, expected, maxulp=2)  # equal on the machine it was written on
        bound = one.at(P)
        np.testing.assert_array_equal(bound(x), got)
        np.testing.assert_array_equal(bound(x, 1e15), 1e15 * got)  # e^tau times the field, rounded once as NumPy's


@pytest.mark.parametrize("spec", [DECAY, SQUARE, LEAPFROG], ids=["decay", "square", "leapfrog"])
def test_the_printed_expressions_are_lambdifys(spec):
    """The compiled source's subexpressions and outputs are the lines lambdify printed for the uncompiled
    function, character for character (the same operations in the same order), but for integer exponents written
    as floats (x**2.0, x**-3.0 for lambdify's x**2, x**(-3): the same number in Python)."""
    _, outputs = expressions(spec)
    one = OneState(*outputs["rhs"])
    source = specjit.source(*one.jit._printed, one.jit.shape)
    assert re.search(r"\*\*-?\d+\.0\b", source)  # such a power is in each of these fields
    printed = re.sub(r"\*\*(\d+)\.0\b", r"**\1", re.sub(r"\*\*-(\d+)\.0\b", r"**(-\1)", source)).splitlines()
    lambdified = inspect.getsource(one.fast).splitlines()
    body = [line for line in lambdified[1:] if not line.lstrip().startswith("[")]  # past the unpacking
    subexpressions = [line for line in printed if line.startswith("    x") and " = _" not in line]
    assert subexpressions == body[:-1]
    written = [line.split(" = _scale*(", 1)[1][:-1] for line in printed if line.startswith("    _out[")]
    assert body[-1] == f"    return [{', '.join(written)}]"


def test_it_compiles_once_the_rent_is_paid_and_not_before():
    one = fresh(SQUARE)
    lines = len(one.jit._printed[1]) + len(one.jit._printed[2])
    assert one.jit.choice.rent_seconds == specjit.compile_seconds(lines) > 0
    one.jit.choice.rent_seconds = 2e-4  # a few calls' worth, for the test
    x = states(SQUARE)[0]
    calls = 0
    while not one.compiled:
        assert one.jit.python_seconds < one.jit.choice.rent_seconds  # uncompiled while the rent is unpaid
        one(x, P)
        calls += 1
        assert calls < 10_000
    assert calls > 1 and one.jit.python_seconds >= one.jit.choice.rent_seconds
    paid = one.jit.python_seconds
    one(x, P)
    assert one.jit.python_seconds == paid  # compiled calls pay no rent


def test_a_solve_says_whether_its_field_ran_compiled(monkeypatch):
    """A spec's first solves run the field as Python; once their rent is paid it compiles, and a later solve
    begins compiled, with the same solution to its tolerance."""
    monkeypatch.setattr(specjit, "compile_seconds", lambda lines: 1e-3)
    spec = Spec("jit_test_decay", qk=C(weight_decay=2e-2), ov=C(weight_decay=2e-2))
    first = solve_spec(SETTING, spec, t_max=1e6, points=20)
    assert first.stats["field"] == "python"
    later = solve_spec(SETTING, spec, t_max=1e6, points=20)
    assert later.stats["field"] == "compiled"
    assert np.abs(later.state - first.state).max() <= 1e-8 * np.maximum(1.0, np.abs(first.state)).max()


def counted(one: OneState) -> list:
    """The calls of ``one``'s NumPy function, from now on (one entry each)."""
    calls: list = []
    slow = one.slow
    one.__dict__["slow"] = lambda x, p: calls.append(1) or slow(x, p)
    return calls


def test_an_overflowing_state_takes_the_numpy_path_compiled_as_uncompiled():
    """Far out the field's exp overflows: math raises and the uncompiled function answers with NumPy's; compiled,
    the outputs are not finite and it answers with the same NumPy function (the same values, NaN where NumPy's
    are)."""
    one = fresh(DECAY)
    far = states(DECAY)[0] * 1e3
    numpy_calls = counted(one)
    with np.errstate(all="ignore"):
        uncompiled = one(far, P)
        assert len(numpy_calls) == 1
        one.jit.buy()
        compiled = one(far, P)
        assert len(numpy_calls) == 2
        bound = one.at(P)(far, 2.0)
    assert not np.isfinite(compiled).all()
    np.testing.assert_array_equal(compiled, uncompiled)
    np.testing.assert_array_equal(bound, 2.0 * uncompiled)


def test_infinities_compiled_are_numpys():
    """An overflow that the rest of the expression absorbs (1 / (1 + e^800) = 0) is finite compiled, and NumPy's
    value (math raised uncompiled); a division by zero is not finite compiled, and answered by NumPy's function
    as uncompiled (where math raised)."""
    a, b, c = sp.symbols("a b c", real=True)
    one = OneState([[a, b], [c]], [1 / (1 + sp.exp(a)), b / c])
    numpy_calls = counted(one)
    with np.errstate(all="ignore"):
        uncompiled = one(np.array([800.0, 1.0]), np.array([1.0])), one(np.array([1.0, 1.0]), np.array([0.0]))
        assert len(numpy_calls) == 2
        one.jit.buy()
        absorbed = one(np.array([800.0, 1.0]), np.array([1.0]))
        assert len(numpy_calls) == 2
        divided = one(np.array([1.0, 1.0]), np.array([0.0]))
        assert len(numpy_calls) == 3
    np.testing.assert_array_equal(absorbed, uncompiled[0])
    np.testing.assert_array_equal(absorbed, [0.0, 1.0])
    np.testing.assert_array_equal(divided, uncompiled[1])
    assert divided[1] == np.inf


def test_arguments_it_is_not_compiled_for():
    """A state of the wrong length raises as uncompiled; a strided or integer state is converted; an array of
    states is NumPy's."""
    one = fresh(SQUARE)
    x = states(SQUARE)[0]
    with pytest.raises(ValueError):
        one(x[:-1], P)
    one.jit.buy()
    with pytest.raises(ValueError):
        one(x[:-1], P)
    strided = np.repeat(x, 2)[::2]
    np.testing.assert_array_equal(one.at(P)(strided), one(x, P))
    np.testing.assert_array_equal(one(np.zeros(len(x), dtype=int), P), one(np.zeros(len(x)), P))
    assert one(np.stack([x, x], axis=1), P).shape == (len(x), 2)


def test_a_name_that_is_not_a_python_name_is_refused():
    weird = sp.Symbol("lambda")
    with pytest.raises(ValueError, match="lambda"):
        specjit.source([[weird], []], [], [weird], (1,))


def test_a_function_numba_refuses_stays_python():
    """An integer constant beyond 64 bits is Python's int to math, a typing error to numba: the function keeps
    running uncompiled, its rent paid or not."""
    a, b = sp.symbols("a b", real=True)
    one = OneState([[a], [b]], [a * sp.Integer(10**30) + b])
    one.jit.choice.rent_seconds = 0.0
    assert one(np.array([2.0]), np.array([1.0]))[0] == 2.0 * 1e30 + 1.0  # paid the rent, and tried
    assert one.jit.refused is not None and not one.compiled
    assert one(np.array([3.0]), np.array([1.0]))[0] == 3.0 * 1e30 + 1.0
