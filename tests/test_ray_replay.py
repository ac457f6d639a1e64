"""The prioritized memory as Ray actors (prisample.ray): arrivals, actor priorities, late updates,
the sharded distribution and its weights against brute force, checkpoints, refusals.

The behaviour across processes (arrivals from several actors, late updates, checkpoints) runs on
a local Ray with 2 CPUs (the ``ray_local`` fixture; every actor is a process that imports torch,
so these are few).  The sampling math runs on ``fake_ray`` (``local`` fixture): the same calls in
this process, arguments pickled.  Skipped only where ray is not installed (CI installs it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")

import prisample.ray
from prisample import LinearSchedule
from prisample.ray import RemoteReplay, ReplayShard, ReplayWriter
from tests import fake_ray


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch) -> Any:
    """prisample.ray on the in-process stand-in for Ray."""
    monkeypatch.setattr(prisample.ray, "ray", fake_ray)
    return fake_ray


def transitions(tags: np.ndarray) -> dict[str, Any]:
    """Transitions whose observation is their tag (actor · 10^6 + step) in every entry."""
    n = tags.shape[0]
    obs = np.repeat(tags[:, None].astype(np.float64), 2, axis=1)
    return {
        "obs": obs,
        "action": np.zeros(n, np.int64),
        "reward": np.ones(n, np.float32),
        "discount": np.full(n, 0.99, np.float32),
        "next_obs": obs + 1,
        "tag": tags.astype(np.int64),
    }


def memory(capacity: int, **options: Any) -> RemoteReplay:
    defaults: dict[str, Any] = dict(obs_dtype=np.float64, extras={"tag": ((), np.int64)}, alpha=1.0, eps=0.0)
    return RemoteReplay(capacity, (2,), **{**defaults, **options})


def test_transitions_from_several_actors_arrive_exactly_once_with_their_priorities(ray_local: Any) -> None:
    """Three actor processes send 700 tagged transitions each, in chunks, with priorities of
    their own: every tag is stored once, at the priority its actor sent."""
    ray = ray_local
    replay = memory(4_000, shards=2, seed=0)

    def priority(tags: np.ndarray) -> np.ndarray:
        return (tags % 997) / 97.0 + tags // 1_000_000  # each actor's own values

    @ray.remote(num_cpus=1)
    def actor(replay: RemoteReplay, index: int, steps: int, chunk: int) -> int:
        writer = ReplayWriter(replay, shard=index % replay.num_shards, max_pending=2)
        for start in range(0, steps, chunk):
            tags = index * 1_000_000 + np.arange(start, min(start + chunk, steps))
            writer.add(transitions(tags), priorities=priority(tags))
        return writer.flush()

    try:
        sent = ray.get([actor.remote(replay, i, 700, 64) for i in range(3)])
        assert sent == [700] * 3
        parts = replay.state_dict()["shards"]
        assert replay.stats()["num_added"] == 2_100
    finally:
        replay.shutdown()
    tags, stored = [], []
    for part in parts:
        live = ~np.isnan(part["sampler"]["priorities"])
        tags.append(np.asarray(part["memory"]["extra.tag"])[live])
        stored.append(part["sampler"]["priorities"][live])
    tag, value = np.concatenate(tags), np.concatenate(stored)
    expected = np.concatenate([i * 1_000_000 + np.arange(700) for i in range(3)])
    assert np.array_equal(np.sort(tag), np.sort(expected))  # each exactly once, none lost
    assert np.array_equal(value, priority(tag))  # the actors' priorities, bit for bit


def test_priorities_computed_by_actors_are_the_ones_stored(local: Any) -> None:
    replay = memory(64, shards=2, seed=1)
    rng = np.random.default_rng(0)
    sent = {}
    for shard in (0, 1):
        tags = shard * 100 + np.arange(20)
        values = rng.uniform(0.1, 5.0, 20)
        local.get(replay.add(transitions(tags), priorities=values, shard=shard))
        sent.update(zip(tags.tolist(), values.tolist(), strict=True))
    for part in replay.state_dict()["shards"]:
        live = ~np.isnan(part["sampler"]["priorities"])
        for tag, value in zip(
            np.asarray(part["memory"]["extra.tag"])[live], part["sampler"]["priorities"][live], strict=False
        ):
            assert value == sent[int(tag)]  # bit for bit, not max priority


def test_without_priorities_transitions_enter_at_the_max(local: Any) -> None:
    replay = memory(16, seed=2)
    local.get(replay.add(transitions(np.arange(3)), priorities=[0.5, 7.0, 2.0]))
    local.get(replay.add(transitions(np.arange(3, 5))))
    priorities = replay.state_dict()["shards"][0]["sampler"]["priorities"]
    assert priorities[:5].tolist() == [0.5, 7.0, 2.0, 7.0, 7.0]


def test_late_updates_for_evicted_slots_are_dropped_and_counted(ray_local: Any) -> None:
    replay = memory(8, shards=2, seed=3)
    ray_local.get([replay.add(transitions(np.arange(4) + 10 * s), np.ones(4), shard=s) for s in (0, 1)])
    batch = replay.sample(6)
    fresh = replay.sample(4)
    # shard 0 is rewritten completely: every update for a slot drawn there is late
    ray_local.get(replay.add(transitions(np.arange(100, 104)), np.ones(4), shard=0))
    dropped = sum(ray_local.get(replay.update_priorities(batch, np.full(6, 9.0))))
    assert dropped == int(np.count_nonzero(batch.shards == 0))
    assert replay.stats()["dropped_updates"] == dropped
    ray_local.get(replay.update_priorities(fresh, np.full(4, 3.0)))
    assert replay.stats()["dropped_updates"] == dropped + int(np.count_nonzero(fresh.shards == 0))
    parts = replay.state_dict()["shards"]
    assert np.all(parts[0]["sampler"]["priorities"] == 1.0)  # the new transitions' own, untouched
    on_1 = parts[1]["sampler"]["priorities"]
    fresh_1, first_1 = fresh.slots[fresh.shards == 1], batch.slots[batch.shards == 1]
    assert np.all(on_1[fresh_1] == 3.0)
    assert np.all(on_1[np.setdiff1d(first_1, fresh_1)] == 9.0)  # not rewritten: the late update landed
    replay.shutdown()


def brute_force(
    priorities: list[np.ndarray], alpha: float, eps: float, beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """P(i) = (p_i + ε)^α / Σ_all and memory-normalised weights over all shards' slots."""
    masses = np.concatenate([(p + eps) ** alpha for p in priorities])
    probability = masses / masses.sum()
    n = masses.shape[0]
    weights = (n * probability) ** -beta / (n * probability.min()) ** -beta
    return probability, weights


