"""The command line of ``python -m recipes.studies atari-pong`` and its registered protocol, apart
from the runs: ``--help`` and the checks read this module without importing torch or Gymnasium.

The options are parsed with :mod:`argparse` alone: the GPU machine that runs ``next`` has no
jsonargparse.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from recipes.common import cli

__all__ = [
    "PROG",
    "PROTOCOL",
    "RESULTS",
    "MergeConfig",
    "NextConfig",
    "load_protocol",
    "parse_command",
    "planned",
]

PROG = "python -m recipes.studies atari-pong"
PROTOCOL = Path(__file__).parent / "configs" / "atari_pong.yaml"
RESULTS = "docs/results/atari_pong.json"
"""The accumulated results: the runs merged so far, their summary and the protocol."""
COMMANDS = {
    "next": "train the first registered run the results lack (on the GPU machine, one per call).",
    "merge": "add finished runs' JSON files to the results, then write its table and plot (.md, .png).",
}
EPILOG = "Protocol: recipes/studies/configs/atari_pong.yaml; prose: docs/recipes/atari_pong.md."


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    """The registered protocol, as committed."""
    protocol: dict[str, Any] = yaml.safe_load(path.read_text())
    return protocol


def planned(protocol: dict[str, Any]) -> list[tuple[str, int]]:
    """Every registered (arm, seed) in the order the calls train them: seed-major."""
    return [(arm, seed) for seed in protocol["seeds"] for arm in protocol["arms"]]


@dataclass(frozen=True)
class NextConfig:
    """``next``: where the run goes and how long the call may take."""

    results: str = RESULTS
    """The accumulated results (which runs are done); a missing file means none."""
    out: str = "runs/atari_pong"
    """Folder of the run's JSON (atari_pong_<arm>_seed<k>.json, or atari_pong_gate.json when the
    probe is below the gate) and of its run directories (<out>/runs)."""
    time_budget_s: float = 440.0
    """Seconds the whole call may take: the probe, the training and the evaluation."""
    source_commit: str | None = None
    """The commit the tree came from, for a copy without git (the GPU machine's); None: ask git."""
    source_clean: bool = False
    """With source_commit: the caller checked that the tree it sent equals that commit."""
    set: tuple[str, ...] = ()
    """FIELD=VALUE overrides of the run's config (a quick check only: such a run is not registered)."""

    def __post_init__(self) -> None:
        cli.positive(self, "time_budget_s")
        if self.source_commit is not None:
            cli.require(
                len(self.source_commit) == 40 and all(c in "0123456789abcdef" for c in self.source_commit),
                "source_commit",
                "be 40 lowercase hex digits",
                self.source_commit,
            )


@dataclass(frozen=True)
class MergeConfig:
    """``merge``: the run files to add and the results they go into."""

    runs: tuple[str, ...]
    """JSON files written by ``next``."""
    results: str = RESULTS
    """The accumulated results, created when missing; its .md and .png are written beside it."""

    def __post_init__(self) -> None:
        cli.require(len(self.runs) > 0, "runs", "name at least one file", self.runs)


def _truthy(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"should be true or false, but got {text!r}")


def _parser(command: str) -> argparse.ArgumentParser:
    parser = cli.PlainHelpParser(prog=f"{PROG} {command}", description=COMMANDS[command], epilog=EPILOG)
    if command == "next":
        parser.add_argument("--results", default=RESULTS, help="accumulated results (default: %(default)s)")
        parser.add_argument("--out", default=NextConfig.out, help="folder of the run (default: %(default)s)")
        parser.add_argument(
            "--time_budget_s",
            type=float,
            default=NextConfig.time_budget_s,
            help="seconds the call may take, probe and evaluation included (default: %(default)s)",
        )
        parser.add_argument("--source_commit", default=None, help="commit of a tree without git")
        parser.add_argument(
            "--source_clean",
            type=_truthy,
            default=False,
            help="the tree sent equals source_commit (default: %(default)s)",
        )
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="override a config field (a quick check: the run is then not registered)",
        )
    else:
        parser.add_argument("--runs", nargs="+", required=True, help="run JSON files written by next")
        parser.add_argument("--results", default=RESULTS, help="accumulated results (default: %(default)s)")
    return parser


def parse_command(argv: Sequence[str] | None = None) -> NextConfig | MergeConfig:
    """``next|merge [options]``; no command prints the usage."""
    command, options = cli.subcommand(list(argv or []) or ["--help"], COMMANDS, prog=PROG, epilog=EPILOG)
    parser = _parser(command)
    args = parser.parse_args(options)
    with cli.reporting():
        if command == "merge":
            return MergeConfig(tuple(args.runs), args.results)
        try:
            cli.field_overrides(args.set)  # each FIELD=VALUE checked before anything runs
        except ValueError as error:
            parser.error(str(error))
        return NextConfig(
            args.results, args.out, args.time_budget_s, args.source_commit, args.source_clean, tuple(args.set)
        )
