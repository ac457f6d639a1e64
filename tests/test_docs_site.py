"""The docs site builds with ``mkdocs build --strict``, and docstrings' Sphinx roles become links.

``mkdocs.yml`` renders docs/ and, through mkdocstrings, the API from the docstrings; the griffe
extension ``docs/_ext/rest_markup.py`` turns their reST (roles, doctest and literal blocks,
definition lists) into Markdown at build time only.  The bugs these guard: Sphinx roles that
rendered nowhere, and links between the pages that pointed at no file or no heading (a link to
``../results/...png`` from docs/, an anchor on the wrong page).  Needs the ``docs`` extra (in
``all``); skipped without it.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is not installed")
griffe = pytest.importorskip("griffe")

ROOT = Path(__file__).resolve().parent.parent


def _extension() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rest_markup", ROOT / "docs" / "_ext" / "rest_markup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rest = _extension()


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(config.parent)}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    return subprocess.run(command, cwd=config.parent, env=env, capture_output=True, text=True, timeout=600)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-6000:]
    page = (tmp_path / "site" / "reference" / "prisample" / "index.html").read_text()
    assert 'href="#prisample.PrioritizedSampler.add"' in page, "roles are links"
    assert ":class:`" not in page and ":meth:`" not in page, "no role is left as text"
    assert (tmp_path / "site" / "recipes" / "cliffwalk" / "index.html").is_file()


@pytest.fixture(scope="module")
def prisample_model() -> Any:
    return griffe.load("prisample", search_paths=[str(ROOT)])


@pytest.mark.parametrize(
    ("owner", "text", "markdown"),
    [
        (
            "prisample",
            ":class:`~prisample.PrioritizedSampler`",
            "[`PrioritizedSampler`][prisample.sampler.PrioritizedSampler]",
        ),
        (
            "prisample.replay",
            ":class:`prisample.replay.ReplayMemory`",
            "[`prisample.replay.ReplayMemory`][prisample.replay.memory.ReplayMemory]",
        ),
        (  # a method's name in a method of the same class
            "prisample.sampler.PrioritizedSampler.load_state_dict",
            ":meth:`state_dict`",
            "[`state_dict()`][prisample.sampler.PrioritizedSampler.state_dict]",
        ),
        (  # through the module's imports
            "prisample.replay",
            ":class:`FramePool`",
            "[`FramePool`][prisample.replay.frames.FramePool]",
        ),
        (  # inherited: documented on the base class
            "prisample.methods.offpolicy_corrections.CorrectedSampler.add",
            ":attr:`max_priority`",
            "[`max_priority`][prisample.sampler.PrioritizedSampler.max_priority]",
        ),
        ("prisample.sampler.PrioritizedSampler", ":meth:`_weights`", "`_weights()`"),  # private
        ("prisample.sampler", ":class:`torch.Tensor`", "`torch.Tensor`"),  # another project
        ("prisample.sampler", ":exc:`ValueError`", "`ValueError`"),  # a builtin
        ("prisample", ":mod:`Replay <prisample.replay>`", "[`Replay`][prisample.replay]"),
        (
            "prisample.ray",
            "* a mass (:attr:`~prisample.PrioritizedSampler.\n  total_mass`)",
            "* a mass ([`total_mass`][prisample.sampler.PrioritizedSampler.total_mass])",
        ),
    ],
)
def test_a_role_becomes_a_cross_reference(prisample_model: Any, owner: str, text: str, markdown: str) -> None:
    obj = prisample_model.modules_collection[owner]
    assert rest.to_markdown(obj, text, prisample_model.modules_collection) == markdown


def test_a_role_naming_nothing_is_a_warning(prisample_model: Any, caplog: pytest.LogCaptureFixture) -> None:
    obj = prisample_model.modules_collection["prisample.sampler.PrioritizedSampler"]
    with caplog.at_level(logging.WARNING):
        text = rest.to_markdown(obj, ":meth:`no_such_method`", prisample_model.modules_collection)
    assert text == "`no_such_method()`"
    assert "no_such_method" in caplog.text and "names nothing" in caplog.text


def test_blocks_become_markdown() -> None:
    text = textwrap.dedent(
        """\
        Intro::

            raw  text

        ``term``
            its definition,
            on two lines.
        ``other``
            the next one.

        >>> 1 + 1
        2

        Args:
            x: a value.
        """
    )
    assert rest.blocks_to_markdown(text) == textwrap.dedent(
        """\
        Intro:

        ```
        raw  text
        ```


        ``term``
        :   its definition,
            on two lines.

        ``other``
        :   the next one.

        ```pycon
        >>> 1 + 1
        2
        ```

        Args:
            x: a value."""
    )


def test_help_keeps_the_roles() -> None:
    """The rewriting is of griffe's model at build time; the docstrings themselves keep their reST."""
    import prisample

    model = griffe.load(
        "prisample", search_paths=[str(ROOT)], extensions=griffe.load_extensions(rest.RestMarkup)
    )
    docstring = model.modules_collection["prisample.sampler.PrioritizedSampler"].docstring.value
    assert ":meth:`" not in docstring and "[`add()`][prisample.sampler.PrioritizedSampler.add]" in docstring
    assert ":meth:`add`" in (inspect.getdoc(prisample.PrioritizedSampler) or "")


_PACKAGE = '''
"""A package for the build test."""


def documented() -> None:
    """Calls {role}."""


def target() -> None:
    """A function."""
'''


@pytest.mark.parametrize(
    ("role", "message"),
    [
        (":func:`targte`", "names nothing"),  # a typo
        (":func:`tinypkg.hidden.elsewhere`", "Could not find cross-reference target"),  # on no page
        (":func:`target`", None),
    ],
    ids=["unresolved", "not-rendered", "fine"],
)
def test_a_broken_reference_fails_the_strict_build(tmp_path: Path, role: str, message: str | None) -> None:
    (tmp_path / "tinypkg").mkdir()
    (tmp_path / "tinypkg" / "__init__.py").write_text(_PACKAGE.format(role=role))
    (tmp_path / "tinypkg" / "hidden.py").write_text(
        '"""Not rendered."""\n\n\ndef elsewhere() -> None:\n    """A."""\n'
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# API\n\n::: tinypkg\n")
    extension = ROOT / "docs" / "_ext" / "rest_markup.py"
    (tmp_path / "mkdocs.yml").write_text(
        textwrap.dedent(
            f"""\
            site_name: t
            plugins:
              - autorefs
              - mkdocstrings:
                  handlers:
                    python:
                      paths: [.]
                      options:
                        extensions: ["{extension}"]
            """
        )
    )
    result = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    if message is None:
        assert result.returncode == 0, result.stderr[-3000:]
    else:
        assert result.returncode != 0 and message in result.stderr, result.stderr[-3000:]
