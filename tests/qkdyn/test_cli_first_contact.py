"""The first commands a new user types, as issue 44's acceptance writes them: a flag typo with nothing
else given is answered with the nearest flag (not with the required flags it left out), a lower-case
parameterisation runs, and a missing spec file is refused in under a second. Then the rest of a first
contact: the two set-ups (``make verify`` installs what verify runs on, ``make test`` adds the test tools),
``run`` and ``report`` showing progress and ending in one line per claim, no flag matched by its prefix, and
a reversed learning-rate range refused."""
import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from repo_paths import ROOT

from qkdyn.cli import COMMANDS, build_parser, main


@pytest.mark.parametrize("argv, said", [
    (["solve", "--tmax", "1"], "qkdyn solve: error: unrecognized argument --tmax (did you mean --t-max?)\n"),
    (["solve", "--eta_qk=2"], "qkdyn solve: error: unrecognized argument --eta_qk (did you mean --eta-qk?)\n"),
    (["data", "fetch", "--forse", "brown"], "qkdyn data fetch: error: unrecognized argument --forse\n"),
    (["--tmax"], "qkdyn: error: unrecognized argument --tmax\n"),
])
def test_a_typo_is_answered_before_the_required_flags_it_left_out(capsys, argv, said):
    assert main(argv) == 2
    assert capsys.readouterr().err == said


def test_known_flags_are_not_typos(capsys):
    assert main(["solve", "--t-max", "1"]) == 2  # only the required flags are missing now
    assert "required" in capsys.readouterr().err


def test_a_lower_case_parameterisation_solves(tmp_path, capsys):
    out = tmp_path / "caco.csv"
    assert main(["solve", "--param", "caco", "--t-max", "10", "--points", "3", "--out", str(out)]) == 0
    assert out.read_text().startswith("t,qk,ov,attn,loss")
    assert capsys.readouterr().err.startswith("CACO: 3 rows")


