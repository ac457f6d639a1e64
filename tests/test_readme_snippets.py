"""Every Python snippet of the README and of docs/index.md runs as it is, in a namespace of its own.

The bug this guards: the README's quickstart used names it never defined (``dataset``, ``model``,
``learn``, ``envs``), so a reader who pasted it got a ``NameError`` where docs/index.md's version
ran.  Each block runs alone (nothing carries over from the block before); a capacity of ``10**6`` is
cut to ``10**4`` (the replay memory's frames would take gigabytes), nothing else changes.  The
README's Lightning snippet is run, with its checks, by tests/test_readme_lightning.py.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/index.md")
EXTRAS = ("lightning", "gymnasium", "stable_baselines3", "torchrl", "ray")


def snippets() -> list[tuple[str, int, str]]:
    """``(page, line, code)`` of each ```python block of the pages but the README's Lightning one."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            code = match.group(1)
            if page == "README.md" and "PrioritizedSamplingCallback" in code:
                continue  # tests/test_readme_lightning.py
            found.append((page, text[: match.start()].count("\n") + 1, code))
    return found


def test_the_pages_have_snippets() -> None:
    assert {page for page, _, _ in snippets()} == set(PAGES)
    assert sum(page == "README.md" for page, _, _ in snippets()) >= 3


@pytest.mark.parametrize(("page", "line", "code"), snippets(), ids=[f"{p}:{n}" for p, n, _ in snippets()])
def test_a_snippet_runs_as_it_is(page: str, line: int, code: str) -> None:
    for extra in EXTRAS:
        if re.search(rf"^\s*(?:import|from) {extra}\b", code, re.M):
            pytest.importorskip(extra)
    namespace: dict[str, object] = {"__name__": "__snippet__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code.replace("10**6", "10**4"), f"{page}:{line}", "exec"), namespace)
