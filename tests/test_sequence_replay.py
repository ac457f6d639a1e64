"""``SequenceReplay`` against a naive reference written here: a list of steps per stream, cut into
episodes and the episodes into items by the rules of the class's docstring.

Random add sequences (hypothesis) over several streams, interleaved, with short episodes and
wrap-around compare, after every operation: the drawable items (slots, steps, contents), masks,
stored states, priorities (maximum at entry, the actor's R2D2 mix), write-backs with and without
generations and the stale ones dropped; the same with frame stacks, every observation (padding
included) built from the stacks added, each frame gathered once, the per-stack gather agreeing
with the deduplicated one and exact where stacks do not move on.  Then the distribution
(chi-square against ``p^α / Σ p^α``), the weights under both normalisations, resume from
``state_dict`` mid-stream, bad input and rejected loads (nothing changed), and threads.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prisample import LinearSchedule, SequenceBatch, SequenceReplay
from tests.test_threads import run_threads

# -- the reference ---------------------------------------------------------------------------------


@dataclass
class Step:
    gen: int
    stream: int
    end: bool
    counter: int  # the stream's running count: obs = [counter, stream], next_obs = [counter + 1, stream]
    priority: float | None


@dataclass
class Reference:
    """Items as the rules define them, recomputed from the whole list of steps each time."""

    capacity: int
    burn_in: int
    length: int
    period: int
    bootstrap: int
    tail_policy: str
    eta: float
    steps: list[Step] = field(default_factory=list)
    priority: dict[int, float] = field(default_factory=dict)  # drawable item (start gen) -> p
    record: dict[int, int] = field(default_factory=dict)  # slot -> gen at its last draw
    dropped: int = 0

    @property
    def window(self) -> int:
        return self.burn_in + self.length + self.bootstrap

    @property
    def tail(self) -> int:
        return max(0, len(self.steps) - self.capacity)

    def items(self) -> dict[int, list[int]]:
        """Drawable items: start gen -> the gens of its steps."""
        w = self.window
        least = self.burn_in + 1 if self.tail_policy == "pad" else w
        episodes: dict[int, list[list[int]]] = {}
        ended: dict[int, bool] = {}
        for s in self.steps:
            eps = episodes.setdefault(s.stream, [[]])
            if ended.get(s.stream, False):
                eps.append([])
            eps[-1].append(s.gen)
            ended[s.stream] = s.end
        out = {}
        for stream, eps in episodes.items():
            for e, episode in enumerate(eps):
                closed = e < len(eps) - 1 or ended[stream]
                for k in range(0, len(episode), self.period):
                    seg = episode[k : k + w]
                    if (len(seg) == w or (closed and len(seg) >= least)) and seg[0] >= self.tail:
                        out[seg[0]] = seg
        return out

    def write(self, rows: list[Step]) -> None:
        before = set(self.priority)
        self.steps.extend(rows)
        now = self.items()
        for g in before - set(now):
            del self.priority[g]
        top = max(self.priority.values()) if self.priority else 1.0
        for g in sorted(set(now) - before):
            learn = now[g][self.burn_in : self.burn_in + self.length]
            given_p = [self.steps[x].priority for x in learn]
            if all(p is not None for p in given_p):
                values = np.array(given_p, dtype=np.float64)
                self.priority[g] = self.eta * values.max() + (1 - self.eta) * (values.sum() / values.shape[0])
            else:
                self.priority[g] = top

    def update(self, slots: np.ndarray, values: np.ndarray, gens: np.ndarray | None) -> None:
        live = {g % self.capacity: g for g in self.priority}
        for j, slot in enumerate(slots.tolist()):
            expected = self.record.get(slot, -1) if gens is None else int(gens[j])
            if live.get(slot, -1) == expected and expected >= 0:
                self.priority[expected] = float(values[j])
            else:
                self.dropped += 1


class World:
    """Per stream, its running counter (the obs), so that a window's contents name its steps."""

    def __init__(self, num_streams: int) -> None:
        self.counter = [1000 * s for s in range(num_streams)]
        self.gen = 0

    def step(self, stream: int, end: bool, priority: float | None) -> Step:
        s = Step(self.gen, stream, end, self.counter[stream], priority)
        self.gen += 1
        self.counter[stream] += 2 if end else 1  # a new episode does not continue the last next_obs
        return s


def frames_to(counter: int, stream: int, stack: int) -> np.ndarray:
    """The observation whose newest frame is ``[counter, stream]``: that frame (``stack=1``), or
    the stack of the ``stack`` frames up to it (each step's stack moves the last on by one)."""
    if stack == 1:
        return np.array([counter, stream], np.float32)
    return np.array([[counter - stack + 1 + f, stream] for f in range(stack)], np.float32)


def padded_stack(final: np.ndarray, d: int) -> np.ndarray:
    """Padding position ``L + d`` as defined: the last ``next_obs`` stack ``final`` moved on by
    ``d`` frames, its last frame repeated (frame ``f`` is ``final[min(d + f, stack - 1)]``)."""
    stack = final.shape[0]
    return np.stack([final[min(d + f, stack - 1)] for f in range(stack)])


def args(step: Step, stack: int = 1) -> dict[str, Any]:
    c = float(step.counter)
    return {
        "obs": frames_to(step.counter, step.stream, stack),
        "action": step.counter,
        "reward": c / 7.0,
        "discount": 0.0 if step.end else 0.9,
        "next_obs": frames_to(step.counter + 1, step.stream, stack),
        "state": np.array([c, -c, step.gen], np.float32),
    }


