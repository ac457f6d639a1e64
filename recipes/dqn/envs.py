"""Environments, evaluation and Atari scores for the Double DQN recipe (``recipes/dqn/``).

Every environment is a Gymnasium vector environment with next-step autoreset: after a step that
ends an episode, the next ``step`` of that sub-environment ignores its action and returns the first
observation of a new episode.  Three families:

* Atari (``ALE/<Game>-v5``): the DQN preprocessing of Mnih et al. (2015) — 4 frames of action
  repeat with a max over the last two, 84×84 greyscale, a stack of the last 4 frames, up to 30
  no-op actions at the start of each episode, the minimal action set, no sticky actions (the
  paper's 2016 setting; ``repeat_action_probability`` sets them, as Dopamine's protocol has them).
  ``backend="vector"`` is ale-py's ``AtariVectorEnv`` (C++ threads),
  ``"gymnasium"`` is ``AtariPreprocessing`` + ``FrameStackObservation`` in a ``SyncVectorEnv``;
  the two apply the same preprocessing.
* MinAtar (``MinAtar/<Game>-v1``, Young & Tian 2019): 10×10×C boolean observations.
* Any other Gymnasium id (``CartPole-v1``): the environment as registered.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from recipes.dqn.env_ids import (  # their home before recipes/dqn/env_ids.py, still importable from here
    EnvBackend as EnvBackend,
)
from recipes.dqn.env_ids import (
    Family as Family,
)
from recipes.dqn.env_ids import (
    atari_rom as atari_rom,
)
from recipes.dqn.env_ids import (
    check_env as check_env,
)
from recipes.dqn.env_ids import (
    env_family as env_family,
)

SCORES_CSV = Path(__file__).with_name("data") / "atari_scores.csv"


@dataclass(frozen=True)
class EnvSpec:
    """What the agent needs to know about an environment."""

    obs_shape: tuple[int, ...]
    """Shape of one observation as the vector environment returns it (a stack for Atari)."""
    frame_stack: int
    """Frames per observation stack (4 for Atari, else 1)."""
    obs_dtype: type
    """dtype the replay memory stores observations in."""
    num_actions: int


def make_env(
    env_id: str,
    num_envs: int,
    *,
    backend: EnvBackend = "auto",
    noop_max: int = 30,
    threads: int = 1,
    max_episode_frames: int = 108_000,
    repeat_action_probability: float = 0.0,
) -> tuple[gym.vector.VectorEnv, EnvSpec]:
    """A vector environment of ``num_envs`` copies and its :class:`EnvSpec`.

    Atari episodes are capped at ``max_episode_frames`` emulator frames (30 minutes of play, as
    in the DQN evaluations); rewards are returned unclipped (the agent clips them for learning).
    ``repeat_action_probability`` > 0 makes Atari's actions sticky (Machado et al. 2018).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs should be >= 1, but got num_envs={num_envs}")
    family = env_family(env_id)
    if not 0.0 <= repeat_action_probability < 1.0 or (repeat_action_probability and family != "atari"):
        raise ValueError(
            "repeat_action_probability should be in [0, 1), and 0 unless the game is Atari, but got "
            f"repeat_action_probability={repeat_action_probability!r} for env_id={env_id!r}"
        )
    if family == "atari":
        if backend in ("auto", "vector"):
            from ale_py.vector_env import AtariVectorEnv

            env: gym.vector.VectorEnv = AtariVectorEnv(
                atari_rom(env_id),
                num_envs,
                num_threads=threads,
                repeat_action_probability=repeat_action_probability,
                noop_max=noop_max,
                reward_clipping=False,
                episodic_life=False,
                max_num_frames_per_episode=max_episode_frames,
            )
        else:
            env = gym.vector.SyncVectorEnv(
                [
                    lambda: _gymnasium_atari(env_id, noop_max, max_episode_frames, repeat_action_probability)
                    for _ in range(num_envs)
                ],
                autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
            )
        spec = EnvSpec((4, 84, 84), 4, np.uint8, int(env.single_action_space.n))  # type: ignore[attr-defined]
        return env, spec
    if family == "minatar":
        from minatar.gym import register_envs

        if env_id not in gym.registry:
            register_envs()
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    space = env.single_observation_space
    assert space.shape is not None
    dtype: type = np.uint8 if space.dtype in (np.bool_, np.uint8) else np.float32
    return env, EnvSpec(tuple(space.shape), 1, dtype, int(env.single_action_space.n))  # type: ignore[attr-defined]


def _gymnasium_atari(
    env_id: str, noop_max: int, max_episode_frames: int, repeat_action_probability: float = 0.0
) -> gym.Env[Any, Any]:
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(
        env_id,
        frameskip=1,
        repeat_action_probability=repeat_action_probability,
        full_action_space=False,
        max_num_frames_per_episode=max_episode_frames,
    )
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=4, screen_size=84)
    return gym.wrappers.FrameStackObservation(env, 4)


