"""Frame stacks sent once per frame: the wire format of stacked observations between an actor and
a remote memory (Atari through :mod:`prisample.ray`).

A transition of a frame-stacked environment carries two stacks, ``s_t`` and ``s_{t+n}``, of
``frame_stack`` frames each (Atari: 2 × 4 × 84 × 84 bytes = 56,448), yet consecutive transitions
of one environment share all but one of their frames.  :class:`FrameStreamEncoder` (the actor's
side) numbers the distinct frames of each *stream* (one environment: stream ids must be unique
over every actor writing to one memory) in the order it first sends them and turns a batch of
transitions into a message that holds each new frame once and, per transition, where its stack's
frames are; :class:`FrameStreamDecoder` (the memory's side) keeps each stream's last ``window``
frames and rebuilds both stacks bit for bit::

    message = {
        "stream":       int32 (n,)                   stream of each transition
        "frame_refs":   int32 (n, 2, frame_stack)    frames of obs ([:, 0]) and next_obs ([:, 1]),
                                                     numbered from the stream's first new frame
                                                     of this message: 0, 1, ... are in "frames",
                                                     -1, -2, ... the stream's last frames before it
        "frames":       (k, *frame_shape)            the new frames, grouped by stream (in the
                                                     order of "stream_heads"), oldest first
        "stream_heads": int64 (m, 4)                 per stream of the message: stream, its
                                                     transitions and its frames before this
                                                     message, its new frames in this message
    }

A frame is new unless its bytes equal a frame the stream sent within the last ``window`` frames
before this message (compared exactly, as bytes), so the format needs no knowledge of how the
environment stacks: a reset stack padded with zeros (ale-py's vector env) or repeating its first
frame (Gymnasium's ``FrameStackObservation``) costs its distinct frames, a continuing stack its
one new frame, and an n-step ``s_{t+n}`` one new frame too (its older frames were sent with the
stacks before it).  ``window`` only trades bytes for memory: any ``window >= 1`` decodes exactly.

Order: a stream's messages must reach the decoder in the order they were encoded (Ray runs the
calls of one caller to one actor in order; several writers to one memory interleave freely since
each holds its own streams).  The heads' counts check it: a message whose counts do not continue
its stream's is refused, naming the stream, unless both are 0 (a new encoder: the stream starts
again).  Other keys of a message (action, reward, ...) are the caller's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from prisample._validation import check_positive_int, to_numpy

__all__ = ["FRAME_KEYS", "FRAME_WINDOW", "FrameStreamDecoder", "FrameStreamEncoder"]

FRAME_KEYS = ("stream", "frame_refs", "frames", "stream_heads")
"""The keys :meth:`FrameStreamEncoder.encode` writes and :class:`FrameStreamDecoder` reads."""
FRAME_WINDOW = 32
"""Frames of each stream the decoder keeps by default (an encoder may refer to that many back)."""

IntArray = npt.NDArray[np.int64]


def _check_streams(streams: Any, n: int, num_streams: int, name: str) -> IntArray:
    values = to_numpy(streams, name)
    if values.ndim != 1 or values.shape[0] != n or (n and values.dtype.kind not in "iu"):
        raise ValueError(
            f"{name} should be {n} integers (one per transition), but got {name} of shape "
            f"{values.shape} and dtype {values.dtype}"
        )
    bad = (values < 0) | (values >= num_streams)
    if bad.any():
        j = int(np.argmax(bad))
        raise ValueError(f"{name} should lie in [0, {num_streams}), but got {name}[{j}]={values[j]}")
    return values.astype(np.int64)


class _Sent:
    """What the encoder knows the decoder holds of one stream."""

    def __init__(self) -> None:
        self.transitions = 0
        self.frames = 0
        self.known: dict[bytes, int] = {}  # the bytes of each frame the decoder holds → its number
        self.order: deque[bytes] = deque()  # those frames, oldest first


class FrameStreamEncoder:
    """The actor's side: :meth:`encode` turns transitions of ``num_streams`` streams, stacks of
    ``frame_stack`` frames, into messages holding each stream's new frames once (see the module).

    ``window`` must not exceed the decoder's (default :data:`FRAME_WINDOW` for both).
    """

    def __init__(self, num_streams: int, frame_stack: int, *, window: int = FRAME_WINDOW) -> None:
        self.num_streams = check_positive_int(num_streams, "num_streams")
        self.frame_stack = check_positive_int(frame_stack, "frame_stack")
        self.window = check_positive_int(window, "window")
        self._streams = [_Sent() for _ in range(self.num_streams)]
        self._frame: tuple[tuple[int, ...], np.dtype[Any]] | None = None
        self.frames_sent = 0
        """New frames in every message so far."""

    def encode(self, obs: npt.ArrayLike, next_obs: npt.ArrayLike, streams: npt.ArrayLike) -> dict[str, Any]:
        """The message of ``n`` transitions: ``obs`` and ``next_obs`` of shape ``(n, frame_stack,
        *frame_shape)`` (one shape and dtype for every call), ``streams`` their stream ids;
        ``n = 0`` gives a message that decodes to empty stacks and moves no stream.  Everything
        is checked before the encoder's state changes."""
        obs_array, next_array = to_numpy(obs, "obs"), to_numpy(next_obs, "next_obs")
        n = obs_array.shape[0] if obs_array.ndim else 0
        for name, value in (("obs", obs_array), ("next_obs", next_array)):
            if value.ndim < 2 or value.shape[0] != n or value.shape[1] != self.frame_stack:
                raise ValueError(
                    f"{name} should have shape (n, frame_stack={self.frame_stack}, *frame_shape), "
                    f"but got {name} of shape {value.shape}"
                )
        frame = (tuple(obs_array.shape[2:]), obs_array.dtype)
        if (tuple(next_array.shape[2:]), next_array.dtype) != frame:
            raise ValueError(
                f"next_obs should have obs's frames {frame}, but got "
                f"{(tuple(next_array.shape[2:]), next_array.dtype)}"
            )
        if self._frame is not None and frame != self._frame:
            raise ValueError(f"obs should hold frames {self._frame} as before, but got frames {frame}")
        ids = _check_streams(streams, n, self.num_streams, "streams")
        self._frame = frame
        order = list(dict.fromkeys(ids.tolist()))  # streams in the order they first appear
        start = {s: self._streams[s].frames for s in order}
        new: dict[int, list[npt.NDArray[Any]]] = {s: [] for s in order}
        counts = {s: 0 for s in order}
        refs = np.empty((n, 2, self.frame_stack), dtype=np.int32)
        for i, s in enumerate(ids.tolist()):
            sent = self._streams[s]
            counts[s] += 1
            for which, stack in ((0, obs_array[i]), (1, next_array[i])):
                for j in range(self.frame_stack):
                    key = stack[j].tobytes()
                    number = sent.known.get(key)
                    if number is None:
                        number = sent.frames
                        sent.frames += 1
                        sent.known[key] = number
                        sent.order.append(key)
                        new[s].append(stack[j])
                    refs[i, which, j] = number - start[s]
        heads = np.empty((len(order), 4), dtype=np.int64)
        for row, s in enumerate(order):
            sent = self._streams[s]
            heads[row] = (s, sent.transitions, start[s], len(new[s]))
            sent.transitions += counts[s]
            while len(sent.order) > self.window:  # the decoder keeps the stream's last `window`
                del sent.known[sent.order.popleft()]
        frames = [f for s in order for f in new[s]]
        self.frames_sent += len(frames)
        shape, dtype = frame
        return {
            "stream": ids.astype(np.int32),
            "frame_refs": refs,
            "frames": np.stack(frames) if frames else np.empty((0, *shape), dtype=dtype),
            "stream_heads": heads,
        }


