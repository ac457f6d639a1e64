"""Prioritized eviction (``PrioritizedReplay(eviction="priority")``, Schaul et al. 2016, Sec. 6):
a full memory evicts the live transition of lowest priority (the oldest among equals), checked
against a brute-force list over random operation sequences."""

from __future__ import annotations

import copy
import pickle
from collections import deque
from typing import Any

import numpy as np
import pytest
import torch

from prisample.replay import PrioritizedReplay

FRAME = (3,)
LEVELS = (0.0, 0.25, 1.0, 2.0)  # few values: ties are frequent


class Reference:
    """The memory as a plain dict: number -> [priority, transition]; a full memory drops the
    argmin of (priority, number); a new transition enters at the maximum priority (1 if empty)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: dict[int, list[Any]] = {}
        self.added = 0

    def add(self, transition: dict[str, Any]) -> None:
        if len(self.items) == self.capacity:
            victim = min(self.items, key=lambda g: (self.items[g][0], g))
            del self.items[victim]
        top = max((p for p, _ in self.items.values()), default=1.0)
        self.items[self.added] = [top, transition]
        self.added += 1


class Streams:
    """``streams`` environments of stacked float frames; every frame value is unique."""

    def __init__(self, rng: np.random.Generator, stack: int, streams: int) -> None:
        self.rng, self.stack, self.count = rng, stack, 0
        self.frames = [deque(maxlen=stack) for _ in range(streams)]
        for s in range(streams):
            self._reset(s)

    def _frame(self) -> np.ndarray:
        self.count += 1
        return np.full(FRAME, self.count, dtype=np.float32)

    def _reset(self, s: int) -> None:
        self.frames[s].extend([self._frame()] * self.stack)

    def _obs(self, s: int) -> np.ndarray:
        stack = np.stack(self.frames[s])
        return stack if self.stack > 1 else stack[0]

    def step(self, s: int) -> dict[str, Any]:
        obs = self._obs(s)
        self.frames[s].append(self._frame())
        end = bool(self.rng.random() < 0.1)
        t = {
            "obs": obs,
            "action": int(self.rng.integers(4)),
            "reward": float(self.rng.normal()),
            "discount": 0.0 if end else 0.99,
            "next_obs": self._obs(s),
            "episode_end": end,
            "stream": s,
        }
        if end:
            self._reset(s)
        return t


def make(
    capacity: int, stack: int, streams: int, backend: str, seed: int = 0, **kw: Any
) -> PrioritizedReplay:
    kw.setdefault("frame_capacity", capacity * (stack + 2) + 4 * stack * (streams + 2))  # never short
    return PrioritizedReplay(
        capacity,
        FRAME,
        frame_stack=stack,
        obs_dtype=np.float32,
        num_streams=streams,
        alpha=0.7,
        beta=0.5,
        backend=backend,
        seed=seed,
        eviction="priority",
        **kw,
    )


def compare(replay: PrioritizedReplay, ref: Reference) -> None:
    """Same live transitions (by number), same priorities, same contents."""
    replay.check_valid()
    slots = np.arange(replay.capacity)
    numbers = replay.generations(slots)
    live = numbers >= 0
    assert sorted(numbers[live].tolist()) == sorted(ref.items)
    assert len(replay) == len(ref.items)
    priorities = replay.sampler.priorities
    for slot in np.flatnonzero(live):
        assert priorities[slot] == ref.items[int(numbers[slot])][0], slot
    if live.any():
        batch = replay.memory.get(np.flatnonzero(live))
        for i, slot in enumerate(np.flatnonzero(live)):
            t = ref.items[int(numbers[slot])][1]
            np.testing.assert_array_equal(batch.obs[i], t["obs"])
            np.testing.assert_array_equal(batch.next_obs[i], t["next_obs"])
            assert batch.action[i] == t["action"]
            assert batch.reward[i] == np.float32(t["reward"])
            assert batch.discount[i] == np.float32(t["discount"])


def run_sequence(
    replay: PrioritizedReplay,
    ref: Reference,
    rng: np.random.Generator,
    steps: int,
    streams: int,
    env: Streams,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random adds, vector adds, draws and (possibly stale) updates, compared after each step."""
    draws: list[tuple[np.ndarray, np.ndarray]] = []
    for _ in range(steps):
        op = rng.random()
        if op < 0.45:
            t = env.step(int(rng.integers(streams)))
            replay.add(**t)
            ref.add(t)
        elif op < 0.6:
            n = int(rng.integers(1, streams + 1))
            ts = [env.step(s) for s in rng.permutation(streams)[:n]]
            replay.add_many(
                np.stack([t["obs"] for t in ts]),
                np.array([t["action"] for t in ts]),
                np.array([t["reward"] for t in ts]),
                np.array([t["discount"] for t in ts]),
                np.stack([t["next_obs"] for t in ts]),
                episode_end=np.array([t["episode_end"] for t in ts]),
                streams=np.array([t["stream"] for t in ts]),
            )
            for t in ts:
                ref.add(t)
        elif op < 0.8 and len(replay):
            batch, draw = replay.sample(int(rng.integers(1, 6)))
            for i, g in enumerate(batch.generation):
                assert int(g) in ref.items  # a drawn transition is live, and its contents are the reference's
                np.testing.assert_array_equal(batch.obs[i], ref.items[int(g)][1]["obs"])
            draws.append((draw.indices, np.asarray(batch.generation)))
        elif draws:
            idx, gens = draws[int(rng.integers(len(draws)))]  # often stale
            values = rng.choice(LEVELS, size=idx.shape[0]) if rng.random() < 0.7 else rng.random(idx.shape[0])
            holds = replay.generations(idx)
            before = replay.dropped_updates
            replay.update_priorities(idx, values, generations=gens)
            applied = 0
            for slot_number, g, v in zip(holds, gens, values, strict=True):
                if slot_number == g and int(g) in ref.items:  # the slot still holds it
                    ref.items[int(g)][0] = float(v)
                    applied += 1
            assert replay.dropped_updates - before == idx.shape[0] - applied
        compare(replay, ref)
    return draws


