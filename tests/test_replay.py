"""ReplayMemory and PrioritizedReplay: exact stacks, live slots only, stale priorities dropped."""

from __future__ import annotations

import copy
import pickle
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from prisample.replay import PrioritizedReplay, ReplayMemory
from prisample.replay._checks import warn_if_too_large

FRAME = (5, 4)


class StackingEnv:
    """Frames of random pixels stacked like Atari's frame stacking: a reset repeats its frame."""

    def __init__(self, rng: np.random.Generator, stack: int, shape: tuple[int, ...] = FRAME) -> None:
        self.rng, self.stack, self.shape = rng, stack, shape
        self.frames: deque[np.ndarray] = deque(maxlen=stack)

    def _frame(self) -> np.ndarray:
        return self.rng.integers(0, 256, size=self.shape, dtype=np.uint8)

    def reset(self) -> np.ndarray:
        first = self._frame()
        self.frames.extend([first] * self.stack)
        return self.observation()

    def step(self) -> np.ndarray:
        self.frames.append(self._frame())
        return self.observation()

    def observation(self) -> np.ndarray:
        stack = np.stack(self.frames)
        return stack if self.stack > 1 else stack[0]


class Recorder:
    """Drives ``streams`` environments in random turns into a memory and keeps every transition."""

    def __init__(
        self, memory_add: Callable[..., int], stack: int, streams: int, seed: int, end_prob: float = 0.1
    ) -> None:
        self.add = memory_add
        self.rng = np.random.default_rng(seed)
        self.envs = [StackingEnv(self.rng, stack) for _ in range(streams)]
        self.obs = [env.reset() for env in self.envs]
        self.end_prob = end_prob
        self.added: list[tuple[int, dict[str, Any]]] = []  # (slot, transition) in order

    def step(self) -> int:
        stream = int(self.rng.integers(len(self.envs)))
        env = self.envs[stream]
        next_obs = env.step()
        end = bool(self.rng.random() < self.end_prob)
        action, reward = int(self.rng.integers(4)), float(self.rng.normal())
        discount = 0.0 if end and self.rng.random() < 0.5 else 1.0
        slot = self.add(self.obs[stream], action, reward, discount, next_obs, episode_end=end, stream=stream)
        self.added.append(
            (
                slot,
                {
                    "obs": self.obs[stream],
                    "action": action,
                    "reward": reward,
                    "discount": discount,
                    "next_obs": next_obs,
                },
            )
        )
        self.obs[stream] = env.reset() if end else next_obs
        return slot


def assert_matches(memory: ReplayMemory, added: list[tuple[int, dict[str, Any]]]) -> None:
    """The live transitions are the most recent ones, in order, and read back exactly."""
    n = len(memory)
    assert n <= memory.capacity
    live = added[len(added) - n :]
    slots = np.array([slot for slot, _ in live], dtype=np.int64)
    if n:
        assert memory.valid(slots).all()
        batch = memory.get(slots)
        for key in ("obs", "next_obs", "action"):
            expected = np.stack([np.asarray(t[key]) for _, t in live])
            np.testing.assert_array_equal(batch[key], expected, err_msg=key)
        for key in ("reward", "discount"):
            expected = np.array([t[key] for _, t in live], dtype=np.float32)
            np.testing.assert_array_equal(batch[key], expected, err_msg=key)
        np.testing.assert_array_equal(batch["generation"], np.arange(len(added) - n, len(added)))
    dead = np.setdiff1d(np.arange(memory.capacity), slots)
    assert not memory.valid(dead).any()


# -- frame-stack reconstruction ---------------------------------------------------------------------
@pytest.mark.parametrize(("stack", "streams"), [(4, 1), (4, 3), (1, 1), (1, 2), (3, 2)])
def test_stacks_equal_environment_stacks_across_episodes_and_wraparound(stack: int, streams: int) -> None:
    memory = ReplayMemory(50, FRAME, frame_stack=stack, num_streams=streams)
    recorder = Recorder(memory.add, stack, streams, seed=stack * 10 + streams)
    for t in range(400):  # eight wrap-arounds, about 40 episode ends
        recorder.step()
        if t % 7 == 0 or t > 380:
            assert_matches(memory, recorder.added)
    assert len(memory) == memory.capacity  # the default pool keeps every slot live here


