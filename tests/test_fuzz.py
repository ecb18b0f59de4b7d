"""Hostile-but-fair input over every subcommand: the one-line contract, and files are data, never code.

The table: each bad input must give exit code 2, exactly one stderr line, no traceback, and no new
file or directory in the working directory (everything is validated before anything is created).
They fail at parse time or before any training, so the table runs in-process in seconds.

Then the integrity cases: a crafted pickle in a resume checkpoint never executes (lm, mqar,
train-circuits); a tampered generated-code cache is detected and regenerated, with the trajectory of
the untampered code; a tampered cached corpus is detected; a cut ``metrics.jsonl`` resumes.
"""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from qkdyn.cli import main

FIX = Path(__file__).parent / "fixtures" / "circuits"
LINZEN = str(FIX / "linzen_agr.tsv")

# ------------------------------------------------------------------------------------------------
# the table


def _bad(base: list[str], flag: str, values) -> list[tuple[str, list[str]]]:
    return [(f"{base[0]} {flag} {value!r}", base + [flag, value]) for value in values]


POS_INT = ("0", "-1", "1.5", "x", "inf")
POS_FLOAT = ("0", "-1", "nan", "inf", "x")
NON_NEG = ("-1", "nan", "inf", "x")
PROB = ("-0.1", "1.5", "nan")

SOLVE = ["solve", "--param", "CACO", "--t-max", "10", "--out", "o.csv"]
SGD = ["sgd", "--param", "CACO", "--step", "0.1", "--steps", "10", "--out", "o.csv"]
TRAIN = ["train-circuits", "--task", "sva", "--preset", "tiny", "--data", LINZEN, "--out", "run", "--no-progress"]
COMPARE = ["compare-circuits", "--task", "sva", "--preset", "tiny", "--data", LINZEN, "--runs-dir", "runs",
           "--out-dir", "figs", "--no-progress"]
LM = ["lm", "--data", "corpus.txt", "--out", "run", "--no-progress"]
MQAR = ["mqar", "--out", "run", "--no-progress"]
STUDY = ["compare-coupled", "--runs", "runs", "--out", "figs"]

CASES: list[tuple[str, list[str]]] = [
    ("no command", []), ("unknown command", ["bogus"]),
    ("derive no param", ["derive"]), ("derive bad param", ["derive", "--param", "XYZ"]),
    ("derive lower-case param", ["derive", "--param", "caco"]),
    ("derive bad format", ["derive", "--param", "CACO", "--format", "pdf"]),
    ("derive unknown flag", ["derive", "--param", "CACO", "--bogus"]),
    ("solve no horizon", ["solve", "--param", "CACO", "--out", "o.csv"]),
    ("solve no out", ["solve", "--param", "CACO", "--t-max", "1"]),
    ("solve out is a directory", SOLVE[:-1] + ["adir"]),
    ("solve out under a file", SOLVE[:-1] + ["afile/o.csv"]),
    ("solve out in a missing directory", SOLVE[:-1] + ["missing/o.csv"]),
    ("solve bad method", SOLVE + ["--method", "RK4"]),
    ("solve negative qk0, factorized QK", ["solve", "--param", "FACO", "--qk0", "-1", "--t-max", "1", "--out", "o.csv"]),
    ("solve negative ov0, factorized OV", ["solve", "--param", "CAFO", "--ov0", "-1", "--t-max", "1", "--out", "o.csv"]),
    ("solve negative qk0 and ov0, FAFO", ["solve", "--param", "FAFO", "--qk0", "-1", "--ov0", "-1", "--t-max", "1",
                                          "--out", "o.csv"]),
    ("solve points beyond memory", SOLVE + ["--points", "1000000000000000"]),
    ("sgd vocabulary beyond memory", SGD + ["--classes", "1000000", "--distinct", "1000000"]),
    ("sgd batch beyond memory", SGD + ["--optimizer", "sgd", "--batch", "1000000000000000"]),
    ("sgd points beyond memory", SGD + ["--points", "1000000000000000"]),
    ("train-circuits d-model beyond memory", TRAIN + ["--d-model", "10000000", "--n-head", "1"]),
    ("train-circuits batch beyond memory", TRAIN + ["--batch-size", "1000000000000"]),
    ("lm batch beyond memory", LM + ["--batch-size", "1000000000000"]),
    ("lm block beyond memory", LM + ["--block-size", "100000000"]),
    ("mqar batch beyond memory", MQAR + ["--batch-size", "1000000000000"]),
    ("sgd paper param", ["sgd", "--param", "paper", "--step", "0.1", "--steps", "10", "--out", "o.csv"]),
    ("sgd gd with a batch", SGD + ["--batch", "4"]),
    ("sgd bad optimizer", SGD + ["--optimizer", "lbfgs"]),
    ("sgd at beyond the end", SGD + ["--at", "1e9"]),
    ("sgd out under a file", SGD[:-1] + ["afile/o.csv"]),
    ("data no subcommand", ["data"]), ("data fetch no name", ["data", "fetch"]),
    ("data fetch unknown", ["data", "fetch", "bogus"]), ("data unknown subcommand", ["data", "bogus"]),
    ("verify figures under a file", ["verify", "--figures", "afile/figs"]),
    ("verify figures is a file", ["verify", "--figures", "afile"]),
    ("verify unknown flag", ["verify", "--bogus"]),
]
for _flag in ("--classes", "--distinct", "--commons", "--m", "--n"):
    CASES += _bad(SOLVE, _flag, ("0", "-1", "1.5", "x"))
