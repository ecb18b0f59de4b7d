#!/usr/bin/env python3
"""Paper B's claim B1 decided on one GPU in one command: standard vs coupled Euler attention, the
``coupled`` study's ``gpu`` budget (docs/coupled.md, "The GPU plan").

    python scripts/coupled_gpu.py prepare            # here: fetch `kernel`, pack it into .qkdyn-cache/carry/
    python scripts/coupled_gpu.py plan               # the sizing: FLOPs, tokens, seeds, CPU throughput
    python3 scripts/coupled_gpu.py run --out "$OUT"  # on the GPU machine, carrying .qkdyn-cache/carry

``run`` does everything inside one wall-clock budget (``--time-s``):

1. makes this checkout importable where qkdyn is not installed (a machine with torch only): a folder
   holding ``qkdyn``, links to the checkout laid out as pyproject's ``package-dir`` installs it;
2. unpacks the carried corpus into the cache, checked against the sha256 beside it and its pins
   (:func:`qkdyn.empirical.data.fetch.unpack_packed`);
3. calibrates: the budget's runs for ``--cal-steps`` steps, ``--workers`` at a time as the real runs
   share the device, which measures the step time under that sharing, ``tau`` (mean training time
   per step), and the rest of a wave's wall time, ``o`` (calibration wall time - ``cal_steps tau``:
   start, evaluations, ablations, report);
4. runs the study at ``S = min(budget steps, one epoch, floor((SAFETY (deadline - now) / waves - o) /
   tau))`` steps (``waves = ceil(runs / workers)``); a run still going at the deadline is stopped and
   the report covers the finished runs (claims missing some say which);
5. leaves at most :data:`MAX_FILES` files in ``--out``: ``report.md``, ``report.json``,
   ``README-section.md``, ``report-files.tar.gz`` (figures), ``records.tar.gz`` (the run records, checkpoints left
   out; extracted into RUNS, ``qkdyn compare-coupled --runs RUNS`` with ``plan.json``'s ``remake``
   flags re-makes the report anywhere), ``plan.json`` (machine, calibration, the steps chosen and why,
   throughput, timings) and ``log.txt``.

The run specs planned on the device ask for a share of its GPU (``BUDGETS["gpu"].gpus``, what Ray schedules
by); a CPU machine plans the same runs asking for none and still reads their records
(:meth:`qkdyn.studies.Study.load` matches a record to its spec without the resources it asked for),
so the records brought back re-make the report anywhere.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the corpus of the gpu budget, packed here by `prepare` into CARRY (the device has no network)
CORPUS = "kernel"
CARRY = ROOT / ".qkdyn-cache" / "carry"
#: what the device tool carries at most: the working tree and the carried paths together
TRAVEL_LIMIT = 64 * 2**20
#: files the device tool brings back from $OUT at most, and the names it accepts
MAX_FILES = 8
PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")
#: share of the time left that the chosen steps may fill (the rest absorbs the estimate's error)
SAFETY = 0.85
#: seconds kept for the report and the packing after the runs
REPORT_RESERVE_S = 45.0
#: marks a scratch folder as this script's (``run`` empties no other)
WORK_MARK = ".coupled-gpu-work"
#: seconds a stopped study gets to exit after SIGTERM before SIGKILL
GRACE_S = 15.0
#: the effect B1 must be able to detect: 1% perplexity, and the paired sd of log ppl (coupled - standard)
#: the CPU pilot measures at 1200 steps (scripts/coupled_pilot.sh: 0.0098 over seeds 0-2, 0.0075 over 5)
ONE_PERCENT = math.log(1 / 0.99)
PILOT_SD = 0.01
#: an 8192^3 bf16 matrix product on this workplace's H100 (device tool notes, 2026-11-13): the
#: ceiling the plan's GPU estimates and the measured model FLOP utilisation are stated against
H100_BF16_FLOPS = 7.98e14
#: the model FLOP utilisation the plan counts on for these small models, ten processes sharing the
#: device (the run measures its own): the largest preset whose runs, one epoch each, fit at it is the plan's
PLAUSIBLE_MFU = 0.2


class Log:
    """Lines to stdout (flushed: the device tool returns the output's tail) and to a file."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.start, self.lock = path, time.monotonic(), threading.Lock()
        self.file = open(path, "a", encoding="utf-8")

    def __call__(self, text: str) -> None:
        with self.lock:
            for line in text.rstrip("\n").split("\n"):
                stamped = f"[{time.monotonic() - self.start:7.1f}s] {line}\n"
                sys.stdout.write(stamped)
                self.file.write(stamped)
            sys.stdout.flush()
            self.file.flush()


# ---- a checkout that imports, and the driver ---------------------------------------------------------------

def importable(root: Path, site: Path) -> dict[str, str]:
    """The environment under which ``python -m qkdyn.cli`` imports this checkout. Where qkdyn imports
    already it is the current one; otherwise ``site/qkdyn`` is made (links to every entry of
    ``root/qkdyn``, and ``theory``, ``simulate``, ``empirical`` linked in as its subpackages, the layout
    of pyproject's ``package-dir``) and put first on PYTHONPATH, here and for the commands started."""
    import importlib.util

    env = dict(os.environ)
    if importlib.util.find_spec("qkdyn") is not None:
        return env
    package = site / "qkdyn"
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for entry in (root / "qkdyn").iterdir():
        (package / entry.name).symlink_to(entry)
    for sub in ("theory", "simulate", "empirical"):
        (package / sub).symlink_to(root / sub)
    sys.path.insert(0, str(site))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    return env


def run_command(argv: list[str], env: dict[str, str], log: Log, deadline: float) -> tuple[int, bool]:
    """``qkdyn`` ``argv`` (``python -m qkdyn.cli`` under ``env``) in a new process group, its output into
    ``log``; stopped (SIGTERM, SIGKILL after GRACE_S) at ``deadline`` (time.monotonic). (exit status, stopped)."""
    command = [sys.executable, "-m", "qkdyn.cli", *argv]
    log("$ qkdyn " + " ".join(argv))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env | {"PYTHONUNBUFFERED": "1"}, start_new_session=True)
    stream = proc.stdout

    def copy_output() -> None:
        for line in stream or ():
            log("  " + line)

    pump = threading.Thread(target=copy_output, daemon=True)
    pump.start()
    stopped = False
    try:
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stopped = True
        log(f"deadline: stopping the study (process group {proc.pid})")
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
    pump.join(timeout=10)
    return code, stopped


