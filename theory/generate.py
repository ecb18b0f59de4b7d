"""Write the numeric modules of every parameterisation from the sympy derivation.

    python -m qkdyn.theory.generate           # rewrite qkdyn/theory/generated/NAME.py
    python -m qkdyn.theory.generate --check   # exit 1 if a committed module differs from the derivation

Run it after changing the derivation (``model``, ``invariants``, ``asymptotics``, ``sharpness``,
``functions`` or ``codegen``) and commit the result; tests/theory/test_generated.py fails while they differ.
The modules are package code, like any other source file: at run time nothing is derived, cached or
executed from a data directory (:mod:`qkdyn.theory.compiled` only imports them).

Generated functions (x: the reduced state, p: Setting.numeric(); vector functions broadcast):
    kernel_parameters(p) -> k                 p and its constants for the kernels  [scalar]
    balanced_kernel_parameters(p, kappa)      p, kappa and their constants for the balanced kernels [vector]
    balanced_lanes_kernel(x, k, scale, out, lanes)  C-callable scale * (dqk/dt, dov/dt) on the balanced
                                              manifold at x = (qk, ov) (invariants.balanced_flow) [kernel]
    balanced_loss_kernel(x, k)                C-callable L(qk, ov), eq. (2), on those parameters [kernel]
    rhs_into(x, k, out), jac_into(x, k, out)  eq. (1) and its Jacobian            [kernel]
    state_loss(x, k)                          L(qk(x), ov(x)), eq. (2)              [kernel]
    rhs_lanes_kernel(x, k, scale, out, lanes) C-callable scale * eq. (1) at many states (lanes) [kernel]
    loss_kernel(x, k)                         C-callable state_loss                [kernel]
    psi_gain_kernel(x, p), m_ov_kernel(x, p)  C-callable psi_gain (x = (a, s)) and the balanced M_OV
                                              (x = (qk, ov, kappa)) on the plain p   [kernel]
    init(p, qk0, ov0)                         balanced initial state               [scalar]
    balanced_start(p, qk0, ov0)               (qk, ov, kappa) of that state        [vector]
    features(X, p) -> (qk, ov)                                                     [vector]
    attention(qk, p), loss(qk, ov, p)         alpha and L, eq. (2)                 [vector]
    invariants(X, p) -> tuple                 the named first integrals            [vector]
    metrics(X, p) -> (M_QK, M_OV)             rate of each feature per -eta dL/df  [vector]
    balanced_metrics(qk, ov, kappa, p)        their closed forms on balanced states [vector]
    kappa(X, p)                               the conserved kappa of a factorized QK [vector]
    dphi(qk, kappa, p), psi(ov, p)            the line Phi(qk) - rho Psi(ov)       [vector]
    psi_gain(a, s, p)                         Psi(a + s) - Psi(a), factored (no cancellation) [vector]
    line_scale(kappa, p) -> (A, beta)         its normal form (qkdyn.theory.sharpness) [vector]
    ov_law(t, p), qk_law(ov, p)               late-time laws (A3)                  [vector]
    LAW_POWERS = (i, j, d)                    their powers: e^qk / qk^i = C ov^d, e^ov / ov^j = T
    A4_PROOF = ((step, holds), ...)           claim A4's proof steps (sympy, at generation)
    qk_law_constant(p)                        C in e^qk / qk^i = C ov^j (A3)       [vector]
    frozen_time(z, alpha0, z0, p)             t(z) at frozen attention, z = alpha0 ov (rho = 0,
                                              qkdyn.theory.sharpness.frozen_time_law)  [vector]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import sympy as sp
from qkdyn.theory import asymptotics, codegen, invariants, model, sharpness
from qkdyn.theory.setting import ALL_PARAMS

GENERATED = Path(__file__).parent / "generated"


def generate_source(name: str) -> str:
    """The Python source of the numeric module for parameterisation ``name``."""
    d = model.derive(name)
    x, p = d.symbols, model.PARAMS
    qk, ov, kappa = model.qk, model.ov, invariants.kappa
    named = invariants.first_integrals(d)
    dphi, _ = invariants.line_integrands(d)
    _, psi = invariants.line_coordinates(d)
    # Psi(a + s) - Psi(a) as sympy factors it (e.g. c s (2a + s)): accurate to round-off relative to the
    # difference itself, where the subtraction of two doubles would lose eps Psi(a) (issue 21)
    start, step = sp.symbols("ov_start ov_step", real=True)
    psi_gain = sp.factor(psi.subs(ov, start + step) - psi.subs(ov, start))
    laws = asymptotics.laws(d)
    qk_law = asymptotics.qk_law(name)
    power = int(sp.degree(qk_law.argument, ov))
    src = codegen.header()
    src += f"DIM = {len(x)}\n"
    src += f"VARIABLES = {tuple(v.name for v in d.variables)!r}\n"
    src += f"INVARIANT_NAMES = {tuple(named)!r}\n"
    degrees = tuple(int(sp.Poly(expr, *x).total_degree()) for expr in named.values())
    src += f"INVARIANT_DEGREES = {degrees!r}\n"
    # the late-time laws' powers (qkdyn.theory.asymptotics): e^qk / qk^i = C ov^d, e^ov / ov^j = T
    src += f"LAW_POWERS = {(qk_law.power, laws['ov'].power, power)!r}\n"
    # claim A4's sign argument, each step proved by sympy here (qkdyn.theory.sharpness.a4_proof)
    src += "A4_PROOF = (\n" + "".join(f"    ({k!r}, {v!r}),\n" for k, v in sharpness.a4_proof(name).items()) + ")\n\n\n"
    constants = codegen.ParameterConstants(p)
    rhs, loss = [constants(e) for e in d.rhs], [constants(d.loss)]
    jac = d.jacobian.applyfunc(constants)
    extended = tuple(p) + tuple(constants.table.values())
    src += codegen.function_source("rhs_into", [x, extended], rhs, "kernel")
    src += codegen.function_source("jac_into", [x, extended], jac, "kernel")
    src += codegen.function_source("state_loss", [x, extended], loss, "kernel", single=True)
    src += codegen.lanes_kernel_source("rhs_lanes_kernel", x, extended, rhs, constants.table)
    src += codegen.scalar_wrapper("loss_kernel", "state_loss", len(x), len(extended)) + "\n\n"
    # the matched-loss kernels of qkdyn.simulate.closedform (on the plain parameters p), through their C addresses
    src += codegen.function_source("psi_gain_at", [(start, step), p], [psi_gain], "kernel", single=True, only_used=True)
    src += codegen.function_source("m_ov_at", [(qk, ov, kappa), p], [invariants.balanced_metric(d.ov_circuit)],
                                   "kernel", single=True, only_used=True)
    src += codegen.scalar_wrapper("psi_gain_kernel", "psi_gain_at", 2, len(p)) + "\n\n"
    src += codegen.scalar_wrapper("m_ov_kernel", "m_ov_at", 3, len(p)) + "\n\n"
    src += codegen.function_source("kernel_parameters", [p], list(p) + list(constants.table), "scalar")
    # the balanced flow of the features alone (qkdyn.theory.invariants.balanced_flow), for qkdyn.simulate.sweep
    balanced = codegen.ParameterConstants(tuple(p) + (kappa,))
    flow, flow_loss = [balanced(e) for e in invariants.balanced_flow(d)], [balanced(model.reduced_loss(qk, ov))]
    on_manifold = (*p, kappa, *balanced.table.values())
    src += codegen.lanes_kernel_source("balanced_lanes_kernel", (qk, ov), on_manifold, flow, balanced.table)
    src += codegen.function_source("balanced_loss", [(qk, ov), on_manifold], flow_loss, "kernel", single=True)
    src += codegen.scalar_wrapper("balanced_loss_kernel", "balanced_loss", 2, len(on_manifold)) + "\n\n"
    src += codegen.function_source("balanced_kernel_parameters", [p, kappa], [*p, kappa, *balanced.table], "vector",
                                   like=[kappa])
    init = [d.init[sym] for sym in x]
    src += codegen.function_source("init", [p, model.qk0, model.ov0], init, "scalar")
    # the features and kappa of that state, in one vector call over many settings (qkdyn.simulate.sweep)
    on_init = [sp.sympify(e).subs(d.init) for e in (d.qk, d.ov, invariants.kappa_of(d.qk_circuit))]
    src += codegen.function_source("balanced_start", [p, model.qk0, model.ov0], on_init, "vector",
                                   like=[model.qk0, model.ov0])
    vector = [  # name, arguments, outputs, shape-giving arguments, single output
        ("features", [x, p], [d.qk, d.ov], [x], False),
        ("attention", [qk, p], [model.attention(qk)], [qk], True),
        ("loss", [qk, ov, p], [model.reduced_loss(qk, ov)], [qk, ov], True),
        ("invariants", [x, p], list(named.values()) or [sp.S(0)], [x], False),
        ("metrics", [x, p], [invariants.metric(d.qk_circuit), invariants.metric(d.ov_circuit)], [x], False),
        ("balanced_metrics", [qk, ov, kappa, p],
         [invariants.balanced_metric(d.qk_circuit), invariants.balanced_metric(d.ov_circuit)], [qk, ov, kappa], False),
        ("kappa", [x, p], [invariants.kappa_of(d.qk_circuit)], [x], True),
        ("dphi", [qk, kappa, p], [dphi], [qk, kappa], True),
        ("psi", [ov, p], [psi], [ov], True),
        ("psi_gain", [start, step, p], [psi_gain], [start, step], True),
        ("line_scale", [kappa, p], list(sharpness.line_normal_form(name)), [kappa], False),
        ("ov_law", [model.t, p], [laws["ov"].solution], [model.t], True),
        ("qk_law", [ov, p], [laws["qk"].solution], [ov], True),
        ("qk_law_constant", [p], [sp.simplify(qk_law.argument / ov**power)], [], True),
        ("frozen_time", [sharpness.z, *sharpness.FROZEN_START, p], [sharpness.frozen_time_law(name)], [sharpness.z],
         True),
    ]
    for fname, args, outputs, like, single in vector:
        src += codegen.function_source(fname, args, outputs, "vector", like=like, single=single)
    return src.rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qkdyn.theory.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if a module is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name in ALL_PARAMS:
        path, source = GENERATED / f"{name}.py", generate_source(name)
        if not path.exists() or path.read_text() != source:
            stale.append(name)
            if not args.check:
                path.write_text(source)
    verb = "out of date" if args.check else "rewritten"
    print(f"{verb}: {', '.join(stale) or 'none'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
