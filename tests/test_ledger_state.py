"""Every state DrawLedger, DistributedPrioritizedSampler (world size 1, no process group) and
PrioritizedSamplingCallback accept is validated completely first: a corrupted state raises
ValueError/TypeError naming the key and leaves the object exactly as it was, wrapped sampler
included, or it loads and the object is consistent."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from prisample import PrioritizedSampler
from prisample.distributed import DistributedPrioritizedSampler
from prisample.ledger import DrawLedger
from tests.state_fuzz import check_load, corrupted_states

CAPACITY, BATCH = 20, 4
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def drawn(kind: str, prefetched: int = 2) -> Any:
    """A ledger or distributed sampler mid-epoch with ``prefetched`` batches drawn, not claimed."""
    base = PrioritizedSampler(CAPACITY, alpha=0.7, beta=0.5, batch_size=BATCH, seed=3)
    target = DrawLedger(base) if kind == "ledger" else DistributedPrioritizedSampler(base)
    it = iter(target)
    for step in range(2 + prefetched):
        batch = [next(it) for _ in range(BATCH)]
        if step < 2:
            target.take(batch)
            target.update_priorities(batch, np.arange(BATCH) + step + 0.5)
    return target


def check_consistent(target: Any) -> None:
    """A loaded ledger replays valid batches of filled slots and then keeps drawing."""
    sampler = target.sampler
    assert 0.0 <= sampler.beta <= 1.0
    it = iter(target)
    for _ in range(min(3 * CAPACITY, 2 * len(target))):
        i = next(it, None)
        if i is None:
            break
        assert 0 <= i < CAPACITY and not np.isnan(sampler.priorities[i])
    for d in target.state_dict()["pending"]:
        # A weight may underflow float32 to 0 next to a priority of 1e308; it is never negative or NaN.
        assert np.all((d["weights"] >= 0) & (d["weights"] <= 1))
        assert np.all((d["probabilities"] > 0) & (d["probabilities"] <= 1))
        assert 0.0 <= d["beta"] <= 1.0


@pytest.mark.parametrize("kind", ["ledger", "distributed"])
def test_reported_corruptions_are_refused_unchanged(kind: str) -> None:
    """Bug: the distributed sampler accepted pending indices of 999 in a 20-slot sampler (replayed to
    the DataLoader), β = 5 and yielded=-50; a None/list/string state raised AttributeError/KeyError."""
    target = drawn(kind)
    good = target.state_dict()
    cases: list[tuple[Any, str]] = [
        ({**good, "pending": [{**good["pending"][0], "indices": np.full(BATCH, 999)}]}, "indices"),
        ({**good, "pending": [{**good["pending"][0], "beta": 5.0}]}, "beta"),
        ({**good, "yielded": -50}, "yielded"),
        (None, "dict"),
        ([], "dict"),
        ("state", "dict"),
        ({k: v for k, v in good.items() if k != "pending"}, "pending"),
    ]
    for state, key in cases:
        before = copy.deepcopy(target.state_dict())
        with pytest.raises((ValueError, TypeError), match=key):
            target.load_state_dict(state)
        after = target.state_dict()
        assert after["yielded"] == before["yielded"] and len(after["pending"]) == 2
        np.testing.assert_array_equal(after["sampler"]["priorities"], before["sampler"]["priorities"])
        assert after["sampler"]["rng"] == before["sampler"]["rng"]


@pytest.mark.parametrize("kind", ["ledger", "distributed"])
def test_loaded_state_replays_the_unclaimed_batches(kind: str) -> None:
    source = drawn(kind)
    target = drawn(kind, prefetched=0)
    target.load_state_dict(source.state_dict())
    expected = [int(i) for d in source.state_dict()["pending"] for i in d["indices"]]
    it = iter(target)
    assert [next(it) for _ in expected] == expected


@pytest.mark.parametrize("kind", ["ledger", "distributed"])
def test_corrupted_states_are_refused_or_consistent(kind: str) -> None:
    good = drawn(kind).state_dict()
    other = drawn("distributed" if kind == "ledger" else "ledger").state_dict()
    foreign = [other, drawn(kind, prefetched=0).state_dict()]

    @FUZZ
    @given(corrupted_states(good, foreign=foreign))
    def run(case: tuple[str, Any]) -> None:
        check_load(drawn(kind), case[1], check_consistent)

    run()


def test_callback_corrupted_states_are_refused_or_consistent() -> None:
    pytest.importorskip("lightning")
    from prisample.lightning import PrioritizedSamplingCallback, _to_tensors

    def fresh() -> PrioritizedSamplingCallback:
        return PrioritizedSamplingCallback(sampler=drawn("ledger"))

    good = fresh().state_dict()
    foreign = [{"sampler": _to_tensors(drawn("distributed").state_dict())}]

    def consistent(callback: PrioritizedSamplingCallback) -> None:
        assert isinstance(callback.sampler, DrawLedger)
        check_consistent(callback.sampler)

    @FUZZ
    @given(corrupted_states(good, foreign=foreign))
    def run(case: tuple[str, Any]) -> None:
        check_load(fresh(), case[1], consistent)

    run()


def test_drawn_weight_that_underflows_to_zero_round_trips() -> None:
    """Bug: a draw whose weight underflows float32 to 0 (a slot of P ≈ 1 beside slots of
    P ≈ 1e-200, β = 0.5) was kept as pending, then its state was refused on load ("weights should
    be finite and > 0"), so a checkpoint taken then could not be resumed."""
    base = PrioritizedSampler(CAPACITY, alpha=1.0, beta=0.5, batch_size=BATCH, seed=0)
    base.update_priorities([0], [1e200])
    ledger = DrawLedger(base)
    it = iter(ledger)
    for _ in range(BATCH):
        next(it)
    state = ledger.state_dict()
    assert np.any(state["pending"][0]["weights"] == 0.0)
    fresh = DrawLedger(PrioritizedSampler(CAPACITY, alpha=1.0, beta=0.5, batch_size=BATCH, seed=1))
    fresh.load_state_dict(state)
    assert [next(iter(fresh)) for _ in range(1)] == [int(state["pending"][0]["indices"][0])]


def test_normalised_weight_above_one_is_refused() -> None:
    """Bug: a pending weight of 1.1e12 under memory normalisation (weights lie in [0, 1]) was
    accepted and handed to the train step."""
    target = drawn("ledger")
    state = copy.deepcopy(target.state_dict())
    state["pending"][0]["weights"][0] = np.float32(1.1e12)
    with pytest.raises(ValueError, match="weights"):
        target.load_state_dict(state)
