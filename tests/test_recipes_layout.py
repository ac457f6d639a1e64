"""One folder per recipe: ``python -m recipes`` lists them, and the flat modules of before
name what replaced them instead of starting a run or failing with a bare ``No module named``."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.__main__ import RECIPES, listing
from recipes.common.cli import Command
from recipes.common.moved import MOVED

ROOT = Path(__file__).resolve().parent.parent


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_every_recipe_folder_is_listed_with_its_description() -> None:
    folders = sorted(p.parent.name for p in (ROOT / "recipes").glob("*/__main__.py"))
    assert sorted(RECIPES) == folders
    shown = listing().splitlines()
    for name in RECIPES:
        description = importlib.import_module(f"recipes.{name}").DESCRIPTION
        assert any(line.split() and line.split()[0] == name and description in line for line in shown), name


def test_python_m_recipes_prints_the_list() -> None:
    shown = run_module("recipes")
    assert shown.returncode == 0
    assert shown.stdout.strip() == listing().strip()


@pytest.mark.parametrize("old", ["atari_ddqn", "dqn_sweep", "per_vs_uniform", "mnist_data"])
def test_an_old_command_line_exits_2_naming_the_new_one(old: str) -> None:
    moved = run_module(f"recipes.{old}", "--env", "CartPole-v1")
    assert moved.returncode == 2
    assert MOVED[old][1] in moved.stderr
    assert moved.stdout == ""  # nothing ran


def test_an_old_import_names_the_module_that_holds_the_code_now() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"recipes\.dqn_config moved to recipes\.dqn\.config"):
        importlib.import_module("recipes.dqn_config")
    assert "recipes.dqn_config" not in sys.modules


def test_every_moved_name_points_at_a_module_and_a_command_that_exist() -> None:
    commands = {
        name: {c.name for c in importlib.import_module(f"recipes.{name}").COMMANDS} for name in RECIPES
    }
    for old, (module, command) in MOVED.items():
        assert importlib.util.find_spec(module) is not None, module
        shadow = [ROOT / "recipes" / f"{old}.py", ROOT / "recipes" / old]
        assert not any(p.exists() for p in shadow), old  # a real module or package would answer instead
        words = command.split()
        assert words[:2] == ["python", "-m"] and words[2].startswith("recipes")
        recipe = words[2].removeprefix("recipes").removeprefix(".")
        if recipe:
            assert recipe in RECIPES, command
            assert len(words) == 3 or words[3] in commands[recipe], command


def test_every_command_target_exists() -> None:
    for name in RECIPES:
        recipe_commands: tuple[Command, ...] = importlib.import_module(f"recipes.{name}").COMMANDS
        for command in recipe_commands:
            for target in (command.target, command.parser or command.target):
                module, _, function = target.partition(":")
                spec = importlib.util.find_spec(module)
                assert spec is not None and spec.origin is not None, target
                source = Path(spec.origin).read_text()
                assert f"def {function}(" in source or f"\n{function} = " in source, target