class FrameStreamDecoder:
    """The memory's side: rebuilds the stacks of :class:`FrameStreamEncoder` messages from each
    stream's last ``window`` frames (``num_streams`` streams, stacks of ``frame_stack`` frames of
    ``frame_shape`` and ``dtype``).

    :meth:`read` returns ``(obs, next_obs)`` without changing anything; :meth:`advance` then takes
    the message's frames in (so a caller that stores the stacks can refuse them first);
    :meth:`decode` is both.
    """

    def __init__(
        self,
        num_streams: int,
        frame_stack: int,
        frame_shape: tuple[int, ...],
        dtype: npt.DTypeLike,
        *,
        window: int = FRAME_WINDOW,
    ) -> None:
        self.num_streams = check_positive_int(num_streams, "num_streams")
        self.frame_stack = check_positive_int(frame_stack, "frame_stack")
        self.window = check_positive_int(window, "window")
        self.frame_shape = tuple(int(d) for d in frame_shape)
        self.dtype = np.dtype(dtype)
        self._ring = np.zeros((self.num_streams, self.window, *self.frame_shape), dtype=self.dtype)
        self._transitions = np.zeros(self.num_streams, dtype=np.int64)
        self._frames = np.zeros(self.num_streams, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        """Bytes of the streams' last frames and counters."""
        return self._ring.nbytes + self._transitions.nbytes + self._frames.nbytes

    def decode(self, message: Mapping[str, Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """:meth:`read`, then :meth:`advance`."""
        stacks = self.read(message)
        self.advance(message)
        return stacks

    def read(self, message: Mapping[str, Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """``(obs, next_obs)`` of the message's transitions, each ``(n, frame_stack,
        *frame_shape)``; raises ``ValueError`` naming the key for a message that is malformed or
        does not continue its streams (then nothing changes, here or by :meth:`advance`)."""
        ids, refs, frames, heads, first = self._check(message)
        base = np.zeros(self.num_streams, dtype=np.int64)  # row in `frames` of each stream's first
        base[heads[:, 0]] = first
        before = np.zeros(self.num_streams, dtype=np.int64)  # each stream's frames before the message
        before[heads[:, 0]] = heads[:, 2]
        stream = np.broadcast_to(ids[:, None, None], refs.shape)
        old = refs < 0
        # one gather from the old frames referenced (few: the first stacks of each stream) and the new
        ring_rows = stream[old] * self.window + (before[stream[old]] + refs[old]) % self.window
        held, position = np.unique(ring_rows, return_inverse=True)
        ring = self._ring.reshape(self.num_streams * self.window, *self.frame_shape)
        source = np.concatenate([ring[held], frames])
        index = np.empty(refs.shape, dtype=np.int64)
        index[old] = position.reshape(-1)
        index[~old] = held.shape[0] + base[stream[~old]] + refs[~old]
        return source[index[:, 0]], source[index[:, 1]]

    def advance(self, message: Mapping[str, Any]) -> None:
        """Take a message :meth:`read` accepted: its streams' new frames and counts."""
        ids, _, frames, heads, first = self._check(message)
        for (s, transitions, before, count), row in zip(heads.tolist(), first.tolist(), strict=True):
            keep = min(count, self.window)  # only the last `window` frames stay
            numbers = before + np.arange(count - keep, count)
            self._ring[s, numbers % self.window] = frames[row + count - keep : row + count]
            self._frames[s] = before + count
            self._transitions[s] = transitions + np.count_nonzero(ids == s)

    def _check(
        self, message: Mapping[str, Any]
    ) -> tuple[IntArray, IntArray, npt.NDArray[Any], IntArray, IntArray]:
        if not isinstance(message, Mapping):
            raise TypeError(f"message should be a mapping of arrays, but got {type(message).__name__}")
        missing = [key for key in FRAME_KEYS if key not in message]
        if missing:
            raise ValueError(f"message should hold {FRAME_KEYS}, but lacks {missing}")
        refs_in = to_numpy(message["frame_refs"], "frame_refs")
        n = refs_in.shape[0] if refs_in.ndim else 0
        if refs_in.shape != (n, 2, self.frame_stack) or (n and refs_in.dtype.kind not in "iu"):
            raise ValueError(
                f"frame_refs should be integers of shape (n, 2, {self.frame_stack}), but got "
                f"frame_refs of shape {refs_in.shape} and dtype {refs_in.dtype}"
            )
        refs = refs_in.astype(np.int64)
        ids = _check_streams(message["stream"], n, self.num_streams, "stream")
        frames = to_numpy(message["frames"], "frames")
        if frames.ndim != 1 + len(self.frame_shape) or frames.shape[1:] != self.frame_shape:
            raise ValueError(
                f"frames should have shape (k, *{self.frame_shape}), but got frames of shape {frames.shape}"
            )
        if frames.dtype != self.dtype:
            raise ValueError(f"frames should have dtype {self.dtype}, but got frames of dtype {frames.dtype}")
        heads = to_numpy(message["stream_heads"], "stream_heads")
        if heads.ndim != 2 or heads.shape[1] != 4 or (heads.size and heads.dtype.kind not in "iu"):
            raise ValueError(
                f"stream_heads should be integers of shape (m, 4), but got stream_heads of shape "
                f"{heads.shape} and dtype {heads.dtype}"
            )
        heads = heads.astype(np.int64)
        streams = _check_streams(heads[:, 0], heads.shape[0], self.num_streams, "stream_heads[:, 0]")
        if np.unique(streams).shape[0] != streams.shape[0] or set(streams.tolist()) != set(ids.tolist()):
            raise ValueError(
                f"stream_heads should name each stream of the message once, but got streams "
                f"{streams.tolist()} for transitions of streams {sorted(set(ids.tolist()))}"
            )
        if (heads[:, 1:] < 0).any() or int(heads[:, 3].sum()) != frames.shape[0]:
            raise ValueError(
                f"stream_heads should hold counts >= 0 whose new frames sum to len(frames)="
                f"{frames.shape[0]}, but got stream_heads={heads.tolist()}"
            )
        for s, transitions, before, _ in heads.tolist():
            restart = transitions == 0 and before == 0
            if not restart and (transitions, before) != (self._transitions[s], self._frames[s]):
                raise ValueError(
                    f"stream {s}'s message should continue its stream (transition "
                    f"{self._transitions[s]}, frame {self._frames[s]}), but got transition "
                    f"{transitions}, frame {before}: a message was lost or arrived out of order"
                )
        first = np.cumsum(heads[:, 3]) - heads[:, 3]  # row of each stream's first new frame
        low = np.zeros(self.num_streams, dtype=np.int64)
        high = np.zeros(self.num_streams, dtype=np.int64)
        low[streams] = -np.minimum(heads[:, 2], self.window)
        high[streams] = heads[:, 3]
        bad = (refs < low[ids][:, None, None]) | (refs >= high[ids][:, None, None])
        if bad.any():
            i, which, j = (int(v) for v in np.unravel_index(int(np.argmax(bad)), bad.shape))
            raise ValueError(
                f"frame_refs should refer to the message's new frames or the stream's last "
                f"{self.window} frames, but got frame_refs[{i}, {which}, {j}]={refs[i, which, j]} "
                f"for stream {ids[i]} (is the encoder's window larger than the decoder's?)"
            )
        return ids, refs, frames, heads, first
