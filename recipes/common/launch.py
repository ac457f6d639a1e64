"""Before a recipe starts a run: say what will run, how long it should take, and how to run a short one.

A recipe command that can run for hours builds a :class:`RunPlan` from its parsed options and calls
:func:`confirm` before it creates anything.  The plan prints three lines on stderr::

    python -m recipes.dqn train: Double DQN, arm proportional, on ALE/Pong-v5 (device cpu), <steps> agent
    steps, writing runs/atari_ddqn/ALE_Pong-v5/proportional/seed0
    estimated time: about <time> at <rate> agent steps/s, measured for this configuration in <JSON> (<what>)
    a short run: --total_steps 100000, or --env CartPole-v1 (the quickest environment); --yes starts
    without asking

The estimate is ``steps / rate`` (capped by a time budget when the run has one), where ``rate`` is a
throughput a committed JSON recorded (:class:`Measured`, each naming its file): the one measured for
the run's configuration when there is one; otherwise the fastest the recipe was measured at anywhere,
which gives a lower bound ("at least"); with no measurement at all, "unknown".  When stdin is a
terminal and the estimate exceeds :data:`ASK_ABOVE_S`, :func:`confirm` asks ``y/N`` (default no) and
a "no" ends the process (status 1) before anything is written; off a terminal (CI, scripts) it goes
on after the summary.  ``--yes`` (:func:`take_yes`) skips the question.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "ASK_ABOVE_S",
    "ROOT",
    "Measured",
    "RunPlan",
    "confirm",
    "duration",
    "measured",
    "recorded_config",
    "take_yes",
]

ASK_ABOVE_S = 3600.0
"""A run estimated to take longer than this (seconds) asks before it starts, on a terminal."""
ROOT = Path(__file__).resolve().parents[2]
"""The repository root: :class:`Measured` paths are relative to it."""
YES = "--yes"


@dataclass(frozen=True)
class Measured:
    """A throughput a committed JSON recorded: ``steps_per_s`` of the configuration ``label`` names,
    read from ``path`` (relative to the repository root)."""

    steps_per_s: float
    path: str
    label: str

    def cited(self) -> str:
        return f"{self.path} ({self.label})"


def measured(path: str, label: str, read: Callable[[Any], float | Sequence[float]]) -> Measured | None:
    """The throughput ``read`` takes from the JSON at ``path`` (a number, or a list of per-run numbers
    whose median counts); ``None`` when the file or the entry is missing, so that an estimate says
    "unknown" rather than fail."""
    try:
        value = read(json.loads((ROOT / path).read_text()))
    except (OSError, ValueError, KeyError, IndexError, TypeError, StopIteration):
        return None
    rate = statistics.median(value) if isinstance(value, Sequence) else float(value)
    return Measured(float(rate), path, label) if rate > 0 else None


def recorded_config(path: str) -> dict[str, Any]:
    """The ``config`` the JSON at ``path`` records (``{}`` when there is none): what a measurement's
    configuration was, to tell whether it is a run's own."""
    try:
        config = json.loads((ROOT / path).read_text()).get("config")
    except (OSError, ValueError, AttributeError):
        return {}
    return config if isinstance(config, dict) else {}


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it readable: ``40 s``, ``12 min``, ``3.5 h``, ``9 days``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


@dataclass(frozen=True)
class RunPlan:
    """What a command is about to run.

    ``rate`` is the throughput measured for this configuration (``exact``) or the fastest one measured
    for the recipe on any configuration (a lower bound on the time); ``None``: no measurement.  The
    estimate is ``steps / (rate · parallel)`` seconds (``parallel``: runs at once, each at ``rate``),
    at most ``time_budget_s`` when the run stops itself then (``budget_option``: the option that sets
    it).  ``steps`` is ``None`` for runs that a time budget alone stops.  ``brief``: the summary on one
    line (a run of minutes, which ``make demo`` starts), without the short run.
    """

    command: str
    what: str
    steps: int | None
    out_dir: str
    short: str
    rate: Measured | None = None
    exact: bool = False
    unit: str = "agent steps"
    time_budget_s: float | None = None
    parallel: int = 1
    budget_option: str = "--time_budget_s"
    brief: bool = False
    not_estimated: str = ""
    """Work the run does that the rate did not measure, in words (printed after the estimate)."""

    def estimate_s(self) -> float | None:
        """Seconds the run should take, ``None`` when unknown (see the class)."""
        if self.rate is None or self.steps is None:
            return self.time_budget_s
        seconds = self.steps / (self.rate.steps_per_s * max(self.parallel, 1))
        return seconds if self.time_budget_s is None else min(seconds, self.time_budget_s)

    def estimate(self) -> str:
        """The estimate in words, with the measurement it comes from."""
        seconds = self.estimate_s()
        budget = self.time_budget_s is not None and seconds == self.time_budget_s
        if seconds is None:
            return "unknown (no throughput of this recipe is recorded)"
        if budget:
            return f"at most {duration(seconds)} ({self.budget_option})"
        assert self.rate is not None
        rate = f"{self.rate.steps_per_s:,.1f} {self.unit}/s"
        if self.parallel > 1:
            rate += f" per run, {self.parallel} runs at once"
        if self.exact:
            return (
                f"about {duration(seconds)} at {rate}, measured for this configuration in {self.rate.cited()}"
            )
        return (
            f"unknown for this configuration; at least {duration(seconds)} at {rate}, the fastest this "
            f"recipe was measured at, in {self.rate.cited()}"
        )

    def summary(self) -> str:
        """The lines :func:`confirm` prints: what, how many steps, where, how long, how to run a short one."""
        steps = "" if self.steps is None else f", {self.steps:,} {self.unit}"
        first = f"{self.command}: {self.what}{steps}, writing {self.out_dir}"
        estimate = self.estimate() + (f"; {self.not_estimated}" if self.not_estimated else "")
        if self.brief:
            return f"{first}; estimated time: {estimate}"
        return "\n".join(
            [
                first,
                f"estimated time: {estimate}",
                f"a short run: {self.short}; {YES} starts without asking",
            ]
        )


def take_yes(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """``(True, argv without it)`` when ``argv`` holds ``--yes``, else ``(False, argv)``."""
    args = list(argv)
    return YES in args, [a for a in args if a != YES]


def confirm(
    plan: RunPlan, yes: bool = False, *, stdin: TextIO | None = None, out: TextIO | None = None
) -> None:
    """Print ``plan``'s summary on ``out`` (stderr); on a terminal, when the estimate exceeds
    :data:`ASK_ABOVE_S` and not ``yes``, ask ``Start it? [y/N]`` and end the process with status 1
    unless the answer is y or yes.  A lower-bound estimate over the limit asks too."""
    stdin = sys.stdin if stdin is None else stdin
    out = sys.stderr if out is None else out
    print(plan.summary(), file=out, flush=True)
    seconds = plan.estimate_s()
    if yes or seconds is None or seconds <= ASK_ABOVE_S or not (stdin is not None and stdin.isatty()):
        return
    print("Start it? [y/N] ", end="", file=out, flush=True)
    answer = stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        print("not started", file=out)
        raise SystemExit(1)