def write(
    replay: SequenceReplay,
    ref: Reference,
    world: World,
    rows: list[tuple[int, bool, float | None]],
    stack: int = 1,
) -> None:
    steps = [world.step(s, e, p) for s, e, p in rows]
    if len(steps) == 1:
        a = args(steps[0], stack)
        replay.add(
            a["obs"], a["action"], a["reward"], a["discount"], a["next_obs"],
            episode_end=steps[0].end, stream=steps[0].stream, state=a["state"], priority=steps[0].priority,
        )  # fmt: skip
    else:
        many = [args(s, stack) for s in steps]
        given_p = [s.priority for s in steps]
        replay.add_many(
            np.stack([a["obs"] for a in many]),
            np.array([a["action"] for a in many]),
            np.array([a["reward"] for a in many]),
            np.array([a["discount"] for a in many]),
            np.stack([a["next_obs"] for a in many]),
            episode_end=np.array([s.end for s in steps]),
            streams=np.array([s.stream for s in steps]),
            state=np.stack([a["state"] for a in many]),
            priorities=None if any(p is None for p in given_p) else np.array(given_p, dtype=np.float64),
        )
    if len(steps) > 1 and any(p is None for p in (s.priority for s in steps)):
        for s in steps:
            s.priority = None  # add_many takes all the priorities or none
    ref.write(steps)


def expected_item(ref: Reference, gens: list[int], stack: int = 1) -> dict[str, np.ndarray]:
    """The batch row of the item with steps ``gens`` as the rules define it: all ``W + 1``
    observations, the padding past the last ``next_obs`` included (that ``next_obs`` repeated, or
    with frame stacks moved on by one frame per position, :func:`padded_stack`)."""
    w, n = ref.window, len(gens)
    padded = gens + [gens[-1]] * (w - n)
    steps = [ref.steps[g] for g in padded]
    last = ref.steps[gens[-1]]
    obs = [frames_to(s.counter, s.stream, stack) for s in (ref.steps[g] for g in gens)]
    final = frames_to(last.counter + 1, last.stream, stack)
    obs += [final if stack == 1 else padded_stack(final, d) for d in range(w + 1 - n)]
    j = np.arange(w)
    first = ref.steps[gens[0]]
    return {
        "obs": np.stack(obs),
        "action": np.array([s.counter for s in steps]),
        "reward": np.array([np.float32(s.counter / 7.0) for s in steps], np.float32),
        "discount": np.array([0.0 if s.end else 0.9 for s in steps], np.float32),
        "valid": j < n,
        "learn": (j < n) & (j >= ref.burn_in) & (j < ref.burn_in + ref.length),
        "state": np.array([first.counter, -first.counter, first.gen], np.float32),
        "generation": np.array(gens[0]),
        "length": np.array(n),
    }


def assert_item(batch: SequenceBatch, b: int, want: dict[str, np.ndarray], name: str) -> None:
    """Row ``b`` of ``batch`` is ``want`` (:func:`expected_item`), every field and position."""
    for key, value in want.items():
        np.testing.assert_array_equal(np.asarray(batch[key][b]), value, err_msg=f"{key} of {name}")


def check(replay: SequenceReplay, ref: Reference, stack: int = 1) -> None:
    items = ref.items()
    c = ref.capacity
    priorities = replay.sampler.priorities
    filled = np.flatnonzero(~np.isnan(priorities))
    assert sorted(filled.tolist()) == sorted(g % c for g in items), "drawable items differ"
    assert len(replay) == len(items)
    assert replay.num_steps == len(ref.steps) - ref.tail
    for g, p in ref.priority.items():
        assert priorities[g % c] == pytest.approx(p, rel=1e-12), f"priority of item {g}"
    if items:
        slots = np.array([g % c for g in items], dtype=np.int64)
        with replay.lock:
            batch = replay.gather(slots)
        for b, gens in enumerate(items.values()):
            assert_item(batch, b, expected_item(ref, gens, stack), f"item {gens[0]}")
        if stack > 1:  # each frame gathered once: neighbouring stacks share it
            assert np.shares_memory(batch.obs[:, 0], batch.obs[:, 1])
    assert replay.dropped_updates == ref.dropped


CONFIGS = st.fixed_dictionaries(
    {
        "burn_in": st.integers(0, 2),
        "length": st.integers(1, 3),
        "period": st.integers(1, 4),
        "bootstrap": st.integers(0, 1),
        "tail": st.sampled_from(["pad", "drop"]),
        "streams": st.integers(1, 3),
        "spare": st.integers(0, 6),
    }
)
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.lists(
                st.tuples(st.integers(0, 2), st.booleans() | st.just(False), st.none() | st.floats(0, 10)),
                min_size=1,
                max_size=4,
            ),
        ),
        st.tuples(st.just("sample"), st.integers(1, 5)),
        st.tuples(st.just("update"), st.integers(0, 1000), st.booleans(), st.integers(0, 2**31)),
    ),
    min_size=1,
    max_size=60,
)


def build(config: dict[str, Any], **kwargs: Any) -> tuple[SequenceReplay, Reference]:
    w = config["burn_in"] + config["length"] + config["bootstrap"]
    capacity = config["streams"] * w + config["spare"]
    replay = SequenceReplay(
        capacity,
        (2,),
        obs_dtype=np.float32,
        burn_in=config["burn_in"],
        length=config["length"],
        period=config["period"],
        bootstrap=config["bootstrap"],
        episode_tail=config["tail"],
        num_streams=config["streams"],
        state=((3,), np.float32),
        state_capacity=capacity,
        eta=0.75,
        seed=3,
        **kwargs,
    )
    ref = Reference(
        capacity,
        config["burn_in"],
        config["length"],
        config["period"],
        config["bootstrap"],
        config["tail"],
        0.75,
    )
    return replay, ref


def run_ops(
    replay: SequenceReplay, ref: Reference, world: World, ops: list[Any], streams: int, stack: int = 1
) -> None:
    history: list[tuple[np.ndarray, np.ndarray]] = []
    for op in ops:
        if op[0] == "write":
            write(replay, ref, world, [(s % streams, e, p) for s, e, p in op[1]], stack)
        elif op[0] == "sample":
            if len(replay) == 0:
                with pytest.raises(ValueError, match="no item can be drawn yet"):
                    replay.sample(op[1])
                continue
            batch, draw = replay.sample(op[1])
            items = ref.items()
            for b, slot in enumerate(draw.indices.tolist()):
                gen = int(batch.generation[b])
                assert gen % ref.capacity == slot and gen in items
                assert_item(batch, b, expected_item(ref, items[gen], stack), f"drawn item {gen}")
                ref.record[slot] = gen
            history.append((draw.indices.copy(), batch.generation.copy()))
        elif history:
            indices, gens = history[op[1] % len(history)]
            values = np.random.default_rng(op[3]).uniform(0, 5, indices.shape[0])
            replay.update_priorities(indices, values, generations=gens if op[2] else None)
            ref.update(indices, values, gens if op[2] else None)
        check(replay, ref, stack)


