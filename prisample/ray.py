"""The prioritized memory as Ray actors: many actors and one learner (Ape-X, Horgan et al. 2018).

Ape-X splits DQN in two: actors step their environments with their own ε, compute the initial
priorities of what they send with their copy of the network, and push transitions in batches; one
learner draws prioritized batches, trains, sends the new priorities back and now and then
broadcasts its weights (Horgan et al. 2018, Sec. 3, Algorithms 1-2).  Here the memory is one or
more Ray actors, each a :class:`~prisample.PrioritizedReplay`; nothing in prisample is a server::

    actor i (Ray actor or task)           ReplayShard × S (Ray actors)        learner (driver)
    ───────────────────────────           ────────────────────────────        ────────────────
    n-step transitions, |δ| from its      add(transitions, priorities)        batch = next(prefetcher)
    network copy ── ReplayWriter.add ──▶  sample(k_s) ◀── RemoteReplay.sample  loss · batch.weights
                                          update_priorities(slots, |δ|, gen)  ◀── update_priorities

Exactness, stated once:

* **One shard** draws exactly like a local :class:`~prisample.PrioritizedReplay`: ``P(i) = m_i /
  Σ_k m_k`` (Eq. 1), stratified.
* **S shards**: a draw first asks every shard for its mass ``M_s``
  (:attr:`~prisample.PrioritizedSampler.total_mass`), cuts ``[0, Σ M_s)`` into ``k`` equal strata
  with one uniform point each, gives shard ``s`` the points that fall in its interval, and the
  shard draws that many of its own slots.  Slot ``i`` of shard ``s`` is then drawn with
  ``P(i) = (M_s / Σ_t M_t) · P_s(i)``, which the weights use.  Proportional: ``m_i / Σ_all m``
  — one memory holding every shard, exactly.  Rank: each shard ranks its own transitions and
  shards are chosen by ``H(N_s) = Σ_{r≤N_s} r^-α``, so ranks are per shard (as in every sharded
  replay); the weights are exact for it.
  Transitions added between the two round trips shift ``M_s`` by their mass: the allocation uses
  the masses read in the first, the probabilities those at the draw.
* **Weights** are computed here, on the learner, from the drawn probabilities: ``w_i = (N ·
  P(i))^-β``, divided by ``(N · P_min)^-β`` with ``N = Σ N_s`` and ``P_min = min_s (M_s / Σ M)
  · P_min,s`` (``weight_norm="memory"``, Algorithm 1 line 10), so β's schedule lives with the
  learner.
* **Late priorities**: every update carries the generations its batch was drawn with; a shard
  drops (and counts, :meth:`RemoteReplay.stats`) those whose slot was rewritten since
  (ray-project/ray#6534).  With prefetch depth ``d`` a batch is drawn before the updates of the
  ``d`` batches before it land (measured in ``docs/scaling.md``).

Frame stacks (Atari): shards built with ``frame_stack > 1`` and ``num_streams`` (one per
environment of every actor) store each stream's frames once, as a local memory does; actors send
:mod:`prisample.frame_stream` messages (each stream's new frames once, the stacks as references)
through the same :meth:`RemoteReplay.add`, and :meth:`ReplayShard.add_frames` rebuilds the stacks
bit for bit before storing them on their streams.

Replay ratio (``samples_per_insert=``, :mod:`prisample.rate_limit`): one
:class:`~prisample.rate_limit.RateLimiter` for the whole memory, in a Ray actor of its own
(:class:`RateLimiterActor`), not one per shard.  Every :meth:`RemoteReplay.add` (so every
:class:`ReplayWriter`) asks it before sending and waits while the inserts are too far ahead;
:meth:`RemoteReplay.sample` (and the prefetcher) asks it before drawing and waits while the
learner is too far ahead or fewer than ``min_size_to_sample`` transitions were inserted.  Why
there: a draw spans every shard (its allocation follows the masses, not where the writers send),
so per-shard counts would hold each shard to a ratio the global draw does not keep, and a learner
waiting on one shard's ratio while that shard's writers wait on another's can stall both.  One
counter for all writers and the learner is the global ratio exactly.  The shards never wait (a
shard is a single-threaded actor: an ``add`` waiting inside it would hold back the very draws it
waits for); the limiter's calls are coroutines, so any number of waiting writers hold no thread.
Inserts are counted when admitted, before the shard stores them (``ray.get`` the ``add`` to know
it landed).

Checkpoints: :meth:`RemoteReplay.state_dict` holds every shard's memory and sampler and the
learner side's random state and draw count; :meth:`RemoteReplay.load_state_dict` stages the
state in every shard, and only when every shard accepted it commits — else nothing changes.

Needs ``ray`` (``pip install prisample[ray]``); ``import prisample`` does not import this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import numpy as np
import numpy.typing as npt
import ray

from prisample._validation import check_finite_priorities, check_positive_int, check_real, to_numpy
from prisample.frame_stream import FRAME_KEYS, FRAME_WINDOW, FrameStreamDecoder
from prisample.rate_limit import RateLimiter, RateLimiterClosedError, Side, _left
from prisample.replay import PrioritizedReplay
from prisample.replay.batch import BatchMapping
from prisample.weights import WEIGHT_NORMS, LinearSchedule, WeightNorm, check_beta, importance_weights

__all__ = [
    "RAY_REPLAY_STATE_VERSION",
    "TRANSITION_FIELDS",
    "RateLimiterActor",
    "Ref",
    "RemoteBatch",
    "RemotePrefetcher",
    "RemoteReplay",
    "ReplayShard",
    "ReplayWriter",
]


RAY_REPLAY_STATE_VERSION = 1
TRANSITION_FIELDS = ("obs", "action", "reward", "discount", "next_obs")
"""The keys every batch of transitions sent to :meth:`ReplayShard.add` holds; ``episode_end`` and
the memory's extras are optional."""