@pytest.mark.parametrize("backend", ["proportional", "rank"])
@pytest.mark.parametrize(("stack", "streams"), [(1, 1), (1, 3), (4, 1), (4, 3)])
def test_matches_the_reference_list(backend: str, stack: int, streams: int) -> None:
    for seed in range(3):
        rng = np.random.default_rng(seed)
        capacity = int(rng.integers(1, 9))
        replay, ref = make(capacity, stack, streams, backend, seed), Reference(capacity)
        run_sequence(replay, ref, rng, 150, streams, Streams(rng, stack, streams))


def test_lowest_priority_leaves_and_the_oldest_among_equals() -> None:
    """Hand-made: priorities 2, 0.5, 0.5, 3 in slots 0..3 -> slot 1 (older of the two 0.5) goes."""
    replay = make(4, 1, 1, "proportional")
    env = Streams(np.random.default_rng(0), 1, 1)
    for _ in range(4):
        replay.add(**env.step(0))
    batch = replay.memory.get(np.arange(4))
    replay.update_priorities(np.arange(4), [2.0, 0.5, 0.5, 3.0], generations=batch.generation)
    slot = replay.add(**env.step(0))
    numbers = replay.generations(np.arange(4))
    assert sorted(numbers.tolist()) == [0, 2, 3, 4]
    assert slot == 0  # the ring writes the oldest position: transition 0 moved to slot 1
    assert numbers.tolist() == [4, 0, 2, 3]
    np.testing.assert_array_equal(replay.sampler.priorities, [3.0, 2.0, 0.5, 3.0])
    replay.check_valid()


def test_all_equal_priorities_evict_like_fifo() -> None:
    """Without updates every priority ties, and the oldest leaves: the ring order, no moves."""
    fifo = PrioritizedReplay(5, FRAME, frame_stack=4, obs_dtype=np.float32, seed=1)
    prio = make(5, 4, 1, "proportional", seed=1, frame_capacity=None)
    env = Streams(np.random.default_rng(0), 4, 1)
    for _ in range(23):
        t = env.step(0)
        assert fifo.add(**t) == prio.add(**t)
    a, _ = fifo.sample(8)
    b, _ = prio.sample(8)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.generation, b.generation)


