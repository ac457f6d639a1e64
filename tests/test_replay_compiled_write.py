"""The compiled one-step write (``prisample/replay/_compiled_write.py``) against the general path.

Two replays built alike, one with the compiled write switched off (``memory._compiled_write =
False``: every write checked into rows and stored piece by piece, the sampler told in Python), are
driven by the same random script of ``add``, ``add_many`` and ``add_vector_step`` calls (several
streams, episode ends, truncations, streams that break, writes longer than the ring, the frame
pool running short), draws and priority updates.  After every operation every array of their
states (frames, pool bookkeeping, row tables, columns, generations, the sampler's priorities and
RNG) must be equal bit for bit, what each call returned equal, and the draws that follow equal.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np
import pytest

from prisample.replay import PrioritizedReplay, ReplayMemory
from prisample.replay import _compiled_write as compiled
from tests.test_replay_fixtures import first_difference

FRAME = (3, 4)  # 12 bytes a frame: compared as 32-bit words


class Counter:
    """Counts the compiled writes (wraps :func:`_compiled_write.write_rows`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, lock_of: Any = None) -> None:
        self.calls = 0
        self.unlocked = 0
        original = compiled.write_rows

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if lock_of is not None and not lock_of()._is_owned():
                self.unlocked += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(compiled, "write_rows", counted)


def make_pair(kind: str, stack: int, streams: int, capacity: int, **options: Any) -> tuple[Any, Any]:
    """``(compiled, reference)``: two replays alike, the reference without the compiled write."""

    def build() -> Any:
        if kind == "memory":
            return ReplayMemory(
                capacity, FRAME, frame_stack=stack, obs_dtype=np.uint8, num_streams=streams, **options
            )
        return PrioritizedReplay(
            capacity,
            FRAME,
            frame_stack=stack,
            obs_dtype=np.uint8,
            num_streams=streams,
            alpha=0.7,
            beta=0.5,
            seed=3,
            **options,
        )

    fast, reference = build(), build()
    memory = reference if kind == "memory" else reference.memory
    memory._compiled_write = False
    return fast, reference


def state(replay: Any) -> dict[str, Any]:
    if isinstance(replay, ReplayMemory):
        return replay.state_dict()
    return replay.state_dict(include_memory=True)