@settings(max_examples=120)
@given(CONFIGS, OPS)
def test_matches_reference(config: dict[str, Any], ops: list[Any]) -> None:
    """Items, masks, contents, states, priorities and write-backs equal the reference's after
    every operation, across wrap-around (capacity near ``streams · W``), interleaved streams and
    short episodes."""
    replay, ref = build(config)
    run_ops(replay, ref, World(config["streams"]), ops, config["streams"])
    replay.check_valid()


@settings(max_examples=40)
@given(CONFIGS, OPS)
def test_frame_stacks_match_reference(config: dict[str, Any], ops: list[Any]) -> None:
    """With ``frame_stack=3`` (frames stored once, stacks moving on by one frame within an
    episode) the same: every batch, padded items included, is gathered with each frame once
    (neighbouring stacks share memory) and all its observations, padding included, are the
    reference's."""
    replay, ref = build(config, frame_stack=3)
    run_ops(replay, ref, World(config["streams"]), ops, config["streams"], stack=3)
    replay.check_valid()


def test_items_by_hand() -> None:
    """One stream, ``burn_in=1, length=2, period=2``: an episode of 7 steps gives items at steps
    0, 2 and 4 (full, W = 3) and at 6 (one step: no learn step, never added); under ``"drop"``
    only the full ones; the window crosses no episode end."""
    for tail, starts, lengths in (("pad", [0, 2, 4], [3, 3, 3]), ("drop", [0, 2, 4], [3, 3, 3])):
        replay = SequenceReplay(30, (1,), burn_in=1, length=2, period=2, episode_tail=tail, seed=0)
        for t in range(7):
            replay.add(
                np.array([t], np.float32), t, 0.0, 0.9, np.array([t + 1], np.float32), episode_end=t == 6
            )
        filled = np.flatnonzero(~np.isnan(replay.sampler.priorities)).tolist()
        assert filled == starts
        with replay.lock:
            batch = replay.gather(np.array(filled))
        assert batch.length.tolist() == lengths
    # an episode of 4 steps: items at 0 (3 steps) and 2 (2 steps: padded under "pad", dropped under "drop")
    for tail, starts in (("pad", [0, 2]), ("drop", [0])):
        replay = SequenceReplay(30, (1,), burn_in=1, length=2, period=2, episode_tail=tail, seed=0)
        for t in range(4):
            replay.add(
                np.array([t], np.float32), t, 0.0, 0.9, np.array([t + 1], np.float32), episode_end=t == 3
            )
        assert np.flatnonzero(~np.isnan(replay.sampler.priorities)).tolist() == starts
        with replay.lock:
            batch = replay.gather(np.array(starts))
        if tail == "pad":
            assert batch.obs[1, :, 0].tolist() == [2.0, 3.0, 4.0, 4.0]
            assert batch.valid[1].tolist() == [True, True, False]
            assert batch.learn[1].tolist() == [False, True, False]


@pytest.mark.parametrize("end_at", [None, 13])
def test_frame_stack_windows(end_at: int | None) -> None:
    """With ``frame_stack=3`` an item's observations are the stacks added, rebuilt from frames
    stored once (overlapping items share them): ``(B, W + 1, 3, *frame)``, a view of each frame
    gathered once, also when items end early (an episode end): their padding, position ``L + d``,
    is the last ``next_obs`` stack moved on by ``d`` frames, its last frame repeated."""
    replay = SequenceReplay(
        40, (2,), frame_stack=3, burn_in=2, length=3, period=2, obs_dtype=np.uint8, seed=0
    )
    frames = [np.full(2, t, np.uint8) for t in range(30)]

    def stack(t: int) -> np.ndarray:
        return np.stack([frames[max(t - 2 + j, 0)] for j in range(3)])

    for t in range(20 if end_at is None else end_at + 1):
        replay.add(stack(t), 0, 0.0, 0.9, stack(t + 1), episode_end=t == end_at)
    assert replay.memory.num_frames <= 20 + 3 + 1  # each frame once
    slots = np.flatnonzero(~np.isnan(replay.sampler.priorities))
    with replay.lock:
        batch = replay.gather(slots)
    assert batch.obs.shape == (slots.shape[0], 6, 3, 2)
    padded = 0
    for b, start in enumerate(batch.generation.tolist()):
        n = int(batch.length[b])
        padded += n < 5
        final = stack(start + n)  # the last step's next_obs
        for j in range(6):
            if j <= n:
                np.testing.assert_array_equal(batch.obs[b, j], stack(start + j))
            else:
                moved = np.stack([final[min(j - n + f, 2)] for f in range(3)])
                np.testing.assert_array_equal(batch.obs[b, j], moved)
    assert padded > 0 if end_at is not None else padded == 0
    # each frame gathered once: a read-only view of (B, W + frame_stack) frames
    assert not batch.obs.flags.writeable and batch.obs.base is not None
    assert batch.obs.strides[1] == batch.obs.strides[2]


class GatherLog:
    """Records the shape of every array of rows the replay's frame pool gathers."""

    def __init__(self, replay: SequenceReplay) -> None:
        self.shapes: list[tuple[int, ...]] = []
        store: Any = replay.memory.store
        pool = store.pool
        gather = pool.gather

        def logged(rows: np.ndarray) -> Any:
            self.shapes.append(rows.shape)
            return gather(rows)

        pool.gather = logged


Added = list[tuple[np.ndarray, np.ndarray, bool]]
"""``(obs, next_obs, episode_end)`` stacks of one stream's steps, in the order added."""


