"""The switches of the Ape-X ablation (why Ape-X learns worse than one process) and the study that
runs them: each switch changes what it claims (no learning runs: an actor steps a few CartPole
steps against a stand-in memory)."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")
pytest.importorskip("gymnasium")

from recipes.apex import ablate
from recipes.apex.config import ApexConfig, learner_config
from recipes.apex.report import ablate_summary
from recipes.apex.run import ApexActor, make_fleet
from recipes.common import rl_metrics
from recipes.common.cli import ConfigError
from recipes.dqn.config import DDQNConfig
from recipes.dqn.loop import Schedules
from recipes.dqn.sweep_report import collect


class StandInMemory:
    """What an actor's ReplayWriter calls: ``add`` records the priorities it was given."""

    num_shards = 1

    def __init__(self) -> None:
        self.priorities: list[Any] = []

    def add(self, transitions: dict[str, np.ndarray], priorities: Any, shard: int | None = None) -> None:
        self.priorities.append(priorities)


def actor(**changes: Any) -> tuple[ApexActor, StandInMemory]:
    config = ApexConfig(device="cpu", progress=False, actor_batch=4, max_pending=10**6, **changes)
    memory = StandInMemory()
    return ApexActor(0, config, learner_config(config), memory), memory  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"actor_epsilon": "greedy"}, "actor_epsilon should be one of apex, schedule"),
        ({"actor_queue": 0}, "actor_queue should be > 0"),
    ],
)
def test_config_refuses_bad_switches(changes: dict[str, Any], option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        ApexConfig(**changes)


def test_defaults_keep_apex() -> None:
    config = ApexConfig()
    assert (config.actor_epsilon, config.actor_priorities, config.actor_queue) == ("apex", True, 2)


def test_scheduled_epsilon_is_the_single_process_one_at_the_chunks_env_steps() -> None:
    apex, _ = actor()
    apex.run(8, -1, [])
    assert apex.epsilon == 0.4  # ε_0 of Ape-X, whatever the step
    scheduled, _ = actor(actor_epsilon="schedule")
    schedules = Schedules.of(scheduled.learner)
    scheduled.run(8, -1, [], 0)
    assert scheduled.epsilon == 1.0  # before learning_starts the single process plays at random
    scheduled.run(8, -1, [], 5000)  # last step of the chunk: 5000 + 1 × envs_per_actor
    assert scheduled.epsilon == pytest.approx(schedules.at(5004)[0]) and 0.04 < scheduled.epsilon < 1.0
    scheduled.run(8, -1, [], 40_000)
    assert scheduled.epsilon == pytest.approx(0.04)


@pytest.mark.parametrize("send", [True, False])
def test_actor_priorities_switch(send: bool) -> None:
    apex, memory = actor(actor_priorities=send)
    apex.run(40, -1, [])
    assert memory.priorities  # 40 env steps of 4 environments: complete transitions were sent
    if send:  # the actor's |δ|, one per transition
        assert all(p is not None and np.all(np.asarray(p) >= 0) for p in memory.priorities)
    else:  # None: the memory's maximum priority
        assert all(p is None for p in memory.priorities)
    assert apex.counts["transitions"] > 0


@pytest.mark.parametrize(("queue", "starts"), [(1, [0, 16]), (2, [0, 16, 32, 48])])
def test_actor_queue_sets_the_chunks_queued_and_their_clock(queue: int, starts: list[int]) -> None:
    calls: list[tuple[Any, ...]] = []

    def remote(*args: Any) -> object:
        calls.append(args)
        return object()

    actors = [SimpleNamespace(run=SimpleNamespace(remote=remote)) for _ in range(2)]
    config = ApexConfig(actor_sync_every=16, actor_queue=queue, total_steps=1600)
    fleet = make_fleet(config, actors)
    fleet.start(None)  # type: ignore[arg-type]
    assert [call[3] for call in calls] == starts  # the env steps handed out before each chunk
    assert all(call[0] == 16 for call in calls)


def test_ablation_arms_differ_from_matched_by_their_fields_only() -> None:
    config = ablate.AblateConfig(seeds=2, device="cpu")
    runs = {(label, seed): run for label, seed, run in ablate.tasks(config)}
    labels = [label for label, _ in ablate.arms(config)]
    assert len(runs) == 2 * len(labels) and labels[:2] == ["single", "apex_matched"]
    assert [label for label, _, _ in ablate.tasks(config)][: len(ablate.FIRST)] == list(ablate.FIRST)
    single = runs[("single", 1)]
    assert isinstance(single, DDQNConfig)
    assert (single.n_step, single.seed, single.total_steps) == (3, 1, 50_000)
    matched = runs[("apex_matched", 1)]
    assert isinstance(matched, ApexConfig) and matched.min_replay_ratio == matched.max_replay_ratio == 0.5
    skip = {"out"}

    def differing(run: Any) -> dict[str, Any]:
        return {
            f.name: getattr(run, f.name)
            for f in fields(ApexConfig)
            if f.name not in skip and getattr(run, f.name) != getattr(matched, f.name)
        }

    for name, changes in ablate.ABLATIONS.items():
        assert differing(runs[(f"ablation {name}", 1)]) == changes, name
    everything = differing(runs[("apex_all_matched", 1)])
    assert everything == ablate.all_matched() and len(everything) == 6
    assert differing(runs[("apex_free", 1)]) == {"min_replay_ratio": None, "max_replay_ratio": None}
    assert len({run.out for run in runs.values() if isinstance(run, ApexConfig)}) == 2 * (len(labels) - 1)


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"ablations": ("epsilon", "luck")}, "ablations should be a comma list"),
        ({"apex": {"actor_epsilon": "apex"}}, "apex should name fields of ApexConfig"),
        ({"jobs": 0}, "jobs should be > 0"),
    ],
)
def test_ablate_config_refuses(changes: dict[str, Any], option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        ablate.AblateConfig(**changes)


def fake_result(label: str, seed: int, scores: list[float]) -> dict[str, Any]:
    return {
        "label": label,
        "curve": f"proportional {label}",
        "config": {"seed": seed, "arm": "proportional"},
        "eval_steps": [5000 * (i + 1) for i in range(len(scores))],
        "eval_scores": scores,
        "best_score": max(scores),
        "best_policy_score": max(scores),
        "steps": 50_000,
        "updates": 25_000,
        "steps_per_s": 300.0,
        "wall_s": 170.0,
        "stopped": "done",
    }


def test_summary_has_the_issue_shape() -> None:
    results = [fake_result("single", s, [100.0, 500.0]) for s in range(3)]
    results += [fake_result("apex_matched", s, [10.0, 100.0 + s]) for s in range(3)]
    results += [fake_result("ablation epsilon", s, [50.0, 400.0]) for s in range(3)]
    results += [fake_result("apex_all_matched", s, [100.0, 500.0]) for s in range(3)]
    curves = collect([{**r, "label": r["curve"]} for r in results])
    order = ["single", "apex_matched", "ablation epsilon", "apex_all_matched"]
    summary = ablate_summary(results, curves, order)
    assert summary["single"]["final"] == [500.0] * 3 and summary["single"]["auc"] == [300.0] * 3
    assert summary["apex_matched"]["final"] == [100.0, 101.0, 102.0]
    assert set(summary["ablations"]) == {"epsilon", "all"}
    assert summary["ablations"]["epsilon"]["auc"] == [225.0] * 3
    assert summary["apex_all_matched"] is summary["ablations"]["all"]
    assert summary["single"]["final_iqm"] == [500.0, 500.0, 500.0]
    test = summary["tests"]["ablation epsilon"]["vs_apex_matched"]["auc"]
    assert test["verdict"] == "better" and test["difference"][0] == pytest.approx(225.0 - 55.5)
    assert summary["tests"]["apex_all_matched"]["vs_single"]["final"]["verdict"] == "no difference detected"
    assert not math.isnan(summary["apex_matched"]["auc_iqm"][1])
    # the equivalence test within ±10 % of the other arm's IQM, and Holm over every AUC test
    same = summary["tests"]["apex_all_matched"]["vs_single"]["auc"]["equivalence"]
    assert same["margin"] == pytest.approx(30.0) and same["verdict"] == "equivalent within ±m"
    far = summary["tests"]["apex_matched"]["vs_single"]["auc"]["equivalence"]
    assert far["verdict"] == "not shown equivalent"
    p = {(label, vs): t["auc"]["welch_p"] for label, per in summary["tests"].items() for vs, t in per.items()}
    del p[("apex_matched", "vs_single")]  # the test of single vs apex_matched, counted once
    flat = rl_metrics.holm({f"{label} {vs}": v for (label, vs), v in p.items()})
    assert summary["holm"]["tests"] == len(p) == 5 and "apex_matched" not in summary["holm"]["adjusted_p"]
    for (label, vs), v in p.items():
        assert summary["holm"]["adjusted_p"][label][vs] == flat["adjusted_p"][f"{label} {vs}"] >= v


def test_single_run_lands_under_the_study(tmp_path: Any) -> None:
    config = ablate.AblateConfig(seeds=1, device="cpu", out=str(tmp_path / "x"))
    for _, _, run in ablate.tasks(config):
        assert str(ablate.result_path(run)).startswith(str(tmp_path / "x_runs"))
    single = next(run for label, _, run in ablate.tasks(config) if label == "single")
    assert isinstance(single, DDQNConfig) and single.log_dir.endswith("x_runs/single")


def test_matched_evaluation_waits_for_the_single_process_updates() -> None:
    from recipes.apex.record import eval_due

    # free run: due as soon as the actors have taken the nominal env steps
    assert not eval_due(4800, 5000, 10**6, None, 1000) and eval_due(5200, 5000, 0, None, 1000)
    # matched at 0.5 from 1,000 env steps: the single process has made 2,000 updates by step 5,000
    assert not eval_due(5200, 5000, 1600, 0.5, 1000)  # actors ahead, learner 400 updates short
    assert eval_due(6000, 5000, 2000, 0.5, 1000)
    assert eval_due(5000, 5000, 0, 0.5, None)  # before learning starts nothing is owed


def test_report_only_reads_the_finished_runs_and_runs_nothing(tmp_path: Any, monkeypatch: Any) -> None:
    import recipes.apex.run
    import recipes.dqn.run

    def no_run(config: Any) -> None:
        raise AssertionError("report_only ran a run")

    monkeypatch.setattr(recipes.apex.run, "train", no_run)
    monkeypatch.setattr(recipes.dqn.run, "train", no_run)
    config = ablate.AblateConfig(seeds=2, device="cpu", out=str(tmp_path / "x"), report_only=True)
    assert ablate.ablate(config, ["ablate"]) == {}  # nothing finished: nothing run, nothing written
    label, seed, run = ablate.tasks(config)[1]  # apex_matched, seed 0
    path = ablate.result_path(run)
    path.parent.mkdir(parents=True)
    result = {**fake_result(label, seed, [20.0, 40.0]), "device": "CPU", "run_dir": str(path.parent)}
    path.write_text(json.dumps(result))
    report = ablate.ablate(config, ["ablate"])
    assert report["apex_matched"]["final"] == [40.0] and report["partial"]
    assert len(report["missing"]) == len(ablate.tasks(config)) - 1
    assert (tmp_path / "x.json").exists() and (tmp_path / "x.md").exists()


def test_interleaved_order_runs_every_arm_of_a_seed_back_to_back() -> None:
    """The rerun's order: each seed's four runs back to back, seed after seed."""
    config = ablate.AblateConfig(seeds=2, device="cpu", ablations=("staleness",), free=False, interleave=True)
    arms = ["single", "apex_matched", "ablation staleness", "apex_all_matched"]
    assert [(label, seed) for label, seed, _ in ablate.tasks(config)] == [
        (a, s) for s in (0, 1) for a in arms
    ]
    registered = ablate.AblateConfig(seeds=2, device="cpu", ablations=("staleness",), free=False)
    assert [label for label, _, _ in ablate.tasks(registered)][2] == "apex_all_matched"  # the groups


def test_each_run_records_when_it_ran_its_load_and_commit(tmp_path: Any, monkeypatch: Any) -> None:
    """A run's record is written beside its result, read back with a finished result, and its
    start, end, load averages and commit reach the report's row."""
    import recipes.apex.run
    from recipes.apex.report import compare_row
    from recipes.common.provenance import source_tree

    config = ablate.AblateConfig(seeds=1, device="cpu", out=str(tmp_path / "x"), ablations=(), free=False)
    label, seed, run = ablate.tasks(config)[1]  # apex_matched, seed 0
    path = ablate.result_path(run)

    def fake_train(run_config: Any) -> dict[str, Any]:
        result = {**fake_result(label, seed, [20.0, 40.0]), "run_dir": str(path.parent)}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
        return result

    monkeypatch.setattr(recipes.apex.run, "train", fake_train)
    ran = ablate.run_one((label, seed, run, False))
    record = ran["run_record"]
    assert record["started"] <= record["ended"] and len(record["loadavg_start"]) == 3
    assert record["code"]["commit"] == source_tree()["commit"]
    assert json.loads((path.parent / ablate.RUN_RECORD).read_text()) == record
    again = ablate.run_one((label, seed, run, False))  # finished: read, not run, with its record
    assert again["run_record"] == record
    row = compare_row(again)
    assert (row["started"], row["loadavg_end"], row["commit"]) == (
        record["started"],
        record["loadavg_end"],
        record["code"]["commit"],
    )
    (path.parent / ablate.RUN_RECORD).unlink()  # a run from before the record: no such fields
    assert "started" not in compare_row(ablate.run_one((label, seed, run, False)))
