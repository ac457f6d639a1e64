"""What a sharded or actor-fed memory needs from the core: ``add_many(priorities=)`` (Ape-X's
actor-computed initial priorities), ``total_mass`` and ``min_probability``, against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from prisample import PrioritizedReplay, PrioritizedSampler

RAW = np.array([0.1, 0.5, 2.0, 3.0, 0.2, 3.0, 1.0])


def filled(backend: str, alpha: float = 0.7, eps: float = 0.01) -> PrioritizedSampler:
    sampler = PrioritizedSampler(10, alpha=alpha, eps=eps, backend=backend, size=0, seed=0)
    sampler.add(np.arange(7))
    sampler.update_priorities(np.arange(7), RAW)
    return sampler


def test_total_mass_is_the_normaliser_of_every_backend() -> None:
    slots = np.arange(7)
    proportional = filled("proportional")
    np.testing.assert_allclose(proportional.total_mass, ((RAW + 0.01) ** 0.7).sum(), rtol=1e-12)
    np.testing.assert_allclose(
        proportional.probabilities(slots) * proportional.total_mass, (RAW + 0.01) ** 0.7, rtol=1e-12
    )
    rank = filled("rank")
    np.testing.assert_allclose(rank.total_mass, (np.arange(1, 8) ** -0.7).sum(), rtol=1e-12)
    assert filled("uniform").total_mass == 7.0
    assert filled("greedy").total_mass == 2.0  # the two slots tied at 3.0
    assert PrioritizedSampler(4, size=0).total_mass == 0.0


@pytest.mark.parametrize("backend", ["proportional", "rank", "uniform"])
def test_min_probability_is_the_smallest_over_valid_slots(backend: str) -> None:
    sampler = filled(backend)
    assert sampler.min_probability == pytest.approx(sampler.probabilities(np.arange(7)).min(), rel=1e-12)
    assert PrioritizedSampler(4, size=0).min_probability == 0.0


def replay(**options: object) -> PrioritizedReplay:
    return PrioritizedReplay(4, (2,), obs_dtype=np.float32, alpha=1.0, eps=0.0, seed=0, **options)  # type: ignore[arg-type]


def add(memory: PrioritizedReplay, n: int, priorities: object = None) -> np.ndarray:
    obs = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    return memory.add_many(
        obs,
        np.zeros(n, np.int64),
        np.zeros(n),
        np.ones(n),
        obs,
        streams=np.zeros(n, np.int64),
        priorities=priorities,
    )


def test_initial_priorities_enter_instead_of_the_max() -> None:
    memory = replay()
    add(memory, 2, [0.5, 4.0])
    add(memory, 1)  # no priorities: the max of the memory
    assert memory.sampler.priorities[:3].tolist() == [0.5, 4.0, 4.0]
    # six transitions into four slots: slots 0 and 1 are written twice, the last write wins
    slots = add(memory, 6, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert slots.tolist() == [3, 0, 1, 2, 3, 0]
    assert memory.sampler.priorities.tolist() == [6.0, 3.0, 4.0, 5.0]
    memory.check_valid()


def test_initial_priorities_under_priority_eviction_keep_the_order() -> None:
    memory = replay(eviction="priority")
    add(memory, 4, [3.0, 1.0, 2.0, 4.0])
    add(memory, 1, [0.5])  # evicts the lowest (slot 1, priority 1.0)
    assert sorted(memory.sampler.priorities.tolist()) == [0.5, 2.0, 3.0, 4.0]
    memory.check_valid()


@pytest.mark.parametrize(
    ("priorities", "error", "match"),
    [
        ([1.0], ValueError, "one value per index"),
        ([1.0, -2.0], ValueError, "priorities\\[1\\]=-2.0"),
        ([1.0, np.inf], ValueError, "finite"),
        (["a", "b"], TypeError, "real numbers"),
    ],
)
def test_bad_initial_priorities_change_nothing(priorities: object, error: type, match: str) -> None:
    memory = replay()
    add(memory, 1, [2.0])
    before = memory.state_dict(include_memory=True)
    with pytest.raises(error, match=match):
        add(memory, 2, priorities)
    after = memory.state_dict(include_memory=True)
    assert memory.memory.num_added == 1
    np.testing.assert_array_equal(before["sampler"]["priorities"], after["sampler"]["priorities"])


def test_initial_priorities_need_complete_transitions() -> None:
    memory = PrioritizedReplay(8, (2,), obs_dtype=np.float32, n_step=3)
    with pytest.raises(ValueError, match="n_step=3"):
        add(memory, 1, [1.0])
    assert memory.memory.num_added == 0