@given(
    capacity=st.integers(1, 12),
    stack=st.integers(1, 4),
    streams=st.integers(1, 3),
    extra=st.integers(0, 12),
    end_prob=st.sampled_from([0.0, 0.2, 0.7]),
    steps=st.integers(1, 60),
    seed=st.integers(0, 2**16),
)
def test_reference_model_with_tight_frame_pool(
    capacity: int, stack: int, streams: int, extra: int, end_prob: float, steps: int, seed: int
) -> None:
    """Random streams, episode ends and a pool so small that old transitions are evicted early:
    the live transitions are always the most recent ones and read back exactly."""
    reserve = 2 * stack * (streams + 1)
    memory = ReplayMemory(
        capacity, FRAME, frame_stack=stack, num_streams=streams, frame_capacity=reserve + extra
    )
    recorder = Recorder(memory.add, stack, streams, seed, end_prob)
    for _ in range(steps):
        recorder.step()
        assert_matches(memory, recorder.added)
        assert memory.num_frames <= memory.frame_capacity
        assert len(memory) >= 1


def test_frames_are_shared() -> None:
    """One new frame per continuing transition; a reset stack of repeated frames costs one frame."""
    memory = ReplayMemory(100, FRAME, frame_stack=4)
    recorder = Recorder(memory.add, 4, 1, seed=0, end_prob=0.0)
    for _ in range(30):
        recorder.step()
    assert memory.num_frames == 30 + 1  # the reset frame, then one per step


def test_flat_observations_float32() -> None:
    """CartPole-like float32 (4,) observations, frame_stack=1, including -0.0 and subnormals exactly
    (non-finite observations are rejected: test_non_finite_values_are_rejected_after_the_cast)."""
    memory = ReplayMemory(8, (4,), obs_dtype=np.float32)
    obs = np.array([0.0, -0.0, 1e-45, 1.5], np.float32)
    nxt = np.array([-0.0, 0.0, 2.0, -3.4e38], np.float32)
    slot = memory.add(obs, 1, 1.0, 1.0, nxt)
    memory.add(nxt, 0, 1.0, 0.0, obs, episode_end=True)
    batch = memory.get([slot, 1])
    assert batch["obs"].shape == (2, 4) and batch["obs"].dtype == np.float32
    assert batch["obs"].tobytes() == np.stack([obs, nxt]).tobytes()
    assert batch["next_obs"].tobytes() == np.stack([nxt, obs]).tobytes()
    assert batch["discount"].tolist() == [1.0, 0.0]


def test_interleaved_streams_without_stream_id_warn() -> None:
    memory = ReplayMemory(8, FRAME, frame_stack=2)
    a, b = StackingEnv(np.random.default_rng(0), 2), StackingEnv(np.random.default_rng(1), 2)
    oa, ob = a.reset(), b.reset()
    memory.add(oa, 0, 0.0, 1.0, a.step())
    with pytest.warns(RuntimeWarning, match="stream"):
        memory.add(ob, 0, 0.0, 1.0, b.step())


# -- sampler and priorities ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["proportional", "rank", "greedy", "uniform"])
def test_sampling_returns_live_slots_only(backend: str) -> None:
    replay = PrioritizedReplay(
        20, FRAME, frame_stack=3, num_streams=2, frame_capacity=26, backend=backend, seed=1
    )
    recorder = Recorder(replay.add, 3, 2, seed=2, end_prob=0.3)
    rng = np.random.default_rng(3)
    sizes = []
    for t in range(300):
        recorder.step()
        sizes.append(len(replay))
        live = replay.memory.valid(np.arange(20))
        np.testing.assert_array_equal(~np.isnan(replay.sampler.priorities), live)
        if t >= 5:
            batch, draw = replay.sample(8)
            assert replay.memory.valid(draw.indices).all()
            np.testing.assert_array_equal(batch["generation"], replay.memory.generations(draw.indices))
            replay.update_priorities(draw.indices, rng.random(8) * 3)
    assert min(sizes[50:]) < 20  # the small pool did evict early