@pytest.mark.parametrize("shards", [1, 3])
def test_sharded_draws_follow_one_memorys_distribution(local: Any, shards: int) -> None:
    """Chi-square of 30,000 draws against P(i) = p_i^α / Σ over every shard's slots; the weights
    equal (N P(i))^-β / (N P_min)^-β computed by brute force."""
    rng = np.random.default_rng(4)
    replay = memory(90, shards=shards, alpha=0.7, eps=0.01, beta=0.5, seed=5)
    per_shard = [rng.uniform(0.0, 4.0, 30 // shards * (1 + s % 2)) for s in range(shards)]
    for s, values in enumerate(per_shard):
        local.get(replay.add(transitions(1000 * s + np.arange(values.shape[0])), values, shard=s))
    probability, weights = brute_force(per_shard, 0.7, 0.01, 0.5)
    offsets = np.cumsum([0] + [p.shape[0] for p in per_shard])
    counts = np.zeros(probability.shape[0])
    for _ in range(100):
        batch = replay.sample(300)
        flat = offsets[batch.shards] + batch.slots
        np.add.at(counts, flat, 1)
        np.testing.assert_allclose(batch.probabilities, probability[flat], rtol=1e-9)
        np.testing.assert_allclose(batch.weights, weights[flat], rtol=1e-5)
    expected = probability * counts.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    dof = probability.shape[0] - 1
    assert chi2 < dof + 5 * np.sqrt(2 * dof), chi2


def test_beta_schedule_advances_per_draw_on_the_learner(local: Any) -> None:
    replay = memory(8, beta=LinearSchedule(0.0, 1.0, 2), seed=6)
    local.get(replay.add(transitions(np.arange(4)), [1.0, 2.0, 3.0, 4.0]))
    first, second, third = (replay.sample(4) for _ in range(3))
    assert np.all(first.weights == 1.0)  # β = 0
    probability, half = brute_force([np.array([1.0, 2.0, 3.0, 4.0])], 1.0, 0.0, 0.5)
    np.testing.assert_allclose(second.weights, half[second.slots], rtol=1e-6)
    np.testing.assert_allclose(third.weights, probability.min() / probability[third.slots], rtol=1e-6)


def test_checkpoint_restores_the_remote_memory_exactly(ray_local: Any) -> None:
    replay = memory(40, shards=2, alpha=0.6, eps=0.01, seed=7)
    rng = np.random.default_rng(8)
    for step in range(5):
        ray_local.get(replay.add(transitions(np.arange(12) + 100 * step), rng.uniform(0, 2, 12)))
        ray_local.get(replay.update_priorities(replay.sample(8), rng.uniform(0, 2, 8)))
    state = replay.state_dict()
    after = [replay.sample(16) for _ in range(3)]
    other = memory(40, shards=2, alpha=0.6, eps=0.01, seed=99)
    other.load_state_dict(state)
    again = [other.sample(16) for _ in range(3)]
    for a, b in zip(after, again, strict=True):
        for key in ("shards", "slots", "weights", "probabilities", "obs", "generation"):
            assert np.array_equal(a[key], b[key]), key
    restored = other.state_dict()
    for mine, theirs in zip(state["shards"], restored["shards"], strict=True):
        np.testing.assert_array_equal(mine["sampler"]["priorities"], theirs["sampler"]["priorities"])
    replay.shutdown()
    other.shutdown()


def test_a_refused_checkpoint_changes_no_shard(local: Any) -> None:
    replay = memory(20, shards=2, seed=9)
    local.get([replay.add(transitions(np.arange(5) + 10 * s), np.arange(1.0, 6.0), shard=s) for s in (0, 1)])
    before = replay.state_dict()
    bad = replay.state_dict()
    bad["shards"][1]["sampler"]["priorities"] = bad["shards"][1]["sampler"]["priorities"][:3]  # broken
    with pytest.raises(ValueError, match="refused"):
        replay.load_state_dict(bad)
    after = replay.state_dict()
    for mine, theirs in zip(before["shards"], after["shards"], strict=True):
        np.testing.assert_array_equal(mine["sampler"]["priorities"], theirs["sampler"]["priorities"])
        np.testing.assert_array_equal(mine["memory"]["extra.tag"], theirs["memory"]["extra.tag"])
    assert before["rng"] == after["rng"] and before["draws"] == after["draws"]
    with pytest.raises(ValueError, match="list of 2"):
        replay.load_state_dict({**before, "shards": before["shards"][:1]})


def test_prefetch_hands_out_batches_drawn_ahead(local: Any) -> None:
    replay = memory(16, seed=10)
    local.get(replay.add(transitions(np.arange(8)), np.ones(8)))
    with replay.prefetch(4, depth=2, total=5) as batches:
        drawn = list(batches)
    assert len(drawn) == 5 and all(b.obs.shape == (4, 2) for b in drawn)
    assert replay.sample(3).obs.shape == (3, 2)  # the handle draws on after the thread


def test_bad_arguments_are_refused_naming_them(local: Any) -> None:
    with pytest.raises(ValueError, match="shards"):
        memory(4, shards=5)
    with pytest.raises(ValueError, match="weight_norm"):
        memory(4, weight_norm="max")
    replay = memory(8, seed=11)
    with pytest.raises(ValueError, match="shard"):
        replay.add(transitions(np.arange(2)), shard=1)
    local.get(replay.add(transitions(np.arange(2)), [1.0, 1.0]))
    batch = replay.sample(2)
    with pytest.raises(ValueError, match="priorities"):
        replay.update_priorities(batch, [1.0, -1.0])
    with pytest.raises(ValueError, match="one value per transition"):
        replay.update_priorities(batch, [1.0])


def test_shard_refuses_what_a_remote_memory_cannot_hold() -> None:
    """In-process: n-step belongs to the actor (frame stacks: tests/test_frame_stream.py); a bad
    add changes nothing."""
    with pytest.raises(ValueError, match="n_step"):
        ReplayShard(8, (2,), n_step=3)
    shard = ReplayShard(8, (2,), obs_dtype=np.float64, extras={"tag": ((), np.int64)})
    with pytest.raises(ValueError, match="lack"):
        shard.add({"obs": np.zeros((1, 2))})
    with pytest.raises(ValueError, match="priorities"):
        shard.add(transitions(np.arange(2)), priorities=[1.0, np.nan])
    assert shard.info()["num_added"] == 0