class Script:
    """A random stream of transitions for ``streams`` environments with ``stack``-frame stacks
    over a pool of a few distinct frames (so frames repeat and are shared)."""

    def __init__(self, seed: int, stack: int, streams: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.stack, self.streams = stack, streams
        self.frames = self.rng.integers(0, 256, size=(6, *FRAME), dtype=np.uint8)
        self.current = [self._reset() for _ in range(streams)]

    def _reset(self) -> np.ndarray:
        first = self.frames[self.rng.integers(len(self.frames))]
        return np.stack([first] * self.stack)  # a reset stack repeats its frame

    def _stack(self, s: np.ndarray) -> np.ndarray:
        return s if self.stack > 1 else s[0]

    def step(self, stream: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """``(obs, next_obs, episode_end)`` of the stream's next transition; now and then a stack
        that does not continue the stream (a broken stream)."""
        obs = self.current[stream]
        if self.rng.random() < 0.05:
            obs = self.frames[self.rng.integers(len(self.frames), size=self.stack)]
        new = self.frames[self.rng.integers(len(self.frames))]
        next_obs = np.concatenate([obs[1:], new[None]])
        end = bool(self.rng.random() < 0.15)
        self.current[stream] = self._reset() if end else next_obs
        return self._stack(obs), self._stack(next_obs), end


def drive(fast: Any, reference: Any, script: Script, steps: int, prioritized: bool) -> None:
    """Run the same random operations on both replays and compare after each."""
    rng = script.rng
    streams = script.streams
    for step in range(steps):
        op = rng.choice(["add", "add_many", "long", "vector", "sample"], p=[0.25, 0.35, 0.05, 0.2, 0.15])
        returned = []
        if op == "add":
            stream = int(rng.integers(streams))
            obs, next_obs, end = script.step(stream)
            args = (obs, int(rng.integers(6)), float(rng.normal()), float(rng.choice([0.0, 0.99])), next_obs)
            for replay in (fast, reference):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    slot = replay.add(*args, episode_end=end, stream=stream)
                returned.append((slot, [str(w.message) for w in caught]))
        elif op in ("add_many", "long"):
            n = int(rng.integers(1, 3 * streams + 1)) if op == "add_many" else int(rng.integers(20, 40))
            ids = rng.integers(streams, size=n).astype(np.int64)
            rows = [script.step(int(s)) for s in ids]
            obs = np.stack([r[0] for r in rows])
            next_obs = np.stack([r[1] for r in rows])
            ends = np.array([r[2] for r in rows])
            action = rng.integers(6, size=n).astype(np.int64)
            reward = rng.normal(size=n).astype(rng.choice([np.float32, np.float64]))
            discount = np.where(ends, 0.0, 0.99).astype(np.float32)
            for replay in (fast, reference):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    done = replay.insert_many(
                        obs, action, reward, discount, next_obs, episode_end=ends, streams=ids
                    )
                returned.append((tuple(a.tolist() for a in done), [str(w.message) for w in caught]))
        elif op == "vector":
            # every stream steps once (env i on stream i), some episodes terminated or truncated
            rows = [script.step(s) for s in range(streams)]
            obs = np.stack([r[0] for r in rows])
            next_obs = np.stack([r[1] for r in rows])
            ends = np.array([r[2] for r in rows])
            truncated = ends & (rng.random(streams) < 0.5)
            terminated = ends & ~truncated
            action = rng.integers(6, size=streams).astype(np.int64)
            reward = rng.normal(size=streams)
            for replay in (fast, reference):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    done = replay.insert_vector_step(
                        obs, action, reward, terminated, truncated, next_obs, {}, 0.97,
                        autoreset_mode="Disabled",
                    )  # fmt: skip
                returned.append((tuple(a.tolist() for a in done), [str(w.message) for w in caught]))
        elif prioritized and len(fast):
            k = int(rng.integers(1, 6))
            priorities = np.abs(rng.normal(size=k)) * 3.0
            for replay in (fast, reference):
                batch, draw = replay.sample(k)
                replay.update_priorities(draw.indices, priorities)
                returned.append((draw.indices.tolist(), draw.weights.tobytes(), batch.obs.tobytes()))
        if returned:
            assert returned[0] == returned[1], f"step {step} ({op}): {returned[0]} != {returned[1]}"
        found = first_difference(state(fast), state(reference))
        assert found is None, f"step {step} ({op}): {found}"


@pytest.mark.parametrize("stack", [1, 4])
@pytest.mark.parametrize("frame_capacity", [None, "short"])
def test_compiled_write_is_the_general_path_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, stack: int, frame_capacity: Any
) -> None:
    options = {} if frame_capacity is None else {"frame_capacity": 2 * stack * 4 + 3 * stack + 4}
    fast, reference = make_pair("prioritized", stack, 3, 16, **options)
    counter = Counter(monkeypatch, lambda: fast.lock)
    drive(fast, reference, Script(stack, stack, 3), 160, prioritized=True)
    assert counter.calls > 100  # the compiled path wrote (the reference never does)
    assert counter.unlocked == 0  # always under the replay's lock: the add stays atomic
    for _ in range(5):  # the draws that follow
        a, b = fast.sample(8), reference.sample(8)
        assert a[1].indices.tolist() == b[1].indices.tolist()
        assert a[1].weights.tobytes() == b[1].weights.tobytes()
        assert a[0].obs.tobytes() == b[0].obs.tobytes() and a[0].next_obs.tobytes() == b[0].next_obs.tobytes()
    fast.check_valid()


@pytest.mark.parametrize(
    "options",
    [
        {"backend": "rank"},  # the sampler hears of the write in Python
        {"eps": 0.0},  # a second index of the priorities: Python
        {"backend": "uniform"},
        {"eviction": "priority"},  # the memory's part compiled, the eviction strategy's in Python
    ],
)
def test_compiled_memory_write_with_other_samplers(monkeypatch: pytest.MonkeyPatch, options: Any) -> None:
    fast, reference = make_pair("prioritized", 4, 2, 12, **options)
    counter = Counter(monkeypatch)
    drive(fast, reference, Script(7, 4, 2), 90, prioritized=True)
    assert counter.calls > 50
    fast.check_valid()


@pytest.mark.parametrize("stack", [1, 4])
def test_compiled_write_of_a_replay_memory(monkeypatch: pytest.MonkeyPatch, stack: int) -> None:
    fast, reference = make_pair("memory", stack, 3, 10, extras={"logp": ((), np.float32)})
    counter = Counter(monkeypatch)
    script = Script(11, stack, 3)
    for _ in range(60):
        n = int(script.rng.integers(1, 15))
        ids = script.rng.integers(3, size=n).astype(np.int64)
        rows = [script.step(int(s)) for s in ids]
        obs, next_obs = np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
        ends = np.array([r[2] for r in rows])
        logp = script.rng.normal(size=n).astype(np.float32)
        args = (obs, np.arange(n), np.ones(n, np.float32), np.full(n, 0.5), next_obs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = fast.insert_many(*args, episode_end=ends, streams=ids, logp=logp)
            want = reference.insert_many(*args, episode_end=ends, streams=ids, logp=logp)
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
        assert first_difference(state(fast), state(reference)) is None
    assert counter.calls == 60
    fast.check_valid()


def test_dict_observations_take_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = Counter(monkeypatch)
    replay = PrioritizedReplay(8, {"x": (2,)}, obs_dtype=np.float32, seed=0)
    for t in range(12):
        replay.add({"x": np.full(2, t, np.float32)}, 0, 1.0, 0.9, {"x": np.full(2, t + 1, np.float32)})
    assert counter.calls == 0 and len(replay) == 8


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"streams": np.array([0, 5])}, "streams should lie in [0, 2), but got streams[1]=5"),
        ({"reward": np.array([1.0, np.inf])}, "reward should be finite (as float32), but got reward[1]=inf"),
        ({"reward": np.array([1.0, 1e39])}, "reward should be finite (as float32), but got reward[1]=1e+39"),
        (
            {"discount": np.array([1.5, 0.5], np.float32)},
            "discount should lie in [0, 1], but got discount[0]=1.5",
        ),
        (
            {"obs": np.zeros((2, 4, 3, 3), np.uint8)},
            "obs should have shape (n, 4, 3, 4), but got shape (2, 4, 3, 3)",
        ),
        ({"action": np.array([0.0, 1.0])}, "action should have dtype int64"),
    ],
)
def test_rejected_writes_change_nothing(arguments: dict[str, Any], error: str) -> None:
    """A row the kernel's checks reject leaves everything as it was and gets the general path's
    error, naming the argument and value."""
    replay = PrioritizedReplay(6, FRAME, frame_stack=4, obs_dtype=np.uint8, num_streams=2, seed=0)
    stacks = np.arange(2 * 4 * 12, dtype=np.uint8).reshape(2, 4, *FRAME)
    good = {
        "obs": stacks,
        "action": np.array([1, 2]),
        "reward": np.array([0.5, 1.0]),
        "discount": np.array([0.9, 0.9], np.float32),
        "next_obs": stacks + 1,
        "streams": np.array([0, 1]),
        "episode_end": np.array([True, True]),
    }
    for _ in range(4):  # a full ring: a write would evict
        replay.add_many(**good)
    before = state(replay)
    with pytest.raises((ValueError, TypeError)) as caught:
        replay.add_many(**{**good, **arguments})
    assert error in str(caught.value)
    assert first_difference(state(replay), before) is None