# ---- the sizing ---------------------------------------------------------------------------------------------

def study_config(flags: list[str]):
    """The gpu budget's StudyConfig with the study ``flags`` (compare-coupled's) on top."""
    from qkdyn.cli import build_parser
    from qkdyn.commands.compare_coupled import study_of

    args = build_parser().parse_args(["compare-coupled", "--budget", "gpu", *flags])
    return study_of(args).config("gpu")


def model_shape(config, variant: str):
    """The GPTConfig of ``variant``'s runs under study ``config``."""
    from qkdyn.empirical.coupled.model import preset_config
    from qkdyn.empirical.coupled.study import LM_VARIANTS

    shape = {"vocab_size": config.vocab_size if config.tokenizer == "bpe" else 256}
    if config.block_size:
        shape["block_size"] = config.block_size
    return preset_config(config.preset, attention=LM_VARIANTS[variant], **shape)


def without(flags: list[str], *names: str) -> list[str]:
    """``flags`` less each ``NAME VALUE`` and ``NAME=VALUE`` of ``names`` (the script sets those itself)."""
    kept, skip = [], False
    for flag in flags:
        if skip:
            skip = False
        elif flag in names:
            skip = True
        elif flag.split("=", 1)[0] not in names:
            kept.append(flag)
    return kept


def flops_of(config, variant: str) -> float:
    """Training FLOPs per token of ``variant``'s model (:func:`qkdyn.empirical.coupled.model.flops_per_token`)."""
    from qkdyn.empirical.coupled.model import flops_per_token

    return float(flops_per_token(model_shape(config, variant)))


