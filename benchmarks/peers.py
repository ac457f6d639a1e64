"""One adapter per implementation, all exposing the same operations.

* ``fill(priorities)``: make all ``N`` slots valid with the given raw priorities (before timing);
* ``add(slots)`` / ``add_one(slot)``: (re)write slots of a ring; they enter at the max priority;
* ``sample(k) -> (indices, weights)``: ``k`` draws with their importance weights;
* ``update(indices, priorities)``: set ``k`` raw priorities ``|δ|``;
* ``indices(a)`` / ``priorities(a)``: a numpy array converted to the type the library takes
  (torch tensors for TorchRL, numpy elsewhere), done before timing.

Every peer uses ``α = 0.6``, ``β = 0.4``, ``ε = 1e-6`` unless told otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.numpy_reference import NumpySumTree

ALPHA, BETA, EPS = 0.6, 0.4, 1e-6


class Peer:
    name = ""
    description = ""
    fill_s = 0.0  # seconds taken by ``fill`` (set by the harness)

    def fill(self, priorities: npt.NDArray[np.float64]) -> None:
        raise NotImplementedError

    def add(self, slots: Any) -> None:
        raise NotImplementedError

    def add_one(self, slot: int) -> None:
        raise NotImplementedError

    def sample(self, k: int) -> tuple[Any, Any]:
        raise NotImplementedError

    def update(self, indices: Any, priorities: Any) -> None:
        raise NotImplementedError

    def indices(self, a: npt.NDArray[np.int64]) -> Any:
        return a

    def priorities(self, a: npt.NDArray[np.float64]) -> Any:
        return a

    def dqn_step(self, priorities: Any) -> None:
        """Sample 32 with weights, then update those 32 (the new ``|δ|`` are given)."""
        indices, _weights = self.sample(32)
        self.update(indices, priorities)

    @property
    def dqn_call(self) -> Callable[[Any], object]:
        """What the harness calls for one DQN step with the new priorities: :meth:`dqn_step`."""
        return self.dqn_step


class Prisample(Peer):
    """``prisample.PrioritizedSampler`` through its public API (numpy in, ``Draw`` out)."""

    def __init__(self, capacity: int, *, backend: str = "proportional", seed: int = 0) -> None:
        from prisample import PrioritizedSampler

        self.name = "prisample" if backend == "proportional" else f"prisample-{backend}"
        self.description = f'`PrioritizedSampler(N, backend="{backend}", size=0)`'
        self.sampler = PrioritizedSampler(
            capacity, alpha=ALPHA, beta=BETA, eps=EPS, backend=backend, size=0, seed=seed
        )
        self.capacity = capacity

    def fill(self, priorities: npt.NDArray[np.float64]) -> None:
        slots = np.arange(self.capacity)
        self.sampler.add(slots)
        self.sampler.update_priorities(slots, priorities)

    def add(self, slots: npt.NDArray[np.int64]) -> None:
        self.sampler.add(slots)

    def add_one(self, slot: int) -> None:
        self.sampler.add(slot)

    def sample(self, k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        draw = self.sampler.sample(k)
        return draw.indices, draw.weights

    def update(self, indices: npt.NDArray[np.int64], priorities: Any) -> None:
        self.sampler.update_priorities(indices, priorities)


class PrisampleTorch(Prisample):
    """prisample fed the new priorities as a CPU torch tensor (what a loss gives)."""

    def __init__(self, capacity: int, *, seed: int = 0) -> None:
        super().__init__(capacity, seed=seed)
        self.name = "prisample (torch |δ|)"

    def priorities(self, a: npt.NDArray[np.float64]) -> Any:
        import torch

        return torch.as_tensor(a, dtype=torch.float32)


class Cpprb(Peer):
    """cpprb's ``PrioritizedReplayBuffer`` with a one-float payload (``{"obs": {"shape": 1}}``).

    cpprb has no sampler without storage: ``sample`` also gathers the 1-float ``obs`` of each
    drawn item (a few hundred bytes at most), ``add`` copies 1 float per item.
    """

    def __init__(self, capacity: int, *, seed: int = 0) -> None:
        import cpprb

        self.name = "cpprb"
        self.description = '`cpprb.PrioritizedReplayBuffer(N, {"obs": {"shape": 1}}, alpha=0.6, eps=1e-6)`'
        self.buffer = cpprb.PrioritizedReplayBuffer(capacity, {"obs": {"shape": 1}}, alpha=ALPHA, eps=EPS)
        self.capacity = capacity
        self._obs = np.zeros((capacity, 1), dtype=np.float32)
        self._one = np.zeros(1, dtype=np.float32)

    def fill(self, priorities: npt.NDArray[np.float64]) -> None:
        self.buffer.add(obs=self._obs, priorities=priorities)

    def add(self, slots: npt.NDArray[np.int64]) -> None:  # cpprb writes at its own ring cursor
        self.buffer.add(obs=self._obs[: slots.shape[0]])

    def add_one(self, slot: int) -> None:
        self.buffer.add(obs=self._one)

    def sample(self, k: int) -> tuple[Any, Any]:
        batch = self.buffer.sample(k, beta=BETA)
        return batch["indexes"], batch["weights"]

    def update(self, indices: Any, priorities: Any) -> None:
        self.buffer.update_priorities(indices, priorities)


class TorchRL(Peer):
    """TorchRL's ``PrioritizedSampler`` driven directly, over a ``LazyTensorStorage`` of N×1 floats.

    ``add`` does what ``ReplayBuffer.extend`` does to the sampler: ``mark_update(index)`` (new
    items at the default = max priority) then ``extend(index)``.
    """

    def __init__(self, capacity: int, *, seed: int = 0) -> None:
        import torch

        logging.getLogger("torchrl").setLevel(logging.WARNING)
        from torchrl.data.replay_buffers.samplers import PrioritizedSampler
        from torchrl.data.replay_buffers.storages import LazyTensorStorage

        self.torch = torch
        self.name = "TorchRL"
        self.description = (
            "`torchrl.data.replay_buffers.samplers.PrioritizedSampler(max_capacity=N, alpha=0.6, "
            "beta=0.4, eps=1e-6)` (float32 C++ trees), `sample(storage, k)` on a `LazyTensorStorage` "
            "holding N×1 floats"
        )
        np.random.seed(seed)  # TorchRL draws its targets with np.random
        self.storage = LazyTensorStorage(capacity)
        self.storage.set(torch.arange(capacity), torch.zeros(capacity, 1))
        self.sampler = PrioritizedSampler(max_capacity=capacity, alpha=ALPHA, beta=BETA, eps=EPS)
        self.capacity = capacity

    def fill(self, priorities: npt.NDArray[np.float64]) -> None:
        index = self.torch.arange(self.capacity)
        self.add(index)
        self.sampler.update_priority(index, self.priorities(priorities))

    def add(self, slots: Any) -> None:
        self.sampler.mark_update(slots)
        self.sampler.extend(slots)

    def add_one(self, slot: int) -> None:
        self.sampler.mark_update(slot)
        self.sampler.add(slot)

    def sample(self, k: int) -> tuple[Any, Any]:
        index, info = self.sampler.sample(self.storage, k)
        return index, info["priority_weight"]

    def update(self, indices: Any, priorities: Any) -> None:
        self.sampler.update_priority(indices, priorities)

    def indices(self, a: npt.NDArray[np.int64]) -> Any:
        return self.torch.as_tensor(a, dtype=self.torch.long)

    def priorities(self, a: npt.NDArray[np.float64]) -> Any:
        return self.torch.as_tensor(a, dtype=self.torch.float32)


class NumpyReference(Peer):
    """:class:`~benchmarks.numpy_reference.NumpySumTree`: vectorised numpy, no compiled code."""

    def __init__(self, capacity: int, *, seed: int = 0) -> None:
        self.name = "numpy"
        self.description = (
            "`benchmarks.numpy_reference.NumpySumTree` (float64 sum + min trees, level-by-level numpy)"
        )
        self.tree = NumpySumTree(capacity, alpha=ALPHA, beta=BETA, eps=EPS, seed=seed)
        self.capacity = capacity

    def fill(self, priorities: npt.NDArray[np.float64]) -> None:
        slots = np.arange(self.capacity)
        self.tree.add(slots)
        self.tree.update(slots, priorities)

    def add(self, slots: npt.NDArray[np.int64]) -> None:
        self.tree.add(slots)

    def add_one(self, slot: int) -> None:
        self.tree.add(slot)

    def sample(self, k: int) -> tuple[Any, Any]:
        return self.tree.sample(k)

    def update(self, indices: Any, priorities: Any) -> None:
        self.tree.update(indices, priorities)


PEERS = ("prisample", "prisample-rank", "cpprb", "TorchRL", "numpy")
FLOOR = "compiled floor"
"""The DQN step's compiled floor (:mod:`benchmarks.compiled_floor`), timed in the DQN step only."""


def make_peer(name: str, capacity: int, seed: int = 0) -> Peer:
    if name == "prisample":
        return Prisample(capacity, seed=seed)
    if name == "prisample-rank":
        return Prisample(capacity, backend="rank", seed=seed)
    if name == "prisample (torch |δ|)":
        return PrisampleTorch(capacity, seed=seed)
    if name == "cpprb":
        return Cpprb(capacity, seed=seed)
    if name == "TorchRL":
        return TorchRL(capacity, seed=seed)
    if name == "numpy":
        return NumpyReference(capacity, seed=seed)
    if name == FLOOR:
        from benchmarks.compiled_floor import CompiledFloor

        return CompiledFloor(capacity, seed=seed)
    raise ValueError(f"unknown peer {name!r}")
