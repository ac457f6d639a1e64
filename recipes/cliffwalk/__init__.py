"""Blind Cliffwalk: updates to learn the values, uniform against prioritized replay (Sec. 3.1, Fig. 1).

``python -m recipes.cliffwalk`` with no arguments lists its commands; ``<command> --help`` lists
a command's options."""

from __future__ import annotations

from recipes.common.cli import Command

__all__ = ["COMMANDS", "DEFAULT", "DESCRIPTION"]

DESCRIPTION = (
    "Blind Cliffwalk: updates to learn the values, uniform against prioritized replay (Sec. 3.1, Fig. 1)."
)
DEFAULT = "run"
"""The command a line opening with an option runs (the recipe's command line before it had several)."""
COMMANDS = (
    Command(
        "run",
        "the experiment: every agent, representation and size; table, JSON and plots",
        "recipes.cliffwalk.experiment:command",
        parser="recipes.cliffwalk.config:parse_command",
    ),
)
