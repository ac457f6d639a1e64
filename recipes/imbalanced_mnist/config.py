"""The imbalanced-MNIST recipe's options (``recipes/imbalanced_mnist/experiment.py``): its arms, each a
LightningCLI config file in :data:`CONFIG_DIR`; the trainer's settings of every run
(:data:`TRAINER_DEFAULTS`) and of a run without a config file (:func:`fit_defaults`, the
prioritized arm's); and :class:`CompareConfig`, the comparison of the arms over seeds, every field
checked up front (``recipes/common/cli.py``); :class:`SweepConfig`, the step-size sweep's.  Nothing here
imports torch or Lightning, so that ``--help`` answers at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from recipes.common import cli, launch
from recipes.common.launch import RunPlan
from recipes.imbalanced_mnist.data import Dataset

Arm = Literal["uniform", "informed", "prioritized"]
ARMS: tuple[Arm, ...] = get_args(Arm)
CONFIG_DIR = Path(__file__).parent / "configs"


TRAINER_DEFAULTS: dict[str, Any] = {
    # Lightning's DistributedSampler wrapper would fix each epoch's prioritized draws up front.
    "use_distributed_sampler": False,
    "accelerator": "cpu",
    "num_sanity_val_steps": 0,
    "check_val_every_n_epoch": None,
}


def fit_defaults() -> dict[str, Any]:
    """The trainer settings of a run without ``--config``: those of the prioritized arm's file
    (``configs/prioritized.yaml``: steps, evaluation period, logger) over :data:`TRAINER_DEFAULTS`;
    the model's and the data module's defaults are that file's values too, so that ``fit`` alone
    runs the prioritized arm.  An arm's file replaces them all."""
    import yaml

    arm = yaml.safe_load((CONFIG_DIR / "prioritized.yaml").read_text())
    return {**TRAINER_DEFAULTS, **arm["trainer"]}


@dataclass(frozen=True)
class CompareConfig:
    """The three arms of Fig. 5, each run for several seeds through the LightningCLI configs.

    The prioritized arm keeps β = 0, the paper's supervised setting: its skewed draws are what
    rebalances the classes, and importance weights annealed to β = 1 would undo that.  Each run
    uses one torch thread (the results depend on the thread count)."""

    arms: tuple[Arm, ...] = ARMS
    """Arms to run; each is recipes/imbalanced_mnist/configs/<arm>.yaml."""
    seeds: int = 3
    """Seeds per arm (the paper: 3); seed s initialises the network and the sampler."""
    max_steps: int = 1000
    """Updates per run (demo scale; the configs' default is 10,000)."""
    eval_every: int = 100
    """Updates between evaluations of the test and validation sets."""
    lr: float | None = None
    """Step size for every arm; None keeps each config's (chosen by the validation sweep)."""
    root: str = "data"
    """Where MNIST's IDX files are (or are downloaded to)."""
    dataset: Dataset = "auto"
    """'auto', 'mnist' or 'fashion-mnist' (see the data module)."""
    workers: int = 2
    """Runs in parallel (one torch thread each)."""
    overrides: tuple[str, ...] = ()
    """Extra LightningCLI arguments for every run, e.g. ('--data.backend', 'rank')."""
    out_dir: str = "runs/imbalanced_mnist"
    """Where imbalanced_mnist.{json,md} and the PNGs are written (the committed results: docs/results)."""
    name: str = "imbalanced_mnist"
    """Stem of the output files."""

    def __post_init__(self) -> None:
        cli.subset_of(self, "arms", ARMS)
        cli.at_least(self, 1, "seeds", "max_steps", "eval_every", "workers")
        cli.require(
            self.eval_every <= self.max_steps,
            "eval_every",
            f"be <= max_steps={self.max_steps}",
            self.eval_every,
        )
        if self.lr is not None:
            cli.positive(self, "lr")
        cli.one_of(self, "dataset", ("auto", "mnist", "fashion-mnist"))


def parse_compare(argv: Sequence[str]) -> CompareConfig:
    """``compare [options]`` (the command's name first): the comparison's config."""
    return cli.parse(CompareConfig, list(argv)[1:], prog="python -m recipes.imbalanced_mnist compare")