def test_overwritten_slot_priorities_are_ignored() -> None:
    """Regression for ray-project/ray#6534: a TD error computed for a transition that has since been
    overwritten was written onto the new transition in the same slot."""
    replay = PrioritizedReplay(4, (1,), obs_dtype=np.float32, alpha=1.0, seed=0)
    for t in range(4):
        replay.add([t], 0, 0.0, 1.0, [t + 1])
    _, draw = replay.sample(4)
    replay.add([4], 0, 0.0, 1.0, [5])  # overwrites slot 0
    rewritten = draw.indices == 0
    priorities = np.where(rewritten, 100.0, 2.0)
    replay.update_priorities(draw.indices, priorities)
    raw = replay.sampler.priorities
    assert raw[0] == 1.0  # the new transition keeps its entry priority (the max before the update)
    assert replay.dropped_updates == int(rewritten.sum())
    kept = draw.indices[~rewritten]
    np.testing.assert_array_equal(raw[kept], 2.0)
    replay.update_priorities([0], [9.0])  # slot 0 not drawn since it was rewritten: dropped too
    assert raw[0] == replay.sampler.priorities[0]


def test_repeated_draws_record_the_latest_generation() -> None:
    """Without ``generations=`` the generation of the slot's latest draw decides; with it, an update
    issued for a draw older than the slot's rewrite is dropped even after the slot is drawn again."""
    replay = PrioritizedReplay(2, (1,), obs_dtype=np.float32, backend="uniform", seed=0)
    replay.add([0], 0, 0.0, 1.0, [1])
    _, first = replay.sample(3)  # slot 0 only
    replay.add([1], 0, 0.0, 1.0, [2])
    replay.add([2], 0, 0.0, 1.0, [3])  # slot 0 rewritten
    replay.update_priorities(first.indices, [5.0, 5.0, 5.0])
    assert replay.sampler.priorities[0] == 1.0 and replay.dropped_updates == 3
    batch, second = replay.sample(4)
    replay.update_priorities(second.indices, np.full(4, 7.0), generations=batch["generation"])
    assert replay.dropped_updates == 3
    assert replay.sampler.priorities[second.indices].tolist() == [7.0] * 4
    assert (second.indices == 0).any()
    replay.update_priorities(first.indices, [3.0, 3.0, 3.0], generations=np.zeros(3, np.int64))
    assert replay.sampler.priorities[0] == 7.0 and replay.dropped_updates == 6


# -- checkpoints --------------------------------------------------------------------------------------
def test_state_dict_round_trip_continues_exactly() -> None:
    def run(replay: PrioritizedReplay, recorder: Recorder, steps: int) -> list[np.ndarray]:
        out = []
        rng = np.random.default_rng(len(recorder.added))
        for _ in range(steps):
            recorder.step()
            batch, draw = replay.sample(5)
            replay.update_priorities(draw.indices, rng.random(5))
            out += [batch["obs"], batch["next_obs"], draw.indices, draw.weights]
        return out

    kwargs = {"frame_stack": 4, "num_streams": 2, "alpha": 0.7, "seed": 4}
    replay = PrioritizedReplay(16, FRAME, **kwargs)  # type: ignore[arg-type]
    recorder = Recorder(replay.add, 4, 2, seed=5, end_prob=0.2)
    run(replay, recorder, 40)
    state = pickle.loads(pickle.dumps(replay.state_dict(include_memory=True)))
    rng_state = recorder.rng.bit_generator.state
    envs = pickle.loads(pickle.dumps((recorder.envs, recorder.obs)))
    expected = run(replay, recorder, 30)

    restored = PrioritizedReplay(16, FRAME, **kwargs)  # type: ignore[arg-type]
    restored.load_state_dict(state)
    recorder.add = restored.add
    recorder.rng.bit_generator.state = rng_state
    recorder.envs, recorder.obs = envs
    for env in recorder.envs:
        env.rng = recorder.rng
    recorder.added = recorder.added[:40]
    got = run(restored, recorder, 30)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)


def test_load_state_dict_rejects_mismatch_and_changes_nothing() -> None:
    replay = PrioritizedReplay(8, FRAME, frame_stack=2, seed=0)
    recorder = Recorder(replay.add, 2, 1, seed=0)
    for _ in range(5):
        recorder.step()
    state = replay.state_dict()  # without memory: sampler slots must match the memory
    other = PrioritizedReplay(8, FRAME, frame_stack=2, seed=0)
    before = other.sampler.priorities
    with pytest.raises(ValueError, match="memory_head should be 0"):
        other.load_state_dict(state)
    newer = ("memory_head", "memory_tail", "eviction", "numbers")
    version_1 = {k: v for k, v in state.items() if k not in newer}
    with pytest.raises(ValueError, match="live slots"):  # a version-1 state: the live slots decide
        other.load_state_dict({**version_1, "version": 1})
    np.testing.assert_array_equal(other.sampler.priorities, before)
    with pytest.raises(ValueError, match="frame_stack"):
        ReplayMemory(8, FRAME, frame_stack=3).load_state_dict(replay.memory.state_dict())
    with pytest.raises(ValueError, match="version"):
        replay.memory.load_state_dict({"version": 99})


