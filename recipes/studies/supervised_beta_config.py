"""The config of ``python -m recipes.studies supervised-beta`` and the summary printed before it
runs, apart from the run: ``--help`` and the checks of a command line read this module without
importing torch.

The summary counts the SGD steps of every arm and seed; its time is ``steps / rate``, the rate being
the SGD steps per second of the committed results (``docs/results/supervised_beta.json``, its
``wall_s``), "unknown" while they record no time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recipes.common import cli, launch
from recipes.common.launch import RunPlan

__all__ = ["ARMS", "DESCRIPTION", "PROG", "RESULT", "Config", "parse", "run_plan"]

PROG = "python -m recipes.studies supervised-beta"
DESCRIPTION = (
    "Which β for prioritized supervised learning? Uniform vs prioritized β = 0 vs β annealed 0.4 → 1."
)
RESULT = "docs/results/supervised_beta.json"
"""The committed results: the time they record is the estimate's."""


@dataclass
class Config:
    """One comparison: every arm trained from the same initialisation on the same data per seed."""

    seeds: int = 3
    """Independent repetitions (data, initialisation and sampling seeds)."""
    steps: int = 2000
    """SGD steps per run."""
    batch_size: int = 32
    """Examples per SGD step."""
    classes: int = 10
    """Classes of the generated problem."""
    rare_classes: int = 5
    """The last classes are rare in the training set (balanced in the test set)."""
    common_count: int = 1000
    """Training examples of each common class."""
    rare_count: int = 10
    """Training examples of each rare class."""
    test_per_class: int = 500
    """Test examples of every class."""
    dim: int = 20
    """Dimension of the inputs."""
    separation: float = 2.0
    """Scale of the class means (noise has unit variance): smaller is harder."""
    hidden: int = 64
    """Units of the MLP's hidden layer."""
    lr: float = 0.05
    """SGD step size of every arm."""
    alpha: float = 1.0
    """α of the prioritized arms (the paper's supervised setting)."""
    beta_start: float = 0.4
    """Annealed arm: β from this value to ``beta_end`` over the run (the paper's RL schedule)."""
    beta_end: float = 1.0
    """Annealed arm: β at the end of the run."""
    out_dir: str = "runs/supervised_beta"
    """Where supervised_beta.json is written (the documented numbers: docs/results)."""


ARMS = {
    "uniform": "uniform sampling",
    "prioritized_beta0": "prioritized, β = 0",
    "prioritized_annealed": "prioritized, β annealed",
}


def parse(argv: Sequence[str] | None = None) -> Config:
    """The config of the command line (``--help`` lists every field with its docstring)."""
    parser = cli.PlainHelpParser(prog=PROG, description=DESCRIPTION)
    cli.add_field_options(parser, Config)
    return Config(**vars(parser.parse_args(None if argv is None else list(argv))))


def run_plan(cfg: Config) -> RunPlan:
    """What the command is about to run: every arm on every seed, ``steps`` SGD steps each."""

    def rate(data: dict[str, object]) -> float:
        recorded = data["config"]
        assert isinstance(recorded, dict)
        steps = recorded["seeds"] * len(ARMS) * recorded["steps"]
        return float(steps) / float(data["wall_s"])  # type: ignore[arg-type]

    default = Config()
    measured = launch.measured(RESULT, "the committed comparison, one torch thread", rate)
    same = (cfg.batch_size, cfg.hidden, cfg.dim, cfg.classes) == (
        default.batch_size,
        default.hidden,
        default.dim,
        default.classes,
    )
    return RunPlan(
        command=PROG,
        what=f"{cfg.seeds * len(ARMS)} MLP trainings ({len(ARMS)} arms x {cfg.seeds} seeds)",
        steps=cfg.seeds * len(ARMS) * cfg.steps,
        unit="SGD steps",
        out_dir=f"{cfg.out_dir}/supervised_beta.json",
        short="--seeds 1 --steps 200",
        rate=measured,
        exact=same,
    )