class SendRecv:
    """``send(actions)`` / ``recv()`` over a vector environment: ALE's own (the emulators run on
    their threads in between), or a plain ``step`` at ``recv`` for other vector environments."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.native = hasattr(env, "send") and hasattr(env, "recv")
        self._actions: np.ndarray | None = None

    def send(self, actions: np.ndarray) -> None:
        if self.native:
            self.env.send(actions)
        else:
            self._actions = actions

    def recv(self) -> tuple[Any, ...]:
        if self.native:
            return tuple(self.env.recv())
        assert self._actions is not None
        return tuple(self.env.step(self._actions))


def seed_envs(env: gym.vector.VectorEnv, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    """Reset every sub-environment, seeding them ``seed, seed + 1, ...``."""
    return env.reset(seed=seed)


def reset_with_seeds(env: gym.vector.VectorEnv, seeds: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Reset every sub-environment: ALE's vector env (the one with ``send``) seeds environment ``e``
    with ``seeds[e]``; another vector env takes ``seeds[0]`` and seeds the others ``seeds[0] + 1, ...``."""
    if hasattr(env, "send"):
        reset: Callable[..., tuple[np.ndarray, dict[str, Any]]] = env.reset  # ALE's takes an array of seeds
        return reset(seed=seeds)
    return env.reset(seed=int(seeds[0]))


def lives(info: dict[str, Any], num_envs: int) -> npt.NDArray[np.int64]:
    """Lives left per sub-environment (zeros where the game has none or reports none)."""
    value = info.get("lives")
    if value is None:
        return np.zeros(num_envs, dtype=np.int64)
    return np.asarray(value, dtype=np.int64).reshape(num_envs)


# -- evaluation ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """Result of one evaluation: the mean return of the episodes it completed (NaN if none did)."""

    score: float
    episodes: int
    steps: int


@torch.no_grad()
def evaluate(
    q: torch.nn.Module,
    env: gym.vector.VectorEnv,
    *,
    epsilon: float,
    max_steps: int,
    max_episodes: int,
    rng: np.random.Generator,
    device: torch.device,
    seed: int,
) -> Evaluation:
    """The paper's "test" evaluation (App. B.2.3): ε-greedy play from fresh episodes.

    Runs the sub-environments in parallel from a reset (Atari: up to 30 no-op starts) with
    ``ε``-greedy actions for at most ``max_steps`` agent steps in total (the paper: 500,000
    frames = 125,000 steps) or ``max_episodes`` completed episodes, and returns the mean
    undiscounted, unclipped return of the completed episodes.  When none completes within the
    budget the score is NaN: the return of an unfinished episode is not a score (an untrained Pong
    agent's first 500 steps used to count as a normalised score of 0.48).
    """
    obs, _ = seed_envs(env, seed)
    n = env.num_envs
    running = np.zeros(n)
    returns: list[float] = []
    fresh = np.zeros(n, dtype=bool)  # next-step autoreset: this step of that env is a reset
    steps = 0
    while steps < max_steps and len(returns) < max_episodes:
        actions = q(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()
        explore = rng.random(n) < epsilon
        actions = np.where(explore, rng.integers(0, env.single_action_space.n, n), actions)  # type: ignore[attr-defined]
        obs, reward, terminated, truncated, _ = env.step(actions.astype(np.int64))
        steps += n
        running += np.where(fresh, 0.0, np.asarray(reward, dtype=np.float64))
        done = (np.asarray(terminated) | np.asarray(truncated)) & ~fresh
        for i in np.flatnonzero(done):
            returns.append(float(running[i]))
            running[i] = 0.0
        fresh = done
    score = float(np.mean(returns[:max_episodes])) if returns else math.nan
    return Evaluation(score, len(returns), steps)


# -- normalised Atari scores -------------------------------------------------------------------------


def load_atari_scores(path: Path = SCORES_CSV) -> dict[str, dict[str, float | str]]:
    """The paper's per-game table (last table of Schaul et al. 2016), keyed by ale-py ROM id.

    Numbers are floats; a score the paper does not report is ``nan``.
    """
    rows: dict[str, dict[str, float | str]] = {}
    with path.open() as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            entry: dict[str, float | str] = {"game": row["game"]}
            for key, value in row.items():
                if key not in ("game", "rom"):
                    entry[key] = float(value) if value else math.nan
            rows[row["rom"]] = entry
    return rows


def normalized_score(agent: float | Sequence[float], random: float, human: float) -> float | np.ndarray:
    """``(agent − random) / |human − random|`` (Schaul et al. 2016, App. B.2.3; van Hasselt et al. 2016).

    The absolute value matters only where random beats human (Video Pinball).
    """
    gap = abs(human - random)
    if gap == 0:
        raise ValueError(f"human and random scores should differ, but got human={human}, random={random}")
    if isinstance(agent, (int, float)):
        return (float(agent) - random) / gap
    return (np.asarray(agent, dtype=np.float64) - random) / gap
