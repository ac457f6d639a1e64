"""Shared test setup: one torch thread (two shared cores), a hypothesis profile without deadlines."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Numba compiles (or loads its cache) on first use, so the first example of a test can be slow:
# no deadlines anywhere; example counts are set per test.
settings.register_profile(
    "prisample",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("prisample")


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """One local Ray for the whole session (starting one costs 5-30 s on two shared cores): 2
    CPUs, no dashboard.  Skips where ray is not installed (CI installs it)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
