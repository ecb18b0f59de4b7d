"""Shared test configuration: hypothesis profile sized for 2 CPU cores."""
from hypothesis import HealthCheck, settings

settings.register_profile("qkdyn", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("qkdyn")
