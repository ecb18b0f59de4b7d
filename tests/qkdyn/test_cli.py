"""The command-line contract of docs/setting.md section 4."""
import csv
import json

import pytest
from repo_paths import ROOT

from qkdyn.cli import main


def run_cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_solve_writes_csv_with_design_columns(tmp_path, capsys):
    out = tmp_path / "run.csv"
    code, _, _ = run_cli(capsys, "solve", "--param", "FAFO", "--t-max", "1e15", "--points", "20",
                         "--at", "2.5,1e9", "--out", str(out))
    assert code == 0
    rows = list(csv.reader(out.open()))
    header = rows[0]
    assert header[:5] == ["t", "qk", "ov", "attn", "loss"]
    assert "q_query" in header and "v_common" in header
    times = [float(r[0]) for r in rows[1:]]
    assert times == sorted(times) and 2.5 in times and 1e9 in times and times[-1] == 1e15


def test_solve_until_loss(tmp_path, capsys):
    out = tmp_path / "run.csv"
    assert run_cli(capsys, "solve", "--param", "paper", "--until-loss", "1e-3", "--out", str(out))[0] == 0
    last = list(csv.DictReader(out.open()))[-1]
    assert float(last["loss"]) == pytest.approx(1e-3, rel=1e-9)


@pytest.mark.parametrize("argv", [
    ["--param", "CACO", "--classes", "-2", "--t-max", "1"],
    ["--param", "CACO", "--distinct", "0", "--t-max", "1"],
    ["--param", "CACO", "--eta-qk", "-1", "--t-max", "1"],
    ["--param", "CACO", "--eta-qk", "nan", "--t-max", "1"],
    ["--param", "CACO", "--eta-qk", "0", "--eta-ov", "0", "--t-max", "1"],
    ["--param", "CACO", "--attn0", "1.5", "--t-max", "1"],
    ["--param", "CACO", "--attn0", "0.5", "--qk0", "2", "--t-max", "1"],
    ["--param", "CACO", "--eta-qk", "0", "--until-loss", "1e-3", "--t-max", "10"],
    ["--param", "CACO", "--eta-ov", "-1", "--t-max", "1"],
    ["--param", "XAXO", "--t-max", "1"],
    ["--param", "CACO", "--t-max", "0"],
    ["--param", "CACO", "--t-max", "-5"],
    ["--param", "CACO", "--t-max", "nan"],
    ["--param", "CACO", "--scale", "inf", "--t-max", "1"],
    ["--param", "CACO", "--until-loss", "7", "--t-max", "1"],
    ["--param", "CACO", "--t-max", "1", "--at", "x"],
    ["--param", "CACO", "--t-max", "1", "--at", "5"],
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv):
    out = tmp_path / "never.csv"
    code, _, err = run_cli(capsys, "solve", *argv, "--out", str(out))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "error" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["missing-dir/x.csv", "."])
def test_unwritable_output_is_one_line_and_exit_2(tmp_path, capsys, target):
    code, _, err = run_cli(capsys, "solve", "--param", "CACO", "--t-max", "1", "--out", str(tmp_path / target))
    assert code == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt", ["text", "latex", "json"])
def test_derive_prints_every_section(capsys, fmt):
    code, out, _ = run_cli(capsys, "derive", "--param", "CAFO", "--format", fmt)
    assert code == 0
    for section in ("ode", "conserved", "line", "law ov(t)", "rate factor R_OV (A1)"):
        assert section in out
    if fmt == "json":
        record = json.loads(out)
        assert set(record["ode"]) == {"qk_distinct", "qk_common", "o_own", "o_cross", "v_own", "v_cross", "v_common"}


def test_derive_paper_states_the_constant_mapping(capsys):
    code, out, _ = run_cli(capsys, "derive", "--param", "paper")
    assert code == 0 and "b (from the OV rate): D" in out


def test_the_cli_names_the_flag_of_a_bad_setting_field(tmp_path, capsys):
    code, _, err = run_cli(capsys, "solve", "--param", "CACO", "--eta-ov", "-1", "--t-max", "1",
                           "--out", str(tmp_path / "x.csv"))
    assert code == 2 and err.strip().endswith("--eta-ov must be a non-negative finite number (0 freezes the circuit), got -1.0")


def test_attn0_and_frozen_qk_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "frozen.csv"
    code, _, err = run_cli(capsys, "solve", "--param", "CACO", "--eta-qk", "0", "--attn0", "0.3", "--t-max", "1e6",
                           "--out", str(out))
    assert code == 0, err
    rows = list(csv.DictReader(out.open()))
    assert {row["attn"] for row in rows} == {rows[0]["attn"]} and float(rows[0]["attn"]) == pytest.approx(0.3)
    assert float(rows[-1]["ov"]) > float(rows[0]["ov"])