CASES += _bad(SOLVE, "--classes", ("1",))
for _flag in ("--scale", "--eta-qk", "--eta-ov"):
    CASES += _bad(SOLVE, _flag, ("-1", "nan", "inf", "x"))
for _flag in ("--qk0", "--ov0"):
    CASES += _bad(SOLVE, _flag, ("nan", "inf", "x"))
CASES += _bad(SOLVE, "--t-max", ("nan", "inf", "-1", "0"))
CASES += _bad(SOLVE, "--until-loss", ("nan", "-1", "0"))
CASES += _bad(SOLVE, "--points", ("0", "-1", "x"))
CASES += _bad(SOLVE, "--at", ("x", "-1", "nan"))
CASES += _bad(SOLVE, "--rtol", ("0", "-1", "10", "nan"))
CASES += _bad(["solve", "--param", "paper", "--t-max", "10", "--out", "o.csv"], "--b", ("0", "nan"))
CASES += _bad(SGD, "--step", POS_FLOAT)
CASES += _bad(SGD, "--steps", ("0", "-1", "1.5"))
CASES += _bad(SGD + ["--optimizer", "sgd"], "--batch", ("0", "-1", "x", "1.5"))
CASES += _bad(SGD, "--seed", ("-1", "x"))
CASES += _bad(SGD, "--points", ("0",))
CASES += _bad(SGD, "--eta-qk", ("nan", "-1"))
for _flag in ("--d-model", "--n-head", "--batch-size", "--eval-every", "--ckpt-every", "--eval-examples",
              "--max-len", "--vocab-size"):
    CASES += _bad(TRAIN, _flag, ("0", "-1", "x"))
for _flag in ("--lr", "--qk-lr-mult"):
    CASES += _bad(TRAIN, _flag, POS_FLOAT)
for _flag in ("--weight-decay", "--grad-clip", "--epochs"):
    CASES += _bad(TRAIN, _flag, ("-1", "nan", "inf"))
