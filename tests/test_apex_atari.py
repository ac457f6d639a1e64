"""Ape-X on Atari (recipes/apex with ALE/Pong-v5): the actors send each environment's frames once
(prisample.frame_stream) and the shard stores exactly the stacks the actor saw; a short run on a
local Ray, with the bytes on the wire."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")
pytest.importorskip("ale_py")

import prisample.ray
from prisample.ray import RemoteReplay
from recipes.apex.config import ApexConfig, learner_config
from recipes.apex.nstep import NStepBuilder
from recipes.apex.run import ApexActor, make_memory, train
from recipes.dqn.envs import make_env
from tests import fake_ray

FULL_STACKS = 2 * 4 * 84 * 84  # obs and next_obs, 4 frames of 84 × 84 bytes each
LEARNER = {"learning_starts": 100, "batch_size": 8, "memory_size": 2000, "log_every": 100}


def config(tmp_path: Path, **changes: Any) -> ApexConfig:
    fields: dict[str, Any] = dict(
        env="ALE/Pong-v5",
        actors=2,
        envs_per_actor=2,
        total_steps=200,
        actor_sync_every=100,
        actor_batch=20,
        eval_every=0,
        actor_cpus=0.5,
        device="cpu",
        out=str(tmp_path),
        progress=False,
        learner=LEARNER,
    )
    return ApexConfig(**{**fields, **changes})


def test_nstep_builder_tells_each_transitions_environment_and_episode_end() -> None:
    """What the shard stores per stream: env 0 ends its episode after 4 steps, env 1 is flushed."""
    builder = NStepBuilder(3, 2)
    for t in range(4):
        for env in (0, 1):
            builder.add(env, np.array([t]), 0, 1.0, 0.9, np.array([t + 1]), env == 0 and t == 3)
    builder.flush()
    transitions, envs, ends = builder.take_with_origin()
    # t=2: env 0's and env 1's t=0 complete; t=3: env 0 ends (its t=1, 2, 3 leave, t=3 the last of
    # its episode), env 1's t=1 completes; the flush: env 1's t=2, 3 (no episode end)
    assert envs.tolist() == [0, 1, 0, 0, 0, 1, 1, 1]
    assert ends.tolist() == [False, False, False, False, True, False, False, False]
    assert transitions["obs"][:, 0].tolist() == [0, 0, 1, 2, 3, 1, 2, 3]
    assert builder.ready == 0


def test_the_shard_stores_the_stacks_the_actor_saw(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Actor 1 of 2 (streams 2 and 3) on the real environment, its memory in-process: every stack
    it encoded is the one stored, on its environment's stream, each frame sent about once."""
    monkeypatch.setattr(prisample.ray, "ray", fake_ray)
    apex = config(tmp_path, learner={**LEARNER, "terminal_on_life_loss": False})
    cfg = learner_config(apex)
    probe, spec = make_env(apex.env, 1)
    probe.close()
    replay: RemoteReplay = make_memory(apex, cfg, spec)
    actor = ApexActor(1, apex, cfg, replay)
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    encode = actor.encoder.encode  # type: ignore[union-attr]

    def recording(obs: np.ndarray, next_obs: np.ndarray, streams: np.ndarray) -> dict[str, Any]:
        seen.append((obs.copy(), next_obs.copy(), np.asarray(streams).copy()))
        return encode(obs, next_obs, streams)

    monkeypatch.setattr(actor.encoder, "encode", recording)
    no_weights: list[Any] = [None]
    actor.run(240, -1, no_weights)  # version -1: keeps its initial θ (no weights to pull here)
    totals = actor.finish()
    obs, next_obs, streams = (np.concatenate(column) for column in zip(*seen, strict=True))
    memory = replay.shards[0]._instance.replay.memory
    assert totals["stored"] == totals["transitions"] == len(memory) == obs.shape[0] == 240
    stored = memory.get(np.arange(240))
    assert np.array_equal(stored["obs"], obs) and np.array_equal(stored["next_obs"], next_obs)
    assert set(streams.tolist()) == {2, 3} and memory.num_streams == 4
    # about one new frame per transition (a reset's frames more, frames the game repeats fewer)
    assert totals["wire_bytes"] / 240 < 1.1 * 84 * 84
    assert totals["stack_bytes"] / 240 > FULL_STACKS


def test_pong_end_to_end_on_ray(ray_local: Any, tmp_path: Path) -> None:
    saved = train(config(tmp_path))
    assert (
        saved["steps"] == 200 and saved["updates"] > 0 and saved["learner_config"]["network"] == "nature_cnn"
    )
    assert (
        saved["transitions_added"] == saved["transitions_sent"] == sum(a["stored"] for a in saved["actors"])
    )
    wire = saved["wire"]
    assert wire["transitions"] == saved["transitions_sent"] > 0
    assert 0.5 < wire["frames_per_transition"] < 1.1  # a reset's frames more, frames Pong repeats fewer
    assert (
        wire["bytes_per_transition"]
        < 0.15 * FULL_STACKS
        < FULL_STACKS
        < wire["full_stack_bytes_per_transition"]
    )
