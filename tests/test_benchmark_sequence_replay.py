"""Smoke test of ``benchmarks.sequence_replay``: the JSON's structure at a tiny size (not its
timings), and the parts whose mistakes a timing would hide: the peers' capacity, the copy floor's
rows, the window checks, the targets."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks import report
from benchmarks import sequence_replay as sr
from benchmarks.replay_step import make_stream
from tests.test_docs_numbers import marked_blocks, problems

FLASHBAX = os.environ.get("FLASHBAX_PATH")  # a folder holding flashbax and jax, when there is one


def test_quick_run_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "sequence_replay.json"
    argv = ["--quick", "--sizes", "2048", "--passes", "1", "--scratch", str(tmp_path), "--out", str(out)]
    sr.main([*argv, *(["--flashbax-path", FLASHBAX] if FLASHBAX else [])])
    results = json.loads(out.read_text())
    for key in ("command", "config", "machine", "workload", "sizes", "elapsed_s", "loadavg_start"):
        assert key in results
    assert results["torch_threads"] == 1 and results["targets_bounds"] == sr.TARGETS
    found, missing = sr.available(FLASHBAX)
    assert set(found) | set(missing) == {"prisample", "TorchRL", "Flashbax"}
    (block,) = results["sizes"]
    assert block["n"] == 2048 and set(block["libraries"]) == set(found)
    for name, entry in block["libraries"].items():
        assert "error" not in entry, (name, entry.get("error"))
        assert entry["us_per_batch"] > 0 and len(entry["us_per_pass"]) == 1, name
        assert entry["windows_exact"] is True, name
        assert len(entry["ratio_to_copy_floor"]["per_pass"]) == 1, name
        if name != "prisample" and "prisample" in found:
            assert len(entry["ratio_to_prisample"]["per_pass"]) == 1, name
    floor = block["copy_floor"]
    assert floor["frames_per_batch"] == sr.BATCH * (sr.W + sr.STACK) and floor["us"] > 0
    assert floor["batch_shape"] == [sr.BATCH, sr.W + sr.STACK, *sr.FRAME]
    if "prisample" in found:
        assert set(block["targets"]) == set(sr.TARGETS) - (
            set() if len(found) > 1 else {"peer_over_prisample"}
        )
    table = sr.libraries_table(results)
    assert all(f"| 2^11 | {name} |" in table for name in found)
    assert "| 2^11 | copy floor (7,936 frames, one take) |" in table
    assert not list(tmp_path.glob("sequence_replay_torchrl_*")), "TorchRL's memmap folder is removed"
    # the section's tables pass the docs' numbers check against this JSON, and follow its numbers
    json_at = tmp_path / report.TABLES["sequence_replay.libraries"].json
    json_at.parent.mkdir(parents=True)
    json_at.write_text(out.read_text())
    for name in ("sequence_replay.run", "sequence_replay.libraries", "sequence_replay.targets"):
        text = report.TABLES[name].markdown(results)
        doc = tmp_path / f"{name}.md"
        doc.write_text(text + "\n")
        assert [p for b in marked_blocks(doc) for p in problems(b, root=tmp_path)] == [], name
    faster = json.loads(out.read_text())
    for entry in faster["sizes"][0]["libraries"].values():
        entry["ms_per_batch"] *= 1.37
    assert sr.libraries_table(faster) != table, "the table follows the JSON's numbers"


def test_without_arguments_prints_usage_and_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    sr.main([])
    assert "usage" in capsys.readouterr().out


def test_peer_capacity_fits_or_says_why() -> None:
    step = sr.STACK_STEP_BYTES
    batches = 3 * sr.BATCH * (sr.W + 1) * step
    assert sr.peer_capacity(10_000, 2 * (10_000 * step + batches) + 100, 2, 100) == (10_000, "")
    n, why = sr.peer_capacity(10**6, 2 * (100_150 * step + batches) + 100, 2, 100)
    assert n == 100_000 and n % (sr.STREAMS * sr.PERIOD) == 0  # down to the period grid of 4 streams
    assert "holds 100000 steps each" in why and "2 peers at N = 1000000" in why
    assert sr.peer_capacity(10**6, 10**9, 0, 0) == (10**6, "")


def test_copy_floor_copies_the_windows_rows() -> None:
    frames = np.random.default_rng(0).integers(0, 256, (3000, 6, 5), dtype=np.uint8)
    floor = sr.CopyFloor(frames, batches=3)
    rows = floor.rows[1]
    assert rows.shape == (sr.BATCH, sr.W + sr.STACK)
    assert np.all(np.diff(rows, axis=1) == sr.STREAMS) and rows.max() < len(frames)
    floor()
    floor()
    assert np.array_equal(floor.out, frames[rows])


def test_torchrl_window_check_sees_a_wrong_window(tmp_path: Path) -> None:
    pytest.importorskip("torchrl")
    stream = make_stream(64, seed=4, envs=sr.STREAMS)
    peer = sr.TorchRL(stream, 1600, sr.td_errors(), str(tmp_path))
    try:
        peer.fill(2400)  # wraps around the ring of 400 time steps
        assert peer.exact()
        peer.step()
        peer.cursor += 1  # the check now maps every record to the step after it
        assert not peer.exact()
    finally:
        peer.close()


def test_prisample_window_check_sees_a_wrong_window() -> None:
    stream = make_stream(64, seed=5, envs=sr.STREAMS)
    mine = sr.Prisample(stream, 2048, sr.td_errors())
    mine.fill(3000)
    assert mine.exact()
    mine.step()
    mine.stream = make_stream(64, seed=6, envs=sr.STREAMS)
    assert not mine.exact()


def _block(**libs: Any) -> dict[str, Any]:
    return {"n": 1 << 20, "libraries": libs}


def test_targets_met_and_missed() -> None:
    def ratio(m: float) -> dict[str, Any]:
        return {"median": m, "per_pass": [m]}

    block = _block(
        prisample={"ratio_to_copy_floor": ratio(1.9), "nbytes_per_step": 7400.0},
        TorchRL={"ratio_to_prisample": ratio(9.0)},
        Flashbax={"ratio_to_prisample": ratio(3.5)},
    )
    t = sr.size_targets(block)
    assert t["peer_over_prisample"] == {"bound": 3.0, "measured": 3.5, "against": "Flashbax", "met": True}
    assert t["prisample_over_copy_floor"]["met"] and t["bytes_per_step"]["met"]
    block["libraries"]["Flashbax"]["ratio_to_prisample"] = ratio(2.5)
    block["libraries"]["prisample"] = {"ratio_to_copy_floor": ratio(2.1), "nbytes_per_step": 7600.0}
    t = sr.size_targets(block)
    assert not any(v["met"] for v in t.values())
    rows = sr.targets({"sizes": [{**block, "targets": t}]}).splitlines()[2:]
    assert len(rows) == 3 and all(r.startswith("| 2^20 |") and r.endswith("| **no** |") for r in rows)
    assert sr.size_targets(_block(TorchRL={})) == {}
