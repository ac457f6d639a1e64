"""The tour: what prioritized sampling draws, its weights, a DataLoader and a replay loop.

``python -m recipes.demo`` with no arguments lists its commands; ``<command> --help`` lists
a command's options."""

from __future__ import annotations

from recipes.common.cli import Command

__all__ = ["COMMANDS", "DEFAULT", "DESCRIPTION"]

DESCRIPTION = "The tour: what prioritized sampling draws, its weights, a DataLoader and a replay loop."
DEFAULT = None
"""Every command line names its command."""
COMMANDS = (
    Command(
        "tour",
        "P(i) against p_i^α, the weights w_i, a prioritized DataLoader and a replay loop (make demo)",
        "recipes.demo.tour:command",
        parser="recipes.demo.config:parse_command",
    ),
)