def test_stale_updates_after_eviction_are_dropped() -> None:
    """Regression (stale-update guard under moves): an update for the evicted transition must not
    land on the survivor moved into its slot, nor the survivor's on the new transition."""
    replay = make(3, 4, 1, "rank")
    env = Streams(np.random.default_rng(0), 4, 1)
    for _ in range(3):
        replay.add(**env.step(0))
    batch = replay.memory.get(np.arange(3))
    gens = batch.generation.copy()
    replay.update_priorities(np.arange(3), [1.0, 0.1, 1.0], generations=gens)  # slot 1 lowest
    replay.sample(64)  # draw record: every slot
    replay.add(**env.step(0))  # evicts transition 1; transition 0 moves from slot 0 into slot 1
    assert replay.generations(np.arange(3)).tolist() == [3, 0, 2]
    before = replay.dropped_updates
    replay.update_priorities([1, 0], [9.0, 9.0], generations=[1, 0])  # both stale
    assert replay.dropped_updates == before + 2
    replay.update_priorities([1, 0], [9.0, 9.0])  # stale through the draw record too
    assert replay.dropped_updates == before + 4
    np.testing.assert_array_equal(replay.sampler.priorities[:2], [1.0, 1.0])
    replay.update_priorities([1], [5.0], generations=[0])  # transition 0, now in slot 1
    assert replay.sampler.priorities[1] == 5.0
    replay.check_valid()


def test_evicting_a_middle_transition_keeps_shared_frames() -> None:
    """Stacks share frames with their neighbours: a middle transition leaving must not free them."""
    replay = make(4, 4, 1, "proportional")
    env = Streams(np.random.default_rng(0), 4, 1)
    kept = [env.step(0) for _ in range(4)]
    for t in kept:
        replay.add(**t)
    gens = replay.memory.get(np.arange(4)).generation
    replay.update_priorities(np.arange(4), [1.0, 1.0, 0.01, 1.0], generations=gens)  # middle goes
    replay.add(**env.step(0))
    compare_to = {0: kept[0], 1: kept[1], 3: kept[3]}
    numbers = replay.generations(np.arange(4))
    batch = replay.memory.get(np.arange(4))
    for slot in range(4):
        g = int(numbers[slot])
        if g in compare_to:
            np.testing.assert_array_equal(batch.obs[slot], compare_to[g]["obs"])
            np.testing.assert_array_equal(batch.next_obs[slot], compare_to[g]["next_obs"])
    replay.check_valid()


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_state_dict_round_trip_continues_exactly(backend: str) -> None:
    rng = np.random.default_rng(5)
    replay, ref = make(6, 4, 2, backend, seed=3), Reference(6)
    env = Streams(rng, 4, 2)
    run_sequence(replay, ref, rng, 60, 2, env)
    state = pickle.loads(pickle.dumps(replay.state_dict(include_memory=True)))
    assert state["eviction"] == "priority" and state["numbers"].dtype == np.int64
    clone = make(6, 4, 2, backend, seed=99)
    clone.load_state_dict(state)
    clone.check_valid()
    twin_ref = copy.deepcopy(ref)
    r1, r2 = np.random.default_rng(7), np.random.default_rng(7)
    env2 = copy.deepcopy(env)
    run_sequence(replay, ref, r1, 60, 2, env)
    run_sequence(clone, twin_ref, r2, 60, 2, env2)
    np.testing.assert_array_equal(replay.sampler.priorities, clone.sampler.priorities)
    np.testing.assert_array_equal(replay.generations(np.arange(6)), clone.generations(np.arange(6)))
    twin = pickle.loads(pickle.dumps(replay))  # the order must keep sharing its keys after a copy
    run_sequence(twin, copy.deepcopy(ref), np.random.default_rng(8), 40, 2, copy.deepcopy(env))