def tokens_per_step(config) -> int:
    """Training tokens of one optimiser step under study ``config``."""
    return int(config.batch_size * config.grad_accum * model_shape(config, config.variants[0]).block_size)


def epoch_steps(config) -> tuple[int, int]:
    """(training tokens of the coherent corpus, the steps that see each of them once)."""
    from qkdyn.empirical.coupled.experiment import lm_splits

    train, _, _, _ = lm_splits(config.coherent, config.tokenizer, config.vocab_size, config.val_fraction)
    return len(train), len(train) // tokens_per_step(config)


@dataclasses.dataclass(frozen=True)
class Choice:
    steps: int
    limited_by: str  # "time", "one epoch" or "the budget"
    waves: int
    estimated_wall_s: float


def choose_steps(budget_steps: int, epoch: int, seconds_left: float, runs: int, workers: int, step_s: float,
                 overhead_s: float) -> Choice:
    """The steps of every run: the fewest of the budget's, one epoch's and what fits ``SAFETY x
    seconds_left`` at ``ceil(runs / workers)`` waves of ``overhead_s + steps x step_s`` each. ValueError
    when not one step fits."""
    waves = math.ceil(runs / workers)
    fit = math.floor((SAFETY * seconds_left / waves - overhead_s) / step_s) if step_s > 0 else budget_steps
    steps, limited_by = min((fit, "time"), (epoch, "one epoch"), (budget_steps, "the budget"), key=lambda c: c[0])
    if steps < 1:
        raise ValueError(f"no step fits: {seconds_left:.0f} s left for {waves} waves of {overhead_s:.1f} s + "
                         f"{step_s:.3g} s a step")
    return Choice(steps, limited_by, waves, waves * (overhead_s + steps * step_s))


def read_runs(runs_dir: Path) -> list[dict]:
    """The LM run records' results under ``runs_dir/coupled``."""
    records = [json.loads(p.read_text()) for p in sorted((runs_dir / "coupled").glob("lm-*.json"))]
    return [r["result"] | {"variant": r["spec"]["config"]["variant"]} for r in records]


def calibration(results: list[dict], steps: int, wall_s: float, flops: dict[str, float]) -> dict:
    """From the calibration's records: the step time under the real runs' sharing (mean training time
    per step), the rest of the wave's wall time, and the throughput and model FLOP utilisation."""
    train_s = [r["details"]["train_time_s"] for r in results]
    step_s = sum(train_s) / len(train_s) / steps
    tokens_per_s = sum(r["details"]["tokens"] / r["details"]["train_time_s"] for r in results)
    flop_rate = sum(flops[r["variant"]] * r["details"]["tokens"] / r["details"]["train_time_s"] for r in results)
    return {"steps": steps, "runs": len(results), "wall_s": wall_s, "train_time_s": train_s, "step_s": step_s,
            "overhead_s": max(0.0, wall_s - steps * step_s), "tokens_per_s_all_runs": tokens_per_s,
            "model_flops_per_s": flop_rate, "mfu_vs_h100_bf16": flop_rate / H100_BF16_FLOPS}


# ---- what comes back ----------------------------------------------------------------------------------------

REPORT_FILES = ("report.md", "report.json", "README-section.md")


