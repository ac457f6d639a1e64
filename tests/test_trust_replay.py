"""Untrusted checkpoints for ReplayMemory and PrioritizedReplay: rejected and unchanged, or loaded and
consistent (no later add can overwrite a live transition's frames)."""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prisample import PrioritizedSampler
from prisample.replay import PrioritizedReplay, ReplayMemory
from tests.state_fuzz import check_load, corrupted_states, states_equal
from tests.test_replay import FRAME, Recorder

CAPACITY = 10
EXTRAS = {"log_prob": ((), np.float32), "mask": ((2,), np.bool_)}


def with_extras(add: Callable[..., Any], seed: int) -> Callable[..., Any]:
    """``add`` with random values for :data:`EXTRAS` (for memories that declare them)."""
    rng = np.random.default_rng(seed)

    def adder(*args: Any, **kwargs: Any) -> Any:
        return add(*args, **kwargs, log_prob=np.float32(rng.normal()), mask=rng.random(2) < 0.5)

    return adder


def adder_of(memory: ReplayMemory, add: Callable[..., Any]) -> Callable[..., Any]:
    return with_extras(add, seed=len(memory)) if memory.extras else add


# -- memories to corrupt: frame_stack 1 and 4, several streams, wrapped around ------------------------
@functools.cache
def _built(name: str) -> ReplayMemory:
    if name == "float":  # float frames and float actions: the finiteness invariants
        memory = ReplayMemory(
            CAPACITY, (3,), obs_dtype=np.float32, frame_stack=2, action_shape=(2,), action_dtype=np.float32
        )
        rng = np.random.default_rng(0)
        obs = rng.normal(size=(2, 3)).astype(np.float32)
        for _ in range(23):
            next_obs = np.stack([obs[1], rng.normal(size=3).astype(np.float32)])
            end = bool(rng.random() < 0.2)
            memory.add(obs, rng.normal(size=2), float(rng.normal()), 0.99, next_obs, episode_end=end)
            obs = np.repeat(rng.normal(size=(1, 3)).astype(np.float32), 2, axis=0) if end else next_obs
        return memory
    if name == "nstep3":  # n-step windows and extras: the accumulator's state and extra columns
        memory = ReplayMemory(
            CAPACITY,
            FRAME,
            frame_stack=4,
            num_streams=2,
            n_step=3,
            extras=EXTRAS,
            frame_capacity=2 * 4 * 3 + 9,
        )
        recorder = Recorder(with_extras(memory.add, seed=0), 4, 2, seed=4, end_prob=0.2)
        for _ in range(37):
            recorder.step()
        return memory
    stack, streams, spare = {"stack1": (1, 2, None), "stack4": (4, 3, 8)}[name]
    # stack4: a pool 8 frames above the reserve, so old transitions are also evicted early
    frame_capacity = None if spare is None else 2 * stack * (streams + 1) + spare
    memory = ReplayMemory(
        CAPACITY, FRAME, frame_stack=stack, num_streams=streams, frame_capacity=frame_capacity
    )
    recorder = Recorder(memory.add, stack, streams, seed=stack, end_prob=0.2)
    for _ in range(37):
        recorder.step()
    return memory


def memory_copy(name: str) -> ReplayMemory:
    return copy.deepcopy(_built(name))


def _stack_shape(memory: ReplayMemory) -> tuple[int, ...]:
    return (memory.frame_stack, *memory.obs_shape) if memory.frame_stack > 1 else memory.obs_shape


