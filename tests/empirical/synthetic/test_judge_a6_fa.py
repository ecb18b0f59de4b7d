"""Claims A6, A6-adam (study ``a6``) and FA (study ``fixed-attention``) judged from hand-written records.

Every record is made here (no training); the verdicts come through the studies' public
``claims(records, budget)`` (and :func:`qkdyn.studies.judge` for missing runs), the path a real run's
record takes. FA's judge solves the frozen-QK flow itself (deterministic, cached): the factory asks the
same :func:`fixed_attention.theory` for the curves it scales.

Outcomes by design:

* A6: every part is a pass/fail check (:func:`qkdyn.claims.parts_from_checks`), so from complete records it
  is holds, fails or partial, never inconclusive; only missing runs make it inconclusive.
* A6-adam: holds, fails, partial, and inconclusive by its two preconditions.
* FA: the magnitude part (sampled -dL/dalpha within 2x of the theory's, both at fixed weights) is holds/fails
  only, so from complete records FA is holds, fails or partial (a noisy comparison leaves the others
  inconclusive and FA partial), never inconclusive; only missing runs make it inconclusive.
"""
from __future__ import annotations

import math
import types
from pathlib import Path

import numpy as np
import pytest
from qkdyn.empirical.synthetic import claim_a6, stability
from qkdyn.empirical.synthetic import fixed_attention as fa

from qkdyn.claims import VERDICTS
from qkdyn.studies import Record, get, judge

NAN = math.nan
PARAMS = ("CACO", "FAFO")


# -- A6 and A6-adam ------------------------------------------------------------------------------------------


def _gd_sgd(cfg, order=2.0, error=1e-3, deviations=None):
    """The evidence of :func:`claim_a6.gd_and_sgd`: GD error ``error`` at the finest step, divided by ``order``
    per halving; SGD deviation per batch (default: halving with each batch)."""
    steps, batches = cfg["steps"], cfg["sgd_batches"]
    errors = {p: [error * order ** (len(steps) - 1 - i) for i in range(len(steps))] for p in PARAMS}
    deviations = list(deviations if deviations is not None else [0.1 / 2 ** i for i in range(len(batches))])
    return {"setting": "hand-written", "t_max": cfg["T"], "steps": steps, "gd_error": errors,
            "gd_error_ratio": {p: [order] * (len(steps) - 1) for p in PARAMS}, "sgd_param": "FAFO",
            "sgd_step": steps[0], "sgd_batches": batches, "sgd_seeds": 1, "sgd_deviation": deviations,
            "sgd_max_sym_dist": [1e-9] * len(batches), "sgd_slope_vs_log_batch": -0.5,
            "sgd_b32_final_sym_dist_from_design_init": {p: 1e-9 for p in PARAMS}}


def _nonsym():
    one = {"sym_dist_start": 0.1, "sym_dist_end": 0.05, "sym_dist_max": 0.1, "loss_end": 0.1,
           "qk_ov_error_vs_ode_end": 0.01}
    return {"sigma": 0.05, "step": 0.04, "batch": 32, "CACO": dict(one), "FAFO": dict(one)}


def _long(follows=(True, True)):
    return [{"rho": rho, "steps": 10_000, "t": 200.0, "t_ode": 200.0, "time_error": 1e-4 if ok else 0.1,
             "distance_from_subspace": 1e-4 if ok else 0.5, "linearised_prediction": 1e-4,
             "deviation": 1e-4 if ok else 0.5, "follows": ok} for rho, ok in zip(claim_a6.LONG["rhos"], follows, strict=True)]


def _adam_row(param="CACO", rho=1.0, adam_max=2e-6, gd_max=1e-6, start=1e-6, gap=0.001):
    """One row of :func:`claim_a6.adam` (as in test_adam.py): defaults make both parts hold."""
    return {"param": param, "rho": rho, "steps": 10, "loss": 0.3, "attn_adam": 0.5 + gap, "attn_ode": 0.5,
            "t_ode": 1.0, "start_distance": start, "adam_max_distance": adam_max, "adam_end_distance": adam_max,
            "adam_leaves_at_step": 1 if adam_max > stability.TOLERANCE else None, "gd_max_distance": gd_max,
            "gd_end_distance": gd_max, "recorded_steps": [0, 10], "adam_distance": [start, adam_max],
            "gd_distance": [start, gd_max]}