# -- validation and footprint -----------------------------------------------------------------------
def test_validation_errors_change_nothing() -> None:
    memory = ReplayMemory(4, FRAME, frame_stack=2)
    good = np.zeros((2, *FRAME), np.uint8)
    memory.add(good, 1, 0.0, 1.0, good)
    state = memory.state_dict()
    bad_calls = [
        (ValueError, "obs should have shape", lambda: memory.add(good[0], 1, 0.0, 1.0, good)),
        (TypeError, "next_obs should have dtype", lambda: memory.add(good, 1, 0.0, 1.0, good * 0.5)),
        (ValueError, "obs should fit", lambda: memory.add(good.astype(np.int64) + 300, 1, 0.0, 1.0, good)),
        (ValueError, "action should have shape", lambda: memory.add(good, [1, 2], 0.0, 1.0, good)),
        (TypeError, "action should have dtype", lambda: memory.add(good, 1.5, 0.0, 1.0, good)),
        (ValueError, "reward should be finite", lambda: memory.add(good, 1, np.nan, 1.0, good)),
        (TypeError, "discount should be a real", lambda: memory.add(good, 1, 0.0, "1", good)),
        (ValueError, "stream should lie", lambda: memory.add(good, 1, 0.0, 1.0, good, stream=1)),
        (TypeError, "episode_end should", lambda: memory.add(good, 1, 0.0, 1.0, good, episode_end=1)),
        (ValueError, "slots should lie", lambda: memory.get([4])),
        (ValueError, "slots should hold live", lambda: memory.get([1])),
        (TypeError, "slots should hold integers", lambda: memory.get([0.5])),
    ]
    for error, message, call in bad_calls:
        with pytest.raises(error, match=message):
            call()
    after = memory.state_dict()
    for key, value in state.items():
        np.testing.assert_array_equal(np.asarray(after[key], dtype=object), np.asarray(value, dtype=object))
    for error, message, kwargs in [
        (ValueError, "capacity should be", {"capacity": 0}),
        (TypeError, "obs_dtype should be", {"obs_dtype": object}),
        (ValueError, "frame_capacity should be", {"frame_capacity": 3}),
        (TypeError, "obs_shape should be", {"obs_shape": 84}),
        (ValueError, "num_streams should be", {"num_streams": 0}),
    ]:
        args: dict[str, Any] = {"capacity": 4, "obs_shape": FRAME, "frame_stack": 2, **kwargs}
        with pytest.raises(error, match=message):
            ReplayMemory(**args)
    replay = PrioritizedReplay(4, FRAME, frame_stack=2, seed=0)
    replay.add(good, 1, 0.0, 1.0, good)
    with pytest.raises(ValueError, match="priorities should be finite"):
        replay.update_priorities([0], [-1.0])
    with pytest.raises(ValueError, match="generations should have one value"):
        replay.update_priorities([0], [1.0], generations=[0, 0])
    assert replay.sampler.priorities[0] == 1.0


