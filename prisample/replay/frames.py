"""Frame pool: every distinct frame stored once, reference-counted, stacks rebuilt by gather.

A stack of ``frame_stack`` frames (Atari: four 84x84 frames) is held as ``frame_stack`` pool rows.
:meth:`FramePool.store_rows` stores each transition's ``s_t`` and ``s_{t+1}`` stacks for a stream, sharing
every frame whose bytes equal a frame of the stream's last stacks (or of the other stack), and
writes the rows into the caller's per-transition row tables::

    frame pool   rows:  ... | f_{t-3} | f_{t-2} | f_{t-1} | f_t | f_{t+1} | ...   (one copy each)
                               ▲          ▲         ▲       ▲       ▲
    obs_rows[i]  = [row(f_{t-3}), row(f_{t-2}), row(f_{t-1}), row(f_t)]           s_t
    next_rows[i] = [row(f_{t-2}), row(f_{t-1}), row(f_t), row(f_{t+1})]           s_{t+1}

Each row carries a reference count (the stacks in the tables and the streams' last stacks that
use it) and returns to a free list when it reaches zero, so a stored stack can never see a frame
that was overwritten.  The pool does not decide which transitions leave: :meth:`FramePool.store_rows` may
release the stacks of the table entries the caller names as reclaimable (oldest first), and reports
how many it released.
"""

from __future__ import annotations

import math
from typing import Any, Union

import numba
import numpy as np
import numpy.typing as npt
import torch

from prisample.replay.device import TorchFrames

__all__ = ["POOL_ARRAYS", "FramePool", "FrameStorage", "NumpyFrames", "reserve_rows"]


IntArray = npt.NDArray[np.int64]
FrameStorage = Union["NumpyFrames", TorchFrames]
_STAGE_RESERVE = 2  # frames one store may stage, per frame of a stack

# The pool state's arrays, each the attribute ``_<name>``.
POOL_ARRAYS = ("frames", "refs", "free", "stream_obs", "stream_next", "stream_live")


@numba.njit(cache=True)
def _release(refs: np.ndarray, free: np.ndarray, nfree: int, rows: np.ndarray) -> int:
    for j in range(rows.shape[0]):
        row = rows[j]
        refs[row] -= 1
        if refs[row] == 0:
            free[nfree] = row
            nfree += 1
    return nfree


@numba.njit(cache=True)
def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    for i in range(a.shape[0]):  # noqa: SIM110 (numba compiles the loop, not a generator)
        if a[i] != b[i]:
            return False
    return True


@numba.njit(cache=True)
def _shifted(cache: np.ndarray, slots: np.ndarray, stack: np.ndarray) -> bool:
    """Whether the cached frames ``slots[1:]`` equal ``stack[:-1]`` (a stack moved on by one frame)."""
    for j in range(stack.shape[0] - 1):  # noqa: SIM110 (numba compiles the loop, not a generator)
        if not _equal(cache[slots[j + 1]], stack[j]):
            return False
    return True


@numba.njit(cache=True)
def _plan_full(stack: np.ndarray, codes: np.ndarray, sources: np.ndarray, n_new: int, which: int) -> int:
    """Codes for a stack stored anew; repeated frames (a reset stack) share one row."""
    for j in range(stack.shape[0]):
        if j > 0 and _equal(stack[j], stack[j - 1]):
            codes[j] = codes[j - 1]
        else:
            sources[n_new, 0], sources[n_new, 1] = which, j
            n_new += 1
            codes[j] = -n_new
    return n_new


