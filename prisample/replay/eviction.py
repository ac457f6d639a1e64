"""Prioritized eviction: when the memory is full, the live transition of lowest priority leaves
instead of the oldest (Schaul et al. 2016, Sec. 6, "Prioritized Memories": keep or erase
memories by the same considerations that decide what to replay).

:class:`PriorityEviction` keeps the live transitions exactly sorted by ``(priority, number)``
(a :class:`~prisample.order.SortedOrder` whose stamps are the transitions' numbers), so the
``k`` next victims are its last ``k`` ranks: lowest priority first, the oldest transition first
among equal priorities.  The ring of :class:`~prisample.replay.memory.ReplayMemory` still evicts
from its tail; before a write, each victim is swapped into the ring position that the write will
evict (:meth:`~prisample.replay.memory.ReplayMemory.swap_slots`), so the memory, its frame pool
and its reference counts need no other change.

A transition keeps its number (``batch.generation``) when it moves to another slot, so a priority
update names a transition by ``(slot, generation)``: an update for a slot that no longer holds
that transition (evicted, or moved away) is dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from prisample.order import SortedOrder
from prisample.replay.memory import ReplayMemory
from prisample.sampler import PrioritizedSampler

__all__ = ["EVICTIONS", "PriorityEviction", "check_eviction"]


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

EVICTIONS = ("fifo", "priority")


class PriorityEviction:
    """The live transitions sorted by raw priority, ties by number: who leaves next.

    ``keys`` mirrors the sampler's raw priorities (NaN: empty) and ``numbers`` the number of the
    transition in each slot (-1: empty); the owner reports every write.
    """

    def __init__(self, capacity: int) -> None:
        self.keys = np.full(capacity, np.nan, dtype=np.float64)
        self.numbers = np.full(capacity, -1, dtype=np.int64)
        self.order = SortedOrder(self.keys, self.numbers)

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.numbers.nbytes + sum(a.nbytes for a in self.order._state()))

    def victims(self, k: int) -> IntArray:
        """The slots of the ``k`` transitions that leave next: lowest priority first, the oldest
        first among equal priorities."""
        count = self.order.count
        return self.order.select(np.arange(count - 1, count - 1 - k, -1, dtype=np.int64))

    def arrange(self, memory: ReplayMemory, n: int) -> list[tuple[int, int]]:
        """Swap the victims of the next ``n`` writes into the ring positions those writes evict
        (the ``j``-th victim to the ``j``-th oldest position); returns the swaps, in order.

        New transitions enter at the maximum priority of the memory, so none of them is the
        lowest while an older transition is live (ties go to the older): the ``n`` writes evict
        the ``k`` lowest transitions live now, then (when ``n > capacity``) the new ones in ring
        order, oldest first.
        """
        c, live = memory.capacity, len(memory)
        k = min(live, live + n - c)
        if k <= 0:
            return []
        tail = memory.num_evicted
        at: dict[int, int] = {}  # victim (its slot now) -> slot it is in
        holder: dict[int, int] = {}  # slot -> victim in it
        victims = [int(v) for v in self.victims(k)]
        for v in victims:
            at[v] = holder[v] = v
        swaps = []
        for j, v in enumerate(victims):
            target, source = (tail + j) % c, at[v]
            if target == source:
                continue
            memory.swap_slots(target, source)
            swaps.append((target, source))
            moved = holder.pop(target, None)
            at[v], holder[target] = target, v
            del holder[source]
            if moved is not None:  # a later victim was in the target position
                at[moved], holder[source] = source, moved
        return swaps

    @staticmethod
    def undo(memory: ReplayMemory, swaps: list[tuple[int, int]]) -> None:
        """Swap back (after a write that was rejected)."""
        for a, b in reversed(swaps):
            memory.swap_slots(a, b)

    def commit(self, sampler: PrioritizedSampler, swaps: list[tuple[int, int]]) -> None:
        """The sampler's and the order's side of ``swaps``: priorities and numbers move with
        their transitions."""
        if not swaps:
            return
        content: dict[int, tuple[float, int]] = {}
        for a, b in swaps:
            ca = content.get(a, (float(self.keys[a]), int(self.numbers[a])))
            cb = content.get(b, (float(self.keys[b]), int(self.numbers[b])))
            content[a], content[b] = cb, ca
        slots = np.fromiter(content, dtype=np.int64, count=len(content))
        values = np.array([content[s][0] for s in content], dtype=np.float64)
        numbers = np.array([content[s][1] for s in content], dtype=np.int64)
        sampler.update_priorities(slots, values)
        self.order.write(slots, values, numbers)

    def added(self, slot: int, priority: float, number: int) -> None:
        self.order.write(
            np.array([slot], dtype=np.int64), np.array([priority]), np.array([number], dtype=np.int64)
        )

    def removed(self, slots: IntArray) -> None:
        self.order.write(slots, np.full(slots.shape[0], np.nan), np.full(slots.shape[0], -1, dtype=np.int64))

    def updated(self, slots: IntArray, values: FloatArray) -> None:
        self.order.write(slots, values, self.numbers[slots])

    def load(self, priorities: FloatArray, numbers: IntArray) -> None:
        """Assign checked state: the sampler's raw priorities and the transitions' numbers."""
        self.keys[:] = priorities
        self.numbers[:] = numbers
        self.order.rebuild()

    def state_numbers(self) -> IntArray:
        return self.numbers.copy()

    def check(self, priorities: FloatArray) -> None:
        """Raise ``ValueError`` unless the mirror and the order agree with the sampler's
        ``priorities``."""
        empty = np.isnan(priorities)
        if not np.array_equal(self.keys, priorities, equal_nan=True):
            raise ValueError("eviction keys should mirror the sampler's raw priorities")
        if not np.array_equal(self.numbers < 0, empty) or np.any(self.numbers[empty] != -1):
            raise ValueError("eviction numbers should be -1 exactly on the empty slots")
        filled = self.numbers[~empty]
        if np.unique(filled).shape[0] != filled.shape[0]:
            raise ValueError("eviction numbers should be distinct on the live slots")
        count = self.order.count
        if count != filled.shape[0]:
            raise ValueError(f"eviction order should hold {filled.shape[0]} slots, but holds {count}")
        ranked = self.order.select(np.arange(count, dtype=np.int64))
        key, number = self.keys[ranked], self.numbers[ranked]
        ordered = (key[:-1] > key[1:]) | ((key[:-1] == key[1:]) & (number[:-1] > number[1:]))
        if not ordered.all():
            raise ValueError("eviction order should sort the live slots by (priority, number) descending")


def check_eviction(value: Any) -> str:
    if not isinstance(value, str) or value not in EVICTIONS:
        raise ValueError(f"eviction should be one of {EVICTIONS}, but got eviction={value!r}")
    return str(value)