def pack_out(report: Path, runs: dict[str, Path], out: Path, extra: dict[str, str]) -> list[Path]:
    """``out`` as the device tool brings it back: the report's text files; its other files (figures,
    tables) in ``report-files.tar.gz``; the run records (``NAME.json`` and each run's folder without its checkpoint) in
    ``records.tar.gz``, one top folder per entry of ``runs``, so that extracting it into RUNS gives
    ``RUNS/coupled/...`` for the ``main`` runs; ``extra`` (name -> text). At most MAX_FILES plain files."""
    out.mkdir(parents=True, exist_ok=True)
    written = [Path(shutil.copyfile(report / name, out / name)) for name in REPORT_FILES if (report / name).is_file()]
    with tarfile.open(out / "report-files.tar.gz", "w:gz") as tar:
        for path in sorted(p for p in report.rglob("*") if p.is_file() and p.name not in REPORT_FILES):
            tar.add(path, arcname=str(path.relative_to(report)))
    with tarfile.open(out / "records.tar.gz", "w:gz") as tar:
        for top, folder in runs.items():
            for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "checkpoint.pt"):
                relative = path.relative_to(folder)
                tar.add(path, arcname=str(relative) if top == "main" else f"{top}/{relative}")
    written += [out / "report-files.tar.gz", out / "records.tar.gz"]
    for name, text in extra.items():
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    if len(written) > MAX_FILES or not all(PLAIN_NAME.fullmatch(p.name) for p in written):
        raise RuntimeError(f"{out} would hold {[p.name for p in written]}: the device tool brings back at most "
                           f"{MAX_FILES} plainly named files")
    return written


# ---- the commands -------------------------------------------------------------------------------------------

class StepFailed(Exception):
    """A step of ``run`` that did not give what the next needs (its line says why; the log has the rest)."""


def fresh_work(work: Path) -> None:
    """Empty the scratch folder ``work`` for a new run: only one this script made (WORK_MARK), or a new one."""
    if work.exists() and any(work.iterdir()) and not (work / WORK_MARK).exists():
        raise StepFailed(f"--work {work} is not empty and not this script's scratch folder: give another")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / WORK_MARK).touch()


def run(args: argparse.Namespace, flags: list[str]) -> int:
    """Calibrate, run, report and pack (module docstring); whatever happens, ``--out`` then holds the
    log and ``plan.json`` with what was done, and the records and report made so far."""
    t0 = time.monotonic()
    work, out = Path(args.work).resolve(), Path(args.out).resolve()
    fresh_work(work)
    log = Log(work / "log.txt")
    plan: dict = {}
    status = 1
    try:
        status = study_on_device(args, flags, work, log, plan, deadline=t0 + args.time_s)
    except StepFailed as failed:
        log(f"stopped: {failed}")
    finally:
        plan["wall_s"] = time.monotonic() - t0
        runs = {top: work / folder for top, folder in (("main", "runs"), ("calibration", "calibration"))
                if (work / folder / "coupled").is_dir()}
        log(f"packing {out}")
        log.file.close()
        files = pack_out(work / "report", runs, out, {"plan.json": json.dumps(plan, indent=1) + "\n",
                                                       "log.txt": log.path.read_text(encoding="utf-8")})
        print(f"wrote {len(files)} files to {out}: {', '.join(p.name for p in files)}", flush=True)
    return status