@numba.njit(cache=True)
def _store_kernel(
    frames: np.ndarray,
    stage: np.ndarray,
    stage_rows: np.ndarray,
    nstage: int,
    tables: tuple[np.ndarray, ...],
    nfree: int,
    obs: np.ndarray,
    next_obs: np.ndarray,
    stream: int,
    tail: int,
    head: int,
    released: np.ndarray,
) -> tuple[int, int, int, int, int, bool]:
    """Store one transition's stacks (frames as machine words, one row per frame) in table entry
    ``head`` (row ``head % len(table)``); ``tables`` are the pool's and the caller's arrays
    ``(refs, free, stream_obs, stream_next, stream_live, cache, cache_obs, cache_next, obs_rows,
    next_rows)``.

    A pool row is shared when its bytes equal the frame: ``obs`` equal to the stream's last
    ``next_obs`` or its last ``obs`` moved on by one frame, ``next_obs`` equal to ``obs`` (or the
    last ``next_obs``) moved on by one frame, repeated frames in a stack.  The stream's last
    stacks are compared as held in ``cache[stream]`` (slots ``cache_obs[stream]``,
    ``cache_next[stream]``), never in the pool, which is only written: new frames go to
    ``frames[row]`` when ``frames`` has rows, else to ``stage`` with their rows in ``stage_rows``
    (a row staged again overwrites its staged frame).  Codes ``>= 0`` are shared rows, ``-i-1``
    the ``i``-th new frame.  Releases table entries ``tail, tail + 1, ...`` (below ``head``): the
    one being written, then more until the new frames fit.  Returns ``(table row written, nfree,
    tail, number released, nstage, obs continued the stream)``.
    """
    refs, free, stream_obs, stream_next, stream_live, cache, cache_obs, cache_next, obs_rows, next_rows = (
        tables
    )
    stack, capacity = obs.shape[0], obs_rows.shape[0]
    live = stream_live[stream]
    last_obs, last_next = stream_obs[stream], stream_next[stream]
    held, held_obs, held_next = cache[stream], cache_obs[stream], cache_next[stream]
    obs_codes = np.empty(stack, dtype=np.int64)
    next_codes = np.empty(stack, dtype=np.int64)
    obs_slots = np.empty(stack, dtype=np.int64)  # cache slot of each shared frame
    next_slots = np.empty(stack, dtype=np.int64)
    sources = np.empty((2 * stack, 2), dtype=np.int64)  # (0: obs / 1: next_obs, frame index)
    n_new = 0
    continued = live
    if live:
        for j in range(stack):
            if not _equal(held[held_next[j]], obs[j]):
                continued = False
                break
    if continued:
        obs_codes[:] = last_next
        obs_slots[:] = held_next
    elif live and stack > 1 and _shifted(held, held_obs, obs):  # n-step: obs moved on by one
        obs_codes[: stack - 1] = last_obs[1:]
        obs_slots[: stack - 1] = held_obs[1:]
        sources[0, 0], sources[0, 1] = 0, stack - 1
        n_new = 1
        obs_codes[stack - 1] = -1
        continued = True
    else:
        n_new = _plan_full(obs, obs_codes, sources, n_new, 0)
    one_new = True  # next_obs = a stack moved on by one frame: only its newest frame is new
    for j in range(stack - 1):
        if not _equal(next_obs[j], obs[j + 1]):
            one_new = False
            break
    if one_new:
        next_codes[: stack - 1] = obs_codes[1:]
        next_slots[: stack - 1] = obs_slots[1:]
    elif live and _shifted(held, held_next, next_obs):  # n-step: last next_obs moved on by one
        next_codes[: stack - 1] = last_next[1:]
        next_slots[: stack - 1] = held_next[1:]
        one_new = True
    else:
        n_new = _plan_full(next_obs, next_codes, sources, n_new, 1)
    if one_new:
        sources[n_new, 0], sources[n_new, 1] = 1, stack - 1
        n_new += 1
        next_codes[stack - 1] = -n_new
    n_released = 0
    while tail < head and (head - tail >= capacity or nfree < n_new):
        entry = tail % capacity
        nfree = _release(refs, free, nfree, obs_rows[entry])
        nfree = _release(refs, free, nfree, next_rows[entry])
        released[n_released] = entry
        n_released += 1
        tail += 1
    if nfree < n_new:  # never: the pool reserves two stacks per stream and two for this transition
        raise RuntimeError("frame pool exhausted")
    # The new stacks hold at most 2·stack distinct frames, so the cache's 2·stack slots take the
    # new frames in slots no shared frame of the new stacks uses.
    used = np.zeros(held.shape[0], dtype=np.bool_)
    for j in range(stack):
        if obs_codes[j] >= 0:
            used[obs_slots[j]] = True
        if next_codes[j] >= 0:
            used[next_slots[j]] = True
    rows = np.empty(n_new, dtype=np.int64)
    new_slots = np.empty(n_new, dtype=np.int64)
    slot = 0
    direct = frames.shape[0] > 0
    for i in range(n_new):
        nfree -= 1
        rows[i] = free[nfree]
        frame = obs[sources[i, 1]] if sources[i, 0] == 0 else next_obs[sources[i, 1]]
        if direct:
            frames[rows[i]] = frame
        else:
            at = nstage
            for s in range(nstage):
                if stage_rows[s] == rows[i]:
                    at = s
                    break
            stage[at] = frame
            stage_rows[at] = rows[i]
            if at == nstage:
                nstage += 1
        while used[slot]:
            slot += 1
        used[slot] = True
        new_slots[i] = slot
        held[slot] = frame
    entry = head % capacity
    for j in range(stack):
        code = obs_codes[j]
        obs_rows[entry, j] = code if code >= 0 else rows[-code - 1]
        held_obs[j] = obs_slots[j] if code >= 0 else new_slots[-code - 1]
        code = next_codes[j]
        next_rows[entry, j] = code if code >= 0 else rows[-code - 1]
        held_next[j] = next_slots[j] if code >= 0 else new_slots[-code - 1]
        refs[obs_rows[entry, j]] += 2  # the transition's reference and the stream's
        refs[next_rows[entry, j]] += 2
    if live:
        nfree = _release(refs, free, nfree, last_obs)
        nfree = _release(refs, free, nfree, last_next)
    stream_obs[stream] = obs_rows[entry]
    stream_next[stream] = next_rows[entry]
    stream_live[stream] = True
    return entry, nfree, tail, n_released, nstage, continued


