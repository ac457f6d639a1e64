"""benchmarks/minatar_stack.py at a tiny size: what it writes, and the options it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("minatar")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")

from benchmarks import minatar_stack


def test_writes_per_process_rate_and_load_for_each_agent_count(tmp_path: Path) -> None:
    out = tmp_path / "stack.json"
    tiny = {"memory_size": 500, "learning_starts": 40, "batch_size": 8}
    minatar_stack.main(
        ["--agents", "1,5", "--steps", "40", "--evaluate", "0", "--set", json.dumps(tiny), "--out", str(out)]
    )
    written = json.loads(out.read_text())
    assert written["config"]["steps"] == 40 and "machine" in written
    assert [r["agents"] for r in written["runs"]] == [1, 5]
    for run in written["runs"]:
        assert run["learning_steps_per_agent"] == 40  # timed from the first update on, ε = 1 fill excluded
        assert run["updates_per_agent"] == 10  # one per K = 4 agent steps
        assert run["agent_steps_per_s"] == pytest.approx(run["agents"] * run["steps_per_s_per_agent"])
        assert run["agent_steps_per_s"] > 0 and len(run["loadavg_start"]) == len(run["loadavg_end"]) == 3
    arms = written["runs"][1]["arms"]  # the registered arms cycled, seeds counting up per arm
    assert arms[0].endswith("seed 0") and arms[-1].endswith("seed 1") and len(set(arms)) == 5


@pytest.mark.parametrize(
    "argv",
    [["--agents", "0"], ["--agents", "a"], ["--steps", "0"], ["--set", "[1]"], ["--env", "CartPole-x"]],
)
def test_refuses_bad_options(argv: list[str], tmp_path: Path) -> None:
    with pytest.raises((SystemExit, ValueError)):
        minatar_stack.main([*argv, "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()