CASES += _bad(TRAIN, "--momentum", ("nan", "1", "-0.5"))
CASES += _bad(TRAIN, "--warmup-frac", ("1", "-0.1", "nan"))
CASES += _bad(TRAIN, "--concentration", PROB)
CASES += _bad(TRAIN, "--threads", ("0", "-1"))
CASES += _bad(TRAIN, "--optimizer", ("lbfgs",))
CASES += _bad(TRAIN, "--max-steps", ("-1", "x"))
CASES += [
    ("train-circuits d-model not divisible", TRAIN + ["--d-model", "30", "--n-head", "4"]),
    ("train-circuits readout beyond max-len", TRAIN + ["--readout", "999"]),
    ("train-circuits readout word", TRAIN + ["--readout", "first"]),
    ("train-circuits no steps", TRAIN + ["--epochs", "0", "--max-steps", "0"]),
    ("train-circuits missing data", TRAIN[:6] + ["missing.tsv"] + TRAIN[7:]),
    ("train-circuits tsv without columns", TRAIN[:6] + ["nocols.tsv"] + TRAIN[7:]),
    ("train-circuits tsv with a bad index", TRAIN[:6] + ["badindex.tsv"] + TRAIN[7:]),
    ("train-circuits tsv not utf-8", TRAIN[:6] + ["latin1.tsv"] + TRAIN[7:]),
    ("train-circuits hatexplain bad json", ["train-circuits", "--task", "hatexplain", "--preset", "tiny",
                                            "--data", "hx_bad", "--out", "run"]),
    ("train-circuits hatexplain truncated json", ["train-circuits", "--task", "hatexplain", "--preset", "tiny",
                                                  "--data", "hx_cut", "--out", "run"]),
    ("train-circuits squad bad structure", ["train-circuits", "--task", "squad", "--preset", "tiny",
                                            "--data", "squad_bad", "--out", "run"]),
    ("train-circuits hatexplain without data", ["train-circuits", "--task", "hatexplain", "--out", "run"]),
    ("train-circuits bad task", ["train-circuits", "--task", "bogus"]),
    ("train-circuits bad preset", TRAIN + ["--preset", "huge"]),
    ("train-circuits out is a file", TRAIN[:8] + ["afile", "--no-progress"]),
    ("train-circuits out under a file", TRAIN[:8] + ["afile/run", "--no-progress"]),
    ("train-circuits crafted checkpoint", TRAIN[:8] + ["evil_circuits", "--no-progress"]),
    ("train-circuits truncated checkpoint", TRAIN[:8] + ["cut_circuits", "--no-progress"]),
]
CASES += _bad(COMPARE, "--mults", ("x", "0", "-1", "nan", "inf", ","))
CASES += _bad(COMPARE, "--seeds", ("x", "-1", ","))
CASES += _bad(COMPARE, "--acc-tolerance", ("-1", "nan"))
CASES += _bad(COMPARE, "--lr", ("nan", "0"))
CASES += _bad(COMPARE, "--threads", ("0",))
CASES += [
    ("compare-circuits out-dir is a file", COMPARE[:-3] + ["afile", "--no-progress"]),
    ("compare-circuits runs-dir is a file", COMPARE[:8] + ["afile"] + COMPARE[9:]),
    ("compare-circuits corrupt final.json", COMPARE[:8] + ["badruns"] + COMPARE[9:]),
]
CASES += _bad(SOLVE, "--attn0", ("0", "1", "-0.5", "nan", "x"))
CASES += [
    ("solve attn0 beside qk0", SOLVE + ["--attn0", "0.5", "--qk0", "0.3"]),
    ("solve both circuits frozen", SOLVE + ["--eta-qk", "0", "--eta-ov", "0"]),
    ("solve frozen OV cannot reach the loss", ["solve", "--param", "CACO", "--eta-ov", "0", "--until-loss", "0.1",
                                               "--out", "o.csv"]),
]
SHARP = ["sharpness", "--param", "CACO", "--out", "s.csv"]
SHARP_OK = SHARP + ["--rho", "1", "--loss", "0.1"]
CASES += _bad(SHARP + ["--loss", "0.1"], "--rho", ("x", "-1", "nan", "inf", ",", "0:10:5", "0.1:10:0", "0.1:10:x"))
CASES += _bad(SHARP + ["--rho", "1"], "--loss", ("x", "0", "-1", "nan", "5", "1e-3:1e-1:0"))
CASES += _bad(SHARP_OK, "--classes", ("1", "0", "x"))
CASES += _bad(SHARP_OK, "--eta-ov", ("0", "-1", "nan"))
CASES += [
    ("sharpness no rho", SHARP + ["--loss", "0.1"]),
    ("sharpness no loss", SHARP + ["--rho", "1"]),
    ("sharpness bad param", ["sharpness", "--param", "XAXO", "--rho", "1", "--loss", "0.1", "--out", "s.csv"]),
    ("sharpness out under a file", ["sharpness", "--param", "CACO", "--rho", "1", "--loss", "0.1", "--out", "afile/s.csv"]),
    ("sharpness factorized at the saddle", ["sharpness", "--param", "FAFO", "--qk0", "0", "--rho", "1", "--loss", "0.1",
                                            "--out", "s.csv"]),
]
FIXED = ["fixed-attention", "--out", "fa.csv", "--figures", "figs"]
CASES += _bad(FIXED, "--alphas", ("0,0.5", "0.5,0.2", "1.5", "x", ",", "nan"))
CASES += _bad(FIXED, "--forms", ("both-ish",))
CASES += _bad(FIXED, "--seeds", ("0", "-1", "x"))
CASES += _bad(FIXED, "--steps", ("0", "-1", "1.5"))
CASES += _bad(FIXED, "--eval-size", ("0", "x"))
CASES += _bad(FIXED, "--checkpoints", ("0", "-1"))
CASES += [
    ("fixed-attention out under a file", ["fixed-attention", "--out", "afile/fa.csv", "--figures", "figs"]),
    ("fixed-attention figures is a file", ["fixed-attention", "--out", "fa.csv", "--figures", "afile"]),
    ("fixed-attention no out", ["fixed-attention"]),
]
for _flag in ("--max-steps", "--batch-size", "--grad-accum", "--eval-interval", "--ckpt-interval",
              "--coupling-steps", "--coupling-hidden", "--eval-tokens"):
    CASES += _bad(LM, _flag, POS_INT)
