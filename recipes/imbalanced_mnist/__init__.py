"""Imbalanced MNIST with Lightning: uniform, prioritized and class-informed sampling (Sec. 6, Fig. 5).

``python -m recipes.imbalanced_mnist`` with no arguments lists its commands; ``<command> --help`` lists
a command's options."""

from __future__ import annotations

from recipes.common.cli import Command

__all__ = ["COMMANDS", "DEFAULT", "DESCRIPTION"]

DESCRIPTION = (
    "Imbalanced MNIST with Lightning: uniform, prioritized and class-informed sampling (Sec. 6, Fig. 5)."
)
DEFAULT = None
"""Every command line names its command."""
COMMANDS = (
    Command(
        "fit",
        "one run of one arm through LightningCLI (--config an arm's file; prioritized by default)",
        "recipes.imbalanced_mnist.experiment:main",
        takes_name=True,
    ),
    Command(
        "validate", "LightningCLI's validate", "recipes.imbalanced_mnist.experiment:main", takes_name=True
    ),
    Command("test", "LightningCLI's test", "recipes.imbalanced_mnist.experiment:main", takes_name=True),
    Command("predict", "LightningCLI's predict", "recipes.imbalanced_mnist.experiment:main", takes_name=True),
    Command(
        "compare",
        "every arm x seed, the test-error curves and table (make demo runs it)",
        "recipes.imbalanced_mnist.experiment:main",
        takes_name=True,
        parser="recipes.imbalanced_mnist.config:parse_compare",
    ),
    Command(
        "prepare", "find or download MNIST (or Fashion-MNIST) once", "recipes.imbalanced_mnist.data:prepare"
    ),
    Command(
        "lr-sweep",
        "each arm's step size chosen on validation error",
        "recipes.imbalanced_mnist.lr_sweep:main",
        parser="recipes.imbalanced_mnist.config:parse_sweep",
    ),
)
