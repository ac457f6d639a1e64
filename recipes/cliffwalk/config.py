"""The Blind Cliffwalk's options (``recipes/cliffwalk/experiment.py``): :class:`CliffwalkConfig`, every
field checked up front, parsed without importing the experiment (numba, torch through prisample), so that
``python -m recipes.cliffwalk run --help`` answers at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from recipes.common import cli
from recipes.common.launch import RunPlan

__all__ = [
    "AGENTS",
    "REPRESENTATIONS",
    "Agent",
    "CliffwalkConfig",
    "Representation",
    "parse_command",
    "run_plan",
]


Representation = Literal["tabular", "linear"]
Agent = Literal["uniform", "oracle", "greedy", "rank", "proportional"]
REPRESENTATIONS: tuple[Representation, ...] = ("tabular", "linear")
AGENTS: tuple[Agent, ...] = ("uniform", "oracle", "greedy", "rank", "proportional")


@dataclass(frozen=True)
class CliffwalkConfig:
    """Blind Cliffwalk reproduction; defaults follow App. B.1 where the paper gives a value."""

    min_n: int = 2
    """Smallest chain length n (the paper: 2)."""
    max_n: int = 12
    """Largest chain length n (the paper: 16; 12 keeps the default run to a few minutes)."""
    seeds: int = 10
    """Independent runs per (representation, agent, n): memory order and initial θ (the paper: 10)."""
    representations: tuple[Representation, ...] = REPRESENTATIONS
    """'tabular': one-hot φ(s, a); 'linear': one-hot φ(s, a) plus a constant bias feature per action."""
    agents: tuple[Agent, ...] = AGENTS
    """Which transition-selection rules to run."""
    step_size: float = 0.25
    """η (App. B.1: 1/4)."""
    init_std: float = 0.1
    """Standard deviation of the initial θ_i ~ N(0, 0.1) (App. B.1; read as a standard deviation)."""
    tolerance: float = 1e-3
    """Converged once MSE(Q, Q_true) over all (state, action) pairs is below this (App. B.1: 1e-3)."""
    alpha_rank: float = 0.7
    """α of the rank-based agent (not given for this experiment; the paper's Atari value)."""
    alpha_proportional: float = 0.6
    """α of the proportional agent (not given for this experiment; the paper's Atari value)."""
    eps: float = 1e-6
    """ε of the proportional agent, p = |δ| + ε (not given by the paper)."""
    initial_priority: Literal["max", "td"] = "max"
    """'max': every transition enters at the maximal priority of the memory (the paper, Sec. 3.2).
    'td' is a variant, not the paper: each slot starts at its own |δ| under the initial θ."""
    max_updates: int = 10_000_000
    """Cap on updates per run; a run that reaches it is reported as capped (null in the JSON)."""
    max_oracle_updates: int = 100_000
    """Cap for the oracle, whose step costs O(n^2); its converged runs need at most ~1,200 (n <= 16)."""
    uniform_batch: int = 4096
    """Uniform draws fetched from the sampler per call; uniform draws are independent of the
    priorities, so this is the same process as one draw per update, only faster."""
    seed: int = 0
    """Root seed; run (n, seed) gets the same memory order and initial θ for every agent."""
    workers: int = 1
    """Worker processes (runs are independent)."""
    out_dir: str = "runs/cliffwalk"
    """Where cliffwalk.md, cliffwalk.json and cliffwalk_*.png are written (the committed results:
    docs/results)."""

    def __post_init__(self) -> None:
        cli.at_least(self, 2, "min_n")
        cli.require(self.max_n >= self.min_n, "max_n", f"be >= min_n={self.min_n}", self.max_n)
        cli.at_least(self, 1, "seeds", "max_updates", "max_oracle_updates", "uniform_batch", "workers")
        # η > 1 overshoots the target on every update; η <= 0 never learns (η = -1 ran into NaN).
        cli.in_range(self, "step_size", 0.0, 1.0, low_open=True)
        cli.at_least(self, 0.0, "init_std", "alpha_rank", "alpha_proportional", "eps", "tolerance")
        cli.one_of(self, "initial_priority", ("max", "td"))
        cli.subset_of(self, "representations", REPRESENTATIONS)
        cli.subset_of(self, "agents", AGENTS)


# -- environment and replay memory --------------------------------------------------------------


PROG = "python -m recipes.cliffwalk run"


def parse_command(argv: Sequence[str]) -> CliffwalkConfig:
    """``run [options]``: the experiment's config (what ``--help`` lists)."""
    return cli.parse(CliffwalkConfig, argv, prog=PROG)


def run_plan(config: CliffwalkConfig) -> RunPlan:
    """What ``run`` is about to run, on one line: its runs (agent x representation x n x seed), each
    until it converges or reaches its cap; no throughput is recorded, so the time is unknown."""
    sizes = config.max_n - config.min_n + 1
    runs = len(config.agents) * len(config.representations) * sizes * config.seeds
    return RunPlan(
        command=PROG,
        what=f"{len(config.agents)} agents x {len(config.representations)} representations x n = "
        f"{config.min_n}..{config.max_n} x {config.seeds} seeds",
        steps=runs,
        unit="runs",
        out_dir=config.out_dir,
        short="--max_n 6 --seeds 2",
        brief=True,
    )
