"""Shared test configuration: hypothesis profiles sized for 2 CPU cores.

Locally every run explores new random examples; under CI (CI=true) the examples are derandomized
so that a green run on one commit stays green on the same commit.
"""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("qkdyn", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("qkdyn"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "qkdyn")
