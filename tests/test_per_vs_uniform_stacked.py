"""The registered study through the stacked engine (recipes/studies/per_vs_uniform_stacked.py):
its command line, its plan, a tiny run stopped and continued, and what it refuses up front."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("minatar")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")
pytest.importorskip("matplotlib")

from recipes.studies import per_vs_uniform, per_vs_uniform_config, per_vs_uniform_stacked
from recipes.studies.per_vs_uniform_config import StackedConfig, parse_command, stacked_plan
from recipes.studies.per_vs_uniform_stacked import checkpoint_path, run_stacked, train_env

ENV = "MinAtar/Breakout-v1"
TINY = {"learning_starts": 100, "eval_every": 100, "eval_steps": 60, "memory_size": 500, "log_every": 50}


def _config(runs: Path, **extra: Any) -> StackedConfig:
    values: dict[str, Any] = dict(envs=ENV, jobs=1, runs=str(runs), seeds=1, total_steps=300, set=TINY)
    values.update(extra)
    values["progress"] = False
    return StackedConfig(**values)


def test_stacked_command_parses_and_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    config = parse_command(["stacked", "--envs", ENV, "--checkpoint_every", "1000"])
    assert isinstance(config, StackedConfig) and config.envs == (ENV,) and config.checkpoint_every == 1000
    with pytest.raises(SystemExit):
        parse_command(["stacked", "--envs", "MinAtar/Pong-v1"])
    assert "envs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="time_budget_s"):
        StackedConfig(envs=(ENV,), time_budget_s=0.0)
    with pytest.raises(SystemExit):
        per_vs_uniform.main(["stacked"])  # --envs is required


def test_plan_takes_the_measured_rate_of_as_many_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process trains every registered arm x seed: the benchmark's run with that many agents gives
    the rate, two processes side by side; "about" only for the game the benchmark ran."""
    registered = per_vs_uniform_config.load_protocol()["envs"][ENV]
    agents = len(registered["arms"]) * len(registered["seeds"])
    runs = [
        {"agents": 1, "agent_steps_per_s": 50.0},
        {"agents": agents - 1, "agent_steps_per_s": 100.0},
        {"agents": agents, "agent_steps_per_s": 600.0},
    ]
    (tmp_path / "bench.json").write_text(json.dumps({"config": {"env": ENV}, "runs": runs}))
    monkeypatch.setattr(per_vs_uniform_config, "STACK_BENCHMARKS", {"MinAtar": str(tmp_path / "bench.json")})
    plan = stacked_plan(StackedConfig(envs=(ENV, "MinAtar/Asterix-v1"), jobs=2))
    assert plan.steps == 2 * agents * registered["total_steps"]
    assert plan.rate is not None and plan.rate.steps_per_s == 600.0 and not plan.exact
    assert plan.estimate_s() == pytest.approx(2 * agents * registered["total_steps"] / (600.0 * 2))
    alone = stacked_plan(StackedConfig(envs=(ENV,)))
    assert alone.exact and f"{agents} agents in one process on {ENV}" in alone.summary()
    assert not stacked_plan(StackedConfig(envs=(ENV,), total_steps=20_000)).exact

    # ``run`` trains one agent per process: the benchmark's one-agent rate, whatever the records say
    separate = per_vs_uniform_config.run_plan(per_vs_uniform_config.RunConfig(envs=(ENV,), jobs=2))
    assert separate.rate is not None and separate.rate.steps_per_s == 50.0 and separate.exact
    assert separate.estimate_s() == pytest.approx(separate.steps / (50.0 * 2))

    # an environment no benchmark measured: the fastest rate found, as a lower bound; none: unknown
    both = stacked_plan(StackedConfig(envs=(ENV, "CartPole-v1"), jobs=2))
    assert both.rate is not None and both.rate.steps_per_s == 600.0 and not both.exact
    # a benchmark without evaluations: the summary says how many agent steps the evaluations add
    assert "evaluations add" not in alone.summary()
    unevaluated = {"config": {"env": ENV, "evaluate": False}, "runs": runs}
    (tmp_path / "bench.json").write_text(json.dumps(unevaluated))
    every, most = registered["set"]["eval_every"], registered["set"]["eval_steps"]
    per_run = (-(-registered["total_steps"] // every) + 1) * most
    estimate = stacked_plan(StackedConfig(envs=(ENV,))).summary().splitlines()[1]
    assert estimate.endswith(
        f"; evaluations add at most {agents * per_run:,} agent steps, which it leaves out"
    )
    missing = {"MinAtar": str(tmp_path / "missing.json")}
    monkeypatch.setattr(per_vs_uniform_config, "STACK_BENCHMARKS", missing)
    assert stacked_plan(StackedConfig(envs=(ENV,))).rate is None


def test_stopped_process_continues_to_the_same_record(tmp_path: Path) -> None:
    """Stopped at 150 steps and run again: the sweep record of one uninterrupted run; a third call
    reuses the finished runs without training."""
    whole = run_stacked(_config(tmp_path / "whole"), [])
    assert run_stacked(_config(tmp_path / "parts", stop_after=150), []) == {}
    assert checkpoint_path(_config(tmp_path / "parts"), ENV).exists()
    assert not (tmp_path / "parts" / "MinAtar_Breakout-v1.json").exists()
    parts = run_stacked(_config(tmp_path / "parts"), [])
    for name, curve in whole[ENV].items():
        assert parts[ENV][name]["returns"] == curve["returns"]
        assert parts[ENV][name]["steps"] == curve["steps"] == [100, 200, 300]
    assert set(whole[ENV]) == set(per_vs_uniform_config.load_protocol()["envs"][ENV]["arms"])
    record = json.loads((tmp_path / "parts" / "MinAtar_Breakout-v1.json").read_text())
    assert record.keys() == whole[ENV].keys()
    again = train_env(ENV, _config(tmp_path / "parts"))
    assert again["reused"] and len(again["results"]) == len(whole[ENV])
    walls = [r["wall_s"] for r in again["results"]]  # over both processes of the stacked run
    assert all(r["resumes"] == 1 for r in again["results"]) and again["run_wall_s"] == max(walls)


def test_record_of_runs_resumed_before_their_wall_time_was_kept_says_it_is_unknown(tmp_path: Path) -> None:
    """A result written before runs counted their resumes took its wall time from its last process
    alone: where source.json lists two starts, the record gives no wall time and no speed."""
    config = _config(tmp_path)
    run_stacked(_config(tmp_path, stop_after=150), [])
    run_stacked(config, [])
    for path in tmp_path.glob("runs/**/result.json"):
        old = json.loads(path.read_text())
        del old["resumes"]
        path.write_text(json.dumps(old))
    again = train_env(ENV, config)
    assert again["run_wall_s"] is None
    assert all(r["wall_s"] is None and r["steps_per_s"] is None for r in again["results"])
    run_stacked(config, [])
    table = (tmp_path / "MinAtar_Breakout-v1.md").read_text()
    assert "sweep wall time: unknown" in table
    record = json.loads((tmp_path / "MinAtar_Breakout-v1.json").read_text())
    assert all(set(curve["wall_s"]) == {None} for curve in record.values())
    for path in tmp_path.glob("runs/**/source.json"):  # one start only: the last process was the run
        path.write_text(json.dumps(json.loads(path.read_text())[:1]))
    once = train_env(ENV, config)
    assert once["run_wall_s"] is not None and all(r["resumes"] == 0 for r in once["results"])


def test_agents_that_cannot_stack_are_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def started(*_: Any, **__: Any) -> None:
        raise AssertionError("a process started before every environment's agents were checked")

    monkeypatch.setattr(per_vs_uniform_stacked, "train_stacked", started)
    config = _config(tmp_path / "refused", set={**TINY, "optimizer": "rmsprop"})
    with pytest.raises(ValueError, match="optimizer"):
        run_stacked(config, [])
    assert not (tmp_path / "refused").exists()
