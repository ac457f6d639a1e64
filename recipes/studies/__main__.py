"""``python -m recipes.studies <command> [options]``."""

from recipes.common.cli import dispatch
from recipes.studies import COMMANDS, DEFAULT, DESCRIPTION

dispatch("python -m recipes.studies", DESCRIPTION, COMMANDS, default=DEFAULT)
