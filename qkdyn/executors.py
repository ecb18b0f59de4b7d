"""Run a study's missing specs: ``local`` (a process pool) or ``ray`` (tasks on a Ray cluster).

Both yield each finished :class:`qkdyn.studies.Record` as it arrives (in completion order) and
write it under ``runs_dir`` (atomic), so an interrupted driver loses at most the runs in flight.

* ``local``: with one worker the runs go one after another in this process; with more, a
  ``spawn`` process pool whose workers ask the kernel for SIGKILL when their parent dies
  (``prctl(PR_SET_PDEATHSIG)`` on Linux), so killing the driver, even with SIGKILL, leaves no worker.
* ``ray``: ``ray.init()`` starts a local cluster when no address is given (stopped again at the
  end), or joins ``address``; each run is one task asking for its spec's CPUs and GPUs, so Ray
  places one run per GPU. Records travel back to the driver, which writes them; files a run draws
  (figures) land in ``runs_dir`` on the node that ran it, so a multi-node cluster wants a shared
  ``runs_dir``. Ray is the optional extra ``qkdyn[ray]``.
"""
from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
from pathlib import Path
from typing import Iterator

from qkdyn.errors import InputError
from qkdyn.studies import Record, RunSpec, Study, die_with_parent, get, save

EXECUTORS = ("local", "ray")


def run_one(study_name: str, spec_json: str, runs_dir: str) -> dict:
    """One run in a worker: the record's result (JSON data) after writing it under ``runs_dir``."""
    study = get(study_name)
    return study.run(RunSpec.from_dict(json.loads(spec_json)), runs_dir).result


def execute(study: Study, specs: list[RunSpec], runs_dir: str | Path, executor: str = "local",
            workers: int = 1, ray_address: str | None = None) -> Iterator[Record]:
    """Run ``specs`` of ``study`` (the caller passes the missing ones); yield each record as it finishes."""
    if executor not in EXECUTORS:
        from qkdyn.suggest import unknown_choice

        raise InputError(unknown_choice("executor", executor, EXECUTORS))
    if not specs:
        return
    if executor == "ray":
        yield from _ray(study, specs, runs_dir, ray_address)
    elif workers <= 1 or len(specs) == 1:
        for spec in specs:
            yield study.run(spec, runs_dir)
    else:
        yield from _pool(study, specs, runs_dir, workers)


def _pool(study: Study, specs: list[RunSpec], runs_dir, workers: int) -> Iterator[Record]:
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(min(workers, len(specs)), mp_context=context,
                                                  initializer=die_with_parent)
    try:
        futures = {pool.submit(run_one, study.name, spec.to_json(), str(runs_dir)): spec for spec in specs}
        for future in concurrent.futures.as_completed(futures):
            spec = futures[future]
            yield Record(spec, future.result(), study.record_path(spec, Path(runs_dir)).with_suffix(""))
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM, a failed run, the consumer gone): the running workers are
        # killed rather than awaited (records are written atomically, so nothing half-written stays);
        # the pool has no public terminate before Python 3.14
        for process in list((pool._processes or {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _ray(study: Study, specs: list[RunSpec], runs_dir, address: str | None) -> Iterator[Record]:
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'qkdyn[ray]'", "executor")
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        task = ray.remote(run_one)
        pending = {task.options(num_cpus=spec.cpus, num_gpus=spec.gpus).remote(
            study.name, spec.to_json(), str(runs_dir)): spec for spec in specs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            spec = pending.pop(done[0])
            yield save(Record(spec, ray.get(done[0]), Path()), runs_dir)
    finally:
        if started:
            ray.shutdown()
