"""Where a run's code came from (``recipes.common.provenance``): against real git trees."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from recipes.common.provenance import describe, now, record_start, run_sources, source_tree, tally


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "code.py").write_text("x = 1\n")
    _git(root, "add", "code.py")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return root


def test_commit_and_clean_tree_are_recorded(repo: Path) -> None:
    here = source_tree(repo)
    assert here["commit"] == _git(repo, "rev-parse", "HEAD") and len(here["commit"]) == 40
    assert here["clean"] is True
    (repo / "runs").mkdir()
    (repo / "runs" / "out.csv").write_text("untracked outputs do not count\n")
    assert source_tree(repo)["clean"] is True
    (repo / "code.py").write_text("x = 2\n")  # a tracked file changed: not the commit's code
    assert source_tree(repo) == {"commit": here["commit"], "clean": False}


def test_outside_a_checkout_nothing_is_claimed(tmp_path: Path) -> None:
    assert source_tree(tmp_path) == {
        "commit": None,
        "clean": None,
    }


def test_starts_append_and_runs_are_tallied(repo: Path, tmp_path: Path) -> None:
    first = source_tree(repo)
    run_a, run_b, run_c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    record_start(run_a, first)
    (repo / "code.py").write_text("x = 3\n")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "second")
    second = source_tree(repo)
    record_start(run_a, second)  # resumed from another commit: both are kept, in order
    record_start(run_b, second)
    entries = json.loads((run_a / "source.json").read_text())
    assert [e["commit"] for e in entries] == [first["commit"], second["commit"]]
    assert all(set(e) == {"commit", "clean", "started"} and e["started"] <= now() for e in entries)
    sources = run_sources([run_a, run_b, run_c])
    assert sources == {
        "runs": 3,
        "commits": {first["commit"]: 1, second["commit"]: 2},
        "all_clean": True,
        "unrecorded": 1,
    }
    (repo / "code.py").write_text("x = 4\n")
    record_start(run_b, source_tree(repo))  # a resume from a dirty tree taints the tally
    assert run_sources([run_a, run_b])["all_clean"] is False
    line = describe(sources)
    assert line.startswith(f"Code: `{first['commit'][:10]}` (1 runs), `{second['commit'][:10]}` (2 runs)")
    assert line.endswith("every start from a clean tree; 1 runs without a record.")


def test_no_record_says_so() -> None:
    assert tally([None, None]) == {"runs": 2, "commits": {}, "all_clean": True, "unrecorded": 2}
    assert "name no commit" in describe(tally([None]))