CASES += _bad(LM, "--lr", POS_FLOAT)
for _flag in ("--min-lr", "--weight-decay", "--grad-clip"):
    CASES += _bad(LM, _flag, NON_NEG)
CASES += _bad(LM, "--warmup-steps", ("-1", "x"))
CASES += _bad(LM, "--seed", ("-1", "x"))
CASES += _bad(LM, "--dt-init", ("nan", "inf"))
CASES += _bad(LM, "--val-fraction", ("0", "1", "nan", "-0.5"))
CASES += _bad(LM, "--block-size", ("1", "0", "x"))
CASES += _bad(LM, "--threads", ("0", "-1"))
CASES += _bad(LM, "--device", ("bogus", "cuda:x", "gpu"))
CASES += _bad(LM, "--attention", ("fancy",))
CASES += _bad(LM, "--integrator", ("rk4",))
CASES += _bad(LM, "--preset", ("1B",))
CASES += [
    ("lm mlp-only odd hidden", LM + ["--attention", "mlp-only", "--coupling-hidden", "3"]),
    ("lm missing corpus", ["lm", "--data", "missing.txt", "--out", "run"]),
    ("lm empty corpus", ["lm", "--data", "empty.txt", "--out", "run"]),
    ("lm corpus shorter than a block", ["lm", "--data", "tiny.txt", "--out", "run", "--no-progress"]),
    ("lm empty corpus directory", ["lm", "--data", "emptydir", "--out", "run"]),
    ("lm out is a file", ["lm", "--data", "corpus.txt", "--out", "afile", "--no-progress"]),
    ("lm out under a file", ["lm", "--data", "corpus.txt", "--out", "afile/run", "--no-progress"]),
    ("lm crafted checkpoint", ["lm", "--data", "corpus.txt", "--out", "evil_lm", "--no-progress", "--tokenizer", "byte"]),
    ("lm truncated checkpoint", ["lm", "--data", "corpus.txt", "--out", "cut_lm", "--no-progress", "--tokenizer", "byte"]),
    ("lm checkpoint of another shape", ["lm", "--data", "corpus.txt", "--out", "odd_lm", "--no-progress",
                                        "--tokenizer", "byte"]),
    ("lm no out", ["lm", "--data", "corpus.txt"]),
]
if not torch.cuda.is_available():
    CASES += _bad(LM, "--device", ("cuda", "cuda:0"))
