"""Run records are data from a folder that may be shared (qkdyn.studies.check_record, copy_files):
exactly a spec and evidence, never a verdict; the files they list are plain names, copied atomically
into the figures folder and nowhere else; a bad record is one line naming its file, through
`qkdyn report`, `qkdyn run` and `qkdyn verify --runs`."""
import json
from pathlib import Path

import pytest

from qkdyn.cli import main
from qkdyn.errors import InputError
from qkdyn.studies import Record, RunSpec, check_record, copy_files, get, plain_name, save

SPEC = {"study": "s", "name": "n", "config": {}, "cpus": 1.0, "gpus": 0.0}


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/b", "..", ".hidden", "a\nb", "", "x\x1b[2J", 3])
def test_a_file_entry_must_be_a_plain_name(name):
    assert not plain_name(name)
    with pytest.raises(InputError, match="plain file names"):
        check_record({"spec": SPEC, "result": {"files": [name]}}, "r.json")


@pytest.mark.parametrize("name", ["a2_line.png", "fixed-attention.csv", "x.1.json"])
def test_plain_names_pass(name):
    assert plain_name(name)
    assert check_record({"spec": SPEC, "result": {"files": [name]}}, "r.json")


@pytest.mark.parametrize("result", [{"verdict": "holds"}, {"evidence": {"A2": {"verdict": "holds"}}},
                                    {"runs": [{"x": 1}, {"claims": []}]}])
def test_a_record_holding_a_verdict_is_refused(result):
    with pytest.raises(InputError, match="holds a verdict"):
        check_record({"spec": SPEC, "result": result}, "r.json")


@pytest.mark.parametrize("data", [[], "x", {"spec": SPEC}, {"spec": SPEC, "result": "done"},
                                  {"spec": SPEC, "result": {}, "verdicts": {}}, {"spec": SPEC, "result": {"files": "a"}}])
def test_anything_but_a_record_is_refused_naming_the_file(data):
    with pytest.raises(InputError, match="^r.json: "):
        check_record(data, "r.json")


def test_a_measure_that_returns_a_verdict_cannot_be_saved(tmp_path):
    with pytest.raises(InputError, match="holds a verdict"):
        save(Record(RunSpec.make("s", "n"), {"claims": [{"id": "A1"}]}, tmp_path), tmp_path)
    assert not list(tmp_path.rglob("*.json"))


def test_run_spec_refuses_unknown_fields():
    with pytest.raises(InputError, match="unknown field.*'seed'"):
        RunSpec.from_dict({**SPEC, "seed": 3})
    with pytest.raises(InputError, match="JSON object"):
        RunSpec.from_dict([SPEC])


def test_copy_files_copies_plain_names_atomically_and_refuses_the_rest(tmp_path):
    scratch, figures = tmp_path / "scratch", tmp_path / "figures"
    scratch.mkdir()
    (scratch / "a.png").write_bytes(b"new")
    (scratch / "sub").mkdir()
    copy_files([Record(RunSpec.make("s", "n"), {"files": ["a.png", "sub", "missing.png"]}, scratch)], figures)
    assert [p.name for p in figures.iterdir()] == ["a.png"] and (figures / "a.png").read_bytes() == b"new"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    with pytest.raises(InputError, match="not a plain file name"):
        copy_files([Record(RunSpec.make("s", "n"), {"files": ["../victim.txt"]}, scratch)], figures)
    assert victim.read_text() == "precious"


def _theory_record(runs: Path, result: dict) -> Path:
    """A record of the theory study's quick ``a2`` run, as a runs folder shared with others could hold."""
    spec = next(s for s in get("theory").plan("quick") if s.name == "a2")
    path = runs / "theory" / "a2.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"spec": json.loads(spec.to_json()), "result": result}))
    return path


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a folder."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("result", [{"files": ["../../victim.txt"]}, {"files": ["VICTIM"]}, {"files": []}])
def test_report_over_a_hostile_record_is_one_line_and_touches_nothing(tmp_path, capsys, result):
    """A record naming a path outside the figures folder (relative, or the absolute path of a file
    elsewhere), or forging nothing but an empty result with a verdict beside it, is refused in one stderr
    line (exit 2); nothing is created or changed anywhere."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    if result["files"] == ["VICTIM"]:
        result = {"files": [str(victim)]}
    if not result["files"]:
        result = {**result, "claims": [{"id": "A2", "verdict": "holds"}]}  # a forged verdict
    runs = tmp_path / "runs"
    path = _theory_record(runs, result)
    (path.with_suffix("") / "victim.txt").parent.mkdir()
    (path.with_suffix("") / "victim.txt").write_text("planted")  # what a copy would put in its place
    before = _tree(tmp_path)
    code = main(["report", "theory", "--budget", "quick", "--runs", str(runs), "--figures", str(tmp_path / "fig")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(path) in err
    assert _tree(tmp_path) == before and victim.read_text() == "precious"


def test_run_refuses_a_spec_with_unknown_fields_or_deep_nesting(capsys):
    spec = next(s for s in get("theory").plan("quick") if s.name == "a2")
    for text in (json.dumps({**spec.to_dict(), "seed": 1}), "[" * 100_000):
        assert main(["run", "theory", "--spec", text, "--runs", "unused"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_verify_over_a_traversing_record_is_one_line_and_touches_nothing(tmp_path, capsys):
    """The same refusal through `qkdyn verify --runs` (the path the docs recommend for shared folders)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    runs = tmp_path / "runs"
    path = _theory_record(runs, {"files": ["../../victim.txt"]})
    code = main(["verify", "--quick", "--skip-empirical", "--no-progress", "--runs", str(runs),
                 "--figures", str(tmp_path / "fig")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(path) in err
    assert victim.read_text() == "precious" and not (tmp_path / "fig" / "report.md").exists()


@pytest.mark.parametrize("case", ["deep toml", "directory as spec", "directory as data"])
def test_unreadable_inputs_are_one_line(tmp_path, capsys, case):
    if case == "deep toml":
        spec = tmp_path / "deep.toml"
        spec.write_text("a = " + "[" * 100_000)
        argv = ["derive", "--spec", str(spec)]
    elif case == "directory as spec":
        (tmp_path / "d.json").mkdir()
        argv = ["derive", "--spec", str(tmp_path / "d.json")]
    else:
        (tmp_path / "data").mkdir()
        argv = ["train-circuits", "--task", "vader", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()
