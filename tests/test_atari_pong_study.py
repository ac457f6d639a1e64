"""The registered 10M-frame Pong study (``recipes/studies/atari_pong*.py``) and what it added to the
Double DQN recipe: Dopamine's protocol file, sticky actions, the cumulative training return in
``metrics.csv``, configs written before a field existed.

The study's runs need a GPU; here its order, gate, iteration curves and merge are checked on
synthetic records, and ``next`` runs end to end on the CPU with the protocol shrunk to a few
hundred steps.
"""

from __future__ import annotations

import copy
import csv
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")
pytest.importorskip("yaml")

from recipes.common import cli
from recipes.dqn.config import DDQNConfig, load_config, same_config
from recipes.dqn.envs import make_env
from recipes.dqn.loop import LoopState, metrics_row
from recipes.dqn.parts import COLUMNS, Logger
from recipes.studies import atari_pong, atari_pong_report
from recipes.studies.atari_pong_config import MergeConfig, NextConfig, load_protocol, parse_command, planned

PROTOCOL = load_protocol()
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_each_registered_run_is_the_paper_arm_under_dopamines_protocol() -> None:
    for arm in PROTOCOL["arms"]:
        cfg = atari_pong.run_config(PROTOCOL, arm, 3, "runs/x", {})
        assert (cfg.env, cfg.arm, cfg.seed, cfg.total_steps) == ("ALE/Pong-v5", arm, 3, 2_500_000)
        # dqn.gin and atari_lib: sticky actions, no no-ops, its schedule and exploration
        assert cfg.repeat_action_probability == 0.25 and cfg.noop_max == 0
        assert (cfg.learning_starts, cfg.target_update_period, cfg.eps_decay_steps) == (
            20_000,
            8_000,
            250_000,
        )
        assert (cfg.eps_end, cfg.eval_epsilon, cfg.terminal_on_life_loss) == (0.01, 0.001, False)
        assert cfg.schedule_horizon == 50_000_000 and cfg.device == "cuda"
    assert load_config("ALE/Pong-v5", "rank", protocol="dopamine_atari").lr_divisor == 4.0
    assert PROTOCOL["total_steps"] * 4 == 10_000_000  # frames
    curves = PROTOCOL["references"]["curves"]
    assert all(len(c) == PROTOCOL["total_steps"] // PROTOCOL["iteration_steps"] for c in curves.values())


def test_runs_go_seed_by_seed_and_the_next_is_the_first_missing() -> None:
    order = planned(PROTOCOL)
    assert order[:4] == [("uniform", 0), ("proportional", 0), ("rank", 0), ("uniform", 1)]
    assert len(order) == len(set(order)) == 15
    held = {"runs": [{"arm": "uniform", "seed": 0}, {"arm": "rank", "seed": 0}]}
    assert atari_pong.pending(PROTOCOL, held)[:2] == [("proportional", 0), ("uniform", 1)]
    assert atari_pong.pending(PROTOCOL, None) == order


def test_a_run_needs_the_gate_and_time_to_finish_within_the_call() -> None:
    gate = PROTOCOL["gate"]
    assert atari_pong.required_rate(PROTOCOL, 1_000, 1_000.0) == gate["min_agent_steps_per_s"]
    training_s = 400.0 - gate["allowance_s"]
    assert atari_pong.required_rate(PROTOCOL, 10_000_000, 400.0) == pytest.approx(10_000_000 / training_s)
    assert atari_pong.required_rate(PROTOCOL, 1_000, gate["allowance_s"]) == math.inf


def _metrics(path: Path, rows: list[tuple[int, int, float]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "train/episodes", "train/return_sum"])
        writer.writerows(rows)
    return path


def test_an_iteration_is_the_mean_return_of_the_episodes_that_ended_within_it(tmp_path: Path) -> None:
    # episodes: 2 end in iteration 0 (returns -21, -19), none in 1, 3 in 2 (-10, -8, -6)
    rows = [
        (50, 1, -21.0),
        (100, 2, -40.0),
        (150, 2, -40.0),
        (200, 2, -40.0),
        (250, 4, -58.0),
        (300, 5, -64.0),
    ]
    means, counts = atari_pong.iteration_returns(_metrics(tmp_path / "m.csv", rows), 100, 3)
    assert counts == [2, 0, 3]
    assert means[0] == -20.0 and math.isnan(means[1]) and means[2] == -8.0
    with pytest.raises(ValueError, match="metrics_csv should have a row at step 400"):
        atari_pong.iteration_returns(tmp_path / "m.csv", 100, 4)


def test_metrics_rows_carry_the_sum_of_the_finished_episodes_returns() -> None:
    class Sampler:
        alpha, beta, max_priority = 0.6, 0.4, 1.0

    class Replay:
        sampler = Sampler()

        def __len__(self) -> int:
            return 0

    state = LoopState(0, 0, 0, 0, None, np.zeros(2), np.zeros(2, dtype=bool), np.zeros(2), np.zeros(2))
    state.episode_returns = [-21.0, 3.5, 7.0]
    row = metrics_row(state, 0.5, Replay(), 1.0)  # type: ignore[arg-type]
    assert row["train/return_sum"] == -10.5 and row["train/episodes"] == 3
    assert "train/return_sum" in COLUMNS["metrics"]


def test_a_resumed_log_keeps_the_columns_its_file_began_with(tmp_path: Path) -> None:
    old = [c for c in COLUMNS["metrics"] if c != "train/return_sum"]  # a file of the previous version
    (tmp_path / "metrics.csv").write_text(",".join(old) + "\n")
    logger = Logger(tmp_path, tensorboard=False, resume=True)
    logger.log("metrics", 10, {"train/episodes": 2.0, "train/return_sum": -5.0, "updates": 1.0})
    rows = list(csv.reader((tmp_path / "metrics.csv").open()))
    assert rows[0] == old and len(rows[1]) == len(old)
    assert dict(zip(rows[0], rows[1], strict=True))["train/episodes"] == "2.0"


def test_configs_written_before_a_field_existed_still_match_at_its_default() -> None:
    cfg = load_config("ALE/Pong-v5", "uniform")
    stored = json.loads(json.dumps(asdict(cfg)))
    del stored["repeat_action_probability"]
    assert same_config(stored, cfg)
    assert not same_config(stored, load_config("ALE/Pong-v5", "uniform", repeat_action_probability=0.25))
    assert not same_config({**stored, "seed": 1}, cfg)


def test_sticky_actions_are_atari_only_and_below_one() -> None:
    with pytest.raises(cli.ConfigError, match="repeat_action_probability"):
        DDQNConfig(env="CartPole-v1", repeat_action_probability=0.25)
    with pytest.raises(cli.ConfigError, match="repeat_action_probability"):
        DDQNConfig(repeat_action_probability=1.0)
    with pytest.raises(ValueError, match=r"repeat_action_probability=0\.5"):
        make_env("CartPole-v1", 1, repeat_action_probability=0.5)


def _frames(backend: str, sticky: float) -> np.ndarray:
    env, _ = make_env("ALE/Pong-v5", 1, backend=backend, noop_max=0, repeat_action_probability=sticky)  # type: ignore[arg-type]
    obs, _ = env.reset(seed=5)
    actions = np.random.default_rng(0).integers(0, env.single_action_space.n, 150)  # type: ignore[attr-defined]
    seen = [obs]
    for a in actions:
        obs, *_ = env.step(np.array([a]))
        seen.append(obs)
    env.close()
    return np.stack(seen)


@pytest.mark.parametrize("backend", ["vector", "gymnasium"])
def test_sticky_actions_reach_the_emulator(backend: str) -> None:
    plain = _frames(backend, 0.0)
    assert np.array_equal(plain, _frames(backend, 0.0))  # the same seed and actions replay exactly
    assert not np.array_equal(plain, _frames(backend, 0.25))  # repeated actions move the paddle otherwise


def _record(arm: str, seed: int, **changes: Any) -> dict[str, Any]:
    curve = list(np.linspace(-20.0, -5.0 + seed + (3 if arm == "rank" else 0), 10))
    record = {
        "study": "atari_pong",
        "arm": arm,
        "seed": seed,
        "registered": True,
        "overrides": {},
        "protocol": copy.deepcopy(PROTOCOL),
        "device_name": "NVIDIA H200",
        "source": {"commit": COMMIT, "clean": True, "started": "2026-11-28T12:00:00+00:00"},
        "complete": True,
        "stopped": "done",
        "steps": PROTOCOL["total_steps"],
        "iteration_returns": curve,
        "auc": float(np.mean(curve)),
        "final": curve[-1],
        "eval_score": curve[-1] + 1,
        "learning_steps_per_s": 8_500.0,
    }
    record.update(changes)
    return record


def _write(tmp_path: Path, records: list[dict[str, Any]]) -> tuple[str, ...]:
    paths: list[str] = []
    for r in records:
        path = tmp_path / f"{r['arm']}_{r['seed']}_{len(paths)}.json"
        path.write_text(json.dumps(r))
        paths.append(str(path))
    return tuple(paths)


def test_merged_runs_accumulate_and_aggregate_from_three_seeds(tmp_path: Path) -> None:
    results = tmp_path / "atari_pong.json"
    first = _write(tmp_path, [_record("rank", 0), _record("uniform", 0)])
    merged = atari_pong_report.merge(MergeConfig(first, str(results)), [])
    assert [(r["arm"], r["seed"]) for r in merged["runs"]] == [
        ("uniform", 0),
        ("rank", 0),
    ]  # registered order
    assert "auc_iqm" not in merged["summary"]["arms"]["uniform"] and merged["summary"]["comparisons"] == {}
    assert "No aggregate and no verdict yet" in (tmp_path / "atari_pong.md").read_text()
    assert (tmp_path / "atari_pong.png").stat().st_size > 0
    later = [_record(a, s) for s in (1, 2) for a in ("uniform", "rank")] + [_record("proportional", 0)]
    merged = atari_pong_report.merge(MergeConfig(_write(tmp_path, later), str(results)), [])
    assert len(json.loads(results.read_text())["runs"]) == 7
    summary = merged["summary"]
    assert summary["arms"]["uniform"]["seeds"] == [0, 1, 2]
    assert "auc_iqm" in summary["arms"]["rank"] and "auc_iqm" not in summary["arms"]["proportional"]
    assert set(summary["comparisons"]) == {"rank"}
    assert summary["comparisons"]["rank"]["difference"][0] > 0  # rank's curves end 3 higher
    assert summary["references"]["DQN"]["final"] == PROTOCOL["references"]["curves"]["DQN"][-1]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"seed": 7}, "not a registered run"),
        ({"overrides": {"device": "cpu"}}, "overrides"),
        ({"complete": False, "stopped": "time_budget"}, "did not finish"),
        ({"steps": 1_000}, "did not finish"),
        ({"auc": None, "final": None}, "no training episode ended"),
        ({"source": {"commit": COMMIT, "clean": False}}, "clean commit"),
        ({"source": {"commit": None, "clean": None}}, "clean commit"),
        ({"study": "other"}, "not a run record"),
        ({"protocol": {**PROTOCOL, "total_steps": 1}}, "another protocol"),
    ],
)
def test_a_run_that_may_not_join_is_refused_and_nothing_changes(
    tmp_path: Path, changes: dict[str, Any], why: str
) -> None:
    results = tmp_path / "atari_pong.json"
    atari_pong_report.merge(MergeConfig(_write(tmp_path, [_record("uniform", 0)]), str(results)), [])
    before = results.read_text()
    bad = _write(tmp_path, [_record("rank", 0), {**_record("proportional", 0), **changes}])
    with pytest.raises(ValueError, match=f"runs should be .*{why}"):
        atari_pong_report.merge(MergeConfig(bad, str(results)), [])
    assert results.read_text() == before  # all or none: the good file is not added either