def study_on_device(args: argparse.Namespace, flags: list[str], work: Path, log: Log, plan: dict,
                    deadline: float) -> int:
    """The steps of ``run``, filling ``plan``; 0 when the report was made."""
    env = importable(ROOT, work / "site")
    import torch
    from qkdyn.empirical.data.fetch import unpack_packed

    plan["machine"] = {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
                       "cuda": torch.cuda.is_available(),
                       "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    log(f"machine: {json.dumps(plan['machine'])}")
    archive = Path(args.corpus_archive) if args.corpus_archive else CARRY / f"{CORPUS}.tar.xz"
    if archive.exists():
        log(f"corpus: {unpack_packed(archive)} (from {archive}, sha256 and pins checked)")
    config = study_config(flags)
    flags = [*without(flags, "--seeds", "--lm-steps"), "--seeds", str(config.seeds)]
    runs = len(config.variants) * config.seeds
    train_tokens, epoch = epoch_steps(config)
    flops = {v: flops_of(config, v) for v in config.variants}
    plan |= {"flags": flags, "corpus": {"name": config.coherent, "train_tokens": train_tokens,
             "tokens_per_step": tokens_per_step(config), "epoch_steps": epoch}, "flops_per_token": flops}
    log(f"corpus {config.coherent}: {train_tokens:,} training tokens, {tokens_per_step(config):,} a step: one epoch "
        f"is {epoch} steps; {runs} runs, {args.workers} at a time")
    base = ["compare-coupled", "--budget", "gpu", "--no-progress", "--workers", str(args.workers)]

    plan["calibration"] = None
    if args.steps:
        chosen = Choice(args.steps, "--steps", math.ceil(runs / args.workers), math.nan)
    else:
        cal_seeds = max(1, math.ceil(args.workers / len(config.variants)))
        cal_flags = [*without(flags, "--seeds"), "--seeds", str(cal_seeds), "--lm-steps", str(args.cal_steps)]
        start = time.monotonic()
        code, stopped = run_command([*base, "--train", *cal_flags, "--runs", str(work / "calibration"),
                                     "--out", str(work / "calibration-report")], env, log, deadline)
        cal = read_runs(work / "calibration")
        if code or stopped or len(cal) != cal_seeds * len(config.variants):
            raise StepFailed(f"calibration failed (exit {code}{', stopped' if stopped else ''}, {len(cal)} of "
                             f"{cal_seeds * len(config.variants)} runs)")
        plan["calibration"] = calibration(cal, args.cal_steps, time.monotonic() - start, flops)
        log(f"calibration: {json.dumps(plan['calibration'])}")
        try:
            chosen = choose_steps(config.lm_steps, epoch, deadline - REPORT_RESERVE_S - time.monotonic(), runs,
                                  args.workers, plan["calibration"]["step_s"], plan["calibration"]["overhead_s"])
        except ValueError as exc:
            raise StepFailed(str(exc)) from None
    plan["chosen"] = dataclasses.asdict(chosen) | {"epochs": chosen.steps / epoch if epoch else math.nan,
                                                   "seeds": config.seeds, "runs": runs}
    log(f"chosen: {json.dumps(plan['chosen'])}")

    flags = [*flags, "--lm-steps", str(chosen.steps)]
    main_runs, report = work / "runs", work / "report"
    plan["remake"] = " ".join(["qkdyn", "compare-coupled", "--budget", "gpu", *flags, "--runs", "RUNS", "--out", "OUT"])
    start = time.monotonic()
    code, stopped = run_command([*base, "--train", *flags, "--runs", str(main_runs), "--out", str(report)], env, log,
                                deadline - REPORT_RESERVE_S)
    finished = read_runs(main_runs)
    plan["main"] = {"wall_s": time.monotonic() - start, "exit": code, "stopped_at_deadline": stopped,
                    "finished": len(finished), "planned": runs,
                    "tokens_per_s": {v: [r["details"]["tokens_per_s"] for r in finished if r["variant"] == v]
                                     for v in config.variants}}
    if code or stopped:  # the report of the finished runs (the claims say which are missing)
        run_command([*base, *flags, "--runs", str(main_runs), "--out", str(report)], env, log, time.monotonic() + 120)
    log(f"main: {json.dumps(plan['main'])}; remake anywhere: {plan['remake']} (RUNS: records.tar.gz extracted)")
    return 0 if (report / "report.json").is_file() else 1


def cpu_throughput(config, variant: str, steps: int, batch: int) -> dict:
    """Training tokens per second of ``variant``'s model on one CPU thread (``steps`` timed steps of
    ``batch`` sequences after one untimed), and the FLOP rate that is."""
    import torch
    from qkdyn.empirical.coupled.configs import TrainConfig
    from qkdyn.empirical.coupled.model import GPT
    from qkdyn.empirical.coupled.train import make_optimizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    shape = model_shape(config, variant)
    model = GPT(shape)
    optimizer = make_optimizer(model, TrainConfig(), "cpu")
    x = torch.randint(0, shape.vocab_size, (batch, shape.block_size + 1))
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        model(x[:, :-1], x[:, 1:])[1].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    tokens_per_s = batch * shape.block_size * steps / sum(times[1:])
    return {"tokens_per_s": tokens_per_s, "flops_per_s": tokens_per_s * flops_of(config, variant)}


def plan_command(args: argparse.Namespace, flags: list[str]) -> int:
    """The sizing of the budget, printed and as one JSON line: FLOPs per token and per run, tokens
    against one epoch, the seeds the pilot's spread asks for, one CPU thread's measured throughput,
    and the GPU time the FLOPs take at a range of utilisations (the run calibrates on the day)."""
    importable(ROOT, Path(args.work) / "site")
    from qkdyn.empirical.coupled.configs import PRESET_NAMES
    from qkdyn.empirical.coupled.model import count_parameters

    from qkdyn.stats import detectable_effect, seeds_needed

    config = study_config(flags)
    runs = len(config.variants) * config.seeds
    train_tokens, epoch = epoch_steps(config)
    run_tokens = config.lm_steps * tokens_per_step(config)
    sizing: dict = {"preset": config.preset, "seeds": config.seeds, "runs": runs, "steps": config.lm_steps,
                    "tokens_per_run": run_tokens, "train_tokens": train_tokens, "epochs": run_tokens / train_tokens,
                    "variants": {}}
    for v in config.variants:
        shape = model_shape(config, v)
        row = {"parameters": count_parameters(shape), "flops_per_token": flops_of(config, v),
               "flops_per_run": flops_of(config, v) * run_tokens}
        if args.cpu_steps:
            row["cpu"] = cpu_throughput(config, v, args.cpu_steps, args.cpu_batch)
        sizing["variants"][v] = row
    total = sum(sizing["variants"][v]["flops_per_run"] for v in config.variants) * config.seeds
    sizing["flops_all_runs"] = total
    sizing["gpu_s_at_mfu"] = {f"{m:g}": total / (m * H100_BF16_FLOPS) for m in (0.05, 0.1, 0.2)}
    epoch_tokens = epoch * tokens_per_step(config)
    sizing["presets"] = {}
    for preset in PRESET_NAMES:
        shaped = dataclasses.replace(config, preset=preset)
        flops = sum(flops_of(shaped, v) for v in config.variants) * config.seeds * epoch_tokens
        sizing["presets"][preset] = {"flops_one_epoch": flops,
                                     "mfu_to_fit": flops / (H100_BF16_FLOPS * args.run_seconds)}
    sizing["largest_preset_that_fits"] = max(
        (p for p in PRESET_NAMES if sizing["presets"][p]["mfu_to_fit"] <= PLAUSIBLE_MFU), key=PRESET_NAMES.index,
        default=None)
    sizing["pilot_sd"] = args.pilot_sd
    sizing["seeds_for_one_percent"] = seeds_needed("two-sided", ONE_PERCENT, args.pilot_sd)
    sizing["detectable_at_budget_seeds"] = detectable_effect("two-sided", args.pilot_sd, config.seeds)
    print(f"{config.preset}: {runs} runs ({', '.join(config.variants)} x {config.seeds} seeds), {config.lm_steps} "
          f"steps of {tokens_per_step(config):,} tokens = {run_tokens:,} tokens a run, {sizing['epochs']:.3f} epochs of "
          f"{config.coherent} ({train_tokens:,} training tokens; one epoch is {epoch} steps)")
    for v, row in sizing["variants"].items():
        cpu = (f"; one CPU thread: {row['cpu']['tokens_per_s']:,.0f} tokens/s = {row['cpu']['flops_per_s']:.3g} FLOP/s, "
               f"a run {run_tokens / row['cpu']['tokens_per_s'] / 3600:.1f} CPU-hours") if "cpu" in row else ""
        print(f"  {v}: {row['parameters']:,} parameters, {row['flops_per_token']:.4g} FLOPs/token, "
              f"{row['flops_per_run']:.3g} a run{cpu}")
    print(f"all runs: {total:.3g} FLOPs = " + ", ".join(
        f"{s:.0f} s at {float(m):.0%}" for m, s in sizing["gpu_s_at_mfu"].items())
        + f" of the H100's {H100_BF16_FLOPS:.3g} bf16 FLOP/s")
    print(f"one epoch a run, all runs in {args.run_seconds:g} s of the H100, needs a utilisation of " + ", ".join(
        f"{p} {row['mfu_to_fit']:.1%}" for p, row in sizing["presets"].items())
        + f": the largest preset that fits at <= {PLAUSIBLE_MFU:.0%} is {sizing['largest_preset_that_fits']}")
    print(f"seeds: the 1% effect ({ONE_PERCENT:.4f} log ppl) at the pilot's paired sd {args.pilot_sd} needs "
          f"{sizing['seeds_for_one_percent']} seeds (80% power); {config.seeds} seeds detect "
          f">= {sizing['detectable_at_budget_seeds']:.4f}")
    print(json.dumps(sizing))
    return 0


def prepare(args: argparse.Namespace) -> int:
    """Fetch the corpus here and pack it into CARRY; refuse when the working tree and it would not
    travel (TRAVEL_LIMIT)."""
    from qkdyn.empirical.data.fetch import pack_cached

    archive = pack_cached(CORPUS, CARRY)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    tree = sum((ROOT / p).stat().st_size for p in listed if p and (ROOT / p).is_file())
    carried = sum(p.stat().st_size for p in CARRY.iterdir() if p.is_file())
    print(f"{archive} ({archive.stat().st_size / 2**20:.1f} MiB) and its sha256; with the working tree "
          f"({tree / 2**20:.1f} MiB) {(tree + carried) / 2**20:.1f} MiB travel (limit {TRAVEL_LIMIT / 2**20:.0f} MiB)")
    return 0 if tree + carried <= TRAVEL_LIMIT else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Other flags go to `qkdyn compare-coupled` (e.g. --model tiny --device cpu).")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="fetch the corpus and pack it to travel (here)")
    plan = sub.add_parser("plan", help="the sizing of the budget")
    plan.add_argument("--cpu-steps", type=int, default=2, help="timed CPU steps per variant (0: none)")
    plan.add_argument("--cpu-batch", type=int, default=4, help="sequences per timed CPU step")
    plan.add_argument("--pilot-sd", type=float, default=PILOT_SD, help="paired sd of log ppl the seeds are sized on")
    plan.add_argument("--run-seconds", type=float, default=300.0,
                      help="device seconds for the runs themselves (run's --time-s less calibration and report)")
    plan.add_argument("--work", default="/tmp/qkdyn-gpu", help="scratch folder")
    go = sub.add_parser("run", help="calibrate, run, report, pack (on the GPU machine)")
    go.add_argument("--out", required=True, help="where the at most 8 files go ($OUT on the device)")
    go.add_argument("--work", default="/tmp/qkdyn-gpu", help="scratch folder (runs, report), emptied first")
    go.add_argument("--time-s", type=float, default=480.0, help="wall-clock budget of the whole command")
    go.add_argument("--workers", type=int, default=10, help="runs at a time on the one device")
    go.add_argument("--cal-steps", type=int, default=60, help="steps of each calibration run")
    go.add_argument("--steps", type=int, default=0, help="steps of each run, no calibration (0: calibrate)")
    go.add_argument("--corpus-archive", default="", help=f"packed corpus (default {CARRY}/{CORPUS}.tar.xz if there)")
    return p


def main(argv: list[str]) -> int:
    args, flags = parser().parse_known_args(argv)
    if args.command == "run" and args.workers < 1:
        parser().error(f"--workers must be at least 1, got {args.workers}")
    commands = {"prepare": lambda: prepare(args), "plan": lambda: plan_command(args, flags),
                "run": lambda: run(args, flags)}
    try:
        return commands[args.command]()
    except Exception as exc:  # a user's mistake (qkdyn's InputError, a foreign --work): one line, then exit 2
        if not isinstance(exc, StepFailed) and type(exc).__name__ != "InputError":
            raise
        sys.stderr.write(f"coupled_gpu.py {args.command}: error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
