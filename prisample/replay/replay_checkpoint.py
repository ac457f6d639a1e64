"""Checkpoints of a prioritized replay: the sampler's state, the draw record and the memory's
counters (and, on request, the memory's whole state), loaded all or nothing.

:class:`ReplayCheckpoint` is the part of a :class:`~prisample.replay.PrioritizedReplay` that
writes and loads its ``state_dict``, given the replay's other parts (memory, sampler, write-back
guard, eviction strategy): everything is checked (the memory's state, the draw record, the sampler
filled exactly in the memory's drawable slots, the transitions' numbers under priority eviction)
before anything changes.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import numpy.typing as npt

from prisample.replay._checks import as_state_array, check_keys
from prisample.replay.checkpoint import CheckedState
from prisample.replay.eviction import Eviction
from prisample.replay.memory import ReplayMemory
from prisample.replay.write_back import WriteBackGuard
from prisample.slot_sampler import SlotSampler

__all__ = ["REPLAY_STATE_VERSION", "ReplayCheckpoint"]

IntArray = npt.NDArray[np.int64]

# PrioritizedReplay's state; 2 adds memory_head and memory_tail (the memory it was saved with), 3
# adds eviction and numbers (the transitions' numbers under eviction="priority", else None).
REPLAY_STATE_VERSION = 3
_LOADABLE_REPLAY_VERSIONS = (1, 2, 3)


class ReplayCheckpoint:
    """``state_dict`` and ``load_state_dict`` of a prioritized replay made of ``memory``,
    ``sampler``, ``guard`` (the draw record and the dropped count) and ``eviction`` (the
    strategy, whose name and transitions' numbers the state holds); each call holds the
    sampler's lock."""

    def __init__(
        self, memory: ReplayMemory, sampler: SlotSampler, guard: WriteBackGuard, eviction: Eviction
    ) -> None:
        self.memory = memory
        self.sampler = sampler
        self.guard = guard
        self.eviction = eviction

    @property
    def capacity(self) -> int:
        return self.memory.capacity

    def state_dict(self, include_memory: bool = False, *, copy: bool = True) -> dict[str, Any]:
        """Sampler state, draw record and the memory's counters, plus the memory's state when
        ``include_memory`` (``copy`` as in :meth:`ReplayMemory.state_dict`): one consistent
        snapshot under threads (with ``copy=False`` the memory's arrays are views that later adds
        change)."""
        with self.sampler.lock:
            return self._state_dict(include_memory, copy=copy)

    def _state_dict(self, include_memory: bool, *, copy: bool) -> dict[str, Any]:
        state: dict[str, Any] = {
            "version": REPLAY_STATE_VERSION,
            "sampler": self.sampler.state_dict(),
            "drawn": self.guard.record_state(),
            "dropped_updates": self.guard.dropped,
            "memory_head": self.memory.num_added,
            "memory_tail": self.memory.num_evicted,
            "eviction": self.eviction.name,
            "numbers": self.eviction.state_generations(),
        }
        if include_memory:
            state["memory"] = self.memory.state_dict(copy=copy)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, all of it or nothing.

        Without ``"memory"`` the current memory must be the one the state was saved with: it must
        have seen the same number of adds and evictions (``memory_head``, ``memory_tail``), so its
        live slots are the sampler's filled ones.  Everything is checked before anything changes:
        the memory's state completely (:meth:`ReplayMemory.load_state_dict`), the draw record, and
        that the sampler's filled slots are the memory's live ones; then the sampler loads (its own
        checks, which change nothing when they fail); then the memory, which cannot fail.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        with self.sampler.lock:  # checks and commit against one memory: no add may land in between
            self._load_state_dict(state)

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        version = state.get("version")
        if type(version) is not int or version not in _LOADABLE_REPLAY_VERSIONS:
            raise ValueError(
                f"state_dict version should be one of {_LOADABLE_REPLAY_VERSIONS}, "
                f"but got version={version!r}"
            )
        keys = {"version", "sampler", "drawn", "dropped_updates"}
        if version >= 2:
            keys |= {"memory_head", "memory_tail"}
        if version >= 3:
            keys |= {"eviction", "numbers"}
        check_keys(state, keys | ({"memory"} & state.keys()), "state_dict")
        eviction = state.get("eviction", "fifo")
        if eviction not in ("fifo", self.eviction.name):  # a fifo state loads under either eviction
            raise ValueError(
                f"state_dict eviction should be {self.eviction.name!r} (or 'fifo'), "
                f"but got eviction={eviction!r}"
            )
        counts = {}
        for key in keys - {"version", "sampler", "drawn", "eviction", "numbers"}:
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"state_dict {key} should be an integer >= 0, but got {key}={value!r}")
            counts[key] = int(value)
        memory: CheckedState | None = None
        if "memory" in state:
            memory = self.memory.check_state(state["memory"])
            head, tail = memory.head, memory.tail
            generation, live = memory.generation, memory.drawable
        else:
            head, tail = self.memory.num_added, self.memory.num_evicted
            generation = self.memory.generations(np.arange(self.capacity))
            live = self.memory.drawable(np.arange(self.capacity))
        for key, mine in (("memory_head", head), ("memory_tail", tail)):
            if key in counts and counts[key] != mine:
                raise ValueError(
                    f"state_dict {key} should be {mine} (the memory's), but got {key}={counts[key]}: "
                    "the state was saved with another memory, or at another point of this one"
                )
        drawn = self.guard.check_record(state["drawn"], "state_dict drawn")
        slot_numbers = self._checked_numbers(state.get("numbers"), eviction, generation, live, head)
        # A slot's draw record is -1 or a transition it has held: a number of that slot, not newer
        # (under priority eviction transitions move between slots: any number already given out).
        slots = np.arange(self.capacity)
        if eviction == "priority":
            held = (drawn == -1) | ((drawn >= 0) & (drawn < head))
        else:
            held = (drawn == -1) | ((drawn >= 0) & (drawn <= generation) & (drawn % self.capacity == slots))
        if not held.all():
            j = int(np.argmin(held))
            raise ValueError(
                f"state_dict drawn should hold, per slot, -1 or a transition the slot has held (at most "
                f"generation {generation[j]}), but got drawn[{j}]={drawn[j]}"
            )
        sampler_state = state["sampler"]
        if not isinstance(sampler_state, dict):
            raise TypeError(f"state_dict sampler should be a dict, but got {type(sampler_state).__name__}")
        try:
            filled = ~np.isnan(np.asarray(sampler_state["priorities"], dtype=np.float64))
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                "state_dict sampler should be a PrioritizedSampler state_dict with priorities"
            ) from None
        if filled.shape != live.shape or not np.array_equal(filled, live):
            raise ValueError(
                "state_dict sampler priorities should be filled exactly in the memory's live slots "
                "(with complete n-step windows) "
                f"({int(live.sum())} of {live.shape[0]})"
            )
        self.sampler.load_state_dict(sampler_state)
        if memory is not None:
            self.memory.commit_state(memory)
        self.guard.load(drawn, counts["dropped_updates"])
        self.eviction.load(self.sampler.priorities, slot_numbers)

    def _checked_numbers(
        self, value: Any, eviction: str, generation: IntArray, live: npt.NDArray[np.bool_], head: int
    ) -> IntArray:
        """The transitions' numbers per slot a state gives (``eviction="priority"``), or those of
        a fifo state: each live slot's generation, ``-1`` elsewhere."""
        if eviction == "fifo":
            if value is not None:
                raise ValueError(
                    f"state_dict numbers should be None for eviction='fifo', but got {type(value).__name__}"
                )
            return np.where(live, generation, -1)
        numbers = as_state_array(value, "state_dict numbers")
        if numbers.dtype != np.int64 or numbers.shape != (self.capacity,):
            raise ValueError(
                f"state_dict numbers should be int64[{self.capacity}], "
                f"but got {numbers.dtype}{list(numbers.shape)}"
            )
        ok = np.where(live, (numbers >= 0) & (numbers < head), numbers == -1)
        if not ok.all():
            j = int(np.argmin(ok))
            raise ValueError(
                f"state_dict numbers should be in [0, {head}) in live slots and -1 elsewhere, "
                f"but got numbers[{j}]={numbers[j]}"
            )
        if np.unique(numbers[live]).shape[0] != int(live.sum()):
            raise ValueError("state_dict numbers should be distinct in the live slots")
        return numbers
