"""A run record's ``files`` are checked against its study's declared outputs (``Study.outputs``): a record listing
a name its study does not write is refused in one line naming the record, before anything is created or copied,
and a run whose measure writes an undeclared file is not recorded. Each study's declaration is the names its
code writes (the constants it writes them under); the records of real quick runs pass (``Study.run`` checks
every run it records, so ``tests/qkdyn/test_verify.py``'s quick verify covers every torch study too)."""
from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

from qkdyn.claims import Claim
from qkdyn.cli import main
from qkdyn.errors import InputError
from qkdyn.studies import STUDIES, RunSpec, Study, get
from qkdyn.verify import drive


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a folder."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def _declared(study: Study, name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in study.outputs)


@pytest.mark.parametrize("listed", ["notes.txt", "checkpoint.pt", "a2_line.svg"])
@pytest.mark.parametrize("command", ["report", "verify"])
def test_a_record_listing_an_undeclared_file_is_one_line_and_nothing_is_copied(tmp_path, capsys, listed, command):
    """A plain name, but not one the theory study writes (another study's output, another kind of file): `report`
    and `verify --runs` refuse the record in one line naming it; nothing is created, copied or changed."""
    runs = tmp_path / "runs"
    spec = next(s for s in get("theory").plan("quick") if s.name == "a2")
    path = runs / "theory" / "a2.json"
    path.with_suffix("").mkdir(parents=True)
    (path.with_suffix("") / listed).write_text("planted")
    path.write_text(json.dumps({"spec": spec.to_dict(), "result": {"evidence": {}, "files": ["a2_line.png", listed]}}))
    before = _tree(tmp_path)
    argv = (["report", "theory", "--budget", "quick"] if command == "report"
            else ["verify", "--quick", "--skip-empirical", "--no-progress"])
    code = main([*argv, "--runs", str(runs), "--figures", str(tmp_path / "fig")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}: the record lists {listed!r}" in err and "does not write" in err
    assert _tree(tmp_path) == before


class _Drawing(Study):
    """A one-run study whose run draws ``a_1.png`` and whatever else ``extra`` names."""

    name = "drawing"
    title = "draws a figure"
    outputs = ("a_*.png",)

    def __init__(self, extra: tuple[str, ...] = ()):
        self.extra = extra

    def plan(self, budget):
        return [RunSpec.make(self.name, "r")]

    def measure(self, spec, scratch):
        for name in ("a_1.png", *self.extra):
            (scratch / name).write_text(name)
        return {"evidence": {"x": 1.0}}


def test_a_run_is_recorded_with_its_declared_files_and_refused_with_an_undeclared_one(tmp_path):
    spec = _Drawing().plan("quick")[0]
    record = _Drawing().run(spec, tmp_path / "ok")
    assert record.result["files"] == ["a_1.png"] and _Drawing().load(spec, tmp_path / "ok") == record
    with pytest.raises(InputError, match=r"^the record of run r: the record lists 'b\.txt' among its files, which "
                                         r"study drawing does not write \(its outputs: a_\*\.png\)"):
        _Drawing(("b.txt",)).run(spec, tmp_path / "bad")
    assert not list((tmp_path / "bad").rglob("*.json"))  # not recorded: the run is made again once declared


def test_a_study_that_declares_nothing_lists_no_file():
    with pytest.raises(InputError, match=r"its outputs: none"):
        Study().check_files({"files": ["x.png"]}, "r.json")
    Study().check_files({"evidence": {}}, "r.json")
    Study().check_files({"files": []}, "r.json")


def test_every_registered_study_declares_plain_names_or_patterns():
    for name in STUDIES:
        study = get(name)
        assert isinstance(study.outputs, tuple) and all(isinstance(p, str) and "/" not in p for p in study.outputs)


def test_the_theory_study_declares_the_figures_its_runs_drew():
    """A theory record made while its measures drew lists those figures (a PNG and a PDF each); render draws the
    same names now (test_study_theory checks the set it draws)."""
    from qkdyn.simulate import claims_coupled, claims_sharpness, claims_theory, overview

    from qkdyn.study_theory import FIGURES

    drawn = {claims_theory.A1_FIGURE, claims_theory.A2_FIGURE, claims_theory.A3_FIGURE, claims_coupled.CQ4_FIGURE,
             *claims_sharpness.FIGURES.values(), overview.TRAJECTORIES_FIGURE, overview.PHASE_PORTRAIT_FIGURE}
    assert {f"{figure}.png" for figure in FIGURES} == drawn
    assert set(get("theory").outputs) == {f"{Path(f).stem}.{kind}" for f in drawn for kind in ("png", "pdf")}


def test_the_training_studies_declare_their_run_folders():
    """circuits: a :class:`qkdyn.runs.RunDir` (checkpoint, metrics, result); coupled: that, its identity record
    and its ablations; nothing else (another study's figure is refused)."""
    from qkdyn.empirical.coupled.ablation import FILE
    from qkdyn.empirical.coupled.identity import RECORD

    from qkdyn.runs import CHECKPOINT, METRICS, RESULT

    assert set(get("circuits").outputs) == {CHECKPOINT, METRICS, RESULT}
    assert set(get("coupled").outputs) == {CHECKPOINT, METRICS, RESULT, RECORD, FILE}
    for name in ("circuits", "coupled"):
        assert not _declared(get(name), "a2_line.png") and not _declared(get(name), "notes.txt")


def test_the_synthetic_studies_declare_the_figures_their_runs_draw():
    """The names the synthetic measures draw into their scratch folder (a PNG and a PDF each) are declared, and
    nothing of another study is: fixed-attention's run draws nothing (its render draws from the records)."""
    a6 = ["a6_overlay", "a6_convergence", "a6_sgd_batch", "a6_adam", "a6_nonsymmetric"]
    sampled = [f"sampled_{spec.params['generator']}_{kind}" for spec in get("sampled").plan("quick")
               for kind in ("attention", "dtap")]
    for name, stems in (("a6", a6), ("sampled", sampled), ("stability", ["stability_phase"])):
        study = get(name)
        assert all(_declared(study, f"{stem}.{kind}") for stem in stems for kind in ("png", "pdf")), name
        assert not _declared(study, "checkpoint.pt") and not _declared(study, "fixed_attention.png")
    assert get("fixed-attention").outputs == ()


@pytest.mark.slow
def test_the_records_of_real_quick_runs_pass(tmp_path):
    """A quick run of each synthetic study that writes files or none (a6's adam, stability, fixed-attention;
    sampled's runs take minutes: test_verify's quick verify makes them), through ``Study.run`` (which refuses an
    undeclared file) and read back through ``Study.load`` (which refuses one too): ~35 CPU-s."""
    for name, run in (("a6", "adam"), ("stability", "sub"), ("fixed-attention", "collapsed")):
        study = get(name)
        (spec,) = [s for s in study.plan("quick") if s.name == run]
        record = study.run(spec, tmp_path)
        assert all(_declared(study, f) for f in record.result["files"])
        assert study.load(spec, tmp_path).result["files"] == record.result["files"]
        assert sorted(p.name for p in record.scratch.iterdir()) == record.result["files"], name


class _Fragile(Study):
    """A one-run study whose judge reads ``evidence["x"]``; its measure records ``evidence`` as given."""

    name = "fragile"
    title = "reads x"
    claim_names = ("F",)

    def __init__(self, evidence: dict):
        self.evidence = evidence

    def plan(self, budget):
        return [RunSpec.make(self.name, "r")]

    def measure(self, spec, scratch):
        return {"evidence": self.evidence}

    def claims(self, records, budget):
        x = records[0].result["evidence"]["x"]
        return [Claim("F", "x is positive", "holds" if x > 0 else "fails", {"x": x}, f"x = {x}")]


def test_evidence_a_judge_cannot_read_is_one_line_from_a_runs_folder_and_a_traceback_when_just_computed(tmp_path):
    """Over records this process computed, the judge's error is a bug and propagates as it is; over the same
    records read back from the runs folder it is one InputError naming the folder, its cause kept."""
    args = {"budget": "quick", "figures": tmp_path / "fig", "runs_dir": tmp_path / "runs", "progress": False,
            "title": "t", "intro": "i"}
    with pytest.raises(KeyError, match="'x'"):
        drive([_Fragile({"y": 1.0})], **args)
    assert not (tmp_path / "fig" / "report.md").exists()
    with pytest.raises(InputError, match=rf"^{tmp_path / 'runs' / 'fragile'}: study fragile cannot read the evidence "
                                         r"of these run records \(KeyError: 'x'\)") as refused:
        drive([_Fragile({"y": 1.0})], **args, compute=False)
    assert isinstance(refused.value.__cause__, KeyError)
    assert [c.verdict for c in drive([_Fragile({"x": 1.0})], **{**args, "runs_dir": tmp_path / "ok"})] == ["holds"]
