"""The importance-weight formula ``w_i = (N · P(i))^-β / max_j w_j`` (Schaul et al. 2016,
Sec. 3.4), once per kernel family, each checked against one naive reference: the compiled
(numba) weights, the compiled corrected weights with every factor 1, the compiled fused
proportional draw, and the torch kernels of the device sampler."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from prisample._draw import WEIGHT_MODES, proportional_draw
from prisample.device_sampler import device_weights
from prisample.trees import PriorityTree
from prisample.weights import WeightNorm, corrected_weights_unchecked, weights_unchecked

Pair = tuple[np.ndarray, np.ndarray]
Family = Callable[[np.ndarray, np.ndarray, float, WeightNorm], Pair]
"""``(raw, u, β, norm) -> (P(i) of the drawn slots, their weights)`` over the memory ``raw``
(``P(i) = raw_i / Σ raw``), the slots drawn by the uniforms ``u``."""


def naive_weights(p: np.ndarray, memory: np.ndarray, beta: float, norm: WeightNorm) -> np.ndarray:
    """``(N · P(i))^-β`` divided by its maximum over the memory (``"memory"``), over the batch
    (``"batch"``), or by nothing (``"none"``), term by term."""
    n = memory.shape[0]
    raw = [(n * float(pi)) ** -beta for pi in p]
    if norm == "none":
        return np.array(raw)
    pool = memory if norm == "memory" else p
    top = max((n * float(pj)) ** -beta for pj in pool)
    return np.array([w / top for w in raw])


def _slots(raw: np.ndarray, u: np.ndarray) -> Pair:
    memory = raw / raw.sum()
    slots = np.minimum(np.searchsorted(np.cumsum(memory), u * memory.sum()), raw.shape[0] - 1)
    return slots, memory[slots]


def numba_weights(raw: np.ndarray, u: np.ndarray, beta: float, norm: WeightNorm) -> Pair:
    _, p = _slots(raw, u)
    low = float((raw / raw.sum()).min())
    return p, weights_unchecked(p, raw.shape[0], beta, norm, low)


def numba_corrected(raw: np.ndarray, u: np.ndarray, beta: float, norm: WeightNorm) -> Pair:
    _, p = _slots(raw, u)
    low = float((raw / raw.sum()).min())
    ones = np.ones(p.shape[0])
    return p, corrected_weights_unchecked(p, ones, raw.shape[0], beta, norm, low, 1.0)


def numba_fused_draw(raw: np.ndarray, u: np.ndarray, beta: float, norm: WeightNorm) -> Pair:
    tree = PriorityTree(raw.copy(), 1.0, 0.0)
    _, p, w = proportional_draw(tree, u.copy(), raw.shape[0], beta, WEIGHT_MODES[norm])
    assert w is not None
    return p, w


def torch_weights(raw: np.ndarray, u: np.ndarray, beta: float, norm: WeightNorm) -> Pair:
    _, p = _slots(raw, u)
    low = torch.tensor(float((raw / raw.sum()).min()), dtype=torch.float64)
    n = torch.tensor(raw.shape[0], dtype=torch.int64)
    w = device_weights(torch.from_numpy(p), n, beta, norm, low if norm == "memory" else None)
    assert w.dtype == torch.float32
    return p, w.numpy()


FAMILIES: dict[str, Family] = {
    "numba": numba_weights,
    "numba-corrected": numba_corrected,
    "numba-fused-draw": numba_fused_draw,
    "torch": torch_weights,
}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("norm", ["memory", "batch", "none"])
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_kernel_family_gives_the_papers_weights(
    family: str, norm: WeightNorm, beta: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    raw = rng.exponential(size=37) + 1e-3
    u = rng.random(8)
    p, w = FAMILIES[family](raw, u, beta, norm)
    memory = raw / raw.sum()
    nearest = np.min(np.abs(p[:, None] - memory[None, :]) / memory[None, :], axis=1)
    assert np.all(nearest < 1e-12)  # each P(i) is a slot's of the memory
    np.testing.assert_allclose(w, naive_weights(p, memory, beta, norm), rtol=2e-6)
    if norm != "none":
        assert np.all(w <= 1.0)


@pytest.mark.parametrize("family", ["numba", "torch"])
def test_a_slot_of_probability_zero_gets_weight_zero(family: str) -> None:
    p = np.array([0.0, 0.25, 0.5])
    if family == "numba":
        w = weights_unchecked(p, 4, 0.5, "batch", 1.0)
    else:
        w = device_weights(torch.from_numpy(p), torch.tensor(4), 0.5, "batch").numpy()
    np.testing.assert_allclose(w, [0.0, 1.0, 0.5**0.5], rtol=1e-6)
