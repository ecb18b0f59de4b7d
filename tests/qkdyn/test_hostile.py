"""Issue 40's hostile cases that the record and fuzz tables do not reach on every machine.

* A full disk while ``qkdyn verify`` writes its figures, simulated in process (so it runs where no tmpfs can
  be mounted; ``test_fuzz.py`` has the out-of-process tmpfs case): the figures folder's file system takes a
  given number of bytes and then fails every write with ENOSPC, after writing what fitted, as a real one
  does. Whichever write it hits (the first, one in the middle, the last), the previous figures stay
  byte-identical, no partial or temporary file is left, and the one error line names a path in
  ``--figures``, not the copy's source in the runs folder.
* Verdicts come from a study's judge over the evidence only: a record carrying a verdict under any other
  key is judged from its evidence, one carrying a ``verdict`` key is refused naming the file.
* Every parser refuses abbreviated flags (``allow_abbrev=False``), nested subcommands included.
* A spec ``name`` with control characters is refused before it can reach the terminal.
* A record of the right keys but the wrong types is one line naming the runs folder through ``qkdyn report``
  (no report written).
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import shutil
from pathlib import Path

import pytest

import qkdyn.figures as figures_module
from qkdyn import atomic
from qkdyn.claims import Claim
from qkdyn.cli import build_parser, main
from qkdyn.errors import InputError
from qkdyn.studies import RunSpec, Study, get
from qkdyn.verify import drive

VERIFY = ["verify", "--quick", "--skip-empirical", "--no-progress", "--workers", "1"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones included), by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class FullDisk:
    """The file system of ``root`` with ``free`` bytes left, for every atomic output (:mod:`qkdyn.atomic`:
    figures, copied files, the report): once the writer has written a file under ``root`` its size is taken
    from what is left, and when it does not fit the file is cut to what fits and the write fails with ENOSPC
    (as a full disk does: the data written so far stays, the error names the file being written). ``sizes``
    lists the size of each file written under ``root``, in order."""

    def __init__(self, root: Path, free: float, monkeypatch: pytest.MonkeyPatch):
        self.root, self.free, self.sizes, self.hits = root.resolve(), free, [], 0
        real = atomic.atomic_path

        @contextlib.contextmanager
        def atomic_path(path):
            with real(path) as tmp:
                yield tmp
                if Path(tmp).resolve().is_relative_to(self.root):
                    self._take(Path(tmp))

        for module in (atomic, figures_module):
            monkeypatch.setattr(module, "atomic_path", atomic_path)

    def _take(self, tmp: Path) -> None:
        size = tmp.stat().st_size
        self.sizes.append(size)
        fits = int(min(size, max(self.free, 0)))
        self.free -= fits
        if fits < size:
            self.hits += 1
            os.truncate(tmp, fits)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    """A runs folder of the theory study's quick budget, the figures ``qkdyn verify`` made from it (14 CPU-s
    once for the module), and the sizes of the files a second verify over those runs writes into --figures."""
    root = tmp_path_factory.mktemp("verified")
    assert main([*VERIFY, "--runs", str(root / "runs"), "--figures", str(root / "figures")]) == 0
    with pytest.MonkeyPatch.context() as monkeypatch:
        again = FullDisk(root / "again", math.inf, monkeypatch)
        assert main([*VERIFY, "--runs", str(root / "runs"), "--figures", str(root / "again")]) == 0
    assert again.sizes and _snapshot(root / "again") == _snapshot(root / "figures")  # the same bytes each time
    return root, again.sizes


@pytest.mark.slow
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_full_disk_during_verify_keeps_the_previous_figures_byte_identical(verified, where, tmp_path, capsys,
                                                                             monkeypatch):
    root, sizes = verified
    figures = tmp_path / "figures"
    shutil.copytree(root / "figures", figures)
    for path in figures.iterdir():  # an earlier version of each output: a write that got through would show
        path.write_bytes(b"the previous " + path.name.encode())
    previous = _snapshot(figures)
    free = {"first": 0, "middle": sum(sizes) // 2, "last": sum(sizes) - sizes[-1] // 2}[where]
    capsys.readouterr()
    disk = FullDisk(figures, free, monkeypatch)
    code = main([*VERIFY, "--runs", str(root / "runs"), "--figures", str(figures)])
    err = capsys.readouterr().err
    assert disk.hits == 1  # the disk filled up once, during this verify, and verify stopped there
    assert code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "No space left on device" in errors[0], err
    named = errors[0].split("No space left on device: ")[1].split(";")[0]
    assert Path(named).parent == figures and not Path(named).name.startswith(".")  # the output, not a temporary
    assert _snapshot(figures) == previous  # every previous figure byte-identical, nothing partial, no temporary


@pytest.mark.slow
def test_a_record_naming_an_absolute_path_changes_nothing_outside_the_figures(verified, tmp_path, capsys):
    """A shared runs folder whose record lists the absolute path of a file elsewhere: `verify --runs` and
    `report` refuse it in one line naming the record; no file outside --figures is created or changed."""
    root, _ = verified
    runs = tmp_path / "runs"
    shutil.copytree(root / "runs", runs)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    record = runs / "theory" / "a2.json"
    data = json.loads(record.read_text())
    data["result"]["files"].append(str(victim))
    (runs / "theory" / "a2" / "victim.txt").write_text("planted")
    record.write_text(json.dumps(data))
    before = _snapshot(tmp_path)
    for argv in ([*VERIFY, "--runs", str(runs), "--figures", str(tmp_path / "fig")],
                 ["report", "theory", "--budget", "quick", "--runs", str(runs), "--figures", str(tmp_path / "fig")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(record) in err and "plain file names" in err
        assert _snapshot(tmp_path) == before and victim.read_text() == "precious"


class _Threshold(Study):
    """A one-run study whose one claim holds when the evidence ``x`` exceeds 1."""

    name = "threshold"
    title = "x exceeds 1"
    claim_names = ("T",)

    def plan(self, budget):
        return [RunSpec.make(self.name, "r")]

    def claims(self, records, budget):
        x = records[0].result["evidence"]["x"]
        return [Claim("T", "x exceeds 1", "holds" if x > 1 else "fails", {"x": x}, f"x = {x} against 1")]


def _forged(runs: Path, result: dict) -> Path:
    path = runs / "threshold" / "r.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"spec": RunSpec.make("threshold", "r").to_dict(), "result": result}))
    return path


def test_a_forged_verdict_under_another_key_never_reaches_the_report(tmp_path):
    """The record says "holds" every way but under ``verdict``/``claims``; its evidence says x = 0.5: the
    report says what the judge makes of the evidence, and the forged words appear nowhere in it."""
    _forged(tmp_path / "runs", {"evidence": {"x": 0.5}, "T": "HOLDS-FORGED", "status": "HOLDS-FORGED",
                                "summary": "HOLDS-FORGED"})
    claims = drive([_Threshold()], "quick", tmp_path / "fig", tmp_path / "runs", compute=False, progress=False,
                   title="t", intro="i")
    assert [(c.id, c.verdict) for c in claims] == [("T", "fails")]
    report = json.loads((tmp_path / "fig" / "report.json").read_text())
    assert [c["verdict"] for c in report["claims"]] == ["fails"]
    for name in ("report.json", "report.md"):
        assert "HOLDS-FORGED" not in (tmp_path / "fig" / name).read_text()


def test_a_verdict_key_in_a_record_is_refused_naming_the_file_before_anything_is_written(tmp_path):
    path = _forged(tmp_path / "runs", {"evidence": {"x": 0.5, "verdict": "holds"}})
    with pytest.raises(InputError, match=f"^{path}: the record holds a verdict"):
        drive([_Threshold()], "quick", tmp_path / "fig", tmp_path / "runs", compute=False, progress=False,
              title="t", intro="i")
    assert not (tmp_path / "fig").exists()


def _parsers(parser: argparse.ArgumentParser, path: str = "qkdyn"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_no_parser_matches_a_flag_by_its_prefix(capsys):
    parsers = dict(_parsers(build_parser()))
    assert len(parsers) > 15 and "qkdyn data fetch" in parsers
    assert [name for name, parser in parsers.items() if parser.allow_abbrev] == []
    # a removed flag is an error, not its longer neighbour (--seeds)
    assert main(["compare-circuits", "--seed", "1", "--task", "sva"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("evidence", ["holds", None, {"x": "1"}])
def test_a_record_of_the_wrong_types_is_one_line_naming_the_runs(tmp_path, capsys, evidence):
    runs = tmp_path / "runs"
    for spec in get("theory").plan("quick"):
        path = runs / "theory" / f"{spec.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"spec": spec.to_dict(), "result": {"evidence": evidence}}))
    code = main(["report", "theory", "--budget", "quick", "--runs", str(runs), "--figures", str(tmp_path / "fig")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(runs / "theory") in err
    assert not (tmp_path / "fig" / "report.md").exists()


def test_control_characters_of_a_spec_name_never_reach_the_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "evil.toml"
    spec.write_text('name = "evil\\nqkdyn: fake line\\u001b[2J"\n')
    main(["solve", "--spec", str(spec), "--t-max", "1", "--points", "3", "--out", "o.csv"])
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and err.count("\n") <= 1
