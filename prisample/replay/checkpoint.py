"""The checkpoint part of a replay memory: its state as numpy arrays and plain values, checked
completely before anything is assigned.

:class:`MemoryCheckpoint` is the part a :class:`~prisample.replay.memory.ReplayMemory` holds for
its ``state_dict``, ``load_state_dict`` (a state is checked by :meth:`MemoryCheckpoint.check_state`
into a :class:`CheckedState`, then committed, which cannot fail) and ``check_valid``; the
invariants a state must keep are :func:`check_ring_invariants`'s.  A state holds the ring's arrays
(the store's row tables, actions, rewards, discounts, generations, stream ends, extras:
:class:`~prisample.replay.ring.Ring`), the observation store's arrays
(:mod:`~prisample.replay.stores`), the counters, the n-step accumulator's state and the
vector-step converter's.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from prisample.replay._checks import as_dtype, as_state_array, check_keys, same_config_value
from prisample.replay.nstep import NStepAccumulator
from prisample.replay.stores import ObservationStore
from prisample.replay.vector_env import VectorStepConverter

if TYPE_CHECKING:
    from prisample.replay.memory import ReplayMemory

__all__ = ["STATE_VERSION", "CheckedState", "MemoryCheckpoint", "check_ring_invariants"]

IntArray = npt.NDArray[np.int64]

# ReplayMemory's state; 2 adds n_step, extras, dict observations, the inferred obs_dtype (None
# until the first add) and the vector-step converter.  Version 1 states still load.
STATE_VERSION = 2
_LOADABLE_VERSIONS = (1, 2)
_V1_CONFIG = (
    "capacity",
    "obs_shape",
    "obs_dtype",
    "frame_stack",
    "action_shape",
    "action_dtype",
    "num_streams",
    "frame_capacity",
)


@dataclass(frozen=True)
class CheckedState:
    """A memory state that :meth:`MemoryCheckpoint.check_state` accepted, ready to commit."""

    arrays: dict[str, npt.NDArray[Any]]
    counters: dict[str, int]
    store: ObservationStore
    nstep: NStepAccumulator | None
    vector: tuple[VectorStepConverter, Any] | None

    @property
    def head(self) -> int:
        """Transitions added (:attr:`ReplayMemory.num_added`)."""
        return self.counters["head"]

    @property
    def tail(self) -> int:
        """Transitions evicted (:attr:`ReplayMemory.num_evicted`)."""
        return self.counters["tail"]

    @property
    def generation(self) -> IntArray:
        """Per slot, the number of the transition it holds (-1: never written)."""
        return self.arrays["generation"]

    @property
    def drawable(self) -> npt.NDArray[np.bool_]:
        """Per slot, whether a sampler over the memory holds it (live, window complete)."""
        live: npt.NDArray[np.bool_] = self.generation >= self.tail
        if self.nstep is not None:
            live = live & self.nstep.is_complete(np.arange(live.shape[0]))
        return live


def _state_dtype(value: Any, declared: np.dtype[Any] | None, key: str) -> np.dtype[Any]:
    """A state's observation dtype string, checked against the declared one."""
    if type(value) is not str:
        raise ValueError(f"state_dict config {key} should be a dtype string, but got {value!r}")
    try:
        dtype = as_dtype(value, f"state_dict config {key}")
    except TypeError as error:
        raise ValueError(str(error)) from None
    if declared is not None and dtype != declared:
        raise ValueError(f"state_dict config {key} should be {declared.str!r}, but got {value!r}")
    return dtype


