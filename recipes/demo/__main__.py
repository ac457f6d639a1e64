"""``python -m recipes.demo <command> [options]``."""

from recipes.common.cli import dispatch
from recipes.demo import COMMANDS, DEFAULT, DESCRIPTION

dispatch("python -m recipes.demo", DESCRIPTION, COMMANDS, default=DEFAULT)
