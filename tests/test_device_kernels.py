"""The device tree's fused kernels (``prisample/_device_kernels.py``, Triton) against the tensor
path they replace, on CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1``): the same
bits in every node after writes with duplicates, NaN removals and masked entries, the same slots,
``P(i)`` and random stream after draws, and so the same draws for a seed from a sampler.  On a GPU,
``benchmarks/gpu_diagnose.py``'s ``fused_vs_tensor_ops`` phase makes the same comparison on CUDA."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from prisample import DevicePrioritizedSampler, PrioritizedSampler, _device_kernels
from prisample._device_rng import SplitMix64
from prisample.device_tree import DevicePriorityTree


@pytest.fixture(autouse=True)
def interpreted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build (or reuse) the kernels for Triton's CPU interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def pair(capacity: int, **kwargs: Any) -> tuple[DevicePriorityTree, DevicePriorityTree]:
    tensors, fused = DevicePriorityTree(capacity, **kwargs), DevicePriorityTree(capacity, **kwargs)
    assert not tensors.fused  # CPU tensors: the tensor path unless asked
    fused.fused = True
    return tensors, fused


@pytest.mark.parametrize("capacity", [1, 8, 9, 100, 4097])
@pytest.mark.parametrize(
    ("alpha", "eps", "uniform"), [(0.6, 1e-6, False), (1.0, 0.0, False), (1.0, 0.0, True)]
)
def test_fused_writes_and_draws_equal_the_tensor_path(
    capacity: int, alpha: float, eps: float, uniform: bool
) -> None:
    rng = np.random.default_rng(capacity)
    tensors, fused = pair(capacity, alpha=alpha, eps=eps, uniform=uniform)
    streams = SplitMix64(11, tensors.device), SplitMix64(11, fused.device)
    for step in range(12):
        k = int(rng.integers(1, 48))
        slots = torch.from_numpy(rng.integers(0, capacity, k))
        values = rng.random(k) * 10.0 ** rng.integers(-18, 4, k).astype(np.float64)
        values[rng.random(k) < 0.2] = np.nan
        values[rng.random(k) < 0.2] = 0.0
        keep = torch.from_numpy(rng.random(k) < 0.7) if step % 2 else None
        for tree in (tensors, fused):
            tree.write(slots, torch.from_numpy(values), keep)
        assert torch.equal(fused.flat, tensors.flat) and torch.equal(fused.raw.isnan(), tensors.raw.isnan())
        batch = int(rng.integers(1, 70))
        (a, pa), (b, pb) = tensors.draw(streams[0], batch), fused.draw(streams[1], batch)
        assert torch.equal(a, b) and torch.equal(pa, pb)
        assert torch.equal(streams[0].state, streams[1].state)


def test_a_fused_sampler_draws_as_the_tensor_one_and_its_probabilities_are_the_hosts() -> None:
    capacity = 3000
    rng = np.random.default_rng(4)
    raw = rng.random(capacity) * 5.0
    raw[rng.random(capacity) < 0.1] = 0.0
    host = PrioritizedSampler(capacity, alpha=0.6, eps=1e-6, beta=0.5, size=0)
    samplers = [DevicePrioritizedSampler(capacity, alpha=0.6, eps=1e-6, beta=0.5, seed=3) for _ in range(2)]
    samplers[1].tree.fused = True
    slots = np.arange(capacity)
    every: list[Any] = [host, *samplers]
    for s in every:
        s.add(slots)
        s.update_priorities(slots, raw)
    for _ in range(4):
        a, b = (s.sample(32) for s in samplers)
        assert torch.equal(a.indices, b.indices) and torch.equal(a.weights, b.weights)
        assert torch.equal(a.probabilities, b.probabilities)
        drawn = b.indices.numpy()
        np.testing.assert_allclose(b.probabilities.numpy(), host.probabilities(drawn), rtol=1e-12, atol=0)
        values = torch.from_numpy(rng.random(32) * 3.0)
        host.update_priorities(drawn, values.numpy())
        for s in samplers:
            s.update_priorities(b.indices, values, checked=False)
    assert torch.equal(samplers[0].tree.flat, samplers[1].tree.flat)


def test_only_a_cuda_device_takes_the_kernels_by_itself() -> None:
    assert not _device_kernels.available(torch.device("cpu"))
    assert not DevicePriorityTree(10, alpha=1.0, eps=0.0).fused


def test_kernels_that_cannot_run_hand_over_to_the_tensor_path_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Built for a GPU (no interpreter) and launched on CPU tensors, the kernels fail as on a
    device Triton does not support: the tree warns, turns ``fused`` off and draws and writes
    the same as the tensor path, nothing half-written."""
    monkeypatch.delenv("TRITON_INTERPRET")
    tensors, fused = pair(100, alpha=0.6, eps=1e-6)
    slots, values = torch.arange(0, 100, 3), torch.linspace(0.0, 4.0, 34, dtype=torch.float64)
    tensors.write(slots, values)
    with pytest.warns(RuntimeWarning, match="fused kernels failed"):
        fused.write(slots, values)
    assert not fused.fused and torch.equal(fused.flat, tensors.flat)
    fused.fused = True
    streams = SplitMix64(5, tensors.device), SplitMix64(5, fused.device)
    with pytest.warns(RuntimeWarning, match="fused kernels failed"):
        b, pb = fused.draw(streams[1], 32)
    a, pa = tensors.draw(streams[0], 32)
    assert torch.equal(a, b) and torch.equal(pa, pb) and torch.equal(streams[0].state, streams[1].state)


def test_the_environment_can_turn_the_kernels_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRISAMPLE_DEVICE_KERNELS", "0")
    assert not _device_kernels.available(torch.device("cuda"))
