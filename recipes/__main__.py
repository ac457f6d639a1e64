"""``python -m recipes``: every recipe, one line each."""

from __future__ import annotations

import importlib

RECIPES = ("demo", "dqn", "apex", "r2d2", "cliffwalk", "offpolicy", "imbalanced_mnist", "studies")


def listing() -> str:
    """One line per recipe: its name and what it does."""
    lines = ["usage: python -m recipes.<recipe> <command> [options]", "", "recipes:"]
    for name in RECIPES:
        lines.append(f"  {name:<17} {importlib.import_module(f'recipes.{name}').DESCRIPTION}")
    lines += ["", "'python -m recipes.<recipe>' lists a recipe's commands; '<command> --help' their options."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(listing())
