"""The one driver over the study registry (:mod:`qkdyn.studies`): run, judge, render, report.

:func:`drive` takes study names and a budget: it plans every study's runs, executes the missing
ones of all studies in one queue (:mod:`qkdyn.executors`: local process pool or Ray, so the workers
stay busy across studies), judges each study's claims from its records and renders its figures as
soon as its last run is in, then writes one ``report.md`` + ``report.json``. :func:`verify` is the
``qkdyn verify`` set (theory A1-A5, then A6, the sampled claims and FA).

Progress goes to stderr (tqdm): one bar over the studies, one over all runs with an estimate of the
time left, refreshed at least every 10 s while a run is in flight. Timings are printed there too and never
written into the report, so the same runs give the same report: each study's finish with the CPU seconds of
its runs (in the processes that ran them) and of its judging and drawing here, and the whole wall time with
the CPU seconds of this process and of its workers (:func:`cpu_seconds`).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from qkdyn.studies import VERIFY


def _make_dir(path: Path, flag: str) -> Path:
    from qkdyn.errors import InputError

    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {flag} directory {path}: {exc.strerror}") from None
    return path


_STAGE = ".qkdyn-staging-"


@contextlib.contextmanager
def _staged(figures: Path):
    """A folder inside ``figures`` (the same file system) that the report is written into; on success every
    file in it replaces its namesake in ``figures`` (a rename each, which needs no space), otherwise it is
    removed. So a run that fails part way (a full disk) leaves the previous figures as they were, with no
    partial file. An OSError naming a staged file names its place in ``figures`` instead. A staging
    folder left by a killed process is removed by the next run."""
    import os
    import shutil

    from qkdyn.atomic import process_alive

    for old in figures.glob(_STAGE + "*"):
        if old.is_dir() and old.name[len(_STAGE):].isdigit() and not process_alive(int(old.name[len(_STAGE):])):
            shutil.rmtree(old, ignore_errors=True)
    stage = figures / f"{_STAGE}{os.getpid()}"
    stage.mkdir()
    try:
        yield stage
        for source in sorted(stage.rglob("*")):
            target = figures / source.relative_to(stage)
            if source.is_dir():
                target.mkdir(exist_ok=True)
            else:
                os.replace(source, target)
    except OSError as exc:
        for field in ("filename", "filename2"):
            name = getattr(exc, field)
            if isinstance(name, str) and name.startswith(str(stage)):
                setattr(exc, field, str(figures) + name[len(str(stage)):])
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def heartbeat(bar, every: float = 10.0):
    """Refresh ``bar`` every ``every`` seconds (elapsed time and estimate move while a run computes)."""
    stop = threading.Event()

    def beat():
        while not stop.wait(every):
            bar.refresh()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) so far of this process and of its children that have ended (the pool's
    workers once it is shut down): :func:`os.times`."""
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