class MemoryCheckpoint:
    """The checkpoint of ``memory``: its ``state_dict``, ``load_state_dict`` (a state is checked by
    :meth:`check_state` into a :class:`CheckedState`, then committed by :meth:`commit_state`,
    which cannot fail) and ``check_valid``, over the memory's parts (its
    :class:`~prisample.replay.ring.Ring`, observation store, n-step accumulator and vector-step
    converter) and its configuration.  A commit writes the ring's and the store's arrays in place
    and hands the memory the parts a state may replace (the store, the accumulator, the
    converter)."""

    def __init__(self, memory: ReplayMemory) -> None:
        self.memory = memory

    def _arrays(self, store: ObservationStore) -> dict[str, npt.NDArray[Any]]:
        """The ring's state arrays with ``store``'s row tables first, as states have them."""
        return {**store.table_arrays(), **self.memory.ring.state_arrays()}

    def _state_arrays(self, *, frames: bool = True) -> dict[str, npt.NDArray[Any]]:
        """The live arrays by state name (the frame pool's frames a host copy on a device, left
        out when ``frames=False``)."""
        store = self.memory.store
        arrays = self._arrays(store)
        if store.allocated:
            arrays.update(store.state_arrays(frames=frames))
        return arrays

    def _state_spec(self, store: ObservationStore) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """Dtype and shape of each state array with ``store`` (no copy of frames on a device)."""
        spec = {name: (a.dtype, a.shape) for name, a in self._arrays(store).items()}
        if store.allocated:
            spec.update(store.state_spec())
        return spec

    def _counters(self) -> dict[str, int]:
        ring = self.memory.ring
        return {"tail": ring.tail, "head": ring.head, **self.memory.store.counters()}

    def state_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """:meth:`ReplayMemory.state_dict <prisample.replay.memory.ReplayMemory.state_dict>`."""
        memory = self.memory
        arrays = {name: a.copy() if copy else a for name, a in self._state_arrays().items()}
        vector = None
        if memory.vector_converter is not None:
            vector = {
                "configured": memory._vector_configured,
                "converter": memory.vector_converter.state_dict(),
            }
        nstep = memory._nstep
        return {
            "version": STATE_VERSION,
            "config": self._config(),
            **arrays,
            **self._counters(),
            "nstep": None if nstep is None else nstep.state_dict(),
            "vector": vector,
        }

    def _config(self) -> dict[str, Any]:
        memory = self.memory
        dtype = memory.obs_dtype
        return {
            "capacity": memory.capacity,
            "obs_shape": memory.obs_shape,
            "obs_dtype": None
            if dtype is None
            else {k: d.str for k, d in dtype.items()}
            if isinstance(dtype, dict)
            else dtype.str,
            "frame_stack": memory.frame_stack,
            "action_shape": memory.action_shape,
            "action_dtype": memory.action_dtype.str,
            "num_streams": memory.num_streams,
            "frame_capacity": memory.frame_capacity,
            "n_step": memory.n_step,
            "extras": {name: (shape, dtype.str) for name, (shape, dtype) in memory.extras.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """:meth:`ReplayMemory.load_state_dict <prisample.replay.memory.ReplayMemory.load_state_dict>`:
        :meth:`check_state`, then :meth:`commit_state`."""
        self.commit_state(self.check_state(state))

    def commit_state(self, checked: CheckedState) -> None:
        """Assign a state that :meth:`check_state` accepted (cannot fail: dtypes and shapes match):
        the store's row tables and the ring's arrays and counters in place, the store's own
        arrays, then the memory takes the state's store, n-step accumulator and converter."""
        store, arrays, counters = checked.store, checked.arrays, checked.counters
        for name, target in store.table_arrays().items():
            target[...] = arrays[name]
        self.memory.ring.commit(arrays, counters["tail"], counters["head"])
        if store.allocated:
            store.commit_state(arrays, counters)
        self.memory._adopt(store, checked.nstep, checked.vector)

    def _upgraded(self, state: dict[str, Any]) -> dict[str, Any]:
        """A version 1 state (array observations, no n-step, no extras) in version 2's form."""
        config = state.get("config")
        if not isinstance(config, dict):
            raise TypeError(f"state_dict config should be a dict, but got {type(config).__name__}")
        check_keys(config, set(_V1_CONFIG), "state_dict config")
        config = {**config, "n_step": 1, "extras": {}}
        for key in ("nstep", "vector"):
            if key in state:
                raise ValueError(f"state_dict has the unexpected key {key!r}")
        return {**state, "version": STATE_VERSION, "config": config, "nstep": None, "vector": None}

    def _checked_store(self, config: dict[str, Any]) -> ObservationStore:
        """The observation store a state's config asks for: this memory's, a new one (a memory
        built with ``obs_dtype=None`` takes the state's dtype), or a new unallocated one (nothing
        added yet)."""
        memory = self.memory
        mine, keys = memory.store, memory.obs_keys
        value, declared = config["obs_dtype"], memory.spec.declared
        if value is None:
            if config["frame_capacity"] is not None:
                raise ValueError("state_dict config frame_capacity should be None while obs_dtype is None")
            if isinstance(declared, np.dtype) or (
                isinstance(declared, dict) and None not in declared.values()
            ):
                raise ValueError(
                    f"state_dict config obs_dtype should be {self._config()['obs_dtype']!r}, but got None"
                )
            return mine.fresh(None, 0)
        dtype: Any
        if keys is None:
            dtype = _state_dtype(value, declared if isinstance(declared, np.dtype) else None, "obs_dtype")
        else:
            assert isinstance(declared, dict)
            if not isinstance(value, dict) or set(value) != set(keys):
                raise ValueError(
                    f"state_dict config obs_dtype should be a dict with keys {list(keys)}, but got {value!r}"
                )
            dtype = {k: _state_dtype(value[k], declared[k], f"obs_dtype[{k!r}]") for k in keys}
        if mine.allocated and self._same_dtype(dtype):
            store = mine
        else:
            capacity = mine.frame_capacity_for(dtype)
            if not same_config_value(config["frame_capacity"], capacity):
                raise ValueError(
                    f"state_dict config frame_capacity should be {capacity!r}, "
                    f"but got {config['frame_capacity']!r}"
                )
            store = mine.fresh(dtype, memory._ring_nbytes())
        if not same_config_value(config["frame_capacity"], store.frame_capacity):
            raise ValueError(
                f"state_dict config frame_capacity should be {store.frame_capacity!r}, "
                f"but got {config['frame_capacity']!r}"
            )
        return store

    def _same_dtype(self, dtype: Any) -> bool:
        mine = self.memory.obs_dtype
        if isinstance(mine, dict):
            return isinstance(dtype, dict) and all(mine[k] == dtype[k] for k in mine)
        return bool(mine == dtype)

    def check_state(self, state: Any) -> CheckedState:
        """The state's arrays and counters, after checking everything :meth:`load_state_dict`
        will assign; raises ``ValueError``/``TypeError`` naming the key, changes nothing."""
        memory = self.memory
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        version = state.get("version")
        if type(version) is not int or version not in _LOADABLE_VERSIONS:
            raise ValueError(
                f"state_dict version should be one of {_LOADABLE_VERSIONS}, but got version={version!r}"
            )
        if version == 1:
            state = self._upgraded(state)
        config = state.get("config")
        if not isinstance(config, dict):
            raise TypeError(f"state_dict config should be a dict, but got {type(config).__name__}")
        mine = self._config()
        check_keys(config, set(mine), "state_dict config")
        for key, value in mine.items():
            if key in ("obs_dtype", "frame_capacity"):
                continue
            if key == "extras":
                same = (
                    isinstance(config[key], dict)
                    and config[key].keys() == value.keys()
                    and all(
                        isinstance(config[key][n], (tuple, list))
                        and len(config[key][n]) == 2
                        and same_config_value(config[key][n][0], value[n][0])
                        and config[key][n][1] == value[n][1]
                        for n in value
                    )
                )
            elif isinstance(value, dict):
                same = (
                    isinstance(config[key], dict)
                    and config[key].keys() == value.keys()
                    and all(same_config_value(config[key][k], value[k]) for k in value)
                )
            else:
                same = same_config_value(config[key], value)
            if not same:
                raise ValueError(f"state_dict config {key} should be {value!r}, but got {config[key]!r}")
        store = self._checked_store(config)
        targets = self._state_spec(store)
        counter_names = ("tail", "head", *store.counters())
        check_keys(state, {"version", "config", *targets, *counter_names, "nstep", "vector"}, "state_dict")
        arrays = {}
        for name, (dtype, shape) in targets.items():
            arrays[name] = array = as_state_array(state[name], f"state_dict {name}")
            if array.dtype != dtype or array.shape != shape:
                raise ValueError(
                    f"state_dict {name} should be {dtype}{list(shape)}, "
                    f"but got {array.dtype}{list(array.shape)}"
                )
        counters = {}
        for name in counter_names:
            value = state[name]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"state_dict {name} should be an integer, but got {name}={value!r}")
            counters[name] = int(value)
        check_ring_invariants(arrays, counters, "state_dict ", store, tuple(memory.extras))
        nstep = checked_nstep(
            state["nstep"], memory.n_step, memory.num_streams, arrays["generation"], counters["tail"]
        )
        vector = checked_vector(state["vector"], memory.num_streams)
        return CheckedState(arrays, counters, store, nstep, vector)

    def check_valid(self) -> None:
        """:meth:`ReplayMemory.check_valid <prisample.replay.memory.ReplayMemory.check_valid>`."""
        memory = self.memory
        check_ring_invariants(self._state_arrays(), self._counters(), "", memory.store, tuple(memory.extras))
        memory.store.check_cache()


def check_ring_invariants(
    a: dict[str, npt.NDArray[Any]],
    counters: dict[str, int],
    prefix: str,
    store: ObservationStore,
    extras: tuple[str, ...],
) -> None:
    """Raise ``ValueError`` naming the first broken invariant of a memory's state arrays ``a``
    and ``counters`` with ``store`` (``prefix`` opens the message): see
    :meth:`MemoryCheckpoint.check_valid`."""
    c, num_streams = store.capacity, store.num_streams
    tail, head = counters["tail"], counters["head"]

    def fail(key: str, message: str) -> None:
        raise ValueError(f"{prefix}{key} {message}")

    if not 0 <= head < 2**62:
        fail("head", f"should lie in [0, 2**62), but got head={head}")
    if not store.allocated and head != 0:
        fail("head", f"should be 0 while obs_dtype is None (nothing added), but got head={head}")
    if not max(0, head - c) <= tail <= head:
        fail(
            "tail",
            f"should lie in [max(0, head - capacity), head] = [{max(0, head - c)}, {head}], "
            f"but got tail={tail}",
        )
    slots = np.arange(c, dtype=np.int64)
    # Slot s last held the largest transition number below head that is s modulo capacity.
    last = np.where(slots < head, slots + c * ((head - 1 - slots) // c), -1)
    generation = a["generation"]
    if not np.array_equal(generation, last):
        j = int(np.argmax(generation != last))
        fail(
            "generation",
            f"should be {last[j]} in slot {j} after head={head} adds (the transition "
            f"written there last), but got generation[{j}]={generation[j]}",
        )
    live = last >= tail
    stream_live = a["stream_live"] if store.allocated else np.zeros(num_streams, np.bool_)
    stream_ended = a["stream_ended"]
    if not (stream_live | stream_ended).all():
        j = int(np.argmin(stream_live | stream_ended))
        fail(
            "stream_ended",
            f"should be True for a stream without transitions, but got "
            f"stream_ended[{j}]=False with stream_live[{j}]=False",
        )
    if int(stream_live.sum()) > head:
        fail("stream_live", f"should mark at most head={head} streams, but got {int(stream_live.sum())}")
    if store.allocated:
        store.check_state(a, counters, live, prefix)
    reward, discount = a["reward"][live], a["discount"][live]
    if not np.isfinite(reward).all():
        j = int(np.flatnonzero(live)[np.argmin(np.isfinite(reward))])
        fail("reward", f"should be finite in live slots, but got reward[{j}]={a['reward'][j]!r}")
    inside = (discount >= 0.0) & (discount <= 1.0)
    if not inside.all():
        j = int(np.flatnonzero(live)[np.argmin(inside)])
        fail("discount", f"should lie in [0, 1] in live slots, but got discount[{j}]={a['discount'][j]!r}")
    for key in ("action", *(f"extra.{name}" for name in extras)):
        column = a[key]
        if column.dtype.kind not in "fc":
            continue
        finite = np.isfinite(column[live].reshape(int(live.sum()), -1)).all(axis=1)
        if not finite.all():
            j = int(np.flatnonzero(live)[np.argmin(finite)])
            fail(key, f"should be finite in live slots, but got {key}[{j}]={column[j]!r}")


def checked_nstep(
    value: Any, n_step: int, num_streams: int, generation: IntArray, tail: int
) -> NStepAccumulator | None:
    """A state's n-step accumulator (``None`` for ``n_step = 1``), its windows checked against the
    live transitions' ``generation``."""
    if n_step == 1:
        if value is not None:
            raise ValueError(f"state_dict nstep should be None for n_step=1, but got {type(value).__name__}")
        return None
    if not isinstance(value, dict):
        raise TypeError(
            f"state_dict nstep should be an NStepAccumulator state, but got {type(value).__name__}"
        )
    acc = NStepAccumulator(n_step, num_streams, generation.shape[0])
    try:
        acc.load_state_dict(value)
    except (ValueError, TypeError) as error:
        raise type(error)(f"state_dict nstep: {error}") from None
    tracked = value["generation"]
    live = generation >= tail
    expected = np.where(live, generation, -1)
    if not np.array_equal(tracked, expected):
        j = int(np.argmax(tracked != expected))
        raise ValueError(
            f"state_dict nstep generation should be the live transitions' ({expected[j]} in slot {j}), "
            f"but got {tracked[j]}"
        )
    done = np.flatnonzero(value["complete"])
    last = value["last"][done]
    ok = (generation[last] >= tail) & (generation[last] >= generation[done])
    ok &= generation[last] - generation[done] >= value["length"][done] - 1
    if not ok.all():
        j = int(done[np.argmin(ok)])
        raise ValueError(
            f"state_dict nstep last should name a live transition of the window after slot {j}, "
            f"but got last[{j}]={value['last'][j]}"
        )
    return acc


def checked_vector(value: Any, num_streams: int) -> tuple[VectorStepConverter, Any] | None:
    """A state's vector-step converter and its configured autoreset mode (``None``: none yet)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"configured", "converter"}:
        raise ValueError("state_dict vector should be None or a dict with keys 'configured' and 'converter'")
    configured, converter = value["configured"], value["converter"]
    num_envs = converter.get("num_envs") if isinstance(converter, dict) else None
    if type(num_envs) is not int or not 1 <= num_envs <= num_streams:
        raise ValueError(
            f"state_dict vector converter num_envs should lie in [1, {num_streams}], but got {num_envs!r}"
        )
    try:
        made = VectorStepConverter(num_envs, autoreset_mode=configured)
        made.load_state_dict(converter)
    except (ValueError, TypeError) as error:
        raise type(error)(f"state_dict vector: {error}") from None
    return made, configured
