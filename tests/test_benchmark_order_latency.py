"""Smoke test of ``benchmarks.order_latency``: the JSON's structure with tiny sizes (not its timings)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks import order_latency


def test_time_case_reports_ordered_percentiles() -> None:
    for workload in order_latency.WORKLOADS:
        entry = order_latency.time_case(256, 32, workload, calls=30, budget_s=10.0)
        assert entry["calls"] == 30
        for prefix in ("", "cpu_"):
            tail = [entry[f"{prefix}{q}_us"] for q in ("p50", "p99", "p999", "max")]
            assert tail[0] > 0 and tail == sorted(tail), (workload, prefix, tail)


def test_quick_run_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "order_latency.json"
    order_latency.main(["--quick", "--sizes", "1024", "--ks", "32", "--calls", "20", "--out", str(out)])
    results = json.loads(out.read_text())
    for key in ("command", "config", "machine", "commit", "baseline", "workloads", "cases", "elapsed_s"):
        assert key in results
    assert [(c["n"], c["k"], c["workload"]) for c in results["cases"]] == [
        (1024, 32, workload) for workload in order_latency.WORKLOADS
    ]
    for case in results["cases"]:
        entry = case["current"]
        assert entry["prisample_path"] == str(order_latency.ROOT / "prisample")
        assert entry["calls"] == 20 and entry["p50_us"] > 0 and entry["cpu_max_us"] > 0
    assert len(order_latency.table(results)) == 2 + len(order_latency.WORKLOADS)


def test_baseline_code_is_extracted_from_git(tmp_path: Path) -> None:
    """``--baseline REF`` times the ``prisample/`` of a revision (its numba compile makes a full
    baseline case too slow for a smoke test: only the extraction is checked here)."""
    found = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=order_latency.ROOT, capture_output=True, check=False
    )
    if found.returncode != 0:
        pytest.skip("not a git checkout")
    assert order_latency._extract("HEAD", tmp_path) == found.stdout.decode().strip()
    assert (tmp_path / "prisample" / "order.py").is_file()
    assert not (tmp_path / "code.tar").exists()