def test_attn0_with_qk0_names_attn0(tmp_path, capsys):
    code, _, err = run_cli(capsys, "solve", "--param", "CACO", "--attn0", "0.5", "--qk0", "2", "--t-max", "1",
                           "--out", str(tmp_path / "x.csv"))
    assert code == 2 and "--attn0" in err


def test_every_command_module_lives_in_qkdyn_commands():

    from qkdyn.cli import COMMANDS

    assert all(module.startswith("qkdyn.commands.") for module in COMMANDS.values())
    root = ROOT
    assert not [p for p in (root / "empirical").rglob("*cli*.py")]


def test_help_shows_defaults_version_and_did_you_mean(capsys):
    from qkdyn.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("qkdyn ")
    assert main(["verify", "--help"]) == 0
    assert "(default: figures)" in " ".join(capsys.readouterr().out.split())
    assert main(["verify", "--executor", "rya"]) == 2
    assert "did you mean 'ray'" in capsys.readouterr().err


def test_every_option_help_states_its_default():
    """`--help` of every command shows each option's default (a value, or what sets it, e.g. --preset)."""
    import argparse

    from qkdyn.cli import _HelpFormatter, build_parser

    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    no_value = (argparse._HelpAction, argparse._VersionAction, argparse._StoreTrueAction,
                argparse._StoreFalseAction, argparse._StoreConstAction)
    silent = [f"{name} {action.option_strings[0]}"
              for name, parser in subcommands.choices.items() for action in parser._actions
              if action.option_strings and not action.required and not isinstance(action, no_value)
              and "default" not in (_HelpFormatter(name)._get_help_string(action) or "")]
    assert not silent, silent


def test_an_error_message_is_one_line_of_plain_text():
    from qkdyn.cli import one_line

    assert one_line("spec evil\n\x1b[2Jfake line\r\n") == "spec evil \\x1b[2Jfake line"
    assert one_line("ρ = 0.5 ok") == "ρ = 0.5 ok"


def test_a_flag_is_never_matched_by_its_prefix(capsys):
    assert main(["solve", "--param", "CACO", "--t-max", "10", "--poin", "3", "--out", "x.csv"]) == 2
    assert "unrecognized argument --poin (did you mean --points?)" in capsys.readouterr().err


@pytest.mark.parametrize("typo, near", [("--tmax", "--t-max"), ("--eta_qk", "--eta-qk"), ("--eta_qk=2", "--eta-qk")])
def test_a_flag_typo_names_the_subcommand_and_the_nearest_flag(tmp_path, capsys, typo, near):
    argv = ["solve", "--param", "CACO", "--t-max", "1", typo] + ([] if "=" in typo else ["2"])
    code, _, err = run_cli(capsys, *argv, "--out", str(tmp_path / "x.csv"))
    assert code == 2 and not (tmp_path / "x.csv").exists()
    assert err == f"qkdyn solve: error: unrecognized argument {typo.split('=')[0]} (did you mean {near}?)\n"


def test_an_unknown_flag_far_from_every_flag_gets_no_guess(capsys):
    code, _, err = run_cli(capsys, "derive", "--param", "CACO", "--bogus")
    assert code == 2 and err == "qkdyn derive: error: unrecognized argument --bogus\n"


@pytest.mark.parametrize("argv, name", [
    (["derive", "--param", "caco"], "CACO"), (["derive", "--param", "PAPER"], "paper"),
    (["solve", "--param", "fafo", "--t-max", "1", "--out", "x.csv"], "FAFO"),
    (["sharpness", "--param", "Cafo", "--rho", "1", "--loss", "0.1", "--out", "x.csv"], "CAFO"),
    (["sgd", "--param", "faco", "--step", "0.1", "--steps", "2", "--out", "x.csv"], "FACO"),
])
def test_parameterisation_names_are_case_insensitive(argv, name):
    from qkdyn.cli import build_parser

    assert build_parser().parse_args(argv).param == name


def test_a_lower_case_parameterisation_runs(capsys):
    code, out, err = run_cli(capsys, "derive", "--param", "caco")
    assert code == 0 and out.startswith("parameterisation: CACO"), err


