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
    # the copy floor, prisample's phases against it, the 16-env add, the bounds met or not
    assert len(results["loadavg_start"]) == 3 and len(block["loadavg_end"]) == 3
    assert results["torch_threads"] == 1 and results["step_bounds"] == replay_step.STEP_BOUNDS
    floor = block["copy_floor"]
    assert floor["us"] > 0 and floor["frames_per_batch"] == 160 and floor["batch_shape"] == [32, 5, 84, 84]
    for entry in block["libraries"].values():
        assert len(entry["ratio_to_copy_floor"]["per_pass"]) == 1
    phases = block["phases"]
    for key in (*replay_step.PHASES, "step"):
        assert phases[key]["us"] > 0 and phases[key]["ratio_to_copy_floor"]["median"] > 0, key
    parts = sum(phases[key]["us"] for key in replay_step.PHASES)
    assert parts <= phases["step"]["us"] * 1.05, "the phases are clocked inside the step"
    vector = block["vector_add"]
    assert vector["envs"] == 16 and vector["us_per_transition"] == vector["us_per_call"] / 16
    assert set(block["targets"]) == {"step_over_copy_floor", "add_us", "vector_add_us_per_transition"} | (
        {"cpprb_over_prisample"} if "cpprb" in found else set()
    )
    for key, t in block["targets"].items():
        assert t["bound"] == replay_step.STEP_BOUNDS[key] and isinstance(t["met"], bool)
    assert "| 2^8 | copy floor (160 frames, one take) |" in replay_step.libraries_table(results)
    assert "| 2^8 | add_many, 16 envs | ≤ 5 µs per transition |" in replay_step.targets(results)
    assert "| 2^8 | add, 4-env vector step | ≤ 40 µs per call |" in replay_step.targets(results)


def test_copy_floor_copies_the_frames_sample_returns() -> None:
    """The floor reads the rows that ``sample`` gathers: the same frames as the batch's ``obs`` and
    ``next_obs`` (160 for 32 one-step transitions), into its preallocated array."""
    stream = replay_step.make_stream(64, seed=2)
    contender = replay_step.Prisample(stream, 512)
    contender.fill(512)
    batch, draw = contender.replay.sample(replay_step.BATCH)
    rows = replay_step.frame_rows(contender.replay, draw.indices)
    assert rows.shape == (32, 5)
    frames = contender.replay.memory.frame_pool.storage.to_numpy()[rows]  # type: ignore[union-attr]
    assert np.array_equal(frames[:, :4], batch["obs"])
    assert np.array_equal(frames[:, 1:], batch["next_obs"])
    floor = replay_step.CopyFloor(contender, batches=3)
    out = floor.out[5]
    for i in range(4):
        floor()
        want = floor.frames[floor.rows[i % 3]]
        assert np.array_equal(out, want), i
    assert floor.info()["frames_per_batch"] == 160