def test_atari_footprint_per_transition() -> None:
    """84x84 uint8 frames, frame_stack 4: one 7056-byte frame per transition plus a few percent."""
    memory = ReplayMemory(20_000, (84, 84), frame_stack=4, obs_dtype=np.uint8)
    per_transition = memory.nbytes / memory.capacity
    assert 84 * 84 < per_transition < 84 * 84 * 1.02 + 120
    lazy = ReplayMemory(20_000, (84, 84), frame_stack=4)  # obs_dtype=None: no frames before the 1st add
    assert lazy.nbytes < 100 * 20_000 and lazy.frame_pool is None
    replay = PrioritizedReplay(20_000, (84, 84), frame_stack=4, obs_dtype=np.uint8)
    assert replay.nbytes - memory.nbytes < 60 * 20_000  # sampler and draw record: bytes per slot


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "sample", "update", "update_by_draw"]), st.integers(0, 2**16)
        ),
        min_size=1,
        max_size=60,
    ),
    capacity=st.integers(1, 6),
)
def test_priorities_follow_their_transitions(ops: list[tuple[str, int]], capacity: int) -> None:
    """Reference model: every live transition carries the last priority issued *for it* (updates
    arrive late and out of order, tagged with ``batch["generation"]``; untagged ones count for the
    generation of the slot's most recent draw), else its entry priority, the maximum over the
    memory when it was added (Algorithm 1, line 6)."""
    replay = PrioritizedReplay(capacity, (), obs_dtype=np.float32, backend="uniform", seed=0)
    priority: dict[int, float] = {}  # generation -> expected raw priority, live transitions only
    pending: list[tuple[np.ndarray, np.ndarray]] = []  # drawn (slots, generations) not yet updated
    added = 0
    for op, value in ops:
        rng = np.random.default_rng(value)
        if op == "add" or added == 0:
            live_before = [g for g in priority if g > added - capacity]
            entry = max((priority[g] for g in live_before), default=1.0)
            replay.add(float(added), 0, 0.0, 1.0, float(added + 1))
            priority = {g: priority[g] for g in live_before}
            priority[added] = entry
            added += 1
        elif op == "sample":
            batch, draw = replay.sample(int(rng.integers(1, 4)))
            pending.append((draw.indices, batch["generation"]))
        elif pending:
            slots, generations = pending.pop(int(rng.integers(len(pending))))
            values = rng.random(slots.shape[0]).round(3) * 10
            if op == "update":
                replay.update_priorities(slots, values, generations=generations)
            else:  # the documented rule: the generation of the slot's most recent draw decides
                generations = replay.guard.last_drawn(slots)
                replay.update_priorities(slots, values)
            for generation, v in zip(generations.tolist(), values.tolist(), strict=True):
                if generation in priority:
                    priority[generation] = v
        raw = replay.sampler.priorities
        live = replay.memory.valid(np.arange(capacity))
        generations_now = replay.memory.generations(np.arange(capacity))
        assert sorted(generations_now[live].tolist()) == sorted(priority)
        for slot in np.flatnonzero(live):
            assert raw[slot] == priority[int(generations_now[slot])]


def test_n_step_transitions_share_frames() -> None:
    """``(s_t, s_{t+n})`` pairs: both stacks move on by one frame per add, two new frames each."""
    n, stack = 3, 4
    env = StackingEnv(np.random.default_rng(0), stack)
    stacks = [env.reset()] + [env.step() for _ in range(40)]
    memory = ReplayMemory(16, FRAME, frame_stack=stack)
    for t in range(len(stacks) - n):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # moved-on stacks are a continuation: no warning
            memory.add(stacks[t], 0, 0.0, 1.0, stacks[t + n])
    batch = memory.get(np.arange(16))
    order = np.argsort(batch["generation"])
    first = int(batch["generation"].min())
    np.testing.assert_array_equal(batch["obs"][order], np.stack(stacks[first : first + 16]))
    np.testing.assert_array_equal(batch["next_obs"][order], np.stack(stacks[first + n : first + n + 16]))
    assert memory.num_frames <= 2 * 16 + 2 * stack


def test_torch_inputs_and_vector_actions() -> None:
    memory = ReplayMemory(4, (3,), obs_dtype=np.float32, action_shape=(2,), action_dtype=np.float32)
    slot = memory.add(torch.ones(3), torch.tensor([0.5, -0.5]), torch.tensor(1.0), 0.99, torch.zeros(3))
    batch = memory.get(torch.tensor([slot]))
    assert batch["action"].tolist() == [[0.5, -0.5]]
    assert batch["obs"].tolist() == [[1.0, 1.0, 1.0]] and batch["next_obs"].tolist() == [[0.0] * 3]
    assert batch["reward"].dtype == np.float32 and batch["discount"][0] == np.float32(0.99)


def test_corrupt_state_is_rejected_before_the_kernels_see_it() -> None:
    memory = ReplayMemory(4, FRAME, frame_stack=2)
    recorder = Recorder(memory.add, 2, 1, seed=0)
    for _ in range(6):
        recorder.step()
    state = memory.state_dict()
    state["obs_rows"] = state["obs_rows"] + memory.frame_capacity
    fresh = ReplayMemory(4, FRAME, frame_stack=2)
    with pytest.raises(ValueError, match="obs_rows should hold frame rows"):
        fresh.load_state_dict(state)
    assert len(fresh) == 0 and fresh.num_frames == 0


