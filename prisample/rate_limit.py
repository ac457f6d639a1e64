"""Replay-ratio control: how many items a learner draws per item its actors insert.

A learner that runs free against its actors trains on whatever ratio their speeds happen to give
(the thread recipe's learner made about 0.02 updates per environment step; DQN's recipe makes
0.25).  :class:`RateLimiter` holds both sides to a target ratio, with the semantics of Reverb's
``SampleToInsertRatio`` rate limiter (``samples_per_insert``, ``min_size_to_sample``,
``error_buffer``):

* ``diff = inserts · samples_per_insert − samples``; both counts are *items* (a batch of ``k``
  drawn counts ``k`` samples, an ``add`` of ``n`` transitions counts ``n`` inserts).  A learner
  that draws batches of ``k`` and should make ``u`` updates per inserted transition sets
  ``samples_per_insert = k · u`` (DQN's 1 update of 32 per 4 steps: 8).
* The buffer is ``[min_diff, max_diff]``: a number ``e`` gives ``offset ± e`` around
  ``offset = samples_per_insert · min_size_to_sample`` (the diff when sampling may start), a pair
  gives ``(min_diff, max_diff)`` as they are.
* An **insert** of ``n`` proceeds while fewer than ``min_size_to_sample`` items were inserted, or
  when ``diff + n · samples_per_insert <= max_diff``; a **sample** of ``k`` proceeds when at least
  ``min_size_to_sample`` items were inserted and ``diff − k >= min_diff``.  A call proceeds whole
  or waits: once sampling has started, ``diff`` stays inside the buffer (the insert that reaches
  ``min_size_to_sample`` is admitted whole, so only it can end above ``max_diff``).
* A call waits on a condition variable until it may proceed, at most ``timeout`` seconds (the
  constructor's, or the call's own), then raises :exc:`TimeoutError` naming its side and the
  counts, and counts nothing but the timeout.

Deadlocks.  Both sides wait on each other when the buffer is too narrow for the calls:
an insert of ``n`` waits while ``diff > max_diff − n · spi`` and a sample of ``k`` while ``diff <
min_diff + k``, so neither can move once ``max_diff − min_diff < n · spi + k``.  Size the buffer
for the largest insert and draw (the constructor requires at least ``spi + 1``, for single
items).  When one side stops for good (the actors are done, the learner crashed), the other
waits until its timeout, or until :meth:`RateLimiter.close`, which wakes every waiter with
:exc:`RateLimiterClosedError` and refuses later calls.

:class:`RateLimiter` is thread-safe and needs no Ray: threads around one
:class:`~prisample.PrioritizedReplay` call :meth:`~RateLimiter.insert` before ``add`` and
:meth:`~RateLimiter.sample` before a draw (``recipes/apex/actor_learner.py``).
:class:`~prisample.ray.RemoteReplay` holds one in a Ray actor of its own for many writers.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from typing import Any, Literal

from prisample._validation import check_positive_int, check_real, short_repr

__all__ = ["RATE_LIMITER_STATE_VERSION", "RateLimiter", "RateLimiterClosedError", "Side"]

RATE_LIMITER_STATE_VERSION = 1
Side = Literal["insert", "sample"]

_COUNTS = ("inserts", "samples", "insert_waits", "sample_waits", "insert_timeouts", "sample_timeouts")
_SECONDS = ("insert_wait_s", "sample_wait_s")
_DEFAULT: Any = object()  # "the constructor's timeout" (None already means: wait forever)
_REQUIRED: Any = object()  # error_buffer left out: refused with what it is, not Python's bare message


class RateLimiterClosedError(RuntimeError):
    """Raised by a call that waited on (or came to) a :class:`RateLimiter` after ``close()``."""


def _check_timeout(value: Any, name: str = "timeout") -> float | None:
    return None if value is None else check_real(value, name, minimum=0.0)


class RateLimiter:
    """Holds inserts and samples to ``samples_per_insert`` samples per insert (module docstring).

    Args:
        samples_per_insert: items drawn per item inserted, ``> 0``.
        min_size_to_sample: items inserted before any sample may proceed, ``>= 1``.
        error_buffer: ``e >= 0`` (the buffer ``offset ± e``) or ``(min_diff, max_diff)``; its width
            must be at least ``samples_per_insert + 1``.  Required, as Reverb's
            ``SampleToInsertRatio`` requires it: no default fits every call size (the width
            must hold the largest insert and draw, see Deadlocks), so leaving it out raises a
            ``TypeError`` that says what it is and how to size it (``e = k + n ·
            samples_per_insert`` leaves room for an insert of ``n`` and a draw of ``k``).
        timeout: seconds a call waits before :exc:`TimeoutError` (``None``: no limit); a call's
            own ``timeout=`` overrides it.
    """

    def __init__(
        self,
        samples_per_insert: float,
        *,
        min_size_to_sample: int = 1,
        error_buffer: float | tuple[float, float] = _REQUIRED,
        timeout: float | None = None,
    ) -> None:
        if error_buffer is _REQUIRED:
            raise TypeError(
                "RateLimiter needs error_buffer (as Reverb's SampleToInsertRatio does): how far "
                "diff = inserts * samples_per_insert - samples may stray from samples_per_insert * "
                "min_size_to_sample, a number e (that value ± e) or a pair (min_diff, max_diff). "
                "Its width must hold the largest insert of n items and draw of k, else both sides "
                "can wait on each other: e.g. error_buffer=k + n * samples_per_insert"
            )
        spi = check_real(samples_per_insert, "samples_per_insert", minimum=0.0, strict=True)
        min_size = check_positive_int(min_size_to_sample, "min_size_to_sample")
        offset = spi * min_size
        if isinstance(error_buffer, tuple):
            if len(error_buffer) != 2:
                raise ValueError(
                    f"error_buffer should be a number or a pair (min_diff, max_diff), "
                    f"but got error_buffer={short_repr(error_buffer)}"
                )
            low = check_real(error_buffer[0], "error_buffer[0]", minimum=-math.inf)
            high = check_real(error_buffer[1], "error_buffer[1]", minimum=-math.inf)
        else:
            if isinstance(error_buffer, bool) or not isinstance(error_buffer, numbers.Real):
                raise TypeError(
                    f"error_buffer should be a number or a pair (min_diff, max_diff), "
                    f"but got error_buffer={short_repr(error_buffer)}"
                )
            half = check_real(error_buffer, "error_buffer", minimum=0.0)
            low, high = offset - half, offset + half
        if high - low < spi + 1.0:
            raise ValueError(
                f"error_buffer should leave max_diff - min_diff >= samples_per_insert + 1 = {spi + 1.0} "
                f"(else an insert and a sample of one item can wait on each other), "
                f"but got error_buffer={error_buffer!r}: width {high - low}"
            )
        self.samples_per_insert = spi
        self.min_size_to_sample = min_size
        self.min_diff, self.max_diff = low, high
        self.timeout = _check_timeout(timeout)
        self._changed = threading.Condition()
        self._closed = False
        self._counts = dict.fromkeys(_COUNTS, 0)
        self._seconds = dict.fromkeys(_SECONDS, 0.0)

    # -- the rule (callers hold the condition's lock) -------------------------------------------
    def _diff(self) -> float:
        return self._counts["inserts"] * self.samples_per_insert - self._counts["samples"]

    def _admits(self, side: Side, n: int) -> bool:
        inserted = self._counts["inserts"]
        if side == "insert":
            return (
                inserted < self.min_size_to_sample
                or self._diff() + n * self.samples_per_insert <= self.max_diff
            )
        return inserted >= self.min_size_to_sample and self._diff() - n >= self.min_diff

    def _count(self, side: Side, n: int) -> None:
        self._counts["inserts" if side == "insert" else "samples"] += n

    def _record_wait(self, side: Side, seconds: float, timed_out: bool) -> None:
        self._counts[f"{side}_waits"] += 1
        self._seconds[f"{side}_wait_s"] += seconds
        if timed_out:
            self._counts[f"{side}_timeouts"] += 1

    def _timeout_error(self, side: Side, n: int, timeout: float | None) -> TimeoutError:
        if side == "insert":
            why = f"diff + n * samples_per_insert <= max_diff={self.max_diff}"
        elif self._counts["inserts"] < self.min_size_to_sample:
            why = f"min_size_to_sample={self.min_size_to_sample} inserts"
        else:
            why = f"diff - n >= min_diff={self.min_diff}"
        return TimeoutError(
            f"rate limiter: {side} of n={n} waited {timeout} s for {why}; "
            f"inserts={self._counts['inserts']}, samples={self._counts['samples']}, "
            f"diff={self._diff()}, samples_per_insert={self.samples_per_insert}"
        )

    def _closed_error(self, side: Side, n: int) -> RateLimiterClosedError:
        return RateLimiterClosedError(f"rate limiter closed: {side} of n={n} refused")

    def _check_call(self, side: Side, n: Any, timeout: Any) -> tuple[int, float | None]:
        count = check_positive_int(n, "n" if side == "insert" else "k")
        return count, self.timeout if timeout is _DEFAULT else _check_timeout(timeout)

    # -- both sides -----------------------------------------------------------------------------
    def _attempt(
        self, side: Side, n: int, start: float | None, timeout: float | None, refused: bool
    ) -> float | None:
        """One look at a call of ``n`` items on ``side`` (the caller holds the lock; shared by the
        thread and the Ray waits), waiting since ``start`` (``None``: the first look, no wait
        yet): refused (closed) → :exc:`RateLimiterClosedError`; admitted → counted, the seconds
        waited returned; past ``timeout`` → :exc:`TimeoutError`; else ``None``: wait on."""
        waited = 0.0 if start is None else time.monotonic() - start
        if refused:
            if start is not None:
                self._record_wait(side, waited, timed_out=False)
            raise self._closed_error(side, n)
        if self._admits(side, n):
            if start is not None:
                self._record_wait(side, waited, timed_out=False)
            self._count(side, n)
            return waited
        if timeout is not None and waited >= timeout:
            self._record_wait(side, waited, timed_out=True)
            raise self._timeout_error(side, n, timeout)
        return None

    def _acquire(self, side: Side, n: int, timeout: float | None) -> float:
        with self._changed:
            start: float | None = None
            while (waited := self._attempt(side, n, start, timeout, self._closed)) is None:
                start = time.monotonic() if start is None else start
                self._changed.wait(_left(start, timeout))
            self._changed.notify_all()
            return waited

    def insert(self, n: int = 1, *, timeout: float | None = _DEFAULT) -> float:
        """Wait until ``n`` items may be inserted, then count them; returns the seconds waited.

        Raises :exc:`TimeoutError` after ``timeout`` seconds (counts nothing but the timeout) and
        :exc:`RateLimiterClosedError` once the limiter is closed."""
        count, limit = self._check_call("insert", n, timeout)
        return self._acquire("insert", count, limit)

    def sample(self, k: int = 1, *, timeout: float | None = _DEFAULT) -> float:
        """Wait until ``k`` items may be drawn, then count them; returns the seconds waited.

        Raises as :meth:`insert` does."""
        count, limit = self._check_call("sample", k, timeout)
        return self._acquire("sample", count, limit)

    def can_insert(self, n: int = 1) -> bool:
        """Whether an insert of ``n`` would proceed now (without counting it)."""
        count = check_positive_int(n, "n")
        with self._changed:
            return not self._closed and self._admits("insert", count)

    def can_sample(self, k: int = 1) -> bool:
        """Whether a sample of ``k`` would proceed now (without counting it)."""
        count = check_positive_int(k, "k")
        with self._changed:
            return not self._closed and self._admits("sample", count)

    def close(self) -> None:
        """Wake every waiting call with :exc:`RateLimiterClosedError` and refuse later ones."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> dict[str, int | float]:
        """``inserts`` and ``samples`` (items), ``insert_waits``/``sample_waits`` (calls that had
        to wait, timed out ones included), ``insert_wait_s``/``sample_wait_s`` (seconds spent
        waiting), ``insert_timeouts``/``sample_timeouts``, and ``diff``."""
        with self._changed:
            return {**self._counts, **self._seconds, "diff": self._diff()}

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The counters (not the configuration): a resumed run keeps its ratio."""
        with self._changed:
            return {"version": RATE_LIMITER_STATE_VERSION, **self._counts, **self._seconds}

    @staticmethod
    def check_state(state: Any) -> tuple[dict[str, int], dict[str, float]]:
        """The counters of a :meth:`state_dict`, checked; ``TypeError``/``ValueError`` naming
        the key otherwise."""
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got state={short_repr(state)}")
        if state.get("version") != RATE_LIMITER_STATE_VERSION:
            raise ValueError(
                f"state version should be {RATE_LIMITER_STATE_VERSION}, "
                f"but got version={short_repr(state.get('version'))}"
            )
        expected = {"version", *_COUNTS, *_SECONDS}
        if set(state) != expected:
            raise ValueError(
                f"state should have the keys {sorted(expected)}, but lacks {sorted(expected - set(state))} "
                f"and has {sorted(map(str, set(state) - expected))} besides"
            )
        counts = {}
        for key in _COUNTS:
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"state {key} should be an integer >= 0, but got {key}={short_repr(value)}")
            counts[key] = int(value)
        seconds = {key: check_real(state[key], f"state {key}", minimum=0.0) for key in _SECONDS}
        return counts, seconds

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: a refused state changes nothing);
        waiting calls re-check against the restored counts."""
        counts, seconds = self.check_state(state)
        with self._changed:
            self._counts, self._seconds = counts, seconds
            self._changed.notify_all()

    def __repr__(self) -> str:
        return (
            f"RateLimiter(samples_per_insert={self.samples_per_insert}, "
            f"min_size_to_sample={self.min_size_to_sample}, "
            f"error_buffer=({self.min_diff}, {self.max_diff}), timeout={self.timeout})"
        )


def _left(start: float, timeout: float | None) -> float | None:
    """Seconds left before a wait begun at ``start`` times out (``None``: no timeout)."""
    return None if timeout is None else max(0.0, start + timeout - time.monotonic())