CASES += _bad(MQAR, "--n-test", ("0", "-1"))
CASES += _bad(MQAR, "--task", ("impossible",))
CASES += _bad(MQAR, "--lr", ("nan", "-1"))
CASES += _bad(MQAR, "--max-steps", ("0",))
CASES += [
    ("mqar crafted checkpoint", ["mqar", "--out", "evil_mqar", "--no-progress", "--max-steps", "2"]),
    ("mqar out under a file", ["mqar", "--out", "afile/x", "--no-progress"]),
]
for _flag in ("--workers", "--seeds", "--lm-steps", "--batch-size", "--grad-accum", "--mqar-steps"):
    CASES += _bad(STUDY, _flag, ("0", "-1", "x"))
CASES += _bad(STUDY, "--lr", ("nan", "0", "-1"))
CASES += _bad(STUDY, "--sweep-steps", ("x", "0"))
CASES += _bad(STUDY, "--variants", ("standard,fancy", ","))
CASES += _bad(STUDY, "--mqar-tasks", ("tiny",))
CASES += _bad(STUDY, "--preset", ("1B",))
CASES += _bad(STUDY, "--device", ("bogus",))
CASES += [
    ("compare-coupled no runs", STUDY),
    ("compare-coupled out is a file", STUDY[:-1] + ["afile"]),
    ("compare-coupled runs under a file", ["compare-coupled", "--runs", "afile/runs", "--out", "figs"]),
    ("compare-coupled corrupt result.json", ["compare-coupled", "--runs", "badstudy", "--out", "figs"]),
    ("compare-coupled cut metrics of a finished run", ["compare-coupled", "--runs", "cutstudy", "--out", "figs"]),
]


class Payload:
    """Unpickling this would create the file ``marker`` (what a hostile checkpoint does)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _crafted(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"step": 1, "config": {}, "model": Payload(str(marker))}, path)


def _world(root: Path) -> None:
    """The working directory's files before each case (bad data, crafted checkpoints, ...)."""
    (root / "afile").write_text("not a directory\n")
    (root / "adir").mkdir()
    (root / "emptydir").mkdir()
    (root / "empty.txt").write_bytes(b"")
    (root / "tiny.txt").write_text("hello\n")
    (root / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    header = open(LINZEN).readline()
    (root / "nocols.tsv").write_text("sentence\tlabel\nthe dog runs\tVBZ\n")
    line = "the dog runs .\tthe dog runs .\tDT NN VB .\tdog\truns\tNN\tFalse\tTrue\tVBZ\tone\t3\t0\tNN\t0\n"
    (root / "badindex.tsv").write_text(header + line)
    (root / "latin1.tsv").write_bytes(header.encode() + "the d\xf6g runs .\t".encode("latin-1") + b"x\n")
    (root / "hx_bad").mkdir()
    (root / "hx_bad" / "dataset.json").write_text(json.dumps({"p1": {"post_tokens": ["a"]}}))
    (root / "hx_bad" / "post_id_divisions.json").write_text(json.dumps({"train": ["p1"], "val": [], "test": ["p1"]}))
    (root / "hx_cut").mkdir()
    (root / "hx_cut" / "dataset.json").write_text((FIX / "hatexplain" / "dataset.json").read_text()[:100])
    (root / "hx_cut" / "post_id_divisions.json").write_text((FIX / "hatexplain" / "post_id_divisions.json").read_text())
    (root / "squad_bad").mkdir()
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        (root / "squad_bad" / name).write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"qas": 3}]}]}))
    for name in ("evil_circuits/checkpoint.pt", "evil_lm/ckpt.pt", "evil_mqar/ckpt.pt"):
        _crafted(root / name, root / "PWNED")
    for name in ("cut_circuits/checkpoint.pt", "cut_lm/ckpt.pt"):
        (root / name).parent.mkdir()
        (root / name).write_bytes(b"PK\x03\x04 truncated")
    (root / "odd_lm").mkdir()
    torch.save({"step": 1, "config": "not a dict"}, root / "odd_lm" / "ckpt.pt")
    (root / "badruns" / "sva" / "qk1_s0").mkdir(parents=True)
    (root / "badruns" / "sva" / "qk1_s0" / "final.json").write_text('{"config": {"task": "sva"')
    (root / "badstudy" / "lm-x").mkdir(parents=True)
    (root / "badstudy" / "lm-x" / "result.json").write_text("{not json")
    (root / "cutstudy" / "lm-x").mkdir(parents=True)
    (root / "cutstudy" / "lm-x" / "result.json").write_text(json.dumps({"model": {}, "train": {}}))
    (root / "cutstudy" / "lm-x" / "metrics.jsonl").write_text('{"kind": "eval", "step": 1}\n{"kind": "ev')


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    _world(root)
    return root


