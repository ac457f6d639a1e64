"""The configs of ``python -m recipes.dqn sweep`` and ``plot`` and the runs a sweep is made of,
apart from the runs themselves: ``--help``, the checks of a command line and the summary printed
before a sweep starts (``recipes/dqn/plan.py``) read this module without importing torch.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import yaml

from recipes.common import cli
from recipes.dqn.config import ARMS, PAPER_ARMS, DDQNConfig, config_files

__all__ = [
    "COMMANDS",
    "EPILOG",
    "PlotConfig",
    "SweepConfig",
    "arm_list",
    "grid_points",
    "label",
    "parse_command",
    "run_config",
]


@dataclass(frozen=True)
class SweepConfig(DDQNConfig):
    """A :class:`DDQNConfig` (every run's settings) plus the sweep's own fields.

    A field left at :class:`DDQNConfig`'s default takes the value of the environment family's file,
    then of each arm's file (``recipes/dqn/configs/``); a field set to another value wins
    over both, for every arm."""

    arms: tuple[str, ...] = PAPER_ARMS
    """Arms to run, a comma list (``uniform,rank``; also dqn_uniform, dqn_rank, lap, laber)."""
    seeds: int = 3
    """Seeds per arm: seed, seed + 1, ..."""
    jobs: int = 1
    """Runs in parallel (one process each, one torch thread each)."""
    out: str = "runs/atari_ddqn/sweep"
    """Output prefix: writes <out>.json, <out>.png, <out>_weights.png and <out>.md (the committed
    results: docs/results/<env>)."""
    grid: dict[str, list[Any]] | None = None
    """Every combination of these values per arm, as JSON: '{"priority_eps": [1e-6, 1e-2],
    "weight_norm": ["memory", "batch"]}' (each combination is its own curve)."""

    def __post_init__(self) -> None:
        if isinstance(self.arms, str):  # a comma list from Python code
            object.__setattr__(self, "arms", tuple(a.strip() for a in self.arms.split(",") if a.strip()))
        super().__post_init__()
        cli.subset_of(self, "arms", ARMS)
        cli.at_least(self, 1, "seeds", "jobs")
        names = {f.name for f in fields(DDQNConfig)} - {"env", "arm", "seed"}
        for key, values in (self.grid or {}).items():
            cli.require(key in names, "grid", "name options of a run (not env, arm, seed)", key)
            cli.require(isinstance(values, list) and bool(values), "grid", "map options to lists", values)


def arm_list(config: SweepConfig) -> list[str]:
    """The sweep's arms, in the order given."""
    return list(config.arms)


def grid_points(config: SweepConfig) -> list[dict[str, Any]]:
    """Every combination of the grid's values (one empty point without a grid)."""
    grid = config.grid or {}
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def label(arm: str, point: dict[str, Any]) -> str:
    """A curve's name: the arm, then the grid point (``proportional priority_eps=0.01``)."""
    return " ".join([arm, *(f"{k}={v}" for k, v in point.items())])


def run_config(config: SweepConfig, arm: str, seed: int, point: dict[str, Any] | None = None) -> DDQNConfig:
    """The :class:`DDQNConfig` of one run: the family's and the arm's files, then every field of
    the sweep that differs from the default, then the grid point."""
    default = DDQNConfig()
    values: dict[str, Any] = {}
    for path in config_files(config.env, arm, config.protocol):
        values.update(yaml.safe_load(path.read_text()))
    for f in fields(DDQNConfig):
        if getattr(config, f.name) != getattr(default, f.name) or f.name not in values:
            values[f.name] = getattr(config, f.name)
    values.update(point or {})
    name = label(arm, point or {}).replace(" ", "_")
    values.update(
        arm=arm,
        seed=seed,
        progress=False,
        hidden=tuple(values["hidden"]),
        run_name=f"{config.env.replace('/', '_')}/{name}/seed{seed}",
    )
    return DDQNConfig(**values)


@dataclass(frozen=True)
class PlotConfig:
    """Re-draw a sweep's PNG from its JSON."""

    json: str
    """The sweep's JSON, e.g. docs/results/cartpole.json."""
    metric: str = "returns"
    """'returns' (evaluation scores; <json>.png) or 'weight_mean' (per/weight_mean; <json>_weights.png)."""
    out: str | None = None
    """PNG to write; default the JSON's path with .png."""
    title: str | None = None
    """Plot title; default the JSON's file name."""
    runs: str | None = None
    """First rebuild the JSON from the ``result.json`` files of the run directories under this path
    (e.g. a sweep's log_dir copied from another machine)."""


COMMANDS = ("sweep", "plot")
EPILOG = (
    "Commands: sweep (every arm x seed [x grid point] of one environment; python -m recipes.dqn "
    "sweep --help), plot (re-draw a sweep's PNG from its JSON). One run: python -m recipes.dqn train."
)


def parse_command(argv: Sequence[str] | None = None) -> SweepConfig | PlotConfig:
    """``sweep|plot [options]``: the config of the command (a :class:`PlotConfig` for ``plot``);
    a sweep's every run is checked (:func:`run_config`) so that a bad one is refused before any
    starts."""
    command, options = cli.subcommand(argv, COMMANDS, prog="python -m recipes.dqn", epilog=EPILOG)
    prog = f"python -m recipes.dqn {command}"
    if command == "plot":
        return cli.parse(PlotConfig, options, prog=prog, epilog=EPILOG)
    config = cli.parse(SweepConfig, options, prog=prog, epilog=EPILOG)
    with cli.reporting():
        for arm in config.arms:
            for point in grid_points(config):
                run_config(config, arm, config.seed, point)
    return config
