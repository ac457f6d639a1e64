"""``NStepAccumulator``: n-step windows against a naive reference, n = 1, validation, checkpoints."""

from __future__ import annotations

import copy
import math
import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from prisample import PrioritizedSampler
from prisample.replay.nstep import NStepAccumulator
from tests.state_fuzz import check_load, corrupted_states, states_equal

# ------------------------------------------------------------------------------------------------
# naive reference: the full history, each window recomputed from the definition
# ------------------------------------------------------------------------------------------------


@dataclass
class Step:
    generation: int
    slot: int
    episode: int
    reward: float
    discount: float
    position: int  # in its episode


@dataclass
class Reference:
    """Every transition ever added, grouped by episode (an episode = a run of one stream's
    transitions between boundaries: ``episode_end``, or a push with ``continues=False``).

    Transition ``t``'s window is the first ``m`` transitions of its episode from ``t`` on: complete
    once ``n`` exist, or (``m`` = what exists) once the episode is over.  The memory is a ring of
    ``capacity`` slots (slot = generation mod capacity) whose transitions numbered below ``tail``
    are gone.
    """

    n: int
    capacity: int
    tail: int = 0
    episodes: dict[int, list[Step]] = field(default_factory=dict)
    over: set[int] = field(default_factory=set)
    current: dict[int, int] = field(default_factory=dict)  # stream -> its open episode
    steps: list[Step] = field(default_factory=list)

    def add(self, stream: int, reward: float, discount: float, end: bool, continues: bool) -> None:
        if stream in self.current and not continues:
            self.over.add(self.current.pop(stream))
        if stream not in self.current:
            self.current[stream] = len(self.episodes)
            self.episodes[len(self.episodes)] = []
        episode = self.current[stream]
        generation = len(self.steps)
        position = len(self.episodes[episode])
        step = Step(generation, generation % self.capacity, episode, reward, discount, position)
        self.steps.append(step)
        self.episodes[episode].append(step)
        if end:
            self.over.add(self.current.pop(stream))

    def window(self, step: Step) -> list[Step] | None:
        """The transitions of ``step``'s window, or ``None`` while it is incomplete."""
        window = self.episodes[step.episode][step.position : step.position + self.n]
        return window if len(window) == self.n or step.episode in self.over else None

    def completed(self) -> dict[int, tuple[float, float, int, int, float]]:
        """slot -> (reward, discount, last slot, length, Σ|terms|) of every live complete window."""
        result = {}
        for step in self.steps[self.tail :]:
            window = self.window(step)
            if window is None:
                continue
            gammas = [s.discount for s in window]
            terms = [math.prod(gammas[:k]) * s.reward for k, s in enumerate(window)]
            result[step.slot] = (
                sum(terms),
                math.prod(gammas),
                window[-1].slot,
                len(window),
                sum(abs(x) for x in terms),
            )
        return result


def assert_matches(acc: NStepAccumulator, expected: dict[int, tuple[float, float, int, int, float]]) -> None:
    slots = sorted(expected)
    assert acc.completed_slots().tolist() == slots
    for slot in slots:
        reward, discount, last, length, scale = expected[slot]
        # float64 sums rounded once to float32: half an ulp of float32, plus float64's own error
        assert abs(float(acc.reward[slot]) - reward) <= 2**-24 * abs(reward) + 1e-14 * scale, slot
        assert abs(float(acc.discount[slot]) - discount) <= 2**-24 * discount + 1e-15, slot
        assert (int(acc.last[slot]), int(acc.length[slot])) == (last, length), slot


def random_transition(rng: np.random.Generator, gamma: float) -> tuple[float, float, bool, bool]:
    """(reward, discount, episode_end, continues): terminations (γ_t = 0), truncations (γ_t = γ),
    unflagged resets (``continues=False``), rewards of every size."""
    reward = float(rng.normal() * rng.choice([1.0, 1e-3, 1e6, 1e30]))
    u = rng.random()
    end = u < 0.12
    discount = 0.0 if (end and u < 0.06) else (gamma if rng.random() < 0.8 else float(rng.random()))
    continues = rng.random() > 0.06
    return reward, discount, end, continues