def _adam_rows(cfg, **kw):
    """A row per (param, rho) of the plan, each with ``kw``; ``last`` (a dict) edits the last row only."""
    last = kw.pop("last", {})
    rows = [_adam_row(p, rho, **kw) for p in cfg["adam_params"] for rho in cfg["adam_rhos"]]
    rows[-1].update(last)
    return rows


def _a6_records(budget="quick", *, gd=None, nonsym=None, adam=None, long=None, drop=()):
    """Records of the a6 plan at ``budget`` from hand-written evidence (``drop``: run names left out)."""
    study = get("a6")
    specs = study.plan(budget)
    cfg = specs[0].params
    evidence = {"gd_sgd": gd if gd is not None else _gd_sgd(cfg), "nonsymmetric": nonsym or _nonsym(),
                "adam": adam if adam is not None else _adam_rows(cfg), "long_horizon": long or _long()}
    return study, specs, {s: Record(s, {"evidence": evidence[s.name]}, Path()) for s in specs if s.name not in drop}


def _a6_claims(**kw):
    study, specs, records = _a6_records(**kw)
    claims = {c.id: c for c in study.claims(list(records.values()), "quick")}
    assert set(claims) == set(study.claim_names) == {"A6", "A6-adam"}
    return claims


def _cfg(budget="quick"):
    return get("a6").plan(budget)[0].params


A6_PARTS = {"order": "GD error is first order in the step", "small": "GD error < 2e-3 at the finest step",
            "sgd": "SGD deviation shrinks with the batch"}


def test_a6_holds_when_every_check_passes():
    a6 = _a6_claims()["A6"]
    assert a6.verdict == "holds" and set(a6.parts.values()) == {"holds"}
    assert len(a6.parts) == 3 + len(claim_a6.LONG["rhos"])  # one part per long-horizon rho


def test_a6_fails_when_every_check_fails():
    cfg = _cfg()
    a6 = _a6_claims(gd=_gd_sgd(cfg, order=3.0, error=1e-2, deviations=[0.1] * len(cfg["sgd_batches"])),
                    long=_long((False, False)))["A6"]
    assert a6.verdict == "fails" and set(a6.parts.values()) == {"fails"}


@pytest.mark.parametrize("broken", ["order", "small", "sgd", "long"])
def test_a6_is_partial_when_one_check_fails(broken):
    cfg = _cfg()
    gd = {"order": _gd_sgd(cfg, order=1.5), "small": _gd_sgd(cfg, error=5e-3),
          "sgd": _gd_sgd(cfg, deviations=[0.1, 0.2] + [0.3] * (len(cfg["sgd_batches"]) - 2))}.get(broken, _gd_sgd(cfg))
    a6 = _a6_claims(gd=gd, long=_long((True, False)) if broken == "long" else None)["A6"]
    assert a6.verdict == "partial"
    failed = [name for name, v in a6.parts.items() if v == "fails"]
    assert len(failed) == 1 and (A6_PARTS[broken] == failed[0] if broken in A6_PARTS else "rho = 50" in failed[0])


@pytest.mark.parametrize("where", ["finest error", "ratio", "deviation"])
def test_a6_a_nan_measurement_fails_its_part_never_holds(where):
    cfg = _cfg()
    gd = _gd_sgd(cfg)
    if where == "finest error":
        gd["gd_error"]["FAFO"][-1] = NAN
    elif where == "ratio":
        gd["gd_error_ratio"]["FAFO"][-1] = NAN
    else:
        gd["sgd_deviation"][1] = NAN
    a6 = _a6_claims(gd=gd)["A6"]
    part = {"finest error": A6_PARTS["small"], "ratio": A6_PARTS["order"], "deviation": A6_PARTS["sgd"]}[where]
    assert a6.parts[part] == "fails" and a6.verdict == "partial"


def test_a6_with_one_step_size_or_one_batch_shows_nothing_and_fails_not_holds():
    """A check over no pairs (one GD step size, one SGD batch size) used to hold vacuously."""
    cfg = dict(_cfg(), steps=[0.02], sgd_batches=[32])
    a6 = _a6_claims(gd=_gd_sgd(cfg))["A6"]
    assert a6.parts[A6_PARTS["order"]] == a6.parts[A6_PARTS["sgd"]] == "fails"


