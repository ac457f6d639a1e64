"""Eviction strategies: which transition a full memory lets go (Schaul et al. 2016, Sec. 6,
"Prioritized Memories": keep or erase memories by the same considerations that decide what to
replay).

A :class:`~prisample.replay.PrioritizedReplay` holds one strategy, chosen once by its
``eviction=`` argument, and calls it unconditionally around every write, priority update, draw
and checkpoint:

:class:`FifoEviction` (``"fifo"``)
    The ring's own order: the oldest transition leaves; every hook does nothing, and a
    transition's generation is its slot's (:meth:`~prisample.replay.memory.ReplayMemory.generations`).
:class:`PriorityEviction` (``"priority"``)
    Keeps the live transitions exactly sorted by ``(priority, generation)`` (a
    :class:`~prisample.order.SortedOrder` whose stamps are the transitions' generations), so the
    ``k`` next victims are its last ``k`` ranks: lowest priority first, the oldest transition
    first among equal priorities.  The ring of :class:`~prisample.replay.memory.ReplayMemory`
    still evicts from its tail; before a write, each victim is swapped into the ring position
    that the write will evict (:meth:`~prisample.replay.memory.ReplayMemory.swap_slots`), so the
    memory, its frame pool and its reference counts need no other change.

The transition id is its *generation*: the number it got when added (``batch.generation``).  The
strategy owns it (:meth:`Eviction.generations`): under ``"priority"`` a transition keeps its
generation when it moves to another slot, so a priority update names a transition by ``(slot,
generation)`` and an update for a slot that no longer holds that transition (evicted, or moved
away) is dropped.  (Checkpoints name the moved generations ``"numbers"``, as they always have.)
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from prisample.order import SortedOrder
from prisample.replay.memory import Inserted, ReplayMemory
from prisample.slot_sampler import SlotSampler

__all__ = ["EVICTIONS", "Eviction", "FifoEviction", "PriorityEviction", "check_eviction", "make_eviction"]


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Swaps = list[tuple[int, int]]

EVICTIONS = ("fifo", "priority")


def events(done: Inserted, priorities: FloatArray, first: int = 0) -> tuple[IntArray, FloatArray]:
    """A write as one ordered sequence of slot writes: row ``i``'s evictions (value NaN), then
    row ``i`` (value ``priorities[i]``), from eviction ``first`` on (earlier ones left out)."""
    return _interleave(done.slots, done.evicted, done.evicted_until, priorities, first)


@numba.njit(cache=True)
def _interleave(
    slots: np.ndarray, evicted: np.ndarray, until: np.ndarray, priorities: np.ndarray, first: int
) -> tuple[np.ndarray, np.ndarray]:
    n = slots.shape[0]
    m = evicted.shape[0] - first
    at = np.empty(n + m, dtype=np.int64)
    values = np.empty(n + m, dtype=np.float64)
    out, e = 0, first
    for i in range(n):
        while e < until[i]:
            at[out], values[out] = evicted[e], np.nan
            out, e = out + 1, e + 1
        at[out], values[out] = slots[i], priorities[i]
        out += 1
    return at, values


class Eviction:
    """Which transition leaves a full memory, and the generation of each live transition.

    The replay calls every method unconditionally, under its lock: :meth:`arrange` before a write
    (and :meth:`undo` when the write is rejected), :meth:`admitted` after it, :meth:`updated` after
    a priority update, :meth:`generations` for draws and updates, :meth:`state_generations` /
    :meth:`load` / :meth:`check` for checkpoints.  This base class is the ring's order
    (``"fifo"``): nothing to do, and a live transition's generation is its slot's.
    """

    name = "fifo"

    @property
    def nbytes(self) -> int:
        return 0

    def arrange(self, memory: ReplayMemory, n: int) -> Swaps:
        """Prepare the memory for ``n`` writes; returns what to :meth:`undo` if the write fails."""
        return []

    def undo(self, memory: ReplayMemory, swaps: Swaps) -> None:
        """Take back :meth:`arrange` (after a write that was rejected)."""

    def moved(self, sampler: SlotSampler, swaps: Swaps) -> None:
        """After a write, before the sampler hears of it: the sampler's side of the ``swaps``
        that :meth:`arrange` made (priorities move with their transitions)."""

    def admitted(self, done: Inserted, priorities: FloatArray, head: int) -> None:
        """After a write (``n_step = 1``) and the sampler's side of it: the transitions
        ``done.evicted`` left and ``done.slots`` entered at ``priorities`` (row ``i`` is
        generation ``head + i``)."""

    def updated(self, slots: IntArray, values: FloatArray) -> None:
        """Priorities of live transitions changed (after the sampler's update)."""

    def generations(self, slots: IntArray, live: IntArray) -> IntArray:
        """The generation of the transition in each slot, given the memory's live generations
        ``live`` of those slots (``-1``: none)."""
        return live

    def state_generations(self) -> IntArray | None:
        """The state's ``"numbers"``: ``None`` unless transitions move between slots."""
        return None

    def load(self, priorities: FloatArray, generations: IntArray) -> None:
        """Assign checked state: the sampler's raw priorities and each slot's generation."""

    def check(self, priorities: FloatArray) -> None:
        """Raise ``ValueError`` unless the strategy agrees with the sampler's ``priorities``."""


class FifoEviction(Eviction):
    """``eviction="fifo"``: the oldest transition leaves (the ring's own order)."""


class PriorityEviction(Eviction):
    """The live transitions sorted by raw priority, ties by generation: who leaves next.

    ``keys`` mirrors the sampler's raw priorities (NaN: empty) and ``generation`` the generation
    of the transition in each slot (-1: empty); the owner reports every write.
    """

    name = "priority"

    def __init__(self, capacity: int) -> None:
        self.keys = np.full(capacity, np.nan, dtype=np.float64)
        self.generation = np.full(capacity, -1, dtype=np.int64)
        self.order = SortedOrder(self.keys, self.generation)

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.generation.nbytes + self.order.nbytes)

    def victims(self, k: int) -> IntArray:
        """The slots of the ``k`` transitions that leave next: lowest priority first, the oldest
        first among equal priorities."""
        count = self.order.count
        return self.order.select(np.arange(count - 1, count - 1 - k, -1, dtype=np.int64))

    def arrange(self, memory: ReplayMemory, n: int) -> Swaps:
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

    def undo(self, memory: ReplayMemory, swaps: Swaps) -> None:
        for a, b in reversed(swaps):
            memory.swap_slots(a, b)

    def admitted(self, done: Inserted, priorities: FloatArray, head: int) -> None:
        """The order's side of a whole write in one ordered write: each row's evictions, then
        the row."""
        n = done.slots.shape[0]
        if n == 0:
            return
        slots, values = events(done, priorities)
        generation = np.where(np.isnan(values), -1, 0)
        generation[~np.isnan(values)] = head + np.arange(n, dtype=np.int64)
        self.order.write(slots, values, generation)

    def moved(self, sampler: SlotSampler, swaps: Swaps) -> None:
        if not swaps:
            return
        content: dict[int, tuple[float, int]] = {}
        for a, b in swaps:
            ca = content.get(a, (float(self.keys[a]), int(self.generation[a])))
            cb = content.get(b, (float(self.keys[b]), int(self.generation[b])))
            content[a], content[b] = cb, ca
        slots = np.fromiter(content, dtype=np.int64, count=len(content))
        values = np.array([content[s][0] for s in content], dtype=np.float64)
        generation = np.array([content[s][1] for s in content], dtype=np.int64)
        sampler.update_priorities(slots, values)
        self.order.write(slots, values, generation)

    def updated(self, slots: IntArray, values: FloatArray) -> None:
        self.order.write(slots, values, self.generation[slots])

    def generations(self, slots: IntArray, live: IntArray) -> IntArray:
        return np.where(live >= 0, self.generation[slots], -1)

    def state_generations(self) -> IntArray:
        return self.generation.copy()

    def load(self, priorities: FloatArray, generations: IntArray) -> None:
        self.keys[:] = priorities
        self.generation[:] = generations
        self.order.rebuild()

    def check(self, priorities: FloatArray) -> None:
        empty = np.isnan(priorities)
        if not np.array_equal(self.keys, priorities, equal_nan=True):
            raise ValueError("eviction keys should mirror the sampler's raw priorities")
        if not np.array_equal(self.generation < 0, empty) or np.any(self.generation[empty] != -1):
            raise ValueError("eviction numbers should be -1 exactly on the empty slots")
        filled = self.generation[~empty]
        if np.unique(filled).shape[0] != filled.shape[0]:
            raise ValueError("eviction numbers should be distinct on the live slots")
        count = self.order.count
        if count != filled.shape[0]:
            raise ValueError(f"eviction order should hold {filled.shape[0]} slots, but holds {count}")
        ranked = self.order.select(np.arange(count, dtype=np.int64))
        key, number = self.keys[ranked], self.generation[ranked]
        ordered = (key[:-1] > key[1:]) | ((key[:-1] == key[1:]) & (number[:-1] > number[1:]))
        if not ordered.all():
            raise ValueError("eviction order should sort the live slots by (priority, number) descending")


def make_eviction(name: str, capacity: int) -> Eviction:
    """The strategy named ``name`` (checked) for a memory of ``capacity`` slots."""
    return PriorityEviction(capacity) if check_eviction(name) == "priority" else FifoEviction()


def check_eviction(value: Any) -> str:
    if not isinstance(value, str) or value not in EVICTIONS:
        raise ValueError(f"eviction should be one of {EVICTIONS}, but got eviction={value!r}")
    return str(value)