@numba.njit(cache=True)
def _store_rows(
    frames: np.ndarray,
    stage: np.ndarray,
    stage_rows: np.ndarray,
    nstage: int,
    stage_room: int,
    tables: tuple[np.ndarray, ...],
    nfree: int,
    obs: np.ndarray,
    next_obs: np.ndarray,
    streams: np.ndarray,
    start: int,
    tail: int,
    head: int,
    released: np.ndarray,
    nreleased: int,
    slots: np.ndarray,
    until: np.ndarray,
    continued: np.ndarray,
    had_last: np.ndarray,
) -> tuple[int, int, int, int, int]:
    """:func:`_store_kernel` for rows ``start, start + 1, ...`` (row ``i`` as table entry
    ``head + i`` on stream ``streams[i]``), in order, until every row is stored or, when frames
    are staged (``stage_room > 0``), the staging buffer may not take another row's new frames.
    Fills ``slots``, ``until`` (releases so far), ``continued`` and ``had_last`` per row.
    Returns ``(rows stored so far, nfree, tail, nstage, releases so far)``."""
    stack = obs.shape[1]
    i = start
    while i < obs.shape[0]:
        if stage_room > 0 and nstage + _STAGE_RESERVE * stack > stage_room:
            break
        stream = streams[i]
        had_last[i] = tables[4][stream]  # the stream's last stacks are live
        entry, nfree, tail, k, nstage, cont = _store_kernel(
            frames,
            stage,
            stage_rows,
            nstage,
            tables,
            nfree,
            obs[i],
            next_obs[i],
            stream,
            tail,
            head + i,
            released[nreleased:],
        )
        nreleased += k
        slots[i], until[i], continued[i] = entry, nreleased, cont
        i += 1
    return i, nfree, tail, nstage, nreleased


def _to_host(frames: Any) -> npt.NDArray[Any]:
    return frames.cpu().numpy() if isinstance(frames, torch.Tensor) else np.asarray(frames)


