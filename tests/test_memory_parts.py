"""The parts a ``ReplayMemory`` is composed of, each tested alone: the add front-end
(``TransitionWrites``, an abstract base with one abstract ``write``), the ring of slots
(``Ring``), the checkpoint (``MemoryCheckpoint`` over a memory), the device reads
(``DeviceReads`` on CPU tensors), and the observation store passed in (``store=``) instead of
built from the arguments."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import torch

from prisample.replay import ReplayMemory
from prisample.replay.checkpoint import MemoryCheckpoint
from prisample.replay.device_reads import DeviceReads
from prisample.replay.nstep import NStepAccumulator
from prisample.replay.ring import Ring
from prisample.replay.stores import DictStore, FrameStore, make_store
from prisample.replay.writes import AddRequest, Inserted, TransitionWrites, VectorAdd, WriteRequest

ARGS: dict[str, Any] = {
    "obs_dtype": np.uint8,
    "frame_stack": 4,
    "num_streams": 2,
    "extras": {"lp": ((), np.float32)},
}


def _fill(memory: ReplayMemory, steps: int = 30, seed: int = 0) -> None:
    """``steps`` adds on two interleaved streams, episodes ending now and then (the ring wraps)."""
    rng = np.random.default_rng(seed)
    last: dict[int, Any] = {}
    for t in range(steps):
        s = t % 2
        obs = last.get(s, rng.integers(0, 255, (4, 3, 3), dtype=np.uint8))
        nxt = np.concatenate([obs[1:], rng.integers(0, 255, (1, 3, 3), dtype=np.uint8)])
        end = t % 9 == 8 or t >= steps - 2  # each stream's last add ends its episode
        memory.add(obs, t % 3, float(t), 0.9, nxt, stream=s, episode_end=end, lp=-float(t))
        last[s] = nxt
        if end:
            del last[s]


def _host(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _equal(x: Any, y: Any) -> bool:
    x, y = _host(x), _host(y)
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_equal(x[k], y[k]) for k in x)
    return bool(x.dtype == y.dtype and np.array_equal(x, y))


def _same_batch(a: Any, b: Any) -> bool:
    fields = ("obs", "action", "reward", "discount", "next_obs", "generation", "extras")
    return all(_equal(getattr(a, f), getattr(b, f)) for f in fields)


def _same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray):
            if not (isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)):
                return False
        elif x != y:
            return False
    return True


# -- the add front-end ---------------------------------------------------------------------------


class _Recorder(TransitionWrites):
    """A front-end whose one write records the requests."""

    def __init__(self) -> None:
        self.requests: list[WriteRequest] = []

    def write(self, request: WriteRequest) -> Inserted:
        self.requests.append(request)
        n = 1 if isinstance(request, AddRequest) and request.single else 2
        slots = np.arange(n, dtype=np.int64)
        return Inserted(slots, slots[:0], np.zeros(n, np.int64), slots)


def test_the_front_end_needs_its_one_write() -> None:
    with pytest.raises(TypeError, match="abstract"):
        TransitionWrites()  # type: ignore[abstract]

    class NoWrite(TransitionWrites):
        pass

    with pytest.raises(TypeError, match="write"):
        NoWrite()  # type: ignore[abstract]


def test_every_add_is_one_request_to_write() -> None:
    front = _Recorder()
    obs = np.zeros(3)
    assert front.add(obs, 1, 0.5, 0.9, obs, stream=1, lp=0.1) == 0
    assert front.add_many(np.zeros((2, 3)), [0, 1], [0.0, 1.0], [1.0, 1.0], np.zeros((2, 3))).tolist() == [
        0,
        1,
    ]
    inserted = front.insert(obs, 2, 0.5, 0.9, obs, True, 3)
    assert isinstance(inserted, Inserted)
    front.add_vector_step(
        np.zeros((2, 3)), [0, 1], [0.0, 1.0], [False] * 2, [False] * 2, np.zeros((2, 3)), {}
    )
    kinds = [type(r).__name__ for r in front.requests]
    assert kinds == ["AddRequest", "AddRequest", "AddRequest", "VectorAdd"]
    one, many, ins, vec = front.requests
    assert isinstance(one, AddRequest) and one.single and one.streams == 1 and one.extras == {"lp": 0.1}
    assert isinstance(many, AddRequest) and not many.single and many.priorities is None
    assert isinstance(ins, AddRequest) and ins.episode_end is True and ins.streams == 3
    assert isinstance(vec, VectorAdd) and vec.gamma == 0.99


# -- the ring ------------------------------------------------------------------------------------


def _ring(capacity: int = 4) -> Ring:
    spec: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {
        "action": ((), np.dtype(np.int64)),
        "reward": ((), np.dtype(np.float32)),
        "discount": ((), np.dtype(np.float32)),
        "generation": ((), np.dtype(np.int64)),
        "extra.lp": ((2,), np.dtype(np.float32)),
    }
    return Ring(capacity, spec, 3)


def test_ring_columns_are_its_state_arrays_and_commit_assigns_them() -> None:
    ring = _ring()
    assert list(ring.state_arrays()) == [*Ring.STATE_ARRAYS, "extra.lp"]
    assert ring.state_arrays()["extra.lp"] is ring.extra["lp"] is ring.columns.host["extra.lp"]
    assert len(ring) == 0 and ring.generation.tolist() == [-1] * 4 and ring.stream_ended.all()
    other = _ring()
    arrays = {name: a.copy() for name, a in ring.state_arrays().items()}
    arrays["generation"][:] = [4, 5, 2, 3]
    arrays["reward"][:] = [1, 2, 3, 4]
    arrays["stream_ended"][1] = False
    other.commit(arrays, 3, 6)
    assert (other.tail, other.head, len(other)) == (3, 6, 3)
    assert other.generation.tolist() == [4, 5, 2, 3] and other.reward.tolist() == [1, 2, 3, 4]
    assert other.stream_ended.tolist() == [True, False, True]
    assert other.live(np.arange(4, dtype=np.int64)).tolist() == [True, True, False, True]
    assert ring.generation.tolist() == [-1] * 4  # the arrays were copied in, not shared


def test_ring_eviction_buffer_grows_for_a_long_write() -> None:
    ring = _ring()
    assert ring.evicted_room(1).shape[0] == 5
    assert ring.evicted_room(10).shape[0] == 14


def test_a_pickled_ring_keeps_its_columns_views() -> None:
    ring = _ring()
    ring.reward[2] = 7.0
    copy = pickle.loads(pickle.dumps(ring))
    copy.reward[1] = 5.0
    assert copy.columns.host["reward"].tolist() == [0.0, 5.0, 7.0, 0.0]


# -- the checkpoint ------------------------------------------------------------------------------


def test_the_checkpoint_part_round_trips_a_memory() -> None:
    memory = ReplayMemory(12, (3, 3), **ARGS)
    _fill(memory)
    saved = MemoryCheckpoint(memory).state_dict()
    assert _same_state(saved, memory.state_dict())
    fresh = ReplayMemory(12, (3, 3), **ARGS)
    part = MemoryCheckpoint(fresh)
    part.commit_state(part.check_state(saved))
    part.check_valid()
    assert (len(fresh), fresh.num_added, fresh.num_evicted) == (len(memory), 30, 18)
    assert _same_state(part.state_dict(), saved)
    slots = np.flatnonzero(memory.valid(np.arange(12)))
    assert _same_batch(fresh.get(slots), memory.get(slots))
    _fill(memory, 7, seed=1)  # both continue alike
    _fill(fresh, 7, seed=1)
    assert _same_state(fresh.state_dict(), memory.state_dict())


def test_the_checkpoint_part_refuses_a_bad_state_and_changes_nothing() -> None:
    memory = ReplayMemory(12, (3, 3), **ARGS)
    _fill(memory)
    state = memory.state_dict()
    target = ReplayMemory(12, (3, 3), **ARGS)
    _fill(target, 5, seed=2)
    before = target.state_dict()
    part = MemoryCheckpoint(target)
    bad = {**state, "head": state["head"] + 1}
    with pytest.raises(ValueError, match="state_dict tail should lie in"):
        part.load_state_dict(bad)
    assert _same_state(target.state_dict(), before)
    with pytest.raises(ValueError, match="capacity"):
        MemoryCheckpoint(ReplayMemory(10, (3, 3), **ARGS)).check_state(state)


def test_the_checkpoint_part_gives_a_memory_of_inferred_dtype_the_states_store() -> None:
    memory = ReplayMemory(12, (3, 3), **ARGS)
    _fill(memory)
    inferred = ReplayMemory(12, (3, 3), **{**ARGS, "obs_dtype": None})
    assert inferred.frame_pool is None
    MemoryCheckpoint(inferred).load_state_dict(memory.state_dict())
    assert inferred.obs_dtype == np.uint8 and inferred.store.allocated
    assert _same_state(inferred.state_dict(), memory.state_dict())


# -- the device reads ----------------------------------------------------------------------------


def test_device_reads_gather_what_the_host_reads() -> None:
    memory = ReplayMemory(12, (3, 3), **ARGS, device="cpu")
    _fill(memory)
    part = DeviceReads(torch.device("cpu"), memory.ring, memory.store, None)
    slots = np.flatnonzero(memory.valid(np.arange(12)))
    got = part.read(torch.from_numpy(slots), torch.ones(slots.shape[0]))
    assert _same_batch(got, memory.get(slots))
    assert isinstance(got.obs, torch.Tensor) and got.weights is not None


def test_device_reads_stage_the_tail_and_mark_evicted_slots() -> None:
    memory = ReplayMemory(12, (3, 3), **ARGS, device="cpu")
    _fill(memory, 10)
    part = DeviceReads(torch.device("cpu"), memory.ring, memory.store, None)
    every = torch.arange(12)
    assert part.live_generations(every).tolist() == memory.live_generations(np.arange(12)).tolist()
    assert int(part.tail_on_device) == 0
    _fill(memory, 20, seed=3)  # 30 adds into 12 slots: the tail moves on to 18
    assert int(part.tail_on_device) == 0  # sent only when staged
    part.stage()
    assert int(part.tail_on_device) == memory.num_evicted == 18
    assert part.live_generations(every).tolist() == memory.live_generations(np.arange(12)).tolist()


def test_device_reads_mirror_the_windows_and_resend_them_on_adopt() -> None:
    memory = ReplayMemory(12, (3, 3), **ARGS, n_step=3, device="cpu")
    _fill(memory)
    nstep = NStepAccumulator(3, 2, 12)
    nstep.load_state_dict(memory.state_dict()["nstep"])
    part = DeviceReads(torch.device("cpu"), memory.ring, memory.store, nstep)
    assert part.windows is not None
    slots = np.flatnonzero(memory.drawable(np.arange(12)))
    stale = part.read(torch.from_numpy(slots))
    assert not np.array_equal(_host(stale.reward), memory.get(slots).reward)  # nothing sent yet
    part.adopt(memory.store, nstep)
    assert _same_batch(part.read(torch.from_numpy(slots)), memory.get(slots))


def test_never_written_slots_hold_no_live_transition_on_the_device() -> None:
    """The bug: the device mirror of the generations started as zeros while the host's were -1,
    and a sync sends only the rows written since, so a never-written slot read as transition 0
    (live) on the device."""
    memory = ReplayMemory(4, (2,), obs_dtype=np.float32, device="cpu")
    memory.add(np.zeros(2), 0, 0.0, 1.0, np.ones(2))
    assert memory.live_generations_on_device(torch.arange(4)).tolist() == [0, -1, -1, -1]


def test_a_host_memory_has_no_device_reads() -> None:
    memory = ReplayMemory(4, (2,))
    with pytest.raises(ValueError, match="live_generations_on_device needs a device"):
        memory.live_generations_on_device(torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="send_to_device needs a device"):
        memory.send_to_device([np.zeros(1, np.int64)], [])


# -- the store passed in -------------------------------------------------------------------------


def _frame_store(**changes: Any) -> FrameStore:
    args: dict[str, Any] = {
        "capacity": 12,
        "frame_shape": (3, 3),
        "frame_stack": 4,
        "num_streams": 2,
        "frame_capacity": None,
        "device": None,
    }
    args.update(changes)
    return FrameStore(**args)


@pytest.mark.parametrize("device", [None, "cpu"])
def test_a_memory_given_its_store_behaves_like_one_that_built_it(device: str | None) -> None:
    built = ReplayMemory(12, (3, 3), **ARGS, device=device)
    store = _frame_store(device=None if device is None else torch.device(device))
    given = ReplayMemory(12, (3, 3), **ARGS, device=device, store=store)
    assert given.store is store and store.allocated
    for memory in (built, given):
        _fill(memory)
    assert _same_state(given.state_dict(), built.state_dict())
    slots = np.flatnonzero(built.valid(np.arange(12)))
    assert _same_batch(given.get(slots), built.get(slots))
    given.check_valid()


def test_a_memory_given_a_dict_store_behaves_like_one_that_built_it() -> None:
    shape = {"x": (3,), "y": (2,)}
    built = ReplayMemory(6, shape, obs_dtype=np.float32)
    given = ReplayMemory(6, shape, obs_dtype=np.float32, store=make_store(
        6, shape, frame_stack=1, num_streams=1, frame_capacity=None, device=None
    ))  # fmt: skip
    rng = np.random.default_rng(0)
    for t in range(9):
        obs, nxt = ({k: rng.normal(size=s) for k, s in shape.items()} for _ in range(2))
        for memory in (built, given):
            memory.add(obs, t, 1.0, 0.9, nxt, episode_end=True)
    assert _same_state(given.state_dict(), built.state_dict())
    assert _same_batch(given.get([0, 3]), built.get([0, 3]))


def test_a_custom_store_subclass_is_used() -> None:
    calls: list[str] = []

    class Counting(FrameStore):
        def write(self, *args: Any) -> Any:
            calls.append("write")
            return super().write(*args)

        def take(self, *args: Any) -> Any:
            calls.append("take")
            return super().take(*args)

    built = ReplayMemory(12, (3, 3), **ARGS)
    store = Counting(12, (3, 3), 4, 2, None, None)
    given = ReplayMemory(12, (3, 3), **ARGS, store=store)
    for memory in (built, given):
        _fill(memory)
    assert calls.count("write") == 30  # every add went through the subclass
    assert _same_batch(given.get([1, 2]), built.get([1, 2]))
    assert calls[-1] == "take"


@pytest.mark.parametrize(
    ("store", "error", "message"),
    [
        (object(), TypeError, "store should be an ObservationStore, but got object"),
        (DictStore(12, {"x": (3, 3)}, 2, None), TypeError, "store should be a FrameStore"),
        (_frame_store(capacity=10), ValueError, "store should have capacity=12 .*capacity=10"),
        (_frame_store(frame_shape=(3, 4)), ValueError, r"store should have obs_shape=\(3, 3\)"),
        (_frame_store(frame_stack=2), ValueError, "store should have frame_stack=4"),
        (_frame_store(num_streams=1), ValueError, "store should have num_streams=2"),
        (_frame_store(frame_capacity=100), ValueError, "store should have frame_capacity=None"),
        (_frame_store(device=torch.device("cpu")), ValueError, "store should have device=None"),
    ],
)
def test_a_mismatched_store_is_refused_by_name(store: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        ReplayMemory(12, (3, 3), **ARGS, store=store)
    if isinstance(store, FrameStore):
        assert not store.allocated  # nothing built


def test_an_allocated_or_mismatched_dict_store_is_refused() -> None:
    used = _frame_store()
    ReplayMemory(12, (3, 3), **ARGS, store=used)
    with pytest.raises(ValueError, match=r"store should be fresh .*obs_dtype=dtype\('uint8'\)"):
        ReplayMemory(12, (3, 3), **ARGS, store=used)
    with pytest.raises(TypeError, match="store should be a DictStore"):
        ReplayMemory(12, {"x": (3,)}, store=_frame_store())
    with pytest.raises(ValueError, match=r"store should have obs_shape=\{'x': \(3,\)\}"):
        ReplayMemory(12, {"x": (3,)}, store=DictStore(12, {"x": (4,)}, 1, None))
    with pytest.raises(ValueError, match="frame_stack should be 1 for dict observations"):
        ReplayMemory(12, {"x": (3,)}, frame_stack=2, store=DictStore(12, {"x": (3,)}, 1, None))
