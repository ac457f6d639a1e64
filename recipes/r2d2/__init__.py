"""R2D2: recurrent Double DQN over prioritized sequence replay (Kapturowski et al. 2019).

``python -m recipes.r2d2`` with no arguments lists its commands; ``<command> --help`` lists a
command's options."""

from __future__ import annotations

from recipes.common.cli import Command

__all__ = ["COMMANDS", "DESCRIPTION"]

DESCRIPTION = (
    "R2D2: recurrent Double DQN (LSTM, stored state and burn-in, n-step targets, value rescaling) "
    "over prisample's prioritized sequence replay."
)
COMMANDS = (
    Command(
        "train",
        "one agent on one task (MaskedCartPole-v1, TMaze; configs/atari.yaml for a GPU)",
        "recipes.r2d2.train:main",
        parser="recipes.r2d2.config:parse_command",
    ),
    Command(
        "study",
        "the registered comparison: run its (task, arm, seed) runs, resumable; write docs/results/r2d2_*",
        "recipes.r2d2.study:main",
    ),
)
