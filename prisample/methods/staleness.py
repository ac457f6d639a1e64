"""Staleness bonus: priorities that grow with the time since a slot was last replayed (Schaul et
al. 2016, App. A): ``p_i(t) = p_i + c·(t − t_i)``."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, check_positive_int, short_repr
from prisample.methods._checks import check_each, nonnegative
from prisample.methods._slots import FloatArray, IntArray, slot_update

__all__ = ["StalenessBonus"]


class StalenessBonus:
    """Priorities that grow with the time since a slot was last replayed (Schaul et al. 2016, App. A).

    ``p_i(t) = p_i + c · (t − t_i)``: ``p_i`` the priority written when slot ``i`` was last
    replayed (or added), at step ``t_i``; ``t`` the current step; ``c = rate``.  The appendix
    proposes "an explicit staleness bonus that guarantees that every transition is revisited from
    time to time", in "the simple case where this bonus grows linearly with time"; its footnote
    increases the bonus at a target-network update "in proportion to the number of individual
    (low-level) updates that happened in-between" — :meth:`advance` by that number.

    The appendix implements it "at no additional cost by subtracting a quantity proportional to
    the global step-count from the new priority": ``p_i − c·t_i`` orders slots exactly as
    ``p_i(t)`` does at every ``t``, which is all the *rank* distribution needs.  Proportional
    sampling needs the absolute values, and the sampler stores priorities ``>= 0``, so this class
    keeps ``p_i`` and ``t_i`` per slot and :meth:`refresh` returns every tracked slot's current
    ``p_i(t)`` (``O(N)``; call it as often as the bonus should take effect).

    >>> bonus = StalenessBonus(3, rate=0.5)
    >>> bonus.update([0, 1, 2], [1.0, 2.0, 3.0]).tolist()
    [1.0, 2.0, 3.0]
    >>> bonus.advance(4)
    >>> _ = bonus.update([1], [0.5])
    >>> idx, p = bonus.refresh()
    >>> idx.tolist(), p.tolist()
    ([0, 1, 2], [3.0, 0.5, 5.0])
    """

    def __init__(self, capacity: int, rate: float) -> None:
        self.capacity = check_positive_int(capacity, "capacity")
        self.rate = nonnegative(rate, "rate")
        self._step = 0
        self._base = np.full(self.capacity, np.nan)  # NaN: slot not tracked
        self._last = np.zeros(self.capacity, dtype=np.int64)

    @property
    def step(self) -> int:
        """The global step ``t`` (advanced only by :meth:`advance`)."""
        return self._step

    def advance(self, steps: int = 1) -> None:
        """``t ← t + steps``."""
        self._step += check_positive_int(steps, "steps", minimum=0)

    def update(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> FloatArray:
        """Record new priorities of replayed (or added) slots at the current step; returns the
        values to write now (the priorities themselves: the bonus restarts at 0).  Duplicated
        indices: the last value wins, as in ``update_priorities``."""
        idx, values = slot_update(indices, priorities, self.capacity)
        self._base[idx] = values
        self._last[idx] = self._step
        return values.copy()

    def remove(self, indices: npt.ArrayLike) -> None:
        """Stop tracking slots (emptied in the memory)."""
        idx = as_indices(indices, "indices")
        slot_update(idx, np.zeros(idx.shape[0]), self.capacity)
        self._base[idx] = np.nan

    def priorities(self, indices: npt.ArrayLike) -> FloatArray:
        """``p_i + c·(t − t_i)`` of tracked slots."""
        idx = as_indices(indices, "indices")
        slot_update(idx, np.zeros(idx.shape[0]), self.capacity)
        untracked = np.flatnonzero(np.isnan(self._base[idx]))
        if untracked.shape[0]:
            j = int(untracked[0])
            raise ValueError(
                f"indices should be tracked slots, but got indices[{j}]={idx[j]} (never updated)"
            )
        return np.asarray(self._base[idx] + self.rate * (self._step - self._last[idx]), dtype=np.float64)

    def refresh(self) -> tuple[IntArray, FloatArray]:
        """Every tracked slot and its current ``p_i(t)``, for ``sampler.update_priorities``."""
        idx = np.flatnonzero(~np.isnan(self._base)).astype(np.int64)
        return idx, self._base[idx] + self.rate * (self._step - self._last[idx])

    def state_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "rate": self.rate,
            "step": self._step,
            "base": self._base.copy(),
            "last": self._last.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; a malformed state raises and changes nothing."""
        if not isinstance(state, dict) or set(state) != {"capacity", "rate", "step", "base", "last"}:
            raise ValueError(f"state should be a StalenessBonus state_dict, but got {short_repr(state)}")
        if state["capacity"] != self.capacity:
            raise ValueError(
                f"state capacity should be {self.capacity}, but got capacity={state['capacity']!r}"
            )
        rate = nonnegative(state["rate"], "rate")
        step = check_positive_int(state["step"], "step", minimum=0)
        base = np.array(state["base"], dtype=np.float64)
        last = np.array(state["last"])
        if base.shape != (self.capacity,) or last.shape != (self.capacity,) or last.dtype.kind not in "iu":
            raise ValueError("state base and last should be arrays of shape (capacity,), last of integers")
        tracked = ~np.isnan(base)
        check_each(~tracked | ((base >= 0.0) & (base < np.inf)), base, "base", "NaN or finite and >= 0")
        last = last.astype(np.int64)
        check_each(~tracked | ((last >= 0) & (last <= step)), last.astype(np.float64), "last", "in [0, step]")
        self.rate, self._step, self._base, self._last = rate, step, base, last
