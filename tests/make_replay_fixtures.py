"""Replay checkpoints and draws as the code before ``prisample.replay``'s redesign wrote them.

The redesign (storage as strategies, one write path) requires that checkpoints written by the
current version load and continue bit for bit, and that draws stay identical for the same seed.
This module freezes both, per configuration in :data:`CASES` (together they cover the storage modes
and write paths: stacked uint8 frames with several streams and episode ends, flat observations with
an inferred dtype, dict observations, n-step windows, extras, the rank backend, prioritized
eviction, a frame pool that runs short, and the three writes ``add``, ``add_many`` and
``add_vector_step``; every memory wraps around):

* :func:`script` gives the operations: writes, ``sample`` and ``update_priorities`` calls (some
  lagging behind later draws and writes, with and without ``generations=``), and the point at
  which the checkpoint is taken.  The numbers come from a splitmix64 stream in Python integers,
  so the script never depends on numpy's random streams.
* :func:`run` applies operations to a replay and records what it returned: each write's slots,
  each draw's indices, probabilities and weights and the whole gathered batch, the stale-update
  count after each update, and at the end the sampler's priorities and the slots' generations.

``tests/data/replay_fixtures/<case>.npz`` holds, per case, ``PrioritizedReplay.state_dict(
include_memory=True)`` at the save point (plain data: a JSON tree whose numpy arrays are stored
beside it; no pickle, no prisample class), the record of the operations before it (``before/``)
and after it (``after/``), and the script's digest.  ``tests/test_replay_fixtures.py`` loads each
state into a freshly built replay and replays the rest of the script, and drives a fresh replay
with the whole script; both must reproduce the record.  The test only reads the files.

Regenerate only when the draws or the checkpoint format are meant to change (say why in the
commit), from the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python -m tests.make_replay_fixtures
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import prisample
from prisample import LinearSchedule
from prisample.replay import PrioritizedReplay

DATA = Path(__file__).resolve().parent / "data" / "replay_fixtures"
FORMAT = 1
"""Layout of the fixture files (not the replay's state version, which the state itself holds)."""

History = list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]
"""Each draw so far: its indices and the batch's generations (what lagged updates refer to)."""

_MASK = (1 << 64) - 1


class Rand:
    """splitmix64 (Steele et al. 2014) in Python integers: the same numbers on every platform
    and numpy version."""

    def __init__(self, seed: int) -> None:
        self._x = seed & _MASK

    def bits(self) -> int:
        self._x = (self._x + 0x9E3779B97F4A7C15) & _MASK
        z = self._x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.bits() % n

    def chance(self, p: float) -> bool:
        return (self.bits() >> 11) * 2.0**-53 < p


# -- the environment the scripts step ----------------------------------------------------------------------
Extras = Mapping[str, tuple[tuple[int, ...], Any]]