def test_a6_is_never_inconclusive_from_complete_records_only_from_missing_runs():
    """By design: A6's parts are pass/fail checks, so complete records (NaN included) give holds, fails or
    partial; a missing run makes both claims of the study inconclusive, "k of n runs"."""
    cfg = _cfg()
    nan_gd = _gd_sgd(cfg, order=NAN, error=NAN, deviations=[NAN] * len(cfg["sgd_batches"]))
    for kw in ({}, {"gd": nan_gd}, {"long": _long((False, True))}):
        a6 = _a6_claims(**kw)["A6"]
        assert a6.verdict != "inconclusive" and set(a6.parts.values()) <= {"holds", "fails"}
    study, specs, records = _a6_records(drop=("adam",))
    claims = judge(study, "quick", specs, records)
    assert [c.id for c in claims] == ["A6", "A6-adam"]
    assert all(c.verdict == "inconclusive" and f"{len(specs) - 1} of {len(specs)} runs" in c.summary for c in claims)


def test_long_horizon_a_nan_time_error_does_not_follow_the_ode(monkeypatch):
    """The measurement behind A6's long-horizon parts: Python's max(finite, NaN) is the finite one, so a NaN
    time error used to leave ``follows`` True on the distance alone."""
    run = types.SimpleNamespace(steps=10, t=NAN, t_reduced=200.0, time_error=NAN, transverse=1e-5, predicted=1e-5)
    monkeypatch.setattr(stability, "perturbed_gd", lambda *a, **k: run)
    rows = claim_a6.long_horizon()
    assert all(math.isnan(r["deviation"]) and r["follows"] is False for r in rows)


def _adam(rows):
    claim = _a6_claims(adam=rows)["A6-adam"]
    assert claim.verdict in VERDICTS and len(claim.preconditions) == 2
    return claim


def test_a6_adam_holds_fails_partial_and_inconclusive():
    cfg = _cfg()
    holds = _adam(_adam_rows(cfg))
    assert holds.verdict == "holds" and all(p["met"] for p in holds.preconditions)
    assert _adam(_adam_rows(cfg, adam_max=1e-2, gap=0.1)).verdict == "fails"
    partial = _adam(_adam_rows(cfg, adam_max=1e-2))  # leaves the subspace, attn still the ODE's
    assert partial.verdict == "partial" and sorted(partial.parts.values()) == ["fails", "holds"]
    for kw, unmet in (({"gd_max": 5e-3}, "GD from the same start"), ({"start": 1e-14}, "round-off")):
        gated = _adam(_adam_rows(cfg, **kw))
        assert gated.verdict == "inconclusive" and set(gated.parts.values()) == {"inconclusive"}
        (name,) = [p["name"] for p in gated.preconditions if not p["met"]]
        assert unmet in name


@pytest.mark.parametrize("last, verdict", [
    ({"attn_adam": NAN}, "partial"),  # attn part fails: a NaN gap after the first row was skipped by max()
    ({"gd_max_distance": NAN}, "inconclusive"),  # the GD precondition is not measured: unmet
    ({"start_distance": NAN}, "inconclusive"),  # the start is not measured: unmet
])
def test_a6_adam_a_nan_in_any_row_never_makes_it_hold(last, verdict):
    claim = _adam(_adam_rows(_cfg(), last=last))
    assert claim.verdict == verdict
    if verdict == "partial":
        assert claim.parts["Adam's attn at the loss target is the ODE's at the same loss (within 0.02)"] == "fails"
        assert math.isnan(claim.evidence["max_attn_gap"])
    else:
        assert any(p["value"] != p["value"] and not p["met"] for p in claim.preconditions)


# -- FA -------------------------------------------------------------------------------------------------------


def _fa_records(budget="quick", *, slope=1.0, scale=1.0, noisy=False, nan=None, drop=()):
    """Records of the fixed-attention plan (one per OV form). Last-checkpoint loss 1.4 - 0.1 slope alpha plus a
    per-seed offset shared by every alpha (paired by seed); -dL/dalpha = ``scale`` x the frozen-QK theory's,
    x (1 + 1e-3 seed). ``noisy``: per-seed effects of alternating sign (no comparison can be decided).
    ``nan``: (form, alpha, seed, "loss" or "fall") set to NaN at every checkpoint."""
    study = get("fixed-attention")
    specs = study.plan(budget)
    records = {}
    for spec in specs:
        p = spec.params
        t = np.linspace(0.0, 10.0, p["checkpoints"])
        runs = []
        for alpha in p["alphas"]:
            _, theory_fall = fa.theory(alpha, p["form"], t)
            for seed in p["seeds"]:
                sign = (-1) ** seed if noisy else 1
                loss = 1.4 - 0.1 * slope * alpha * sign * t / t[-1] + 0.01 * seed
                fall = scale * sign * theory_fall * (1 + 1e-3 * seed)
                run = {"alpha": alpha, "seed": seed, "t": t.tolist(), "loss": loss.tolist(), "fall": fall.tolist(),
                       "attn_distinct": alpha}
                if nan and nan[:3] == (p["form"], alpha, seed):
                    run[nan[3]] = [NAN] * len(t)
                runs.append(run)
        if spec.name not in drop:
            records[spec] = Record(spec, {"runs": runs}, Path())
    return study, specs, records


