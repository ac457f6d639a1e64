"""``python -m recipes.offpolicy <command> [options]``."""

from recipes.common.cli import dispatch
from recipes.offpolicy import COMMANDS, DEFAULT, DESCRIPTION

dispatch("python -m recipes.offpolicy", DESCRIPTION, COMMANDS, default=DEFAULT)
