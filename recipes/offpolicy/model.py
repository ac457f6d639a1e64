"""The off-policy recipe's environments as tabular models (``recipes/offpolicy/experiment.py``): Gymnasium's
``P`` as arrays, and the exact values that the replayed TD(0) is measured against: Q* by value
iteration, V^π of a policy by a linear solve, the state aggregation of the linear representation.
:func:`env_stepper` steps the environment itself from any state, for the exploring starts that
fill the replay memories."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

Representation = Literal["tabular", "linear"]
ENV_KWARGS: dict[str, dict[str, Any]] = {
    "FrozenLake-v1": {"map_name": "8x8", "is_slippery": True},
    "CliffWalking-v1": {},
}
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Model:
    """A finite MDP in the toy-text ``P[s][a] = [(prob, s', r, terminated), ...]`` form, as arrays.

    ``T[s, a, s']`` holds the probability of moving to ``s'`` *without* terminating, ``R[s, a]``
    the expected reward, so terminal transitions bootstrap from nothing.
    """

    T: FloatArray
    R: FloatArray
    initial: FloatArray
    """Initial-state distribution."""
    grid: tuple[int, int]
    """(rows, columns) of the grid the states number row by row."""

    @property
    def n_states(self) -> int:
        return int(self.T.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.T.shape[1])

    @classmethod
    def from_transitions(
        cls,
        P: dict[int, dict[int, list[tuple[float, int, float, bool]]]],
        initial: npt.ArrayLike,
        grid: tuple[int, int],
    ) -> Model:
        n_states, n_actions = len(P), len(P[0])
        T = np.zeros((n_states, n_actions, n_states))
        R = np.zeros((n_states, n_actions))
        for s in range(n_states):
            for a in range(n_actions):
                for prob, nxt, reward, terminated in P[s][a]:
                    R[s, a] += prob * reward
                    if not terminated:
                        T[s, a, int(nxt)] += prob
        return cls(T, R, np.asarray(initial, dtype=np.float64), grid)

    def occupied(self) -> IntArray:
        """States an episode can be in: reachable from the initial states by non-terminal moves."""
        seen = self.initial > 0
        frontier = seen.copy()
        while frontier.any():
            nxt = (self.T[frontier].sum(axis=(0, 1)) > 0) & ~seen
            seen |= nxt
            frontier = nxt
        return np.flatnonzero(seen).astype(np.int64)


def make_env(name: str) -> Any:
    """The raw toy-text environment (no wrappers: episodes are cut by the recipe)."""
    import gymnasium as gym

    return gym.make(name, **ENV_KWARGS.get(name, {})).unwrapped


Step = Callable[[int, int], tuple[int, float, bool]]


def env_stepper(env: Any, seed: int) -> Step:
    """``(s, a) -> (s', r, terminated)`` through the environment's own ``step`` from state ``s``."""
    env.reset(seed=seed)

    def step(s: int, a: int) -> tuple[int, float, bool]:
        env.s = s  # exploring starts: put the agent where the memory needs it
        nxt, reward, terminated, _, _ = env.step(a)
        return int(nxt), float(reward), bool(terminated)

    return step


def model_of(env: Any) -> Model:
    grid = (env.nrow, env.ncol) if hasattr(env, "nrow") else tuple(env.shape)
    return Model.from_transitions(env.P, env.initial_state_distrib, (int(grid[0]), int(grid[1])))


def optimal_q(model: Model, gamma: float, tol: float = 1e-12) -> FloatArray:
    """Q* by value iteration, ``Q ← R + γ T max_a Q``, to a sup-norm change below ``tol``."""
    q = np.zeros((model.n_states, model.n_actions))
    while True:
        new: FloatArray = model.R + gamma * model.T @ q.max(axis=1)
        if np.abs(new - q).max() < tol:
            return new
        q = new


def epsilon_greedy(q: FloatArray, epsilon: float) -> FloatArray:
    """``π(a|s) = 1 - ε + ε/|A|`` for the first maximising action, ``ε/|A|`` for the others."""
    n_actions = q.shape[1]
    policy = np.full(q.shape, epsilon / n_actions)
    policy[np.arange(q.shape[0]), q.argmax(axis=1)] += 1.0 - epsilon
    return policy


def policy_values(model: Model, policy: FloatArray, gamma: float) -> tuple[FloatArray, FloatArray]:
    """Exact ``V^π`` from ``(I - γ P_π) v = r_π`` and ``Q^π = R + γ T V^π``."""
    p_pi = np.einsum("sa,sat->st", policy, model.T)
    r_pi = np.einsum("sa,sa->s", policy, model.R)
    v = np.linalg.solve(np.eye(model.n_states) - gamma * p_pi, r_pi)
    return v, model.R + gamma * model.T @ v


def aggregation(model: Model, representation: Representation, block: int) -> IntArray:
    """Group of each state: itself (tabular), or its ``block`` x ``block`` cell of the grid (linear)."""
    if representation == "tabular":
        return np.arange(model.n_states, dtype=np.int64)
    cols = model.grid[1]
    r, c = np.divmod(np.arange(model.n_states), cols)
    groups: IntArray = ((r // block) * (-(-cols // block)) + c // block).astype(np.int64)
    return groups