def _fa(**kw):
    study, _, records = _fa_records(**kw)
    (claim,) = study.claims(list(records.values()), "quick")
    assert claim.id == "FA" == study.claim_names[0]
    return claim


def _magnitude(form):
    return f"{form}: sampled -dL/dalpha within {fa.MAGNITUDE_FACTOR:g}x of the frozen-QK theory"


def test_fa_holds_when_the_loss_falls_with_alpha_at_the_theory_s_rate():
    claim = _fa()
    assert claim.verdict == "holds" and set(claim.parts.values()) == {"holds"}
    assert all(r == pytest.approx(1.0, rel=1e-2) for r in claim.evidence["sampled_over_theory"].values())


def test_fa_reports_the_derivative_across_trajectories_and_decides_nothing_by_it():
    """The theory's -dL/dalpha between two flows at alpha +- delta is evidence only: records at the theory's rate
    at fixed weights hold although against it the factorized alpha = 1 ratio is below 1/2 (0.39 at t = 10)."""
    claim = _fa()
    across = claim.evidence["across_trajectories"]
    assert across["delta"] == fa.DELTA and claim.verdict == "holds"
    for row in claim.table:
        key = f"{row['form']} alpha={row['alpha']:g}"
        assert across["theory_minus_dL_dalpha"][key] == row["theory_minus_dL_dalpha_across_trajectories"]
        assert across["sampled_over_theory"][key] == pytest.approx(
            row["minus_dL_dalpha"] / row["theory_minus_dL_dalpha_across_trajectories"], rel=1e-12)
    assert across["sampled_over_theory"]["factorized alpha=1"] < 1 / fa.MAGNITUDE_FACTOR


def test_fa_fails_when_the_loss_rises_with_alpha():
    claim = _fa(slope=-1.0, scale=-1.0)
    assert claim.verdict == "fails" and set(claim.parts.values()) == {"fails"}


@pytest.mark.parametrize("scale", [9.0, 0.2])
def test_fa_is_partial_when_only_the_magnitude_disagrees_with_the_theory(scale):
    claim = _fa(scale=scale)
    assert claim.verdict == "partial"
    assert {k for k, v in claim.parts.items() if v == "fails"} == {_magnitude("collapsed"), _magnitude("factorized")}


def test_fa_is_never_inconclusive_from_complete_records_only_from_missing_runs():
    """By design: undecided comparisons leave their parts inconclusive, but the magnitude part is holds/fails,
    so FA is partial; a missing run makes it inconclusive, "k of n runs"."""
    claim = _fa(noisy=True)
    assert claim.verdict == "partial"
    assert {k for k, v in claim.parts.items() if v != "inconclusive"} == {_magnitude("collapsed"),
                                                                         _magnitude("factorized")}
    study, specs, records = _fa_records(drop=("factorized",))
    (missing,) = judge(study, "quick", specs, records)
    assert missing.verdict == "inconclusive" and f"1 of {len(specs)} runs" in missing.summary


@pytest.mark.parametrize("what", ["loss", "fall"])
def test_fa_a_nan_measurement_never_makes_a_part_hold(what):
    claim = _fa(nan=("collapsed", 0.6, 1, what))
    touched = ([k for k in claim.parts if k.startswith("collapsed: loss at alpha") and "0.6" in k] if what == "loss"
               else ["collapsed: -dL/dalpha > 0 at alpha 0.6"])
    assert touched and all(claim.parts[k] == "inconclusive" for k in touched)
    if what == "fall":  # the mean over seeds is NaN: the magnitude cannot be within 2x
        assert claim.parts[_magnitude("collapsed")] == "fails"
    assert claim.verdict == "partial"