def test_huge_memory_warns_before_allocating() -> None:
    with pytest.warns(ResourceWarning, match="GiB"):
        warn_if_too_large(2**62)  # what ReplayMemory checks before its arrays are allocated
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_too_large(2**20)


def test_stacks_equal_real_atari_stacks() -> None:
    """Two Pong environments with Gymnasium's Atari preprocessing and frame stacking, interleaved
    as two streams, with short truncated episodes: every stored stack reads back as produced."""
    ale_py = pytest.importorskip("ale_py")
    gym = pytest.importorskip("gymnasium")

    gym.register_envs(ale_py)

    def make(seed: int) -> gym.Env[np.ndarray, np.int64]:
        env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, max_episode_steps=120)
        env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, noop_max=0)
        env = gym.wrappers.FrameStackObservation(env, 4)
        env.action_space.seed(seed)
        return env

    envs = [make(0), make(1)]
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    memory = ReplayMemory(48, (84, 84), frame_stack=4, num_streams=2)
    added: list[tuple[int, dict[str, Any]]] = []
    for t in range(160):  # three wrap-arounds, episodes of 30 agent steps
        i = t % 2
        action = envs[i].action_space.sample()
        next_obs, reward, terminated, truncated, _ = envs[i].step(action)
        end = bool(terminated or truncated)
        slot = memory.add(
            obs[i], action, float(reward), 0.0 if terminated else 1.0, next_obs, episode_end=end, stream=i
        )
        added.append(
            (
                slot,
                {
                    "obs": obs[i],
                    "action": action,
                    "reward": float(reward),
                    "discount": 0.0 if terminated else 1.0,
                    "next_obs": next_obs,
                },
            )
        )
        obs[i] = envs[i].reset()[0] if end else next_obs
    assert sum(1 for _, t in added if not np.array_equal(t["obs"][0], t["obs"][1])) > 0
    assert_matches(memory, added)
    assert memory.num_frames <= 48 + 2 * 4 + 6  # one frame per transition, plus restarts


def test_add_many_equals_adds_in_turn() -> None:
    """A vectorised step stored at once is stored exactly as its transitions added one by one."""
    envs = [StackingEnv(np.random.default_rng(i), 3) for i in range(3)]
    obs = np.stack([env.reset() for env in envs])
    one = PrioritizedReplay(10, FRAME, frame_stack=3, num_streams=3, seed=0)
    many = PrioritizedReplay(10, FRAME, frame_stack=3, num_streams=3, seed=0)
    rng = np.random.default_rng(0)
    for t in range(12):
        next_obs = np.stack([env.step() for env in envs])
        ends = rng.random(3) < 0.3
        actions, rewards = rng.integers(0, 4, 3), rng.normal(size=3)
        for i in range(3):
            one.add(obs[i], actions[i], rewards[i], 1.0, next_obs[i], episode_end=bool(ends[i]), stream=i)
        slots = many.add_many(obs, actions, rewards, np.ones(3), next_obs, episode_end=ends)
        assert slots.tolist() == [(3 * t + i) % 10 for i in range(3)]
        obs = np.stack([env.reset() if end else o for env, end, o in zip(envs, ends, next_obs, strict=True)])
        if t % 4 == 3:
            _, draw = one.sample(4)
            _, draw_many = many.sample(4)
            np.testing.assert_array_equal(draw.indices, draw_many.indices)
            one.update_priorities(draw.indices, np.arange(4.0))
            many.update_priorities(draw_many.indices, np.arange(4.0))
    a, b = one.state_dict(include_memory=True), many.state_dict(include_memory=True)
    np.testing.assert_array_equal(a["sampler"]["priorities"], b["sampler"]["priorities"])
    for key, value in a["memory"].items():
        expected = np.asarray(b["memory"][key], dtype=object)
        np.testing.assert_array_equal(np.asarray(value, dtype=object), expected, err_msg=key)


