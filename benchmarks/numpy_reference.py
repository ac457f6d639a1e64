"""A plain vectorised-numpy proportional sampler: what a user would write without a compiler.

Flat float64 sum and min trees over ``P`` (next power of two) leaves, node ``i`` with children
``2i`` and ``2i + 1``.  Every operation works on the whole batch at once and walks the tree one
level at a time (``log2 P`` numpy calls per level); there is no per-element Python loop and no
compiled code.  Same conventions as the peers: leaves ``(p + ε)^α``, new items at the running
maximum priority, stratified draws, weights ``(P_min / P(i))^β`` (normalised over the memory).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class NumpySumTree:
    """Proportional prioritized sampling over ``capacity`` slots with numpy only."""

    def __init__(
        self, capacity: int, *, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6, seed: int = 0
    ) -> None:
        self.capacity = int(capacity)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.size = 1 << max(0, (self.capacity - 1).bit_length())
        self.depth = self.size.bit_length() - 1
        self.sum = np.zeros(2 * self.size, dtype=np.float64)
        self.min = np.full(2 * self.size, np.inf, dtype=np.float64)
        self.max_priority = 1.0
        self.count = 0
        self.rng = np.random.default_rng(seed)

    def _set(self, slots: npt.NDArray[np.int64], leaves: npt.NDArray[np.float64]) -> None:
        nodes = slots + self.size
        self.count += int(np.count_nonzero(self.sum[np.unique(nodes)] == 0.0))
        self.sum[nodes] = leaves
        self.min[nodes] = leaves
        for _ in range(self.depth):  # duplicates recompute the same parent twice: harmless
            nodes = nodes >> 1
            left = nodes << 1
            self.sum[nodes] = self.sum[left] + self.sum[left + 1]
            self.min[nodes] = np.minimum(self.min[left], self.min[left + 1])

    def add(self, slots: npt.NDArray[np.int64] | int) -> None:
        """(Re)write ``slots``: they enter at the running maximum priority."""
        slots = np.atleast_1d(np.asarray(slots, dtype=np.int64))
        self._set(slots, np.full(slots.shape[0], (self.max_priority + self.eps) ** self.alpha))

    def update(self, slots: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None:
        """Set raw priorities ``|δ|`` of ``slots``."""
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self._set(slots, (priorities + self.eps) ** self.alpha)

    def find(self, targets: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """Prefix-sum search, the whole batch one level at a time."""
        nodes = np.ones(targets.shape[0], dtype=np.int64)
        t = targets.copy()
        for _ in range(self.depth):
            left = nodes << 1
            mass_left = self.sum[left]
            right = t >= mass_left
            t -= np.where(right, mass_left, 0.0)
            nodes = left + right
        return np.minimum(nodes - self.size, self.count - 1)  # rounding past the last leaf

    def sample(self, k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """``k`` stratified draws and their importance weights."""
        total = self.sum[1]
        targets = (np.arange(k) + self.rng.random(k)) * (total / k)
        slots = self.find(targets)
        weights = (self.min[1] / self.sum[self.size + slots]) ** self.beta
        return slots, weights.astype(np.float32)

    def nbytes(self) -> int:
        return int(self.sum.nbytes + self.min.nbytes)
