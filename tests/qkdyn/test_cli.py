"""The command-line contract of docs/setting.md section 4."""
import csv
import json

import pytest

from qkdyn.cli import main
from repo_paths import ROOT


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
    assert "unrecognized arguments: --poin" in capsys.readouterr().err
