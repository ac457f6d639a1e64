"""``--help`` and a recipe's bare listing import none of the heavy modules (torch, Gymnasium,
Lightning, the Atari emulator), so that they answer at once.

The bug this guards: every recipe command's ``--help`` took seconds, importing torch and Gymnasium
to print a list of options.  Each line runs in a fresh interpreter, as a user types it; what is
checked is which modules got imported, not how long it took (a time would depend on the machine).
``python -m recipes.dqn train --help`` reads the command's config (``recipes/dqn/config.py``,
through its ``Command.parser``), not its run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.__main__ import RECIPES

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "gymnasium", "lightning", "ale_py", "ray", "stable_baselines3", "matplotlib")
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
LINES.append(("dqn", ("train", "--help")))


@pytest.mark.parametrize(("recipe", "argv"), LINES, ids=[" ".join((r, *a)) for r, a in LINES])
def test_help_imports_no_heavy_module(recipe: str, argv: tuple[str, ...], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, recipe, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, None), result.stderr
    assert report["heavy"] == [], f"python -m recipes.{recipe} {' '.join(argv)} imported {report['heavy']}"
    assert "usage:" in result.stdout and list(tmp_path.iterdir()) == []
