"""The Ape-X actor's local buffer (Horgan et al. 2018, Algorithm 1, line 7): complete n-step
transitions of the environments an actor steps together, built as they step
(:class:`NStepBuilder`).  Used by ``recipes/apex/run.py``'s actors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FIELDS = ("obs", "action", "reward", "discount", "next_obs")
"""A transition as the memory stores it and ``double_dqn_td_error`` takes it, in that order."""


class NStepBuilder:
    """Complete n-step transitions of ``num_envs`` environments, built as they step.

    Transition ``t`` of an environment, with reward ``r_t`` and per-step discount ``γ_t`` (0 where
    the episode terminated, else γ), leaves as (Sutton & Barto 2018, Sec. 7.1; the sums of
    :mod:`prisample.replay.nstep`)::

        reward   G = Σ_{k<m} (Π_{j<k} γ_{t+j}) r_{t+k}
        discount Γ = Π_{k<m} γ_{t+k}
        next_obs s_{t+m}

    with ``m = n`` once ``n`` steps of its environment followed it, fewer when the episode ended
    first (``episode_end``: every pending transition leaves; termination made Γ = 0, truncation
    kept Γ = γ^m, so it bootstraps from its last observation) or at :meth:`flush`.  Kept here,
    not in :class:`prisample.replay.nstep.NStepAccumulator`, which completes windows of a memory's slots:
    an actor holds no memory and sends each transition once.
    """

    def __init__(self, n: int, num_envs: int) -> None:
        self.n, self.num_envs = n, num_envs
        self._pending: list[list[list[Any]]] = [[] for _ in range(num_envs)]  # [obs, action, G, Γ]
        self._last_next: list[Any] = [None] * num_envs
        self._ready: list[tuple[Any, ...]] = []
        self._origin: list[tuple[int, bool]] = []  # (env, last of its episode) of each ready one

    @property
    def ready(self) -> int:
        """Complete transitions not taken yet."""
        return len(self._ready)

    @property
    def pending(self) -> int:
        """Transitions whose window is still open (at most ``n − 1`` per environment)."""
        return sum(len(p) for p in self._pending)

    def add(
        self,
        env: int,
        obs: Any,
        action: int,
        reward: float,
        discount: float,
        next_obs: Any,
        episode_end: bool,
    ) -> None:
        """One step of environment ``env``: ``(S_t, A_t, r_t, γ_t, S_{t+1})``."""
        pending = self._pending[env]
        for entry in pending:  # G += Γ r_t, Γ *= γ_t for the windows still open
            entry[2] += entry[3] * reward
            entry[3] *= discount
        pending.append([obs, action, float(reward), float(discount)])
        self._last_next[env] = next_obs
        if episode_end:
            self._emit(env, len(pending), episode_end=True)
        elif len(pending) == self.n:
            self._emit(env, 1)

    def flush(self) -> None:
        """Every open window leaves as it is (``m < n``, bootstrapping from the last observation):
        the end of the run."""
        for env in range(self.num_envs):
            self._emit(env, len(self._pending[env]))

    def take(self) -> dict[str, np.ndarray]:
        """The complete transitions as arrays with a leading axis (``FIELDS``); then none is ready."""
        return self.take_with_origin()[0]

    def take_with_origin(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """:meth:`take`, with each transition's environment (int64) and whether it is the last
        of its episode (bool; a flushed window is not): what a memory of frame stacks stores
        per stream."""
        obs, action, reward, discount, next_obs = zip(*self._ready, strict=True)
        envs, ends = (np.asarray(column) for column in zip(*self._origin, strict=True))
        self._ready, self._origin = [], []
        return (
            {
                "obs": np.stack(obs),
                "action": np.asarray(action, dtype=np.int64),
                "reward": np.asarray(reward, dtype=np.float32),
                "discount": np.asarray(discount, dtype=np.float32),
                "next_obs": np.stack(next_obs),
            },
            envs.astype(np.int64),
            ends.astype(bool),
        )

    def _emit(self, env: int, count: int, episode_end: bool = False) -> None:
        pending, next_obs = self._pending[env], self._last_next[env]
        for k, (obs, action, g, gamma) in enumerate(pending[:count]):
            self._ready.append((obs, action, g, gamma, next_obs))
            self._origin.append((env, episode_end and k == count - 1))
        del pending[:count]
