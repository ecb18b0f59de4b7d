"""Run the missing specs of one or more studies (:func:`execute_all`, one queue for all of them):
``local`` (a process pool) or ``ray`` (tasks on a Ray cluster).

Both yield each finished (study, :class:`qkdyn.studies.Record`) as it arrives (in completion order) and
write it under ``runs_dir`` (atomic), so an interrupted driver loses at most the runs in flight; each run's
CPU seconds in the process that ran it (its imports on first use included) can be collected beside them.

* ``local``: with one worker the runs go one after another in this process; with more, a
  ``spawn`` process pool whose workers ask the kernel for SIGKILL when their parent dies
  (``prctl(PR_SET_PDEATHSIG)`` on Linux), so killing the driver, even with SIGKILL, leaves no worker.
  A worker that exits normally skips its interpreter's teardown (:func:`_start_worker`).
* ``ray``: ``ray.init()`` starts a local cluster when no address is given (stopped again at the
  end), or joins ``address``; each run is one task asking for its spec's CPUs and GPUs, so Ray
  places one run per GPU. Records travel back to the driver, which writes them; files a run draws
  (figures) land in ``runs_dir`` on the node that ran it, so a multi-node cluster wants a shared
  ``runs_dir``. Ray is the optional extra ``qkdyn[ray]``. A given address is first probed
  (:func:`check_ray`, a TCP connect bounded by :data:`RAY_CONNECT_TIMEOUT`): ``ray.init`` itself
  retries an unreachable cluster for many minutes.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import functools
import importlib.util
import json
import multiprocessing
import os
import socket
import sys
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

from qkdyn.errors import InputError
from qkdyn.studies import Record, RunSpec, Study, die_with_parent, get, save

EXECUTORS = ("local", "ray")
#: seconds that :func:`check_ray` waits for a Ray cluster's address to accept a connection
RAY_CONNECT_TIMEOUT = 15.0
#: the port Ray listens on when an address names none: the GCS (``ray start --head``) or the Ray client (``ray://``)
_RAY_PORTS = {"": 6379, "ray": 10001}
#: the runs a backend has finished, as they finish: (study, record, the run's CPU seconds in the process that ran it)
Finished = Generator[tuple[Study, Record, float], None, None]


def run_one(study_name: str, spec_json: str, runs_dir: str) -> tuple[dict, float]:
    """One run in a worker: the record's result (JSON data) after writing it under ``runs_dir``, and the CPU
    seconds it took in this process (:func:`_timed`)."""
    study, spec = get(study_name), RunSpec.from_dict(json.loads(spec_json))
    record, seconds = _timed(lambda: study.run(spec, runs_dir))
    return record.result, seconds


def _timed(call: Callable[[], Record]) -> tuple[Record, float]:
    """``call()`` and the CPU seconds it took in this process (user + system over all its threads:
    :func:`time.process_time`), the modules it imported on first use included."""
    start = time.process_time()
    record = call()
    return record, time.process_time() - start


def execute_all(jobs: list[tuple[Study, list[RunSpec]]], runs_dir: str | Path, executor: str = "local",
                workers: int = 1, ray_address: str | None = None,
                cpu: dict[RunSpec, float] | None = None) -> Iterator[tuple[Study, Record]]:
    """Run the specs of several studies in one pool (``jobs``: (study, missing specs) pairs; one queue, so
    the workers stay busy across studies and start once), the longest first (:meth:`Study.cost`: with
    the long runs started last, one worker would idle while the other finishes them); yield (study,
    record) as each run finishes, having set ``cpu[spec]`` (where ``cpu`` is given) to the CPU seconds the
    run took in the process that ran it (:func:`_timed`)."""
    if executor not in EXECUTORS:
        from qkdyn.suggest import unknown_choice

        raise InputError(unknown_choice("executor", executor, EXECUTORS))
    queue = sorted(((study, spec) for study, specs in jobs for spec in specs), key=lambda job: -job[0].cost(job[1]))
    if not queue:
        return
    finished: Finished
    if executor == "ray":
        finished = _ray(queue, runs_dir, ray_address)
    elif workers <= 1 or len(queue) == 1:
        finished = ((study, *_timed(functools.partial(study.run, spec, runs_dir))) for study, spec in queue)
    else:
        finished = _pool(queue, runs_dir, workers)
    try:
        for study, record, seconds in finished:
            if cpu is not None:
                cpu[record.spec] = seconds
            yield study, record
    finally:  # a consumer that stops early closes the pool here (its workers killed), not when it is collected
        finished.close()


def _pool(queue: list[tuple[Study, RunSpec]], runs_dir, workers: int) -> Finished:
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(min(workers, len(queue)), mp_context=context,
                                                  initializer=_start_worker)
    try:
        futures = {pool.submit(run_one, study.name, spec.to_json(), str(runs_dir)): (study, spec)
                   for study, spec in queue}
        for future in concurrent.futures.as_completed(futures):
            study, spec = futures[future]
            result, seconds = future.result()
            yield study, Record(spec, result, study.record_path(spec, Path(runs_dir)).with_suffix("")), seconds
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM, a failed run, the consumer gone): the running workers are
        # killed rather than awaited (records are written atomically, so nothing half-written stays)
        _kill_workers(pool)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    # every run is in: the workers are asked to exit and awaited; each leaves without its interpreter's teardown
    # (_start_worker), so this wait is short (killing them instead left a semaphore to the resource tracker,
    # which then warned the user of a leak at exit)
    pool.shutdown(wait=True)


def _start_worker() -> None:
    """Pool initializer: the worker dies with its parent (:func:`qkdyn.studies.die_with_parent`), and once it
    exits normally (the pool's stop signal answered, multiprocessing's own exit work done, then every exit
    handler that the libraries it imported registered after this one) it ends at once, skipping the interpreter's
    teardown of torch, numba, scipy and sympy (~2 s of wall on a loaded machine that the driver waited for after
    the last run, before writing the report). Exit handlers run last-registered first, so this one runs last."""
    die_with_parent()
    atexit.register(_exit_now)


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _kill_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """SIGKILL every worker process of ``pool`` (the pool has no public terminate before Python 3.14)."""
    for process in list((pool._processes or {}).values()):
        process.kill()


def check_ray(address: str | None, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Raise :class:`InputError` (one line) unless Ray is installed and the Ray cluster at ``address`` accepts a
    TCP connection within ``timeout`` seconds (``ray.init`` would retry an unreachable address for many minutes,
    showing nothing): what the commands check before they create a folder or show a progress bar.

    ``address`` is ``HOST:PORT`` (the cluster's GCS) or ``ray://HOST[:PORT]`` (the Ray client); None means the
    ``RAY_ADDRESS`` environment variable, and with neither (a local cluster started here) or ``auto``/``local``
    (resolved by Ray, which fails fast) nothing is probed. Only reachability is checked: a port that answers
    but is no Ray cluster is left to Ray."""
    if importlib.util.find_spec("ray") is None:
        raise InputError("ray needs Ray: pip install 'qkdyn[ray]'", "executor")
    flag = "--ray-address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS")
    if not address or address in ("auto", "local"):
        return
    try:
        parts = urllib.parse.urlsplit(address if "://" in address else f"//{address}")
        host, port = parts.hostname, parts.port or _RAY_PORTS.get(parts.scheme)
    except ValueError:
        host = port = None
    if not host or not port:
        raise InputError(f"must be HOST:PORT or ray://HOST:PORT, not {address!r}", "ray_address")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise InputError(f"cannot reach the Ray cluster at {address} within {timeout:g} s ({reason}; start one with "
                         f"`ray start --head`, or leave out {flag} for a local one)") from None


def _ray(queue: list[tuple[Study, RunSpec]], runs_dir, address: str | None) -> Finished:
    check_ray(address)
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        task = ray.remote(run_one)
        pending = {task.options(num_cpus=spec.cpus, num_gpus=spec.gpus).remote(
            study.name, spec.to_json(), str(runs_dir)): (study, spec) for study, spec in queue}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            study, spec = pending.pop(done[0])
            result, seconds = ray.get(done[0])
            yield study, save(Record(spec, result, Path()), runs_dir), seconds
    finally:
        if started:
            ray.shutdown()
