"""The tour's options (``recipes/demo/tour.py``): :class:`DemoConfig`, parsed without importing torch, so
that ``python -m recipes.demo tour --help`` answers at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recipes.common import cli

__all__ = ["DemoConfig", "parse_command"]


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of the demonstration."""

    draws: int = 200_000
    """Draws used to estimate sampling frequencies."""
    dataset_size: int = 2_000
    """Examples in the synthetic classification set."""
    rare_fraction: float = 0.02
    """Share of the rare class in it."""
    epochs: int = 3
    """Epochs of the DataLoader demonstration."""
    seed: int = 0
    """Seed of the sampler, the data and the model."""


def parse_command(argv: Sequence[str]) -> DemoConfig:
    """``tour [options]``: the tour's sizes (what ``--help`` lists)."""
    return cli.parse(DemoConfig, argv, prog="python -m recipes.demo tour")