IntArray = npt.NDArray[np.int64]
Ref = Any
"""A ``ray.ObjectRef``: the future value of a remote call."""


class ReplayShard:
    """One :class:`~prisample.PrioritizedReplay` served to remote callers: what a Ray actor holds.

    A plain class (``ray.remote(ReplayShard)`` makes the actor), so it is tested in-process too.
    Transitions arrive complete (``n_step = 1``): an Ape-X actor builds its n-step returns before
    sending.  With ``frame_stack > 1`` (and ``num_streams``: one per environment of every actor)
    the memory stores each stream's frames once, and stacks arrive as
    :mod:`prisample.frame_stream` messages (:meth:`add_frames`).  Every call returns plain numpy
    values and Python numbers.
    """

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], **replay_options: Any) -> None:
        if replay_options.get("n_step", 1) != 1:
            raise ValueError(
                "n_step should be 1 in a remote memory (actors send complete transitions), "
                f"but got n_step={replay_options['n_step']!r}"
            )
        self._args = (capacity, obs_shape, replay_options)
        self.replay = PrioritizedReplay(capacity, obs_shape, **replay_options)
        self._staged: PrioritizedReplay | None = None
        self._decoder: FrameStreamDecoder | None = None

    def add(self, transitions: Mapping[str, Any], priorities: npt.ArrayLike | None = None) -> int:
        """Store ``n`` transitions (``transitions[key]`` with a leading axis ``n``), at
        ``priorities`` (``|δ|`` from the actor) or else at the memory's maximum; returns ``n``."""
        if not isinstance(transitions, Mapping):
            raise TypeError(
                f"transitions should be a mapping of arrays, but got {type(transitions).__name__}"
            )
        if "frame_refs" in transitions:
            return self.add_frames(transitions, priorities)
        missing = [key for key in TRANSITION_FIELDS if key not in transitions]
        if missing:
            raise ValueError(f"transitions should hold {TRANSITION_FIELDS}, but lack {missing}")
        extras = {
            key: value for key, value in transitions.items() if key not in (*TRANSITION_FIELDS, "episode_end")
        }
        n = int(np.shape(transitions["reward"])[0]) if np.ndim(transitions["reward"]) else 0
        self.replay.add_many(
            *(transitions[key] for key in TRANSITION_FIELDS),
            episode_end=transitions.get("episode_end"),
            streams=np.zeros(n, dtype=np.int64),
            priorities=priorities,
            **extras,
        )
        return n

    def add_frames(self, message: Mapping[str, Any], priorities: npt.ArrayLike | None = None) -> int:
        """Store the ``n`` transitions of a :class:`~prisample.frame_stream.FrameStreamEncoder`
        message (its keys, with ``action``, ``reward``, ``discount``, optional ``episode_end`` and
        extras beside them): the stacks are rebuilt from each stream's last frames and stored on
        their streams; returns ``n``.  A message refused (malformed, not continuing its stream, or
        refused by the memory) changes nothing.  The streams' last frames are not part of
        :meth:`state_dict`: a restored shard goes on with the encoders' streams as they are."""
        if not isinstance(message, Mapping):
            raise TypeError(f"message should be a mapping of arrays, but got {type(message).__name__}")
        memory = self.replay.memory
        if memory.frame_stack == 1:
            raise ValueError("add_frames needs a memory with frame_stack > 1, but got frame_stack=1")
        missing = [key for key in (*FRAME_KEYS, "action", "reward", "discount") if key not in message]
        if missing:
            raise ValueError(
                f"message should hold {FRAME_KEYS} and the transitions' fields, but lacks {missing}"
            )
        if self._decoder is None:
            frames = to_numpy(message["frames"], "frames")
            dtype = memory.obs_dtype if memory.obs_dtype is not None else frames.dtype
            self._decoder = FrameStreamDecoder(
                memory.num_streams, memory.frame_stack, self._args[1], dtype, window=FRAME_WINDOW
            )
        obs, next_obs = self._decoder.read(message)
        skip = (*FRAME_KEYS, *TRANSITION_FIELDS, "episode_end")
        self.replay.add_many(
            obs,
            message["action"],
            message["reward"],
            message["discount"],
            next_obs,
            episode_end=message.get("episode_end"),
            streams=to_numpy(message["stream"], "stream").astype(np.int64),
            priorities=priorities,
            **{key: value for key, value in message.items() if key not in skip},
        )
        self._decoder.advance(message)
        return int(obs.shape[0])

    def info(self) -> dict[str, Any]:
        """``size``, ``total_mass`` and ``min_probability`` of the sampler (what an allocation
        over shards needs), and the counters ``num_added`` and ``dropped_updates``."""
        with self.replay.lock:
            sampler = self.replay.sampler
            return {
                "size": sampler.size,
                "total_mass": sampler.total_mass,
                "min_probability": sampler.min_probability,
                "num_added": self.replay.memory.num_added,
                "dropped_updates": self.replay.dropped_updates,
            }

    def sample(self, k: int) -> dict[str, Any]:
        """Draw ``k`` transitions: their fields and extras, ``slots``, ``generation``, the shard's
        own ``probabilities`` ``P_s(i)``, and :meth:`info` as it was at the draw (one lock)."""
        with self.replay.lock:
            batch, draw = self.replay.sample(k)
            info = self.info()
        return {
            **{key: batch[key] for key in TRANSITION_FIELDS},
            "extras": dict(batch.extras),
            "generation": np.asarray(batch.generation),
            "slots": draw.indices,
            "probabilities": draw.probabilities,
            **info,
        }

    def update_priorities(
        self, slots: npt.ArrayLike, priorities: npt.ArrayLike, generations: npt.ArrayLike
    ) -> int:
        """Set ``|δ|`` of drawn slots still holding ``generations``; returns how many were dropped."""
        before = self.replay.dropped_updates
        self.replay.update_priorities(slots, priorities, generations=generations)
        return self.replay.dropped_updates - before

    def state_dict(self) -> dict[str, Any]:
        """The whole memory and its sampler (:meth:`PrioritizedReplay.state_dict` with the memory)."""
        return self.replay.state_dict(include_memory=True)

    def stage_state(self, state: dict[str, Any]) -> None:
        """Load ``state`` into a new memory held aside; raises (and holds nothing) if it is refused."""
        self._staged = None
        if not isinstance(state, dict) or "memory" not in state:
            raise ValueError("state should be a shard's state_dict(), with its memory ('memory' key)")
        capacity, obs_shape, options = self._args
        staged = PrioritizedReplay(capacity, obs_shape, **options)
        staged.load_state_dict(state)
        self._staged = staged

    def commit_state(self, commit: bool) -> None:
        """Replace the memory by the staged one (``commit``), or drop the staged one."""
        if commit:
            if self._staged is None:
                raise ValueError("commit_state(True) needs a state staged by stage_state first")
            self.replay = self._staged
        self._staged = None