def reset_stacks(episodes: list[int], stack: int) -> Added:
    """The steps of episodes of the given lengths, frames numbered on across episodes, each
    episode's first stack its first frame repeated (a frame-stack wrapper's reset)."""
    out, t = [], 0
    for n in episodes:
        start = t

        def at(u: int, start: int = start) -> np.ndarray:
            return np.stack([np.full(2, max(u - stack + 1 + f, start), np.uint8) for f in range(stack)])

        for i in range(n):
            out.append((at(t), at(t + 1), i == n - 1))
            t += 1
        t += 1  # the next episode starts on a new frame
    return out


def expected_obs(steps: Added, start: int, n: int, window: int) -> np.ndarray:
    """The ``W + 1`` observations of the item of ``n`` steps from step ``start``, from the stacks
    added alone: the steps' ``obs``, the last step's ``next_obs``, then padding position ``n + d``
    that stack moved on by ``d`` frames (:func:`padded_stack`)."""
    final = steps[start + n - 1][1]
    obs = [steps[start + j][0] for j in range(n)]
    return np.stack(obs + [padded_stack(final, d) for d in range(window + 1 - n)])


def short_item_replay() -> tuple[SequenceReplay, Added]:
    replay = SequenceReplay(
        200, (2,), frame_stack=4, burn_in=2, length=4, period=3, obs_dtype=np.uint8, seed=0
    )
    steps = reset_stacks([11, 7, 4, 13, 3], 4)
    for obs, nxt, end in steps:
        replay.add(obs, 0, 0.0, 0.9, nxt, episode_end=end)
    return replay, steps


def test_a_batch_with_short_items_gathers_each_frame_once() -> None:
    """Items shorter than ``W`` (an episode's padded last pieces, episodes that start on a reset
    stack) do not leave the frame-deduplicated gather: one gather of ``(B, W + frame_stack)``
    frame rows, the stacks a read-only view of it, and every observation of every item, padding
    included, is the one the definition builds from the stacks added."""
    replay, steps = short_item_replay()
    slots = np.flatnonzero(~np.isnan(replay.sampler.priorities))
    log = GatherLog(replay)
    with replay.lock:
        batch = replay.gather(slots)
    w = replay.window
    assert (batch.length < w).sum() >= 3 and (batch.length == w).any()
    assert log.shapes == [(slots.shape[0], w + 4)]
    assert not batch.obs.flags.writeable and np.shares_memory(batch.obs[:, 0], batch.obs[:, 3])
    for b, start in enumerate(batch.generation.tolist()):
        want = expected_obs(steps, start, int(batch.length[b]), w)
        np.testing.assert_array_equal(batch.obs[b], want, err_msg=f"item {start}")


def test_both_host_frame_gathers_agree_everywhere() -> None:
    """The deduplicated gather (one view of each item's frames) and the gather per stack (rows
    ``(B, W + 1, frame_stack)``, which the device path also follows) give the same batch, padding
    included, and both are the definition's: a batch does not depend on the path it took."""
    replay, steps = short_item_replay()
    slots = np.flatnonzero(~np.isnan(replay.sampler.priorities))
    store: Any = replay.memory.store
    with replay.lock:
        batch = replay.gather(slots)
        win = replay.items.windows(slots)
        rows = replay.items.frame_rows(store.obs_rows, store.next_rows, win, batch.length)
        per_stack = store.pool.gather(rows)
    assert (batch.length < replay.window).any()
    np.testing.assert_array_equal(batch.obs, per_stack)
    for b, start in enumerate(batch.generation.tolist()):
        want = expected_obs(steps, start, int(batch.length[b]), replay.window)
        np.testing.assert_array_equal(per_stack[b], want, err_msg=f"item {start}")


def test_stacks_that_do_not_move_on_are_gathered_per_stack() -> None:
    """Stacks whose ``next_obs`` is not the ``obs`` moved on by one frame (stored in full) cannot
    share a window's frames: the batch is gathered as ``(B, W + 1, frame_stack)`` rows and is
    still the definition's everywhere, its padding the last ``next_obs`` moved on frame by frame."""
    replay = SequenceReplay(100, (2,), frame_stack=3, burn_in=1, length=3, period=2, obs_dtype=np.uint8)
    rng = np.random.default_rng(0)
    stacks = rng.integers(0, 255, (12, 3, 2), dtype=np.uint8)
    steps = [(stacks[t], stacks[t + 1], t == 10) for t in range(11)]
    for obs, nxt, end in steps:
        replay.add(obs, 0, 0.0, 0.9, nxt, episode_end=end)
    slots = np.flatnonzero(~np.isnan(replay.sampler.priorities))
    log = GatherLog(replay)
    with replay.lock:
        batch = replay.gather(slots)
    assert log.shapes == [(slots.shape[0], replay.window + 1, 3)] and (batch.length < replay.window).any()
    for b, start in enumerate(batch.generation.tolist()):
        want = expected_obs(steps, start, int(batch.length[b]), replay.window)
        np.testing.assert_array_equal(batch.obs[b], want, err_msg=f"item {start}")


def fill(replay: SequenceReplay, steps: int, streams: int = 1, seed: int = 0) -> None:
    """``steps`` steps on ``streams`` streams, episodes ending with probability 0.05 (zero states
    where the replay keeps one)."""
    rng = np.random.default_rng(seed)
    counters = [0] * streams
    spec = replay.items.state
    state = None if spec is None else np.zeros(spec[""][0], spec[""][1])
    for t in range(steps):
        s = t % streams
        c = counters[s]
        end = bool(rng.random() < 0.05)
        replay.add(
            np.array([c, s], np.float32), c % 4, 1.0, 0.0 if end else 0.9, np.array([c + 1, s], np.float32),
            episode_end=end, stream=s, state=state,
        )  # fmt: skip
        counters[s] += 2 if end else 1