def drive(n: int, num_streams: int, capacity: int, seed: int, steps: int, vector: bool) -> int:
    """Random pushes (one at a time, or vector steps through ``push_many``) with oldest-first
    eviction as the memory does it (ring wrap-around, and now and then early evictions), checking
    the accumulator against the reference after every eviction and every push.  Returns the
    number of pending entries dropped by evictions."""
    rng = np.random.default_rng(seed)
    acc, ref = NStepAccumulator(n, num_streams, capacity), Reference(n, capacity)
    gamma = float(rng.choice([0.99, 0.5, 1.0]))
    dropped = 0
    for _ in range(steps):
        head = len(ref.steps)
        k = int(rng.integers(1, min(num_streams, capacity) + 1)) if vector else 1
        streams = rng.choice(num_streams, size=k, replace=bool(rng.random() < 0.3)).astype(np.int64)
        # room for k new transitions, then sometimes early eviction (frame-pool pressure)
        tail = max(ref.tail, head + k - capacity)
        if rng.random() < 0.1:
            tail = min(head, tail + int(rng.integers(1, 4)))
        gens = rng.permutation(np.arange(ref.tail, tail, dtype=np.int64))  # any order in the call
        cut = int(rng.integers(0, gens.shape[0] + 1))
        for part in (gens[:cut], gens[cut:]):
            dropped += acc.evict(part % capacity, part)
        ref.tail = tail
        before = ref.completed()
        assert_matches(acc, before)

        moves = [random_transition(rng, gamma) for _ in range(k)]
        for s, (r, g, end, cont) in zip(streams, moves, strict=True):
            ref.add(int(s), r, g, end, cont)
        gens = np.arange(head, head + k, dtype=np.int64)
        if vector:
            got = acc.push_many(
                gens % capacity,
                gens,
                streams,
                [m[0] for m in moves],
                [m[1] for m in moves],
                episode_end=np.array([m[2] for m in moves]),
                continues=np.array([m[3] for m in moves]),
            )
        else:
            r, g, end, cont = moves[0]
            got = acc.push(
                int(gens[0] % capacity), int(gens[0]), int(streams[0]), r, g, episode_end=end, continues=cont
            )
        after = ref.completed()
        new = [slot for slot in after if slot not in before]
        assert sorted(got.tolist()) == sorted(new) and len(set(got.tolist())) == len(got)
        if not vector:  # one push completes its windows oldest first
            generation = {s.slot: s.generation for s in ref.steps[ref.tail :]}
            assert got.tolist() == sorted(new, key=generation.__getitem__)
        assert_matches(acc, after)
        assert acc.num_pending == len(ref.steps) - ref.tail - len(after)
    return dropped


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize(("num_streams", "capacity"), [(1, 16), (3, 16), (3, 7), (2, 3), (1, 2), (1, 1)])
@pytest.mark.parametrize("vector", [False, True])
def test_windows_match_reference(n, num_streams, capacity, vector):
    """At every moment the completed slots are exactly the reference's live complete windows, with
    the reference's reward, discount, last slot and length: episodes ending in terminations and
    truncations, unflagged resets, interleaved streams, wrap-around, early and out-of-order
    eviction calls, rings smaller than the window."""
    dropped = sum(drive(n, num_streams, capacity, seed, steps=250, vector=vector) for seed in range(2))
    if capacity < n:
        assert dropped > 0  # windows longer than the ring: pending transitions evicted
    if n == 1:
        assert dropped == 0


