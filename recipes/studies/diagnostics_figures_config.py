"""The config of ``python -m recipes.studies diagnostics-figures`` and the summary printed before it
runs, apart from the runs: ``--help`` and the checks of a command line read this module without
importing torch, Gymnasium or Lightning.

The summary's time is the sum over the runs of ``steps / rate``, each rate read from the committed
figures' record (``RESULT``: each run's steps or updates and its seconds, with the defaults): "about"
for the defaults' environment, memory, replay period and threads, "at least" (its fastest run)
otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from recipes.common import cli, launch
from recipes.common.launch import Measured, RunPlan

__all__ = ["DQN_ARMS", "PARTS", "PROG", "RESULT", "FiguresConfig", "parse", "run_plan"]

PROG = "python -m recipes.studies diagnostics-figures"
RESULT = "docs/results/diagnostics/diagnostics_figures.json"
"""The record of the committed figures, run with the defaults: its runs' times are the estimate's."""
DQN_ARMS = ("uniform", "proportional", "rank")
PARTS = ("dqn", "mnist")


@dataclass(frozen=True)
class FiguresConfig:
    """What to run and where the figures go."""

    parts: tuple[str, ...] = PARTS
    """Which runs: 'dqn' (MinAtar Breakout), 'mnist' (imbalanced MNIST), or both."""
    env: str = "MinAtar/Breakout-v1"
    """Environment of the DQN runs (any the DQN recipe takes, e.g. CartPole-v1 for a smoke run)."""
    arms: tuple[str, ...] = DQN_ARMS
    """DQN arms, one run each: uniform (the paper's Fig. 10 bottom row), proportional, rank (Figs. 10
    top and 11)."""
    steps: int = 40_000
    """Agent steps of each DQN run."""
    learning_starts: int = 5_000
    """Agent steps before the first update."""
    memory_size: int = 10_000
    """DQN replay capacity N (smaller than the run, so that transitions are evicted)."""
    replay_period: int = 4
    """K: one update per K agent steps (4, Atari's: each transition is replayed 8 times on average)."""
    log_every: int = 2_000
    """Agent steps between snapshots (the recipe's metrics rows)."""
    mnist_steps: int = 2_000
    """Updates of the imbalanced-MNIST run (minibatch 60)."""
    mnist_log_every: int = 100
    """Updates between snapshots of the MNIST run."""
    root: str = "data"
    """Where MNIST's IDX files are (or are downloaded to)."""
    dataset: Literal["auto", "mnist", "fashion-mnist"] = "auto"
    """'auto', 'mnist' or 'fashion-mnist' (see recipes/imbalanced_mnist/experiment.py)."""
    seed: int = 0
    """Seed of every run."""
    threads: int = 1
    """torch CPU threads."""
    out: str = "runs/diagnostics"
    """Output directory (the committed copies: docs/results/diagnostics)."""

    def __post_init__(self) -> None:
        cli.subset_of(self, "parts", PARTS)
        cli.subset_of(self, "arms", DQN_ARMS)
        cli.at_least(
            self,
            1,
            "steps",
            "memory_size",
            "replay_period",
            "log_every",
            "mnist_steps",
            "mnist_log_every",
            "threads",
        )
        cli.at_least(self, 0, "learning_starts", "seed")
        cli.one_of(self, "dataset", ("auto", "mnist", "fashion-mnist"))
        after = f"be > learning_starts={self.learning_starts}"
        cli.require(self.steps > self.learning_starts, "steps", after, self.steps)


def parse(argv: Sequence[str] | None = None) -> FiguresConfig:
    """The config of the command line; ``--help`` lists every field with its docstring."""
    return cli.parse(FiguresConfig, argv, prog=PROG)


def _rate(name: str | None) -> Measured | None:
    """Steps (DQN) or updates (MNIST) per second of the recorded run ``name``; the fastest with
    ``name`` ``None``."""

    def read(data: Any) -> float:
        rates: dict[str, float] = {
            r["name"]: float(r.get("steps") or r["updates"]) / float(r["wall_s"]) for r in data["runs"]
        }
        return max(rates.values()) if name is None else rates[name]

    return launch.measured(RESULT, name or "its fastest run", read)


def run_plan(config: FiguresConfig) -> RunPlan:
    """What the command is about to run: one DQN run per arm, then the MNIST run (``parts``)."""
    default = FiguresConfig()
    fields = ("env", "memory_size", "replay_period", "threads")
    same = all(getattr(config, f) == getattr(default, f) for f in fields)
    prefix = config.env.split("/")[-1].split("-")[0].lower()
    runs: list[tuple[str, int]] = []  # (recorded run, steps or updates)
    parts = []
    if "dqn" in config.parts:
        runs += [(f"{prefix}_{arm}", config.steps) for arm in config.arms]
        parts.append(
            f"{len(config.arms)} Double DQN runs on {config.env} ({', '.join(config.arms)}; "
            f"{config.steps:,} agent steps each)"
        )
    if "mnist" in config.parts:
        runs.append(("mnist_prioritized", config.mnist_steps))
        parts.append(f"1 imbalanced-MNIST run ({config.mnist_steps:,} updates)")
    rates = [_rate(name) for name, _ in runs]
    steps = sum(n for _, n in runs)
    exact = same and all(rates)
    rate = _rate(None)
    if exact:
        seconds = sum(n / m.steps_per_s for (_, n), m in zip(runs, rates, strict=True) if m is not None)
        rate = Measured(steps / seconds, RESULT, "each run's own, with the defaults")
    return RunPlan(
        command=PROG,
        what=" and ".join(parts),
        steps=steps,
        unit="agent steps and updates",
        out_dir=config.out,
        short="--env CartPole-v1 --steps 4000 --learning_starts 1000 --mnist_steps 200",
        rate=rate,
        exact=exact,
    )
