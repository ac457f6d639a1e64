"""``state_dict`` / ``load_state_dict``: exact round trips, for every backend."""

from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest
import torch

from prisample import LinearSchedule, PrioritizedSampler
from tests.reference import BACKENDS, assert_draws_equal, assert_same


def churn(s: PrioritizedSampler, rng: np.random.Generator, steps: int) -> None:
    """A random mix of writes and draws (the same ``rng`` state gives the same calls)."""
    for _ in range(steps):
        op = rng.integers(5)
        valid = np.flatnonzero(~np.isnan(s.priorities))
        if op == 0 or valid.size == 0:
            s.add(rng.integers(0, s.capacity, size=rng.integers(1, 4)))
        elif op == 1 and valid.size > 1:
            s.remove(rng.choice(valid, size=1))
        elif op == 2:
            slots = rng.choice(valid, size=min(valid.size, 8))
            s.update_priorities(slots, rng.exponential(size=slots.shape[0]))
        else:
            s.sample(int(rng.integers(1, 40)))


def assert_same_behaviour(a: PrioritizedSampler, b: PrioritizedSampler, steps: int, seed: int) -> None:
    """Identical calls on ``a`` and ``b`` give identical draws and identical observable state."""
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    for step in range(steps):
        churn(a, rng_a, 3)
        churn(b, rng_b, 3)
        k = 1 + step % 33
        assert_draws_equal(a.sample(k), b.sample(k))
        np.testing.assert_array_equal(a.priorities, b.priorities)
        assert a.size == b.size and a.max_priority == b.max_priority and a.beta == b.beta
        if step % 10 == 0:
            valid = np.flatnonzero(~np.isnan(a.priorities))
            np.testing.assert_array_equal(a.probabilities(valid), b.probabilities(valid))
            np.testing.assert_array_equal(a.weights(valid), b.weights(valid))
        if step == steps // 2:
            a.alpha = b.alpha = 0.9


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("capacity", [1, 7, 64])
def test_round_trip_gives_identical_future_draws(backend, capacity):
    """After loading into a fresh sampler of the same capacity and backend (other seed, other
    options), hundreds of draws interleaved with updates, adds and removes are identical."""
    a = PrioritizedSampler(
        capacity,
        backend=backend,
        alpha=0.7,
        beta=LinearSchedule(0.4, 1.0, 50),
        weight_norm="batch",
        size=capacity // 2,
        batch_size=5,
        num_samples=11,
        seed=1,
    )
    churn(a, np.random.default_rng(0), 200)
    a.set_epoch(3)
    state = a.state_dict()
    b = PrioritizedSampler(capacity, backend=backend, alpha=0.1, beta=0.9, weight_norm="none", seed=99)
    b.load_state_dict(copy.deepcopy(state))
    assert_same(b.state_dict(), state)
    assert (b.alpha, b.eps, b.beta, b.weight_norm) == (a.alpha, a.eps, a.beta, a.weight_norm)
    assert (b.batch_size, b.num_samples, b.epoch, len(b)) == (5, 11, 3, 11)
    assert_same_behaviour(a, b, steps=400 if capacity == 64 else 150, seed=capacity)


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_spans_many_writes(backend):
    """Thousands of writes after loading (past any periodic re-sort interval) stay identical."""
    a = PrioritizedSampler(40, backend=backend, alpha=0.7, seed=5)
    rng = np.random.default_rng(1)
    for _ in range(300):
        a.update_priorities(rng.integers(0, 40, size=8), rng.random(8))
    b = PrioritizedSampler(40, backend=backend, seed=6)
    b.load_state_dict(a.state_dict())
    rng_a, rng_b = np.random.default_rng(2), np.random.default_rng(2)
    for _ in range(400):
        a.update_priorities(rng_a.integers(0, 40, size=8), rng_a.random(8))
        b.update_priorities(rng_b.integers(0, 40, size=8), rng_b.random(8))
        assert_draws_equal(a.sample(8), b.sample(8))


