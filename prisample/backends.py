"""Sampling distributions over slots, one class each, behind the :class:`Backend` protocol.

A backend knows which slots are valid and how to draw from them; it knows nothing of ``α``/``ε``
transforms (proportional receives the leaves ``(p + ε)^α`` already computed), of ``β`` or of
importance weights.  ``sample`` returns the drawn slots *and* their per-draw probabilities, the
marginal probability that one draw returns that slot under stratification.
"""

from __future__ import annotations

from typing import Any, Protocol

import numba
import numpy as np
import numpy.typing as npt

from prisample.rank import RankBackend
from prisample.trees import ArgMaxTree, SumTree, top_k

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class Backend(Protocol):
    """What :class:`~prisample.PrioritizedSampler` needs from a distribution."""

    capacity: int
    count: int
    uses_leaves: bool  # True: ``set`` takes leaves ``(p + ε)^α``; False: raw priorities ``|δ|``

    def set(self, slots: IntArray, values: FloatArray) -> None: ...
    def remove(self, slots: IntArray) -> None: ...
    def contains(self, slots: IntArray) -> npt.NDArray[np.bool_]: ...
    def sample(self, k: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]: ...
    def probabilities(self, slots: IntArray) -> FloatArray: ...
    def min_probability(self) -> float: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ProportionalBackend:
    """``P(i) = l_i / Σ_k l_k`` with leaves ``l_i = (p_i + ε)^α`` (Schaul et al. 2016, Eq. 1).

    A batch of ``k`` is stratified (App. B.2.1): ``[0, Σ l)`` is cut into ``k`` equal ranges and
    one target is drawn uniformly in each, then located by prefix-sum search in a sum tree.  The
    per-draw probability of slot ``i`` is still exactly ``P(i)``.  A slot is valid while its leaf
    is positive.
    """

    uses_leaves = True

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.tree = SumTree(self.capacity)
        self.count = 0

    def set(self, slots: IntArray, values: FloatArray) -> None:
        self.count += self.tree.set(slots, values)

    def assign_all(self, leaves: FloatArray) -> None:
        """Replace every leaf at once (α changed, or a checkpoint is loaded)."""
        self.tree.assign_all(leaves)
        self.count = int(np.count_nonzero(self.tree.leaves > 0.0))

    def remove(self, slots: IntArray) -> None:
        self.set(slots, np.zeros(slots.shape[0], dtype=np.float64))

    def contains(self, slots: IntArray) -> npt.NDArray[np.bool_]:
        return self.tree.leaves[slots] > 0.0

    def sample(self, k: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        total = self.tree.total()
        targets = (np.arange(k) + rng.random(k)) * (total / k)
        slots = self.tree.find(targets)
        return slots, self.tree.leaves[slots] / total

    def probabilities(self, slots: IntArray) -> FloatArray:
        return self.tree.leaves[slots] / self.tree.total()

    def min_probability(self) -> float:
        return self.tree.min_leaf() / self.tree.total()

    def state_dict(self) -> dict[str, Any]:
        return {}  # leaves are derived from the sampler's raw priorities

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class GreedyBackend:
    """Greedy prioritization (Sec. 3.2): a batch of ``k`` is the ``k`` largest ``|δ|``.

    Deterministic: ties go to the lowest slot.  ``probabilities`` reports ``1/m`` for each of the
    ``m`` slots tied at the maximum and 0 elsewhere (what a one-item draw does); importance
    sampling does not apply, so the sampler gives greedy draws unit weights.
    """

    uses_leaves = False

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.keys = np.full(self.capacity, -np.inf, dtype=np.float64)
        self.tree = ArgMaxTree(self.keys)
        self.count = 0

    def set(self, slots: IntArray, values: FloatArray) -> None:
        unique = np.unique(slots)
        before = int(np.count_nonzero(self.keys[unique] > -np.inf))
        self.tree.write(slots, values)
        self.count += int(np.count_nonzero(self.keys[unique] > -np.inf)) - before

    def remove(self, slots: IntArray) -> None:
        self.set(slots, np.full(slots.shape[0], -np.inf))

    def contains(self, slots: IntArray) -> npt.NDArray[np.bool_]:
        return self.keys[slots] > -np.inf

    def sample(self, k: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        slots = top_k(self.tree, min(k, self.count))
        if slots.shape[0] < k:  # fewer valid slots than asked: repeat the ranking from the top
            slots = np.resize(slots, k)
        return slots, self.probabilities(slots)

    def probabilities(self, slots: IntArray) -> FloatArray:
        top = self.tree.max()
        ties = int(np.count_nonzero(self.keys == top))
        return np.where(self.keys[slots] == top, 1.0 / ties, 0.0)

    def min_probability(self) -> float:
        return float(self.probabilities(np.arange(self.capacity)[self.keys > -np.inf]).min())

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@numba.njit(cache=True)
def _dense_insert(dense: np.ndarray, pos: np.ndarray, count: int, slots: np.ndarray) -> int:
    for j in range(slots.shape[0]):
        slot = slots[j]
        if pos[slot] < 0:
            dense[count] = slot
            pos[slot] = count
            count += 1
    return count


@numba.njit(cache=True)
def _dense_remove(dense: np.ndarray, pos: np.ndarray, count: int, slots: np.ndarray) -> int:
    for j in range(slots.shape[0]):
        slot = slots[j]
        h = pos[slot]
        if h < 0:
            continue
        count -= 1
        last = dense[count]
        dense[h] = last
        pos[last] = h
        pos[slot] = -1
    return count


class UniformBackend:
    """Uniform replay over the valid slots: ``P(i) = 1/N`` (α = 0 without the tree).

    Valid slots are kept in a dense array so that a draw is one random position.  Draws are
    independent (with replacement), like the uniform Double DQN baseline.
    """

    uses_leaves = False

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.dense = np.zeros(self.capacity, dtype=np.int32)
        self.pos = np.full(self.capacity, -1, dtype=np.int32)
        self.count = 0

    def set(self, slots: IntArray, values: FloatArray) -> None:
        self.count = _dense_insert(self.dense, self.pos, self.count, slots)

    def remove(self, slots: IntArray) -> None:
        self.count = _dense_remove(self.dense, self.pos, self.count, slots)

    def contains(self, slots: IntArray) -> npt.NDArray[np.bool_]:
        return self.pos[slots] >= 0

    def sample(self, k: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        slots = self.dense[rng.integers(0, self.count, size=k)].astype(np.int64)
        return slots, np.full(k, 1.0 / self.count)

    def probabilities(self, slots: IntArray) -> FloatArray:
        return np.full(slots.shape[0], 1.0 / self.count)

    def min_probability(self) -> float:
        return 1.0 / self.count

    def state_dict(self) -> dict[str, Any]:
        return {"dense": self.dense[: self.count].copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        dense = np.asarray(state["dense"], dtype=np.int32)
        self.count = dense.shape[0]
        self.dense[: self.count] = dense
        self.pos[:] = -1
        self.pos[dense] = np.arange(self.count, dtype=np.int32)


BACKENDS = ("proportional", "rank", "greedy", "uniform")


def make_backend(name: str, capacity: int, alpha: float) -> Backend:
    """The backend called ``name`` for ``capacity`` slots."""
    if name == "proportional":
        return ProportionalBackend(capacity)
    if name == "rank":
        return RankBackend(capacity, alpha)
    if name == "greedy":
        return GreedyBackend(capacity)
    if name == "uniform":
        return UniformBackend(capacity)
    raise ValueError(f"backend should be one of {BACKENDS}, but got backend={name!r}")
