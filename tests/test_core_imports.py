"""``import prisample`` needs only numpy, numba and torch (the optional adapters aside)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core_only import OPTIONAL_MODULES, core_modules

ROOT = Path(__file__).resolve().parent.parent


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def test_core_modules_import_no_extra() -> None:
    result = run("import sys, tests.core_only as c; sys.exit(c.main())")
    assert result.returncode == 0, result.stderr


def test_an_adapter_is_caught() -> None:
    """The check fails where a module imports an extra: the TorchRL adapter imports torchrl."""
    pytest.importorskip("torchrl")
    result = run("import tests.core_only as c; print(c.imported_extras(['prisample.torchrl']))")
    assert result.returncode == 0, result.stderr
    assert "torchrl" in result.stdout


def test_optional_modules_exist_and_are_left_out() -> None:
    names = core_modules()
    for name in OPTIONAL_MODULES:
        assert importlib.util.find_spec(name) is not None, name
        assert name not in names
    assert "prisample.replay.prioritized" in names and "prisample.diagnostics" in names
