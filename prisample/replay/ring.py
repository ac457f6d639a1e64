"""The ring of a replay memory: which transitions are live, and each slot's per-transition columns.

:class:`Ring` numbers transitions in arrival order and keeps those numbered ``[tail, head)``
live, transition ``t`` in slot ``t % capacity``; per slot its ``action``, ``reward``,
``discount``, ``generation`` (the number of the transition it holds, ``-1`` never written) and
extras as :class:`~prisample.replay.device.Columns` (mirrored on a torch device when there is
one), and per stream whether its last transition ended an episode.  The memory writes and reads
it, its checkpoint saves and restores it, its device reads gather from its mirror.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from prisample.replay.device import Columns

__all__ = ["Ring"]

IntArray = npt.NDArray[np.int64]
ColumnSpec = dict[str, tuple[tuple[int, ...], np.dtype[Any]]]


class Ring:
    """The slots of the last ``capacity`` transitions: the counters ``head`` (transitions added)
    and ``tail`` (transitions evicted), the per-slot columns, the per-stream episode ends.

    ``columns`` names each per-transition column's shape and dtype; ``action``, ``reward``,
    ``discount`` and ``generation`` must be among them, extras are ``extra.<name>``.  Host arrays
    are authoritative; with a ``device`` the columns are mirrored there
    (:meth:`~prisample.replay.device.Columns.sync`).

    >>> import numpy as np
    >>> ring = Ring(4, {"action": ((), np.dtype(np.int64)), "reward": ((), np.dtype(np.float32)),
    ...                 "discount": ((), np.dtype(np.float32)), "generation": ((), np.dtype(np.int64))}, 1)
    >>> len(ring), ring.generation.tolist(), sorted(ring.state_arrays())
    (0, [-1, -1, -1, -1], ['action', 'discount', 'generation', 'reward', 'stream_ended'])
    """

    STATE_ARRAYS = ("action", "reward", "discount", "generation", "stream_ended")
    """The ring's arrays in a memory state (then the extras, ``extra.<name>``); their dtypes and
    shapes are the spec a loaded array must match.  New per-slot arrays join this tuple."""

    action: npt.NDArray[Any]
    reward: npt.NDArray[np.float32]
    discount: npt.NDArray[np.float32]
    generation: IntArray
    extra: dict[str, npt.NDArray[Any]]

    def __init__(
        self, capacity: int, columns: ColumnSpec, num_streams: int, device: torch.device | None = None
    ) -> None:
        self.capacity = capacity
        self.columns = Columns(capacity, columns, device)
        """The per-slot columns (host arrays, and a device mirror with a device)."""
        self.extra_names = tuple(name[len("extra.") :] for name in columns if name.startswith("extra."))
        self._bind()
        self.generation[...] = -1
        self.columns.invalidate()  # a device mirror starts as zeros: the first sync sends every row
        self.stream_ended = np.ones(num_streams, dtype=np.bool_)
        """Per stream: whether its last transition ended an episode (``True`` before any)."""
        self.evicted = np.zeros(capacity + 1, dtype=np.int64)
        """Scratch buffer a write's evicted slots go to (:meth:`evicted_room`)."""
        self.tail = 0
        """Transitions evicted: those numbered ``[tail, head)`` are live."""
        self.head = 0
        """Transitions added: the next one gets this number."""

    def _bind(self) -> None:
        host = self.columns.host
        self.action, self.reward = host["action"], host["reward"]
        self.discount, self.generation = host["discount"], host["generation"]
        self.extra = {name: host[f"extra.{name}"] for name in self.extra_names}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("action", "reward", "discount", "generation", "extra"):
            del state[name]  # views of the columns' arrays: rebound on load
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()

    def __len__(self) -> int:
        return self.head - self.tail

    @property
    def nbytes(self) -> int:
        """Bytes of the columns (a device mirror included), stream ends and scratch buffer."""
        return self.columns.nbytes + self.stream_ended.nbytes + self.evicted.nbytes

    def evicted_room(self, n: int) -> IntArray:
        """The eviction buffer, grown to take a write of ``n`` rows (it evicts at most the live
        transitions and its own rows)."""
        if self.evicted.shape[0] < self.capacity + n:
            self.evicted = np.empty(self.capacity + n, dtype=np.int64)
        return self.evicted

    def live(self, idx: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each slot of ``idx`` (in range) holds a live transition."""
        return np.asarray(self.generation[idx] >= self.tail)

    def state_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The ring's arrays in a memory state, by state name (the live arrays)."""
        arrays: dict[str, npt.NDArray[Any]] = {name: getattr(self, name) for name in self.STATE_ARRAYS}
        arrays.update({f"extra.{name}": column for name, column in self.extra.items()})
        return arrays

    def commit(self, arrays: dict[str, npt.NDArray[Any]], tail: int, head: int) -> None:
        """Assign checked state arrays (every :meth:`state_arrays` name, of its dtype and shape)
        and counters; the device mirror takes every row at its next sync."""
        for name, target in self.state_arrays().items():
            target[...] = arrays[name]
        self.columns.invalidate()
        self.tail, self.head = tail, head
