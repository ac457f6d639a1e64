"""Ape-X: distributed prioritized replay with actors and a learner on Ray (Horgan et al. 2018).

``python -m recipes.apex`` with no arguments lists its commands; ``<command> --help`` lists
a command's options."""

from __future__ import annotations

from recipes.common.cli import Command

__all__ = ["COMMANDS", "DEFAULT", "DESCRIPTION"]

DESCRIPTION = "Ape-X: distributed prioritized replay with actors and a learner on Ray (Horgan et al. 2018)."
DEFAULT = None
"""Every command line names its command."""
COMMANDS = (
    Command(
        "train",
        "one Ape-X run: actors, the replay as Ray actors, one learner",
        "recipes.apex.run:main",
        takes_name=True,
        parser="recipes.apex.config:parse_command",
    ),
    Command(
        "scaling",
        "throughput against the number of actors",
        "recipes.apex.studies:main",
        takes_name=True,
        parser="recipes.apex.study_config:parse_study",
    ),
    Command(
        "compare",
        "learning against one process (Ape-X and the single-agent loop)",
        "recipes.apex.studies:main",
        takes_name=True,
        parser="recipes.apex.study_config:parse_study",
    ),
    Command(
        "ablate",
        "why Ape-X learns worse: its differences from one process removed one at a time",
        "recipes.apex.ablate:main",
        parser="recipes.apex.ablate_config:parse_command",
    ),
    Command(
        "actor-learner",
        "actor threads and a learner sharing one replay in one process",
        "recipes.apex.actor_learner:command",
        parser="recipes.apex.actor_learner_config:parse_command",
    ),
)