@pytest.mark.parametrize("backend", ["proportional", "rank", "uniform"])
def test_distribution_chi_square(backend: str) -> None:
    """Draws follow ``P(i)`` of the backend over the drawable items: ``(p_i + ε)^α / Σ_k (p_k +
    ε)^α`` proportional, ``rank(i)^-α / Σ`` rank-based, ``1/N`` uniform (chi-square, 40 000 draws)."""
    replay = SequenceReplay(120, (2,), burn_in=1, length=2, period=2, alpha=0.7, seed=5, backend=backend)
    fill(replay, 120)
    slots = np.flatnonzero(~np.isnan(replay.sampler.priorities))
    p = np.random.default_rng(1).uniform(0.1, 4.0, slots.shape[0])
    replay.update_priorities(slots, p, generations=replay.items.item_gen[slots])
    if backend == "proportional":
        mass = (p + 1e-6) ** 0.7
    elif backend == "rank":
        ranks = np.empty(p.shape[0])
        ranks[np.argsort(-p, kind="stable")] = np.arange(1, p.shape[0] + 1)
        mass = ranks**-0.7
    else:
        mass = np.ones_like(p)
    expected = mass / mass.sum()
    counts = np.zeros(replay.capacity)
    for _ in range(400):
        _, draw = replay.sample(100)
        np.add.at(counts, draw.indices, 1)
        np.testing.assert_allclose(
            draw.probabilities, expected[np.searchsorted(slots, draw.indices)], rtol=1e-9
        )
    assert counts[np.setdiff1d(np.arange(replay.capacity), slots)].sum() == 0
    want = expected * counts.sum()
    chi2 = float(((counts[slots] - want) ** 2 / want).sum())
    dof = slots.shape[0] - 1
    pvalue = float(
        torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(chi2 / 2))
    )
    assert pvalue > 1e-4, (chi2, dof, pvalue)


@pytest.mark.parametrize("norm", ["memory", "batch"])
def test_weights(norm: Any) -> None:
    """``w_i = (N · P(i))^-β`` divided by the largest over the drawable items (``"memory"``) or
    over the batch (``"batch"``), β from its schedule at the batch's step."""
    beta = LinearSchedule(0.4, 1.0, 10)
    replay = SequenceReplay(
        90, (2,), burn_in=0, length=2, period=1, alpha=0.6, beta=beta, weight_norm=norm, seed=2
    )
    fill(replay, 90)
    slots = np.flatnonzero(~np.isnan(replay.sampler.priorities))
    p = np.random.default_rng(4).uniform(0.1, 3.0, slots.shape[0])
    replay.update_priorities(slots, p, generations=replay.items.item_gen[slots])
    prob = (p + 1e-6) ** 0.6
    prob /= prob.sum()
    n = slots.shape[0]
    for step in range(12):
        _, draw = replay.sample(16)
        b = beta(step)
        w = (n * prob[np.searchsorted(slots, draw.indices)]) ** -b
        w /= (n * prob.min()) ** -b if norm == "memory" else w.max()
        np.testing.assert_allclose(draw.weights, w, rtol=1e-5)


def test_actor_priorities_and_update_from_td() -> None:
    """An item enters at the actor's R2D2 mix over its learn steps when every learn step came
    with one; ``update_from_td`` writes back ``η·max|δ| + (1−η)·mean|δ|`` over ``learn``."""
    replay = SequenceReplay(40, (1,), burn_in=1, length=2, period=3, eta=0.5, seed=0)
    prios = [9.0, 1.0, 3.0, 5.0, 7.0, 2.0]
    for t in range(6):
        replay.add(np.array([t], np.float32), 0, 0.0, 0.9, np.array([t + 1], np.float32), priority=prios[t])
    assert replay.sampler.priorities[0] == 0.5 * 3.0 + 0.5 * 2.0  # learn steps 1, 2
    assert replay.sampler.priorities[3] == 0.5 * 7.0 + 0.5 * 4.5  # learn steps 4, 5
    batch, draw = replay.sample(4)
    td = np.arange(12, dtype=np.float64).reshape(4, 3) - 6.0
    replay.update_from_td(draw.indices, td, batch.learn, generations=batch.generation)
    got = replay.sampler.priorities[draw.indices[-1]]
    row = np.abs(td[-1, 1:3])
    assert got == pytest.approx(0.5 * row.max() + 0.5 * row.mean())


def test_stale_write_back_dropped() -> None:
    """A write-back to an item that left (its first step evicted) or was replaced by a new item
    at its slot is dropped and counted; one to a live item lands."""
    replay = SequenceReplay(12, (2,), burn_in=0, length=2, period=2, seed=0)
    fill(replay, 8)
    batch, draw = replay.sample(3)
    fill(replay, 12, seed=1)  # every slot rewritten
    before = replay.sampler.priorities.copy()
    replay.update_priorities(draw.indices, [5.0, 5.0, 5.0], generations=batch.generation)
    assert replay.dropped_updates == 3
    np.testing.assert_array_equal(replay.sampler.priorities, before)
    batch, draw = replay.sample(2)
    replay.update_priorities(draw.indices, [5.0, 6.0])  # against the draw record
    assert replay.dropped_updates == 3
    assert replay.sampler.priorities[draw.indices[-1]] == 6.0


def test_state_pool_retires_oldest() -> None:
    """With every state row held, a new item retires the oldest item holding one: it leaves
    the sampler and is counted in ``retired_items``."""
    replay = SequenceReplay(
        40, (1,), burn_in=0, length=1, period=1, state=((1,), np.float32), state_capacity=3, seed=0
    )
    for t in range(5):
        replay.add(
            np.array([t], np.float32),
            0,
            0.0,
            0.9,
            np.array([t + 1], np.float32),
            state=np.array([t], np.float32),
        )
    assert replay.retired_items == 2
    assert np.flatnonzero(~np.isnan(replay.sampler.priorities)).tolist() == [2, 3, 4]
    with replay.lock:
        assert replay.gather(np.array([2, 3, 4])).state[:, 0].tolist() == [2.0, 3.0, 4.0]
    replay.check_valid()


