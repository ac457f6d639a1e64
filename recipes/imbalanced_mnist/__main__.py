"""``python -m recipes.imbalanced_mnist <command> [options]``."""

from recipes.common.cli import dispatch
from recipes.imbalanced_mnist import COMMANDS, DEFAULT, DESCRIPTION

dispatch("python -m recipes.imbalanced_mnist", DESCRIPTION, COMMANDS, default=DEFAULT)
