"""The sampler's fused proportional draw (``prisample/_draw.py``) and one-pass write check
against the general path they replace: the same slots, probabilities and weights, bit for bit,
and the same errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from prisample import PrioritizedSampler
from prisample._validation import check_slots, check_write
from prisample.weights import LinearSchedule


class _General(PrioritizedSampler):
    """Overrides the weights hook with the base one: the sampler takes its general path."""

    def _weights(
        self, slots: npt.NDArray[np.int64], probabilities: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float32]:
        return super()._weights(slots, probabilities)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("norm", ["memory", "batch", "none"])
@pytest.mark.parametrize("eps", [1e-6, 0.0])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_fused_draw_matches_general_path(seed: int, norm: str, eps: float, alpha: float) -> None:
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 3000))
    beta = LinearSchedule(0.4, 1.0, 7) if seed % 2 else 0.4
    kwargs: dict[str, Any] = dict(alpha=alpha, eps=eps, beta=beta, weight_norm=norm, seed=seed, size=capacity)
    fused, general = PrioritizedSampler(capacity, **kwargs), _General(capacity, **kwargs)
    assert fused._base_weights and not general._base_weights
    for step in range(30):
        k = int(rng.integers(1, 70))
        a, b = fused.sample(k), general.sample(k)
        for name in ("indices", "weights", "probabilities"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), (step, name)
        scale = rng.choice([0.0, 1e-300, 1e-3, 1.0, 1e6])
        priorities = rng.random(k) * scale
        priorities[rng.random(k) < 0.2] = 0.0
        if step % 3 == 0:  # keep something drawable when eps = 0
            priorities[0] = 1.0
        fused.update_priorities(a.indices, priorities)
        general.update_priorities(b.indices, priorities)


@pytest.mark.parametrize("seed", range(20))
def test_check_write_is_two_check_slots(seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = np.full(10, np.nan)
    n = int(rng.integers(0, 8))
    slots = rng.integers(-2, 12, size=n)
    values = rng.choice(np.array([np.nan, 0.0, 1.5, -1.0, np.inf, -np.inf]), size=n)
    filled = ~np.isnan(values)

    def message(call: Callable[[], None]) -> str | None:
        try:
            call()
        except ValueError as error:
            return str(error)
        return None

    def two() -> None:
        check_slots(raw, slots, need_filled=False)
        check_slots(raw, slots[filled], values[filled], need_filled=False)

    assert message(lambda: check_write(raw, slots, values)) == message(two)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("norm", ["memory", "batch", "none"])
@pytest.mark.parametrize("alpha", [0.0, 0.7])
def test_fused_rank_draw_matches_general_path(seed: int, norm: str, alpha: float) -> None:
    """The rank backend's draw, select and weights in one call (``RankBackend.sample_weighted``)
    give the batch of ``backend.sample`` and the ``_weights`` hook, bit for bit."""
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 3000))
    beta = LinearSchedule(0.4, 1.0, 7) if seed % 2 else 0.4
    kwargs: dict[str, Any] = dict(alpha=alpha, beta=beta, weight_norm=norm, seed=seed, size=capacity)
    fused = PrioritizedSampler(capacity, backend="rank", **kwargs)
    general = _General(capacity, backend="rank", **kwargs)
    for step in range(30):
        k = int(rng.integers(1, 70))
        a, b = fused.sample(k), general.sample(k)
        for name in ("indices", "weights", "probabilities"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), (step, name)
        priorities = np.round(rng.random(k) * 4.0, 1)  # ties: the newest write ranks first
        fused.update_priorities(a.indices, priorities)
        general.update_priorities(b.indices, priorities)
        if step % 5 == 0:
            slots = rng.integers(0, capacity, size=3)
            fused.add(slots)
            general.add(slots)


def _error(call: Callable[..., None], *args: Any) -> str | None:
    try:
        call(*args)
    except ValueError as error:
        return str(error)
    return None


def _check_then_write(
    sampler: PrioritizedSampler, slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64]
) -> None:
    check_slots(sampler.priorities, slots, values)
    sampler.backend.write(slots, values)


def _backend_state(sampler: PrioritizedSampler) -> list[Any]:
    """What a write changes: the raw priorities, the backend's arrays, its counters."""
    backend: Any = sampler.backend
    parts: list[Any] = [sampler.priorities, backend.count]
    structure = backend.tree if sampler.backend_name == "proportional" else backend.order
    parts += [a.copy() for a in vars(structure).values() if isinstance(a, np.ndarray)]
    if sampler.backend_name == "rank":
        parts += [backend.stamps.copy(), backend.next_stamp]
    return parts


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize(("backend", "eps"), [("proportional", 1e-6), ("proportional", 0.0), ("rank", 1e-6)])
def test_checked_write_is_check_slots_then_write(seed: int, backend: str, eps: float) -> None:
    """``backend.checked_write`` (one compiled call) raises what ``check_slots`` then
    ``backend.write`` raise, and leaves the backend as they do: written, or untouched."""
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 200))
    kwargs: dict[str, Any] = dict(alpha=1.0, eps=eps, backend=backend, seed=seed)
    one, two = PrioritizedSampler(capacity, **kwargs), PrioritizedSampler(capacity, **kwargs)
    filled = rng.permutation(capacity)[: int(rng.integers(1, capacity + 1))]
    for s in (one, two):
        s.add(filled)
    for _ in range(10):
        n = int(rng.integers(0, 40))
        slots = rng.choice(filled, size=n)
        values = np.round(rng.random(n) * 3.0, 1)
        if n and rng.random() < 0.6:  # one bad entry of some kind
            j = int(rng.integers(0, n))
            kind = int(rng.integers(0, 5))
            if kind == 0:
                slots[j] = capacity + int(rng.integers(0, 3))
            elif kind == 1:
                slots[j] = -1
            elif kind == 2 and filled.shape[0] < capacity:
                slots[j] = np.setdiff1d(np.arange(capacity), filled)[0]  # an empty slot
            elif kind == 3:
                values[j] = rng.choice(np.array([-1.0, np.nan, np.inf]))
            else:
                values[j] = 1e307  # its mass passes the limit (proportional)
        checked: Any = one.backend
        assert _error(checked.checked_write, slots, values) == _error(_check_then_write, two, slots, values)
        for x, y in zip(_backend_state(one), _backend_state(two), strict=True):
            assert np.array_equal(x, y, equal_nan=True)


