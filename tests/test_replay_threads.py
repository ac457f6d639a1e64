"""Several threads on one ``PrioritizedReplay``: actors adding while a learner samples and updates.

Three actor threads feed one replay (frame stack 4, two streams each): one through
``add_vector_step``, one through ``add_many``, one through ``add``, while a learner thread draws,
checks and re-prioritises, for a fixed number of operations each, the interpreter switching threads
as often as it can.  Every frame encodes ``(stream, episode, step)``, so a torn batch (``obs`` of
one transition and ``next_obs``, action, reward or extras of another, or of a slot rewritten
between the draw and the gather) is caught.  Afterwards the memory passes ``check_valid()`` and
the sampler's filled slots are exactly the memory's drawable ones.  Without the replay's lock
(``tests/plant_no_lock.py replay``) the batches tear and the sampler loses track of the memory.

Also the background prefetch (:class:`prisample.replay.Prefetcher`): same draws as ``sample``,
clean shutdown, exceptions carried to the caller.
"""

from __future__ import annotations

import copy
import gc
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from prisample import LinearSchedule, PrioritizedReplay
from prisample.replay import Prefetcher
from tests.reference import BACKENDS
from tests.test_threads import run_threads

CAPACITY = 48
STACK = 4
GAMMA = 0.5
STEPS = 150  # vector steps per actor (two transitions each)
LEARNER_OPS = 300
K = 8


def episode_length(stream: int, episode: int) -> int:
    return 3 + (7 * stream + 3 * episode) % 11


def frame(stream: int, episode: int, t: int) -> np.ndarray:
    return np.array([stream, episode, t], dtype=np.float32)


def stack(stream: int, episode: int, t: int) -> np.ndarray:
    return np.stack([frame(stream, episode, max(t - j, 0)) for j in range(STACK - 1, -1, -1)])


def tag(stream: int, episode: int, t: int) -> int:
    return stream * 1_000_000 + episode * 1_000 + t


class Episodes:
    """Streams of synthetic episodes: ``(obs, action, reward, next_obs, ended, tag)`` per step."""

    def __init__(self, streams: list[int]) -> None:
        self.streams = streams
        self.episode = [0] * len(streams)
        self.t = [0] * len(streams)

    def step(self) -> list[tuple[np.ndarray, int, float, np.ndarray, bool, int]]:
        rows = []
        for i, s in enumerate(self.streams):
            e, t = self.episode[i], self.t[i]
            ended = t + 1 == episode_length(s, e)
            rows.append((stack(s, e, t), t, 1.0, stack(s, e, t + 1), ended, tag(s, e, t)))
            self.episode[i], self.t[i] = (e + 1, 0) if ended else (e, t + 1)
        return rows


def numpy(value: Any) -> np.ndarray:
    return value.cpu().numpy() if hasattr(value, "cpu") else np.asarray(value)


def check_batch(batch: Any, draw: Any, n_step: int) -> None:
    """Each row one transition: obs, action, extras, n-step reward, discount and next_obs agree."""
    obs, next_obs = numpy(batch.obs), numpy(batch.next_obs)
    action, reward, discount = numpy(batch.action), numpy(batch.reward), numpy(batch.discount)
    generation, label = numpy(batch.generation), numpy(batch.extras["tag"])
    assert np.array_equal(generation % CAPACITY, draw.indices), "a slot rewritten between draw and gather"
    for j in range(obs.shape[0]):
        s, e, t = (int(v) for v in obs[j, -1])
        assert np.array_equal(obs[j], stack(s, e, t)), f"torn obs stack: {obs[j].tolist()}"
        assert action[j] == t and label[j] == tag(s, e, t), f"action/extra of another transition: {s, e, t}"
        m = round(float(np.log(discount[j]) / np.log(GAMMA)))
        assert 1 <= m <= n_step and (m == n_step or t + m == episode_length(s, e)), (s, e, t, m)
        assert np.isclose(reward[j], sum(GAMMA**i for i in range(m))), (s, e, t, m, reward[j])
        assert np.array_equal(next_obs[j], stack(s, e, t + m)), (
            f"torn batch: obs {(s, e, t)}, next_obs {next_obs[j, -1].tolist()} (m={m})"
        )