class RateLimiterActor:
    """A :class:`~prisample.rate_limit.RateLimiter` served to many writers and one learner: what
    the Ray actor behind ``RemoteReplay(samples_per_insert=...)`` holds.

    Its :meth:`acquire` is a coroutine (Ray runs the actor's calls on one event loop), so the
    writers and the learner waiting in it hold no thread, and :meth:`stats` answers meanwhile.
    The rule, the counters and the errors are the :class:`~prisample.rate_limit.RateLimiter`'s.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float],
        timeout: float | None,
    ) -> None:
        self.limiter = RateLimiter(
            samples_per_insert,
            min_size_to_sample=min_size_to_sample,
            error_buffer=error_buffer,
            timeout=timeout,
        )
        self._changed: asyncio.Condition | None = None  # made on the actor's event loop
        self._cancelled: set[str] = set()

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _notify(self) -> None:
        changed = self._condition()
        async with changed:
            changed.notify_all()

    async def acquire(self, side: Side, n: int, timeout: float | None, token: str | None = None) -> float:
        """Wait until ``n`` items of ``side`` may proceed, then count them; returns the seconds
        waited.  :exc:`TimeoutError` after ``timeout`` seconds; :exc:`RateLimiterClosedError` once
        closed, or once :meth:`cancel` was called with ``token``."""
        limiter, changed = self.limiter, self._condition()
        count, timeout = limiter._check_call(side, n, timeout)
        async with changed:  # every call runs on the one event loop: the limiter's lock is free
            start: float | None = None
            while (
                waited := limiter._attempt(
                    side, count, start, timeout, limiter.closed or token in self._cancelled
                )
            ) is None:
                start = time.monotonic() if start is None else start
                with contextlib.suppress(asyncio.TimeoutError):  # the next attempt raises it
                    await asyncio.wait_for(changed.wait(), _left(start, timeout))
            changed.notify_all()
            return waited

    async def cancel(self, token: str) -> None:
        """Refuse the calls carrying ``token``, waiting or later (a prefetcher being closed)."""
        self._cancelled.add(token)
        await self._notify()

    async def close(self) -> None:
        """Wake every waiting call with :exc:`RateLimiterClosedError` and refuse later ones."""
        self.limiter.close()
        await self._notify()

    def stats(self) -> dict[str, int | float]:
        return self.limiter.stats()

    def state_dict(self) -> dict[str, Any]:
        return self.limiter.state_dict()

    async def load_state_dict(self, state: dict[str, Any]) -> None:
        self.limiter.load_state_dict(state)
        await self._notify()


def _count_transitions(transitions: Mapping[str, Any]) -> int:
    """``n`` of a batch for :meth:`ReplayShard.add`, for the rate limiter: a batch the shard would
    refuse for its type or keys is refused here, before the limiter counts it."""
    if not isinstance(transitions, Mapping):
        raise TypeError(f"transitions should be a mapping of arrays, but got {type(transitions).__name__}")
    frames = "frame_refs" in transitions  # a frame-stream message: the stacks travel as frames
    fields = (*FRAME_KEYS, "action", "reward", "discount") if frames else TRANSITION_FIELDS
    missing = [key for key in fields if key not in transitions]
    if missing:
        raise ValueError(f"transitions should hold {fields}, but lack {missing}")
    return int(np.shape(transitions["reward"])[0]) if np.ndim(transitions["reward"]) else 0


@dataclass(frozen=True, eq=False)
class RemoteBatch(BatchMapping):
    """``k`` transitions drawn from a :class:`RemoteReplay`, with their weights and the keys
    (``shards``, ``slots``, ``generation``) :meth:`RemoteReplay.update_priorities` needs.
    Also a read-only mapping: ``batch["obs"]``, ``batch["log_prob"]`` for an extra."""

    obs: npt.NDArray[Any]
    action: npt.NDArray[Any]
    reward: npt.NDArray[np.float32]
    discount: npt.NDArray[np.float32]
    next_obs: npt.NDArray[Any]
    weights: npt.NDArray[np.float32]
    """``(N · P(i))^-β`` normalised as the replay's ``weight_norm`` says."""
    probabilities: npt.NDArray[np.float64]
    """``P(i)`` over the whole memory (every shard)."""
    shards: IntArray
    slots: IntArray
    generation: IntArray
    extras: dict[str, npt.NDArray[Any]] = field(default_factory=dict)

    mapped_fields: ClassVar[tuple[str, ...]] = TRANSITION_FIELDS
    readable_fields: ClassVar[tuple[str, ...]] = ("weights", "probabilities", "shards", "slots", "generation")