@dataclass
class World:
    """Deterministic episodes on ``streams`` streams: frames numbered by a global counter (so no
    two frames of an episode are equal), Atari-style resets (the first frame repeated to fill the
    stack), episode ends at random (two thirds terminated, one third truncated)."""

    seed: int
    streams: int
    shape: tuple[int, ...] | Mapping[str, tuple[int, ...]]
    dtype: Any
    stack: int = 1
    end_prob: float = 0.1
    gamma: float = 0.99
    action_shape: tuple[int, ...] = ()
    action_dtype: Any = np.int64
    extras: Extras = field(default_factory=dict)
    rand: Rand = field(init=False)
    frames: list[list[Any]] = field(init=False)
    _t: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.rand = Rand(self.seed)
        self.frames = [[] for _ in range(self.streams)]
        for s in range(self.streams):
            self.reset(s)

    def _array(self, shape: tuple[int, ...], dtype: Any, s: int, salt: int) -> npt.NDArray[Any]:
        n = int(np.prod(shape, dtype=np.int64))
        t, i = self._t, np.arange(n, dtype=np.int64)
        if np.dtype(dtype) == np.uint8:
            return ((i * 3 + t * 7 + s * 31 + salt) % 251).astype(np.uint8).reshape(shape)
        return (i / 8 + t + 1000 * s + salt).astype(dtype).reshape(shape)

    def _frame(self, s: int) -> Any:
        self._t += 1
        if isinstance(self.shape, Mapping):
            dtypes: Mapping[str, Any] = self.dtype
            return {
                k: self._array(shape, dtypes[k], s, 17 * j) for j, (k, shape) in enumerate(self.shape.items())
            }
        return self._array(self.shape, self.dtype, s, 0)

    def reset(self, s: int) -> None:
        self.frames[s] = [self._frame(s)] * self.stack

    def current(self, s: int) -> Any:
        return np.stack(self.frames[s]) if self.stack > 1 else self.frames[s][-1]

    def advance(self, s: int) -> tuple[Any, Any]:
        """``(obs, next_obs)`` of one step on stream ``s``."""
        obs = self.current(s)
        self.frames[s] = [*self.frames[s][1:], self._frame(s)]
        return obs, self.current(s)

    def action(self) -> Any:
        if self.action_shape:
            n = int(np.prod(self.action_shape))
            values = [self.rand.below(9) / 4 - 1 for _ in range(n)]
            return np.array(values, dtype=self.action_dtype).reshape(self.action_shape)
        return self.rand.below(4)

    def reward(self) -> float:
        return self.rand.below(17) / 4 - 2

    def ends(self) -> tuple[bool, bool]:
        """``(terminated, truncated)`` of a step."""
        if not self.rand.chance(self.end_prob):
            return False, False
        terminated = self.rand.below(3) != 0
        return terminated, not terminated

    def extra_values(self) -> dict[str, npt.NDArray[Any]]:
        out = {}
        for name, (shape, dtype) in self.extras.items():
            n = int(np.prod(shape, dtype=np.int64))
            kind = np.dtype(dtype).kind
            values: list[float]
            if kind == "b":
                values = [self.rand.below(2) for _ in range(n)]
            elif kind in "iu":
                values = [self.rand.below(1000) for _ in range(n)]
            else:
                values = [self.rand.below(1024) / 64 - 8 for _ in range(n)]
            out[name] = np.array(values, dtype=dtype).reshape(shape)
        return out

    def transition(self, s: int) -> dict[str, Any]:
        """One ``add`` of stream ``s``; an episode that ends restarts on the stream's next add."""
        obs, next_obs = self.advance(s)
        terminated, truncated = self.ends()
        t = {
            "obs": obs,
            "action": self.action(),
            "reward": self.reward(),
            "discount": 0.0 if terminated else self.gamma,
            "next_obs": next_obs,
            "episode_end": terminated or truncated,
            "stream": s,
            **self.extra_values(),
        }
        if terminated or truncated:
            self.reset(s)
        return t


def _stack(values: Sequence[Any]) -> Any:
    if isinstance(values[0], Mapping):
        return {k: np.stack([v[k] for v in values]) for k in values[0]}
    return np.stack([np.asarray(v) for v in values])


