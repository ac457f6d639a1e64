"""The GPU options of the Double DQN loop, agents trained together, the Atari sweep (on a CPU).

The order of the loop's replay calls under ``overlap_env`` and ``defer_priorities``; the
Atari-100k protocol file; ``recipes.dqn.together`` and ``recipes.dqn.atari_sweep`` at tiny scale.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")

from prisample.replay import PrioritizedReplay
from recipes.dqn import atari_sweep
from recipes.dqn.config import load_config
from recipes.dqn.run import train
from recipes.dqn.together import agent_configs, check_together, train_together


def _cartpole(tmp_path: Path, **overrides: Any) -> Any:
    settings: dict[str, Any] = dict(
        total_steps=300,
        learning_starts=100,
        eps_decay_steps=100,
        target_update_period=100,
        eval_every=10**6,
        eval_steps=50,
        eval_episodes=1,
        eval_envs=1,
        log_every=10**6,
        log_dir=str(tmp_path),
        progress=False,
        tensorboard=False,
    )
    settings.update(overrides)
    return load_config("CartPole-v1", "proportional", **settings)


def _record_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name, tag in (("add_many", "A"), ("sample", "S"), ("update_priorities", "U")):
        original = getattr(PrioritizedReplay, name)

        def wrapped(self: Any, *args: Any, _original: Any = original, _tag: str = tag, **kwargs: Any) -> Any:
            calls.append(_tag)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(PrioritizedReplay, name, wrapped)
    return calls


@pytest.mark.parametrize(
    ("overlap", "defer", "expected"),
    [
        (False, False, "ASUSUA"),  # Algorithm 1: store, then draw and write, per update
        (True, False, "SUSUAS"),  # the step's updates run before its transitions are stored
        (False, True, "ASSUASU"),  # each update's priorities written after the next draw, across steps
    ],
)
def test_loop_order_of_replay_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overlap: bool, defer: bool, expected: str
) -> None:
    """CartPole with 2 environments and K = 1: two updates per step once learning started."""
    calls = _record_calls(monkeypatch)
    cfg = _cartpole(tmp_path, num_envs=2, replay_period=1, overlap_env=overlap, defer_priorities=defer)
    result = train(cfg)
    sequence = "".join(calls)
    first = sequence.index("S")
    start = sequence.rindex("A", 0, first) if not overlap else first
    assert sequence[start : start + len(expected)] == expected
    # steps 100, 102, ..., 300 each owe two updates: 101 vector steps x 2
    assert sequence.count("S") == sequence.count("U") == result.updates == 202


def test_deferred_priorities_all_written_and_learns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With both options every drawn minibatch's priorities reach the sampler by the end: as many
    writes as draws (the last one flushed after the loop), and the written values are |δ|."""
    calls = _record_calls(monkeypatch)
    priorities: list[np.ndarray] = []
    original = PrioritizedReplay.update_priorities

    def keep(self: Any, indices: Any, values: Any, **kwargs: Any) -> Any:
        priorities.append(np.asarray(values, dtype=np.float64))
        return original(self, indices, values, **kwargs)

    monkeypatch.setattr(PrioritizedReplay, "update_priorities", keep)
    result = train(_cartpole(tmp_path, overlap_env=True, defer_priorities=True, run_name="both"))
    assert result.steps == 300 and result.updates > 0
    assert calls.count("S") == calls.count("U") == result.updates == len(priorities)
    assert calls[-1] == "U"  # the update still in flight at the end is written by the final flush
    written = np.concatenate(priorities)  # |δ| (unclipped, DQN Zoo): >= 0, most below the entry max
    entry_max = max(1.0, float(np.max(written)))
    assert written.min() >= 0.0 and (written < entry_max).mean() > 0.5 and len(np.unique(written)) > 1


def test_atari100k_protocol_sits_between_family_and_arm() -> None:
    cfg = load_config("ALE/Pong-v5", "rank", protocol="atari100k")
    assert (cfg.total_steps, cfg.learning_starts, cfg.memory_size) == (100_000, 1600, 100_000)
    assert (cfg.alpha, cfg.beta0, cfg.lr_divisor) == (0.7, 0.5, 4.0)  # the arm's values
    assert cfg.replay_period == 4 and cfg.network == "nature_cnn"  # the family's
    assert load_config("ALE/Pong-v5", "rank").total_steps == 50_000_000
    with pytest.raises(ValueError, match="protocol"):
        load_config("ALE/Pong-v5", "rank", protocol="atari1k")


def test_check_together_names_the_differing_field() -> None:
    cfgs = agent_configs("CartPole-v1", ["uniform", "rank"], 1, None, optimizer="dqn_rmsprop")
    check_together(cfgs)  # arms and seeds may differ
    with pytest.raises(ValueError, match="batch_size"):
        check_together([cfgs[0], load_config("CartPole-v1", "rank", batch_size=16, optimizer="dqn_rmsprop")])
    with pytest.raises(ValueError, match="optimizer"):
        check_together(agent_configs("CartPole-v1", ["uniform"], 2, None, optimizer="adam"))


def test_train_together_runs_every_agent(tmp_path: Path) -> None:
    cfgs = agent_configs(
        "CartPole-v1",
        ["uniform", "proportional", "rank"],
        2,
        None,
        total_steps=240,
        learning_starts=80,
        eval_steps=200,
        eval_envs=2,
        num_envs=2,
        replay_period=2,
        optimizer="dqn_rmsprop",
        progress=False,
    )
    result = train_together(cfgs, progress=False)
    assert [(a["arm"], a["seed"]) for a in result["agents"]] == [(c.arm, c.seed) for c in cfgs]
    assert result["steps_per_agent"] == 240 and result["updates_per_agent"] == (240 - 80) // 2
    assert result["stopped"] == "done"
    for agent in result["agents"]:
        assert agent["eval_episodes"] == 2 and math.isfinite(agent["score"])  # CartPole ends within 200
    weights = {a["arm"]: a["weight_mean_last1000"] for a in result["agents"]}
    assert weights["uniform"] == 1.0 and weights["proportional"] < 1.0


def test_sweep_writes_the_issue_schema_and_aggregates(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    atari_sweep.main(
        [
            "--games",
            "ALE/Pong-v5,ALE/Boxing-v5",
            "--arms",
            "uniform,rank",
            "--seeds",
            "1",
            "--device",
            "cpu",
            "--set",
            "total_steps=120",
            "--set",
            "learning_starts=40",
            "--set",
            "memory_size=500",
            "--set",
            "eval_steps=20",
            "--set",
            "eval_envs=1",
            "--set",
            "num_envs=1",
            "--out",
            str(out),
        ]
    )
    result = json.loads(out.read_text())
    assert result["device"] == "CPU" and result["protocol"]["name"] == "atari100k"
    assert set(result["games"]) == {"pong", "boxing"}
    for arms in result["games"].values():
        assert set(arms) == {"uniform", "rank"} and all(len(a["scores"]) == 1 for a in arms.values())
    # 20 evaluation steps finish no episode: no score (NaN), so no arm enters the aggregates yet
    assert all(
        math.isnan(a["scores"][0]) and a["eval_episodes"] == [0]
        for g in result["games"].values()
        for a in g.values()
    )
    assert result["aggregates"]["arms"] == {} and "drq_eps" in result["aggregates"]["published"]
    assert out.with_suffix(".png").stat().st_size > 1000
    assert np.all([p["steps_per_agent"] == 120 for p in result["processes"].values()])
