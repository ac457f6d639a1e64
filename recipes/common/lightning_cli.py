"""A recipe's LightningModule and LightningDataModule on the command line (LightningCLI).

:func:`lightning_cli` builds the ``fit``/``validate``/``test`` command line over the two classes with
a fixed number of torch threads (the numbers depend on it) and the config saved beside the logs
(:class:`SaveConfigWithLogger`); :func:`derived_seed` gives the data module seeds that follow from
the run's ``--seed_everything``; :func:`unattended_trainer_args` are the trainer flags of a run
inside a comparison of arms (``recipes/imbalanced_mnist/experiment.py compare``) and
:func:`unattended_logging` its console messages.  Lightning's tips (``💡 Tip: … litlogger``) are
filtered out of every run (:func:`without_tips`).
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from recipes.common.cli import PlainHelp, description


def derived_seed(purpose: str) -> int:
    """A seed for ``purpose`` derived from the run's seed (``--seed_everything``, which sets
    ``torch.initial_seed()``), not drawn from torch's global generator: how far Lightning has
    advanced that generator when ``setup`` or ``train_dataloader`` runs is its own business."""
    words = np.frombuffer(purpose.encode().ljust(32, b" ")[:32], dtype=np.uint32).tolist()
    return int(np.random.SeedSequence([torch.initial_seed(), *words]).generate_state(1)[0] >> 1)


class SaveConfigWithLogger(SaveConfigCallback):
    """Saves the run's config beside its logs; a run without a logger writes nothing."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.logger is not None:
            super().setup(trainer, pl_module, stage)


SUBCOMMANDS = ("fit", "validate", "test", "predict")
"""LightningCLI's commands."""


class _NoTips(logging.Filter):
    """Drops Lightning's advertisements (``💡 Tip: … try installing litlogger``, ``… litmodels``),
    which it logs at INFO on every ``Trainer``, so once per run of a comparison of arms."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


def without_tips() -> None:
    """Filter Lightning's tips out of its console logger, keeping its other messages (Lightning's
    console output is configured through the ``logging`` module: its "Configure console logging"
    page); idempotent."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _NoTips) for f in logger.filters):
        logger.addFilter(_NoTips())


def unattended_logging() -> None:
    """Lightning's console messages of a run among many: warnings and errors only (no tip, no
    ``GPU available: …``, ``Seed set to …`` or ``Trainer.fit stopped`` per run)."""
    without_tips()
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


class PlainHelpLightningParser(PlainHelp, LightningArgumentParser):
    """LightningCLI's parser, its help without the docstrings' reST (``:class:`…```, ````…````)."""


def lightning_cli(
    model_class: type[pl.LightningModule],
    datamodule_class: type[pl.LightningDataModule],
    trainer_defaults: dict[str, Any],
    args: list[str] | None = None,
    run: bool = True,
    threads: int | None = None,
    prog: str | None = None,
) -> LightningCLI:
    """LightningCLI over ``model_class`` and ``datamodule_class`` (``args``: the command line, default
    ``sys.argv``; seed 0 unless ``--seed_everything`` says otherwise), run with ``threads`` torch
    threads (default ``OMP_NUM_THREADS``, else 1): the order of a convolution's floating-point sums,
    and so the numbers, depend on the thread count.  ``prog`` names the command in ``--help``."""
    torch.set_num_threads(threads or int(os.environ.get("OMP_NUM_THREADS", "1")))
    without_tips()
    # Lightning 2.6.6, its latest release, builds a torch LeafSpec for every DataLoader it wraps
    # (lightning/pytorch/utilities/_pytree.py), which torch 2.14 deprecates: a FutureWarning per run
    # that no recipe can avoid (Lightning-AI/pytorch-lightning#21326); only that message is hidden.
    warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning)
    return LightningCLI(
        model_class,
        datamodule_class,
        seed_everything_default=0,
        trainer_defaults=trainer_defaults,
        save_config_callback=SaveConfigWithLogger,
        save_config_kwargs={"overwrite": True},
        parser_class=PlainHelpLightningParser,
        parser_kwargs={
            **({} if prog is None else {"prog": prog}),
            # each command's description whole, not its docstring's first line (cut mid-sentence)
            **{name: {"description": description(getattr(pl.Trainer, name))} for name in SUBCOMMANDS},
        },
        args=args,
        run=run,
    )


def unattended_trainer_args(max_steps: int, val_check_interval: int) -> list[str]:
    """Trainer flags of one run among many: ``max_steps`` updates, an evaluation every
    ``val_check_interval``, and no logger, checkpoints, progress bar or model summary."""
    return [
        "--trainer.max_steps",
        str(max_steps),
        "--trainer.val_check_interval",
        str(val_check_interval),
        "--trainer.logger",
        "false",
        "--trainer.enable_checkpointing",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
    ]