def test_vector_steps_equal_single_pushes():
    """``push_many`` returns and stores exactly what the same pushes one by one do."""
    rng = np.random.default_rng(7)
    a, b = NStepAccumulator(3, 4, 64), NStepAccumulator(3, 4, 64)
    out = np.empty(4 * 3, dtype=np.int64)
    for step in range(40):
        gens = np.arange(4 * step, 4 * step + 4)
        moves = [random_transition(rng, 0.9) for _ in range(4)]
        streams = rng.permutation(4)
        if step >= 16:
            a.evict(gens % 64, gens - 64)
            b.evict(gens % 64, gens - 64)
        rewards, discounts, ends, conts = (list(column) for column in zip(*moves, strict=True))
        got = a.push_many(
            gens % 64, gens, streams, rewards, discounts, episode_end=ends, continues=conts, out=out
        )
        want = [
            b.push(int(g % 64), int(g), int(s), r, d, episode_end=e, continues=c)
            for g, s, (r, d, e, c) in zip(gens, streams, moves, strict=True)
        ]
        np.testing.assert_array_equal(got, np.concatenate(want))
        assert got.base is out or got.size == 0
        assert states_equal(a.state_dict(), b.state_dict())


def test_evicting_a_pending_transition_keeps_the_newer_ones():
    """Eviction drops the evicted pending entries and those older in their stream; the newer
    pending entries still complete, over newer transitions only."""
    acc = NStepAccumulator(3, 1, 4)
    for t in range(2):
        assert acc.push(t, t, 0, 1.0, 0.5).size == 0
    assert acc.evict([1], [1]) == 2  # the newest: the older one goes with it
    assert acc.num_pending == 0
    for t in range(2, 4):
        acc.push(t, t, 0, 1.0, 0.5)
    assert acc.evict([2], [2]) == 1  # the older of two pending: the newer one stays
    np.testing.assert_array_equal(acc.pending_slots(0), [3])
    assert acc.push(0, 4, 0, 1.0, 0.5).size == 0
    np.testing.assert_array_equal(acc.push(1, 5, 0, 1.0, 0.5), [3])
    assert (float(acc.reward[3]), float(acc.discount[3]), int(acc.last[3])) == (1.75, 0.125, 1)
    assert acc.evict([3, 3], [3, 3]) == 0 and not acc.is_complete([3])[0]  # twice: a no-op
    assert acc.evict([0], [99]) == 0  # another generation: ignored
    np.testing.assert_array_equal(acc.pending_slots(0), [0, 1])


def test_continues_false_cuts_windows_at_the_previous_transition():
    acc = NStepAccumulator(5, 2, 16)
    acc.push(0, 0, 0, 1.0, 0.9)
    acc.push(1, 1, 1, 7.0, 0.9)  # another stream: untouched
    acc.push(2, 2, 0, 2.0, 0.9)
    np.testing.assert_array_equal(acc.push(3, 3, 0, 4.0, 0.9, continues=False), [0, 2])
    assert (float(acc.reward[0]), float(acc.discount[0]), int(acc.last[0]), int(acc.length[0])) == (
        np.float32(1.0 + 0.9 * 2.0),
        np.float32(0.81),
        2,
        2,
    )
    np.testing.assert_array_equal(acc.pending_slots(0), [3])
    np.testing.assert_array_equal(acc.pending_slots(1), [1])
    # a boundary and an episode end in one push: the old windows, then the new one alone
    np.testing.assert_array_equal(acc.push(4, 4, 1, 1.0, 0.0, episode_end=True, continues=False), [1, 4])
    assert (int(acc.length[1]), int(acc.last[1]), int(acc.length[4])) == (1, 1, 1)


# ------------------------------------------------------------------------------------------------
# n = 1
# ------------------------------------------------------------------------------------------------


