"""The recipes: experiments that open with their algorithm, one folder each (``python -m recipes``
lists them)."""

from recipes.common.moved import install

install()  # the flat modules of before name their new command or module
