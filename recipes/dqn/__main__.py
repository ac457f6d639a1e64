"""``python -m recipes.dqn <command> [options]``."""

from recipes.common.cli import dispatch
from recipes.dqn import COMMANDS, DEFAULT, DESCRIPTION

dispatch("python -m recipes.dqn", DESCRIPTION, COMMANDS, default=DEFAULT)