def test_n1_is_the_identity():
    """With n = 1 every push completes its own slot at once with ``float32(r_t)``, ``float32(γ_t)``."""
    rng = np.random.default_rng(3)
    acc = NStepAccumulator(1, 3, 8)
    for t in range(100):
        if t >= 8:
            acc.evict([t % 8], [t - 8])
        r, g, end, cont = random_transition(rng, 0.99)
        got = acc.push(t % 8, t, int(rng.integers(3)), r, g, episode_end=end, continues=cont)
        np.testing.assert_array_equal(got, [t % 8])
        assert acc.reward[t % 8] == np.float32(r) and acc.discount[t % 8] == np.float32(g)
        assert (int(acc.last[t % 8]), int(acc.length[t % 8]), acc.num_pending) == (t % 8, 1, 0)
    np.testing.assert_array_equal(acc.completed_slots(), np.arange(8))


# ------------------------------------------------------------------------------------------------
# validation: errors name the argument, and nothing changes
# ------------------------------------------------------------------------------------------------


def busy() -> NStepAccumulator:
    acc = NStepAccumulator(3, 2, 8)
    for t in range(5):
        acc.push(t, t, t % 2, 1.0, 0.9)
    return acc


@pytest.mark.parametrize(
    ("args", "error", "name"),
    [
        ((None, 3, 8), TypeError, "n"),
        ((0, 3, 8), ValueError, "n"),
        ((2, 1.5, 8), TypeError, "num_streams"),
        ((2, 0, 8), ValueError, "num_streams"),
        ((2, 1, True), TypeError, "capacity"),
        ((2, 1, -1), ValueError, "capacity"),
    ],
)
def test_constructor_rejects(args, error, name):
    with pytest.raises(error, match=name):
        NStepAccumulator(*args)


GOOD = {"slot": 6, "generation": 6, "stream": 1, "reward": 1.0, "discount": 0.5}


@pytest.mark.parametrize(
    ("change", "error", "name"),
    [
        ({"slot": -1}, ValueError, "slot"),
        ({"slot": 8}, ValueError, "slot"),
        ({"slot": 2}, ValueError, "slot"),  # busy: its transition was not evicted
        ({"slot": 1.0}, TypeError, "slot"),
        ({"slot": True}, TypeError, "slot"),
        ({"generation": -1}, ValueError, "generation"),
        ({"generation": "6"}, TypeError, "generation"),
        ({"stream": 2}, ValueError, "stream"),
        ({"stream": -1}, ValueError, "stream"),
        ({"stream": None}, TypeError, "stream"),
        ({"reward": float("nan")}, ValueError, "reward"),
        ({"reward": float("inf")}, ValueError, "reward"),
        ({"reward": 1e39}, ValueError, "reward"),
        ({"reward": "1"}, TypeError, "reward"),
        ({"reward": np.array([1.0])}, TypeError, "reward"),
        ({"discount": -0.1}, ValueError, "discount"),
        ({"discount": 1.01}, ValueError, "discount"),
        ({"discount": float("nan")}, ValueError, "discount"),
        ({"discount": None}, TypeError, "discount"),
        ({"episode_end": 1}, TypeError, "episode_end"),
        ({"continues": None}, TypeError, "continues"),
        ({"out": np.empty(2, np.int64)}, ValueError, "out"),
        ({"out": np.empty(3, np.int32)}, TypeError, "out"),
        ({"out": [0, 0, 0]}, TypeError, "out"),
    ],
)
def test_push_rejects_and_changes_nothing(change, error, name):
    acc = busy()
    before = acc.state_dict()
    kwargs = {**GOOD, **change}
    with pytest.raises(error, match=name):
        acc.push(**kwargs)
    assert states_equal(before, acc.state_dict())


def test_push_accepts_numpy_scalars():
    acc = busy()
    got = acc.push(
        np.int32(6), np.int64(6), np.int8(1), np.float32(1.0), np.float64(0.5), episode_end=np.True_
    )
    np.testing.assert_array_equal(got, [1, 3, 6])


MANY = {
    "slots": [5, 6],
    "generations": [5, 6],
    "streams": [1, 0],
    "rewards": [1.0, 2.0],
    "discounts": [0.5, 1.0],
}