class NumpyFrames:
    """Frame storage in a host numpy array ``(frame_capacity, *frame_shape)``: the pool's kernel
    writes new frames straight into it (:attr:`direct`, its machine-word view)."""

    def __init__(
        self, frame_capacity: int, frame_shape: tuple[int, ...], dtype: np.dtype[Any], word: np.dtype[Any]
    ) -> None:
        self.frames = np.zeros((frame_capacity, *frame_shape), dtype=dtype)
        self.direct: npt.NDArray[Any] | None = self.frames.reshape(frame_capacity, -1).view(word)
        self.stage_frames = 0

    @property
    def nbytes(self) -> int:
        return self.frames.nbytes

    def stage(self) -> tuple[npt.NDArray[Any], IntArray]:  # never called: frames are written directly
        raise NotImplementedError

    def commit(self, n: int) -> None:
        pass

    def gather(self, rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
        frames: npt.NDArray[Any] = self.frames[rows]
        return frames

    def to_numpy(self) -> npt.NDArray[Any]:
        """The live array (copy before keeping it)."""
        return self.frames

    def assign(self, frames: npt.NDArray[Any]) -> None:
        self.frames[...] = frames

    def __getstate__(self) -> dict[str, Any]:
        return {"frames": self.frames, "word": None if self.direct is None else self.direct.dtype}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.frames = state["frames"]  # a view of frames: pickling and deepcopy would detach it
        self.direct = self.frames.reshape(self.frames.shape[0], -1).view(state["word"])
        self.stage_frames = 0


def reserve_rows(frame_stack: int, num_streams: int) -> int:
    """Rows the pool always keeps: the streams' last stacks and one new transition's two stacks."""
    return 2 * frame_stack * (num_streams + 1)


class FramePool:
    """``frame_capacity`` frames of ``frame_shape`` and ``dtype``, each held once with a reference
    count, and per stream the rows of its last ``obs`` and ``next_obs`` stacks (see the module).

    Frames are compared and copied as the widest machine words that divide their size
    (:meth:`as_words`).  Reading: :meth:`gather` (frames of any array of rows).  Writing:
    :meth:`store_rows` (transitions' two stacks each, releasing the stacks of the entries it
    evicts).
    """

    def __init__(
        self,
        frame_capacity: int,
        frame_shape: tuple[int, ...],
        dtype: np.dtype[Any],
        frame_stack: int,
        num_streams: int,
        device: torch.device | None = None,
    ) -> None:
        self.frame_capacity = frame_capacity
        self.frame_shape = frame_shape
        self.dtype = dtype
        self.frame_stack = frame_stack
        self.num_streams = num_streams
        self.device = device
        f, stack = frame_capacity, frame_stack
        self.frame_nbytes = dtype.itemsize * math.prod(frame_shape)
        words = (np.dtype(np.uint64), np.dtype(np.uint32), np.dtype(np.uint16), np.dtype(np.uint8))
        self._word = next(w for w in words if self.frame_nbytes % w.itemsize == 0)
        n_words = self.frame_nbytes // self._word.itemsize
        self.storage: FrameStorage
        """Where the frames live: :class:`NumpyFrames` (``device=None``) or a
        :class:`~prisample.replay.device.TorchFrames` on ``device``."""
        if device is None:
            self.storage = NumpyFrames(f, frame_shape, dtype, self._word)
        else:
            stage = max(64, 4 * _STAGE_RESERVE * stack)
            self.storage = TorchFrames(f, frame_shape, dtype, self._word, device, stage)
        self._nstage = 0  # frames staged for the storage, not yet written
        self._no_frames = np.empty((0, n_words), dtype=self._word)  # the kernel's "staged" marker
        self._no_rows = np.empty(0, dtype=np.int64)
        self._refs = np.zeros(f, dtype=np.int32)
        self._free = np.arange(f - 1, -1, -1, dtype=np.int32)  # a stack: rows 0, 1, ... go first
        self._nfree = f
        self._stream_obs = np.zeros((num_streams, stack), dtype=np.int32)
        self._stream_next = np.zeros((num_streams, stack), dtype=np.int32)
        self._stream_live = np.zeros(num_streams, dtype=np.bool_)
        # The dedup cache: per stream the frames of its last two stacks (2·stack slots) and the
        # slot of each of their frames, so that deduplication never reads the storage.
        self._cache = np.zeros((num_streams, 2 * stack, n_words), dtype=self._word)
        self._cache_obs = np.tile(np.arange(stack, dtype=np.int64), (num_streams, 1))
        self._cache_next = self._cache_obs + stack

    # -- reads ----------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Rows on the free list."""
        return self._nfree

    @property
    def num_used(self) -> int:
        """Rows in use (by the tables' stacks and the streams' last stacks)."""
        return self.frame_capacity - self._nfree

    @property
    def nbytes(self) -> int:
        """Bytes of the frames (host or device) and the bookkeeping, dedup cache included."""
        return self.storage.nbytes + sum(a.nbytes for a in self._bookkeeping())

    def _bookkeeping(self) -> tuple[npt.NDArray[Any], ...]:
        """The arrays beside the frames, in the order the store kernel takes them."""
        return (
            self._refs,
            self._free,
            self._stream_obs,
            self._stream_next,
            self._stream_live,
            self._cache,
            self._cache_obs,
            self._cache_next,
        )

    def gather(self, rows: npt.NDArray[Any]) -> Any:
        """The frames of ``rows`` (any shape of row numbers): shape ``(*rows.shape, *frame_shape)``,
        a numpy array, or a tensor on the pool's device."""
        self.flush()
        return self.storage.gather(rows)

    def as_words(self, stacks: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """C-contiguous stacks of ``dtype`` (``(..., frame_stack, *frame_shape)``) viewed as machine
        words ``(..., frame_stack, words per frame)``: what :meth:`store_rows` takes."""
        lead = stacks.shape[: stacks.ndim - len(self.frame_shape) - (self.frame_stack > 1)]
        return stacks.reshape(*lead, self.frame_stack, -1).view(self._word)

    # -- writes ---------------------------------------------------------------------------------
    def store_rows(
        self,
        obs_words: npt.NDArray[Any],
        next_words: npt.NDArray[Any],
        streams: IntArray,
        start: int,
        obs_rows: npt.NDArray[np.int32],
        next_rows: npt.NDArray[np.int32],
        tail: int,
        head: int,
        released: IntArray,
        nreleased: int,
        out: tuple[IntArray, IntArray, npt.NDArray[np.bool_], npt.NDArray[np.bool_]],
    ) -> tuple[int, int, int]:
        """Store rows ``start, start + 1, ...`` of ``s_t``/``s_{t+1}`` (:meth:`as_words`, leading
        axis ``n``): row ``i`` of stream ``streams[i]`` in entry ``head + i`` of the row tables
        ``obs_rows``/``next_rows`` (row ``(head + i) % len(obs_rows)``); its stacks become the
        stream's last stacks.

        Entries from ``tail`` on (oldest first) are reclaimable: the one at the written row, if
        any, and then as many as the new frames need are released; their table rows go to
        ``released`` from ``nreleased`` on (at least ``len(obs_rows) + n`` long in all).  Per
        row, ``out`` = ``(table row written, releases so far, obs continued the stream, the
        stream had last stacks)``.  On a device a call stops when the staging buffer is full
        (flushed for the next call).  Returns ``(rows stored so far, new tail, releases so
        far)``.
        """
        direct = self.storage.direct
        if direct is None:
            if self._nstage + _STAGE_RESERVE * self.frame_stack > self.storage.stage_frames:
                self.flush()
            stage, stage_rows = self.storage.stage()
            frames, room = self._no_frames, self.storage.stage_frames
        else:
            stage, stage_rows, frames, room = self._no_frames, self._no_rows, direct, 0
        slots, until, continued, had_last = out
        done, self._nfree, tail, self._nstage, nreleased = _store_rows(
            frames,
            stage,
            stage_rows,
            self._nstage,
            room,
            (*self._bookkeeping(), obs_rows, next_rows),
            self._nfree,
            obs_words,
            next_words,
            streams,
            start,
            tail,
            head,
            released,
            nreleased,
            slots,
            until,
            continued,
            had_last,
        )
        return done, tail, nreleased

    def flush(self) -> None:
        """Write the staged new frames to the storage (one copy; nothing to do for numpy)."""
        if self._nstage:
            self.storage.commit(self._nstage)
            self._nstage = 0

    # -- checkpointing --------------------------------------------------------------------------
    def state_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The pool's arrays by state name, on the host: the live arrays (copy before keeping
        them), except ``frames`` on a device, which is a host copy."""
        self.flush()
        arrays = {name: getattr(self, f"_{name}") for name in POOL_ARRAYS if name != "frames"}
        return {"frames": self.storage.to_numpy(), **arrays}

    def state_spec(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """Dtype and shape of each state array (:meth:`state_arrays` without copying the frames)."""
        spec = {name: (a.dtype, a.shape) for name, a in self.state_arrays_but_frames().items()}
        return {"frames": (self.dtype, (self.frame_capacity, *self.frame_shape)), **spec}

    def state_arrays_but_frames(self) -> dict[str, npt.NDArray[Any]]:
        return {name: getattr(self, f"_{name}") for name in POOL_ARRAYS if name != "frames"}

    def commit_state(self, arrays: dict[str, npt.NDArray[Any]], nfree: int) -> None:
        """Assign arrays :meth:`check_state` accepted (cannot fail: dtypes and shapes match);
        the dedup cache is rebuilt from the streams' last stacks' frames."""
        self._nstage = 0  # staged frames belong to the state being replaced
        self.storage.assign(arrays["frames"])
        for name in POOL_ARRAYS:
            if name != "frames":
                getattr(self, f"_{name}")[...] = arrays[name]
        self._nfree = nfree
        frames, stack = arrays["frames"], self.frame_stack
        for s in range(self.num_streams):
            rows = np.concatenate((self._stream_obs[s], self._stream_next[s]))
            self._cache[s] = np.ascontiguousarray(frames[rows]).reshape(2 * stack, -1).view(self._word)
        self._cache_obs[...] = np.arange(stack)
        self._cache_next[...] = np.arange(stack) + stack

    def check_cache(self) -> None:
        """Raise ``ValueError`` unless the dedup cache holds the live streams' last stacks' frames
        (reads the storage: a check, not a hot path)."""
        for s in np.flatnonzero(self._stream_live):
            for name, rows, slots in (
                ("obs", self._stream_obs[s], self._cache_obs[s]),
                ("next_obs", self._stream_next[s], self._cache_next[s]),
            ):
                held = self._cache[s, slots].view(np.uint8).reshape(-1)
                stored = np.asarray(_to_host(self.gather(rows))).reshape(-1).view(np.uint8)
                if not np.array_equal(held, stored):
                    raise ValueError(f"frame pool cache should hold stream {s}'s last {name} stack")

    def check_rows(self, rows: npt.NDArray[Any], key: str, prefix: str) -> None:
        """Raise ``ValueError`` naming ``key`` unless every entry of ``rows`` is a pool row."""
        f = self.frame_capacity
        bad = (rows < 0) | (rows >= f)
        if bad.any():
            where = np.unravel_index(int(np.argmax(bad)), rows.shape)
            index = "".join(f"[{i}]" for i in where)
            raise ValueError(
                f"{prefix}{key} should hold frame rows in [0, {f}), but got {key}{index}={rows[where]}"
            )

    def check_state(
        self, a: dict[str, npt.NDArray[Any]], nfree: int, stacks: list[npt.NDArray[Any]], prefix: str
    ) -> None:
        """Raise ``ValueError`` naming the key unless the pool arrays ``a`` and ``nfree`` are
        consistent with the stacks ``stacks`` (arrays of rows) that the caller's live entries use:
        rows in range, each row's count its number of uses (those stacks and the live streams'
        last stacks), the free list exactly the unused rows, used float frames finite."""
        f = self.frame_capacity

        def fail(key: str, message: str) -> None:
            raise ValueError(f"{prefix}{key} {message}")

        for key in ("stream_obs", "stream_next", "free"):
            self.check_rows(a[key], key, prefix)
        stream_live = a["stream_live"]
        uses = np.concatenate(
            [
                *(s.ravel() for s in stacks),
                a["stream_obs"][stream_live].ravel(),
                a["stream_next"][stream_live].ravel(),
            ]
        )
        count = np.bincount(uses, minlength=f)
        refs = a["refs"]
        if not np.array_equal(refs, count):
            j = int(np.argmax(refs != count))
            fail(
                "refs",
                f"should count the uses of each frame row by live transitions and streams, "
                f"but got refs[{j}]={refs[j]} for {count[j]} uses",
            )
        unused = np.flatnonzero(count == 0)
        if nfree != unused.shape[0]:
            fail(
                "nfree",
                f"should be the number of unused frame rows ({unused.shape[0]}), but got nfree={nfree}",
            )
        listed = np.sort(a["free"][:nfree])
        if not np.array_equal(listed, unused):
            twice = np.flatnonzero(listed[1:] == listed[:-1])
            if twice.shape[0]:
                fail("free", f"should list each unused row once, but got row {listed[twice[0]]} twice")
            row = int(listed[np.argmax(count[listed] > 0)])
            fail("free", f"should list only unused frame rows, but got row {row}, used {count[row]} times")
        if self.dtype.kind in "fc":
            used_rows = np.flatnonzero(count)
            finite = np.isfinite(
                a["frames"][used_rows].reshape(used_rows.shape[0], math.prod(self.frame_shape))
            ).all(axis=1)
            if not finite.all():
                row = int(used_rows[np.argmin(finite)])
                fail("frames", f"should be finite in used rows, but got frames[{row}]={a['frames'][row]!r}")

    def __getstate__(self) -> dict[str, Any]:
        self.flush()  # staged frames live in buffers that do not pickle
        return self.__dict__.copy()