# -- scripts -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """One call: ``add``, ``add_many``, ``vector`` (``add_vector_step``), ``sample`` (``k``) or
    ``update`` (``update_priorities`` of the draw ``lag`` draws back, ``generations=`` its
    batch's generations or not)."""

    kind: str
    args: dict[str, Any]


@dataclass
class Script:
    """The operations of a case and where the checkpoint is taken (after ``ops[:save_at]``)."""

    ops: list[Op] = field(default_factory=list)
    save_at: int = -1


class Builder:
    """Writes a :class:`Script` while stepping a :class:`World`."""

    def __init__(self, world: World, seed: int) -> None:
        self.world, self.rand, self.script = world, Rand(seed), Script()
        self._ks: list[int] = []
        self._learns = 0
        self._pending = np.zeros(world.streams, dtype=np.bool_)  # next-step mode: reset step next

    def _op(self, kind: str, **args: Any) -> None:
        self.script.ops.append(Op(kind, args))

    def add(self, stream: int | None = None) -> None:
        s = self.rand.below(self.world.streams) if stream is None else stream
        self._op("add", **self.world.transition(s))

    def add_many(
        self, streams: Sequence[int], *, priorities: bool = False, pass_streams: bool = True
    ) -> None:
        rows = [self.world.transition(s) for s in streams]
        args: dict[str, Any] = {key: _stack([r[key] for r in rows]) for key in rows[0] if key != "stream"}
        for key in ("reward", "discount"):
            args[key] = args[key].astype(np.float64)
        if pass_streams:
            args["streams"] = np.array(streams, dtype=np.int64)
        if priorities:
            args["priorities"] = np.array([self.rand.below(33) / 8 for _ in rows])
        self._op("add_many", **args)

    def vector(self, mode: str) -> None:
        """One vector-env step of ``streams`` envs in gymnasium's ``mode`` autoreset."""
        w, n = self.world, self.world.streams
        obs, next_obs, finals = [], [], [None] * n
        reward, term, trunc = np.zeros(n), np.zeros(n, np.bool_), np.zeros(n, np.bool_)
        action = [w.action() for _ in range(n)]
        for e in range(n):
            if mode == "NextStep" and self._pending[e]:  # the reset step: no transition
                obs.append(w.current(e))
                w.reset(e)
                next_obs.append(w.current(e))
                self._pending[e] = False
                continue
            o, no = w.advance(e)
            reward[e] = w.reward()
            term[e], trunc[e] = w.ends()
            if term[e] or trunc[e]:
                if mode == "NextStep":
                    self._pending[e] = True
                else:  # same step: reset at once, the final observation in infos
                    finals[e] = no
                    w.reset(e)
                    no = w.current(e)
            obs.append(o)
            next_obs.append(no)
        done = term | trunc
        infos: dict[str, Any] = {}
        if mode == "SameStep" and done.any():
            infos = {"final_obs": finals, "_final_obs": done.copy()}
        extras = [w.extra_values() for _ in range(n)]
        self._op(
            "vector",
            obs=_stack(obs),
            action=_stack(action),
            reward=reward,
            terminated=term,
            truncated=trunc,
            next_obs=_stack(next_obs),
            infos=infos,
            gamma=w.gamma,
            **{name: np.stack([x[name] for x in extras]) for name in w.extras},
        )

    def sample(self, k: int) -> None:
        self._ks.append(k)
        self._op("sample", k=k)

    def update(self, lag: int = 0, *, generations: bool = False) -> None:
        """Priorities for the draw ``lag`` draws back: multiples of 1/16 in [0, 3] (zeros, ties)."""
        k = self._ks[-1 - lag]
        values = np.array([self.rand.below(49) / 16 for _ in range(k)])
        self._op("update", lag=lag, priorities=values, generations=generations)

    def learn(self, k: int) -> None:
        """A learner step: draw and update the draw; every third step first updates the draw
        before (after the writes in between: some of its slots were rewritten or moved)."""
        self.sample(k)
        step, self._learns = self._learns, self._learns + 1
        if step % 3 == 2:
            self.update(1, generations=step % 2 == 0)
        self.update(0, generations=step % 4 == 1)

    def save(self) -> None:
        self.script.save_at = len(self.script.ops)


@dataclass(frozen=True)
class Case:
    """A replay configuration: how it is built and the script that drives it."""

    about: str
    build: Callable[[], PrioritizedReplay]
    script: Callable[[], Script]


def _atari() -> Script:
    b = Builder(World(101, 3, (8, 8), np.uint8, stack=4, end_prob=0.08), 201)
    for step in range(90):
        b.add()
        if step >= 12 and step % 4 == 0:
            b.learn(8)
        if step == 60:
            b.save()
    return b.script


def _flat() -> Script:
    w = World(102, 4, (5,), np.float32, end_prob=0.15, action_shape=(2,), action_dtype=np.float32)
    b = Builder(w, 202)
    for step in range(26):
        b.add_many(range(4), priorities=step % 2 == 1, pass_streams=step % 3 != 0)
        if step >= 3:
            b.learn(6)
        if step == 12:  # one call longer than the memory: it evicts some of its own transitions
            b.add_many([s for s in range(4) for _ in range(9)], priorities=True)
        if step == 16:
            b.save()
    return b.script


def _dict_vector() -> Script:
    shape = {"image": (3, 4), "vec": (2,)}
    w = World(103, 3, shape, {"image": np.uint8, "vec": np.float32}, end_prob=0.2, extras=_TAG)
    b = Builder(w, 203)
    for step in range(40):
        b.vector("NextStep")
        if step >= 4 and step % 2 == 0:
            b.learn(6)
        if step == 25:
            b.save()
    return b.script


def _nstep() -> Script:
    w = World(104, 3, (3,), np.float32, stack=2, end_prob=0.12, extras=_LOG_PROB_MASK)
    b = Builder(w, 204)
    for step in range(70):
        if step % 5 == 4:
            b.add_many([step % 3, (step + 1) % 3, step % 3])
        else:
            b.add()
        if step >= 10 and step % 3 == 0:
            b.learn(6)
        if step == 45:
            b.save()
    return b.script


def _vector_same_step() -> Script:
    w = World(105, 2, (6, 6), np.uint8, stack=3, end_prob=0.15, extras=_VALUE)
    b = Builder(w, 205)
    for step in range(45):
        b.vector("SameStep")
        if step >= 6 and step % 3 == 0:
            b.learn(6)
        if step == 30:
            b.save()
    return b.script


def _rank() -> Script:
    b = Builder(World(106, 2, (4, 4), np.uint8, stack=4, end_prob=0.1), 206)
    for step in range(80):
        b.add()
        if step >= 8 and step % 3 == 0:
            b.learn(7)
        if step == 50:
            b.save()
    return b.script


def _priority_eviction() -> Script:
    b = Builder(World(107, 2, (3,), np.float32, stack=4, end_prob=0.1), 207)
    for step in range(55):
        if step % 6 == 5:
            b.add_many([0, 1, 1], priorities=step % 12 == 5)
        else:
            b.add()
        if step >= 6 and step % 3 == 0:
            b.learn(5)
        if step == 35:
            b.save()
    return b.script


def _priority_eviction_vector() -> Script:
    b = Builder(World(108, 2, (2,), np.float32, end_prob=0.15), 208)
    for step in range(45):
        b.vector("NextStep")
        if step >= 5 and step % 2 == 1:
            b.learn(5)
        if step == 28:
            b.save()
    return b.script


def _pool_short() -> Script:
    b = Builder(World(109, 3, (5, 5), np.uint8, stack=4, end_prob=0.3), 209)
    for step in range(70):
        b.add()
        if step >= 8 and step % 4 == 0:
            b.learn(6)
        if step == 44:
            b.save()
    return b.script


_TAG: Extras = {"tag": ((), np.int64)}
_LOG_PROB_MASK: Extras = {"log_prob": ((), np.float32), "mask": ((4,), np.bool_)}
_VALUE: Extras = {"value": ((2,), np.float64)}

CASES: dict[str, Case] = {
    "atari_stack4": Case(
        "uint8 8x8 frames, frame_stack=4, 3 streams, add; proportional, beta schedule",
        lambda: PrioritizedReplay(
            40,
            (8, 8),
            frame_stack=4,
            obs_dtype=np.uint8,
            num_streams=3,
            alpha=0.6,
            beta=LinearSchedule(0.4, 1.0, 30),
            seed=11,
        ),
        _atari,
    ),
    "flat_add_many": Case(
        "float32 (5,) frame_stack=1, dtype inferred, float actions (2,), add_many with and without "
        "priorities= and streams=, one call longer than the memory; weight_norm='batch'",
        lambda: PrioritizedReplay(
            32,
            (5,),
            action_shape=(2,),
            action_dtype=np.float32,
            num_streams=4,
            alpha=0.7,
            beta=0.5,
            eps=1e-3,
            weight_norm="batch",
            seed=12,
        ),
        _flat,
    ),
    "dict_vector_next_step": Case(
        "dict observations (uint8 image, float32 vec), add_vector_step in next-step autoreset, "
        "extra 'tag'; weight_norm='none'",
        lambda: PrioritizedReplay(
            24,
            {"image": (3, 4), "vec": (2,)},
            obs_dtype={"image": np.uint8, "vec": np.float32},
            num_streams=3,
            extras=_TAG,
            weight_norm="none",
            seed=13,
        ),
        _dict_vector,
    ),
    "nstep3_streams": Case(
        "n_step=3, frame_stack=2 float32 frames, 3 streams, add and add_many, extras log_prob and "
        "mask (4,) bool",
        lambda: PrioritizedReplay(
            30,
            (3,),
            frame_stack=2,
            obs_dtype=np.float32,
            num_streams=3,
            n_step=3,
            extras=_LOG_PROB_MASK,
            beta=LinearSchedule(0.4, 1.0, 25),
            seed=14,
        ),
        _nstep,
    ),
    "vector_same_step_nstep2": Case(
        "add_vector_step in same-step autoreset (final_obs), n_step=2, uint8 6x6 frames, "
        "frame_stack=3, extra 'value' (2,) float64",
        lambda: PrioritizedReplay(
            28,
            (6, 6),
            frame_stack=3,
            obs_dtype=np.uint8,
            num_streams=2,
            n_step=2,
            extras=_VALUE,
            seed=15,
        ),
        _vector_same_step,
    ),
    "rank_stack4": Case(
        "rank backend, uint8 4x4 frames, frame_stack=4, 2 streams, add; ties in priorities",
        lambda: PrioritizedReplay(
            36,
            (4, 4),
            frame_stack=4,
            obs_dtype=np.uint8,
            num_streams=2,
            backend="rank",
            alpha=0.7,
            beta=LinearSchedule(0.5, 1.0, 20),
            seed=16,
        ),
        _rank,
    ),
    "priority_eviction_stack4": Case(
        "eviction='priority', float32 (3,) frames, frame_stack=4 (default frame_capacity), 2 streams, "
        "add and add_many with and without priorities=",
        lambda: PrioritizedReplay(
            20,
            (3,),
            frame_stack=4,
            obs_dtype=np.float32,
            num_streams=2,
            alpha=0.7,
            beta=0.5,
            eviction="priority",
            seed=17,
        ),
        _priority_eviction,
    ),
    "priority_eviction_rank_vector": Case(
        "eviction='priority' with the rank backend, float32 (2,), add_vector_step in next-step autoreset",
        lambda: PrioritizedReplay(
            16,
            (2,),
            obs_dtype=np.float32,
            num_streams=2,
            backend="rank",
            eviction="priority",
            seed=18,
        ),
        _priority_eviction_vector,
    ),
    "pool_short": Case(
        "uint8 5x5 frames, frame_stack=4, 3 streams, frequent episode ends and frame_capacity=36: "
        "the pool runs short and evicts early",
        lambda: PrioritizedReplay(
            24, (5, 5), frame_stack=4, obs_dtype=np.uint8, num_streams=3, frame_capacity=36, seed=19
        ),
        _pool_short,
    ),
}


def script(name: str) -> Script:
    """The operations of case ``name`` (a new list each call: runs never share arrays)."""
    out = CASES[name].script()
    assert 0 < out.save_at < len(out.ops), name
    return out


def digest(ops: Sequence[Op]) -> str:
    """sha256 of the operations (kinds, argument names, values with their dtypes and shapes)."""
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, np.ndarray):
            h.update(f"array {value.dtype.str} {value.shape}:".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, Mapping):
            h.update(f"dict {len(value)}:".encode())
            for key in sorted(value):
                h.update(f"{key}=".encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            h.update(f"{type(value).__name__} {len(value)}:".encode())
            for item in value:
                feed(item)
        else:
            h.update(f"{type(value).__name__} {value!r};".encode())

    for op in ops:
        h.update(op.kind.encode())
        feed(op.args)
    return h.hexdigest()


# -- running a script and recording what the replay returned ------------------------------------------------
def _fields(prefix: str, name: str, value: Any, out: dict[str, npt.NDArray[Any]]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            out[f"{prefix}/{name}.{key}"] = np.ascontiguousarray(item)
    else:
        out[f"{prefix}/{name}"] = np.ascontiguousarray(value)


def run(
    replay: PrioritizedReplay, ops: Sequence[Op], start: int, history: History
) -> dict[str, npt.NDArray[Any]]:
    """Apply ``ops`` (numbered from ``start``) and record what ``replay`` returned; ``history`` holds
    the earlier draws (lagged updates refer to them) and gets this run's."""
    out: dict[str, npt.NDArray[Any]] = {}
    for i, op in enumerate(ops, start):
        key = f"{i:03d}"
        if op.kind == "add":
            out[f"{key}/slots"] = np.array([replay.add(**op.args)], dtype=np.int64)
        elif op.kind == "add_many":
            out[f"{key}/slots"] = np.asarray(replay.add_many(**op.args))
        elif op.kind == "vector":
            out[f"{key}/slots"] = np.asarray(replay.add_vector_step(**op.args))
        elif op.kind == "sample":
            batch, draw = replay.sample(op.args["k"])
            out[f"{key}/indices"] = draw.indices
            out[f"{key}/probabilities"] = draw.probabilities
            out[f"{key}/weights"] = np.asarray(draw.weights)
            out[f"{key}/batch.weights"] = np.asarray(batch.weights)
            for name in ("obs", "action", "reward", "discount", "next_obs", "generation"):
                _fields(key, name, getattr(batch, name), out)
            for name, value in batch.extras.items():
                out[f"{key}/extra.{name}"] = np.ascontiguousarray(value)
            history.append((draw.indices.copy(), np.array(batch.generation)))
        elif op.kind == "update":
            indices, generations = history[-1 - op.args["lag"]]
            replay.update_priorities(
                indices, op.args["priorities"], generations=generations if op.args["generations"] else None
            )
            out[f"{key}/dropped_updates"] = np.array([replay.dropped_updates], dtype=np.int64)
        else:
            raise ValueError(f"unknown op {op.kind!r}")
    return out


def observe(replay: PrioritizedReplay, prefix: str) -> dict[str, npt.NDArray[Any]]:
    """What a replay shows between calls: its length, the sampler's priorities, each slot's
    generation, the stale-update count."""
    slots = np.arange(replay.capacity)
    return {
        f"{prefix}/len": np.array([len(replay)], dtype=np.int64),
        f"{prefix}/priorities": replay.sampler.priorities.copy(),
        f"{prefix}/generations": replay.generations(slots),
        f"{prefix}/dropped_updates": np.array([replay.dropped_updates], dtype=np.int64),
    }


def history_of(record: Mapping[str, npt.NDArray[Any]]) -> History:
    """The draws of a recorded run (indices and generations), in order: what a replay loaded from
    the checkpoint needs for the updates that lag behind the save."""
    ops = sorted({key.split("/")[0] for key in record if key.endswith("/indices")})
    return [(np.array(record[f"{op}/indices"]), np.array(record[f"{op}/generation"])) for op in ops]


# -- the state as plain data: a JSON tree, numpy arrays beside it --------------------------------------------
def flatten(value: Any, key: str, arrays: dict[str, npt.NDArray[Any]]) -> Any:
    """JSON for a state tree; arrays go to ``arrays`` under ``key``, tuples are tagged."""
    if isinstance(value, dict):
        if any(not isinstance(k, str) or k.startswith("__") for k in value):
            raise TypeError(f"state keys at {key} should be strings without a leading '__': {list(value)}")
        return {k: flatten(v, f"{key}/{k}", arrays) for k, v in value.items()}
    if isinstance(value, tuple):
        return {"__tuple__": [flatten(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [flatten(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError(f"state array at {key} holds objects")
        arrays[key] = value
        return {"__array__": key}
    if value is None or type(value) in (bool, int, float, str):
        return value
    raise TypeError(f"state value at {key} is a {type(value).__name__}: not plain data")


def unflatten(tree: Any, arrays: Mapping[str, Any]) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {"__array__"}:
            return np.array(arrays[tree["__array__"]])  # a writable copy
        if set(tree) == {"__tuple__"}:
            return tuple(unflatten(v, arrays) for v in tree["__tuple__"])
        return {k: unflatten(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [unflatten(v, arrays) for v in tree]
    return tree


@dataclass
class Fixture:
    """One case's file: the state at the save point and the records before and after it."""

    meta: dict[str, Any]
    state: dict[str, Any]
    before: dict[str, npt.NDArray[Any]]
    after: dict[str, npt.NDArray[Any]]


def record(name: str) -> Fixture:
    """Run case ``name`` today: the checkpoint and what came before and after it."""
    case, s = CASES[name], script(name)
    replay = case.build()
    history: History = []
    before = run(replay, s.ops[: s.save_at], 0, history)
    before.update(observe(replay, "save"))
    state = replay.state_dict(include_memory=True)
    after = run(replay, s.ops[s.save_at :], s.save_at, history)
    after.update(observe(replay, "end"))
    meta = {
        "format": FORMAT,
        "case": name,
        "about": case.about,
        "script_sha256": digest(s.ops),
        "save_at": s.save_at,
        "num_ops": len(s.ops),
        "written_by": {"prisample": prisample.__version__, "numpy": np.__version__, "commit": _commit()},
    }
    return Fixture(meta, state, before, after)


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=DATA.parent,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip()


def pack(arrays: Mapping[str, npt.NDArray[Any]]) -> tuple[list[list[Any]], npt.NDArray[np.uint8]]:
    """Arrays as one byte string and an index ``[name, dtype, shape, offset]`` (one zip entry
    instead of hundreds keeps the files small)."""
    index, chunks, offset = [], [], 0
    for name, array in arrays.items():
        data = np.ascontiguousarray(array)
        if data.dtype.hasobject:
            raise TypeError(f"{name} holds objects")
        index.append([name, data.dtype.str, list(data.shape), offset])
        chunks.append(data.tobytes())
        offset += data.nbytes
    return index, np.frombuffer(b"".join(chunks), dtype=np.uint8)


def unpack(index: list[list[Any]], blob: npt.NDArray[np.uint8]) -> dict[str, npt.NDArray[Any]]:
    out = {}
    for name, dtype, shape, offset in index:
        dt = np.dtype(dtype)
        size = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(blob[offset : offset + size].tobytes(), dtype=dt).reshape(shape).copy()
    return out


def write(fixture: Fixture, path: Path) -> None:
    arrays: dict[str, npt.NDArray[Any]] = {}
    tree = flatten(fixture.state, "state", arrays)
    arrays.update({f"before/{k}": v for k, v in fixture.before.items()})
    arrays.update({f"after/{k}": v for k, v in fixture.after.items()})
    index, blob = pack(arrays)
    meta = {**fixture.meta, "state": tree, "index": index}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, meta=np.array(json.dumps(meta, sort_keys=True)), blob=blob)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())


def load(name: str, directory: Path = DATA) -> Fixture:
    """Case ``name``'s file, as plain data (no pickle)."""
    with np.load(directory / f"{name}.npz", allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        arrays = unpack(meta.pop("index"), data["blob"])
    tree = meta.pop("state")
    parts: dict[str, dict[str, npt.NDArray[Any]]] = {"before": {}, "after": {}}
    for key, array in arrays.items():
        part, _, rest = key.partition("/")
        if part in parts:
            parts[part][rest] = array
    return Fixture(meta, unflatten(tree, arrays), parts["before"], parts["after"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="write the replay checkpoint fixtures")
    parser.add_argument("--out", type=Path, default=DATA, help=f"directory (default {DATA})")
    parser.add_argument("cases", nargs="*", help=f"cases to write (default: all): {', '.join(CASES)}")
    args = parser.parse_args(argv)
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; the cases are {list(CASES)}")
    for name in args.cases or CASES:
        path = args.out / f"{name}.npz"
        write(record(name), path)
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