def test_add_many_checks_everything_first() -> None:
    memory = ReplayMemory(4, FRAME, frame_stack=2, num_streams=2)
    good = np.zeros((2, 2, *FRAME), np.uint8)
    args: dict[str, Any] = {"obs": good, "action": [0, 1], "reward": [0, 0], "discount": [1, 1]}
    args["next_obs"] = good
    bad_calls = [
        (ValueError, r"obs should have shape \(n, 2, 5, 4\)", {"obs": good[:, 0]}),
        (ValueError, r"next_obs should have shape \(2, 2, 5, 4\)", {"next_obs": good[:1]}),
        (ValueError, "reward should be finite", {"reward": [0, np.inf]}),
        (ValueError, r"action should have shape \(2\)", {"action": [0]}),
        (TypeError, "episode_end should be 2 bools", {"episode_end": [1, 0]}),
        (ValueError, "streams should lie", {"streams": [0, 2]}),
    ]
    for error, message, change in bad_calls:
        with pytest.raises(error, match=message):
            memory.add_many(**{**args, **change})
    assert len(memory) == 0 and memory.num_frames == 0
    assert memory.add_many(good, [0, 1], [0, 0], [1, 1], good, streams=[1, 1]).tolist() == [0, 1]


# -- values that overflow their storage, arguments named as passed, copies ------------------------------
def _unchanged_after(
    memory: ReplayMemory, call: Callable[[], Any], error: type[Exception], match: str
) -> None:
    before = memory.state_dict()
    with pytest.raises(error, match=match):
        call()
    after = memory.state_dict()
    for key, value in before.items():
        np.testing.assert_array_equal(np.asarray(after[key], dtype=object), np.asarray(value, dtype=object))


def test_non_finite_values_are_rejected_after_the_cast() -> None:
    """Bug: a reward or discount of 1e300 was stored as inf (float32) although non-finite rewards
    raise; discounts outside [0, 1], NaN float observations and float64 observations or actions
    that overflow float32 were stored too."""
    memory = ReplayMemory(4, (3,), obs_dtype=np.float32, action_shape=(2,), action_dtype=np.float32)
    obs, act = np.zeros(3, np.float32), np.zeros(2, np.float32)
    memory.add(obs, act, 1.0, 1.0, obs)
    big = np.array([0.0, 1e300, 0.0])
    bad_calls = [
        (
            ValueError,
            r"reward should be finite \(as float32\), but got reward=1e\+300",
            lambda: memory.add(obs, act, 1e300, 1.0, obs),
        ),
        (
            ValueError,
            "reward should be finite",
            lambda: memory.add(obs, act, np.float64(-(2.0**128)), 1.0, obs),
        ),
        (ValueError, "discount should be finite", lambda: memory.add(obs, act, 0.0, 1e300, obs)),
        (
            ValueError,
            r"discount should lie in \[0, 1\], but got discount=1.5",
            lambda: memory.add(obs, act, 0.0, 1.5, obs),
        ),
        (ValueError, r"discount should lie in \[0, 1\]", lambda: memory.add(obs, act, 0.0, -0.5, obs)),
        (
            ValueError,
            r"obs should be finite \(as float32\), but got obs\[1\]=1e\+300",
            lambda: memory.add(big, act, 0.0, 1.0, obs),
        ),
        (
            ValueError,
            r"next_obs should be finite .* next_obs\[2\]=nan",
            lambda: memory.add(obs, act, 0.0, 1.0, np.array([0, 0, np.nan], np.float32)),
        ),
        (
            ValueError,
            r"action should be finite .* action\[0\]=inf",
            lambda: memory.add(obs, [np.inf, 0], 0.0, 1.0, obs),
        ),
        (
            ValueError,
            r"action should be finite .* action\[1\]=1e\+300",
            lambda: memory.add(obs, [0, 1e300], 0.0, 1.0, obs),
        ),
        (
            ValueError,
            r"reward should be finite .* reward\[1\]=1e\+300",
            lambda: memory.add_many([obs, obs], [act, act], [0.0, 1e300], [1, 1], [obs, obs], streams=[0, 0]),
        ),
        (
            ValueError,
            r"discount should lie in \[0, 1\], but got discount\[0\]=2",
            lambda: memory.add_many([obs, obs], [act, act], [0, 0], [2, 1], [obs, obs], streams=[0, 0]),
        ),
        (
            ValueError,
            r"obs should be finite .* obs\[1\]\[0\]=nan",
            lambda: memory.add_many(
                [obs, [np.nan, 0, 0]], [act, act], [0, 0], [1, 1], [obs, obs], streams=[0, 0]
            ),
        ),
    ]
    for error, message, call in bad_calls:
        _unchanged_after(memory, call, error, message)
    assert len(memory) == 1
    top = float(np.finfo(np.float32).max)  # the largest value float32 holds, then the first it does not
    memory.add(obs, act, float(np.nextafter(_float32_overflow(), 0.0)), 1.0 + 2.0**-30, obs)
    assert memory.get([1])["reward"][0] == top and memory.get([1])["discount"][0] == 1.0
    _unchanged_after(
        memory, lambda: memory.add(obs, act, _float32_overflow(), 1.0, obs), ValueError, "reward"
    )


