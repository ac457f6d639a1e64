"""``--help`` and a recipe's bare listing import none of the heavy modules (torch, Gymnasium,
Lightning, the Atari emulator), so that they answer at once.

The bug this guards: every recipe command's ``--help`` took seconds, importing torch and Gymnasium
to print a list of options.  Each line runs in a fresh interpreter, as a user types it; what is
checked is which modules got imported, not how long it took (a time would depend on the machine).
A command's ``--help``, and the command with no options when that is a line its parser refuses
(``together`` without ``--out``), read the command's config through its ``Command.parser`` (or a
module that imports nothing heavy), not its run.  Every command of every recipe is checked: the
list comes from each recipe's ``COMMANDS``, so a new command is covered when it is registered.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.__main__ import RECIPES

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "torch",
    "gymnasium",
    "lightning",
    "ale_py",
    "ray",
    "tensordict",
    "torchrl",
    "stable_baselines3",
    "matplotlib",
)
PROBE = """
import json, runpy, sys
sys.argv = ["python -m recipes." + sys.argv[1], *sys.argv[2:]]
try:
    runpy.run_module("recipes." + sys.argv[0].split(".", 1)[1], run_name="__main__")
    code = None
except SystemExit as exit_:
    code = exit_.code
print(json.dumps({"code": code, "heavy": [m for m in HEAVY if m in sys.modules]}), file=sys.stderr)
""".replace("HEAVY", repr(HEAVY))

LINES: list[tuple[str, tuple[str, ...]]] = [(recipe, ()) for recipe in RECIPES] + [
    (recipe, ("--help",)) for recipe in RECIPES
]
COMMANDS = [
    (recipe, c.name) for recipe in RECIPES for c in importlib.import_module(f"recipes.{recipe}").COMMANDS
]
LINES += [(recipe, (name, "--help")) for recipe, name in COMMANDS]
LINES += [("dqn", ("together",))]  # no --out: the usage and the error, from the parser alone

LIGHTNING_CLI = ("torch", "lightning", "matplotlib")
EXCEPTIONS = {("imbalanced_mnist", name): LIGHTNING_CLI for name in ("fit", "validate", "test", "predict")}
"""Commands whose ``--help`` cannot do without heavy modules, and the ones they may import: these
are LightningCLI's commands, whose parser LightningCLI builds from Lightning's Trainer and the
recipe's LightningModule and LightningDataModule (their options are those classes' arguments)."""
PARAMS = [pytest.param(r, a, id=" ".join((r, *a))) for r, a in LINES]


@pytest.mark.parametrize(("recipe", "argv"), PARAMS)
def test_help_imports_no_heavy_module(recipe: str, argv: tuple[str, ...], tmp_path: Path) -> None:
    allowed = EXCEPTIONS.get((recipe, argv[0]), ()) if argv else ()
    if allowed:
        pytest.importorskip("lightning")  # the extra whose help it is
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, recipe, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", result.stderr)
    if missing and importlib.util.find_spec(missing.group(1).split(".")[0]) is None:
        pytest.skip(f"the command's parser needs {missing.group(1)}, an extra not installed here")
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, 2, None), result.stderr
    assert set(report["heavy"]) <= set(allowed), (
        f"python -m recipes.{recipe} {' '.join(argv)} imported {report['heavy']}"
    )
    assert "usage:" in result.stdout + result.stderr and list(tmp_path.iterdir()) == []


def test_every_command_is_checked_or_excepted_for_a_reason() -> None:
    """Each exception names a registered command, so that a renamed one cannot hide."""
    assert set(EXCEPTIONS) <= set(COMMANDS)
