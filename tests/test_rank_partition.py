"""The rank backend's CDF segments while a memory fills (``RankBackend._partition``)."""

import numpy as np
import pytest

from prisample import PrioritizedSampler
from prisample.rank import power_law_partition, power_sum


def _exact_rank_law(priorities: np.ndarray, alpha: float) -> np.ndarray:
    order = np.argsort(-priorities, kind="stable")
    law = np.arange(1, priorities.shape[0] + 1, dtype=np.float64) ** -alpha
    exact = np.empty_like(law)
    exact[order] = law / law.sum()
    return exact


def test_partition_masses_are_exact_segment_sums() -> None:
    for n, alpha, segments in [(10, 1.0, 3), (5000, 0.7, 1024), (300, 0.5, 1024), (100_000, 1.3, 32)]:
        starts, mass = power_law_partition(n, alpha, segments)
        assert starts[0] == 0 and starts[-1] == n and np.all(np.diff(starts) > 0)
        h = power_sum(starts, alpha)
        np.testing.assert_allclose(mass, np.diff(h) / h[-1], rtol=1e-12)


@pytest.mark.parametrize("start", [1500, 5000])
def test_growing_memory_matches_a_fresh_sampler_and_stays_close_to_the_power_law(start: int) -> None:
    """A memory that grows slot by slot reports the probabilities of one built at that size: the
    segments depend on (N, α) alone, which keeps checkpoints exact, and they stay within a small
    total variation of the exact rank law."""
    rng = np.random.default_rng(0)
    priorities = rng.random(start + 600)
    grown = PrioritizedSampler(start + 600, alpha=0.7, beta=0.5, backend="rank", size=0, seed=1)
    grown.add(np.arange(start))
    grown.update_priorities(np.arange(start), priorities[:start])
    n = start
    for step in range(150):
        grown.add(np.arange(n, n + 4))
        grown.update_priorities(np.arange(n, n + 4), priorities[n : n + 4])
        n += 4
        grown.sample(8)
        if step % 37 == 0:
            fresh = PrioritizedSampler(start + 600, alpha=0.7, beta=0.5, backend="rank", size=n, seed=1)
            fresh.update_priorities(np.arange(n), priorities[:n])
            slots = np.arange(n)
            np.testing.assert_array_equal(grown.probabilities(slots), fresh.probabilities(slots))
            tv = 0.5 * np.abs(grown.probabilities(slots) - _exact_rank_law(priorities[:n], 0.7)).sum()
            assert tv < 0.002, tv


def test_rank_checkpoint_in_a_filling_memory_continues_identically() -> None:
    rng = np.random.default_rng(3)
    a = PrioritizedSampler(20_000, alpha=0.7, beta=0.5, backend="rank", size=0, seed=5)
    a.add(np.arange(3000))
    a.update_priorities(np.arange(3000), rng.random(3000))
    n = 3000
    for _ in range(20):
        a.add(np.arange(n, n + 4))
        n += 4
        d = a.sample(32)
        a.update_priorities(d.indices, rng.random(32))
    b = PrioritizedSampler(20_000, alpha=0.7, beta=0.5, backend="rank", size=0, seed=0)
    b.load_state_dict(a.state_dict())
    for _ in range(40):
        for s in (a, b):
            s.add(np.arange(n, n + 4))
        n += 4
        da, db = a.sample(32), b.sample(32)
        np.testing.assert_array_equal(da.indices, db.indices)
        np.testing.assert_array_equal(da.weights, db.weights)
        new = rng.random(32)
        a.update_priorities(da.indices, new)
        b.update_priorities(db.indices, new)