def test_fifo_states_load_and_priority_states_do_not_load_into_fifo() -> None:
    env = Streams(np.random.default_rng(0), 1, 1)
    fifo = PrioritizedReplay(4, FRAME, obs_dtype=np.float32, seed=0)
    for _ in range(6):
        fifo.add(**env.step(0))
    state = fifo.state_dict(include_memory=True)
    assert state["version"] == 3 and state["eviction"] == "fifo" and state["numbers"] is None
    prio = make(4, 1, 1, "proportional", frame_capacity=None)
    old = {k: v for k, v in state.items() if k not in ("eviction", "numbers")}
    prio.load_state_dict({**old, "version": 2})  # a version 2 state is a fifo one
    prio.check_valid()
    np.testing.assert_array_equal(prio.generations(np.arange(4)), [4, 5, 2, 3])
    prio.add(**env.step(0))
    prio.check_valid()
    saved = prio.state_dict(include_memory=True)
    back = PrioritizedReplay(4, FRAME, obs_dtype=np.float32, seed=0)
    with pytest.raises(ValueError, match="eviction should be 'fifo'"):
        back.load_state_dict(saved)
    bad = copy.deepcopy(saved)
    bad["numbers"][np.flatnonzero(bad["numbers"] >= 0)[:2]] = 0
    with pytest.raises(ValueError, match="numbers should be distinct"):
        prio.load_state_dict(bad)
    prio.check_valid()


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="eviction should be one of"):
        PrioritizedReplay(4, FRAME, eviction="lowest")
    with pytest.raises(ValueError, match=r"eviction='priority' needs n_step=1.*n_step=3"):
        PrioritizedReplay(4, FRAME, eviction="priority", n_step=3)
    assert PrioritizedReplay(4, FRAME).eviction == "fifo"


def test_a_rejected_add_changes_nothing() -> None:
    replay = make(3, 4, 1, "proportional")
    env = Streams(np.random.default_rng(0), 4, 1)
    for _ in range(3):
        replay.add(**env.step(0))
    gens = replay.memory.get(np.arange(3)).generation
    replay.update_priorities(np.arange(3), [1.0, 2.0, 0.1], generations=gens)
    before = copy.deepcopy(replay.state_dict(include_memory=True))
    t = env.step(0)
    with pytest.raises(ValueError, match="discount"):
        replay.add(**{**t, "discount": 2.0})
    with pytest.raises(ValueError, match="discount"):
        replay.add_many(t["obs"][None], [0], [0.0], [3.0], t["next_obs"][None])
    after = replay.state_dict(include_memory=True)
    for key in ("obs_rows", "next_rows", "action", "reward", "discount", "generation"):
        np.testing.assert_array_equal(after["memory"][key], before["memory"][key])
    np.testing.assert_array_equal(after["numbers"], before["numbers"])
    np.testing.assert_array_equal(after["sampler"]["priorities"], before["sampler"]["priorities"])
    replay.check_valid()


def test_short_frame_pool_stays_consistent() -> None:
    """A small frame pool under frame stacking: scattered survivors keep their own frames, the
    pool runs short and extra transitions leave in ring order; every invariant still holds."""
    rng = np.random.default_rng(3)
    replay = make(16, 4, 2, "proportional", frame_capacity=16 + 2 * 4 * 3 + 4)
    short = False
    env = Streams(rng, 4, 2)
    for step in range(300):
        t = env.step(int(rng.integers(2)))
        replay.add(**t)
        if step % 3 == 0:
            _, draw = replay.sample(4)
            replay.update_priorities(draw.indices, rng.random(4))
        replay.check_valid()
        short |= len(replay) < 16 and step >= 16
    assert short


def test_default_frame_pool_holds_scattered_survivors() -> None:
    replay = make(10, 4, 3, "proportional", frame_capacity=None)
    assert replay.memory.frame_capacity == 5 * 10 + 2 * 4 * 4
    fifo = PrioritizedReplay(10, FRAME, frame_stack=4, obs_dtype=np.float32, num_streams=3)
    assert fifo.memory.frame_capacity == 2 * 10 + 2 * 4 * 4


