"""Everything ``qkdyn derive`` prints, as one structured record per parameterisation.

Each entry is a sympy expression (rendered as text or LaTeX by the caller) or a plain string.
"""
from __future__ import annotations

import sympy as sp
from qkdyn.theory import invariants, model, sharpness
from qkdyn.theory.derived import derive


def paper_mapping() -> dict[str, sp.Expr]:
    """How the authors' constants map onto the exact CACO flow.

    Exact CACO at the level of (qk, ov): dqk/dt = -eta_QK M_QK dL/dqk, dov/dt = -eta_OV M_OV dL/dov
    with M_QK = s^2 (1/(KD) + 1/N), M_OV = 1/((K-1) D). The paper form has M_QK = 1/(M b^2),
    M_OV = 1/(b (M-1)). So M = K, b = D for the OV circuit, and the QK constants agree only when
    s^2 = N / (D (N + K D)) (otherwise the paper's QK rate is off by the ratio below).
    """
    exact_qk = invariants.metric(model.qk_circuit("collapsed"))
    exact_ov = invariants.metric(model.ov_circuit("collapsed"))
    paper_qk, paper_ov = (invariants.metric(c) for c in model.paper_circuits())
    b_match = sp.solve(sp.Eq(paper_ov, exact_ov), model.b)[0]
    s_match = sp.solve(sp.Eq(paper_qk.subs(model.b, b_match), exact_qk), model.s)[0]
    return {"M": model.K, "b (from the OV rate)": b_match, "s making the QK rates agree": s_match,
            "exact QK rate / paper QK rate (with b = D)": sp.simplify(exact_qk / paper_qk.subs(model.b, b_match))}


def summarise(name: str) -> dict:
    """Everything ``qkdyn derive`` prints: the public :func:`~qkdyn.theory.derived.derive` result with
    the orbit bookkeeping, the initial state, the A4 derivative and proof, and the rate factors."""
    d, derived = model.derive(name), derive(name)
    record = {
        "parameterisation": name,
        "variables": [{"name": v.name, "circuit": v.circuit, "orbit_size": v.orbit, "meaning": v.meaning}
                      for v in d.variables],
        "qk": derived.qk, "ov": derived.ov, "attn": derived.attn, "loss": derived.loss,
        "ode": {v.name: sp.simplify(derived.ode[v.symbol]) for v in d.variables},
        "initial_state": {sym.name: value for sym, value in d.init.items()},
        "conserved": derived.invariants,
        "gradient_ratio dL/dqk / dL/dov": invariants.gradient_ratio(),
        "metric M_QK (rate of qk per -eta_QK dL/dqk)": derived.metric[0],
        "metric M_OV (rate of ov per -eta_OV dL/dov)": derived.metric[1],
        "line": dict(zip(("Phi(qk)", "Psi(ov)"), derived.line, strict=True)),
        "law ov(t)": derived.laws["ov(t)"],
        "law qk(ov)": derived.laws["qk(ov)"],
        "growth in log t": derived.growth,
        "line normal form: dPhi/dqk = A (m e^qk + n) / (n sqrt(qk^2 + beta^2)) (beta = 0: no root)":
            dict(zip(("A", "beta"), sharpness.line_normal_form(name), strict=True)),
        "A4: d attn / d rho at fixed loss (implicit differentiation)": {
            "general": sharpness.a4_general(),
            "this parameterisation": sharpness.a4_derivative(name),
            "sign proof (each step checked by sympy)": {step: ("holds" if ok else "NOT shown")
                                                        for step, ok in sharpness.a4_proof(name).items()},
        },
        "time to loss at frozen attention (rho = 0), z = alpha0 ov": sharpness.frozen_time_law(name),
    }
    if name != "paper":
        record["rate factor R_QK (A1)"] = invariants.rate_factor(d.qk_circuit)
        record["rate factor R_OV (A1)"] = invariants.rate_factor(d.ov_circuit)
    else:
        record["mapping to the exact CACO flow"] = paper_mapping()
    return record


def summarise_spec(spec) -> dict:
    """What ``qkdyn derive --spec FILE`` prints for a :class:`~qkdyn.theory.spec.Spec`: the orbits found,
    the collapsed entries, the population loss, the reduced flow, the init, the conserved polynomials
    and the rate factors (:mod:`qkdyn.theory.specflow`)."""
    import dataclasses

    from qkdyn.theory import specclosed
    from qkdyn.theory.specflow import derive_spec

    d = derive_spec(spec)
    return {
        "spec": {key: (dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else
                       "none" if value is None else str(value)) for key, value in vars(spec).items()},
        "variables": [{"name": v.name, "circuit": v.circuit, "orbit_size": v.orbit, "meaning": v.meaning}
                      for v in d.variables],
        "collapsed entries": {f"W_{c}[{key}]": value for c, entries in d.features.items() for key, value in entries.items()},
        "qk": d.qk, "ov": d.ov, "attn": d.attn, "loss": d.loss,
        **({"penalty (weight decay)": d.penalty, "objective (loss + penalty: what the flow descends)": d.objective}
           if d.penalty != 0 else {}),
        "ode": {v.name: rhs for v, rhs in zip(d.variables, d.rhs, strict=True)},
        "initial_state": {sym.name: value for sym, value in d.init.items()},
        "conserved": {c: value if isinstance(value, str) else
                      {f"I_{c}{i + 1}": e for i, e in enumerate(value)} or "none up to degree 2"
                      for c, value in d.invariants.items()},
        **({"rational first integrals (weight decay)": {f"R_{c}{i + 1}": e for c, found in d.rational_integrals.items()
                                                        for i, e in enumerate(found)},
            "balanced manifold (invariant: every balance 0)": {f"B_{c}{i + 1}": b for c, found in d.balances.items()
                                                               if getattr(spec, c.lower()).weight_decay
                                                               for i, b in enumerate(found)}}
           if d.penalty != 0 else {}),
        "metric M_QK (rate of qk per -eta_QK dL/dqk)": d.metrics["QK"]["metric"],
        "metric M_OV (rate of ov per -eta_OV dL/dov)": d.metrics["OV"]["metric"],
        "rate factor R_QK (A1, against the collapsed QK circuit)": d.metrics["QK"]["rate_factor"],
        "rate factor R_OV (A1, against the collapsed OV circuit)": d.metrics["OV"]["rate_factor"],
        "closed forms (first-integral line, late-time laws, matched loss)": specclosed.statements(spec),
    }