def random_adds(memory: ReplayMemory, add: Callable[..., Any], seed: int, n: int = 6) -> None:
    """``n`` adds on random streams: half of them continue a stored ``next_obs`` (frames shared with
    live transitions), the others start anew; ``next_obs`` moves ``obs`` on by one new frame."""
    rng = np.random.default_rng(seed)
    shape, dtype = _stack_shape(memory), memory.obs_dtype

    def random(size: tuple[int, ...]) -> np.ndarray:
        if dtype.kind == "f":
            return rng.normal(size=size).astype(dtype)
        return rng.integers(0, 256, size=size).astype(dtype)

    add = adder_of(memory, add)
    for _ in range(n):
        live = np.flatnonzero(memory.drawable(np.arange(memory.capacity)))
        if live.shape[0] and rng.random() < 0.5:
            obs = memory.get([int(rng.choice(live))])["next_obs"][0].copy()
        else:
            obs = random(shape)
        frame = random(memory.obs_shape)
        next_obs = np.concatenate([obs[1:], frame[None]]) if memory.frame_stack > 1 else frame
        if memory.action_dtype.kind == "f":
            action: Any = rng.normal(size=memory.action_shape)
        else:
            action = int(rng.integers(4))
        stream = int(rng.integers(memory.num_streams))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # obs that does not continue its stream
            add(
                obs,
                action,
                float(rng.normal()),
                0.9,
                next_obs,
                episode_end=bool(rng.random() < 0.3),
                stream=stream,
            )


def check_free_rows_unused(memory: ReplayMemory) -> None:
    """Naive reference for ``check_valid``'s pool invariants: the rows the next adds will take are
    used by no live transition and no stream's last stack, and each row is counted once per use."""
    state = memory.state_dict(copy=False)
    uses = [0] * memory.frame_capacity
    for slot in range(memory.capacity):
        if memory.valid([slot])[0]:
            for row in [*state["obs_rows"][slot], *state["next_rows"][slot]]:
                uses[row] += 1
    for stream in range(memory.num_streams):
        if state["stream_live"][stream]:
            for row in [*state["stream_obs"][stream], *state["stream_next"][stream]]:
                uses[row] += 1
    free = state["free"][: state["nfree"]].tolist()
    assert len(set(free)) == len(free)
    assert sorted(free) == [row for row, n in enumerate(uses) if n == 0]
    assert state["refs"].tolist() == uses


def check_memory_consistent(memory: ReplayMemory, add: Callable[..., Any] | None = None) -> None:
    """Invariants hold (``check_valid`` and a naive recount), every live slot reads back, and
    later adds leave the frames of the transitions that stay live exactly as they were."""
    memory.check_valid()
    check_free_rows_unused(memory)
    assert np.flatnonzero(memory.valid(np.arange(memory.capacity))).shape[0] == len(memory)
    slots = np.flatnonzero(memory.drawable(np.arange(memory.capacity)))
    before = {key: value.copy() for key, value in memory.get(slots).items()}
    random_adds(memory, add or memory.add, seed=len(memory))
    memory.check_valid()
    check_free_rows_unused(memory)
    still = memory.drawable(slots) & (memory.generations(slots) == before["generation"])
    after = memory.get(slots[still])
    for key, value in before.items():
        assert after[key].tobytes() == value[still].tobytes(), key


# -- regression tests: each a corruption that today's load accepted -----------------------------------
def _used_row(memory: ReplayMemory) -> int:
    live = np.flatnonzero(memory.valid(np.arange(memory.capacity)))
    return int(memory.state_dict()["obs_rows"][live[0], 0])


def assert_rejected(memory: ReplayMemory, state: dict[str, Any], error: type[Exception], match: str) -> None:
    before = copy.deepcopy(memory.state_dict())
    with pytest.raises(error, match=match):
        memory.load_state_dict(state)
    assert states_equal(memory.state_dict(), before)


