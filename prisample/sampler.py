"""``PrioritizedSampler``: prioritized sampling of slots (Schaul et al. 2016, "Prioritized
Experience Replay") as a ``torch.utils.data.Sampler[int]``; ``Draw``, the batch it returns.

The distributions are ``prisample/backends.py``'s, the importance weights and the β schedule
``prisample/weights.py``'s, the checkpoint format ``prisample/_sampler_state.py``'s, and per-slot
correction factors (Sec. 6) :class:`~prisample.CorrectedSampler`'s
(``prisample/methods/offpolicy_corrections.py``).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np
import numpy.typing as npt
from torch.utils.data import Sampler

from prisample._sampler_state import STATE_VERSION as STATE_VERSION
from prisample._sampler_state import SamplerState, ScheduledBeta
from prisample._validation import (
    as_indices,
    as_priorities,
    check_integer,
    check_lock,
    check_num_samples,
    check_positive_int,
    check_real,
    check_size,
    check_slots,
    check_write,
    generator_from_seed,
    to_numpy,
)
from prisample.backends import (
    NO_PRIORITIES,
    Backend,
    backend_class,
    backend_nbytes,
    check_alpha_fits,
    check_masses_fit,
    has_fused_step,
)
from prisample.weights import LinearSchedule, WeightNorm, as_weight_norm, weights_unchecked

__all__ = ["STATE_VERSION", "Draw", "PrioritizedSampler", "as_batch_indices"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_INT64, _FLOAT64 = np.dtype(np.int64), np.dtype(np.float64)

INDEXED_HINT = (
    "wrap the dataset in prisample.IndexedDataset so each batch carries its indices, and pass "
    "batch[0] (a batch is then (indices, *fields))"
)
"""The fix named when what should be a batch's slot indices is something else (its data)."""

RECENT_DRAWS = 256  # batches __iter__ remembers, far above any DataLoader's prefetch (lag detection)
LAG_WARNING = (
    "update_priorities got the indices of a batch drawn {lag} batch(es) before this sampler's latest "
    "draw: the DataLoader draws ahead of the train step (num_workers > 0 prefetches prefetch_factor × "
    "num_workers batches; Lightning fetches one ahead), so updates reach the draws late and "
    "sampler.weights(indices) uses the distribution at train time, not the batch's.  Give the DataLoader "
    "sampler=prisample.ledger.DrawLedger(sampler) and take each batch's draw-time weights with "
    "ledger.take(indices) (with Lightning: prisample.lightning.PrioritizedSamplingCallback), or use "
    "num_workers=0"
)


def loader_batch_size_problem(batch_size: object, sampler_batch_size: int) -> str | None:
    """What is wrong with a ``DataLoader`` of ``batch_size`` over a sampler that draws
    ``sampler_batch_size`` at a time, naming the fix; ``None`` where they agree or ``batch_size`` is
    not an ``int`` (a loader given a ``batch_sampler`` has ``batch_size=None``).

    Each batch should be one draw: the loader groups the sampler's indices ``batch_size`` at a
    time, so any other size splits draws across batches (their strata, weights and updates no
    longer line up)."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size == sampler_batch_size:
        return None
    return (
        f"the DataLoader's batch_size should equal sampler.batch_size={sampler_batch_size} (each batch one "
        f"draw of the sampler), but got batch_size={batch_size}: pass DataLoader(batch_size="
        f"{sampler_batch_size}), or build the sampler with batch_size={batch_size}"
    )


def as_batch_indices(indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """``as_indices(indices)``, naming :class:`~prisample.IndexedDataset` when ``indices`` looks like
    a batch's data (several dimensions, or not integers): a dataset that was not wrapped."""
    try:
        return as_indices(indices)
    except (TypeError, ValueError) as error:
        try:
            array = to_numpy(indices, "indices")
        except (TypeError, ValueError):
            raise error from None
        if array.ndim > 1 or (array.size and array.dtype.kind not in "iu"):
            raise type(error)(f"{error}: {INDEXED_HINT}") from None
        raise


