"""Smoke test of ``benchmarks.torchrl_sampler``: the JSON's structure with tiny sizes (not its timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torchrl")

from benchmarks import torchrl_sampler


def test_quick_run_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "torchrl_sampler.json"
    argv = ["--quick", "--sizes", "512", "--batches", "32", "64", "--rounds", "2", "--block", "3"]
    torchrl_sampler.main([*argv, "--out", str(out)])
    results = json.loads(out.read_text())
    for key in ("benchmark", "command", "config", "machine", "workload", "cases", "elapsed_s"):
        assert key in results
    assert results["command"].startswith("OMP_NUM_THREADS=1 python -m benchmarks.torchrl_sampler --quick")
    for key in ("cpu", "date", "versions"):
        assert key in results["machine"]
    assert {"torch", "torchrl", "tensordict"} <= set(results["machine"]["versions"])
    assert [(c["capacity"], c["batch"]) for c in results["cases"]] == [(512, 32), (512, 64)]
    for case in results["cases"]:
        assert set(case["samplers"]) == set(torchrl_sampler.SAMPLERS)
        assert "others_cpus" in case["load"]
        for name, entry in case["samplers"].items():
            assert entry["steps"] == 6, name
            assert 0 < entry["median_us"] <= entry["p99_us"], name
            if name == "TorchRL":
                assert "torchrl_over_this" not in entry
            else:
                assert set(entry["torchrl_over_this"]) == {"median", "p99"}


def test_quick_run_without_out_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchrl_sampler, "DEFAULT_OUT", tmp_path / "default.json")
    torchrl_sampler.main(
        [
            "--quick",
            "--sizes",
            "256",
            "--batches",
            "32",
            "--rounds",
            "1",
            "--block",
            "2",
            "--samplers",
            "prisample",
        ]
    )
    assert not (tmp_path / "default.json").exists()