@dataclass(frozen=True)
class SweepConfig:
    """Every arm at every step size of the grid, for the comparison's seeds."""

    step_sizes: tuple[float, ...] = (0.3, 0.1, 0.03, 0.01, 0.003)
    """The grid, largest first (the paper's, without 0.001, which no arm came near at demo scale)."""
    arms: tuple[Arm, ...] = ARMS
    """Arms to tune; each is recipes/imbalanced_mnist/configs/<arm>.yaml."""
    seeds: int = 3
    """Seeds per arm and step size (the comparison's); the criterion is their median."""
    max_steps: int = 1000
    """Updates per run (the comparison's)."""
    eval_every: int = 100
    """Updates between evaluations."""
    root: str = "data"
    """Where MNIST's IDX files are (or are downloaded to)."""
    dataset: Dataset = "auto"
    """'auto', 'mnist' or 'fashion-mnist'."""
    workers: int = 2
    """Runs in parallel (one torch thread each)."""
    overrides: tuple[str, ...] = ()
    """Extra LightningCLI arguments for every run (as the comparison's)."""
    out_dir: str = "runs/imbalanced_mnist_lr_sweep"
    """Where imbalanced_mnist_lr_sweep.{json,md} are written (the committed sweep: docs/results)."""

    def __post_init__(self) -> None:
        cli.subset_of(self, "arms", ARMS)
        cli.at_least(self, 1, "seeds", "max_steps", "eval_every", "workers")
        cli.require(
            len(self.step_sizes) > 0 and all(s > 0 for s in self.step_sizes),
            "step_sizes",
            "be one or more positive numbers",
            self.step_sizes,
        )


SWEEP_PROG = "python -m recipes.imbalanced_mnist lr-sweep"


def parse_sweep(argv: Sequence[str]) -> SweepConfig:
    """``lr-sweep [options]``: the sweep's config (what ``--help`` lists)."""
    return cli.parse(SweepConfig, argv, prog=SWEEP_PROG)


COMPARE_RESULT = "docs/results/imbalanced_mnist.json"
SWEEP_RESULT = "docs/results/imbalanced_mnist_lr_sweep.json"


def compare_plan(config: CompareConfig) -> RunPlan:
    """What ``compare`` is about to run, on one line (``make demo`` runs it): arms x seeds runs of
    ``max_steps`` updates, ``workers`` at once, at the per-worker rate of the committed comparison."""
    runs = len(config.arms) * config.seeds
    rate = launch.measured(
        COMPARE_RESULT,
        "the committed comparison",
        lambda d: (
            len(d["config"]["arms"])
            * d["seeds"]
            * d["config"]["max_steps"]
            / (d["runtime_s"] * d["config"]["workers"])
        ),
    )
    recorded = launch.recorded_config(COMPARE_RESULT)
    return RunPlan(
        command="python -m recipes.imbalanced_mnist compare",
        what=f"{runs} runs ({len(config.arms)} arms x {config.seeds} seeds)",
        steps=runs * config.max_steps,
        unit="updates",
        out_dir=config.out_dir,
        short="--seeds 1 --max_steps 200",
        rate=rate,
        exact=recorded.get("eval_every") == config.eval_every,
        parallel=config.workers,
        brief=True,
    )


def sweep_plan(config: SweepConfig) -> RunPlan:
    """What ``lr-sweep`` is about to run: arms x step sizes x seeds runs of ``max_steps`` updates,
    ``workers`` at once, at the per-worker rate of the committed sweep (run with the defaults)."""
    runs = len(config.arms) * len(config.step_sizes) * config.seeds
    default = SweepConfig()
    rate = launch.measured(
        SWEEP_RESULT,
        "the committed sweep",
        lambda d: len(d["runs"]) * default.seeds * default.max_steps / (d["runtime_s"] * default.workers),
    )
    return RunPlan(
        command=SWEEP_PROG,
        what=f"{runs} runs ({len(config.arms)} arms x {len(config.step_sizes)} step sizes x "
        f"{config.seeds} seeds)",
        steps=runs * config.max_steps,
        unit="updates",
        out_dir=config.out_dir,
        short="--seeds 1 --step_sizes 0.1,0.03",
        rate=rate,
        exact=config.eval_every == default.eval_every,
        parallel=config.workers,
    )


def start_compare(argv: Sequence[str]) -> CompareConfig:
    """``compare [options]`` (the command's name first): the config, once what it runs is printed
    (and, on a terminal over an hour, agreed to; ``--yes`` does not ask)."""
    yes, options = launch.take_yes(argv)
    config = parse_compare(options)
    launch.confirm(compare_plan(config), yes)
    return config
