"""The batched sampler side of a write (:meth:`HostSteps.enter`: evictions in one call,
admissions in another) against the naive reference, row by row (each row's evictions leave, then
the row enters at the maximum of the memory it joins): same priorities, same draws."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from prisample.backends import backend_names
from prisample.replay import PrioritizedReplay
from prisample.replay.memory import Inserted
from prisample.replay.steps import HostSteps


class RowByRowSteps(HostSteps):
    """The reference: today's semantics spelled out one row at a time."""

    def enter(self, done: Inserted, head: int) -> npt.NDArray[np.float64]:
        return self.enter_rows(done)


class RowByRow(PrioritizedReplay):
    """A replay whose host steps are :class:`RowByRowSteps` (its other parts as built)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps = RowByRowSteps(self.memory, self.sampler, self.guard, self.eviction_strategy)


def _run(cls: type[PrioritizedReplay], backend: str, eviction: str, stack: int, seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    kw: dict[str, Any] = {"frame_stack": stack, "num_streams": 4, "backend": backend, "eviction": eviction}
    if stack > 1 and eviction == "fifo":
        kw["frame_capacity"] = 12 + 2 * stack * 5 + 4  # pool pressure: early evictions
    replay = cls(12, (2,), obs_dtype=np.float32, alpha=0.7, seed=seed, **kw)
    shape = (stack, 2) if stack > 1 else (2,)
    out: list[Any] = []
    count = 0
    for _ in range(60):
        n = int(rng.integers(0, 7)) if rng.random() < 0.9 else int(rng.integers(12, 16))
        obs = np.arange(count, count + n * int(np.prod(shape)), dtype=np.float32).reshape(n, *shape)
        count += n * int(np.prod(shape))
        streams = rng.integers(0, 4, n)
        replay.add_many(
            obs,
            rng.integers(0, 3, n),
            rng.normal(size=n),
            np.full(n, 0.9),
            obs + 0.5,
            streams=streams,
            episode_end=rng.random(n) < 0.3,
        )
        if rng.random() < 0.3:
            replay.add(np.zeros(shape, np.float32), 0, 0.0, 0.9, np.ones(shape, np.float32), episode_end=True)
        if len(replay) >= 4:
            _, draw = replay.sample(4)
            out.append(draw.indices.copy())
            levels = rng.choice([0.0, 0.5, 1.0, 3.0], size=4)
            replay.update_priorities(draw.indices, levels)
        out.append(replay.sampler.priorities)
        replay.check_valid()
    out.append(pickle.dumps(replay.state_dict(include_memory=True)))  # rank stamps too
    return out


@pytest.mark.filterwarnings("ignore:obs does not continue")
@pytest.mark.parametrize("backend", backend_names())
@pytest.mark.parametrize(("eviction", "stack"), [("fifo", 1), ("fifo", 2), ("priority", 1), ("priority", 3)])
def test_batched_admission_matches_row_by_row(backend: str, eviction: str, stack: int) -> None:
    for seed in range(3):
        batched = _run(PrioritizedReplay, backend, eviction, stack, seed)
        reference = _run(RowByRow, backend, eviction, stack, seed)
        assert len(batched) == len(reference)
        for a, b in zip(batched, reference, strict=True):
            np.testing.assert_array_equal(a, b)
