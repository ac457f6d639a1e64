"""``python -m recipes.r2d2 <command> [options]``."""

from recipes.common.cli import dispatch
from recipes.r2d2 import COMMANDS, DESCRIPTION

dispatch("python -m recipes.r2d2", DESCRIPTION, COMMANDS)
