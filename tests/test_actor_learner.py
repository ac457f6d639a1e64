"""Smoke run of ``recipes/apex/actor_learner.py`` with tiny arguments: actor threads and a prefetching
learner on one replay, the JSON written, every thread ended."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

from recipes.apex import actor_learner, exploration
from recipes.apex.actor_learner import ActorLearnerConfig, main
from recipes.common.cli import ConfigError


@pytest.mark.parametrize("depth", [0, 2])
def test_actor_learner_smoke(tmp_path: Path, depth: int) -> None:
    config = ActorLearnerConfig(
        actors=2,
        envs_per_actor=2,
        updates=30,
        learning_starts=64,
        capacity=500,
        batch_size=16,
        target_every=10,
        sync_every=5,
        prefetch_depth=depth,
        out_dir=str(tmp_path),
        progress=False,
    )
    results = main(config)
    saved = json.loads((tmp_path / "actor_learner.json").read_text())
    assert saved["learner_updates"] == 30 and saved["actor_steps"] >= 64
    assert saved["actor_steps_per_s"] > 0 and saved["learner_updates_per_s"] > 0
    assert results["beta_final"] == pytest.approx(1.0)
    assert not [t for t in threading.enumerate() if t.name.startswith(("actor-", "prisample-prefetch"))]


def test_the_actor_threads_act_with_the_apex_epsilons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The actor threads once computed ε_i = ε^(1 + 7 i / (N − 1)) themselves, beside the Ray run's
    own formula; both now take it, and ε's default, from ``recipes.apex.exploration``."""
    asked: list[tuple[int, int, float]] = []

    def recorded(i: int, n: int, epsilon: float = exploration.EPSILON) -> float:
        asked.append((i, n, epsilon))
        return exploration.actor_epsilon(i, n, epsilon)

    monkeypatch.setattr(actor_learner, "actor_epsilon", recorded)
    config = ActorLearnerConfig(
        actors=3, envs_per_actor=1, updates=5, learning_starts=32, capacity=200, batch_size=8,
        epsilon=0.3, out_dir=str(tmp_path), progress=False,
    )  # fmt: skip
    main(config)
    assert sorted(asked) == [(0, 3, 0.3), (1, 3, 0.3), (2, 3, 0.3)]
    assert ActorLearnerConfig().epsilon == exploration.EPSILON


@pytest.mark.parametrize("samples_per_insert", [0.0, 8.0])
def test_actor_learner_holds_the_replay_ratio(tmp_path: Path, samples_per_insert: float) -> None:
    """With a rate limiter the actors wait for the learner (counted) and the counts end inside
    its buffer; without one (0) there is none."""
    config = ActorLearnerConfig(
        updates=40,
        learning_starts=64,
        capacity=2_000,
        batch_size=16,
        samples_per_insert=samples_per_insert,
        out_dir=str(tmp_path),
        progress=False,
    )
    results = main(config)
    assert not [t for t in threading.enumerate() if t.name.startswith("actor-")]
    limits = results["rate_limiter"]
    if samples_per_insert == 0.0:
        assert limits is None
        return
    streams = config.actors * config.envs_per_actor
    min_size = config.learning_starts + streams * (config.n_step - 1)
    offset, buffer = samples_per_insert * min_size, config.batch_size + samples_per_insert
    assert limits["samples"] == 40 * config.batch_size
    assert offset - buffer <= limits["inserts"] * samples_per_insert - limits["samples"] <= offset + buffer
    assert limits["insert_waits"] > 0  # CartPole steps outrun a learner's updates
    assert results["actor_steps"] <= limits["inserts"] <= results["actor_steps"] + config.actors
    assert json.loads((tmp_path / "actor_learner.json").read_text())["rate_limiter"] == limits


def test_actor_learner_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="learning_starts should be at most capacity"):
        ActorLearnerConfig(capacity=10, learning_starts=20)
    with pytest.raises(ConfigError, match="samples_per_insert"):
        ActorLearnerConfig(samples_per_insert=-1.0)