# -- vector steps, devices, dict observations ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_vector_step_both_autoreset_modes(mode: str) -> None:
    """``add_vector_step`` stores what the memory's converter makes of a gymnasium step (reset
    steps of next-step autoreset skipped, same-step final observations used) with each env's
    state, and the items cross no episode end."""
    replay = SequenceReplay(
        60, (1,), burn_in=0, length=2, period=2, num_streams=2, state=((1,), np.float32), seed=0
    )
    obs = np.array([[0.0], [100.0]], np.float32)
    ends = {3: np.array([True, False]), 5: np.array([False, True])}
    reset_next = np.array([False, False])
    for t in range(8):
        done = ends.get(t, np.array([False, False]))
        nxt = obs + 1
        infos: dict[str, Any] = {}
        if mode == "SameStep" and done.any():
            infos = {"final_obs": nxt.copy(), "_final_obs": done.copy()}
            nxt = np.where(done[:, None], obs + 50, nxt).astype(np.float32)
        replay.add_vector_step(
            obs, np.array([t, t]), np.ones(2), done, np.zeros(2, bool), nxt, infos, 0.9,
            state=obs.copy(), autoreset_mode=mode,
        )  # fmt: skip
        if mode == "NextStep":
            nxt = np.where(done[:, None], obs + 50, nxt).astype(np.float32) if done.any() else nxt
            reset_next = done
        obs = nxt
    assert replay.memory.vector_converter is not None
    _ = reset_next
    slots = np.flatnonzero(~np.isnan(replay.sampler.priorities))
    with replay.lock:
        batch = replay.gather(slots)
    for b in range(slots.shape[0]):
        n = int(batch.length[b])
        o = batch.obs[b, : n + 1, 0]
        assert np.all(np.diff(o) == 1.0), o  # one episode, consecutive
        assert batch.state[b, 0] == o[0]
    replay.check_valid()


def test_device_batch() -> None:
    """With ``device="cpu"`` the batch's arrays are tensors there, equal to the host batch."""
    a = SequenceReplay(40, (2,), burn_in=1, length=2, period=2, seed=7, state=((2,), np.float32))
    b = SequenceReplay(
        40, (2,), burn_in=1, length=2, period=2, seed=7, state=((2,), np.float32), device="cpu"
    )
    for r in (a, b):
        for t in range(12):
            r.add(
                np.full(2, t, np.float32),
                t,
                1.0,
                0.9,
                np.full(2, t + 1, np.float32),
                state=np.full(2, t, np.float32),
            )
    (ha, _), (hb, db) = a.sample(5), b.sample(5)
    assert isinstance(hb.obs, torch.Tensor) and isinstance(db.weights, torch.Tensor)
    for key in ha:
        np.testing.assert_array_equal(np.asarray(ha[key]), hb[key].numpy())
    b.update_from_td(db.indices, torch.ones(5, 3), hb.learn, generations=hb.generation)


def test_dict_observations() -> None:
    """Dict observations: each key ``(B, W + 1, *shape)``, padded with the last ``next_obs``."""
    replay = SequenceReplay(
        30, {"a": (2,), "b": ()}, burn_in=0, length=3, period=3, obs_dtype=np.float32, seed=0
    )
    for t in range(5):
        replay.add(
            {"a": np.full(2, t, np.float32), "b": np.float32(t)}, 0, 0.0, 0.9,
            {"a": np.full(2, t + 1, np.float32), "b": np.float32(t + 1)}, episode_end=t == 4,
        )  # fmt: skip
    with replay.lock:
        batch = replay.gather(np.array([0, 3]))
    assert batch.obs["b"].tolist() == [[0, 1, 2, 3], [3, 4, 5, 5]]
    assert batch.obs["a"].shape == (2, 4, 2)


# -- checkpoints -----------------------------------------------------------------------------------


def scripted(replay: SequenceReplay, world: World, ref: Reference, steps: int, seed: int) -> list[Any]:
    """Writes, draws and write-backs driven by ``seed``; returns what each draw gave."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for _ in range(steps):
        rows: list[tuple[int, bool, float | None]] = [
            (int(rng.integers(0, 3)), bool(rng.random() < 0.15), None) for _ in range(int(rng.integers(1, 3)))
        ]
        write(replay, ref, world, rows)
        if len(replay) and rng.random() < 0.5:
            batch, draw = replay.sample(4)
            out.append(
                (
                    draw.indices.copy(),
                    draw.weights.copy(),
                    {k: np.asarray(v).copy() for k, v in batch.items()},
                )
            )
            replay.update_from_td(
                draw.indices, rng.normal(size=(4, replay.window)), batch.learn, generations=batch.generation
            )
    return out


def equal_runs(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for (ia, wa, ba), (ib, wb, bb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(wa, wb)
        for key in ba:
            np.testing.assert_array_equal(ba[key], bb[key])


CONFIG = {"burn_in": 2, "length": 3, "period": 2, "bootstrap": 1, "tail": "pad", "streams": 3, "spare": 5}


@pytest.mark.parametrize("include_memory", [True, False])
def test_resume_exactly(include_memory: bool) -> None:
    """A replay saved mid-stream (open items, a wrapped ring, drawn items) and loaded into a fresh
    one (``include_memory``) or into a copy of itself that went on (without) continues bit for
    bit: the same draws, weights, batches and priorities."""
    replay, ref = build(CONFIG)
    world = World(3)
    scripted(replay, world, ref, 60, seed=1)
    state = copy.deepcopy(replay.state_dict(include_memory=True))
    world_at, ref_at = copy.deepcopy(world), copy.deepcopy(ref)
    first = scripted(replay, world, ref, 60, seed=2)
    if include_memory:
        other, _ = build(CONFIG)
        other.load_state_dict(state)
    else:
        other, _ = build(CONFIG)
        other.load_state_dict(state)  # the memory first, then a state without it
        other.load_state_dict({k: v for k, v in copy.deepcopy(state).items() if k != "memory"})
    second = scripted(other, world_at, ref_at, 60, seed=2)
    equal_runs(first, second)
    np.testing.assert_array_equal(replay.sampler.priorities, other.sampler.priorities)
    other.check_valid()


def deep_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    return bool(a == b) and type(a) is type(b)


def corruptions(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Ways to break a state, each named by what a check must catch."""
    out = []

    def change(name: str, edit: Any) -> None:
        broken = copy.deepcopy(state)
        edit(broken)
        out.append((name, broken))

    items = "items"
    change("version", lambda s: s.update(version=99))
    change("config", lambda s: s["config"].update(period=7))
    change("missing key", lambda s: s.pop("drawn"))
    change("extra key", lambda s: s.update(extra=1))
    change("dropped_updates", lambda s: s.update(dropped_updates=-1))
    change("memory_head", lambda s: s.update(memory_head=s["memory_head"] + 1))
    change("status", lambda s: s[items]["slots"]["status"].__setitem__(0, 5))
    change(
        "steps",
        lambda s: s[items]["slots"]["steps"].__setitem__(np.argmax(s[items]["slots"]["status"] == 2), 99),
    )
    change(
        "next_slot",
        lambda s: s[items]["slots"]["next_slot"].__setitem__(
            np.argmax(s[items]["slots"]["next_slot"] >= 0), s[items]["slots"]["next_slot"].max()
        ),
    )
    change("stream_of", lambda s: s[items]["slots"]["stream_of"].__setitem__(slice(None), 7))
    change("open_items", lambda s: s[items]["open_items"].__setitem__((0, slice(None)), -1))
    change(
        "state_row",
        lambda s: s[items]["slots"]["state_row"].__setitem__(np.argmax(s[items]["slots"]["status"] == 2), -1),
    )
    change(
        "free",
        lambda s: (
            s[items].update(nfree=s[items]["nfree"] + 1)
            if s[items]["nfree"] < len(s[items]["free"])
            else s[items].update(nfree=-1)
        ),
    )
    change("pool dtype", lambda s: s[items]["pool"].update({"": s[items]["pool"][""].astype(np.float64)}))
    change("pool finite", lambda s: s[items]["pool"][""].__setitem__((0, 0), np.nan))
    change("step_priority", lambda s: s[items]["slots"]["step_priority"].__setitem__(0, -1.0))
    change("last_gen", lambda s: s[items]["last_gen"].__setitem__(0, s["memory_head"] + 5))
    change(
        "sampler filled",
        lambda s: s["sampler"]["priorities"].__setitem__(
            np.argmax(np.isnan(s["sampler"]["priorities"])), 1.0
        ),
    )
    change("drawn", lambda s: s["drawn"].__setitem__(0, 1))
    change("memory", lambda s: s["memory"].update(version=99))
    return out