def test_writes_from_threads_stay_atomic() -> None:
    """Adds from several threads against draws: the memory and the sampler stay consistent."""
    replay = PrioritizedReplay(64, FRAME, frame_stack=4, obs_dtype=np.uint8, num_streams=4, seed=0)
    stacks = np.arange(4 * 4 * 12, dtype=np.uint8).reshape(4, 4, *FRAME)

    def actor(stream: int) -> None:
        for _ in range(200):
            replay.add(stacks[stream], 1, 0.5, 0.9, stacks[stream], stream=stream)

    threads = [threading.Thread(target=actor, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(100):
        if len(replay):
            _, draw = replay.sample(4)
            replay.update_priorities(draw.indices, np.ones(4))
    for thread in threads:
        thread.join()
    assert replay.memory.num_added == 800
    replay.check_valid()


def test_a_write_that_empties_the_memory_admits_its_rows_as_the_general_path() -> None:
    """A frame pool so small that a row of fresh frames evicts every other transition, the
    write's earlier rows included: each row then joins an empty memory (priority 1, not the
    maximum the write began with), and the rows evicted again are not drawable."""
    fast, reference = make_pair("prioritized", 4, 1, 8, frame_capacity=16)
    rng = np.random.default_rng(5)
    for replay in (fast, reference):
        stack = np.zeros((4, *FRAME), np.uint8)
        replay.add(stack, 0, 0.0, 0.9, stack)
        replay.update_priorities([0], [5.0])
    fresh = rng.integers(0, 256, size=(3, 8, *FRAME), dtype=np.uint8)  # 8 distinct frames a row
    got = [
        replay.insert_many(
            fresh[:, :4], np.zeros(3, np.int64), np.zeros(3, np.float32), np.ones(3, np.float32),
            fresh[:, 4:], episode_end=np.ones(3, bool), streams=np.zeros(3, np.int64),
        )
        for replay in (fast, reference)
    ]  # fmt: skip
    assert [a.tolist() for a in got[0]] == [a.tolist() for a in got[1]]
    assert got[1].completed.shape[0] < 3  # the reference evicted a row of its own write
    assert first_difference(state(fast), state(reference)) is None
