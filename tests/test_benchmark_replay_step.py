"""Smoke test of ``benchmarks.replay_step``: the JSON's structure with tiny sizes (not its timings)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks import replay_step


def test_stream_repeats_and_continues() -> None:
    """Each step's obs continues the previous next_obs (or is a reset stack after an episode end),
    across the period's wrap-around too, so every library can replay the stream forever."""
    stream = replay_step.make_stream(16, seed=1)
    for s in range(stream.period):
        prev = (s - 1) % stream.period
        for e in range(replay_step.ENVS):
            obs = stream.obs[s, e]
            if stream.end[prev, e]:
                assert all(np.array_equal(obs[0], frame) for frame in obs)
            else:
                assert np.array_equal(obs, stream.next_obs[prev, e])
            assert np.array_equal(stream.next_obs[s, e][:-1], obs[1:])


def test_quick_run_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "replay_step.json"
    argv = ["--quick", "--sizes", "256", "--passes", "1", "--memory-n", "0", "--scratch", str(tmp_path)]
    replay_step.main([*argv, "--out", str(out)])
    results = json.loads(out.read_text())
    for key in ("command", "config", "machine", "workload", "sizes", "memory", "elapsed_s"):
        assert key in results
    for key in ("cpu", "date", "versions"):
        assert key in results["machine"]
    assert {"numpy", "torch", "cpprb", "torchrl"} <= set(results["machine"]["versions"])
    (block,) = results["sizes"]
    assert block["n"] == 256
    found, _ = replay_step.available_peers()
    assert set(block["libraries"]) == {"prisample", *found}
    for name, entry in block["libraries"].items():
        assert entry["n_measured"] == 256, name
        assert entry["us_per_step"] > 0 and len(entry["us_per_pass"]) == 1, name
        assert isinstance(entry["stacks_exact"], bool)
        if name != "prisample":
            assert len(entry["ratio_to_prisample"]["per_pass"]) == 1
    assert block["libraries"]["prisample"]["stacks_exact"]
    assert set(block["variants"]) == set(replay_step.VARIANTS)
    for entry in block["variants"].values():
        assert "skipped" in entry or "us_per_step" in entry
    assert not list(tmp_path.glob("replay_step_torchrl_*")), "TorchRL's memmap folder is removed"
    assert "| 2^8 | prisample |" in replay_step.libraries_table(results)
    rows = replay_step.targets(results).splitlines()[2:]
    assert all(row.startswith("| 2^8 |") for row in rows)
