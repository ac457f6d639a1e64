"""Prioritized Sequence Experience Replay (Brittain, Bertram, Yang, Wei 2019, Sec. 3): a slot's
priority passes back along its episode, ``p_{t−k} ← max(p_{t−k}, ρ^k·p_t)`` for ``k = 1..W``."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from prisample._validation import check_positive_int
from prisample.methods._checks import unit
from prisample.methods._slots import (
    FloatArray,
    IntArray,
    base_priorities,
    current_priorities,
    max_combine,
    merge,
    predecessor_map,
    slot_update,
)

__all__ = ["pser_priorities"]


def pser_priorities(
    indices: npt.ArrayLike,
    priorities: npt.ArrayLike,
    predecessors: npt.ArrayLike,
    current: npt.ArrayLike,
    *,
    decay: float,
    window: int,
    eta: float = 0.0,
) -> tuple[IntArray, FloatArray]:
    """Prioritized Sequence Experience Replay (Brittain, Bertram, Yang, Wei 2019, Sec. 3).

    A slot ``t`` given priority ``p_t`` passes a decayed copy back along its episode:
    ``p_{t−k} ← max(p_{t−k}, ρ^k · p_t)`` for ``k = 1..W`` (``ρ = decay``, ``W = window``), so the
    transitions that led to a surprising one are replayed sooner.  The chain follows
    ``predecessors`` (see :func:`~prisample.methods.predecessor.ring_predecessors`) and stops at
    the episode's start.

    ``eta`` ``η`` keeps a replayed slot from dropping below ``η`` times its old priority:
    ``p_t = max(p_new, η · p_old)``, PSER's guard against a propagated priority being wiped at the
    slot's next replay ("priority collapse"); ``η = 0`` writes ``p_new`` as is.

    ``p_{t−k}`` is the slot's new priority if it was replayed in this call, else ``current``
    (the sampler's ``priorities``); several contributions to one slot combine by ``max``.
    Returns ``(slots, priorities)`` to write, sorted.

    >>> idx, p = pser_priorities([3], [8.0], [-1, 0, 1, 2], [1.0, 1.0, 3.0, 1.0], decay=0.5, window=2)
    >>> idx.tolist(), p.tolist()
    ([1, 2, 3], [2.0, 4.0, 8.0])
    """
    pred = predecessor_map(predecessors)
    capacity = pred.shape[0]
    idx, values = slot_update(indices, priorities, capacity)
    now = current_priorities(current, capacity)
    rho = unit(decay, "decay")
    width = check_positive_int(window, "window", minimum=0)
    floor = unit(eta, "eta")
    old = now[idx]
    fresh = np.where(np.isnan(old), values, np.maximum(values, floor * np.nan_to_num(old)))
    own = max_combine(idx, fresh)
    slots: list[IntArray] = []
    passed: list[FloatArray] = []
    node, amount = idx.copy(), fresh.copy()
    for _ in range(width):
        node = np.where(node >= 0, pred[np.maximum(node, 0)], -1)
        amount = amount * rho
        alive = node >= 0
        alive[alive] = ~np.isnan(now[node[alive]])
        node = np.where(alive, node, -1)
        if not alive.any():
            break
        slots.append(node[alive])
        passed.append(amount[alive])
    if not slots:
        return own
    targets, value = max_combine(np.concatenate(slots), np.concatenate(passed))
    return merge(own, (targets, np.maximum(base_priorities(targets, own, now), value)))
