"""The typed batch a replay memory returns: transitions as arrays, also readable by key.

:class:`BatchMapping` is the read-only mapping view every batch dataclass of the package shares
(:class:`ReplayBatch` here, :class:`prisample.ray.RemoteBatch`): its named fields, then its extras."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

__all__ = ["FIELDS", "BatchMapping", "Obs", "ReplayBatch"]


FIELDS = ("obs", "action", "reward", "discount", "next_obs", "generation")

# An observation batch: an array, or a dict name -> array for dict observations.
Obs = Any


class BatchMapping(Mapping[str, Any]):
    """A batch dataclass read as a mapping: ``batch[key]`` is the attribute ``key`` for a key of
    ``mapped_fields`` or ``readable_fields``, else ``batch.extras[key]``; iteration yields
    ``mapped_fields`` then the extras' names, and ``len`` counts those.  ``readable_fields`` are
    readable by key without being keys (a batch's bookkeeping: its weights, slots, shards).

    A subclass sets the two class variables and has an ``extras`` dict of per-transition arrays."""

    mapped_fields: ClassVar[tuple[str, ...]]
    """The fields that are the mapping's keys, in order, before the extras."""
    readable_fields: ClassVar[tuple[str, ...]] = ()
    """Fields ``batch[key]`` also reads that are not keys (neither iterated nor counted)."""
    extras: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        if key in self.mapped_fields or key in self.readable_fields:
            return getattr(self, key)
        try:
            return self.extras[key]
        except KeyError:
            raise KeyError(f"batch has no field or extra {key!r}; it has {list(self)}") from None

    def __iter__(self) -> Iterator[str]:
        yield from self.mapped_fields
        yield from self.extras

    def __len__(self) -> int:
        return len(self.mapped_fields) + len(self.extras)


@dataclass(frozen=True, eq=False)
class ReplayBatch(BatchMapping):
    """``k`` transitions ``(s_t, a_t, r, γ, s')`` read from a replay memory: numpy arrays, or torch
    tensors on the memory's ``device``.

    With ``n_step = n`` the reward and discount are the window's (``Σ_{k<m} (Π_{j<k} γ_{t+j})
    r_{t+k}`` and ``Π_{k<m} γ_{t+k}``) and ``next_obs`` is ``s_{t+m}``; with ``n = 1`` they are
    the transition's own ``r_t``, ``γ_t``, ``s_{t+1}``.  ``obs``/``next_obs`` are arrays, or dicts
    of arrays for dict observations; they may be views of one array, so write to copies.

    Also a read-only mapping for code written against dict batches: ``batch["obs"]``, and
    ``batch["log_prob"]`` for an extra, iterate the fields then the extras.

    >>> import numpy as np
    >>> b = ReplayBatch(np.zeros((1, 2)), np.zeros(1, np.int64), np.ones(1, np.float32),
    ...                 np.ones(1, np.float32), np.zeros((1, 2)), np.zeros(1, np.int64),
    ...                 {"log_prob": np.zeros(1, np.float32)})
    >>> b.reward is b["reward"], list(b)
    (True, ['obs', 'action', 'reward', 'discount', 'next_obs', 'generation', 'log_prob'])
    """

    obs: Obs
    """``s_t``: ``(k, frame_stack, *obs_shape)``, ``(k, *obs_shape)`` for ``frame_stack = 1``."""
    action: npt.NDArray[Any]
    """``a_t``: ``(k, *action_shape)``."""
    reward: npt.NDArray[np.float32]
    """The (n-step) reward, float32."""
    discount: npt.NDArray[np.float32]
    """The (n-step) discount ``Γ``, float32: the target is ``reward + discount · V(next_obs)``."""
    next_obs: Obs
    """``s_{t+m}``, like ``obs``."""
    generation: npt.NDArray[np.int64]
    """Number of each start transition (int64): pass to ``update_priorities(generations=...)``."""
    extras: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    """Per-transition extras by name (the start transition's), ``(k, *shape)`` each."""
    weights: Any = None
    """Importance weights (float32, ``(k,)``) when the batch comes from a prioritized draw, in the
    batch's kind (numpy, or a tensor on the memory's device); ``None`` otherwise.  Not a mapping
    key (``draw.weights`` holds the same values on the host)."""

    mapped_fields: ClassVar[tuple[str, ...]] = FIELDS

    @classmethod
    def from_columns(
        cls, columns: Mapping[str, Any], obs: Obs, next_obs: Obs, extras: tuple[str, ...], weights: Any = None
    ) -> ReplayBatch:
        """The batch of a read that gathered a memory's per-slot ``columns`` (``action``,
        ``reward``, ``discount``, ``generation``, ``extra.<name>`` for each name of ``extras``) and
        its observations."""
        return cls(
            obs,
            columns["action"],
            columns["reward"],
            columns["discount"],
            next_obs,
            columns["generation"],
            {name: columns[f"extra.{name}"] for name in extras},
            weights=weights,
        )