@pytest.mark.parametrize("name", ["stack1", "stack4"])
def test_free_list_row_in_use_is_rejected(name: str) -> None:
    """Bug: a free list naming a row that a live transition uses was loaded, and the next add wrote
    its new frame over that live transition's frame."""
    memory = memory_copy(name)
    state = memory.state_dict()
    state["free"][state["nfree"] - 1] = _used_row(memory)  # the next row handed out
    assert_rejected(
        ReplayMemory(
            CAPACITY,
            FRAME,
            frame_stack=memory.frame_stack,
            num_streams=memory.num_streams,
            frame_capacity=memory.frame_capacity,
        ),
        state,
        ValueError,
        "state_dict free should list only unused frame rows",
    )


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: s["refs"].fill(0), "state_dict refs should count the uses"),
        (lambda s: s["refs"].__setitem__(0, s["refs"][0] + 1), "state_dict refs"),
        (lambda s: s["free"].__setitem__(1, s["free"][0]), "state_dict free should list each unused row"),
        (lambda s: s["generation"].__setitem__(3, -1), "state_dict generation should be"),
        (lambda s: s["stream_live"].fill(False), "state_dict refs|state_dict stream_ended"),
        (lambda s: s["stream_ended"].fill(False) or s["stream_live"].fill(False), "state_dict stream_ended"),
        (lambda s: s.__setitem__("nfree", s["nfree"] - 1), "state_dict nfree should be the number"),
        (lambda s: s.__setitem__("tail", s["tail"] + 1), "state_dict generation|state_dict refs"),
        (lambda s: s["reward"].fill(np.inf), "state_dict reward should be finite"),
        (lambda s: s["discount"].fill(1.5), r"state_dict discount should lie in \[0, 1\]"),
    ],
)
def test_inconsistent_bookkeeping_is_rejected(edit: Callable[[dict[str, Any]], Any], match: str) -> None:
    """Bug: zeroed or off-by-one reference counts, a duplicated free row, a slot's generation, the
    streams' last stacks, the free count, the tail, non-finite rewards and discounts outside
    [0, 1] were all accepted; a wrong count lets an add reuse a live frame or leak one."""
    memory = memory_copy("stack4")
    state = memory.state_dict()
    edit(state)
    assert_rejected(memory, state, ValueError, match)


@pytest.mark.parametrize(
    ("key", "value", "error", "match"),
    [
        ("version", True, ValueError, r"version should be one of \(1, 2\)"),
        ("tail", 2.0, TypeError, "state_dict tail should be an integer"),
        ("nfree", 3.5, TypeError, "state_dict nfree should be an integer"),
        ("unexpected", 0, ValueError, "state_dict has the unexpected key 'unexpected'"),
        ("frames", [[0]], ValueError, "state_dict frames should be uint8"),
    ],
)
def test_malformed_values_are_rejected(key: str, value: Any, error: type[Exception], match: str) -> None:
    """Bug: ``True`` passed for version 1, floats were truncated to counters, unknown keys were
    ignored (a state of a newer format loaded with parts missing)."""
    memory = memory_copy("stack1")
    assert_rejected(memory, {**memory.state_dict(), key: value}, error, match)


def test_config_must_match_exactly() -> None:
    """Bug: ``True`` equalled a capacity of 1 and extra config entries were ignored."""
    memory = ReplayMemory(1, (2,), obs_dtype=np.float32)
    memory.add([0, 0], 0, 0.0, 1.0, [1, 1])
    state = memory.state_dict()
    assert_rejected(
        memory,
        {**state, "config": {**state["config"], "capacity": True}},
        ValueError,
        "config capacity should be 1",
    )
    assert_rejected(
        memory,
        {**state, "config": {**state["config"], "n_steps": 3}},
        ValueError,
        "config has the unexpected key 'n_steps'",
    )
    lists = {**state["config"], "obs_shape": [2], "action_shape": []}  # a JSON round trip
    memory.load_state_dict({**state, "config": lists})


def test_non_finite_float_frames_and_actions_in_a_state_are_rejected() -> None:
    """Bug: a state with NaN in a used float frame or a live float action loaded although add
    refuses both."""
    memory = memory_copy("float")
    state = memory.state_dict()
    frames = state["frames"].copy()
    frames[_used_row(memory), 1] = np.nan
    assert_rejected(memory, {**state, "frames": frames}, ValueError, "state_dict frames should be finite")
    action = state["action"].copy()
    action[np.flatnonzero(memory.valid(np.arange(CAPACITY)))[0]] = np.inf
    assert_rejected(memory, {**state, "action": action}, ValueError, "state_dict action should be finite")