class RemoteReplay:
    """The handle on a prioritized memory held by ``shards`` Ray actors (:class:`ReplayShard`).

    ``capacity`` is split evenly over the shards (``capacity // shards`` each; the rest goes to
    the first shards).  ``replay_options`` go to every shard's :class:`~prisample.PrioritizedReplay`
    (``obs_dtype``, ``action_shape``, ``extras``, ``alpha``, ``eps``, ``backend``, ``eviction``...);
    shard ``s`` is seeded from ``seed`` by ``np.random.SeedSequence(seed).spawn``.  ``beta`` and
    ``weight_norm`` live here: the learner computes the weights.  ``actor_options`` go to
    ``ray.remote`` (default ``{"num_cpus": 0}``: a shard reserves no CPU slot, so a 2-CPU Ray
    keeps its slots for the actors).

    ``samples_per_insert`` (with ``min_size_to_sample``, ``error_buffer`` and ``rate_timeout``,
    the arguments of :class:`~prisample.rate_limit.RateLimiter`) holds the learner and the actors
    to a replay ratio: :meth:`add` waits while the inserts are too far ahead, :meth:`sample` while
    the draws are, or while fewer than ``min_size_to_sample`` transitions were inserted (module
    docstring: one limiter actor for all shards).  A batch of ``k`` counts ``k`` samples, an add
    of ``n`` counts ``n`` inserts: for ``u`` updates of ``k`` per transition, ``samples_per_insert
    = u · k``.  A wait longer than ``rate_timeout`` seconds raises :exc:`TimeoutError`;
    :meth:`shutdown` wakes the waiting with :exc:`~prisample.rate_limit.RateLimiterClosedError`.

    Actors call :meth:`add` (or use a :class:`ReplayWriter`); the learner calls :meth:`sample` or
    iterates :meth:`prefetch`, and :meth:`update_priorities`.  The handle pickles: passed to a Ray
    actor it reaches the same shards (its draw state travels as a copy; draw from one handle).
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        *,
        shards: int = 1,
        beta: float | LinearSchedule = 0.4,
        weight_norm: WeightNorm = "memory",
        seed: int | None = None,
        actor_options: Mapping[str, Any] | None = None,
        samples_per_insert: float | None = None,
        min_size_to_sample: int = 1,
        error_buffer: float | tuple[float, float] | None = None,
        rate_timeout: float | None = None,
        **replay_options: Any,
    ) -> None:
        capacity = check_positive_int(capacity, "capacity")
        if samples_per_insert is None:
            given = {"min_size_to_sample": min_size_to_sample != 1, "error_buffer": error_buffer is not None}
            given["rate_timeout"] = rate_timeout is not None
            for name, value in given.items():
                if value:
                    raise ValueError(f"{name} limits the replay ratio, which needs samples_per_insert too")
        elif error_buffer is None:
            raise ValueError("samples_per_insert needs an error_buffer (see prisample.rate_limit)")
        else:
            if rate_timeout is not None:
                check_real(rate_timeout, "rate_timeout", minimum=0.0)
            RateLimiter(  # checks the arguments here, before any actor starts
                samples_per_insert, min_size_to_sample=min_size_to_sample, error_buffer=error_buffer
            )
        num_shards = check_positive_int(shards, "shards")
        if num_shards > capacity:
            raise ValueError(f"shards should be at most capacity ({capacity}), but got shards={shards!r}")
        if not isinstance(beta, LinearSchedule):
            check_beta(beta)
        if weight_norm not in WEIGHT_NORMS:
            raise ValueError(
                f"weight_norm should be one of {WEIGHT_NORMS}, but got weight_norm={weight_norm!r}"
            )
        if not ray.is_initialized():
            raise RuntimeError("RemoteReplay needs a running Ray: call ray.init() first")
        self.beta = beta
        self.weight_norm: WeightNorm = weight_norm
        sequence = np.random.SeedSequence(seed)
        shard_seeds = [int(child.generate_state(1)[0]) for child in sequence.spawn(num_shards)]
        self._rng = np.random.default_rng(sequence)
        self._draws = 0
        self._next_shard = 0
        self._lock = threading.Lock()
        sizes = [capacity // num_shards + (s < capacity % num_shards) for s in range(num_shards)]
        options = dict(actor_options) if actor_options is not None else {"num_cpus": 0}
        remote = ray.remote(ReplayShard).options(**options)
        self.shards: list[Any] = [
            remote.remote(size, obs_shape, seed=shard_seed, weight_norm="none", beta=1.0, **replay_options)
            for size, shard_seed in zip(sizes, shard_seeds, strict=True)
        ]
        """The :class:`ReplayShard` actor handles."""
        self.capacities = tuple(sizes)
        self.rate_timeout = rate_timeout
        self.rate_limiter: Any = None
        """The :class:`RateLimiterActor` handle, or ``None`` without ``samples_per_insert``."""
        self._arrived = False  # an admitted insert has reached a shard (see _wait_for_arrivals)
        if samples_per_insert is not None:
            self.rate_limiter = (
                ray.remote(RateLimiterActor)
                .options(num_cpus=0)
                .remote(samples_per_insert, min_size_to_sample, error_buffer, rate_timeout)
            )
        ray.get([shard.info.remote() for shard in self.shards])  # a bad option fails here, not later

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _acquire(self, side: Side, n: int, token: str | None = None) -> None:
        """Wait for the rate limiter's leave for ``n`` items of ``side`` (raises its errors)."""
        try:
            ray.get(self.rate_limiter.acquire.remote(side, n, self.rate_timeout, token))
        except ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, (TimeoutError, RateLimiterClosedError)):
                raise error.cause from None
            raise
        except ray.exceptions.RayActorError:  # killed by shutdown() while this call waited
            raise RateLimiterClosedError(f"rate limiter shut down: {side} of n={n} refused") from None

    def _wait_for_arrivals(self) -> None:
        """Before the first draw: wait until an admitted insert has reached its shard (the
        limiter counts inserts before they are sent, so the first draw could find none yet)."""
        deadline = None if self.rate_timeout is None else time.monotonic() + self.rate_timeout
        while sum(info["size"] for info in ray.get([shard.info.remote() for shard in self.shards])) == 0:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"rate limiter: inserts were admitted, but none reached a shard in {self.rate_timeout} s"
                )
            time.sleep(0.005)
        self._arrived = True

    # -- actors' side ---------------------------------------------------------------------------
    def add(
        self,
        transitions: Mapping[str, Any],
        priorities: npt.ArrayLike | None = None,
        *,
        shard: int | None = None,
    ) -> Ref:
        """Send ``n`` transitions (a mapping of arrays with a leading axis ``n``: ``obs``,
        ``action``, ``reward``, ``discount``, ``next_obs``, optional ``episode_end`` and extras)
        with their initial ``priorities`` to ``shard`` (default: the next in turn), or a
        :class:`~prisample.frame_stream.FrameStreamEncoder` message with those fields beside it
        (:meth:`ReplayShard.add_frames`; send a stream's messages to one shard).  Returns the
        call's ``ObjectRef`` (its value: ``n``); ``ray.get`` it to wait or to see an error.
        With a rate limiter, first waits until the ``n`` transitions may be inserted."""
        if shard is not None and (
            isinstance(shard, bool)
            or not isinstance(shard, (int, np.integer))
            or not 0 <= shard < self.num_shards
        ):
            raise ValueError(f"shard should be an integer in [0, {self.num_shards}), but got shard={shard!r}")
        values = None if priorities is None else to_numpy(priorities, "priorities")
        if self.rate_limiter is not None:
            n = _count_transitions(transitions)
            if n:
                self._acquire("insert", n)
        if shard is None:
            shard, self._next_shard = self._next_shard, (self._next_shard + 1) % self.num_shards
        return self.shards[int(shard)].add.remote(dict(transitions), values)

    # -- learner's side -------------------------------------------------------------------------
    def sample(self, k: int) -> RemoteBatch:
        """Draw ``k`` transitions over all shards (see the module docstring for the allocation)
        with their weights; advances β's schedule by one draw.  With a rate limiter, first waits
        until ``k`` draws are allowed."""
        return self._sample(k, None)

    def _sample(self, k: int, token: str | None) -> RemoteBatch:
        k = check_positive_int(k, "k")
        if self.rate_limiter is not None:
            self._acquire("sample", k, token)
            if not self._arrived:
                self._wait_for_arrivals()
        with self._lock:
            if self.num_shards == 1:
                parts = {0: ray.get(self.shards[0].sample.remote(k))}
                shares = np.ones(1)
                sizes, lows = np.array([parts[0]["size"]]), np.array([parts[0]["min_probability"]])
            else:
                infos = ray.get([shard.info.remote() for shard in self.shards])
                masses = np.array([info["total_mass"] for info in infos], dtype=np.float64)
                if not masses.sum() > 0.0:
                    raise ValueError("cannot sample from an empty remote memory (every shard has size 0)")
                shares = masses / masses.sum()
                counts = self._allocate(masses, k)
                drawn = [s for s in range(self.num_shards) if counts[s]]
                calls = [self.shards[s].sample.remote(int(counts[s])) for s in drawn]
                parts = dict(zip(drawn, ray.get(calls), strict=True))
                for s, part in parts.items():
                    infos[s] = part
                sizes = np.array([info["size"] for info in infos])
                lows = np.array([info["min_probability"] for info in infos], dtype=np.float64)
            beta = self.beta(self._draws) if isinstance(self.beta, LinearSchedule) else float(self.beta)
            self._draws += 1
        return self._merge(parts, shares, int(sizes.sum()), float(np.min((shares * lows)[sizes > 0])), beta)

    def _allocate(self, masses: npt.NDArray[np.float64], k: int) -> IntArray:
        """Shard of each of ``k`` stratified points on ``[0, Σ M_s)``, counted per shard."""
        points = (np.arange(k) + self._rng.random(k)) / k * masses.sum()
        shard = np.searchsorted(np.cumsum(masses), points, side="right")
        last = int(np.flatnonzero(masses > 0.0)[-1])  # rounding at the very top
        return np.bincount(np.minimum(shard, last), minlength=masses.shape[0])

    def _merge(
        self,
        parts: dict[int, dict[str, Any]],
        shares: npt.NDArray[np.float64],
        n: int,
        low: float,
        beta: float,
    ) -> RemoteBatch:
        order = sorted(parts)
        probabilities = np.concatenate([shares[s] * parts[s]["probabilities"] for s in order])
        weights = importance_weights(
            probabilities, n, beta, self.weight_norm, min(low, float(probabilities.min()))
        )
        extras = {
            key: np.concatenate([parts[s]["extras"][key] for s in order]) for key in parts[order[0]]["extras"]
        }
        fields = {key: np.concatenate([parts[s][key] for s in order]) for key in TRANSITION_FIELDS}
        return RemoteBatch(
            **fields,
            weights=weights,
            probabilities=probabilities,
            shards=np.concatenate([np.full(parts[s]["slots"].shape[0], s, dtype=np.int64) for s in order]),
            slots=np.concatenate([parts[s]["slots"] for s in order]).astype(np.int64),
            generation=np.concatenate([parts[s]["generation"] for s in order]).astype(np.int64),
            extras=extras,
        )

    def update_priorities(self, batch: RemoteBatch, priorities: npt.ArrayLike) -> list[Ref]:
        """Send ``|δ|`` of ``batch``'s transitions to their shards (one call per shard, not
        waited for); entries whose slot was rewritten since the draw are dropped there.  Returns
        the calls' refs (each: the number dropped)."""
        values = to_numpy(priorities, "priorities").astype(np.float64, copy=False).reshape(-1)
        if values.shape[0] != batch.slots.shape[0]:
            raise ValueError(
                f"priorities should have one value per transition ({batch.slots.shape[0]}), "
                f"but got {values.shape[0]}"
            )
        check_finite_priorities(values)
        refs = []
        for s in np.unique(batch.shards):
            mine = batch.shards == s
            refs.append(
                self.shards[int(s)].update_priorities.remote(
                    batch.slots[mine], values[mine], batch.generation[mine]
                )
            )
        return refs

    def prefetch(self, k: int, *, depth: int = 1, total: int | None = None) -> RemotePrefetcher:
        """Draw batches of ``k`` in a background thread, ``depth`` ahead of the one being trained
        on: an iterator of :class:`RemoteBatch` (a context manager; or call ``close()``)."""
        return RemotePrefetcher(self, k, depth=depth, total=total)

    def stats(self) -> dict[str, Any]:
        """``size``, ``num_added`` and ``dropped_updates`` summed over the shards (waits for
        every call sent before it to each shard); with a rate limiter, its counters too
        (:meth:`RateLimiter.stats <prisample.rate_limit.RateLimiter.stats>`: ``inserts``,
        ``samples``, ``insert_waits``, ``sample_waits``, ``insert_wait_s``, ``sample_wait_s``,
        ``insert_timeouts``, ``sample_timeouts``, ``diff``)."""
        infos = ray.get([shard.info.remote() for shard in self.shards])
        stats: dict[str, Any] = {
            key: int(sum(info[key] for info in infos)) for key in ("size", "num_added", "dropped_updates")
        }
        if self.rate_limiter is not None:
            stats.update(ray.get(self.rate_limiter.stats.remote()))
        return stats

    def shutdown(self) -> None:
        """Kill the shard actors (their memory is lost: take :meth:`state_dict` first); a rate
        limiter first wakes its waiting calls with :exc:`~prisample.rate_limit.RateLimiterClosedError`."""
        if self.rate_limiter is not None:
            ray.get(self.rate_limiter.close.remote())
            ray.kill(self.rate_limiter)
            self.rate_limiter = None
        for shard in self.shards:
            ray.kill(shard)
        self.shards = []

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Every shard's memory and sampler, and this handle's draw state: an exact snapshot
        once the calls sent before it have run (each shard runs its calls in order); with a rate
        limiter, its counters (``"rate_limiter"``), so a resumed run keeps its ratio."""
        with self._lock:
            state = {
                "version": RAY_REPLAY_STATE_VERSION,
                "shards": ray.get([shard.state_dict.remote() for shard in self.shards]),
                "rng": self._rng.bit_generator.state,
                "draws": self._draws,
                "next_shard": self._next_shard,
            }
            if self.rate_limiter is not None:
                state["rate_limiter"] = ray.get(self.rate_limiter.state_dict.remote())
            return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, all shards or none: each shard stages and checks
        its part; any refusal drops every staged part and raises, else all commit.  The rate
        limiter's counters are restored with them where both the state and this handle have a
        limiter (a state saved without one leaves the counters as they are)."""
        if not isinstance(state, dict):
            raise TypeError(f"state should be a dict from state_dict(), but got {type(state).__name__}")
        if state.get("version") != RAY_REPLAY_STATE_VERSION:
            raise ValueError(
                f"state version should be {RAY_REPLAY_STATE_VERSION}, "
                f"but got version={state.get('version')!r}"
            )
        parts = state.get("shards")
        if not isinstance(parts, list) or len(parts) != self.num_shards:
            got = len(parts) if isinstance(parts, list) else type(parts).__name__
            raise ValueError(
                f"state shards should be a list of {self.num_shards} shard states, but got {got}"
            )
        for key in ("draws", "next_shard"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"state {key} should be an integer >= 0, but got {key}={value!r}")
        if state["next_shard"] >= self.num_shards:
            raise ValueError(f"state next_shard should be < {self.num_shards}, but got {state['next_shard']}")
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = cast(dict[str, Any], state.get("rng"))
        except (TypeError, ValueError, KeyError) as error:
            raise ValueError(f"state rng should be a numpy bit generator state: {error}") from None
        limits = state.get("rate_limiter")
        if limits is not None:
            try:
                RateLimiter.check_state(limits)
            except (TypeError, ValueError) as error:
                raise ValueError(f"state rate_limiter: {error}") from None
        with self._lock:
            try:
                staged = [
                    shard.stage_state.remote(part) for shard, part in zip(self.shards, parts, strict=True)
                ]
                ray.get(staged)
            except ray.exceptions.RayTaskError as error:
                ray.get([shard.commit_state.remote(False) for shard in self.shards])
                raise ValueError(f"a shard refused its state: {error.cause}") from None
            ray.get([shard.commit_state.remote(True) for shard in self.shards])
            if limits is not None and self.rate_limiter is not None:
                ray.get(self.rate_limiter.load_state_dict.remote(limits))
            self._rng, self._draws, self._next_shard = rng, state["draws"], state["next_shard"]