def drive(names: Sequence, budget: str, figures: str | Path, runs_dir: str | Path, *, executor: str = "local",
          workers: int = 1, ray_address: str | None = None, progress: bool = True, compute: bool = True, title: str,
          intro: str) -> list:
    """Run (what is missing), judge and render the studies ``names`` (registry names or
    :class:`qkdyn.studies.Study` instances) at ``budget``; write the report.

    Returns the claims in study order. Runs already recorded under ``runs_dir`` are read back;
    ``compute=False`` runs nothing (``qkdyn report``: judge what has finished). Records read back whose evidence a
    study cannot judge or draw are one InputError naming their folder (:func:`qkdyn.studies.reading_evidence`),
    before anything is created where the study has nothing to compute."""
    from qkdyn.studies import find, get, judge, reading_evidence

    start, cpu_start = time.perf_counter(), cpu_seconds()  # the times printed at the end count the planning too
    studies = [get(name) if isinstance(name, str) else name for name in names]
    # every plan made, every finished record read and every study with nothing to compute judged before anything
    # is written (bad input, a record whose evidence the judges cannot read included: nothing created)
    plans = [(study, study.plan(budget)) for study in studies]
    found = [find(study, specs, runs_dir) for study, specs in plans]
    judged: dict[int, list] = {}
    for i, ((study, specs), records) in enumerate(zip(plans, found, strict=True)):
        if not compute or len(records) == len(specs):
            with reading_evidence(study, records.values()):
                judged[i] = judge(study, budget, specs, records)
    final_figures, runs_dir = _make_dir(Path(figures), "--figures"), _make_dir(Path(runs_dir), "--runs")
    with _staged(final_figures) as figures:
        claims = _run_judge_render(plans, found, judged, budget, figures, runs_dir, compute=compute,
                                   executor=executor, workers=workers, ray_address=ray_address, progress=progress,
                                   title=title, intro=intro, start=start)
    own, children = (now - then for now, then in zip(cpu_seconds(), cpu_start, strict=True))
    sys.stderr.write(f"[{time.perf_counter() - start:7.1f}s] wrote {final_figures / 'report.md'} (wall time "
                     f"{time.perf_counter() - start:.1f} s; CPU {own + children:.1f} s: {own:.1f} s here, "
                     f"{children:.1f} s in workers)\n")
    return claims


def _run_judge_render(plans, found, judged_before: dict[int, list], budget: str, figures: Path, runs_dir: Path, *,
                      compute: bool, executor: str, workers: int, ray_address: str | None, progress: bool, title: str,
                      intro: str, start: float) -> list:
    """:func:`drive`'s work once the plans are made, the finished records read and the studies with nothing to
    compute judged (``judged_before``: study index -> its claims): compute the missing runs, judge the other
    studies and render each study as soon as its runs are in, and write the report into ``figures``."""
    from tqdm import tqdm

    from qkdyn.executors import execute_all
    from qkdyn.report import write_claims_report
    from qkdyn.studies import judge, reading_evidence

    missing = [[s for s in specs if s not in records] if compute else [] for (_, specs), records in zip(plans, found, strict=True)]
    judged: dict[int, tuple[list, dict]] = {}
    run_cpu: dict = {}  # spec -> the CPU seconds of its run (execute_all)
    context = {"budget": budget}
    outer = tqdm(total=len(plans), desc="studies", unit="study", position=0, file=sys.stderr, disable=not progress,
                 dynamic_ncols=True)
    bar = tqdm(total=sum(len(specs) for _, specs in plans), initial=sum(map(len, found)), desc="  runs", unit="run",
               position=1, leave=False, file=sys.stderr, disable=not progress, dynamic_ncols=True)

    def conclude(index: int) -> None:
        """Judge and render study ``index`` (its runs are all in, or nothing more is computed)."""
        (study, specs), records = plans[index], found[index]
        done = [records[s] for s in specs if s in records]
        # records read from the runs folder may be anyone's: evidence they lack is one line naming them; over
        # records all computed here a judge's or a drawing's error is a bug and keeps its traceback
        fresh = bool(missing[index]) and len(missing[index]) == len(specs)
        drawing = time.process_time()
        with contextlib.nullcontext() if fresh else reading_evidence(study, done):
            claims = judged_before[index] if index in judged_before else judge(study, budget, specs, records)
            judged[index] = (claims, study.report(done, claims, budget, figures) if len(done) == len(specs) else {})
        outer.update()
        tqdm.write(f"[{time.perf_counter() - start:7.1f}s] {study.name}: {len(missing[index])} of {len(specs)} runs "
                   f"computed, {len(claims)} claims (CPU: runs {sum(run_cpu.get(s, 0.0) for s in specs):.1f} s, "
                   f"judged and drawn {time.process_time() - drawing:.1f} s)", file=sys.stderr)

    # one pool for every study's missing runs (both cores busy across studies); each study is judged
    # and rendered here as soon as its last run is in, while the workers go on with the next ones
    index_of = {id(study): i for i, (study, _) in enumerate(plans)}
    with bar, outer, heartbeat(bar):
        for i in range(len(plans)):
            if not missing[i]:
                conclude(i)
        jobs = [(study, todo) for (study, _), todo in zip(plans, missing, strict=True) if todo]
        for study, record in execute_all(jobs, runs_dir, executor, workers, ray_address, cpu=run_cpu):
            i = index_of[id(study)]
            found[i][record.spec] = record
            bar.set_postfix_str(f"{study.name}/{record.spec.name}")
            bar.update()
            if all(s in found[i] for s in missing[i]):
                conclude(i)
    claims, plots, sections, extra = [], [], [], {}
    for i, (study, _) in enumerate(plans):  # in study order, whatever order they finished in
        context[study.name] = study.context(budget)
        found_claims, parts = judged[i]
        claims += found_claims
        plots += parts.get("plots", [])
        sections += parts.get("sections", [])
        if parts.get("json"):
            extra[study.name] = parts["json"]
    write_claims_report(figures, claims, title=title, context=context, plots=plots, intro=intro, sections=sections,
                        extra_json=extra)
    return claims


