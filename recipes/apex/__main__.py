"""``python -m recipes.apex <command> [options]``."""

from recipes.apex import COMMANDS, DEFAULT, DESCRIPTION
from recipes.common.cli import dispatch

dispatch("python -m recipes.apex", DESCRIPTION, COMMANDS, default=DEFAULT)