class RemotePrefetcher(Iterator[RemoteBatch]):
    """The next batches of a :class:`RemoteReplay`, drawn by a background thread.

    Batch ``j`` is drawn once batch ``j - depth`` was handed out, so its draw does not see the
    priority updates of the ``depth`` batches before it (``depth=0`` is not offered: call
    :meth:`RemoteReplay.sample`).  An error in the thread is raised by ``next()``.  With a rate
    limiter the thread waits for its leave before each draw; :meth:`close` cancels that wait.
    """

    def __init__(self, replay: RemoteReplay, k: int, *, depth: int = 1, total: int | None = None) -> None:
        self.k = check_positive_int(k, "k")
        self.depth = check_positive_int(depth, "depth")
        self.total = None if total is None else check_positive_int(total, "total")
        self._queue: queue.Queue[tuple[RemoteBatch | None, BaseException | None]] = queue.Queue(self.depth)
        self._stop = threading.Event()
        self._replay = replay
        self._token = uuid.uuid4().hex  # names this prefetcher's draws to the rate limiter
        self._thread = threading.Thread(target=self._run, name="prisample-remote-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        drawn = 0
        while self.total is None or drawn < self.total:
            try:
                item: tuple[RemoteBatch | None, BaseException | None] = (
                    self._replay._sample(self.k, self._token),
                    None,
                )
            except BaseException as error:  # handed to the consumer
                item = (None, error)
            if not self._put(item) or item[1] is not None:
                return
            drawn += 1
        self._put((None, None))  # the end of `total`

    def _put(self, item: tuple[RemoteBatch | None, BaseException | None]) -> bool:
        """Queue ``item`` unless the prefetcher is closed meanwhile (then ``False``)."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def __next__(self) -> RemoteBatch:
        batch = self.get()
        if batch is None:
            raise StopIteration
        return batch

    def get(self, timeout: float | None = None) -> RemoteBatch | None:
        """The next batch, waiting at most ``timeout`` seconds (``None``: until one comes); ``None``
        when none came in time, or after the last of ``total`` (then :attr:`done` is true).
        A loop that must go on while the rate limiter holds the learner back (its actors finish
        their work meanwhile) asks with a timeout; ``next()`` waits."""
        if timeout is not None:
            timeout = check_real(timeout, "timeout", minimum=0.0)
        if self._stop.is_set():
            return None
        try:
            batch, error = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if error is not None:
            self.close()
            raise error
        if batch is None:
            self._stop.set()
        return batch

    @property
    def done(self) -> bool:
        """No batch will come: the prefetcher was closed, met an error or handed out ``total``."""
        return self._stop.is_set()

    def close(self) -> None:
        """Stop the thread (the batches drawn ahead are discarded)."""
        self._stop.set()
        if self._replay.rate_limiter is not None and self._thread.is_alive():
            ray.get(self._replay.rate_limiter.cancel.remote(self._token))
        self._thread.join()

    def __enter__(self) -> RemotePrefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReplayWriter:
    """An actor's outbox to a :class:`RemoteReplay`: batches of ``add`` calls to one shard, with
    at most ``max_pending`` unanswered (back-pressure: an actor cannot outrun the memory).  With a
    rate limiter, :meth:`add` also waits while the inserts are ahead of the learner's draws (and
    raises :exc:`TimeoutError` after the replay's ``rate_timeout``, nothing sent)."""

    def __init__(self, replay: RemoteReplay, *, shard: int | None = None, max_pending: int = 2) -> None:
        self.replay = replay
        self.shard = shard
        self.max_pending = check_positive_int(max_pending, "max_pending")
        self._pending: list[Ref] = []
        self.sent = 0

    def add(self, transitions: Mapping[str, Any], priorities: npt.ArrayLike | None = None) -> None:
        """Send the transitions; waits while ``max_pending`` earlier sends are unanswered (and
        raises an error one of them met)."""
        self._pending.append(self.replay.add(transitions, priorities, shard=self.shard))
        while len(self._pending) > self.max_pending:
            done, self._pending = ray.wait(self._pending, num_returns=1)
            self.sent += sum(ray.get(done))

    def flush(self) -> int:
        """Wait for every send; returns how many transitions this writer has stored."""
        self.sent += sum(ray.get(self._pending))
        self._pending = []
        return self.sent
