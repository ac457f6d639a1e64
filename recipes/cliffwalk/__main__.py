"""``python -m recipes.cliffwalk <command> [options]``."""

from recipes.cliffwalk import COMMANDS, DEFAULT, DESCRIPTION
from recipes.common.cli import dispatch

dispatch("python -m recipes.cliffwalk", DESCRIPTION, COMMANDS, default=DEFAULT)