def vector_actor(replay: PrioritizedReplay) -> Callable[[], None]:
    episodes = Episodes([0, 1])

    def body() -> None:
        for _ in range(STEPS):
            rows = episodes.step()
            ended = np.array([r[4] for r in rows])
            replay.add_vector_step(
                np.stack([r[0] for r in rows]),
                np.array([r[1] for r in rows]),
                np.ones(2, np.float32),
                np.zeros(2, bool),
                ended,
                np.stack([r[3] for r in rows]),
                {},
                gamma=GAMMA,
                autoreset_mode="Disabled",
                tag=np.array([r[5] for r in rows]),
            )

    return body


def many_actor(replay: PrioritizedReplay) -> Callable[[], None]:
    episodes = Episodes([2, 3])

    def body() -> None:
        for _ in range(STEPS):
            rows = episodes.step()
            replay.add_many(
                np.stack([r[0] for r in rows]),
                np.array([r[1] for r in rows]),
                np.ones(2),
                np.full(2, GAMMA),
                np.stack([r[3] for r in rows]),
                episode_end=np.array([r[4] for r in rows]),
                streams=np.array([2, 3]),
                tag=np.array([r[5] for r in rows]),
            )

    return body


def single_actor(replay: PrioritizedReplay) -> Callable[[], None]:
    episodes = Episodes([4, 5])

    def body() -> None:
        for _ in range(STEPS):
            for stream, row in zip([4, 5], episodes.step(), strict=True):
                obs, action, reward, next_obs, ended, label = row
                replay.add(obs, action, reward, GAMMA, next_obs, episode_end=ended, stream=stream, tag=label)

    return body


def learner(replay: PrioritizedReplay, n_step: int, batches: list[int]) -> Callable[[], None]:
    rng = np.random.default_rng(7)

    def body() -> None:
        while replay.sampler.size == 0:  # the first complete windows; from then on never empty
            time.sleep(1e-4)
        for i in range(LEARNER_OPS):
            batch, draw = replay.sample(K)
            check_batch(batch, draw, n_step)
            replay.update_priorities(draw.indices, rng.uniform(0.0, 5.0, K), generations=batch.generation)
            batches.append(1)
            if i % 50 == 0:
                _ = replay.state_dict(), len(replay), replay.nbytes

    return body


def make_replay(backend: str, n_step: int, device: str | None = None) -> PrioritizedReplay:
    return PrioritizedReplay(
        CAPACITY,
        (3,),
        frame_stack=STACK,
        obs_dtype=np.float32,
        num_streams=6,
        n_step=n_step,
        extras={"tag": ((), np.int64)},
        device=device,
        alpha=0.7,
        beta=LinearSchedule(0.4, 1.0, 1000),
        backend=backend,
        seed=0,
    )


CASES = [(b, n, None) for b in BACKENDS for n in (1, 3)] + [("proportional", 3, "cpu")]


@pytest.mark.parametrize(("backend", "n_step", "device"), CASES, ids=lambda v: str(v))
def test_actors_and_learner_on_one_replay(backend: str, n_step: int, device: str | None) -> None:
    """Regression: without the replay's lock an add landing between a draw and its gather returned
    a rewritten slot's transition, and one landing inside another add's memory write + sampler
    add left the sampler holding slots the memory had evicted (or missing completed windows)."""
    replay = make_replay(backend, n_step, device)
    batches: list[int] = []
    actors = [vector_actor(replay), many_actor(replay), single_actor(replay)]
    run_threads([*actors, learner(replay, n_step, batches)])
    assert len(batches) == LEARNER_OPS
    assert replay.memory.num_added == 3 * 2 * STEPS
    replay.memory.check_valid()
    filled = ~np.isnan(replay.sampler.priorities)
    assert np.array_equal(filled, replay.memory.drawable(np.arange(CAPACITY))), "sampler and memory disagree"
    batch, draw = replay.sample(K)
    check_batch(batch, draw, n_step)


def test_replay_lock_is_the_samplers_and_copies_get_their_own() -> None:
    replay = make_replay("rank", 1)
    assert replay.lock is replay.sampler.lock
    single_actor(replay)()
    twins = (copy.deepcopy(replay), pickle.loads(pickle.dumps(replay)))
    expected = replay.sample(4)[1]
    for twin in twins:
        assert twin.lock is twin.sampler.lock and twin.lock is not replay.lock
        assert np.array_equal(twin.sample(4)[1].indices, expected.indices)


# -- prefetch ---------------------------------------------------------------------------------------
def filled_replay(backend: str = "proportional", n_step: int = 1) -> PrioritizedReplay:
    replay = make_replay(backend, n_step)
    single_actor(replay)()
    many_actor(replay)()
    return replay


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "prisample-prefetch"]


