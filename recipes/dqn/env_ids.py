"""Environment ids of the Double DQN recipe: their family, their form, and whether the recipe can make them.

Apart from :mod:`recipes.dqn.envs` so that the command line (``python -m recipes.dqn train --help``)
reads them without importing Gymnasium or torch.
"""

from __future__ import annotations

import re
from typing import Literal

from recipes.common import cli

__all__ = ["EnvBackend", "Family", "atari_rom", "check_env", "env_family"]

Family = Literal["atari", "minatar", "classic"]
EnvBackend = Literal["auto", "vector", "gymnasium"]


def env_family(env_id: str) -> Family:
    """``"atari"`` for ``ALE/...`` ids, ``"minatar"`` for ``MinAtar/...``, else ``"classic"``."""
    if env_id.startswith("ALE/"):
        return "atari"
    if env_id.startswith("MinAtar/"):
        return "minatar"
    return "classic"


def check_env(env_id: str) -> None:
    """Raise :class:`~recipes.common.cli.ConfigError` (option ``env``) unless the recipe can make ``env_id``
    and its actions are discrete (DQN picks ``argmax_a Q(s, a)``).  Atari ids are checked for form
    only: making one loads its ROM."""
    family = env_family(env_id)
    if family == "atari":
        cli.require(
            re.fullmatch(r"ALE/[A-Za-z0-9]+-v\d+", env_id) is not None,
            "env",
            "look like 'ALE/Pong-v5'",
            env_id,
        )
        return
    import gymnasium as gym  # here: the command line (--help) imports this module, and no emulator

    if family == "minatar":
        from minatar.gym import register_envs

        if env_id not in gym.registry:
            register_envs()
    cli.require(
        env_id in gym.registry,
        "env",
        "be a Gymnasium id such as CartPole-v1, MinAtar/Breakout-v1 or ALE/Pong-v5",
        env_id,
    )
    if family == "classic":
        env = gym.make(env_id)
        space = env.action_space
        env.close()
        cli.require(
            isinstance(space, gym.spaces.Discrete),
            "env",
            "have discrete actions (DQN takes argmax_a Q)",
            f"{env_id}, whose actions are {space}",
        )


def atari_rom(env_id: str) -> str:
    """ale-py ROM id of an ``ALE/<Game>-v5`` id: ``ALE/SpaceInvaders-v5`` → ``space_invaders``."""
    match = re.fullmatch(r"ALE/([A-Za-z0-9]+)-v\d+", env_id)
    if match is None:
        raise ValueError(f"env should look like 'ALE/Pong-v5', but got env={env_id!r}")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", match.group(1)).lower()
