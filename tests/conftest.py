"""Shared test configuration: hypothesis profiles sized for 2 CPU cores.

Locally every run explores new random examples; under CI (CI=true) the examples are derandomized
so that a green run on one commit stays green on the same commit.

Under pytest-xdist (``make test`` runs one worker per core) each worker computes on one thread, so
two workers on two cores do not oversubscribe them; subprocesses the tests start inherit that.
"""
import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

from hypothesis import HealthCheck, settings

settings.register_profile("qkdyn", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("qkdyn"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "qkdyn")
