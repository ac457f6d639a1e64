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
