"""Where a run's code came from: the commit of the source tree and whether the tree was clean.

A registered result is only as good as the record of what produced it, so every training process
writes, into each run directory it starts or resumes, one entry of ``source.json``::

    [{"commit": "<40 hex digits>", "clean": true, "started": "2026-11-28T09:45:00+00:00"}, ...]

``clean`` is ``git status --porcelain --untracked-files=no`` of the tree being empty: no tracked
file differs from the commit (untracked outputs such as ``runs/`` do not count).  Outside a git
checkout (an installed copy) ``commit`` and ``clean`` are ``None``.  A resumed run appends an
entry, so a run continued from another commit shows both.  Reports read the entries back with
:func:`run_sources` and print where every run came from.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["SOURCE_FILE", "describe", "now", "record_start", "run_sources", "source_tree", "tally"]

SOURCE_FILE = "source.json"
ROOT = Path(__file__).resolve().parents[2]


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def source_tree(root: str | Path | None = None) -> dict[str, Any]:
    """``{"commit", "clean"}`` of the git tree at ``root`` (default: this checkout)."""
    where = Path(root) if root is not None else ROOT
    commit = _git(where, "rev-parse", "HEAD")
    status = _git(where, "status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "clean": None if status is None else status == ""}


def now() -> str:
    """The current UTC time, to the second, in ISO 8601 (the ``started`` of an entry)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def record_start(run_dir: str | Path, source: dict[str, Any] | None = None) -> dict[str, Any]:
    """Append ``source`` (default: :func:`source_tree` of this checkout; a process starting many
    runs asks git once) with ``started`` :func:`now` to ``run_dir/source.json``, created if
    absent; the entry."""
    path = Path(run_dir) / SOURCE_FILE
    entries = json.loads(path.read_text()) if path.exists() else []
    entry = {**(source_tree() if source is None else source), "started": now()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([*entries, entry], indent=1) + "\n")
    return entry


def tally(runs: Iterable[list[dict[str, Any]] | None]) -> dict[str, Any]:
    """Where runs came from, each given as its list of entries (``None``: no record):
    ``{"runs", "commits": {commit: runs}, "all_clean", "unrecorded"}``; a run counts under every
    commit it started or resumed from, ``all_clean`` says whether every recorded start was from a
    clean tree, ``unrecorded`` counts the runs without a record."""
    commits: Counter[str] = Counter()
    unrecorded, count, clean = 0, 0, True
    for entries in runs:
        count += 1
        if not entries:
            unrecorded += 1
            continue
        for commit in dict.fromkeys(str(e["commit"]) for e in entries):
            commits[commit] += 1
        clean = clean and all(e["clean"] is True for e in entries)
    return {"runs": count, "commits": dict(commits), "all_clean": clean, "unrecorded": unrecorded}


def run_sources(run_dirs: Iterable[str | Path]) -> dict[str, Any]:
    """:func:`tally` of the ``source.json`` records in ``run_dirs``."""
    paths = (Path(d) / SOURCE_FILE for d in run_dirs)
    return tally(json.loads(p.read_text()) if p.exists() else None for p in paths)


def describe(sources: dict[str, Any]) -> str:
    """One line for a report: the commits the runs came from, and whether every tree was clean."""
    if not sources.get("commits"):
        return "Code: the runs' records name no commit (they predate the record)."
    commits = ", ".join(f"`{c[:10]}` ({n} runs)" for c, n in sources["commits"].items())
    clean = "every start from a clean tree" if sources["all_clean"] else "not every start from a clean tree"
    missing = f"; {sources['unrecorded']} runs without a record" if sources.get("unrecorded") else ""
    return f"Code: {commits}; {clean}{missing}."