def test_check_valid_holds_through_adds_and_reports_a_broken_count() -> None:
    memory = ReplayMemory(6, FRAME, frame_stack=4, num_streams=2, frame_capacity=2 * 4 * 3 + 5)
    recorder = Recorder(memory.add, 4, 2, seed=9, end_prob=0.3)
    for _ in range(40):
        recorder.step()
        memory.check_valid()
    memory.frame_pool._refs[_used_row(memory)] += 1
    with pytest.raises(ValueError, match=r"^refs should count"):
        memory.check_valid()


# -- PrioritizedReplay ---------------------------------------------------------------------------------
@functools.cache
def _built_replay() -> PrioritizedReplay:
    replay = PrioritizedReplay(
        CAPACITY, FRAME, frame_stack=4, num_streams=2, frame_capacity=2 * 4 * 3 + 9, seed=0
    )
    recorder = Recorder(replay.add, 4, 2, seed=1, end_prob=0.2)
    rng = np.random.default_rng(2)
    for t in range(37):
        recorder.step()
        if t % 3 == 2:
            _, draw = replay.sample(4)
            replay.update_priorities(draw.indices, rng.random(4) * 3)
    return replay


def replay_copy() -> PrioritizedReplay:
    return copy.deepcopy(_built_replay())


def full_state(replay: PrioritizedReplay) -> dict[str, Any]:
    return copy.deepcopy(replay.state_dict(include_memory=True))


def assert_replay_rejected(replay: PrioritizedReplay, state: Any, match: str) -> None:
    before = full_state(replay)
    with pytest.raises((ValueError, TypeError), match=match):
        replay.load_state_dict(state)
    assert states_equal(full_state(replay), before)


def test_replay_corrupted_memory_part_leaves_the_sampler_unchanged() -> None:
    """Bug: the memory part was checked partly, so a corrupted free list passed, the sampler was
    loaded and the corrupted memory too."""
    replay = replay_copy()
    fresh = PrioritizedReplay(
        CAPACITY, FRAME, frame_stack=4, num_streams=2, frame_capacity=2 * 4 * 3 + 9, seed=5
    )
    state = full_state(replay)
    state["memory"]["free"][state["memory"]["nfree"] - 1] = _used_row(replay.memory)
    assert_replay_rejected(fresh, state, "state_dict free")


def test_replay_state_without_memory_checks_it_is_the_memory_saved() -> None:
    """Bug: without the memory in the state only the live slots were compared, so a sampler and
    draw record saved at another point of the memory (or with another memory) loaded whenever
    both were full."""
    replay = replay_copy()
    state = replay.state_dict()
    blank = np.zeros((4, *FRAME), np.uint8)
    with pytest.warns(RuntimeWarning, match="does not continue"):
        replay.add(blank, 0, 0.0, 1.0, blank)
    assert replay.memory.valid(np.arange(CAPACITY)).all()  # the live slots alone cannot tell
    assert_replay_rejected(replay, state, "state_dict memory_head should be 38")
    replay.load_state_dict(replay.state_dict())


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("dropped_updates", -3, "dropped_updates should be an integer >= 0"),
        ("dropped_updates", 1.5, "dropped_updates should be an integer >= 0"),
        ("version", True, "version should be one of"),
        ("unexpected", 1, "unexpected key"),
        ("sampler", [1.0], "sampler should be a dict"),
    ],
)
def test_replay_malformed_values_are_rejected(key: str, value: Any, match: str) -> None:
    """Bug: a negative or fractional drop count and unknown keys were accepted."""
    replay = replay_copy()
    assert_replay_rejected(replay, {**full_state(replay), key: value}, match)


