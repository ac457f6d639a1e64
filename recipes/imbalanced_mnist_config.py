"""The imbalanced-MNIST recipe's options (``recipes/imbalanced_mnist.py``): its arms, each a
LightningCLI config file in :data:`CONFIG_DIR`, and :class:`CompareConfig`, the comparison of the
arms over seeds, every field checked up front (``recipes/cli.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from recipes import cli
from recipes.mnist_data import Dataset

Arm = Literal["uniform", "informed", "prioritized"]
ARMS: tuple[Arm, ...] = get_args(Arm)
CONFIG_DIR = Path(__file__).parent / "configs" / "imbalanced_mnist"


@dataclass(frozen=True)
class CompareConfig:
    """The three arms of Fig. 5, each run for several seeds through the LightningCLI configs.

    The prioritized arm keeps β = 0, the paper's supervised setting: its skewed draws are what
    rebalances the classes, and importance weights annealed to β = 1 would undo that.  Each run
    uses one torch thread (the results depend on the thread count)."""

    arms: tuple[Arm, ...] = ARMS
    """Arms to run; each is recipes/configs/imbalanced_mnist/<arm>.yaml."""
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