def test_an_unknown_parameterisation_still_gets_did_you_mean(capsys):
    code, _, err = run_cli(capsys, "derive", "--param", "cacoo")
    assert code == 2 and "did you mean 'CACO'" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv", [
    ["derive", "--spec", "missing.toml"], ["solve", "--spec", "missing.toml", "--t-max", "1", "--out", "x.csv"],
    ["sharpness", "--spec", "missing.json", "--rho", "1", "--loss", "0.1", "--out", "x.csv"],
])
def test_a_missing_spec_fails_before_the_heavy_imports(tmp_path, argv):
    """A missing spec is refused as the flag is parsed: in well under the seconds sympy, numba or torch take
    to import, and without importing them (checked in a fresh interpreter, whose modules are its own)."""
    import subprocess
    import sys
    import time

    code = ("import json, sys; from qkdyn.cli import main; code = main(json.loads(sys.argv[1])); "
            "print(json.dumps([code, [m for m in ('sympy', 'numba', 'torch', 'scipy') if m in sys.modules]]))")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    seconds = time.perf_counter() - start
    assert json.loads(done.stdout) == [2, []], done.stderr
    assert done.stderr == f"qkdyn {argv[0]}: error: --spec cannot be read: {argv[2]}: No such file or directory\n"
    assert seconds < 2, f"{seconds:.2f} s"


@pytest.mark.parametrize("name, problem", [("spec.txt", "must be a .toml or .json file"),
                                           ("dir.json", "is a directory; give a regular file")])
def test_a_spec_that_is_no_spec_file_is_refused_as_parsed(tmp_path, capsys, name, problem):
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "spec.txt").write_text("{}")
    code, _, err = run_cli(capsys, "derive", "--spec", str(tmp_path / name))
    assert code == 2 and problem in err and err.startswith("qkdyn derive: error: --spec ")


@pytest.mark.parametrize("flag, text, hint", [("--rho", "100:0.01:9", "(did you mean '0.01:100:9'?)"),
                                              ("--loss", "0.1:1e-3:3", "(did you mean '1e-3:0.1:3'?)"),
                                              ("--rho", "2:2:5", "(one value: '2')")])
def test_a_reversed_range_is_refused(tmp_path, capsys, flag, text, hint):
    values = {"--rho": "1", "--loss": "0.1", flag: text}
    code, _, err = run_cli(capsys, "sharpness", "--param", "CACO", "--rho", values["--rho"], "--loss",
                           values["--loss"], "--out", str(tmp_path / "x.csv"))
    assert code == 2 and not (tmp_path / "x.csv").exists()
    assert err == f"qkdyn sharpness: error: {flag} start:stop:num needs start below stop, got {text!r} {hint}\n"


def test_help_names_no_file_a_pip_install_lacks(capsys):
    """`qkdyn --help` points to each command's --help and to the guides by their titles; no help names a
    documentation file (the package installs no docs: README.md and docs/ are the source tree's)."""
    import argparse

    from qkdyn.cli import build_parser

    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "qkdyn COMMAND --help" in text and "Derivation" in text
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for help_text in [text, *(sub.format_help() for sub in subcommands.choices.values())]:
        assert "docs/" not in help_text and "README" not in help_text


def test_warm_runs_the_install_warm_up(monkeypatch, capsys):
    """``qkdyn warm`` is the warm-up ``make install`` runs (qkdyn.simulate.warm), with a line first."""
    import qkdyn.simulate.warm as warm

    calls = []
    monkeypatch.setattr(warm, "main", lambda: calls.append(1) or 0)
    assert main(["warm"]) == 0 and calls == [1]
    assert "compiling the kernels of every form" in capsys.readouterr().err


def test_sharpness_help_states_the_rho_range_the_library_refuses_beyond(capsys):
    """--rho's help names simulate.sharpness.RHO_RANGE (written out there: the parser does not import the solver)."""
    from qkdyn.simulate.sharpness import RHO_RANGE

    assert main(["sharpness", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"from {RHO_RANGE[0]:g} to {RHO_RANGE[1]:g}".replace("e+", "e") in text


def test_a_command_line_loads_its_own_command_alone():
    """``qkdyn lm ...`` builds lm's flags only: no other command's module (nor what it imports to define its
    flags, e.g. the coupled study's configs) and no package metadata (looked up for --version alone)."""
    import subprocess
    import sys

    code = ("import contextlib, io, sys; from qkdyn.cli import COMMANDS, main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n    code = main(['lm', '--help'])\n"
            "assert code == 0 and '--max-steps' in out.getvalue()\n"
            "print(sorted(m for m in (*COMMANDS.values(), 'importlib.metadata') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['qkdyn.commands.lm']"
