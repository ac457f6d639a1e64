"""The recipe's partially observable tasks: CartPole-v1 with the velocities hidden, and the T-maze.

* ``MaskedCartPole-v1``: CartPole-v1 whose observation is the cart position and the pole angle only
  (the velocities, indices 1 and 3, dropped), the partially observable CartPole of the recurrent-RL
  literature (e.g. Meng et al. 2021; Morad et al. 2023, POPGym's "Stateless CartPole"): a
  memoryless policy cannot tell which way the pole moves.
* ``TMaze``: Bakker (2002, "Reinforcement Learning with Long Short-Term Memory", NeurIPS), Fig. 2.
  A corridor of ``length`` cells; at the start the agent sees a cue (up or down, drawn per episode),
  then only "corridor" until the junction at the end, where it must turn the way the cue said.
  Observations (Bakker's): start ``[0,1,1]`` (cue up) or ``[1,1,0]`` (cue down), corridor
  ``[1,0,1]``, junction ``[0,1,0]``.  Actions: 0 north, 1 east, 2 south, 3 west.  At the junction
  north/south end the episode: +4 the cued way, −0.1 the other.  A move into a wall leaves the agent
  in place with −0.1 (Bakker's rule); other moves 0.  Episodes are truncated after ``max_steps``
  (default ``4·(length + 1)``).  Memory must span ``length`` steps.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["TASKS", "MaskedCartPole", "TMaze", "make_task"]

CUE_UP, CUE_DOWN = np.array([0, 1, 1], np.float32), np.array([1, 1, 0], np.float32)
CORRIDOR, JUNCTION = np.array([1, 0, 1], np.float32), np.array([0, 1, 0], np.float32)
NORTH, EAST, SOUTH, WEST = range(4)
REWARD_RIGHT, REWARD_WRONG, REWARD_WALL = 4.0, -0.1, -0.1


class MaskedCartPole(gym.ObservationWrapper[np.ndarray, int, np.ndarray]):
    """CartPole-v1 observing ``(x, θ)``: the cart velocity and pole angular velocity are dropped."""

    KEPT = (0, 2)

    def __init__(self, env: gym.Env[np.ndarray, int] | None = None) -> None:
        super().__init__(env if env is not None else gym.make("CartPole-v1"))
        inner = self.env.observation_space
        assert isinstance(inner, gym.spaces.Box)
        kept = list(self.KEPT)
        self.observation_space = gym.spaces.Box(inner.low[kept], inner.high[kept], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation[list(self.KEPT)], dtype=np.float32)


class TMaze(gym.Env[np.ndarray, int]):
    """Bakker's T-maze with a corridor of ``length`` cells (see the module)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  # gymnasium declares it so

    def __init__(self, length: int = 10, max_steps: int | None = None) -> None:
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"length should be an int >= 1, but got length={length!r}")
        if max_steps is not None and max_steps < length + 1:
            raise ValueError(
                f"max_steps should be >= length + 1 = {length + 1}, but got max_steps={max_steps}"
            )
        self.length = length
        self.max_steps = 4 * (length + 1) if max_steps is None else max_steps
        self.observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(4)  # type: ignore[assignment]
        self.position, self.cue_up, self.steps = 0, True, 0

    def _obs(self) -> np.ndarray:
        if self.position == 0:
            return (CUE_UP if self.cue_up else CUE_DOWN).copy()
        return (JUNCTION if self.position == self.length else CORRIDOR).copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.position, self.steps = 0, 0
        self.cue_up = bool(self.np_random.integers(2))
        return self._obs(), {"cue_up": self.cue_up}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action should be one of 0, 1, 2, 3, but got action={action!r}")
        self.steps += 1
        reward, terminated = 0.0, False
        if self.position == self.length and action in (NORTH, SOUTH):
            terminated = True
            reward = REWARD_RIGHT if (action == NORTH) == self.cue_up else REWARD_WRONG
        elif action == EAST and self.position < self.length:
            self.position += 1
        elif action == WEST and self.position > 0:
            self.position -= 1
        else:
            reward = REWARD_WALL
        truncated = not terminated and self.steps >= self.max_steps
        return self._obs(), reward, terminated, truncated, {"cue_up": self.cue_up}


def _masked_cartpole(**_: Any) -> gym.Env[np.ndarray, int]:
    return MaskedCartPole()


def _tmaze(**options: Any) -> gym.Env[np.ndarray, int]:
    return TMaze(**options)


TASKS = {"MaskedCartPole-v1": _masked_cartpole, "TMaze": _tmaze}
"""The CPU tasks by name; ``ALE/<Game>-v5`` goes through the Double DQN recipe's Atari env."""


def make_task(task: str, num_envs: int, options: dict[str, Any] | None = None) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``task`` in a synchronous vector env with same-step autoreset (the
    observation after an episode end is the next episode's first; the last one is in
    ``infos["final_obs"]``), so that an actor zeroes its state right there."""
    if task not in TASKS:
        raise ValueError(f"task should be one of {', '.join(TASKS)}, but got task={task!r}")
    make = TASKS[task]
    return gym.vector.SyncVectorEnv(
        [lambda: make(**(options or {})) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
