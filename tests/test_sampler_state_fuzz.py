"""Corrupted checkpoints fed to ``PrioritizedSampler.load_state_dict``, for every backend.

Hypothesis draws corruptions of a valid state (:mod:`tests.state_fuzz`): keys dropped or added,
leaves of the wrong type or out of range, arrays reshaped, recast or with one bad element, things
that are not states, and valid states of another backend, another capacity or version 1.  Each
load must either raise ``ValueError``/``TypeError`` and leave the sampler exactly as it was (same
``state_dict``, same future draws as a deep copy), or load a consistent sampler: ``P(i)`` of every
filled slot equal to a naive recomputation from the loaded priorities (:mod:`tests.reference`),
weights equal to the paper's formula, ``state_dict`` round-tripping, and a fresh sampler loaded
with that state drawing identically.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, note, settings

from prisample import CorrectedSampler, LinearSchedule, PrioritizedSampler
from tests.reference import BACKENDS, ReferenceSampler, assert_draws_equal, assert_same
from tests.state_fuzz import check_load, corrupted_states

CAPACITY = 8
EXAMPLES = 300  # per backend and configuration: 600 per backend


def make(
    backend: str, *, fancy: bool, seed: int, capacity: int = CAPACITY, corrected: bool | None = None
) -> PrioritizedSampler:
    """A sampler with ties, an empty slot and (``fancy``) a β schedule and α = 1 (so that one huge
    priority makes the masses' sum overflow); a :class:`CorrectedSampler` with correction factors
    if ``corrected`` (by default: if ``fancy``)."""
    beta = LinearSchedule(0.4, 1.0, 7) if fancy else 0.5
    corrected = fancy if corrected is None else corrected
    s = (CorrectedSampler if corrected else PrioritizedSampler)(
        capacity,
        backend=backend,
        alpha=1.0 if fancy else 0.7,
        beta=beta,
        eps=1e-3,
        weight_norm="memory" if fancy else "batch",
        size=capacity - 1,
        batch_size=3,
        num_samples=5,
        seed=seed,
    )
    rng = np.random.default_rng(seed)
    s.update_priorities(np.arange(capacity - 2), rng.choice([0.0, 0.5, 2.0], size=capacity - 2))
    s.remove([1])
    if isinstance(s, CorrectedSampler):
        s.set_corrections([0, 2, 3], [0.5, 2.0, 0.0])
    for k in (1, 4):
        s.sample(k)
    return s


def version_1(state: dict) -> dict:
    """``state`` as the first format wrote it: no corrections, and (rank) no write stamps."""
    old = {k: copy.deepcopy(v) for k, v in state.items() if k != "corrections"}
    old["version"] = 1
    if old["backend"] == "rank":
        old["backend_state"] = {}
    return old


def model_of(s: PrioritizedSampler) -> ReferenceSampler:
    """The reference model holding ``s``'s priorities, corrections, β, step and (rank) the
    recency of each write, from ``s``'s own state."""
    state = s.state_dict()
    beta = state["beta"]
    model = ReferenceSampler(
        s.capacity,
        alpha=s.alpha,
        beta=LinearSchedule(**beta) if isinstance(beta, dict) else beta,
        eps=s.eps,
        backend=s.backend_name,
        weight_norm=s.weight_norm,
        size=0,
    )
    model.step = state["step"]
    raw = s.priorities
    corrections = s.corrections if isinstance(s, CorrectedSampler) else np.ones_like(raw)
    for slot in np.flatnonzero(~np.isnan(raw)).tolist():
        model.raw[slot] = float(raw[slot])
        model.corrections[slot] = float(corrections[slot])
        if s.backend_name == "rank":
            model.written[slot] = int(state["backend_state"]["stamps"][slot])
    return model


def check_consistent(s: PrioritizedSampler) -> None:
    """``s`` agrees with the model of its own state and round-trips (its draws advance ``s``)."""
    model = model_of(s)
    valid = model.valid
    assert s.size == model.size and len(s) == (s.num_samples or s.size)
    if isinstance(s, CorrectedSampler):
        np.testing.assert_array_equal(np.isnan(s.corrections), np.isnan(s.priorities))
    p = s.probabilities(valid)
    np.testing.assert_allclose(p, model.probabilities(valid), rtol=1e-9, atol=1e-300)
    distribution = dict(zip(valid, p.tolist(), strict=True))
    np.testing.assert_allclose(s.weights(valid), model.weights(valid, distribution), rtol=2e-6, atol=1e-30)
    filled = copy.deepcopy(s)  # every empty slot added at the maximum priority: sums stay finite
    filled.add(np.flatnonzero(np.isnan(filled.priorities)))
    full = filled.probabilities(np.arange(s.capacity))
    if model_of(filled).drawable() and s.backend_name != "greedy":  # greedy: P = 0 below the top
        assert full.sum() == pytest.approx(1.0, rel=1e-9)
        positive = filled.priorities > 0.0
        assert np.all(full[positive] > 0.0), "a positive priority has probability 0"
    state = s.state_dict()
    fresh = type(s)(s.capacity, backend=s.backend_name, seed=99)
    fresh.load_state_dict(copy.deepcopy(state))
    assert_same(fresh.state_dict(), state)
    if model.drawable():
        for k in (1, 3, 2 * s.capacity):
            a, b = s.sample(k), fresh.sample(k)
            assert_draws_equal(a, b)
            assert set(a.indices.tolist()) <= set(valid), "an empty slot was drawn"
            np.testing.assert_array_equal(a.probabilities, s.probabilities(a.indices))
            if s.backend_name != "greedy":
                assert np.all(a.probabilities > 0.0), "a slot of probability 0 was drawn"
    else:
        with pytest.raises(ValueError):
            s.sample(1)


CONFIGS = [(backend, fancy) for backend in BACKENDS for fancy in (False, True)]


@pytest.mark.parametrize(
    ("backend", "fancy"), CONFIGS, ids=[f"{b}-{'fancy' if f else 'plain'}" for b, f in CONFIGS]
)
def test_corrupted_state_is_refused_unchanged_or_loaded_consistent(backend, fancy):
    source = make(backend, fancy=fancy, seed=1)
    state = source.state_dict()
    other = "uniform" if backend != "uniform" else "rank"
    foreign = [
        make(other, fancy=fancy, seed=2).state_dict(),
        make(backend, fancy=fancy, seed=3, capacity=CAPACITY + 1).state_dict(),
        version_1(make(backend, fancy=False, seed=4).state_dict()),
    ]
    base = make(backend, fancy=not fancy, seed=5, corrected=fancy)  # factors load only into this class
    outcomes = {"refused": 0, "loaded": 0}

    @settings(max_examples=EXAMPLES, database=None)
    @given(corruption=corrupted_states(state, foreign=foreign))
    def run(corruption):
        description, corrupted = corruption
        note(description)
        target, twin = copy.deepcopy(base), copy.deepcopy(base)
        if check_load(target, copy.deepcopy(corrupted), check_consistent):
            outcomes["loaded"] += 1
            return
        outcomes["refused"] += 1
        for k in (1, 4, 2 * CAPACITY):  # the same future draws as the untouched copy
            assert_draws_equal(target.sample(k), twin.sample(k))

    run()
    assert outcomes["refused"] > EXAMPLES // 4 and outcomes["loaded"] > 0, outcomes


@pytest.mark.parametrize("backend", BACKENDS)
def test_foreign_states(backend):
    """The explicit foreign cases: another backend's and another capacity's states are refused;
    a version-1 state of the same sampler loads and draws like the current-format state."""
    base = make(backend, fancy=True, seed=5)
    other = "uniform" if backend != "uniform" else "rank"
    for foreign, name in [
        (make(other, fancy=True, seed=2).state_dict(), "backend"),
        (make(backend, fancy=True, seed=3, capacity=CAPACITY + 1).state_dict(), "capacity"),
    ]:
        target, twin = copy.deepcopy(base), copy.deepcopy(base)
        with pytest.raises(ValueError, match=name):
            target.load_state_dict(foreign)
        assert_same(target.state_dict(), twin.state_dict())
        assert_draws_equal(target.sample(5), twin.sample(5))
    current = make(backend, fancy=False, seed=4)
    old = copy.deepcopy(base)
    old.load_state_dict(version_1(current.state_dict()))
    if backend == "rank":  # no write stamps in version 1: equal priorities rank by slot, as then
        filled = ~np.isnan(old.priorities)
        stamps = old.state_dict()["backend_state"]["stamps"]
        np.testing.assert_array_equal(stamps[filled], CAPACITY - 1 - np.flatnonzero(filled))
    else:
        assert_draws_equal(old.sample(6), current.sample(6))
    check_consistent(old)
