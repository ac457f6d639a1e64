"""``DevicePrioritizedSampler`` on CPU tensors against the host ``PrioritizedSampler`` and the exact
distributions: χ² of stratified draws, ``P(i)``/weights/max priority/``P_min`` to rounding, zero
priorities never drawn with ``ε = 0``, state round trips (device <-> device, host <-> device), bad
input refused with nothing changed, and no host synchronisation on the hot path."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

from prisample import LinearSchedule, PrioritizedSampler
from prisample.device_sampler import DevicePrioritizedSampler
from prisample.weights import WeightNorm
from tests.reference import assert_frequencies, assert_same

NORMS: tuple[WeightNorm, ...] = ("memory", "batch", "none")


def filled_priorities(capacity: int, seed: int, *, zeros: float = 0.0, empty: float = 0.2) -> np.ndarray:
    """Priorities in (0, 4) with a share of exact zeros and of empty (NaN) slots."""
    rng = np.random.default_rng(seed)
    raw = rng.random(capacity) * 4.0 + 1e-3
    raw[rng.random(capacity) < zeros] = 0.0
    raw[rng.random(capacity) < empty] = np.nan
    return raw


def load(sampler: Any, raw: np.ndarray) -> None:
    slots = np.flatnonzero(~np.isnan(raw))
    sampler.add(slots)
    sampler.update_priorities(slots, raw[slots])


def exact_probabilities(raw: np.ndarray, alpha: float, eps: float, uniform: bool) -> np.ndarray:
    live = ~np.isnan(raw)
    masses = np.where(live, 1.0 if uniform else (np.nan_to_num(raw) + eps) ** alpha, 0.0)
    out: np.ndarray = masses / masses.sum()
    return out


# ------------------------------------------------------------------------------------------------
# distribution
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "alpha", "eps"),
    [
        ("proportional", 0.5, 0.0),
        ("proportional", 0.5, 1e-6),
        ("proportional", 1.0, 0.0),
        ("proportional", 1.0, 1e-6),
        ("uniform", 0.6, 1e-6),
    ],
)
def test_stratified_draws_follow_exact_probabilities(backend: str, alpha: float, eps: float) -> None:
    """Pearson's χ² of 64,000 draws (2,000 batches of 32) against ``P(i)`` at a one-sided level
    of about 2e-8 (``tests.reference``); bins of probability 0 (empty, or zero priority with
    ``ε = 0``) must stay empty."""
    capacity = 200
    raw = filled_priorities(capacity, 7, zeros=0.2)
    s = DevicePrioritizedSampler(capacity, alpha=alpha, eps=eps, backend=backend, seed=11)
    load(s, raw)
    counts = np.zeros(capacity)
    for _ in range(2_000):
        np.add.at(counts, s.sample(32).indices.numpy(), 1)
    assert_frequencies(counts, exact_probabilities(raw, alpha, eps, backend == "uniform"))


def test_each_draw_lies_in_its_own_stratum() -> None:
    """Uniform: the ``j``-th of ``k`` draws lies in the ``j``-th equal run of the live slots."""
    s = DevicePrioritizedSampler(64, backend="uniform", size=64, seed=0)
    for _ in range(20):
        np.testing.assert_array_equal(s.sample(8).indices.numpy() // 8, np.arange(8))


def test_zero_priorities_are_never_drawn_with_eps_zero() -> None:
    raw = filled_priorities(5000, 1, zeros=0.9)
    s = DevicePrioritizedSampler(5000, alpha=0.7, eps=0.0, seed=3)
    load(s, raw)
    for _ in range(300):
        draw = s.sample(64)
        drawn = raw[draw.indices.numpy()]
        assert np.all(drawn > 0.0)
        assert np.all(draw.probabilities.numpy() > 0.0) and np.all(np.isfinite(draw.weights.numpy()))


def test_a_memory_without_mass_gives_zero_weights_and_check_drawable_raises() -> None:
    s = DevicePrioritizedSampler(10, alpha=1.0, eps=0.0, seed=0)
    with pytest.raises(ValueError, match="positive probability"):
        s.check_drawable()
    draw = s.sample(4)
    assert np.all(draw.probabilities.numpy() == 0.0) and np.all(draw.weights.numpy() == 0.0)
    s.add([2, 3])
    s.update_priorities([2, 3], [0.0, 0.0])
    with pytest.raises(ValueError, match="positive probability"):
        s.check_drawable()


# ------------------------------------------------------------------------------------------------
# against the host sampler
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["proportional", "uniform"])
@pytest.mark.parametrize(("alpha", "eps"), [(0.6, 1e-6), (0.5, 0.0), (1.0, 0.0)])
@pytest.mark.parametrize("norm", NORMS)
def test_probabilities_weights_and_extremes_equal_the_host_sampler(
    backend: str, alpha: float, eps: float, norm: WeightNorm
) -> None:
    capacity = 3000
    raw = filled_priorities(capacity, 5, zeros=0.1)
    host = PrioritizedSampler(
        capacity, alpha=alpha, eps=eps, beta=0.7, backend=backend, weight_norm=norm, size=0
    )
    dev = DevicePrioritizedSampler(
        capacity, alpha=alpha, eps=eps, beta=0.7, backend=backend, weight_norm=norm, seed=2
    )
    for sampler in (host, dev):
        load(sampler, raw)
    slots = np.flatnonzero(~np.isnan(raw))
    np.testing.assert_array_equal(dev.priorities, host.priorities)
    np.testing.assert_allclose(
        dev.probabilities(slots).numpy(), host.probabilities(slots), rtol=1e-12, atol=0
    )
    assert float(dev.min_probability) == pytest.approx(host.min_probability, rel=1e-12)
    assert float(dev.total_mass) == pytest.approx(host.total_mass, rel=1e-12)
    assert float(dev.max_priority) == host.max_priority
    assert dev.size == host.size
    positive = slots[raw[slots] > 0.0] if eps == 0.0 and backend == "proportional" else slots
    np.testing.assert_allclose(dev.weights(positive).numpy(), host.weights(positive), rtol=1e-6)
    for _ in range(5):
        draw = dev.sample(32)
        drawn = draw.indices.numpy()
        np.testing.assert_allclose(draw.probabilities.numpy(), host.probabilities(drawn), rtol=1e-12, atol=0)
        np.testing.assert_allclose(draw.weights.numpy(), host.weights(drawn), rtol=1e-6)
        assert draw.indices.dtype == torch.int64 and draw.weights.dtype == torch.float32
        assert draw.probabilities.dtype == torch.float64


def test_random_operation_sequences_match_the_host_sampler() -> None:
    """Adds, removals, ordered writes with NaN and duplicates, updates with duplicates: the same
    raw priorities, size, max priority and ``P(i)`` as the host sampler after each step."""
    rng = np.random.default_rng(0)
    capacity = 300
    host = PrioritizedSampler(capacity, alpha=0.6, eps=1e-6, size=0, seed=0)
    dev = DevicePrioritizedSampler(capacity, alpha=0.6, eps=1e-6, seed=0)
    for step in range(120):
        op = step % 4
        k = int(rng.integers(1, 30))
        slots = rng.integers(0, capacity, k)
        if op == 0:
            for s in (host, dev):
                s.add(slots)
        elif op == 1:
            for s in (host, dev):
                s.remove(slots[: k // 3])
        elif op == 2:
            values = rng.random(k) * 3
            values[rng.random(k) < 0.3] = np.nan
            for s in (host, dev):
                s.write(slots, values)
        else:
            filled = np.flatnonzero(~np.isnan(host.priorities))
            if filled.shape[0]:
                chosen = rng.choice(filled, k)
                values = rng.random(k) * 5
                host.update_priorities(chosen, values)
                dev.update_priorities(
                    torch.from_numpy(chosen), torch.from_numpy(values), checked=step % 8 == 3
                )
        np.testing.assert_array_equal(dev.priorities, host.priorities)
        assert dev.size == host.size
        assert float(dev.max_priority) == host.max_priority
        filled = np.flatnonzero(~np.isnan(host.priorities))
        if filled.shape[0]:
            np.testing.assert_allclose(
                dev.probabilities(filled).numpy(), host.probabilities(filled), rtol=1e-12
            )


def test_new_slots_enter_at_the_maximum_of_the_live_slots() -> None:
    s = DevicePrioritizedSampler(10, seed=0)
    assert float(s.max_priority) == 1.0
    s.add([0, 1])
    s.update_priorities([0, 1], [3.0, 0.5])
    s.add([2])
    assert s.priorities[2] == 3.0
    s.remove([0, 2])
    s.add([5, 5])
    assert s.priorities[5] == 0.5 and float(s.max_priority) == 0.5
    s.remove([1, 5])
    assert float(s.max_priority) == 1.0 and s.size == 0


def test_beta_schedule_advances_per_batch() -> None:
    s = DevicePrioritizedSampler(8, beta=LinearSchedule(0.4, 1.0, 3), size=8, seed=0)
    assert s.beta == 0.4
    s.sample(4)
    assert s.beta == pytest.approx(0.6)
    for _ in range(5):
        s.sample(4)
    assert s.beta == 1.0


# ------------------------------------------------------------------------------------------------
# state
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["proportional", "uniform"])
def test_device_state_round_trip_is_exact(backend: str) -> None:
    raw = filled_priorities(500, 3, zeros=0.1)
    a = DevicePrioritizedSampler(500, backend=backend, beta=LinearSchedule(0.4, 1.0, 100), eps=0.0, seed=4)
    load(a, raw)
    for _ in range(7):
        a.sample(16)
    state = a.state_dict()
    b = DevicePrioritizedSampler(500, backend=backend, seed=99)
    b.load_state_dict(copy.deepcopy(state))
    assert_same(b.state_dict(), state)
    for name in ("sums", "maxs", "mins"):
        for x, y in zip(getattr(a.tree, name), getattr(b.tree, name), strict=True):
            assert torch.equal(x.nan_to_num(), y.nan_to_num())
    for _ in range(5):
        da, db = a.sample(32), b.sample(32)
        assert torch.equal(da.indices, db.indices)
        assert torch.equal(da.weights, db.weights) and torch.equal(da.probabilities, db.probabilities)


@pytest.mark.parametrize("backend", ["proportional", "uniform"])
def test_host_to_device_to_host_keeps_priorities_and_probabilities(backend: str) -> None:
    raw = filled_priorities(400, 8, zeros=0.1)
    host = PrioritizedSampler(400, alpha=0.7, eps=0.0, beta=0.5, backend=backend, size=0, seed=1)
    load(host, raw)
    host.sample(8)
    dev = DevicePrioritizedSampler(400, backend=backend, seed=0)
    dev.load_state_dict(copy.deepcopy(host.state_dict()))
    back = PrioritizedSampler(400, backend=backend, size=0, seed=5)
    back.load_state_dict(dev.state_dict())
    slots = np.flatnonzero(~np.isnan(raw))
    for sampler in (dev, back):
        np.testing.assert_array_equal(sampler.priorities, host.priorities)
        assert (sampler.alpha, sampler.eps, sampler.beta) == (host.alpha, host.eps, host.beta)
    np.testing.assert_allclose(dev.probabilities(slots).numpy(), host.probabilities(slots), rtol=1e-12)
    np.testing.assert_allclose(back.probabilities(slots), host.probabilities(slots), rtol=0)
    assert back.state_dict()["step"] == host.state_dict()["step"] == 1


def test_a_rejected_state_changes_nothing() -> None:
    s = DevicePrioritizedSampler(50, size=20, seed=0)
    before = s.state_dict()
    bad = copy.deepcopy(before)
    bad["priorities"][3] = -1.0
    with pytest.raises(ValueError, match="priorities"):
        s.load_state_dict(bad)
    with pytest.raises(ValueError, match="backend"):
        s.load_state_dict(DevicePrioritizedSampler(50, backend="uniform", seed=0).state_dict())
    with pytest.raises(ValueError, match="capacity"):
        s.load_state_dict(DevicePrioritizedSampler(51, seed=0).state_dict())
    assert_same(s.state_dict(), before)


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------

BAD_CALLS: list[tuple[str, tuple[Any, ...], type[Exception], str]] = [
    ("update_priorities", ([0, 50], [1.0, 1.0]), ValueError, "indices"),
    ("update_priorities", ([-1], [1.0]), ValueError, "indices"),
    ("update_priorities", ([0, 30], [1.0, 1.0]), ValueError, "added"),
    ("update_priorities", ([0, 1], [1.0, math.nan]), ValueError, "priorities"),
    ("update_priorities", ([0, 1], [math.inf, 1.0]), ValueError, "priorities"),
    ("update_priorities", ([0, 1], [1.0, -0.5]), ValueError, "priorities"),
    ("update_priorities", ([0, 1], [1.0]), ValueError, "priorities"),
    ("update_priorities", ([[0, 1]], [1.0, 2.0]), ValueError, "indices"),
    ("update_priorities", ([0.0, 1.0], [1.0, 2.0]), TypeError, "indices"),
    ("update_priorities", (torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0])), TypeError, "indices"),
    ("update_priorities", ([0, 1], [True, False]), TypeError, "priorities"),
    ("write", ([0, 60], [1.0, 1.0]), ValueError, "indices"),
    ("write", ([0, 1], [1.0, -1.0]), ValueError, "priorities"),
    ("write", ([0, 1], [1.0, 2.0, 3.0]), ValueError, "priorities"),
    ("add", ([50],), ValueError, "indices"),
    ("add", ([1.5],), TypeError, "indices"),
    ("remove", ([-3],), ValueError, "indices"),
    ("probabilities", ([25],), ValueError, "added"),
]


@pytest.mark.parametrize(("method", "args", "error", "names"), BAD_CALLS)
def test_bad_input_is_refused_with_nothing_changed(
    method: str, args: tuple[Any, ...], error: type[Exception], names: str
) -> None:
    s = DevicePrioritizedSampler(50, alpha=0.6, eps=1e-6, size=20, seed=0)
    s.update_priorities([0, 1, 2], [0.5, 2.0, 1.0])
    before = s.state_dict()
    with pytest.raises(error, match=names):
        getattr(s, method)(*args)
    assert_same(s.state_dict(), before)
    fresh = DevicePrioritizedSampler(50, seed=0)
    fresh.load_state_dict(before)
    assert torch.equal(s.tree.total, fresh.tree.total) and torch.equal(s.tree.count, fresh.tree.count)


def test_a_mass_too_large_to_sum_is_refused() -> None:
    s = DevicePrioritizedSampler(50, alpha=1.0, eps=0.0, size=5, seed=0)
    before = s.state_dict()
    with pytest.raises(ValueError, match="priorities"):
        s.update_priorities([0, 1], [1.0, 1e308])
    assert_same(s.state_dict(), before)


def test_constructor_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="backend"):
        DevicePrioritizedSampler(10, backend="rank")
    with pytest.raises(ValueError, match="weight_norm"):
        DevicePrioritizedSampler(10, weight_norm="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size"):
        DevicePrioritizedSampler(10, size=11)
    with pytest.raises(ValueError, match="alpha"):
        DevicePrioritizedSampler(10, alpha=-1.0)


# ------------------------------------------------------------------------------------------------
# no host synchronisation
# ------------------------------------------------------------------------------------------------

SYNCING = (
    "item",
    "cpu",
    "tolist",
    "numpy",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "nonzero",
    "__array__",
)


@contextlib.contextmanager
def no_host_sync() -> Iterator[list[str]]:
    """Make every tensor-to-host read raise: ``Tensor.item/cpu/tolist/numpy/nonzero/__array__``,
    the conversions to ``bool``/``int``/``float``/index, and ``torch.nonzero``.  Yields the list of
    names that were called (each call also raises)."""
    called: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in SYNCING}
    saved_nonzero = torch.nonzero

    def refuse(name: str) -> Any:
        def method(*args: Any, **kwargs: Any) -> Any:
            called.append(name)
            raise AssertionError(f"host synchronisation: Tensor.{name}")

        return method

    try:
        for name in SYNCING:
            setattr(torch.Tensor, name, refuse(name))
        setattr(torch, "nonzero", refuse("torch.nonzero"))  # noqa: B010
        yield called
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
        setattr(torch, "nonzero", saved_nonzero)  # noqa: B010


def test_the_guard_catches_every_host_read() -> None:
    t = torch.ones(3)
    reads: list[Callable[[], Any]] = [
        lambda: t[0].item(),
        lambda: t.cpu(),
        lambda: t.tolist(),
        lambda: t.numpy(),
        lambda: bool(t[0]),
        lambda: int(t[0]),
        lambda: float(t[0]),
        lambda: torch.nonzero(t),
        lambda: t.nonzero(),
        lambda: np.asarray(t),
    ]
    with no_host_sync() as called:
        for read in reads:
            with pytest.raises(AssertionError, match="host synchronisation"):
                read()
    assert len(called) == len(reads)
    assert t.sum().item() == 3.0  # restored


@pytest.mark.parametrize("backend", ["proportional", "uniform"])
@pytest.mark.parametrize("norm", NORMS)
def test_the_hot_path_never_reads_back_to_the_host(backend: str, norm: WeightNorm) -> None:
    capacity = 1000
    s = DevicePrioritizedSampler(capacity, backend=backend, weight_norm=norm, size=100, seed=0)
    slots = torch.arange(100, 164)
    priorities = torch.rand(64, dtype=torch.float64)
    with no_host_sync() as called:
        for step in range(20):
            s.add(slots + step, checked=False)
            draw = s.sample(32)
            s.update_priorities(draw.indices, draw.weights.to(torch.float64) + 0.1, checked=False)
            s.write(slots[:8] + 2 * step, priorities[:8], checked=False)
            s.remove(slots[8:12] + step, checked=False)
            s.max_priority  # noqa: B018
            s.min_probability  # noqa: B018
            s.count  # noqa: B018
    assert called == []
    assert s.size > 100
