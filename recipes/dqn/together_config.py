"""The command line of ``python -m recipes.dqn together``, apart from its run: ``--help`` and the
checks of the options read this module without importing torch or Gymnasium."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipes.common import cli
from recipes.dqn.config import ARMS

__all__ = ["DESCRIPTION", "PROG", "parse_command", "parser"]

PROG = "python -m recipes.dqn together"
DESCRIPTION = (
    "Several Double DQN agents of one game trained together in one process: the Atari sweep's engine."
)


def parser() -> argparse.ArgumentParser:
    """The options of ``together``."""
    parser_ = cli.PlainHelpParser(prog=PROG, description=DESCRIPTION)
    parser_.add_argument(
        "--env",
        default="ALE/Pong-v5",
        help="Gymnasium id of the game every agent plays (default: %(default)s)",
    )
    parser_.add_argument(
        "--arms",
        default="uniform,proportional,rank",
        help=f"arms, a comma list among {','.join(ARMS)} (default: %(default)s)",
    )
    parser_.add_argument(
        "--seeds", type=int, default=3, help="agents per arm, seeds 0 .. seeds-1 (default: %(default)s)"
    )
    parser_.add_argument(
        "--protocol",
        default="atari100k",
        help="a file of recipes/dqn/configs/protocols; '' for the family's preset alone "
        "(default: %(default)s)",
    )
    parser_.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field of every agent (YAML value), e.g. --set total_steps=4000 or "
        "--set device=cuda; repeatable (default: none)",
    )
    parser_.add_argument(
        "--progress",
        type=int,
        default=1,
        help="1: show a progress bar of agent steps; 0: none (default: %(default)s)",
    )
    parser_.add_argument(
        "--out", type=Path, required=True, help="JSON file of the agents' scores and curves (required)"
    )
    return parser_


def parse_command(argv: Sequence[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """``together``'s options and the config fields its ``--set`` items override."""
    parser_ = parser()
    args = parser_.parse_args(list(argv))
    try:
        return args, cli.field_overrides(args.set)
    except ValueError as error:
        parser_.error(str(error))
