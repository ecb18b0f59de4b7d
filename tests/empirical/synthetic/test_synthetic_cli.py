"""``qkdyn sgd``: CSV columns and rows of docs/setting.md section 4, one-line errors with exit code 2."""
import csv

import pytest

from qkdyn.cli import main


def test_sgd_csv(tmp_path):
    out = tmp_path / "run.csv"
    assert main(["sgd", "--param", "FAFO", "--step", "0.1", "--steps", "40", "--points", "5", "--at", "1.04,2",
                 "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0])[:5] == ["t", "qk", "ov", "attn", "loss"]
    assert {"q_query", "k_distinct", "o_own", "v_common", "acc", "sym_dist"} <= set(rows[0])
    t = [float(r["t"]) for r in rows]
    assert t == sorted(t) and t[0] == 0 and abs(t[-1] - 4.0) < 1e-12
    assert {10, 20} <= {int(float(r["step"])) for r in rows}  # nearest steps to --at 1.04 and 2
    assert all(float(r["sym_dist"]) < 1e-12 for r in rows)


@pytest.mark.parametrize("argv", [
    ["--param", "CACO", "--step", "0", "--steps", "3"],
    ["--param", "CACO", "--step", "0.1", "--steps", "0"],
    ["--param", "CACO", "--step", "0.1", "--steps", "3", "--batch", "many"],
    ["--param", "CACO", "--step", "0.1", "--steps", "3", "--batch", "8"],
    ["--param", "CACO", "--step", "0.1", "--steps", "3", "--at", "5"],
    ["--param", "CACO", "--step", "0.1", "--steps", "3", "--m", "0"],
    ["--param", "paper", "--step", "0.1", "--steps", "3"],
    ["--param", "CACO", "--step", "nan", "--steps", "3"],
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv):
    out = tmp_path / "x.csv"
    try:
        code = main(["sgd", *argv, "--out", str(out)])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    assert code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists()


def test_unwritable_output(tmp_path, capsys):
    code = main(["sgd", "--param", "CACO", "--step", "0.1", "--steps", "3", "--out", str(tmp_path / "missing" / "x.csv")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_sgd_is_seeded(tmp_path):
    runs = []
    for name in ("a.csv", "b.csv"):
        out = tmp_path / name
        assert main(["sgd", "--param", "CAFO", "--optimizer", "sgd", "--batch", "16", "--seed", "3", "--step", "0.1",
                     "--steps", "30", "--points", "4", "--out", str(out)]) == 0
        runs.append(out.read_text())
    assert runs[0] == runs[1]
    rows = list(csv.DictReader((tmp_path / "a.csv").open()))
    assert float(rows[-1]["sym_dist"]) > 1e-6  # sampled batches leave the symmetric subspace