@dataclass(frozen=True)
class Draw:
    """One sampled batch: slots, their importance weights and their per-draw probabilities."""

    indices: npt.NDArray[np.int64]
    weights: npt.NDArray[np.float32]
    probabilities: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def _new_draw(
    indices: npt.NDArray[np.int64], weights: npt.NDArray[np.float32], probabilities: npt.NDArray[np.float64]
) -> Draw:
    """``Draw(indices, weights, probabilities)``, set without the frozen dataclass's ``__init__``
    (an ``object.__setattr__`` call per field): the sampler makes one per batch."""
    draw = object.__new__(Draw)
    fields = draw.__dict__
    fields["indices"] = indices
    fields["weights"] = weights
    fields["probabilities"] = probabilities
    return draw


class PrioritizedSampler(ScheduledBeta, Sampler[int]):
    """Prioritized sampling over ``capacity`` slots (Schaul et al. 2016).

    Raw priorities ``p_i`` (e.g. ``|δ_i|``) are stored; each backend derives its ``P(i)`` (Eq. 1):

    * ``"proportional"``: ``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α``, sum tree, one uniform draw in
      each of ``k`` equal-mass ranges (App. B.2.1);
    * ``"rank"``: ``P(i) = rank(i)^-α / Σ_r r^-α``, rank by ``p_i`` descending (exact at every
      draw), one draw per equal-probability stratum of the power law;
    * ``"greedy"``: the ``k`` largest ``p_i`` (Sec. 3.2), unit weights;
    * ``"uniform"``: ``P(i) = 1/N`` over valid slots.

    With ``eps=0`` and ``α > 0`` a zero priority has ``P(i) = 0`` and is never drawn (the
    proportional rejection sampling of Sec. 6); drawing while every valid slot has priority 0
    raises ``ValueError``.

    Slots become valid through :meth:`add` (or ``size`` at construction) and enter at the current
    maximum raw priority of the memory (1 while it is empty).  Importance weights are
    ``w_i = (N · P(i))^-β`` (Sec. 3.4) normalised by ``weight_norm``: ``"memory"`` (the paper's
    ``max_j w_j`` over the memory), ``"batch"`` or ``"none"``.  ``beta`` may be a
    :class:`~prisample.LinearSchedule`, evaluated at the number of batches drawn so far.

    Greedy draws get unit weights; a slot with ``P(i) = 0`` gets weight 0.  Per-slot correction
    factors ``c_i`` on the weights (off-policy ratios, Sec. 6) are
    :class:`~prisample.CorrectedSampler`'s.

    Iterated by a ``DataLoader`` it yields ``num_samples`` indices per epoch, drawing
    ``batch_size`` at a time, so priorities updated between batches take effect at the next one.
    When :meth:`update_priorities` gets a batch this iteration drew before its latest draw (a
    ``DataLoader`` with ``num_workers > 0`` drawing ahead; detected when the loader's
    ``batch_size`` equals the sampler's), it warns once (``UserWarning``): the fix is a
    :class:`~prisample.ledger.DrawLedger` (or the Lightning callback), or ``num_workers=0``.  When
    it gets the first ``b`` indices an epoch of the iteration yielded, ``b`` neither the epoch's
    first draw nor the whole epoch, the ``DataLoader``'s ``batch_size`` is ``b``, not
    :attr:`batch_size`: it warns once (``UserWarning``) naming both.

    Every public call is atomic under threads: it holds :attr:`lock`, which you can hold to make
    several calls one atomic step.

    Subclasses extend it through :attr:`backend` (read only), :attr:`lock` and two hooks, both
    called with :attr:`lock` held: :meth:`_weights` (the weights of drawn or queried slots) and
    :meth:`_written` (after each write of raw priorities).

    >>> s = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=1e-9, seed=0)
    >>> s.update_priorities([0, 1, 2, 3], [1.0, 1.0, 1.0, 5.0])
    >>> round(float(s.probabilities([3])[0]), 6)
    0.625
    >>> d = s.sample(2)
    >>> d.indices.shape, d.weights.dtype.name
    ((2,), 'float32')
    """

    _base_weights: ClassVar[bool] = True
    """Whether the class keeps this class's :meth:`_weights` (then :meth:`sample` may fuse the
    draw with the weights); set for each subclass."""
    _base_written: ClassVar[bool] = True
    """Whether the class keeps this class's :meth:`_written`, which does nothing (then writes
    need not call it); set for each subclass."""

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = 1e-6,
        backend: str = "proportional",
        weight_norm: WeightNorm = "memory",
        size: int | None = None,
        batch_size: int = 32,
        num_samples: int | None = None,
        seed: int | None = None,
        lock: threading.RLock | None = None,
    ) -> None:
        checked_lock = check_lock(lock)
        self.capacity = check_positive_int(capacity, "capacity")
        self._alpha = check_real(alpha, "alpha", minimum=0.0)
        self._eps = check_real(eps, "eps", minimum=0.0)
        check_masses_fit(self._alpha, self._eps, self.capacity, NO_PRIORITIES, "alpha", alpha)
        self._start_schedule(beta, checked_lock)
        cls = backend_class(backend)
        self.backend_name: str = backend
        self.weight_norm = as_weight_norm(weight_norm)
        initial = check_size(size, self.capacity)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.num_samples = None if num_samples is None else check_num_samples(num_samples)
        self._rng = generator_from_seed(seed)
        self.epoch = 0
        # Lag detection: the batches __iter__ drew lately (bytes of the indices -> draw number).
        self._iter_draws: dict[bytes, int] = {}
        self._iter_count = 0
        self._lag_warned = False
        # Batch-size check: the first draws of the iteration's current epoch, and the epoch's length
        # (0 once the epoch's first batch was seen, or after the warning).
        self._head: list[npt.NDArray[np.int64]] = []
        self._head_length = 0
        self._size_warned = False
        self._raw = np.full(self.capacity, np.nan)  # raw priorities; NaN marks an empty slot
        self._backend: Backend = cls(self._raw, self._alpha, self._eps)
        if initial:
            self.add(np.arange(initial))

    # -- parameters -----------------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        """Prioritization exponent ``α`` (0: uniform); setting it (a number, or a 0-d tensor or
        array holding one, as TorchRL's parameter schedulers set) rebuilds the distribution."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        alpha = check_real(value, "alpha", minimum=0.0)
        with self._lock:
            check_alpha_fits(type(self._backend), alpha, self._eps, self._raw, value)
            self._alpha = alpha
            self._backend.set_alpha(alpha)

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def size(self) -> int:
        """Number of valid slots ``N``."""
        with self._lock:
            return self._backend.count

    @property
    def max_priority(self) -> float:
        """Largest raw priority among valid slots (1 while none is valid): new slots enter here."""
        with self._lock:
            return self._backend.max_priority() if self._backend.count else 1.0

    @property
    def total_mass(self) -> float:
        """The normaliser ``Σ_k m_k`` of ``P(i) = m_i / Σ_k m_k`` over valid slots (Eq. 1): ``m_i =
        (p_i + ε)^α`` (proportional), ``rank(i)^-α`` (rank: ``H(N) = Σ_{r≤N} r^-α``), ``1``
        (uniform), ``1`` for each slot tied at the maximum (greedy); 0 while none is valid.

        Memories split over shards weigh each shard by it: drawing shard ``s`` with probability
        ``M_s / Σ_t M_t`` and then slot ``i`` by the shard's own ``P_s(i)`` draws ``i`` with
        ``m_i / Σ_t M_t``, the distribution of one memory holding every shard (proportional).
        """
        with self._lock:
            return self._backend.total_mass() if self._backend.count else 0.0

    @property
    def min_probability(self) -> float:
        """Smallest positive ``P(i)`` over valid slots: ``P_min`` of the memory-normalised
        weights ``w_i = (P_min / P(i))^β`` (Algorithm 1, line 10); 0 while none is valid."""
        with self._lock:
            return self._backend.min_probability() if self._backend.count else 0.0

    @property
    def priorities(self) -> npt.NDArray[np.float64]:
        """Copy of the raw priorities; NaN for empty slots (never added, or removed)."""
        with self._lock:
            return self._raw.copy()

    @property
    def nbytes(self) -> int:
        """Bytes held in the sampler's arrays (priorities, the backend's structure)."""
        with self._lock:
            return backend_nbytes(self._backend)  # the raw priorities are the backend's too

    @property
    def backend(self) -> Backend:
        """The distribution drawn from (:class:`~prisample.backends.Backend`), to read: only the
        sampler's methods write it.  :meth:`load_state_dict` replaces it."""
        return self._backend

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._base_weights = cls._weights is PrioritizedSampler._weights
        cls._base_written = cls._written is PrioritizedSampler._written

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = self.__dict__.copy()
        del state["_lock"]  # a lock cannot be pickled, and a copy must not share it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        fresh = {"_iter_draws": {}, "_iter_count": 0, "_lag_warned": False}
        fresh |= {"_head": [], "_head_length": 0, "_size_warned": False}
        self.__dict__.update(fresh | state)
        self._lock = threading.RLock()

    # -- writes ---------------------------------------------------------------------------------
    def add(self, indices: npt.ArrayLike, *, checked: bool = True) -> None:
        """Mark slots as (re)written: they enter at :attr:`max_priority` (Algorithm 1, line 6).

        ``checked=False``: ``indices`` is trusted, an int64 array of slots in range (e.g. a
        replay memory's own), and is neither converted nor checked."""
        idx = as_indices(indices) if checked else cast(IntArray, indices)
        with self._lock:
            if checked:
                check_slots(self._raw, idx, need_filled=False)
            self._backend.write(idx, np.full(idx.shape[0], self.max_priority))
            self._written(idx)

    def update_priorities(
        self, indices: npt.ArrayLike, priorities: npt.ArrayLike, *, checked: bool = True
    ) -> None:
        """Set raw priorities (``|δ|`` or a per-sample loss) of filled slots; last duplicate wins.

        Accepts numpy arrays, torch tensors (any device) and lists.  Nothing changes unless every
        index is a filled slot and every priority is finite and non-negative.  Warns once when
        ``indices`` is a batch that the sampler's iteration (a ``DataLoader``) drew before its
        latest draw, and once when it shows the ``DataLoader``'s ``batch_size`` differs from
        :attr:`batch_size` (see the class).

        ``checked=False``: the caller converted and checked the input already (``indices`` an
        int64 array of slots in range, ``priorities`` a float64 array of as many finite values
        ``>= 0``, as :class:`~prisample.replay.PrioritizedReplay` passes them), so it is neither
        converted nor checked again; only that every slot is filled is (``ValueError``, nothing
        changed), against the sampler's own priorities.
        """
        if not checked:
            idx, values = cast(IntArray, indices), cast(FloatArray, priorities)
        else:
            # numpy int64 and float64 vectors (drawn indices, priorities computed in numpy) skip
            # the conversion calls, which would return these very arrays.
            if type(indices) is np.ndarray and indices.dtype is _INT64 and indices.ndim == 1:
                idx = indices
            else:
                idx = as_batch_indices(indices)
            if (
                type(priorities) is np.ndarray
                and priorities.dtype is _FLOAT64
                and priorities.shape == idx.shape
            ):
                values = priorities
            else:
                values = as_priorities(priorities, idx.shape[0])
        with self._lock:
            backend = self._backend
            if has_fused_step(backend):  # checks (slots filled, values valid) and write in one call
                backend.checked_write(idx, values)  # type: ignore[attr-defined]
            else:
                if checked:
                    check_slots(self._raw, idx, values)
                else:
                    check_slots(self._raw, idx)
                backend.write(idx, values)
            if not self._base_written:
                self._written(idx)
            if self._iter_draws:
                self._check_lag(idx)
            if self._head_length:
                self._check_batch_size(idx)

    def _check_lag(self, idx: npt.NDArray[np.int64]) -> None:
        """Warn once if ``idx`` is a batch ``__iter__`` drew before its latest draw."""
        drawn = self._iter_draws.get(idx.tobytes())
        if drawn is None or drawn == self._iter_count:
            return
        self._lag_warned = True
        self._iter_draws.clear()  # warned once: stop recording
        warnings.warn(LAG_WARNING.format(lag=self._iter_count - drawn), UserWarning, stacklevel=3)

    def _check_batch_size(self, idx: npt.NDArray[np.int64]) -> None:
        """Warn once if ``idx`` is a ``DataLoader``'s first batch of the epoch and not one draw.

        A loader yields batches of its ``batch_size`` ``b`` but the epoch's last, so its first batch
        is the epoch's first ``b`` indices, and ``b`` is known unless that batch is the whole epoch.
        Other updates (of any slots) rarely equal that prefix, so they pass."""
        size = idx.shape[0]
        if not size or size >= self._head_length:
            return
        first = self._head[0]
        if size == first.shape[0] and np.array_equal(idx, first):  # batches and draws line up
            self._head, self._head_length = [], 0
            return
        ends = np.cumsum([draw.shape[0] for draw in self._head])
        count = int(np.searchsorted(ends, size)) + 1  # draws holding the first ``size`` indices
        if count > len(self._head) or not np.array_equal(idx, np.concatenate(self._head[:count])[:size]):
            return
        problem = loader_batch_size_problem(size, self.batch_size)
        if problem is None:
            return
        self._size_warned = True
        self._head, self._head_length = [], 0
        message = (
            f"{problem}.  The sampler draws {self.batch_size} indices at a time and the DataLoader "
            f"groups them {size} at a time, so the strata of a draw are spread over several batches "
            "and batches drawn ahead of the train step (num_workers > 0) are not recognised as late"
        )
        warnings.warn(message, UserWarning, stacklevel=3)

    def write(self, indices: npt.ArrayLike, priorities: npt.ArrayLike, *, checked: bool = True) -> None:
        """Removals and additions as one ordered write: ``priorities[j]`` NaN empties slot
        ``indices[j]`` (as :meth:`remove`), a finite value ``>= 0`` fills it at that raw priority
        (as :meth:`add` would at that maximum); in order, so a slot named twice keeps the last.
        Exactly the effect of the same :meth:`remove` and :meth:`add` calls made one entry at a
        time, in one call: a replay memory tells its sampler of a write's evictions and
        admissions here.  Nothing changes unless every index is in range and every value NaN or
        finite and ``>= 0``.  ``checked=False``: trusted input, an int64 array of slots in range
        and a float64 array of as many such values, neither converted nor checked.
        """
        if checked:
            idx = as_indices(indices)
            values = np.asarray(priorities, dtype=np.float64)
            if values.shape != idx.shape:
                raise ValueError(
                    f"priorities should have one value per index ({idx.shape[0]}), got {values.shape}"
                )
        else:
            idx, values = cast(IntArray, indices), cast(FloatArray, priorities)
        with self._lock:
            if checked:
                check_write(self._raw, idx, values)
            self._backend.write(idx, values)
            self._written(idx)

    def remove(self, indices: npt.ArrayLike, *, checked: bool = True) -> None:
        """Empty slots: they are never drawn until added again.  ``checked=False``: ``indices``
        trusted (an int64 array of slots in range), neither converted nor checked."""
        idx = as_indices(indices) if checked else cast(IntArray, indices)
        with self._lock:
            if checked:
                check_slots(self._raw, idx, need_filled=False)
            self._backend.write(idx, np.full(idx.shape[0], np.nan))
            self._written(idx)

    def _written(self, slots: npt.NDArray[np.int64]) -> None:
        """Hook, called with :attr:`lock` held after each write of raw priorities at ``slots``
        (:meth:`add`, :meth:`update_priorities`, :meth:`remove`); does nothing here."""

    # -- draws ----------------------------------------------------------------------------------
    def sample(self, k: int) -> Draw:
        """Draw ``k`` slots (stratified) with their weights; advances the β schedule by one."""
        if type(k) is not int or k < 1:
            k = check_positive_int(k, "k")
        with self._lock:
            backend = self._backend
            if backend.count == 0:
                raise ValueError("cannot sample from an empty sampler (size=0): add slots first")
            if self._base_weights and has_fused_step(backend):
                # The draw and this class's weights in one compiled call: the same batch.
                slots, probabilities, weights = backend.sample_weighted(  # type: ignore[attr-defined]
                    k, self._rng, self._beta_now(), self.weight_norm
                )
                if weights is None:  # P_min of the smallest positive priority (eps = 0): the general path
                    weights = self._weights(slots, probabilities)
            else:
                slots, probabilities = backend.sample(k, self._rng)
                weights = self._weights(slots, probabilities)
            self._step += 1
        return _new_draw(slots, weights, probabilities)

    def weights(self, indices: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Importance weights of filled slots under the current distribution and ``β`` (0 for a
        slot of probability 0)."""
        idx = as_indices(indices)
        with self._lock:
            probabilities = self.probabilities(idx)  # checks the slots
            return self._weights(idx, probabilities) if idx.shape[0] else np.empty(0, dtype=np.float32)

    def probabilities(self, indices: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Per-draw probabilities ``P(i)`` of filled slots."""
        idx = as_indices(indices)
        with self._lock:
            check_slots(self._raw, idx)
            if idx.shape[0] == 0:
                return np.empty(0, dtype=np.float64)
            return self._backend.probabilities(idx)

    def _weights(
        self, slots: npt.NDArray[np.int64], probabilities: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float32]:
        """Hook, called with :attr:`lock` held: the weights of ``slots`` drawn (or asked about)
        with per-draw ``probabilities``, ``(N · P(i))^-β`` normalised by ``weight_norm``."""
        if not self._backend.importance_sampling:  # greedy: the top k, no distribution to correct
            return np.ones(probabilities.shape[0], dtype=np.float32)
        min_probability = self._backend.min_probability() if self.weight_norm == "memory" else 1.0
        beta = self._beta_now()
        return weights_unchecked(probabilities, self._backend.count, beta, self.weight_norm, min_probability)

    # -- torch Sampler protocol -----------------------------------------------------------------
    def __iter__(self) -> Iterator[int]:
        # One sample() per batch: the lock is never held across a yield.
        remaining = len(self)
        with self._lock:
            self._head = []
            self._head_length = 0 if self._size_warned else remaining
        while remaining > 0:
            k = min(self.batch_size, remaining)
            with self._lock:
                indices = self.sample(k).indices
                self._record_draw(indices)
            yield from indices.tolist()
            remaining -= k

    def _record_draw(self, indices: npt.NDArray[np.int64]) -> None:
        """Remember a batch ``__iter__`` drew, for the lag and batch-size checks of
        :meth:`update_priorities`."""
        if self._head_length and len(self._head) < RECENT_DRAWS:
            self._head.append(indices)
        if self._lag_warned:
            return
        self._iter_count += 1
        key = indices.tobytes()
        self._iter_draws.pop(key, None)  # a batch drawn again counts at its latest draw
        self._iter_draws[key] = self._iter_count
        if len(self._iter_draws) > RECENT_DRAWS:
            del self._iter_draws[next(iter(self._iter_draws))]

    def __len__(self) -> int:
        with self._lock:
            return self.num_samples if self.num_samples is not None else self._backend.count

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch (the ``DistributedSampler`` protocol); draws depend on the RNG only."""
        epoch = check_integer(epoch, "epoch")
        with self._lock:
            self.epoch = epoch

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed for identical future draws (plain Python and numpy values)."""
        with self._lock:
            held = SamplerState(
                alpha=self._alpha,
                eps=self._eps,
                beta=self._beta,
                weight_norm=self.weight_norm,
                batch_size=self.batch_size,
                num_samples=self.num_samples,
                step=self._step,
                epoch=self.epoch,
                raw=self._raw,
                backend=self._backend,
                rng=self._rng,
            )
            return held.to_dict(self.capacity, self.backend_name)

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError``/``TypeError`` (naming the key) unless :meth:`load_state_dict`
        would accept ``state``; changes nothing.  For owners that load several pieces at once
        (e.g. a replay memory and its sampler) and must check all of them before any is loaded."""
        SamplerState.from_dict(state, self.capacity, self.backend_name)  # reads what never changes: no lock

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; the sampler then draws exactly as the saved one.

        The whole state is validated first and the restored pieces are built aside (types,
        shapes, ranges, the version, consistency of the backend's state with the priorities, the
        RNG state); a state the constructor or the setters would refuse, or one holding correction
        factors (a :class:`~prisample.CorrectedSampler`'s), raises ``ValueError``/``TypeError``
        naming the key, and leaves the sampler as it was.
        """
        new = SamplerState.from_dict(state, self.capacity, self.backend_name)  # built aside: no lock
        with self._lock:
            self._alpha, self._eps, self._beta, self._step = new.alpha, new.eps, new.beta, new.step
            self.weight_norm, self.batch_size = new.weight_norm, new.batch_size
            self.num_samples, self.epoch = new.num_samples, new.epoch
            self._raw, self._backend, self._rng = new.raw, new.backend, new.rng
            self._iter_draws.clear()  # draws of the replaced history
            self._head, self._head_length = [], 0
