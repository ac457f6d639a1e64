"""Off-policy evaluation from replay with importance ratios in the sampler (Sec. 6).

``python -m recipes.offpolicy`` with no arguments lists its commands; ``<command> --help`` lists
a command's options."""

from __future__ import annotations

from recipes.common.cli import Command

__all__ = ["COMMANDS", "DEFAULT", "DESCRIPTION"]

DESCRIPTION = "Off-policy evaluation from replay with importance ratios in the sampler (Sec. 6)."
DEFAULT = "run"
"""The command a line opening with an option runs (the recipe's command line before it had several)."""
COMMANDS = (
    Command(
        "run",
        "the experiment: seven ways to draw and weight the minibatch; table, JSON and plots",
        "recipes.offpolicy.experiment:command",
        parser="recipes.offpolicy.config:parse_command",
    ),
)
