"""Double DQN with uniform, proportional and rank-based prioritized replay (Algorithm 1, Sec. 4).

``python -m recipes.dqn`` with no arguments lists its commands; ``<command> --help`` lists
a command's options."""

from __future__ import annotations

from recipes.common.cli import Command

__all__ = ["COMMANDS", "DEFAULT", "DESCRIPTION"]

DESCRIPTION = "Double DQN with uniform, proportional and rank-based prioritized replay (Algorithm 1, Sec. 4)."
DEFAULT = "train"
"""The command a line opening with an option runs (the recipe's command line before it had several)."""
COMMANDS = (
    Command(
        "train",
        "one agent of one arm on one environment (Atari, MinAtar or classic control)",
        "recipes.dqn.run:main",
        parser="recipes.dqn.config:parse_command",
    ),
    Command(
        "together",
        "several agents of one game trained together in one process (the Atari sweep's engine)",
        "recipes.dqn.together:main",
        parser="recipes.dqn.together_config:parse_command",
    ),
    Command(
        "sweep",
        "every arm x seed [x grid point] of one environment, with its table and plot",
        "recipes.dqn.sweep:main",
        takes_name=True,
        parser="recipes.dqn.sweep_config:parse_command",
    ),
    Command(
        "plot",
        "re-draw a sweep's PNG from its JSON",
        "recipes.dqn.sweep:main",
        takes_name=True,
        parser="recipes.dqn.sweep_config:parse_command",
    ),
    Command(
        "atari-sweep",
        "several Atari games, one 'together' process each, and their aggregates",
        "recipes.dqn.atari_sweep:main",
    ),
    Command(
        "stats",
        "human-normalised aggregates (IQM, bootstrap intervals) of an Atari sweep's JSON",
        "recipes.dqn.stats:main",
    ),
)