def test_a_missing_spec_file_fails_in_under_a_second(tmp_path):
    """Timed from the call of ``main`` in a fresh interpreter (its start-up is Python's, not ours)."""
    code = ("import json, sys, time; t = time.perf_counter(); from qkdyn.cli import main; "
            "code = main(['solve', '--spec', 'missing.toml']); print(json.dumps([code, time.perf_counter() - t]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    status, seconds = json.loads(done.stdout)
    assert status == 2 and done.stderr == "qkdyn solve: error: --spec cannot be read: missing.toml: No such file or directory\n"
    assert seconds < 1, f"{seconds:.2f} s"


def _make_dry_run(target: str, venv) -> list[str]:
    """The commands ``make TARGET`` would run on a machine without the environment ``venv`` (``make -n``)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # --no-print-directory: under `make test` (CI) this make is a sub-make, which would add "Leaving directory" lines
    done = subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return [line for line in done.stdout.splitlines() if not line.startswith("#")]


def _installs(commands: list[str]) -> list[str]:
    """What each ``pip install`` of ``commands`` installs, its last word (pip's own upgrade left out)."""
    return [shlex.split(line)[-1] for line in commands if "pip install" in line and "--upgrade pip" not in line]


def test_make_verify_installs_the_package_alone_and_make_test_adds_the_test_extra(tmp_path):
    verify = _make_dry_run("verify", tmp_path / "venv")
    test = _make_dry_run("test", tmp_path / "venv")
    assert _installs(verify)[0].startswith("torch==")  # the CPU build first, so the package's `torch` adds nothing
    assert _installs(verify) == _installs(verify)[:1] + ["."], verify
    assert _installs(test) == _installs(verify) + [".[test]"], test
    warm = next(i for i, line in enumerate(verify) if line.endswith("-m qkdyn.simulate.warm"))
    assert warm < next(i for i, line in enumerate(verify) if line.split()[-1:] == ["verify"])
    assert test[-1].split()[1:4] == ["-m", "pytest", "tests"]
    assert (ROOT / ".ci" / "run").read_text().rstrip().splitlines()[-1] == "make test"  # CI runs the same line


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _modules_only_the_test_extra_installs() -> list[str]:
    """The top-level modules of the distributions the ``test`` extra names (its ``qkdyn[...]`` extras expanded)
    that the package's own dependencies, followed through theirs, do not install (mpmath comes with sympy)."""
    tomllib = pytest.importorskip("tomllib")
    from importlib.metadata import PackageNotFoundError, packages_distributions, requires

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def named(requirements: list[str]) -> set[str]:
        names: set[str] = set()
        for requirement in map(Requirement, requirements):
            names |= set().union(*(named(extras[e]) for e in requirement.extras)) if requirement.name == "qkdyn" \
                else {_normal(requirement.name)}
        return names

    base: set[str] = set()
    todo = list(named(project["dependencies"]))
    while todo:
        name = todo.pop()
        if name in base:
            continue
        base.add(name)
        try:
            needs = requires(name) or []
        except PackageNotFoundError:
            continue
        todo += [_normal(r.name) for r in map(Requirement, needs) if r.marker is None or r.marker.evaluate({"extra": ""})]
    added = named(extras["test"]) - base
    return sorted(module for module, dists in packages_distributions().items()
                  if {_normal(d) for d in dists} & added and not {_normal(d) for d in dists} & base)


@pytest.mark.slow
def test_qkdyn_verify_runs_without_anything_the_test_extra_adds(tmp_path):
    """What ``make verify`` installs is enough for it: ``qkdyn verify --quick`` (every verify study, its runs in
    this one process) succeeds in an interpreter where every module only the test extra installs fails to
    import."""
    blocked = _modules_only_the_test_extra_installs()
    assert {"pytest", "hypothesis", "pandas", "xarray", "ray"} <= set(blocked) and "mpmath" not in blocked
    code = ("import json, sys\nfor name in json.loads(sys.argv[1]): sys.modules[name] = None\n"
            "from qkdyn.cli import main\nsys.exit(main(sys.argv[2:]))")
    argv = ["verify", "--quick", "--workers", "1", "--no-progress", "--figures", str(tmp_path / "figures"),
            "--runs", str(tmp_path / "runs")]
    done = subprocess.run([sys.executable, "-c", code, json.dumps(blocked), *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "figures" / "report.json").read_text())["claims"]


def test_run_shows_a_bar_while_it_computes_and_reports_a_kept_run_at_once(tmp_path, capsys):
    from qkdyn.studies import get

    spec = next(s for s in get("fixed-attention").plan("quick") if s.name == "collapsed")
    argv = ["run", "fixed-attention", "--spec", spec.to_json()]
    assert main([*argv, "--runs", str(tmp_path / "quiet"), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("fixed-attention run collapsed: computed in ")
    assert main([*argv, "--runs", str(tmp_path / "shown")]) == 0
    out, err = capsys.readouterr()
    assert "fixed-attention run collapsed:   0%" in err and "fixed-attention run collapsed: 100%" in err
    assert "| 1/1 [" in err and out.startswith("fixed-attention run collapsed: computed in ")
    assert main([*argv, "--runs", str(tmp_path / "shown")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("fixed-attention run collapsed: already recorded, kept: ")


def test_report_shows_progress_and_ends_with_one_line_per_claim(tmp_path, capsys):
    from qkdyn.studies import get

    figures = tmp_path / "figures"
    argv = ["report", "fixed-attention", "--budget", "quick", "--runs", str(tmp_path / "runs"), "--figures", str(figures)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    claims = json.loads((figures / "report.json").read_text())["claims"]
    runs = len(get("fixed-attention").plan("quick"))
    assert "studies: 100%" in err and f"runs:   0%|          | 0/{runs}" in err
    assert f"fixed-attention: 0 of {runs} runs computed, {len(claims)} claims" in err
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["claim", "verdict"] and len(lines) == len(claims) + 2
    assert [line.split()[:2] for line in lines[1:-1]] == [[c["id"], c["verdict"]] for c in claims]
    assert lines[-1].startswith(f"{len(claims)} claims: ")
    assert main([*argv, "--no-progress"]) == 0
    out_again, err = capsys.readouterr()
    assert out_again == out and "studies" not in err and "runs computed" in err


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every subcommand parser below it."""
    below = [p for action in parser._actions if isinstance(action, argparse._SubParsersAction)
             for p in action.choices.values()]
    return [parser, *(q for p in below for q in _parsers(p))]


def test_no_parser_of_the_command_matches_a_flag_by_its_prefix(capsys):
    parsers = _parsers(build_parser())
    assert len(parsers) > len(COMMANDS) + 1  # the nested ones too (qkdyn data fetch ...)
    assert [p.prog for p in parsers if p.allow_abbrev] == []
    assert main(["data", "fetch", "--hel", "brown"]) == 2  # a nested parser: not taken for --help
    assert capsys.readouterr().err == "qkdyn data fetch: error: unrecognized argument --hel (did you mean --help?)\n"


@pytest.mark.parametrize("command", [["mqar"], ["lm", "--data", "corpus.txt"]])
def test_a_min_lr_above_the_lr_is_refused_before_training(tmp_path, capsys, command):
    run = tmp_path / "run"
    assert main([*command, "--out", str(run), "--lr", "0.001", "--min-lr", "0.01", "--no-progress"]) == 2
    assert capsys.readouterr().err == (f"qkdyn {command[0]}: error: --min-lr 0.01 is above --lr 0.001: the learning "
                                       "rate decays from --lr down to --min-lr (did you swap them?)\n")
    assert not run.exists()


def test_the_guides_the_help_names_are_pages_of_the_documentation_site(capsys):
    """``qkdyn --help`` names the guides by title: each is a page of the site's navigation (mkdocs.yml), and the
    Python API it points to (``help(qkdyn)``) is the installed package's own docstring."""
    import qkdyn
    from qkdyn.cli import EPILOG

    named = re.search(r"The guides \(([^)]*)\)", EPILOG)
    assert named, EPILOG
    titles = [title.strip() for title in re.split(r",|\band\b", named.group(1)) if title.strip()]
    pages = re.findall(r"^  - ([^:\n]+): \S+\.md$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    assert len(titles) >= 3 and [t for t in titles if t not in pages] == [], (titles, pages)
    assert "help(qkdyn)" in EPILOG and qkdyn.__doc__ and len(qkdyn.__doc__.split()) > 20
    assert main(["--help"]) == 0
    assert " ".join(EPILOG.split()) in " ".join(capsys.readouterr().out.split())