def verify(quick: bool = False, figures: str | Path = "figures", empirical: bool = True, *, budget: str | None = None,
           runs_dir: str | Path | None = None, executor: str = "local", workers: int = 1,
           ray_address: str | None = None, progress: bool = True, studies: Sequence[str] | None = None) -> list:
    """Check every claim and write ``figures/report.md`` + ``report.json`` and the plots.

    Each study of :data:`qkdyn.studies.VERIFY` plans its runs at the budget, runs what is missing under
    ``runs_dir`` (one queue over all studies), and judges its claims by the one statistical rule of
    :mod:`qkdyn.claims` (a claim whose precondition is unmet is ``inconclusive``).

    Parameters
    ----------
    quick : bool
        Budget ``quick``: shorter horizons and coarser sweeps, to check the pipeline in minutes.
    figures : str or Path
        Where the report and the plots are written; each file replaces its namesake only once all are
        written (a run that fails part way leaves the previous ones).
    empirical : bool
        False: the theory claims only, without the torch studies and the full-model checks.
    budget : {"quick", "cpu", "gpu", "paper"} or None
        The budget by name (it wins over ``quick``); None: ``cpu``, or ``quick`` with ``quick=True``.
    runs_dir : str or Path or None
        Where the run records go; a finished run found there is read back, not recomputed (give one to
        resume). None: a fresh temporary directory, so every call computes.
    executor : {"local", "ray"}
        A pool of ``workers`` local processes, or Ray (``pip install 'qkdyn[ray]'``).
    workers : int
        Local worker processes (one torch thread each).
    ray_address : str or None
        An existing Ray cluster to join; None starts a local one.
    progress : bool
        Progress bars on stderr (the studies, and all runs).
    studies : sequence of str or None
        Only these registered studies (``qkdyn.studies.STUDIES``); None: every study of ``VERIFY``.

    Returns
    -------
    list of Claim
        The claims (:class:`qkdyn.claims.Claim`: id, statement, verdict, evidence, summary, plots) in
        study order, as the report shows them.

    Examples
    --------
    >>> claims = qkdyn.verify(quick=True, figures="out", empirical=False)  # doctest: +SKIP
    >>> {c.id: c.verdict for c in claims}["A2"]  # doctest: +SKIP
    'holds'
    """
    budget = budget or ("quick" if quick else "cpu")
    from qkdyn.study_theory import TheoryStudy

    names = list(studies or (VERIFY if empirical else [TheoryStudy(full_model=False)]))
    intro = ("Generated by `qkdyn verify`: every verdict and number below is computed in the run that wrote this "
             "file (full numbers in `report.json`).")
    with contextlib.ExitStack() as stack:
        if runs_dir is None:
            runs_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="qkdyn-verify-"))
        return drive(names, budget, figures, runs_dir, executor=executor, workers=workers, ray_address=ray_address,
                     progress=progress, title="qkdyn verification report", intro=intro)
