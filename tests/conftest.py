"""Shared test setup: one torch thread (two shared cores), a hypothesis profile without deadlines."""

from __future__ import annotations

import os

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