def test_rejected_loads_change_nothing() -> None:
    """Each corruption of a state is refused with ``ValueError``/``TypeError``, and the replay's
    state stays exactly as it was."""
    replay, ref = build(CONFIG)
    world = World(3)
    scripted(replay, world, ref, 50, seed=3)
    good = copy.deepcopy(replay.state_dict(include_memory=True))
    other, oref = build(CONFIG)
    scripted(other, World(3), oref, 20, seed=4)
    before = copy.deepcopy(other.state_dict(include_memory=True))
    for name, broken in corruptions(good):
        with pytest.raises((ValueError, TypeError)):
            other.load_state_dict(broken)
        assert deep_equal(other.state_dict(include_memory=True), before), f"{name} changed the replay"
    other.load_state_dict(good)  # the good one loads
    other.check_valid()


def test_bad_input_named_nothing_changed() -> None:
    """Bad arguments raise ``ValueError``/``TypeError`` naming them, and nothing changes."""
    replay, ref = build(CONFIG)
    world = World(3)
    scripted(replay, world, ref, 30, seed=5)
    before = copy.deepcopy(replay.state_dict(include_memory=True))
    o, n = np.zeros(2, np.float32), np.ones(2, np.float32)
    s = np.zeros(3, np.float32)
    batch, draw = replay.sample(2)
    before = copy.deepcopy(replay.state_dict(include_memory=True))
    bad: list[tuple[str, Any]] = [
        ("state", lambda: replay.add(o, 0, 0.0, 0.9, n)),
        ("state", lambda: replay.add(o, 0, 0.0, 0.9, n, state=np.zeros(4, np.float32))),
        ("state", lambda: replay.add(o, 0, 0.0, 0.9, n, state=np.array([np.nan, 0, 0], np.float32))),
        ("priority", lambda: replay.add(o, 0, 0.0, 0.9, n, state=s, priority=-1.0)),
        ("discount", lambda: replay.add(o, 0, 0.0, 1.5, n, state=s)),
        ("stream", lambda: replay.add(o, 0, 0.0, 0.9, n, stream=3, state=s)),
        ("obs", lambda: replay.add(np.zeros(3, np.float32), 0, 0.0, 0.9, n, state=s)),
        (
            "state",
            lambda: replay.add_many(
                np.zeros((2, 2), np.float32),
                [0, 0],
                [0.0, 0.0],
                [0.9, 0.9],
                np.zeros((2, 2), np.float32),
                state=np.zeros((3, 3), np.float32),
            ),
        ),
        (
            "priorities",
            lambda: replay.add_many(
                np.zeros((2, 2), np.float32),
                [0, 0],
                [0.0, 0.0],
                [0.9, 0.9],
                np.zeros((2, 2), np.float32),
                state=np.zeros((2, 3), np.float32),
                priorities=[1.0, np.inf],
            ),
        ),
        ("indices", lambda: replay.update_priorities([replay.capacity], [1.0])),
        ("priorities", lambda: replay.update_priorities(draw.indices, [1.0, -2.0])),
        ("priorities", lambda: replay.update_priorities(draw.indices, [1.0])),
        ("generations", lambda: replay.update_priorities(draw.indices, [1.0, 2.0], generations=[1])),
        (
            "mask",
            lambda: replay.update_from_td(
                draw.indices, np.ones((2, replay.window)), np.zeros((2, replay.window), bool)
            ),
        ),
        ("td_errors", lambda: replay.update_from_td(draw.indices, np.ones(2), batch.learn)),
        ("k", lambda: replay.sample(0)),
    ]
    never = np.flatnonzero(replay.items.item_gen < 0)
    if never.shape[0]:
        bad.append(("indices", lambda: replay.update_priorities(never[:1], [1.0])))
    for name, call in bad:
        with pytest.raises((ValueError, TypeError), match=name):
            call()
        assert deep_equal(replay.state_dict(include_memory=True), before), f"bad {name} changed the replay"


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"capacity": 10}, "capacity"),
        ({"episode_tail": "keep"}, "episode_tail"),
        ({"period": 0}, "period"),
        ({"burn_in": -1}, "burn_in"),
        ({"eta": 1.5}, "eta"),
        ({"eviction": "priority"}, "eviction"),
        ({"priorities_on": "cpu"}, "priorities_on"),
        ({"state": (3, np.float32)}, "state"),
        ({"state_capacity": 4}, "state_capacity"),
        ({"backend": "nope"}, "backend"),
    ],
)
def test_constructor_errors(kwargs: dict[str, Any], name: str) -> None:
    args_ = {"capacity": 40, "burn_in": 1, "length": 2, "period": 2, **kwargs}
    capacity = args_.pop("capacity")
    with pytest.raises((ValueError, TypeError), match=name):
        SequenceReplay(capacity, (2,), num_streams=4, **args_)


