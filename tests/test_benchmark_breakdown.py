"""benchmarks/breakdown.py times the phases of one DQN step: draw, weights, priority write.

The bug this guards: once the sampler delegated to ``prisample/backends.py`` its view
of the phases called ``_weights`` with the old arguments, and a ``try`` turned the ``TypeError``
into ``{}``, so every ``components`` of benchmarks/results.json came out empty.  Nothing here is a
timing: one round of a few calls per case on a small sampler, checked for what it holds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import breakdown
from benchmarks.peers import Prisample
from benchmarks.timing import QuietPolicy

N = 256
MEASURED = {
    "DQN step",
    "sample(32)",
    "backend.sample(32)",
    "_weights(32)",
    "update_priorities(32)",
    "backend.write(32)",
}
DERIVED = {
    "sample: rest (checks, lock, β, Draw)",
    "update: rest (conversion, checks, lock)",
    "DQN step: outside the backend",
}
NO_WAITING = QuietPolicy(attempts=1)
"""Time once whatever the load: a busy machine must not make these tests sleep."""


def filled_sampler(backend: str) -> Prisample:
    peer = Prisample(N, backend=backend, seed=1)
    peer.fill(np.abs(np.random.default_rng(0).standard_normal(N)))
    return peer


def smoke_components(
    peer: Prisample, slots: list[np.ndarray], priorities: list[np.ndarray]
) -> dict[str, float]:
    return breakdown.step_components(
        peer.sampler, slots, priorities, reps=1, block_s=1e-5, repeats=1, policy=NO_WAITING
    )


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_step_components_times_every_phase(backend: str) -> None:
    peer = filled_sampler(backend)
    rng = np.random.default_rng(1)
    slots = [rng.integers(0, N, 32) for _ in range(4096)]
    priorities = [np.abs(rng.standard_normal(32)) for _ in range(4096)]
    times = smoke_components(peer, slots, priorities)
    assert set(times) == MEASURED | DERIVED
    assert all(0.0 < times[key] < math.inf for key in MEASURED), times
    assert all(math.isfinite(times[key]) for key in DERIVED), times


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_writes_through_the_backend_keep_the_sampler_in_step(backend: str) -> None:
    peer = filled_sampler(backend)
    rng = np.random.default_rng(2)
    slots = [rng.integers(0, N, 32) for _ in range(4096)]
    priorities = [rng.random(32) for _ in range(4096)]
    smoke_components(peer, slots, priorities)
    everything = np.arange(N)
    rebuilt = Prisample(N, backend=backend, seed=1)
    rebuilt.fill(peer.sampler.priorities)
    np.testing.assert_allclose(
        peer.sampler.probabilities(everything), rebuilt.sampler.probabilities(everything), rtol=1e-9
    )


def test_profile_dqn_fills_every_view() -> None:
    lines: list[str] = []
    result = breakdown.profile_dqn(
        512, steps=20, reps=1, block_s=1e-5, log=lines.append, components_n=N, repeats=1, policy=NO_WAITING
    )
    assert set(result.components) == MEASURED | DERIVED
    assert result.components_n == N
    assert set(result.calls) == {"DQN step", "sample(32)", "update_priorities(32)"}
    assert len(result.floors) == 3
    assert result.functions and any(f["function"].startswith("prisample/") for f in result.functions)
    assert result.profiled_total_us > 0.0
    assert lines