@pytest.mark.parametrize("backend", BACKENDS)
def test_iteration_after_load_is_identical(backend):
    a = PrioritizedSampler(20, backend=backend, batch_size=6, num_samples=50, seed=3)
    a.update_priorities(np.arange(20), np.linspace(0, 2, 20))
    b = PrioritizedSampler(20, backend=backend, seed=4)
    b.load_state_dict(a.state_dict())
    assert list(a) == list(b)
    assert list(a) == list(b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_dict_is_a_snapshot(backend):
    """Later calls on the sampler do not reach into a state dict taken earlier."""
    s = PrioritizedSampler(10, backend=backend, seed=0)
    state = s.state_dict()
    saved = copy.deepcopy(state)
    churn(s, np.random.default_rng(0), 100)
    assert_same(state, saved)
    fresh = PrioritizedSampler(10, backend=backend, seed=1)
    fresh.load_state_dict(state)
    other = PrioritizedSampler(10, backend=backend, seed=0)
    assert_draws_equal(fresh.sample(9), other.sample(9))


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_dict_survives_pickle_and_torch_save(backend):
    a = PrioritizedSampler(12, backend=backend, beta=LinearSchedule(0.5, 1.0, 10), size=9, seed=0)
    churn(a, np.random.default_rng(1), 50)
    state = a.state_dict()
    pickled = pickle.loads(pickle.dumps(state))
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=False)
    for restored in (pickled, saved):
        b = PrioritizedSampler(12, backend=backend, seed=7)
        b.load_state_dict(restored)
        c = PrioritizedSampler(12, backend=backend, seed=8)
        c.load_state_dict(state)
        assert_same_behaviour(b, c, steps=30, seed=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_version_capacity_and_backend_are_checked(backend):
    s = PrioritizedSampler(6, backend=backend, seed=0)
    s.update_priorities([0], [3.0])
    good = s.state_dict()
    target = PrioritizedSampler(6, backend=backend, seed=1)
    before = target.state_dict()
    for key, value, name in [
        ("version", 999, "version"),
        ("version", None, "version"),
        ("capacity", 7, "capacity"),
        ("backend", "uniform" if backend != "uniform" else "rank", "backend"),
    ]:
        bad = copy.deepcopy(good)
        bad[key] = value
        with pytest.raises(ValueError, match=name):
            target.load_state_dict(bad)
        assert_same(target.state_dict(), before)
    missing = copy.deepcopy(good)
    del missing["version"]
    with pytest.raises(ValueError, match="version"):
        target.load_state_dict(missing)
    assert_same(target.state_dict(), before)
    with pytest.raises(ValueError, match="capacity"):
        PrioritizedSampler(5, backend=backend, seed=0).load_state_dict(copy.deepcopy(good))


@pytest.mark.parametrize("backend", BACKENDS)
def test_malformed_state_changes_nothing(backend):
    """A state that fails part-way (bad beta, wrong shape, missing key) leaves the sampler as it was."""
    s = PrioritizedSampler(6, backend=backend, seed=0)
    s.update_priorities([0, 1], [3.0, 0.5])
    good = s.state_dict()
    target = PrioritizedSampler(6, backend=backend, seed=1)
    target.update_priorities([2], [7.0])
    before = target.state_dict()
    corruptions = {
        "beta": 2.0,
        "priorities": np.ones(5),
        "rng": {"bit_generator": "MT19937"},
    }
    for key, value in corruptions.items():
        bad = copy.deepcopy(good)
        bad[key] = value
        with pytest.raises((ValueError, TypeError)):
            target.load_state_dict(bad)
        assert_same(target.state_dict(), before)
    missing = copy.deepcopy(good)
    del missing["backend_state"]
    with pytest.raises(ValueError, match="backend_state"):
        target.load_state_dict(missing)
    assert_same(target.state_dict(), before)