@pytest.fixture
def isolated(world, monkeypatch, tmp_path_factory):
    monkeypatch.chdir(world)
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path_factory.getbasetemp() / "fuzz-cache"))
    threads = torch.get_num_threads()
    yield world
    torch.set_num_threads(threads)


def test_the_table_is_large_and_covers_every_command():
    from qkdyn.cli import COMMANDS

    assert len(CASES) >= 150
    covered = {argv[0] for _, argv in CASES if argv}
    assert set(COMMANDS) <= covered


@pytest.mark.parametrize("argv", [argv for _, argv in CASES], ids=[name for name, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(argv, isolated, capsys):
    before = _snapshot(isolated)
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and err.endswith("\n") and "error" in err, err
    assert "Traceback" not in err + out
    assert _snapshot(isolated) == before
    assert not (isolated / "PWNED").exists()


# ------------------------------------------------------------------------------------------------
# integrity


@pytest.mark.parametrize("name", ["evil_circuits", "evil_lm", "evil_mqar"])
def test_a_crafted_checkpoint_never_executes(name, isolated, capsys):
    argv = {"evil_circuits": TRAIN[:8] + [name, "--no-progress"],
            "evil_lm": LM[:4] + [name, "--no-progress", "--tokenizer", "byte"],  # the fixture corpus is bytes-sized
            "evil_mqar": ["mqar", "--out", name, "--no-progress"]}[name]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "not a loadable checkpoint" in err and "UnpicklingError" in err
    assert not (isolated / "PWNED").exists()
    with pytest.raises(pickle.UnpicklingError):  # the payload is live: loading it unsafely would run it
        torch.load(isolated / name / ("checkpoint.pt" if name == "evil_circuits" else "ckpt.pt"), weights_only=True)


@pytest.mark.parametrize("plant", ["forged-hash", "symlink"])
def test_a_poisoned_code_cache_never_runs(plant, tmp_path, monkeypatch, capsys):
    """Nothing is executed from $QKDYN_CACHE: a module planted where the old code cache lived, with a
    matching .sha256 beside it (or as a symlink), neither runs nor changes a trajectory."""
    import hashlib

    from qkdyn.simulate.solve import solve
    from qkdyn.theory import compiled
    from qkdyn.theory.setting import Setting

    setting = Setting(eta_qk=2.0)
    clean = solve(setting, "CACO", t_max=50.0, points=20).columns()
    marker = tmp_path / "PWNED"
    evil = f"open({str(marker)!r}, 'w')\ndef rhs(x, p):\n    return 2.0 * x\n"
    (tmp_path / "evil.py").write_text(evil)
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path))
    for directory in (tmp_path / "theory", *(tmp_path / "theory" / key for key in ("0" * 16, "current"))):
        directory.mkdir(parents=True, exist_ok=True)
        if plant == "symlink":
            (directory / "CACO.py").symlink_to(tmp_path / "evil.py")
        else:
            (directory / "CACO.py").write_text(evil)
        (directory / "CACO.sha256").write_text(hashlib.sha256(evil.encode()).hexdigest() + "\n")
    compiled.load.cache_clear()
    try:
        again = solve(setting, "CACO", t_max=50.0, points=20).columns()
    finally:
        compiled.load.cache_clear()
    assert not marker.exists() and capsys.readouterr().err == ""
    for key in clean:
        assert list(clean[key]) == list(again[key]), key


