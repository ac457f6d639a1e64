"""The imbalanced-MNIST recipe's options (``recipes/imbalanced_mnist/experiment.py``): its arms, each a
LightningCLI config file in :data:`CONFIG_DIR`; the trainer's settings of every run
(:data:`TRAINER_DEFAULTS`) and of a run without a config file (:func:`fit_defaults`, the
prioritized arm's); and :class:`CompareConfig`, the comparison of the arms over seeds, every field
checked up front (``recipes/common/cli.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from recipes.common import cli
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
