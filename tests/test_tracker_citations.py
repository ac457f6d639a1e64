"""No code, test or page cites this project's tracker by number: a bare issue or pull-request number
tells a reader nothing; the text says what the piece does or which measurement it answers instead.
Another project's issue stays citable as ``owner/repo#N`` (``pytorch/rl#2210``), which names where
to look.  CHANGELOG.md, the history of the tracker's work, is not read; nor are the JSON files
commands wrote."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = ("prisample", "recipes", "benchmarks", "tests", "docs")
FILES = ("README.md", "CONTRIBUTING.md", "Makefile", "mkdocs.yml", "pyproject.toml", "conftest.py")
SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".ini", ".csv", ".html", ".js"}
CITATION = re.compile(
    r"(?<![a-z])(?:issues?|PRs?|pull requests?|tickets?)[\s_-]*(?:no\.?\s*)?#?\d+"  # also in names
    r"|(?<![\w.-])#\d+\b",  # a number alone; in owner/repo#N the repository's name precedes it
    re.IGNORECASE,
)
"""A tracker number: after "issue", "PR", "pull request" or "ticket" (in prose, or in a name that
joins the word and the number), or a ``#`` and digits that no repository's name precedes."""


def citations(text: str) -> list[str]:
    """The tracker-number citations in ``text``, each as ``line N: <the match>``."""
    return [
        f"line {number}: {match.group(0)}"
        for number, line in enumerate(text.splitlines(), 1)
        for match in CITATION.finditer(line)
    ]


def sources() -> list[Path]:
    found = [ROOT / name for name in FILES if (ROOT / name).is_file()]
    for tree in TREES:
        found += [p for p in (ROOT / tree).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return sorted(found)


def test_no_file_cites_this_projects_tracker() -> None:
    files = sources()
    assert len(files) > 100, "the trees were not found"
    cited = {
        str(p.relative_to(ROOT)): hits for p in files if (hits := citations(p.read_text(encoding="utf-8")))
    }
    assert cited == {}


# The samples spell "#" as {h} and "issue" as {i}, so that this file passes its own check.
SAMPLES = [
    ("the device replay step ({i} 24): no sync", ["{i} 24"]),
    ("{I} 23's bounds; {i}s 24 and 25", ["{I} 23", "{i}s 24"]),
    ("the {i}-23 bounds, {I}23, targets_{i}24", ["{i}-23", "{I}23", "{i}24"]),
    ("fixed in ({h}12) and in PR {h}3", ["{h}12", "PR {h}3"]),
    ("reported as pytorch/rl{h}2210 and Farama-Foundation/Gymnasium{h}1334", []),
    ("an {i} of ordering, 24 {i}s in all, step {h}-1, color {h}1f77b4", []),
]


@pytest.mark.parametrize(
    ("line", "found"),
    [
        (line.format(h="#", i="issue", I="Issue"), [f.format(h="#", i="issue", I="Issue") for f in found])
        for line, found in SAMPLES
    ],
)
def test_the_check_tells_a_tracker_number_from_a_citation_of_another_project(
    line: str, found: list[str]
) -> None:
    assert [hit.partition(": ")[2] for hit in citations(line)] == found