def test_a_run_already_in_the_results_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "atari_pong.json"
    atari_pong_report.merge(MergeConfig(_write(tmp_path, [_record("uniform", 0)]), str(results)), [])
    before = results.read_text()
    with pytest.raises(ValueError, match="already in the results"):
        atari_pong_report.merge(MergeConfig(_write(tmp_path, [_record("uniform", 0)]), str(results)), [])
    assert results.read_text() == before


def _tiny_protocol(min_rate: float) -> dict[str, Any]:
    tiny = copy.deepcopy(PROTOCOL)
    tiny.update(total_steps=1_200, iteration_steps=400)
    tiny["set"] = {
        "device": "cpu",
        "num_envs": 4,
        "memory_size": 2_000,
        "learning_starts": 400,
        "batch_size": 8,
        "eval_every": 1_200,
        "eval_steps": 100,
        "eval_envs": 2,
        "log_every": 200,
        "tensorboard": False,
        "hidden": [16],
    }
    tiny["gate"] = {"min_agent_steps_per_s": min_rate, "probe_steps": 100, "allowance_s": 10}
    return tiny


def test_next_trains_the_first_missing_run_and_merge_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = _tiny_protocol(0.0)
    for module in (atari_pong, atari_pong_report):
        monkeypatch.setattr(module, "load_protocol", lambda: tiny)
    monkeypatch.setattr(atari_pong, "source_tree", lambda: {"commit": COMMIT, "clean": True})
    results = tmp_path / "atari_pong.json"
    record = atari_pong.run_next(NextConfig(str(results), str(tmp_path / "out"), 600.0), [])
    assert (record["arm"], record["seed"], record["complete"], record["steps"]) == ("uniform", 0, True, 1_200)
    assert len(record["iteration_returns"]) == 3 and record["config"]["repeat_action_probability"] == 0.25
    written = tmp_path / "out" / "atari_pong_uniform_seed0.json"
    # no Pong episode ends within 300 steps per environment: the run has no AUC and may not join
    with pytest.raises(ValueError, match="no training episode ended"):
        atari_pong_report.merge(MergeConfig((str(written),), str(results)), [])
    # as if episodes had ended: the record as written otherwise joins
    joined = {**json.loads(written.read_text()), "iteration_returns": [-21.0, -20.0, -19.0]}
    written.write_text(json.dumps({**joined, "auc": -20.0, "final": -19.0}))
    atari_pong_report.merge(MergeConfig((str(written),), str(results)), [])
    assert atari_pong.pending(tiny, json.loads(results.read_text()))[0] == ("proportional", 0)


def test_next_below_the_gate_trains_nothing_but_its_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(atari_pong, "load_protocol", lambda: _tiny_protocol(1e9))
    record = atari_pong.run_next(NextConfig(str(tmp_path / "none.json"), str(tmp_path / "out"), 600.0), [])
    assert record["trained"] is False and record["probe"]["needed_steps_per_s"] == 1e9
    assert (tmp_path / "out" / "atari_pong_gate.json").exists()
    assert not (tmp_path / "out" / "atari_pong_uniform_seed0.json").exists()


def test_the_command_line_refuses_a_bad_commit_and_prints_usage_without_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse_command([])
    assert "next" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        parse_command(["next", "--source_commit", "unset"])
    assert stop.value.code == 2 and "source_commit" in capsys.readouterr().err
    config = parse_command(["next", "--source_commit", COMMIT, "--source_clean", "true"])
    assert isinstance(config, NextConfig) and config.source_clean
