"""The API reference's navigation lists the public modules only; the internal ones keep their pages.

A public module is one the user-facing pages name by its import path (``prisample.ledger``,
``prisample.frame_stream``: docs/*.md outside the generated reference pages, and the README), or one
that defines a class the API guide (docs/api.md) gives a section of its own (``CorrectedSampler``).  The
bug this guards: the navigation listed ``prisample.replay.device_steps``, ``prisample.order`` and
the other internal modules beside the public ones.  The internal pages stay (the public docstrings'
cross-references land on them) and are listed under ``not_in_nav``, so that every reference page is
either in the navigation or deliberately out of it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = (ROOT / "mkdocs.yml").read_text()


def nav_modules() -> set[str]:
    """The modules of the navigation's "API reference" section."""
    section = CONFIG.split("  - API reference:\n", 1)[1]
    lines = []
    for line in section.splitlines():
        if not line.startswith("      ") and line.strip() and not line.lstrip().startswith("#"):
            break
        lines.append(line)
    return set(re.findall(r"reference/(prisample[\w.]*)\.md", "\n".join(lines)))


def not_in_nav_modules() -> set[str]:
    block = re.search(r"^not_in_nav: \|\n((?:  .*\n)+)", CONFIG, re.M)
    assert block is not None
    return set(re.findall(r"/reference/(prisample[\w.]*)\.md", block.group(1)))


def named_in_user_docs() -> str:
    pages = [
        p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.relative_to(ROOT / "docs").parts
    ]
    return "\n".join(p.read_text() for p in [*pages, ROOT / "README.md"])


def api_sections() -> set[str]:
    """The names the API guide's headings give a section of its own (``## CorrectedSampler``)."""
    return set(re.findall(r"^#+ `?(\w+)`?\s*$", (ROOT / "docs" / "api.md").read_text(), re.M))


def defines(module: str) -> set[str]:
    """The classes and functions defined at the top of ``module`` (read from its source)."""
    path = ROOT / Path(*module.split("."))
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(source.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}


def public(module: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(module)}\b", text) is not None or bool(defines(module) & api_sections())


def test_every_module_in_the_api_navigation_is_public() -> None:
    text = named_in_user_docs()
    unnamed = sorted(m for m in nav_modules() - {"prisample"} if not public(m, text))
    assert unnamed == [], f"internal modules in the API navigation (named on no user-facing page): {unnamed}"


def test_every_reference_page_is_in_the_navigation_or_out_of_it_on_purpose() -> None:
    pages = {p.stem for p in (ROOT / "docs" / "reference").glob("*.md")}
    nav, out = nav_modules(), not_in_nav_modules()
    assert not nav & out, sorted(nav & out)
    assert pages == nav | out, {"no page": sorted((nav | out) - pages), "unlisted": sorted(pages - nav - out)}