def test_dict_observations_move_with_their_transitions() -> None:
    replay = PrioritizedReplay(3, {"a": (2,), "b": ()}, obs_dtype=np.float32, eviction="priority", seed=0)
    for t in range(3):
        replay.add({"a": np.full(2, t), "b": t}, 0, 0.0, 0.9, {"a": np.full(2, t + 1), "b": t + 1})
    gens = replay.memory.get(np.arange(3)).generation
    replay.update_priorities(np.arange(3), [1.0, 0.1, 1.0], generations=gens)
    replay.add({"a": np.full(2, 3), "b": 3}, 0, 0.0, 0.9, {"a": np.full(2, 4), "b": 4})
    numbers = replay.generations(np.arange(3))
    batch = replay.memory.get(np.arange(3))
    for slot in range(3):
        assert batch.obs["b"][slot] == numbers[slot]
        np.testing.assert_array_equal(batch.next_obs["a"][slot], np.full(2, numbers[slot] + 1))
    replay.check_valid()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_mirror_follows_moves() -> None:
    rng = np.random.default_rng(0)
    host, dev = make(5, 4, 2, "proportional", seed=2), make(5, 4, 2, "proportional", seed=2, device="cuda")
    env = Streams(rng, 4, 2)
    for _ in range(80):
        t = env.step(int(rng.integers(2)))
        host.add(**t)
        dev.add(**t)
        a, da = host.sample(3)
        b, db = dev.sample(3)
        np.testing.assert_array_equal(a.obs, b.obs.cpu().numpy())
        np.testing.assert_array_equal(a.reward, b.reward.cpu().numpy())
        np.testing.assert_array_equal(a.generation, b.generation.cpu().numpy())
        values = rng.random(3)
        host.update_priorities(da.indices, values, generations=a.generation)
        dev.update_priorities(db.indices, values, generations=b.generation)
    dev.check_valid()


@pytest.mark.parametrize("backend", ["proportional", "rank"])
def test_vector_steps_with_skipped_resets_match_the_reference(backend: str) -> None:
    """NextStep autoreset skips the reset step of an ended env, so a vector step writes fewer
    transitions than it has envs: the victims made room for must leave lowest first."""
    from prisample.replay.vector_env import VectorStepConverter

    rng = np.random.default_rng(11)
    envs, capacity = 3, 4
    replay, ref = make(capacity, 1, envs, backend), Reference(capacity)
    twin = VectorStepConverter(envs, autoreset_mode="NextStep")
    obs, count, draws = np.zeros((envs, 3), np.float32), 0, []
    resetting = np.zeros(envs, np.bool_)  # next-step autoreset: the step after an end is a reset
    for _ in range(200):
        count += envs
        next_obs = (count + np.arange(envs, dtype=np.float32))[:, None] * np.ones((1, 3), np.float32)
        action, reward = rng.integers(4, size=envs), rng.normal(size=envs)
        terminated, truncated = (rng.random(envs) < 0.3) & ~resetting, np.zeros(envs, np.bool_)
        resetting = terminated
        rows = twin.step(obs, action, reward, terminated, truncated, next_obs, {}, gamma=0.9)
        replay.add_vector_step(
            obs, action, reward, terminated, truncated, next_obs, {}, gamma=0.9, autoreset_mode="NextStep"
        )
        for i in range(rows.streams.shape[0]):
            ref.add(
                {
                    "obs": rows.obs[i],
                    "action": rows.action[i],
                    "reward": rows.reward[i],
                    "discount": rows.discount[i],
                    "next_obs": rows.next_obs[i],
                }
            )
        obs = next_obs
        if len(replay) and rng.random() < 0.5:
            batch, draw = replay.sample(3)
            draws.append((draw.indices, batch.generation))
        if draws:
            idx, gens = draws[-1]
            values = rng.choice(LEVELS, size=idx.shape[0])
            holds = replay.generations(idx)
            replay.update_priorities(idx, values, generations=gens)
            for slot_number, g, v in zip(holds, gens, values, strict=True):
                if slot_number == g and int(g) in ref.items:
                    ref.items[int(g)][0] = float(v)
        compare(replay, ref)