@pytest.mark.parametrize(
    ("change", "error", "name"),
    [
        ({"slots": [5, 8]}, ValueError, "slots"),
        ({"slots": [5, 5]}, ValueError, "distinct"),
        ({"slots": [6, 1]}, ValueError, "slots"),  # busy (second entry): the first must not stay
        ({"slots": [5.0, 6.0]}, TypeError, "slots"),
        ({"slots": [[5, 6]]}, ValueError, "slots"),
        ({"generations": [5]}, ValueError, "generations"),
        ({"generations": [5, -6]}, ValueError, "generations"),
        ({"streams": [1, 2]}, ValueError, "streams"),
        ({"streams": [1.0, 0.0]}, TypeError, "streams"),
        ({"rewards": [1.0, float("nan")]}, ValueError, "rewards"),
        ({"rewards": [1.0, 1e300]}, ValueError, "rewards"),
        ({"rewards": ["a", "b"]}, TypeError, "rewards"),
        ({"rewards": [1.0]}, ValueError, "rewards"),
        ({"discounts": [0.5, 1.5]}, ValueError, "discounts"),
        ({"discounts": [-0.0, -1e-9]}, ValueError, "discounts"),
        ({"episode_end": [0, 1]}, TypeError, "episode_end"),
        ({"episode_end": [True]}, ValueError, "episode_end"),
        ({"continues": ["x", "y"]}, TypeError, "continues"),
        ({"out": np.empty(5, np.int64)}, ValueError, "out"),
    ],
)
def test_push_many_rejects_and_changes_nothing(change, error, name):
    acc = busy()
    before = acc.state_dict()
    with pytest.raises(error, match=name):
        acc.push_many(**{**MANY, **change})
    assert states_equal(before, acc.state_dict())
    acc.push_many(**MANY)  # and the good call still goes through afterwards


@pytest.mark.parametrize(
    ("slots", "generations", "error", "name"),
    [
        ([8], [0], ValueError, "slots"),
        ([-1], [0], ValueError, "slots"),
        ([0.5], [0], TypeError, "slots"),
        ([0, 1], [0], ValueError, "generations"),
        ([0], [0.0], TypeError, "generations"),
        # the fast path (int64 arrays): a bad entry after a good one leaves the good one alone
        (np.array([3, 8]), np.array([3, 0]), ValueError, "slots"),
        (np.array([3, -1]), np.array([3, 0]), ValueError, "slots"),
        (np.array([3, 4]), np.array([3]), ValueError, "generations"),
    ],
)
def test_evict_rejects_and_changes_nothing(slots, generations, error, name):
    acc = busy()
    before = acc.state_dict()
    with pytest.raises(error, match=name):
        acc.evict(slots, generations)
    assert states_equal(before, acc.state_dict())


def test_results_are_read_only():
    acc = busy()
    for array in (acc.reward, acc.discount, acc.last, acc.length):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1


# ------------------------------------------------------------------------------------------------
# checkpoints
# ------------------------------------------------------------------------------------------------


def churned(n: int = 3, num_streams: int = 3, capacity: int = 10, seed: int = 0, steps: int = 60):
    """An accumulator after random pushes and oldest-first evictions, and the generator's state."""
    rng = np.random.default_rng(seed)
    acc = NStepAccumulator(n, num_streams, capacity)
    head = churn(acc, rng, 0, steps)
    return acc, rng, head


def churn(acc: NStepAccumulator, rng: np.random.Generator, head: int, steps: int, log=None) -> int:
    capacity = acc.capacity
    for t in range(head, head + steps):
        if t >= capacity:
            acc.evict([t % capacity], [t - capacity])
        r, g, end, cont = random_transition(rng, 0.9)
        got = acc.push(
            t % capacity, t, int(rng.integers(acc.num_streams)), r, g, episode_end=end, continues=cont
        )
        if log is not None:
            log.append(got.tolist())
    return head + steps


