"""One version source: ``prisample.__version__``, which ``pyproject.toml`` reads (``dynamic``)."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

import prisample

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict[str, object]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        data: dict[str, object] = tomllib.load(f)
    return data


def test_version_is_a_release_string() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.dev\d+)?", prisample.__version__)


def test_pyproject_reads_the_version_from_the_package() -> None:
    data = pyproject()
    project = data["project"]
    assert isinstance(project, dict)
    assert "version" not in project, "a second version in pyproject.toml: keep prisample.__version__ alone"
    assert "version" in project["dynamic"]
    dynamic = data["tool"]["setuptools"]["dynamic"]  # type: ignore[index]
    assert dynamic["version"] == {"attr": "prisample.__version__"}


def test_setuptools_reads_the_same_version() -> None:
    """What setuptools puts in the metadata: ``attr:`` read statically from ``prisample/__init__.py``."""
    expand = pytest.importorskip("setuptools.config.expand")
    assert expand.read_attr("prisample.__version__", root_dir=ROOT) == prisample.__version__


def test_installed_metadata_agrees() -> None:
    try:
        installed = importlib.metadata.version("prisample")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("prisample is not installed (run from a checkout)")
    assert installed == prisample.__version__
