"""The theory study (qkdyn.study_theory): one typed config whose budgets are its instances, a measure that
returns evidence only and draws nothing, and a render that draws every figure the claims name from the run
records alone."""
from __future__ import annotations

import dataclasses
import json

import matplotlib.figure
import pytest

from qkdyn.configflags import check_config, domain_of
from qkdyn.studies import BUDGETS, Record, RunSpec, save
from qkdyn.study_theory import FULL, QUICK, TheoryConfig, TheoryStudy, describe


def test_every_budget_is_the_one_config_and_equal_budgets_are_one_instance():
    budgets = TheoryStudy.budgets
    assert tuple(budgets) == BUDGETS and TheoryStudy.config_class is TheoryConfig
    assert all(type(cfg) is TheoryConfig for cfg in budgets.values())
    assert budgets["cpu"] is budgets["gpu"] is budgets["paper"] is FULL and budgets["quick"] is QUICK
    assert FULL == TheoryConfig() and QUICK != FULL
    for cfg in (QUICK, FULL):
        check_config(cfg)
        assert 1.0 in cfg.sweep_rhos and 1.0 in cfg.cq_rhos  # equal rates (A5) and the reference path (CQ1, CQ2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        QUICK.t_max = 1.0  # type: ignore[misc]


def test_the_user_settable_fields_declare_their_domains():
    declared = {f.name for f in dataclasses.fields(TheoryConfig) if domain_of(f) is not None}
    assert declared == {f.name for f in dataclasses.fields(TheoryConfig)} - {"sweep_rhos", "phase_rhos", "cq_variants"}
    with pytest.raises(Exception, match="phase_rows"):
        check_config(dataclasses.replace(QUICK, phase_rows=0))


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_plan_is_read_from_the_budgets_config(budget):
    cfg, study = TheoryStudy().budget(budget), TheoryStudy(full_model=False)
    specs = study.plan(budget)
    assert [s.name for s in specs] == ["a1", "a2", "a3", "a45", "coupled", "overview"]
    fields = dataclasses.asdict(cfg)
    for spec in specs:
        params = {k: v for k, v in spec.params.items() if k != "full_model"}
        assert params == json.loads(json.dumps({k: fields[k] for k in params}))
        study.check(spec)
    assert specs[0].params["full_model"] is False
    plan = study.context(budget)["plan"]
    assert plan == {k: describe(v) for k, v in fields.items()} and plan["phase_rows"] == cfg.phase_rows


@pytest.fixture(scope="module")
def quick_records(tmp_path_factory):
    """Every run of the quick plan (A1 without torch), measured with matplotlib's figures made to raise when one is
    made or saved, kept as records the way ``qkdyn verify`` keeps them."""
    runs = tmp_path_factory.mktemp("runs")
    study = TheoryStudy(full_model=False)
    monkeypatch = pytest.MonkeyPatch()

    def refuse(*args, **kwargs):
        raise AssertionError("the theory study's measure drew a figure")

    monkeypatch.setattr(matplotlib.figure.Figure, "__init__", refuse)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", refuse)
    try:
        records = [study.run(spec, runs) for spec in study.plan("quick")]
    finally:
        monkeypatch.undo()
    return study, records


@pytest.mark.slow
def test_measure_returns_evidence_only_and_draws_nothing(quick_records):
    _, records = quick_records
    for record in records:
        assert set(record.result) == {"evidence", "files"} and record.result["files"] == []
        assert list(record.scratch.iterdir()) == []
        assert "plots" not in json.dumps(record.result)


@pytest.mark.slow
def test_render_draws_every_figure_the_claims_name_from_the_records(quick_records, tmp_path):
    study, records = quick_records
    claims = study.claims(records, "quick")
    assert [c.id for c in claims] == list(study.claim_names)
    extra = study.render(records, claims, tmp_path)
    named = {plot for claim in claims for plot in claim.plots} | set(extra)
    assert extra == ["trajectories.png", "phase_portrait.png"]
    assert named == {p.name for p in tmp_path.glob("*.png")} == {
        "a1_rate_factor.png", "a2_line.png", "a3_growth.png", "a4_attn_vs_loss.png", "a4_a5_attn_at_matched_loss.png",
        "a5_phase_diagrams.png", "cq4_matched_loss.png", "trajectories.png", "phase_portrait.png"}
    assert all((tmp_path / name).with_suffix(".pdf").is_file() for name in named)


def test_a_record_whose_run_drew_its_figures_has_them_copied_not_drawn(tmp_path):
    """Records made while measures still drew list their figures (``files``): render copies those."""
    spec = RunSpec.make("theory", "a2", t_max=1e5, a2_rhos=[1.0])
    scratch = tmp_path / "runs" / "theory" / "a2"
    scratch.mkdir(parents=True)
    (scratch / "a2_line.png").write_bytes(b"drawn by the run")
    record = save(Record(spec, {"evidence": {"t_max": 1e5}, "files": ["a2_line.png"]}, scratch), tmp_path / "runs")
    TheoryStudy().render([record], [], tmp_path / "figures")
    assert (tmp_path / "figures" / "a2_line.png").read_bytes() == b"drawn by the run"
