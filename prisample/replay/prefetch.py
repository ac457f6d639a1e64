"""Background prefetch: the next batches drawn and gathered in a thread while the learner trains.

A learner step is ``sample → train → update_priorities``.  With a :class:`Prefetcher` of depth
``d`` a background thread draws (under the replay's lock) and gathers (on the replay's device if it
has one) up to ``d`` batches ahead, so ``next()`` usually returns at once.  The price is lag: batch
``j`` is drawn before the priority updates of batches ``j − d, …, j − 1`` land, so it comes from the
distribution of ``d`` updates ago (at most; exactly that when the thread keeps ahead), not the
exact ``P(i) = p_i^α / Σ_k p_k^α`` of Algorithm 1 line 9 after line 12 of the previous step
(Schaul et al. 2016).  ``docs/concepts.md`` ("Prefetch") measures it as a total variation distance.

Everything else is as without prefetch: batch ``j`` is the sampler's ``j``-th draw, so its
importance weights use the β schedule's ``j``-th value; ``update_priorities`` is called by the
caller as usual, and an update for a slot rewritten since its draw is dropped (pass
``generations=batch.generation``: a prefetched draw may have drawn the slot again, so the draw
record no longer names the batch you trained on).  Batches drawn ahead and never taken (at most
``d``, discarded by ``close()``) count as draws: the β step and the random generator are then
ahead of a run without prefetch; ``total=`` draws exactly the batches you take.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Protocol

from prisample._validation import check_positive_int
from prisample.replay.batch import ReplayBatch
from prisample.sampler import Draw

__all__ = ["Item", "Prefetcher", "Samples"]


Item = tuple[ReplayBatch, Draw]


class Samples(Protocol):
    """What a :class:`Prefetcher` draws from: anything with ``sample(k) -> (batch, draw)`` (a
    :class:`~prisample.replay.PrioritizedReplay`)."""

    def sample(self, k: int) -> Item: ...


def _sampling(source: Samples | Callable[[int], Item]) -> Callable[[int], Item]:
    """The sampling callable: ``source.sample``, or ``source`` itself when it is a callable."""
    method = getattr(source, "sample", None)
    if callable(method):
        return method  # type: ignore[no-any-return]
    if callable(source):
        return source
    raise TypeError(
        f"replay should have a sample(k) method or be a callable k -> (batch, draw), "
        f"but got {type(source).__name__}"
    )


_END = object()  # the producer drew ``total`` batches
_POLL_S = 0.1  # how often a waiting next() checks that the producer is still alive


class _Failure:
    """An exception raised in the producer, carried to the caller's ``next()``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _produce(
    sample: Callable[[int], Item],
    k: int,
    total: int | None,
    out: queue.SimpleQueue[Any],
    room: threading.Semaphore,
    stop: threading.Event,
) -> None:
    """The thread's loop.  Holds no reference to the :class:`Prefetcher`, so a prefetcher that is
    dropped unclosed is collected and its finalizer stops this loop."""
    drawn = 0
    try:
        while total is None or drawn < total:
            room.acquire()  # one per batch taken: at most ``depth`` drawn ahead
            if stop.is_set():
                return
            out.put(sample(k))  # draw, gather and draw record under the replay's lock
            drawn += 1
        out.put(_END)
    except BaseException as error:  # re-raised in the caller's next()
        out.put(_Failure(error))


def _stop(stop: threading.Event, room: threading.Semaphore) -> None:
    stop.set()
    room.release()  # wake a producer waiting for room


class Prefetcher(Iterator[Item]):
    """Batches of ``k`` from :meth:`PrioritizedReplay.sample`, drawn ``depth`` ahead in a
    background thread; an iterator of ``(batch, draw)``, and a context manager that stops the
    thread on exit.

    >>> import numpy as np
    >>> from prisample import PrioritizedReplay
    >>> replay = PrioritizedReplay(8, (2,), obs_dtype=np.float32, seed=0)
    >>> for t in range(8):
    ...     _ = replay.add(np.full(2, t), 0, 1.0, 0.99, np.full(2, t + 1))
    >>> with replay.prefetch(4, depth=1, total=3) as batches:
    ...     for batch, draw in batches:
    ...         replay.update_priorities(draw.indices, np.ones(4), generations=batch.generation)
    >>> batches.taken
    3

    ``depth=0`` starts no thread: ``next()`` calls :meth:`~PrioritizedReplay.sample` itself.  An
    exception raised while drawing (say, an empty replay) is raised by the ``next()`` that would
    have returned that batch, and stops the thread.  Do not call :meth:`close` while holding
    ``replay.lock``: the thread may be waiting for it.
    """

    def __init__(
        self, replay: Samples | Callable[[int], Item], k: int, *, depth: int = 1, total: int | None = None
    ) -> None:
        self.replay = replay
        """What the batches are drawn from (a replay, or a sampling callable ``k -> (batch, draw)``)."""
        self._sample = _sampling(replay)
        self.k = check_positive_int(k, "k")
        self.depth = check_positive_int(depth, "depth", minimum=0)
        self.total = None if total is None else check_positive_int(total, "total", minimum=0)
        self.taken = 0
        """Batches returned by ``next()`` so far."""
        self._closed = False
        self._thread: threading.Thread | None = None
        if self.depth == 0:
            return
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._room = threading.Semaphore(self.depth)
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=_produce,
            args=(self._sample, self.k, self.total, self._queue, self._room, self._halt),
            name="prisample-prefetch",
            daemon=True,
        )
        self._thread.start()
        self._finalizer = weakref.finalize(self, _stop, self._halt, self._room)

    @property
    def closed(self) -> bool:
        return self._closed

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Item:
        if self._closed:
            raise StopIteration
        if self._thread is None:
            if self.total is not None and self.taken >= self.total:
                self._closed = True
                raise StopIteration
            item = self._sample(self.k)
            self.taken += 1
            return item
        while True:
            try:
                got = self._queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():  # pragma: no cover - defensive
                    self.close()
                    raise RuntimeError("the prefetch thread ended without a batch") from None
        if got is _END:
            self.close()
            raise StopIteration
        if isinstance(got, _Failure):
            self.close()
            raise got.error
        self._room.release()  # the producer may draw the next batch while this one trains
        self.taken += 1
        return got  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the thread and wait for it (it finishes a draw in progress); batches drawn ahead
        are discarded.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        self._finalizer.detach()
        _stop(self._halt, self._room)
        self._thread.join()
        while not self._queue.empty():  # let go of discarded batches (device tensors)
            self._queue.get_nowait()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