def _float32_overflow() -> float:
    """The smallest float64 that float32 rounds to inf, found by bisection with numpy's cast."""
    low, high = float(np.finfo(np.float32).max), 2.0**128  # finite, inf
    with np.errstate(over="ignore"):
        while np.nextafter(low, np.inf) < high:
            mid = low + (high - low) / 2
            low, high = (mid, high) if np.isfinite(np.float32(mid)) else (low, mid)
    return high


def test_integer_actions_out_of_range_and_wrong_shapes_are_rejected() -> None:
    memory = ReplayMemory(4, (2,), obs_dtype=np.uint8, action_dtype=np.uint8, num_streams=2)
    obs = np.zeros(2, np.uint8)
    memory.add(obs, 255, 0.0, 1.0, obs)
    bad_calls = [
        (
            ValueError,
            r"action should fit uint8, but got values in \[256, 256\]",
            lambda: memory.add(obs, 256, 0.0, 1.0, obs),
        ),
        (ValueError, "action should fit uint8", lambda: memory.add(obs, -1, 0.0, 1.0, obs)),
        (TypeError, "action should have dtype uint8", lambda: memory.add(obs, 2**70, 0.0, 1.0, obs)),
        (
            ValueError,
            "action should fit uint8",
            lambda: memory.add_many([obs, obs], [1, 300], [0, 0], [1, 1], [obs, obs]),
        ),
        (
            ValueError,
            r"reward should have shape \(2\)",
            lambda: memory.add_many([obs, obs], [1, 3], [0], [1, 1], [obs, obs]),
        ),
        (TypeError, "reward should be a real number", lambda: memory.add(obs, 1, [0.0, 1.0], 1.0, obs)),
        (
            ValueError,
            r"next_obs should have shape \(2,\)",
            lambda: memory.add(obs, 1, 0.0, 1.0, np.zeros(3, np.uint8)),
        ),
    ]
    for error, message, call in bad_calls:
        _unchanged_after(memory, call, error, message)


def test_update_priorities_names_indices() -> None:
    """Bug: ``replay.update_priorities(indices=...)`` reported errors for an argument ``slots``."""
    replay = PrioritizedReplay(4, (1,), obs_dtype=np.float32, seed=0)
    replay.add([0], 0, 0.0, 1.0, [1])
    with pytest.raises(ValueError, match=r"indices should lie in \[0, 4\), but got indices\[1\]=4"):
        replay.update_priorities([0, 4], [1.0, 1.0])
    with pytest.raises(TypeError, match="indices should hold integers"):
        replay.update_priorities([0.5], [1.0])
    with pytest.raises(ValueError, match="indices should be one-dimensional"):
        replay.update_priorities([[0]], [1.0])
    assert replay.sampler.priorities[0] == 1.0


def test_copies_and_pickles_keep_adding_correctly() -> None:
    """Bug: pickling or deep-copying a memory detached its word view of the frame pool, so the
    copy's adds wrote their frames where no read looked (reads returned zeros)."""
    memory = ReplayMemory(4, (2,), obs_dtype=np.float32, frame_stack=2)
    s = [np.array([[t, t], [t + 1, t + 1]], np.float32) for t in range(6)]
    memory.add(s[0], 0, 0.0, 1.0, s[1])
    for clone in (copy.deepcopy(memory), pickle.loads(pickle.dumps(memory))):
        for t in range(1, 5):
            clone.add(s[t], 0, 0.0, 1.0, s[t + 1])
        clone.check_valid()
        batch = clone.get(np.arange(4))
        order = np.argsort(batch["generation"])
        np.testing.assert_array_equal(batch["next_obs"][order], np.stack(s[2:6]))
    assert len(memory) == 1 and memory.get([0])["next_obs"].tolist() == [s[1].tolist()]
