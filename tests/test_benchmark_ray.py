"""benchmarks/ray_replay.py runs (``--quick``) and writes the JSON the scaling page reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")


def test_quick_run_writes_every_case_with_its_ratio(tmp_path: Path, ray_local: Any) -> None:
    from benchmarks import ray_replay

    ray_local.shutdown()  # the benchmark starts its own Ray
    try:
        out = tmp_path / "ray_replay.json"
        ray_replay.main(["--quick", "--out", str(out)])
        report = json.loads(out.read_text())
    finally:
        ray_local.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    results = report["results"]
    for shards in (1, 2):
        for kind in ("add", "sample", "sample+update", "prefetched"):
            case = results[f"ray {shards} shard {kind}"]
            assert case["median_us"] > 0 and case["p99_us"] >= case["median_us"]
            assert case["ratio_median_to_local"] == pytest.approx(
                case["median_us"] / results[f"local {kind.replace('prefetched', 'sample')}"]["median_us"]
            )
    assert report["versions"]["ray"] and report["machine"] and report["shard_actor_start_s"] > 0