def test_state_round_trip_continues_identically():
    a, rng, head = churned()
    state = a.state_dict()
    b = NStepAccumulator(3, 3, 10)
    b.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert states_equal(b.state_dict(), state)
    log_a, log_b = [], []
    churn(a, copy.deepcopy(rng), head, 200, log_a)
    churn(b, rng, head, 200, log_b)
    assert log_a == log_b and states_equal(a.state_dict(), b.state_dict())


def assert_consistent(acc: NStepAccumulator) -> None:
    """A loaded state survives a round trip and the accumulator keeps working: every tracked
    transition can be evicted, after which nothing is pending or complete."""
    state = acc.state_dict()
    fresh = NStepAccumulator(acc.n, acc.num_streams, acc.capacity)
    fresh.load_state_dict(state)
    generations = state["generation"]
    tracked = np.flatnonzero(generations >= 0)
    for s in range(acc.num_streams):
        assert acc.pending_slots(s).shape[0] < acc.n
    acc.evict(tracked, generations[tracked])
    assert acc.num_pending == 0 and acc.completed_slots().size == 0
    acc.push(0, 10**6, 0, 1.0, 0.5, episode_end=True)


VALID_STATE = churned()[0].state_dict()
FOREIGN = [
    churned(n=2)[0].state_dict(),
    churned(capacity=11)[0].state_dict(),
    churned(num_streams=2)[0].state_dict(),
    {**VALID_STATE, "version": 2},
    PrioritizedSampler(10).state_dict(),
]


@settings(max_examples=200)
@given(corrupted_states(VALID_STATE, foreign=FOREIGN))
def test_corrupted_states_raise_and_change_nothing(case):
    _, corrupted = case
    acc = churned()[0]
    check_load(acc, corrupted, assert_consistent)


def test_inconsistent_states_are_refused():
    """States of the right shapes and dtypes whose parts disagree."""
    acc = churned()[0]
    good = acc.state_dict()
    pending = next(s for s in range(3) if good["q_count"][s])
    j = int(good["q_first"][pending])
    slot = int(good["q_slot"][pending, j])
    done = int(np.flatnonzero(good["complete"])[0])
    edits = {
        "pending slot complete": ("complete", slot, True),
        "pending generation differs": ("generation", slot, 10**6),
        "complete slot untracked": ("generation", done, -1),
        "count too large": ("q_count", pending, 3),
        "length too large": ("length", done, 4),
        "last out of range": ("last", done, 10),
        "discount above one": ("discount", done, 1.5),
    }
    for what, (name, index, value) in edits.items():
        bad = copy.deepcopy(good)
        bad[name][index] = value
        with pytest.raises(ValueError, match="state_dict"):
            acc.load_state_dict(bad)
        assert states_equal(acc.state_dict(), good), what


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda acc: pickle.loads(pickle.dumps(acc))])
def test_copies_keep_their_result_views(clone: Any) -> None:
    """reward/discount/last/length are views of the packed arrays: a copy rebinds them to its own
    (a detached view would show the windows as they were when copied)."""
    twin = clone(NStepAccumulator(3, 1, 8))
    for t in range(3):
        twin.push(t, t, 0, 1.0, 0.5)
    assert (int(twin.last[0]), float(twin.reward[0]), int(twin.length[0])) == (2, 1.75, 3)
    assert float(twin.discount[0]) == 0.125 and not twin.reward.flags.writeable


def test_nbytes_counts_the_held_arrays_without_copying_them() -> None:
    """``ReplayMemory.nbytes`` used to copy the accumulator's whole state to count its bytes (and
    counted the state's layout, not the arrays held): ``nbytes`` sums the arrays themselves."""
    acc = NStepAccumulator(3, 2, 100)
    held = [acc._queue, acc._sums, acc._ring, acc._track, acc._result, acc._out]
    assert acc.nbytes == sum(a.nbytes for a in held)