# -- threads ---------------------------------------------------------------------------------------


K_THREADS = 32


def drawn_total(replay: SequenceReplay) -> int:
    """Batches drawn so far (the β schedule's step)."""
    return int(replay.sampler.step)


def test_actor_adds_while_learner_samples() -> None:
    """An actor thread adds (two streams, short episodes) while a learner samples and writes
    back: every batch's items are consistent (obs, actions, states of one stream's consecutive
    steps of one episode), and the index stays valid."""
    replay = SequenceReplay(
        16, (2,), burn_in=1, length=3, period=2, num_streams=2, state=((1,), np.float32), seed=0
    )
    errors: list[str] = []
    finished = threading.Event()

    def actor() -> None:
        rng = np.random.default_rng(0)
        counter = [0, 10**6]
        for t in range(3000):
            s = t % 2
            c = counter[s]
            end = bool(rng.random() < 0.1)
            replay.add(
                np.array([c, s], np.float32), c, 0.0, 0.0 if end else 0.9, np.array([c + 1, s], np.float32),
                episode_end=end, stream=s, state=np.array([c], np.float32),
            )  # fmt: skip
            counter[s] += 2 if end else 1
        finished.set()

    def learner() -> None:
        drawn = 0
        while drawn < 400 or not finished.is_set():
            if len(replay) == 0:
                continue
            drawn += 1
            batch, draw = replay.sample(K_THREADS)
            if not np.array_equal(batch.generation % replay.capacity, draw.indices):
                errors.append(f"items {draw.indices} hold generations {batch.generation}")
            for b in range(K_THREADS):
                n = int(batch.length[b])
                o = batch.obs[b, :, 0]
                ok = (
                    np.all(np.diff(o[: n + 1]) == 1)
                    and np.all(o[n + 1 :] == o[n])
                    and np.all(batch.obs[b, :, 1] == batch.obs[b, 0, 1])
                    and np.array_equal(batch.action[b, :n], o[:n].astype(np.int64))
                    and batch.state[b, 0] == o[0]
                    and (n == replay.window or batch.discount[b, n - 1] == 0.0)  # complete
                )
                if not ok:
                    errors.append(f"torn item {draw.indices[b]}: {o}")
            replay.update_priorities(draw.indices, np.ones(K_THREADS), generations=batch.generation)

    run_threads([actor, learner])
    assert not errors, f"{len(errors)} torn: {errors[:3]}"
    assert drawn_total(replay) >= 400
    replay.check_valid()


def test_prefetch() -> None:
    """``prefetch`` draws the same batches as ``sample`` would, in a background thread."""
    a = SequenceReplay(40, (2,), burn_in=1, length=2, period=2, seed=9)
    b = SequenceReplay(40, (2,), burn_in=1, length=2, period=2, seed=9)
    for r in (a, b):
        fill(r, 40)
    with a.prefetch(4, total=3) as batches:
        got = list(batches)
    for batch, draw in got:
        want, wdraw = b.sample(4)
        assert isinstance(batch, SequenceBatch)
        np.testing.assert_array_equal(draw.indices, wdraw.indices)
        np.testing.assert_array_equal(batch.obs, want.obs)


def test_nbytes_counts_parts() -> None:
    replay = SequenceReplay(64, (2,), burn_in=1, length=2, period=2, state=((8,), np.float32), seed=0)
    fill(replay, 10)
    assert replay.nbytes >= replay.memory.nbytes + replay.items.nbytes + replay.sampler.nbytes
    assert replay.items.pool[""].nbytes == replay.state_capacity * 8 * 4


def test_lock_is_shared() -> None:
    replay = SequenceReplay(40, (2,), burn_in=1, length=2, period=2, seed=0)
    assert isinstance(replay.lock, type(threading.RLock()))
    assert replay.lock is replay.sampler.lock


def test_a_sampler_passed_in_is_used_and_the_arguments_it_replaces_are_refused() -> None:
    """``sampler=`` with the sampler arguments at this constructor's defaults (α 0.9, β 0.6) is
    taken and drawn from; one of them set as well is refused by name."""
    from prisample.slot_sampler import make_sampler

    sampler = make_sampler(256, alpha=0.5, beta=1.0, size=0, seed=3)
    replay = SequenceReplay(256, (3,), burn_in=2, length=4, period=2, obs_dtype=np.float32, sampler=sampler)
    assert replay.sampler is sampler
    for t in range(12):
        replay.add(np.full(3, t), 0, 1.0, 0.99, np.full(3, t + 1), episode_end=t == 11)
    assert sampler.size == len(replay) > 0
    _, draw = replay.sample(4)
    assert set(draw.indices.tolist()) <= set(np.flatnonzero(~np.isnan(sampler.priorities)).tolist())
    with pytest.raises(ValueError, match=r"alpha=0\.7"):
        SequenceReplay(256, (3,), burn_in=2, length=4, period=2, alpha=0.7, sampler=make_sampler(256, size=0))