def test_replay_draw_record_must_name_transitions_the_slot_held() -> None:
    """Bug: any int64 draw record loaded; a record newer than the slot's transition or of another
    slot makes ``update_priorities`` without ``generations=`` drop or misapply updates."""
    replay = replay_copy()
    state = full_state(replay)
    for bad in (state["memory"]["head"] + CAPACITY, 1 + int(state["memory"]["generation"][0]), -2):
        drawn = state["drawn"].copy()
        drawn[0] = bad
        assert_replay_rejected(replay, {**state, "drawn": drawn}, r"state_dict drawn should hold")


def test_replay_sampler_slots_must_match_live_memory() -> None:
    replay = replay_copy()
    state = full_state(replay)
    state["sampler"]["priorities"][0] = np.nan
    assert_replay_rejected(
        replay, state, "sampler priorities should be filled exactly in the memory's live slots"
    )


# -- hypothesis: any corruption is rejected and changes nothing, or loads consistently ----------------
def _foreign_states() -> list[Any]:
    other = ReplayMemory(CAPACITY, FRAME, frame_stack=2)
    other.add(np.zeros((2, *FRAME), np.uint8), 0, 0.0, 1.0, np.zeros((2, *FRAME), np.uint8))
    return [other.state_dict(), PrioritizedSampler(CAPACITY, size=3).state_dict()]


@settings(max_examples=90)
@given(data=st.data())
@pytest.mark.parametrize("name", ["stack1", "stack4", "float", "nstep3"])
def test_corrupted_memory_states(name: str, data: st.DataObject) -> None:
    memory = memory_copy(name)
    twin = copy.deepcopy(memory)
    state = memory.state_dict()
    foreign = [*_foreign_states(), _built("stack1" if name != "stack1" else "stack4").state_dict()]
    _, corrupted = data.draw(corrupted_states(state, foreign=foreign))
    if not check_load(memory, corrupted, check_memory_consistent):
        random_adds(memory, memory.add, seed=7)  # rejected: goes on exactly as an untouched copy
        random_adds(twin, twin.add, seed=7)
        assert states_equal(memory.state_dict(), twin.state_dict())


def check_replay_consistent(replay: PrioritizedReplay) -> None:
    live = replay.memory.valid(np.arange(CAPACITY))
    np.testing.assert_array_equal(~np.isnan(replay.sampler.priorities), live)
    check_memory_consistent(replay.memory, replay.add)
    batch, draw = replay.sample(4)
    assert replay.memory.valid(draw.indices).all()
    replay.update_priorities(draw.indices, np.ones(4), generations=batch["generation"])
    np.testing.assert_array_equal(
        ~np.isnan(replay.sampler.priorities), replay.memory.valid(np.arange(CAPACITY))
    )


@st.composite
def _flipped_slot(draw: st.DrawFn, state: dict[str, Any]) -> tuple[str, Any]:
    """A sampler whose filled slots differ from the memory's live ones by one slot."""
    out = copy.deepcopy(state)
    slot = draw(st.integers(0, CAPACITY - 1))
    priorities = out["sampler"]["priorities"]
    priorities[slot] = 1.0 if np.isnan(priorities[slot]) else np.nan
    return f"flipped slot {slot}", out


@settings(max_examples=120)
@given(data=st.data())
def test_corrupted_prioritized_replay_states(data: st.DataObject) -> None:
    """Any part: the memory, the sampler (whose load is atomic), the draw record, the counters, and
    the agreement of the sampler's filled slots with the memory's live ones."""
    replay = replay_copy()
    twin = copy.deepcopy(replay)
    state = full_state(replay)
    foreign = [*_foreign_states(), replay.state_dict(), replay.memory.state_dict()]
    _, corrupted = data.draw(st.one_of(corrupted_states(state, foreign=foreign), _flipped_slot(state)))
    if not check_load(replay, corrupted, check_replay_consistent, snapshot=full_state):
        for r in (replay, twin):
            random_adds(r.memory, r.add, seed=7)
            _, draw = r.sample(4)
            r.update_priorities(draw.indices, np.arange(4.0))
        assert states_equal(full_state(replay), full_state(twin))
