"""Sampling distributions over slots, one class each, behind the :class:`Backend` protocol, and
the registry that names them.

A backend shares the sampler's raw-priority array (``NaN`` marks an empty slot), keeps its own
structure in step with it and draws from it; it knows nothing of ``β`` or importance weights.
``sample`` returns the drawn slots *and* their per-draw probabilities, the marginal probability
that one draw returns that slot under stratification.

Every backend class is registered once under its :attr:`~Backend.name`
(:func:`register_backend`); the sampler's ``backend=`` argument and a checkpoint's ``"backend"``
are looked up there (:func:`backend_class`).  What the sampler and the methods need to know of a
distribution they read from its class's capability attributes, never from its name:

* :attr:`~Backend.importance_sampling`: draws are random with the reported ``P(i)``, so
  importance weights ``(N·P(i))^-β`` apply (False for greedy: the top ``k``, unit weights);
* :attr:`~Backend.priority_masses`: ``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α``, a slot's mass a
  function of its own priority (proportional): the masses must fit in a float64 sum, and with
  ``α = 1``, ``ε = 0`` the priorities are the probabilities.

Where the priorities live is the other half of a sampler's choice: :func:`sampler_choice` reads
a ``(backend, device)`` pair against the registry.  ``device=None`` keeps them on the host
(:class:`~prisample.PrioritizedSampler`, numpy, every registered backend); a torch device puts
them in tensors there (:class:`~prisample.device_sampler.DevicePrioritizedSampler`), for the
backends registered as drawable there (:func:`device_backend_names`: proportional and uniform).
``"device_<name>"`` is an alias of ``<name>`` on a device.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Protocol, TypeVar

import numba
import numpy as np
import numpy.typing as npt

from prisample._draw import WEIGHT_MODES, checked_tree_write, proportional_draw
from prisample._validation import check_slots, raise_slot_problem, short_repr, state_float_array
from prisample.rank import RankBackend
from prisample.trees import BAD_MASS, OK, ArgMaxTree, PriorityTree, mass_limit, top_k

__all__ = [
    "DEVICE_ALIAS_PREFIX",
    "NO_PRIORITIES",
    "Backend",
    "GreedyBackend",
    "ProportionalBackend",
    "UniformBackend",
    "backend_class",
    "backend_names",
    "backend_nbytes",
    "bad_mass",
    "check_alpha_fits",
    "check_masses_fit",
    "device_backend_names",
    "has_fused_step",
    "mass_error",
    "register_backend",
    "restore_backend",
    "sampler_choice",
]


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class Backend(Protocol):
    """What :class:`~prisample.PrioritizedSampler` needs from a distribution.

    A backend reads and writes the sampler's raw-priority array (``NaN`` = empty slot) and keeps
    whatever structure its distribution needs in step with it.  A class is built as
    ``cls(raw, alpha, eps)`` (a new distribution over ``raw``) or ``cls.from_state(raw, alpha,
    eps, state, legacy=...)`` (a saved one), and registered under :attr:`name`.
    """

    name: ClassVar[str]
    """The ``backend=`` value that selects this class (and a checkpoint's ``"backend"``)."""
    importance_sampling: ClassVar[bool]
    """Draws are random with probabilities ``P(i)``: importance weights ``(N·P(i))^-β`` apply."""
    priority_masses: ClassVar[bool]
    """``P(i) ∝ (p_i + ε)^α`` (Eq. 1): each mass is a function of the slot's own priority."""

    capacity: int
    raw: FloatArray
    """The sampler's raw-priority array, shared: read it freely, change it only through ``write``."""

    @property
    def count(self) -> int:
        """Number of non-empty slots."""
        ...

    def write(self, slots: IntArray, values: FloatArray) -> None:
        """``raw[slots] = values`` in order (NaN empties a slot); ``ValueError`` changes nothing."""
        ...

    def sample(self, k: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]: ...
    def probabilities(self, slots: IntArray) -> FloatArray: ...
    def min_probability(self) -> float: ...
    def total_mass(self) -> float:
        """The normaliser of ``P(i) = m_i / Σ_k m_k`` over non-empty slots (see each class)."""
        ...

    def max_priority(self) -> float:
        """Largest raw priority of a non-empty slot (NaN when all are empty)."""
        ...

    def set_alpha(self, alpha: float) -> None: ...
    def state_dict(self) -> dict[str, Any]:
        """What the raw priorities do not determine (e.g. an order of equal priorities).

        The inverse is :meth:`from_state`.
        """
        ...

    def __init__(self, raw: FloatArray, alpha: float, eps: float) -> None: ...

    @classmethod
    def from_state(
        cls, raw: FloatArray, alpha: float, eps: float, state: Any, *, legacy: bool = False
    ) -> Backend:
        """A backend over ``raw`` restored from :meth:`state_dict` output, after validating
        ``state`` against ``raw``; changes nothing and raises ``ValueError``/``TypeError`` naming
        the key otherwise.  ``legacy``: a state saved by a version before the stamps (3)."""
        ...


_REGISTRY: dict[str, type[Backend]] = {}
BackendType = TypeVar("BackendType", bound=type[Backend])


def register_backend(cls: BackendType) -> BackendType:
    """Register a backend class under its :attr:`~Backend.name` (usable as a class decorator);
    ``ValueError`` if that name is taken."""
    name = cls.name
    if not isinstance(name, str) or not name:
        raise TypeError(f"cls.name should be a non-empty str, but got name={name!r}")
    if name in _REGISTRY:
        raise ValueError(
            f"backend name should be new, but got name={name!r} (registered: {_REGISTRY[name]!r})"
        )
    _REGISTRY[name] = cls
    return cls


def backend_names() -> tuple[str, ...]:
    """The registered backend names, in registration order."""
    return tuple(_REGISTRY)


def has_fused_step(backend: object) -> bool:
    """Whether ``backend``'s own class declares ``fused_step``: a draw with its importance weights
    (``sample_weighted(k, rng, beta, weight_norm)``) and a checked write (``checked_write(slots,
    values)``), each one compiled call.  Declared by the class itself, not inherited: a subclass
    that changes the draw or the write must not be bypassed by its parent's fused kernels."""
    return bool(vars(type(backend)).get("fused_step", False))


def backend_class(name: Any) -> type[Backend]:
    """The backend class registered as ``name``; ``ValueError`` naming ``backend`` otherwise."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"backend should be one of {backend_names()}, but got backend={short_repr(name)}")
    return _REGISTRY[name]


DEVICE_ALIAS_PREFIX = "device_"
"""``"device_<name>"`` names backend ``<name>`` with the priorities on a torch device."""

_ON_DEVICE: tuple[str, ...] = ("proportional", "uniform")
"""The backends :class:`~prisample.device_sampler.DevicePrioritizedSampler` draws from on a torch
device (its :class:`~prisample.device_tree.DevicePriorityTree` holds a sum or a count; rank and
greedy orders stay on the host)."""


def device_backend_names() -> tuple[str, ...]:
    """The backend names a sampler can hold on a torch device, in registration order."""
    return tuple(name for name in _REGISTRY if name in _ON_DEVICE)


def sampler_choice(backend: Any, device: Any) -> tuple[str, bool]:
    """``(name, on_device)``: the registered backend that ``backend`` names and whether its
    priorities live on a torch device, the one rule every sampler factory follows.

    * a registered name with ``device=None``: that backend, on the host;
    * a registered name with a device: that backend on the device, if it is one of
      :func:`device_backend_names` (else ``ValueError`` naming both);
    * ``"device_<name>"``: ``<name>`` on a device (an alias, whatever ``device`` is; the caller
      says which device).

    ``ValueError`` naming ``backend`` for any other value.
    """
    if isinstance(backend, str) and backend.startswith(DEVICE_ALIAS_PREFIX):
        name = backend[len(DEVICE_ALIAS_PREFIX) :]
        if name in device_backend_names():
            return name, True
        aliases = tuple(DEVICE_ALIAS_PREFIX + n for n in device_backend_names())
        raise ValueError(
            f"backend should be one of {backend_names()} or, with the priorities on a device, one of "
            f"{aliases}, but got backend={short_repr(backend)}"
        )
    backend_class(backend)  # names it if unknown
    if device is None:
        return backend, False
    if backend not in device_backend_names():
        raise ValueError(
            f"backend={backend!r} keeps its priorities on the host: with device={short_repr(device)} "
            f"backend should be one of {device_backend_names()}, but got backend={backend!r}"
        )
    return backend, True


def bad_mass(values: FloatArray, alpha: float, eps: float, capacity: int) -> int:
    """Index of the first non-NaN ``p`` in ``values`` whose mass ``(p + ε)^α`` is not a positive
    float ``<= mass_limit(capacity)`` (mass 0 is allowed only for ``p + ε = 0``); -1 if none."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        masses = (values + eps) ** alpha
        ok = np.isnan(values) | (((masses > 0.0) | (values + eps == 0.0)) & (masses <= mass_limit(capacity)))
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if bad.shape[0] else -1


def mass_error(values: FloatArray, j: int, alpha: float, eps: float, capacity: int, name: str) -> ValueError:
    return ValueError(
        f"{name} should give a mass (p + eps)^alpha that is a positive float <= "
        f"{mass_limit(capacity):.3g} (so that {capacity} of them sum finitely), but got "
        f"{name}[{j}]={float(values[j])!r} with alpha={alpha!r}, eps={eps!r}"
    )


NO_PRIORITIES = np.empty(0, dtype=np.float64)
"""What :func:`check_masses_fit` weighs for backends other than proportional (none)."""


def check_masses_fit(alpha: float, eps: float, capacity: int, raw: FloatArray, name: str, value: Any) -> None:
    """Raise unless ``α`` keeps every mass ``(p + ε)^α`` of ``raw`` (NaN: empty), and that of a
    slot added at priority 1 into an empty memory, a positive float at most
    :func:`~prisample.trees.mass_limit` (``capacity`` of them sum finitely), and ``ε^α`` positive
    when ``ε > 0``: the one rule of the sampler's constructor, its ``alpha`` setter and its
    ``load_state_dict``.  Only proportional draws use masses, so the sampler passes no
    priorities for other backends (any finite priority is theirs to hold)."""
    with np.errstate(over="ignore", under="ignore"):
        smallest_mass = np.float64(eps) ** alpha
    if eps > 0.0 and not 0.0 < smallest_mass < np.inf:
        raise ValueError(f"eps**alpha should be a positive float, but got eps={eps!r}, alpha={alpha!r}")
    filled = raw[~np.isnan(raw)]
    largest = max(float(filled.max()), 1.0) if filled.shape[0] else 1.0
    smallest = eps
    if smallest == 0.0:  # zero priorities keep mass 0; the smallest positive one must not vanish
        positive = filled[filled > 0.0]
        smallest = float(positive.min()) if positive.shape[0] else 1.0
    with np.errstate(over="ignore", under="ignore"):
        low, high = np.float64(smallest) ** alpha, np.float64(largest + eps) ** alpha
    if not (low > 0.0 and high <= mass_limit(capacity)):
        raise ValueError(
            f"{name} should keep (p + eps)^alpha a positive float <= {mass_limit(capacity):.3g} "
            f"for priorities in [{smallest!r}, {largest!r}], but got {name}={value!r}"
        )


def check_alpha_fits(backend: type[Backend], alpha: float, eps: float, raw: FloatArray, value: Any) -> None:
    """:func:`check_masses_fit` of ``α`` (given as ``value``) for a sampler drawing from the class
    ``backend``, over its raw priorities ``raw``: only backends with
    :attr:`~Backend.priority_masses` weigh them, the priorities held under any other are not."""
    weighed = raw if backend.priority_masses else NO_PRIORITIES
    check_masses_fit(alpha, eps, raw.shape[0], weighed, "alpha", value)


def _check_empty_state(state: Any, backend: str) -> None:
    if not isinstance(state, dict):
        raise TypeError(f"backend_state should be a dict, but got backend_state={state!r}")
    if state:
        raise ValueError(
            f"backend_state of a {backend} sampler should be {{}}, but got backend_state={short_repr(state)}"
        )


class ProportionalBackend:
    """``P(i) = (p_i + ε)^α / Σ_k (p_k + ε)^α`` (Schaul et al. 2016, Eq. 1, ``p_i = |δ_i| + ε``).

    A batch of ``k`` is stratified (App. B.2.1): ``[0, Σ_k m_k)`` is cut into ``k`` equal ranges,
    one target drawn uniformly in each and located by prefix-sum search in a
    :class:`~prisample.trees.PriorityTree`.  The per-draw probability of slot ``i`` is exactly
    ``P(i)``.

    With ``ε = 0`` and ``α > 0`` a zero priority has mass 0 and is never drawn (rejection
    sampling, Sec. 6); ``min_probability`` is then the smallest *positive* ``P(i)``, found through
    an arg-max index over ``-p_i`` of the positive priorities, and a draw while every mass is 0
    raises ``ValueError``.
    """

    name: ClassVar[str] = "proportional"
    importance_sampling: ClassVar[bool] = True
    priority_masses: ClassVar[bool] = True
    fused_step: ClassVar[bool] = True
    """Has ``sample_weighted`` and ``checked_write`` (see :func:`has_fused_step`)."""

    def __init__(self, raw: FloatArray, alpha: float, eps: float) -> None:
        self.capacity = int(raw.shape[0])
        self.raw = raw
        self.tree = PriorityTree(raw, alpha, eps)
        self.count = int(np.count_nonzero(~np.isnan(raw)))
        self._negated: FloatArray | None = None
        self._positive: ArgMaxTree | None = None
        if eps == 0.0:  # zero priorities can have mass 0: keep the smallest positive one at hand
            with np.errstate(invalid="ignore"):
                self._negated = np.where(raw > 0.0, -raw, np.nan)
            self._positive = ArgMaxTree(self._negated)

    @classmethod
    def from_state(
        cls, raw: FloatArray, alpha: float, eps: float, state: Any, *, legacy: bool = False
    ) -> ProportionalBackend:
        """A backend over ``raw`` if ``state`` is ``{}`` and every mass is allowed (see
        :meth:`write`); ``ValueError``/``TypeError`` otherwise."""
        _check_empty_state(state, cls.name)
        j = bad_mass(raw, alpha, eps, raw.shape[0])
        if j >= 0:
            raise mass_error(raw, j, alpha, eps, raw.shape[0], "priorities")
        return cls(raw, alpha, eps)

    def write(self, slots: IntArray, values: FloatArray) -> None:
        """``raw[slots] = values``; ``ValueError`` (nothing written) unless every mass
        ``(p + ε)^α`` is a positive float at most ``float64 max / (2 · capacity)``: then the
        total stays finite and no positive priority gets ``P(i) = 0`` through an infinite sum."""
        code, change = self.tree.write(slots, values)
        if code != OK:
            tree = self.tree
            j = max(bad_mass(values, tree.alpha, tree.eps, self.capacity), 0)
            raise mass_error(values, j, tree.alpha, tree.eps, self.capacity, "priorities")
        self.count += change
        if self._positive is not None:
            with np.errstate(invalid="ignore"):
                self._positive.write(slots, np.where(values > 0.0, -values, np.nan))

    def checked_write(self, slots: IntArray, values: FloatArray) -> None:
        """``check_slots(raw, slots, values)`` (every slot filled, every value finite and
        ``>= 0``) then :meth:`write`, with their errors and nothing written on any; in one
        compiled call when ``ε > 0`` (the sampler's ``update_priorities``)."""
        if self._positive is not None:
            check_slots(self.raw, slots, values)
            self.write(slots, values)
            return
        code, j, change = checked_tree_write(self.tree, slots, values)
        if code == BAD_MASS:
            tree = self.tree
            j = max(bad_mass(values, tree.alpha, tree.eps, self.capacity), 0)
            raise mass_error(values, j, tree.alpha, tree.eps, self.capacity, "priorities")
        if code != OK:
            raise_slot_problem(code, j, self.raw, slots, values)
        self.count += change

    def check_drawable(self) -> None:
        """``ValueError`` when every valid slot has mass 0 (priority 0 with ``ε = 0``)."""
        if not self.tree.sums[0] > 0.0:
            raise ValueError(
                "cannot sample: every valid slot has probability 0 (priority 0 with eps=0); "
                "set a positive priority first"
            )

    def sample(self, k: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        self.check_drawable()
        return self.tree.sample(rng.random(k))

    def sample_weighted(
        self, k: int, rng: np.random.Generator, beta: float, weight_norm: str
    ) -> tuple[IntArray, FloatArray, npt.NDArray[np.float32] | None]:
        """:meth:`sample` and the draws' importance weights ``w_i = (N · P(i))^-β`` normalised
        by ``weight_norm`` (Sec. 3.4, as :func:`~prisample.weights.importance_weights`) in one
        compiled call; ``None`` for the weights where the memory normalisation's ``P_min`` is
        not ``(min_i p_i + ε)^α / Σ_k m_k`` (``ε = 0`` with a zero priority, or an underflow):
        the caller computes them with :meth:`min_probability` then."""
        if not self.tree.sums[0] > 0.0:
            self.check_drawable()
        return proportional_draw(self.tree, rng.random(k), self.count, beta, WEIGHT_MODES[weight_norm])

    def probabilities(self, slots: IntArray) -> FloatArray:
        total = self.tree.total()
        if not total > 0.0:
            return np.zeros(slots.shape[0], dtype=np.float64)
        return self.tree.masses[slots] / total

    def min_probability(self) -> float:
        """Smallest positive ``P(i)`` over valid slots (0 when every mass is 0)."""
        total = self.tree.total()
        if not total > 0.0:
            return 0.0
        low, eps, alpha = self.tree.min_raw(), self.tree.eps, self.tree.alpha
        if eps > 0.0 or low > 0.0 or alpha == 0.0 or self._positive is None:
            smallest = float((low + eps) ** alpha / total)
        else:
            slot = self._positive.argmax()  # the smallest positive priority
            if slot < 0 or self._negated is None:
                return 0.0
            smallest = float((-self._negated[slot]) ** alpha / total)
        if smallest > 0.0:
            return smallest
        # A subnormal mass (ε = 0) whose P(i) underflows to 0 counts as probability 0: the
        # smallest positive P(i) is then found by one pass (only in that corner).
        p = self.tree.masses[: self.capacity] / total
        positive = p[p > 0.0]
        return float(positive.min()) if positive.shape[0] else 0.0

    def total_mass(self) -> float:
        """``Σ_k (p_k + ε)^α`` over non-empty slots (Eq. 1's denominator)."""
        return float(self.tree.total())

    def max_priority(self) -> float:
        return self.tree.max_raw() if self.count else math.nan

    def min_priority(self) -> float:
        """Smallest raw priority of a non-empty slot (NaN when all are empty): with ``ε = 0`` and
        ``α > 0``, 0 means some valid slot has ``P(i) = 0``."""
        return self.tree.min_raw() if self.count else math.nan

    def set_alpha(self, alpha: float) -> None:
        self.tree.rebuild(alpha)

    def state_dict(self) -> dict[str, Any]:
        return {}  # the tree is a pure function of the raw priorities


class GreedyBackend:
    """Greedy prioritization (Sec. 3.2): a batch of ``k`` is the ``k`` largest ``|δ|``.

    Deterministic: ties go to the lowest slot.  ``probabilities`` reports ``1/m`` for each of the
    ``m`` slots tied at the maximum and 0 elsewhere (what a one-item draw does); importance
    sampling does not apply, so the sampler gives greedy draws unit weights.
    """

    name: ClassVar[str] = "greedy"
    importance_sampling: ClassVar[bool] = False  # the top k, not a random draw
    priority_masses: ClassVar[bool] = False

    def __init__(self, raw: FloatArray, alpha: float = 0.0, eps: float = 0.0) -> None:
        """``alpha`` and ``eps`` play no part: the order of the raw priorities decides."""
        self.capacity = int(raw.shape[0])
        self.raw = raw
        self.tree = ArgMaxTree(raw)
        self.count = int(np.count_nonzero(~np.isnan(raw)))

    def write(self, slots: IntArray, values: FloatArray) -> None:
        self.count += self.tree.write(slots, values)

    def sample(self, k: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        slots = top_k(self.tree, min(k, self.count))
        if slots.shape[0] < k:  # fewer non-empty slots than asked: cycle through the ranking
            slots = np.resize(slots, k)
        return slots, self.probabilities(slots)

    def probabilities(self, slots: IntArray) -> FloatArray:
        top = self.max_priority()
        ties = int(np.count_nonzero(self.raw == top))
        return np.where(self.raw[slots] == top, 1.0 / ties, 0.0)

    def min_probability(self) -> float:
        return (
            0.0 if self.count > int(np.count_nonzero(self.raw == self.max_priority())) else 1.0 / self.count
        )

    def total_mass(self) -> float:
        """Number of slots tied at the maximum priority (each has mass 1, every other slot 0)."""
        return float(np.count_nonzero(self.raw == self.max_priority())) if self.count else 0.0

    def max_priority(self) -> float:
        slot = self.tree.argmax()
        return float(self.raw[slot]) if slot >= 0 else math.nan

    def set_alpha(self, alpha: float) -> None:
        pass  # the greedy order does not depend on α

    def state_dict(self) -> dict[str, Any]:
        return {}  # the greedy order is a function of the raw priorities

    @classmethod
    def from_state(
        cls, raw: FloatArray, alpha: float, eps: float, state: Any, *, legacy: bool = False
    ) -> GreedyBackend:
        _check_empty_state(state, cls.name)
        return cls(raw)


@numba.njit(cache=True)
def _dense_sync(values: np.ndarray, dense: np.ndarray, pos: np.ndarray, count: int, slots: np.ndarray) -> int:
    """Bring the dense list of non-empty slots in line with ``values`` written to ``slots``, in
    order: a slot emptied and filled again in one write moves to the end, as with two writes."""
    for j in range(slots.shape[0]):
        slot = slots[j]
        h = pos[slot]
        if not math.isnan(values[j]) and h < 0:
            dense[count] = slot
            pos[slot] = count
            count += 1
        elif math.isnan(values[j]) and h >= 0:
            count -= 1
            last = dense[count]
            dense[h] = last
            pos[last] = h
            pos[slot] = -1
    return count


class UniformBackend:
    """Uniform replay over the non-empty slots: ``P(i) = 1/N`` (the ``α = 0`` distribution).

    Non-empty slots are kept in a dense array so that a draw is one random position; draws are
    independent (with replacement), like the uniform Double DQN baseline.  Priorities are still
    recorded (for diagnostics and :attr:`max_priority`).
    """

    name: ClassVar[str] = "uniform"
    importance_sampling: ClassVar[bool] = True
    priority_masses: ClassVar[bool] = False

    def __init__(self, raw: FloatArray, alpha: float = 0.0, eps: float = 0.0) -> None:
        """``alpha`` and ``eps`` play no part: every non-empty slot is equally likely."""
        self.capacity = int(raw.shape[0])
        self.raw = raw
        self.tree = ArgMaxTree(raw)
        self.dense = np.zeros(self.capacity, dtype=np.int32)
        self.pos = np.full(self.capacity, -1, dtype=np.int32)
        filled = np.flatnonzero(~np.isnan(raw))
        self.count = _dense_sync(raw[filled], self.dense, self.pos, 0, filled)

    def write(self, slots: IntArray, values: FloatArray) -> None:
        self.tree.write(slots, values)
        self.count = _dense_sync(values, self.dense, self.pos, self.count, slots)

    def sample(self, k: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        slots = self.dense[rng.integers(0, self.count, size=k)].astype(np.int64)
        return slots, np.full(k, 1.0 / self.count)

    def probabilities(self, slots: IntArray) -> FloatArray:
        return np.full(slots.shape[0], 1.0 / self.count)

    def min_probability(self) -> float:
        return 1.0 / self.count

    def total_mass(self) -> float:
        """``N``: every non-empty slot has mass 1."""
        return float(self.count)

    def max_priority(self) -> float:
        slot = self.tree.argmax()
        return float(self.raw[slot]) if slot >= 0 else math.nan

    def set_alpha(self, alpha: float) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"dense": self.dense[: self.count].copy()}  # the order of the dense list

    @classmethod
    def from_state(
        cls, raw: FloatArray, alpha: float, eps: float, state: Any, *, legacy: bool = False
    ) -> UniformBackend:
        """A backend over ``raw`` whose dense list is ``state["dense"]``: an integer array
        holding each filled slot of ``raw`` exactly once; ``ValueError``/``TypeError`` otherwise."""
        if not isinstance(state, dict):
            raise TypeError(f"backend_state should be a dict, but got backend_state={state!r}")
        if set(state) != {"dense"}:
            raise ValueError(
                f"backend_state of a uniform sampler should have the key 'dense' only, but got "
                f"keys {sorted(map(repr, state))}"
            )
        dense = state["dense"]
        if not isinstance(dense, np.ndarray) or dense.dtype.kind not in "iu" or dense.ndim != 1:
            raise TypeError(
                f"backend_state['dense'] should be a one-dimensional integer array, but got "
                f"{type(dense).__name__} {getattr(dense, 'dtype', '')} {getattr(dense, 'shape', '')}"
            )
        filled = ~np.isnan(raw)
        in_range = (dense >= 0) & (dense < raw.shape[0])
        ok = dense.shape[0] == int(np.count_nonzero(filled)) and bool(np.all(in_range))
        if ok:
            seen = np.zeros(raw.shape[0], dtype=bool)
            seen[dense] = True
            ok = bool(np.array_equal(seen, filled))  # with the length: each filled slot once
        if not ok:
            raise ValueError(
                f"backend_state['dense'] should hold each of the {int(np.count_nonzero(filled))} "
                f"filled slots exactly once, but got dense={dense[:8]!r}"
                + ("..." if dense.shape[0] > 8 else "")
            )
        backend = cls(raw)
        backend.dense[: dense.shape[0]] = dense
        backend.pos[:] = -1
        backend.pos[dense] = np.arange(dense.shape[0], dtype=np.int32)
        return backend


for _builtin in (ProportionalBackend, RankBackend, GreedyBackend, UniformBackend):
    register_backend(_builtin)  # in the order the sampler's docs and error messages list them


def restore_backend(
    name: str, capacity: int, priorities: Any, alpha: float, eps: float, state: Any, *, legacy: bool = False
) -> tuple[FloatArray, Backend]:
    """The raw priorities (a float64 copy of ``priorities``) and the backend called ``name`` over
    them, from a sampler's ``state_dict`` after full validation: ``priorities`` a float array of
    ``capacity`` values, NaN (empty) or finite and ``>= 0``, whose masses fit
    (:func:`check_masses_fit`); ``state`` the backend's own state (its class's ``from_state``;
    ``legacy``: a state saved by an older version, rank: no stamps).  Changes nothing; raises
    ``ValueError``/``TypeError`` naming the key otherwise."""
    cls = backend_class(name)
    raw = state_float_array(priorities, "priorities", (capacity,))
    bad = np.flatnonzero(~np.isnan(raw) & ~((raw >= 0.0) & (raw < np.inf)))
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(
            f"state_dict priorities should be NaN or finite and >= 0, but got priorities[{j}]={raw[j]!r}"
        )
    check_alpha_fits(cls, alpha, eps, raw, alpha)
    return raw, cls.from_state(raw, alpha, eps, state, legacy=legacy)


def backend_nbytes(backend: Backend) -> int:
    """Bytes held in the numpy arrays reachable through ``backend``'s attributes, each array once:
    its structure and the raw priorities it shares with the sampler."""
    sizes: dict[int, int] = {}
    seen: set[int] = set()
    stack: list[object] = [backend]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            sizes[id(obj)] = obj.nbytes
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return sum(sizes.values())