def test_only_the_generated_modules_can_be_loaded():
    from qkdyn.theory import compiled

    for name in ("../CACO", "os", "generated", "CACO.py"):
        with pytest.raises(ValueError, match="no generated module"):
            compiled.load(name)


def _cached_corpus(cache: Path, name: str, text: str) -> Path:
    from qkdyn.empirical.data.fetch import all_sources, write_manifest

    out = cache / name
    out.mkdir(parents=True)
    (out / "text.txt").write_text(text)
    write_manifest(all_sources()[name], out)
    return out


@pytest.mark.parametrize("damage", ["edit", "truncate", "other-package"])
def test_a_tampered_cached_corpus_is_detected(damage, tmp_path, monkeypatch, capsys):
    from qkdyn.empirical.data.text_corpus import load_splits

    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path))
    out = _cached_corpus(tmp_path, "wiki", "some article text. " * 500)
    train, val = load_splits("wiki")  # the untouched copy verifies
    assert len(train) + len(val) == len("some article text. " * 500)
    del train, val
    text = (out / "text.txt").read_text()
    if damage == "edit":
        (out / "text.txt").write_text(text.replace("article", "ARTICLE", 1))
    elif damage == "truncate":
        (out / "text.txt").write_text(text[:100])
    else:
        manifest = json.loads((out / ".complete").read_text())
        (out / ".complete").write_text(json.dumps({**manifest, "package": "evil@6.6.6"}))
    code = main(["data", "fetch", "wiki"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert ("sha256" in err) if damage == "edit" else ("size" in err if damage == "truncate" else "evil" in err)
    assert main(["lm", "--data", "wiki", "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    assert not (tmp_path / "run").exists()


def test_a_cut_metrics_line_is_repaired_on_resume(tmp_path):
    """A kill mid-write leaves half a line: the resumed run drops it and ends as the uninterrupted one."""
    from qkdyn.empirical.circuits.presets import resolve
    from qkdyn.empirical.circuits.train import train

    cfg = resolve("sva", "tiny", {"data": LINZEN, "max_steps": 6, "eval_every": 2, "ckpt_every": 2})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(cfg, tmp_path / "a", progress=False)
        assert train(cfg, tmp_path / "b", stop_after=4, progress=False) is None
        metrics = tmp_path / "b" / "metrics.jsonl"
        with open(metrics, "a") as fh:
            fh.write('{"step": 6, "epoch": 0.')  # the kill
        train(cfg, tmp_path / "b", progress=False)
    finally:
        torch.set_num_threads(threads)
    assert metrics.read_text() == (tmp_path / "a" / "metrics.jsonl").read_text()


def test_a_run_directory_in_use_is_locked(tmp_path, capsys):
    from qkdyn.errors import InputError
    from qkdyn.runs import RunDir

    with RunDir(tmp_path / "run"):
        with pytest.raises(InputError, match="in use"):
            with RunDir(tmp_path / "run"):
                pass
    with RunDir(tmp_path / "run"):  # released
        pass
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []


def test_atomic_writes_use_the_umask_and_clean_stale_temporaries(tmp_path):
    from qkdyn.atomic import write_text

    stale = tmp_path / ".out.txt.999999999.abcdefgh.tmp"  # a writer that no longer exists
    stale.write_text("half")
    mask = os.umask(0o022)
    try:
        write_text(tmp_path / "out.txt", "done")
    finally:
        os.umask(mask)
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