@pytest.mark.parametrize("depth", [0, 1, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_prefetch_draws_what_sample_draws(backend: str, depth: int) -> None:
    """Without updates in between, a prefetcher returns exactly ``sample``'s batches (same seed),
    with the β schedule's values in order."""
    plain, fetched = filled_replay(backend), filled_replay(backend)
    expected = [plain.sample(K) for _ in range(12)]
    with fetched.prefetch(K, depth=depth) as batches:
        got = [next(batches) for _ in range(12)]
    for (b0, d0), (b1, d1) in zip(expected, got, strict=True):
        assert np.array_equal(d0.indices, d1.indices)
        assert np.array_equal(d0.weights, d1.weights) and np.array_equal(d0.probabilities, d1.probabilities)
        assert np.array_equal(b0.obs, b1.obs) and np.array_equal(b0.generation, b1.generation)
    assert batches.taken == 12


def test_prefetch_total_draws_exactly_and_updates_land() -> None:
    """``total=`` draws exactly that many batches: the β step ends where ``sample`` would leave it,
    and updates from the caller (with generations) land as without prefetch (depth 0 = exact)."""
    plain, fetched = filled_replay(), filled_replay()
    errors = np.random.default_rng(3).uniform(0.0, 4.0, (20, K))
    for e in errors:
        batch, draw = plain.sample(K)
        plain.update_priorities(draw.indices, e, generations=batch.generation)
    with fetched.prefetch(K, depth=0, total=20) as batches:
        for e, (batch, draw) in zip(errors, batches, strict=True):
            fetched.update_priorities(draw.indices, e, generations=batch.generation)
    assert batches.taken == 20 and batches.closed
    assert np.array_equal(plain.sampler.priorities, fetched.sampler.priorities, equal_nan=True)
    assert plain.sampler.state_dict()["step"] == fetched.sampler.state_dict()["step"] == 20
    with fetched.prefetch(K, depth=2, total=5) as batches:
        assert len(list(batches)) == 5
    assert fetched.sampler.state_dict()["step"] == 25


def test_prefetch_stops_its_thread() -> None:
    """No leaked threads: context exit, ``close()``, exhaustion and garbage collection all end the
    producer, even while it waits for room."""
    replay = filled_replay()
    before = len(prefetch_threads())
    with replay.prefetch(K, depth=2) as batches:
        next(batches)
        time.sleep(0.01)  # the producer fills its depth and waits
    assert len(prefetch_threads()) == before
    batches = replay.prefetch(K, depth=1)
    batches.close()
    batches.close()  # idempotent
    with pytest.raises(StopIteration):
        next(batches)
    assert list(replay.prefetch(K, depth=1, total=3)).__len__() == 3
    dropped = replay.prefetch(K, depth=1)
    next(dropped)
    del dropped
    gc.collect()
    for _ in range(100):
        if len(prefetch_threads()) == before:
            break
        time.sleep(0.01)
    assert len(prefetch_threads()) == before


def test_prefetch_raises_the_threads_exception() -> None:
    """An exception in the producer is raised by ``next()`` (same type and message) and stops it."""
    empty = make_replay("proportional", 3)
    empty.add(stack(0, 0, 0), 0, 1.0, GAMMA, stack(0, 0, 1), tag=0)  # stored, window incomplete
    for depth in (0, 1):
        batches = empty.prefetch(K, depth=depth)
        with pytest.raises(ValueError, match="no transition can be drawn yet"):
            next(batches)
        batches.close()
    assert not any(t.is_alive() for t in prefetch_threads())
    with pytest.raises(ValueError, match="depth should be an integer >= 0"):
        Prefetcher(empty, K, depth=-1)
    with pytest.raises(ValueError, match="k should be an integer >= 1"):
        empty.prefetch(0)


def test_prefetch_with_actors_adding() -> None:
    """Prefetch while actor threads add: batches stay whole, stale updates are dropped, not
    misapplied, and the sampler still matches the memory."""
    replay = make_replay("rank", 3)
    single_actor(replay)()

    def learn() -> None:
        rng = np.random.default_rng(1)
        with replay.prefetch(K, depth=2, total=LEARNER_OPS // 2) as batches:
            for batch, draw in batches:
                check_batch(batch, draw, 3)
                replay.update_priorities(draw.indices, rng.uniform(0, 3, K), generations=batch.generation)

    run_threads([vector_actor(replay), many_actor(replay), learn])
    replay.memory.check_valid()
    assert np.array_equal(~np.isnan(replay.sampler.priorities), replay.memory.drawable(np.arange(CAPACITY)))
    assert not prefetch_threads()
