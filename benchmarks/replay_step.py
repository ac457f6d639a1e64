"""Atari replay step, side by side: prisample against cpprb and TorchRL in one run.

One *replay step* is what a DQN agent with a 4-environment vector env does per update (one update
per 4 agent steps): add the 4 transitions of one vector step (stacks of four 84x84 ``uint8``
frames, one stream per environment, episodes of ~500 steps), draw 32 transitions with their
stacks (``obs`` and ``next_obs`` as full ``(32, 4, 84, 84)`` arrays) and importance weights, and
update the 32 priorities.  The memory holds ``N`` transitions, filled before timing.  Libraries:

* ``prisample``: :class:`prisample.replay.PrioritizedReplay` (proportional, α = 0.6, β = 0.4,
  ``num_streams=4``), one ``add_many`` per vector step, ``sample(32)``, ``update_priorities``.
  Frames are stored once in a pool.
* ``cpprb``: ``PrioritizedReplayBuffer`` with ``next_of="obs"`` and ``stack_compress="obs"`` (its
  frame-sharing mode), α = 0.6, ``sample(32, beta=0.4)``, one ``add`` per transition and
  ``on_episode_end()`` after an episode's last one.  ``stack_compress`` shares frames only along
  the *last* axis, so stacks go in as ``(84, 84, 4)`` and come out as ``(32, 84, 84, 4)`` (a
  ``moveaxis`` view gives the network's layout); with ``(4, 84, 84)`` cpprb stores both stacks in
  full (~57 kB per transition, measured) and returns wrong stacks even for one stream, which is
  the layout ``benchmarks/measurements/replay_memory.py`` used.  cpprb has no notion of several
  streams: its frame sharing assumes that consecutive adds continue one episode, so with 4
  interleaved environments the stacks it returns are not the ones added (``stacks_exact`` in the
  JSON says so); its cost does not depend on the frames' content, so the timing stands.
* ``TorchRL``: ``TensorDictPrioritizedReplayBuffer`` (α = 0.6, β = 0.4, ``priority_key="td_error"``)
  over ``LazyMemmapStorage``, one ``extend`` of the vector step's ``TensorDict``, ``sample()``,
  ``update_tensordict_priority``.  This is the storage of TorchRL's own Atari DQN
  (``sota-implementations/dqn/dqn_atari.py``: ``TensorDictReplayBuffer(storage=
  LazyMemmapStorage(max_size=cfg.buffer.buffer_size), ...)``), whose environment stacks frames
  with ``CatFrames(N=4, dim=-3)`` (``utils_atari.py``), so every transition stores its ``pixels``
  and ``("next", "pixels")`` stacks in full: ~56.5 kB per transition, 7.8x ours.  Stored here as
  ``uint8`` (the example's ``ToTensorImage`` would store float32, 4x more).  TorchRL's
  frame-sharing path, ``CatFrames.make_rb_transform_and_sampler`` (CatFrames docstring: "store
  trajectories ... and apply CatFrames at sampling time"), returns a uniform ``SliceSampler`` and
  needs slices of one trajectory, so it does not combine with ``PrioritizedSampler`` and is not
  the prioritized replay measured here.  When the memmap would not fit on the scratch disk
  (``--disk-margin-gb`` left free), TorchRL is measured at the largest ``N`` that fits and the
  JSON says so (``n_measured``); when it exceeds RAM, reads go to disk and the JSON says that too.

Against the copy floor: what no replay can beat for this batch, the frames that
prisample's ``sample`` gathers for 32 draws (``obs`` and ``next_obs`` share all but one frame:
32 x 5 = 160 frames), read from prisample's own frame pool at the rows of real draws (made before
timing) with one ``np.take`` into a preallocated ``(32, 5, 84, 84)`` array (:class:`CopyFloor`).
It is timed in the libraries' interleaved group (``copy_floor``; each library's
``ratio_to_copy_floor`` per pass), and again in a group of its own with prisample's step split into
its phases (``phases``: ``add`` of the 4-env step, ``sample`` of 32 (draw, gather, weights),
``update`` of 32, each clocked inside one step, and each phase's ratio to the floor per pass).  The
add of a 16-environment vector step (``add_many`` of 16 streams, ``vector_add``: µs per
transition, interleaved with the 4-env add) is timed on a second memory of the same ``N``.  Each
size's ``targets`` says which of the step's bounds (:data:`STEP_BOUNDS`) were met.

Variants of prisample (``VARIANTS``) are timed against the base configuration once the replay
gains the keyword; until then each is recorded as "not available in this version".

Timing: every library gets the same pre-generated, seeded transition stream (periodic, so it is
materialised once) and the same priorities; libraries are interleaved in every pass
(:func:`benchmarks.timing.measure_quiet`, the order rotating per block); the result per library is
the median over passes, and the ratios ``peer / prisample`` are taken per pass.  Bytes per
transition: ``replay.nbytes / capacity`` for prisample; for every library also the anonymous
resident memory and file bytes on disk that a fresh process gains while building and filling the
memory (``--memory-n`` transitions).

Full run (alone on the machine, about 15-25 minutes, peak ~16 GB RAM + TorchRL's memmap on disk,
~57 GB at N = 10^6)::

    flock /tmp/prisample-heavy.lock env OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.replay_step \\
        --out docs/results/replay_step.json

Smoke run: ``python -m benchmarks.replay_step --quick`` (N = 2^12, 2^14; prints, writes nothing;
``--sizes 4096 --passes 1 --memory-n 0 --out /tmp/x.json`` is smaller still).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import contextlib
import gc
import inspect
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.timing import QuietPolicy, measure_quiet, quietest

ROOT = Path(__file__).resolve().parent.parent
ENVS, STACK, FRAME, BATCH = 4, 4, (84, 84), 32
ALPHA, BETA = 0.6, 0.4
EPISODE = 500  # mean episode length, agent steps per environment
POOL = 256  # distinct random frames the stream draws from
VECTOR_ENVS = 16  # environments of the vector step whose add is timed on its own
PHASES = ("add", "sample", "update")  # prisample's step, clocked phase by phase
FLOOR_BATCHES = 64  # draws whose frame rows the copy floor cycles through

# The step's bounds, per size: the whole step at most 1.5x the copy floor; cpprb's step at least 3x
# prisample's; the add of a 16-env vector step at most 10 µs per transition.
STEP_BOUNDS: dict[str, float] = {
    "step_over_copy_floor": 1.5,
    "cpprb_over_prisample": 4.0,
    "add_us": 40.0,
    "vector_add_us_per_transition": 5.0,
}

FULL: dict[str, Any] = {
    "sizes": [1 << 18, 10**6],
    "passes": 7,
    "reps": 3,
    "block_s": 0.2,
    "period": 1000,
    "memory_n": 1 << 18,
    "quiet_attempts": 3,
    "vector_envs": VECTOR_ENVS,
}
QUICK: dict[str, Any] = {
    "sizes": [1 << 12, 1 << 14],
    "passes": 2,
    "reps": 2,
    "block_s": 0.02,
    "period": 128,
    "memory_n": 1 << 12,
    "quiet_attempts": 1,
    "vector_envs": VECTOR_ENVS,
}

# Named prisample configurations: constructor keywords, and keywords for add_many computed per
# vector step.  A configuration whose keywords the installed PrioritizedReplay lacks is skipped.
VARIANTS: dict[str, dict[str, Any]] = {
    "n_step=3": {"ctor": {"n_step": 3}, "check_next": False},
    "extras": {"ctor": {"extras": {"log_prob": ((), np.float32)}}, "add": ("log_prob",)},
}
# The replay's lock is always on (every public call holds ``replay.lock``), so every row above
# includes it; what it costs alone is measured by ``benchmarks/lock_overhead.py``.


def log(message: str) -> None:
    print(message, flush=True)


# -- the transition stream ---------------------------------------------------------------------
@dataclass
class Stream:
    """``period`` vector steps of ``envs`` environments (``ENVS`` unless said), repeating: the
    environments' stacks after the last step equal those before the first, so the stream can be
    replayed forever.

    Transition ``t`` (in add order) is environment ``t % envs`` of vector step ``t // envs``,
    whose arrays are row ``(t // envs) % period`` here.
    """

    obs: np.ndarray  # (period, envs, STACK, 84, 84) uint8
    next_obs: np.ndarray
    action: np.ndarray  # (period, envs) int64
    reward: np.ndarray  # (period, envs) float32
    discount: np.ndarray  # (period, envs) float32, 0 at an episode end
    end: np.ndarray  # (period, envs) bool
    log_prob: np.ndarray  # (period, envs) float32, for the extras variant
    priorities: np.ndarray  # (period, BATCH) float64, new |δ| of each step's batch

    @property
    def period(self) -> int:
        return int(self.obs.shape[0])

    @property
    def envs(self) -> int:
        return int(self.obs.shape[1])

    def transition(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``obs`` and ``next_obs`` of transitions numbered ``t``."""
        step, env = (t // self.envs) % self.period, t % self.envs
        return self.obs[step, env], self.next_obs[step, env]


def make_stream(period: int, seed: int = 0, envs: int = ENVS) -> Stream:
    """Episodes end with probability ``1 / EPISODE`` per step and at the period's last step (so
    the stream repeats); a reset stack repeats its first frame, as Atari frame stacking does."""
    if period < 2:
        raise ValueError(f"period should be at least 2, but got period={period}")
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, size=(POOL, *FRAME), dtype=np.uint8)
    ids = np.zeros((period, envs, STACK + 1), dtype=np.int64)
    end = rng.random((period, envs)) < 1 / EPISODE
    end[-1] = True
    new = rng.integers(0, POOL, size=(period, envs))
    resets = rng.integers(0, POOL, size=(period, envs))
    start = resets[-1]  # the stacks the last step's resets give: the period's first stacks
    current = np.repeat(start[:, None], STACK, axis=1)
    for s in range(period):
        ids[s, :, :STACK] = current
        ids[s, :, STACK] = new[s]
        following = ids[s, :, 1:]
        current = np.where(end[s][:, None], resets[s][:, None], following)
    obs = np.ascontiguousarray(pool[ids[:, :, :STACK]])
    next_obs = np.ascontiguousarray(pool[ids[:, :, 1:]])
    return Stream(
        obs=obs,
        next_obs=next_obs,
        action=rng.integers(0, 6, size=(period, envs)).astype(np.int64),
        reward=rng.choice(np.array([-1.0, 0.0, 1.0], dtype=np.float32), size=(period, envs)),
        discount=np.where(end, 0.0, 1.0).astype(np.float32),
        end=end,
        log_prob=rng.standard_normal((period, envs)).astype(np.float32),
        priorities=rng.random((period, BATCH)),
    )


def _slot_transitions(slots: npt.NDArray[np.int64], added: int, capacity: int) -> npt.NDArray[np.int64]:
    """Number of the transition a ring of ``capacity`` slots holds in ``slots`` after ``added``."""
    return slots + capacity * ((added - 1 - slots) // capacity)


def _exact(stream: Stream, t: np.ndarray, obs: Any, next_obs: Any | None) -> bool:
    want_obs, want_next = stream.transition(np.asarray(t))
    ok = np.array_equal(np.asarray(obs), want_obs)
    return bool(ok and (next_obs is None or np.array_equal(np.asarray(next_obs), want_next)))


# -- the libraries -----------------------------------------------------------------------------
class Contender:
    """One replay memory fed from the stream: :meth:`fill`, then :meth:`step` per timed call."""

    name = ""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.cursor = 0  # vector steps added

    def add(self) -> None:
        raise NotImplementedError

    def fill(self, n: int) -> None:
        while self.cursor * self.stream.envs < n:
            self.add()

    def step(self) -> None:
        raise NotImplementedError

    def stacks_exact(self) -> bool:
        """Whether a sampled batch holds the stacks that were added."""
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


class Prisample(Contender):
    def __init__(self, stream: Stream, n: int, variant: dict[str, Any] | None = None) -> None:
        from prisample.replay import PrioritizedReplay

        super().__init__(stream)
        variant = variant or {}
        self.add_keys: tuple[str, ...] = variant.get("add", ())
        self.check_next = variant.get("check_next", True)
        self.streams = np.arange(stream.envs)
        self.phase_s = dict.fromkeys(PHASES, 0.0)  # seconds per phase, summed by phased_step
        self.replay = PrioritizedReplay(
            n,
            FRAME,
            frame_stack=STACK,
            obs_dtype=np.uint8,
            num_streams=stream.envs,
            alpha=ALPHA,
            beta=BETA,
            seed=0,
            **variant.get("ctor", {}),
        )
        self.add()  # a keyword add_many lacks fails here, before any timing

    def add(self) -> None:
        s, st = self.cursor % self.stream.period, self.stream
        extra = {key: getattr(st, key)[s] for key in self.add_keys}
        self.replay.add_many(
            st.obs[s],
            st.action[s],
            st.reward[s],
            st.discount[s],
            st.next_obs[s],
            episode_end=st.end[s],
            streams=self.streams,
            **extra,
        )
        self.cursor += 1

    def step(self) -> None:
        self.add()
        _, draw = self.replay.sample(BATCH)
        self.replay.update_priorities(draw.indices, self.stream.priorities[self.cursor % self.stream.period])

    def phased_step(self) -> None:
        """:meth:`step` with the clock read between its phases, summed into :attr:`phase_s`."""
        clock = time.perf_counter
        t0 = clock()
        self.add()
        t1 = clock()
        _, draw = self.replay.sample(BATCH)
        t2 = clock()
        self.replay.update_priorities(draw.indices, self.stream.priorities[self.cursor % self.stream.period])
        t3 = clock()
        phase = self.phase_s
        phase["add"] += t1 - t0
        phase["sample"] += t2 - t1
        phase["update"] += t3 - t2

    def stacks_exact(self) -> bool:
        batch, _ = self.replay.sample(BATCH)
        return _exact(
            self.stream, batch["generation"], batch["obs"], batch["next_obs"] if self.check_next else None
        )

    def info(self) -> dict[str, Any]:
        return {"nbytes_per_transition": self.replay.nbytes / self.replay.capacity}


def frame_rows(replay: Any, indices: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """The frame-pool rows that ``replay.sample`` gathers for the slots ``indices``: per slot its
    ``obs`` stack's rows and the newest row of its ``next_obs`` (all of them where ``next_obs`` is
    not ``obs`` shifted by one frame): the memory's frame store's read plan."""
    index, _ = replay.memory.store.read_plan(indices, indices, 1)
    rows = index[0].reshape(indices.shape[0], -1)
    return np.ascontiguousarray(rows, dtype=np.intp)


class CopyFloor:
    """The copy floor of one batch: the frames prisample's ``sample(32)`` gathers, read from its
    own frame pool with one ``np.take`` into a preallocated array; a call copies the next of
    ``batches`` real draws' rows (drawn here, before any timing)."""

    def __init__(self, contender: Prisample, batches: int = FLOOR_BATCHES) -> None:
        pool = contender.replay.memory.frame_pool
        if pool is None:
            raise ValueError("the copy floor needs prisample's frame pool (frame_stack > 1)")
        self.frames = pool.storage.to_numpy()
        self.pool_frames = int(self.frames.shape[0])
        self.rows: list[npt.NDArray[np.intp]] = []
        for _ in range(batches):
            _, draw = contender.replay.sample(BATCH)
            self.rows.append(frame_rows(contender.replay, draw.indices))
        # one preallocated batch per width (5 frames per transition where next_obs shares 3 with obs)
        self.out = {
            r.shape[1]: np.empty((BATCH, r.shape[1], *FRAME), dtype=self.frames.dtype) for r in self.rows
        }
        self.frames_per_batch = statistics.median(r.size for r in self.rows)
        self.i = 0

    def __call__(self) -> None:
        rows = self.rows[self.i]
        # mode="clip": numpy buffers `out` under the default mode="raise"; the rows are in range
        np.take(self.frames, rows, axis=0, out=self.out[rows.shape[1]], mode="clip")
        self.i = (self.i + 1) % len(self.rows)

    def info(self) -> dict[str, Any]:
        return {
            "frames_per_batch": self.frames_per_batch,
            "frames_per_transition": self.frames_per_batch / BATCH,
            "batch_shape": [BATCH, max(self.out), *FRAME],
            "pool_frames": self.pool_frames,
            "batches": len(self.rows),
            "how": "np.take(pool frames, rows of the batch, axis=0, out=preallocated, mode='clip')",
        }


class Cpprb(Contender):
    name = "cpprb"

    def __init__(self, stream: Stream, n: int) -> None:
        from cpprb import PrioritizedReplayBuffer

        super().__init__(stream)
        # stack_compress shares frames only along the last axis: stacks are given as (84, 84, 4)
        # (with (4, 84, 84) it stores both stacks in full, 57 kB per transition, and returns wrong
        # stacks); converted once here, as an environment wrapper stacking last would give them.
        self.obs = np.ascontiguousarray(np.moveaxis(stream.obs, 2, -1))
        self.next_obs = np.ascontiguousarray(np.moveaxis(stream.next_obs, 2, -1))
        spec = {
            "obs": {"shape": (*FRAME, STACK), "dtype": np.ubyte},
            "act": {"dtype": np.int64},
            "rew": {},
            "done": {},
        }
        self.capacity = n
        self.buffer = PrioritizedReplayBuffer(n, spec, next_of="obs", stack_compress="obs", alpha=ALPHA)

    def add(self) -> None:
        s, st = self.cursor % self.stream.period, self.stream
        for e in range(ENVS):
            self.buffer.add(
                obs=self.obs[s, e],
                act=st.action[s, e],
                rew=st.reward[s, e],
                next_obs=self.next_obs[s, e],
                done=float(st.end[s, e]),
            )
            if st.end[s, e]:
                self.buffer.on_episode_end()
        self.cursor += 1

    def step(self) -> None:
        self.add()
        sample = self.buffer.sample(BATCH, beta=BETA)
        self.buffer.update_priorities(
            sample["indexes"], self.stream.priorities[self.cursor % self.stream.period]
        )

    def stacks_exact(self) -> bool:
        sample = self.buffer.sample(BATCH, beta=BETA)
        slots = np.asarray(sample["indexes"], dtype=np.int64)
        t = _slot_transitions(slots, self.cursor * ENVS, self.capacity)
        return _exact(
            self.stream, t, np.moveaxis(sample["obs"], -1, 1), np.moveaxis(sample["next_obs"], -1, 1)
        )

    def close(self) -> None:
        del self.buffer, self.obs, self.next_obs
        gc.collect()


def torchrl_bytes_per_transition() -> int:
    """Bytes one transition takes in TorchRL's storage: both stacks, action, reward, done,
    terminated and the ``index`` entry the buffer adds."""
    return 2 * STACK * FRAME[0] * FRAME[1] + 8 + 4 + 1 + 1 + 8


def _disk_bytes(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(folder, name)).st_blocks * 512
    return total


class TorchRL(Contender):
    name = "TorchRL"

    def __init__(self, stream: Stream, n: int, scratch: str | None = None) -> None:
        import logging

        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyMemmapStorage, TensorDictPrioritizedReplayBuffer

        logging.getLogger("torchrl").setLevel(logging.WARNING)
        super().__init__(stream)
        self.capacity = n
        self.scratch = tempfile.mkdtemp(prefix="replay_step_torchrl_", dir=scratch)
        self.buffer = TensorDictPrioritizedReplayBuffer(
            alpha=ALPHA,
            beta=BETA,
            priority_key="td_error",
            batch_size=BATCH,
            storage=LazyMemmapStorage(n, scratch_dir=self.scratch),
        )
        p = stream.period
        # What a TorchRL collector hands over per vector step: views of the stream, no copies.
        steps = TensorDict(
            {
                "pixels": torch.from_numpy(stream.obs),
                "action": torch.from_numpy(stream.action),
                "next": TensorDict(
                    {
                        "pixels": torch.from_numpy(stream.next_obs),
                        "reward": torch.from_numpy(stream.reward),
                        "done": torch.from_numpy(stream.end),
                        "terminated": torch.from_numpy(stream.end),
                    },
                    batch_size=[p, ENVS],
                ),
            },
            batch_size=[p, ENVS],
        )
        self.steps = [steps[s] for s in range(p)]
        self.flat = steps.reshape(-1)
        self.priorities = torch.from_numpy(stream.priorities.astype(np.float32))

    def add(self) -> None:
        self.buffer.extend(self.steps[self.cursor % self.stream.period])
        self.cursor += 1

    def fill(self, n: int) -> None:
        while self.cursor * ENVS < n:  # up to 256 vector steps per extend: filling is not timed
            s = self.cursor % self.stream.period
            k = min(256, self.stream.period - s, -(-(n - self.cursor * ENVS) // ENVS))
            self.buffer.extend(self.flat[s * ENVS : (s + k) * ENVS])
            self.cursor += k

    def step(self) -> None:
        self.add()
        sample = self.buffer.sample()
        sample.set("td_error", self.priorities[self.cursor % self.stream.period])
        self.buffer.update_tensordict_priority(sample)

    def stacks_exact(self) -> bool:
        sample = self.buffer.sample()
        t = _slot_transitions(sample["index"].numpy(), self.cursor * ENVS, self.capacity)
        return _exact(self.stream, t, sample["pixels"].numpy(), sample["next", "pixels"].numpy())

    def info(self) -> dict[str, Any]:
        return {"disk_bytes_per_transition": _disk_bytes(self.scratch) / self.capacity}

    def close(self) -> None:
        del self.buffer, self.steps, self.flat
        gc.collect()
        shutil.rmtree(self.scratch, ignore_errors=True)


def variant_available(variant: dict[str, Any]) -> str | None:
    """``None`` when the installed ``PrioritizedReplay`` takes the variant's keywords, else why not."""
    from prisample.replay import PrioritizedReplay

    for method, keys in (("__init__", variant.get("ctor", {})), ("add_many", variant.get("add", ()))):
        params = inspect.signature(getattr(PrioritizedReplay, method)).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            continue
        missing = [key for key in keys if key not in params]
        if missing:
            return f"not available in this version: PrioritizedReplay.{method} has no keyword {missing[0]!r}"
    return None


def torchrl_capacity(n: int, scratch: str | None, margin_gb: float) -> tuple[int, str]:
    """The largest memmap capacity up to ``n`` that leaves ``margin_gb`` free on the scratch disk."""
    free = shutil.disk_usage(scratch or tempfile.gettempdir()).free
    fits = int(max(0.0, free - margin_gb * 2**30) // torchrl_bytes_per_transition())
    if fits >= n:
        return n, ""
    return fits, (
        f"LazyMemmapStorage needs {n * torchrl_bytes_per_transition() / 1e9:.1f} GB at N = {n}; "
        f"{free / 1e9:.1f} GB free on the scratch disk less a {margin_gb:g} GiB margin holds {fits}"
    )


def _mem_total() -> int:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) * 1024


# -- timing ------------------------------------------------------------------------------------
def _time_group(
    contenders: dict[str, Contender],
    config: dict[str, Any],
    policy: QuietPolicy,
    extra: dict[str, Callable[[], object]] | None = None,
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Per pass: µs per replay step of each contender (interleaved with the ``extra`` cases, the
    copy floor say), and the CPU interference (a pass during which other processes were busy is
    retried as ``policy`` says)."""

    cases: dict[str, Callable[[], object]] = {name: c.step for name, c in contenders.items()}
    cases.update(extra or {})
    passes, load = [], []
    for _ in range(config["passes"]):
        times, others, steal = measure_quiet(
            cases, reps=config["reps"], block_s=config["block_s"], policy=policy
        )
        passes.append(times)
        load.append({"others_cpus": others, "steal_cpus": steal})
    return passes, load


def _summary(passes: list[dict[str, float]], name: str, base: str = "prisample") -> dict[str, Any]:
    mine = [p[name] for p in passes]
    out: dict[str, Any] = {"us_per_step": statistics.median(mine), "us_per_pass": mine}
    if name != base:
        out["ratio_to_prisample"] = _ratio(passes, name, base)
    return out


def _ratio(passes: list[dict[str, float]], name: str, base: str) -> dict[str, Any]:
    """``name / base`` per pass and its median."""
    ratios = [p[name] / p[base] for p in passes]
    return {"median": statistics.median(ratios), "per_pass": ratios}


def _calls(fn: Callable[[], object], block_s: float, warmup: int = 5) -> int:
    """Calls of ``fn`` in a block of about ``block_s`` (as :func:`benchmarks.timing.measure` sizes them)."""
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    for _ in range(3):
        fn()
    once = (time.perf_counter() - start) / 3
    return max(1, min(5000, int(block_s / max(once, 1e-7))))


def _phase_pass(base: Prisample, floor: CopyFloor, reps: int, block_s: float) -> dict[str, float]:
    """One pass of the phase group: ``reps`` rounds of a block of :meth:`Prisample.phased_step` and
    a block of copy-floor calls (the order alternating per round); per phase (and the whole step,
    and the floor) the median over rounds of the block's mean, in µs."""
    steps, copies = _calls(base.phased_step, block_s), _calls(floor, block_s)
    rounds: list[dict[str, float]] = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(reps):
            row: dict[str, float] = {}
            for which in ("step", "copy_floor") if r % 2 == 0 else ("copy_floor", "step"):
                if which == "step":
                    base.phase_s = dict.fromkeys(PHASES, 0.0)
                    start = time.perf_counter()
                    for _ in range(steps):
                        base.phased_step()
                    row["step"] = (time.perf_counter() - start) / steps * 1e6
                    row.update({k: v / steps * 1e6 for k, v in base.phase_s.items()})
                else:
                    start = time.perf_counter()
                    for _ in range(copies):
                        floor()
                    row["copy_floor"] = (time.perf_counter() - start) / copies * 1e6
            rounds.append(row)
    finally:
        if enabled:
            gc.enable()
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def _time_phases(
    base: Prisample, floor: CopyFloor, config: dict[str, Any], policy: QuietPolicy
) -> dict[str, Any]:
    """prisample's step phase by phase against the copy floor: per phase its µs (median over
    passes), per pass, and its ratio to the floor per pass."""
    passes, load = [], []
    for _ in range(config["passes"]):
        times, others, steal = quietest(
            lambda: _phase_pass(base, floor, config["reps"], config["block_s"]), policy
        )
        passes.append(times)
        load.append({"others_cpus": others, "steal_cpus": steal})
    out: dict[str, Any] = {"load": load}
    for key in (*PHASES, "step", "copy_floor"):
        mine = [p[key] for p in passes]
        out[key] = {"us": statistics.median(mine), "us_per_pass": mine}
        if key != "copy_floor":
            out[key]["ratio_to_copy_floor"] = _ratio(passes, key, "copy_floor")
    out["add"]["us_per_transition"] = out["add"]["us"] / ENVS
    return out


def _time_vector_add(base: Prisample, n: int, config: dict[str, Any], policy: QuietPolicy) -> dict[str, Any]:
    """``add_many`` of one ``vector_envs``-environment vector step (one stream per environment) on
    a memory of ``n`` filled first, interleaved with the base memory's 4-env add: µs per call and
    per transition."""
    envs = int(config["vector_envs"])
    period = max(2, config["period"] * ENVS // envs)  # as many transitions as the 4-env stream
    wide = Prisample(make_stream(period, seed=1, envs=envs), n)
    started = time.perf_counter()
    wide.fill(n)
    fill_s = time.perf_counter() - started
    cases: dict[str, Callable[[], object]] = {"vector": wide.add, "base": base.add}
    passes, load = [], []
    for _ in range(config["passes"]):
        times, others, steal = measure_quiet(
            cases, reps=config["reps"], block_s=config["block_s"], policy=policy
        )
        passes.append(times)
        load.append({"others_cpus": others, "steal_cpus": steal})
    per_transition = [p["vector"] / envs for p in passes]
    base_per_transition = [p["base"] / ENVS for p in passes]
    out = {
        "envs": envs,
        "n": n,
        "method": "add_many",
        "fill_s": fill_s,
        "us_per_call": statistics.median(p["vector"] for p in passes),
        "us_per_call_per_pass": [p["vector"] for p in passes],
        "us_per_transition": statistics.median(per_transition),
        "us_per_transition_per_pass": per_transition,
        "base_envs": ENVS,
        "base_us_per_transition": statistics.median(base_per_transition),
        "base_us_per_transition_per_pass": base_per_transition,
        "load": load,
    }
    del wide
    gc.collect()
    return out


def size_targets(block: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The step's bounds (:data:`STEP_BOUNDS`) at one size, from the per-pass medians: measured, met."""
    libs, vector = block["libraries"], block.get("vector_add", {})
    measured = {
        "step_over_copy_floor": libs.get("prisample", {}).get("ratio_to_copy_floor", {}).get("median"),
        "cpprb_over_prisample": libs.get("cpprb", {}).get("ratio_to_prisample", {}).get("median"),
        "add_us": block.get("phases", {}).get("add", {}).get("us"),
        "vector_add_us_per_transition": vector.get("us_per_transition"),
    }
    out: dict[str, dict[str, Any]] = {}
    for key, value in measured.items():
        if value is not None:
            bound = STEP_BOUNDS[key]
            met = value >= bound if key == "cpprb_over_prisample" else value <= bound
            out[key] = {"bound": bound, "measured": value, "met": bool(met)}
    return out


def run_size(
    n: int, stream: Stream, config: dict[str, Any], peers: tuple[str, ...], policy: QuietPolicy
) -> dict[str, Any]:
    result: dict[str, Any] = {"n": n, "loadavg_start": os.getloadavg(), "libraries": {"prisample": {}}}
    result["variants"] = {}
    libs = result["libraries"]
    contenders: dict[str, Contender] = {}
    floor: CopyFloor | None = None
    builders: dict[str, Callable[[], Contender]] = {"prisample": lambda: Prisample(stream, n)}
    if "cpprb" in peers:
        libs["cpprb"] = {}
        builders["cpprb"] = lambda: Cpprb(stream, n)
    if "TorchRL" in peers:
        n_t, disk_note = torchrl_capacity(n, config.get("scratch"), config.get("disk_margin_gb", 10.0))
        libs["TorchRL"] = {"n_measured": n_t}
        if disk_note:
            libs["TorchRL"]["note"] = disk_note
        storage = n_t * torchrl_bytes_per_transition()
        if storage > _mem_total():
            libs["TorchRL"]["exceeds_ram"] = (
                f"the memmap ({storage / 1e9:.1f} GB) exceeds RAM ({_mem_total() / 1e9:.1f} GB): "
                "sampled stacks are read from disk"
            )
        if n_t >= 2 * BATCH:
            builders["TorchRL"] = lambda: TorchRL(stream, n_t, config.get("scratch"))
    try:
        for name, build in builders.items():
            entry = libs.setdefault(name, {})
            entry.setdefault("n_measured", n)
            started = time.perf_counter()
            try:
                contender = build()
                contender.fill(entry["n_measured"])
            except Exception as error:  # a peer that fails is recorded, the run goes on
                entry["error"] = f"{type(error).__name__}: {error}"
                log(f"  {name}: {entry['error']}")
                continue
            entry["fill_s"] = time.perf_counter() - started
            contenders[name] = contender
            log(f"  {name}: filled {entry['n_measured']} transitions in {entry['fill_s']:.1f} s")
        extra: dict[str, Callable[[], object]] = {}
        first = contenders.get("prisample")
        if isinstance(first, Prisample):
            floor = CopyFloor(first)
            extra["copy_floor"] = floor
        passes, load = _time_group(contenders, config, policy, extra)
        result["load"] = load
        for name, contender in contenders.items():
            libs[name].update(_summary(passes, name))
            if floor is not None:
                libs[name]["ratio_to_copy_floor"] = _ratio(passes, name, "copy_floor")
            libs[name]["stacks_exact"] = contender.stacks_exact()
            libs[name].update(contender.info())
        if floor is not None:
            mine = [p["copy_floor"] for p in passes]
            result["copy_floor"] = {"us": statistics.median(mine), "us_per_pass": mine, **floor.info()}
            log(f"  copy floor: {result['copy_floor']['us']:.1f} µs, {floor.frames_per_batch:g} frames")
    finally:
        for name in [name for name in contenders if name != "prisample"]:
            contenders.pop(name).close()
        gc.collect()
    base = contenders.get("prisample")
    if isinstance(base, Prisample) and floor is not None:
        result["phases"] = _time_phases(base, floor, config, policy)
        log("  phases, µs: " + ", ".join(f"{k} {result['phases'][k]['us']:.1f}" for k in (*PHASES, "step")))
    for vname, variant in VARIANTS.items():
        why = variant_available(variant)
        if why is None and base is not None:
            try:
                other = Prisample(stream, n, variant)
                other.fill(n)
            except TypeError as error:
                why = f"not available in this version: {error}"
            else:
                passes, load = _time_group({"prisample": base, vname: other}, config, policy)
                entry = _summary(passes, vname)
                entry["load"] = load
                entry["stacks_exact"] = other.stacks_exact()
                entry.update(other.info())
                result["variants"][vname] = entry
                del other
                gc.collect()
                continue
        result["variants"][vname] = {"skipped": why or "prisample failed to build"}
    if isinstance(base, Prisample) and config.get("vector_envs"):
        try:
            result["vector_add"] = _time_vector_add(base, n, config, policy)
        except Exception as error:  # recorded, the run goes on
            result["vector_add"] = {"error": f"{type(error).__name__}: {error}"}
        log(f"  vector add: {result['vector_add']}")
    result["targets"] = size_targets(result)
    result["loadavg_end"] = os.getloadavg()
    return result


# -- memory per transition, in a fresh process -------------------------------------------------
def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def memory_child(name: str, n: int, scratch: str | None) -> dict[str, Any]:
    """In this process: anonymous resident bytes (and file bytes on disk) per transition that
    building and filling the memory adds; imports and a tiny instance come first."""
    stream = make_stream(64)
    build: Callable[[int], Contender] = {
        "prisample": lambda m: Prisample(stream, m),
        "cpprb": lambda m: Cpprb(stream, m),
        "TorchRL": lambda m: TorchRL(stream, m, scratch),
    }[name]
    warm = build(256)
    warm.fill(256)
    warm.step()
    warm.close()
    del warm
    gc.collect()
    before = _status_kb("RssAnon")
    contender = build(n)
    contender.fill(n)
    gc.collect()
    out: dict[str, Any] = {"n": n, "rss_anon_bytes_per_transition": (_status_kb("RssAnon") - before) / n}
    out.update(contender.info())
    contender.close()
    return out


def memory_per_transition(name: str, n: int, scratch: str | None, timeout: float = 1800.0) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "benchmarks.replay_step", "--memory-child", name, str(n)]
    if scratch:
        cmd += ["--scratch", scratch]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


# -- run, tables --------------------------------------------------------------------------------
def available_peers() -> tuple[tuple[str, ...], dict[str, str]]:
    peers, missing = [], {}
    for name, module in (("cpprb", "cpprb"), ("TorchRL", "torchrl")):
        try:
            __import__(module)
            peers.append(name)
        except Exception as error:  # record, do not fail
            missing[name] = f"{type(error).__name__}: {error}"
    return tuple(peers), missing


def run(config: dict[str, Any], command: str, peers: tuple[str, ...] | None = None) -> dict[str, Any]:
    import torch

    from benchmarks.run_all import machine

    torch.set_num_threads(1)
    policy = QuietPolicy(attempts=config["quiet_attempts"])
    started = time.perf_counter()
    found, missing = available_peers()
    peers = found if peers is None else tuple(p for p in peers if p in found)
    results: dict[str, Any] = {
        "benchmark": "replay_step",
        "command": command,
        "config": config,
        "machine": machine(),
        "loadavg_start": os.getloadavg(),
        "workload": {
            "envs": ENVS,
            "frame_stack": STACK,
            "frame": list(FRAME),
            "dtype": "uint8",
            "batch": BATCH,
            "alpha": ALPHA,
            "beta": BETA,
            "mean_episode": EPISODE,
            "step": "add the 4 transitions of one vector step, sample 32 with obs and next_obs stacks, "
            "update 32 priorities",
            "copy_floor": "the frames sample(32) gathers (obs and next_obs share all but one frame), read "
            "from prisample's frame pool at the rows of real draws with one np.take into a preallocated "
            "array",
            "vector_envs": config.get("vector_envs", 0),
        },
        "torch_threads": torch.get_num_threads(),
        "step_bounds": STEP_BOUNDS,
        "peers_missing": missing,
        "sizes": [],
    }
    log(f"machine: {results['machine']['cpu']}, load average {results['loadavg_start']}")
    stream = make_stream(config["period"], seed=0)
    for n in config["sizes"]:
        log(f"N = {n}")
        results["sizes"].append(run_size(n, stream, config, peers, policy))
    results["memory"] = {}
    if config["memory_n"]:
        log(f"memory per transition at N = {config['memory_n']} (fresh processes)")
        for name in ("prisample", *peers):
            results["memory"][name] = memory_per_transition(name, config["memory_n"], config.get("scratch"))
            log(f"  {name}: {results['memory'][name]}")
    results["quiet_policy"] = {
        "max_others": policy.max_others,
        "attempts": policy.attempts,
        "retries": policy.retries,
        "waited_s": policy.waited_s,
    }
    results["loadavg_end"] = os.getloadavg()
    results["elapsed_s"] = time.perf_counter() - started
    return results


def _n(n: int) -> str:
    if n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return f"10^{len(str(n)) - 1}" if str(n).strip("0") == "1" else f"{n:,}"


def run_facts(results: dict[str, Any]) -> str:
    """The run behind the docs' tables (``docs/benchmarks.md``): machine, versions, date, duration."""
    from benchmarks.report import facts

    m = results["machine"]
    v = m["versions"]
    return facts(
        [
            (
                "Machine",
                f"{m['cpu']}, numpy {v['numpy']}, torch {v['torch']}, cpprb {v['cpprb']}, "
                f"torchrl {v['torchrl']}",
            ),
            ("Run", f"{m['date'][:10]}, {results['elapsed_s'] / 60:.0f} min"),
        ]
    )


def libraries_table(results: dict[str, Any]) -> str:
    """One row per size and library: µs per replay step, its spread, the ratio, bytes per transition."""
    memory = results.get("memory", {})
    lines = [
        "| N | library | N measured | µs per replay step | per pass | prisample faster by "
        "| bytes per transition | stacks exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for block in results["sizes"]:
        for name, r in block["libraries"].items():
            if "us_per_step" not in r:
                why = r.get("error") or r.get("note", "not measured")
                lines.append(f"| {_n(block['n'])} | {name} | {r.get('n_measured', '–')} | {why} | | | | |")
                continue
            spread = f"{min(r['us_per_pass']):,.0f}–{max(r['us_per_pass']):,.0f}"
            ratio = r.get("ratio_to_prisample")
            faster = (
                "–"
                if ratio is None
                else (f"{ratio['median']:.2f}× ({min(ratio['per_pass']):.2f}–{max(ratio['per_pass']):.2f})")
            )
            mem = memory.get(name, {})
            size = mem.get("nbytes_per_transition", mem.get("rss_anon_bytes_per_transition"))
            if "disk_bytes_per_transition" in mem:
                size = (size or 0) + mem["disk_bytes_per_transition"]
            size_s = "–" if size is None else f"{size:,.0f}"
            n_meas = _n(r["n_measured"]) if r["n_measured"] in (block["n"],) else f"{r['n_measured']:,}"
            lines.append(
                f"| {_n(block['n'])} | {name} | {n_meas} | {r['us_per_step']:,.0f} | {spread} | {faster} "
                f"| {size_s} | {'yes' if r['stacks_exact'] else 'no'} |"
            )
    floors = floor_table(results)
    return "\n".join(lines) + ("\n\n" + floors if floors else "")


def _spread(values: list[float], fmt: str = ",.1f") -> str:
    return f"{min(values):{fmt}}–{max(values):{fmt}}"


def _times(ratio: dict[str, Any] | None) -> str:
    if ratio is None:
        return "–"
    return f"{ratio['median']:.2f}× ({_spread(ratio['per_pass'], '.2f')})"


def floor_table(results: dict[str, Any]) -> str:
    """prisample's step phase by phase, and every library's step, against the copy floor (issue
    23); empty for results without a floor (runs before it)."""
    lines = [
        "| N | part | µs | per pass | × copy floor (per pass) |",
        "|---|---|---|---|---|",
    ]
    workload = results.get("workload", {})
    for block in results["sizes"]:
        n, floor, phases = _n(block["n"]), block.get("copy_floor"), block.get("phases")
        if floor is None:
            continue
        frames = f"{floor['frames_per_batch']:g}"
        envs, batch = workload.get("envs", ENVS), workload.get("batch", BATCH)
        labels = {
            "add": f"prisample add ({envs}-env vector step)",
            "sample": f"prisample sample {batch} (draw, gather, weights)",
            "update": f"prisample update {batch}",
            "step": "prisample step, phases clocked",
            "copy_floor": f"copy floor ({frames} frames, one take)",
        }
        for key, label in labels.items() if phases else ():
            r = phases[key]
            lines.append(
                f"| {n} | {label} | {r['us']:,.1f} | {_spread(r['us_per_pass'])} "
                f"| {_times(r.get('ratio_to_copy_floor'))} |"
            )
        for name, r in block["libraries"].items():
            if "ratio_to_copy_floor" in r:
                lines.append(
                    f"| {n} | {name} step, with the libraries | {r['us_per_step']:,.1f} "
                    f"| {_spread(r['us_per_pass'])} | {_times(r['ratio_to_copy_floor'])} |"
                )
        lines.append(
            f"| {n} | copy floor ({frames} frames, one take), with the libraries | {floor['us']:,.1f} "
            f"| {_spread(floor['us_per_pass'])} | – |"
        )
        vector = block.get("vector_add", {})
        if "us_per_transition" in vector:
            per_pass = _spread(vector["us_per_transition_per_pass"])
            lines.append(
                f"| {n} | add_many of a {vector['envs']}-env vector step, per transition "
                f"| {vector['us_per_transition']:,.1f} | {per_pass} | – |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""


def variants_table(results: dict[str, Any]) -> str:
    """One row per size and prisample variant (n-step, extras): µs per step and × the base step."""
    lines = [
        "| N | prisample variant | µs per replay step | × base prisample (per pass) |",
        "|---|---|---|---|",
    ]
    for block in results["sizes"]:
        for name, r in block["variants"].items():
            if name not in VARIANTS:  # a variant of older runs that this version no longer has
                continue
            if "skipped" in r:
                lines.append(f"| {_n(block['n'])} | {name} | {r['skipped']} | |")
            else:
                ratio = r["ratio_to_prisample"]
                lines.append(
                    f"| {_n(block['n'])} | {name} | {r['us_per_step']:,.0f} | {ratio['median']:.2f}× "
                    f"({min(ratio['per_pass']):.2f}–{max(ratio['per_pass']):.2f}) |"
                )
    return "\n".join(lines)


TARGETS = {"cpprb": 1.0, "TorchRL": 10.0}  # prisample faster by at least this
VARIANT_LIMIT = 1.3  # n = 3 and extras: at most this many times the base step


def targets(results: dict[str, Any]) -> str:
    """One row per target (:data:`TARGETS`, :data:`VARIANT_LIMIT`, and the step's bounds in runs
    that measured them), met or missed, from the per-pass median ratios."""
    lines = ["| N | against | target | measured | met |", "|---|---|---|---|---|"]
    for block in results["sizes"]:
        n = _n(block["n"])
        for peer, target in TARGETS.items():
            ratio = block["libraries"].get(peer, {}).get("ratio_to_prisample")
            if ratio is not None:
                met = "yes" if ratio["median"] >= target else "**no**"
                lines.append(
                    f"| {n} | {peer} | prisample ≥ {target:g}× faster | {ratio['median']:.2f}× | {met} |"
                )
        for name, r in block["variants"].items():
            if name in VARIANTS and "ratio_to_prisample" in r:
                ratio = r["ratio_to_prisample"]["median"]
                met = "yes" if ratio <= VARIANT_LIMIT else "**no**"
                lines.append(f"| {n} | {name} | ≤ {VARIANT_LIMIT:g}× the base step | {ratio:.2f}× | {met} |")
        # the step's bounds, in runs that measured them, recomputed against this file's bounds
        for key, t in (size_targets(block) if "targets" in block else {}).items():
            against, bound, shown = {
                "step_over_copy_floor": (
                    "copy floor",
                    f"prisample step ≤ {t['bound']:g}× the floor",
                    f"{t['measured']:.2f}×",
                ),
                "cpprb_over_prisample": (
                    "cpprb",
                    f"prisample ≥ {t['bound']:g}× faster",
                    f"{t['measured']:.2f}×",
                ),
                "add_us": (
                    f"add, {ENVS}-env vector step",
                    f"≤ {t['bound']:g} µs per call",
                    f"{t['measured']:.1f} µs",
                ),
                "vector_add_us_per_transition": (
                    f"add_many, {block.get('vector_add', {}).get('envs')} envs",
                    f"≤ {t['bound']:g} µs per transition",
                    f"{t['measured']:.1f} µs",
                ),
            }[key]
            lines.append(f"| {n} | {against} | {bound} | {shown} | {'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few passes (smoke run)")
    parser.add_argument("--sizes", type=int, nargs="+", help="memory capacities N (transitions)")
    parser.add_argument("--passes", type=int, help="interleaved passes")
    parser.add_argument("--peers", nargs="*", help="peers to run (default: cpprb and TorchRL when installed)")
    parser.add_argument(
        "--memory-n", type=int, help="capacity of the bytes-per-transition measurement (0: none)"
    )
    parser.add_argument("--scratch", help="folder for TorchRL's memmap (default: the temp folder)")
    parser.add_argument("--disk-margin-gb", type=float, default=10.0, help="disk left free by the memmap")
    parser.add_argument(
        "--vector-envs",
        type=int,
        help=f"environments of the vector step whose add_many is timed (default {VECTOR_ENVS}; 0: none)",
    )
    parser.add_argument("--out", type=Path, help="JSON results (default: none)")
    parser.add_argument("--from-json", type=Path, help="print the table of saved results, no timing")
    parser.add_argument("--memory-child", nargs=2, metavar=("LIB", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]), args.scratch)))
        return
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        config = dict(QUICK if args.quick else FULL)
        if args.sizes:
            config["sizes"] = args.sizes
            config["memory_n"] = min(config["memory_n"], min(args.sizes))
        if args.passes:
            config["passes"] = args.passes
        if args.memory_n is not None:
            config["memory_n"] = args.memory_n
        if args.vector_envs is not None:
            config["vector_envs"] = args.vector_envs
        config["scratch"] = args.scratch
        config["disk_margin_gb"] = args.disk_margin_gb
        command = "OMP_NUM_THREADS=1 python -m benchmarks.replay_step " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        results = run(config, command.strip(), None if args.peers is None else tuple(args.peers))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1, default=float) + "\n")
            log(f"wrote {args.out}")
    print(libraries_table(results) + "\n\n" + variants_table(results))


if __name__ == "__main__":
    main()