def _kernel_codes() -> dict[tuple[str, str], str]:
    """The (file, name) of every compiled (numba) function in prisample's modules (numba reports
    a call with a code object of its own, not the function's)."""
    import sys

    from numba.core.registry import CPUDispatcher

    codes: dict[tuple[str, str], str] = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("prisample"):
            for value in vars(module).values():
                if isinstance(value, CPUDispatcher):
                    code = value.py_func.__code__
                    codes[code.co_filename, code.co_name] = code.co_name
    return codes


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_one_compiled_call_per_sample_and_per_update(backend: str) -> None:
    """A DQN step crosses into compiled code once for ``sample`` (draw and weights) and once for
    ``update_priorities`` (checks and write): each crossing pays the dispatcher per argument."""
    import sys

    sampler = PrioritizedSampler(4096, backend=backend, size=4096, seed=0)
    rng = np.random.default_rng(0)
    sampler.update_priorities(np.arange(4096), rng.random(4096))
    new = rng.random(32)
    draw = sampler.sample(32)
    sampler.update_priorities(draw.indices, new)  # compiled and warm
    codes = _kernel_codes()
    crossings: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        # Calls made inside compiled code raise no events: every event seen is a crossing.
        key = (frame.f_code.co_filename, frame.f_code.co_name)
        if event == "call" and key in codes:
            crossings.append(codes[key])

    sys.setprofile(profile)
    try:
        draw = sampler.sample(32)
        drawn = list(crossings)
        sampler.update_priorities(draw.indices, new)
    finally:
        sys.setprofile(None)
    assert len(drawn) == 1, drawn
    assert len(crossings) - len(drawn) == 1, crossings[len(drawn) :]
