"""What every slot sampler (host :class:`~prisample.PrioritizedSampler`, device
:class:`~prisample.device_sampler.DevicePrioritizedSampler`) holds besides its distribution, written
once: the lock of its public calls, ``β`` and its schedule (:class:`ScheduledBeta`), and the
checkpoint format (:func:`sampler_state_dict` writes a state, :class:`SamplerState` validates one,
every version included, into the pieces a sampler then holds).

Versions: 2 added ``"corrections"``; 3 the rank backend's write stamps (equal priorities ranked
newest first).  Older states still load: version 1 without corrections, a rank state of version
<= 2 with ties ranked by slot as they were then.  ``"corrections"`` holds
:class:`~prisample.CorrectedSampler`'s factors; the core sampler writes None there and loads
nothing else, so states of either class keep one format.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from prisample._validation import (
    check_integer,
    check_num_samples,
    check_positive_int,
    check_real,
    check_state_keys,
    generator_from_state,
    short_repr,
)
from prisample.backends import Backend, restore_backend
from prisample.weights import (
    LinearSchedule,
    WeightNorm,
    as_beta,
    as_weight_norm,
    beta_at,
    beta_from_state,
    beta_to_state,
)

STATE_VERSION = 3
_LOADABLE_VERSIONS = (1, 2, 3)
_STATE_KEYS = {
    "version",
    "capacity",
    "backend",
    "alpha",
    "eps",
    "beta",
    "weight_norm",
    "batch_size",
    "num_samples",
    "step",
    "epoch",
    "priorities",
    "backend_state",
    "rng",
}


class ScheduledBeta:
    """The lock and the β schedule of a slot sampler (Schaul et al. 2016, Sec. 3.4): ``β`` is a
    constant or a :class:`~prisample.LinearSchedule` evaluated at :attr:`step`, the number of
    batches drawn so far.  A sampler calls :meth:`_start_schedule` in its constructor and
    advances ``_step`` by one per draw."""

    _lock: threading.RLock
    _beta: float | LinearSchedule
    _step: int

    def _start_schedule(self, beta: float | LinearSchedule, lock: threading.RLock) -> None:
        self._lock = lock
        self._beta = as_beta(beta)
        self._step = 0

    @property
    def lock(self) -> threading.RLock:
        """The reentrant lock every public call holds (the one passed as ``lock=``, if any).

        Hold it to make several calls one atomic step for other threads, e.g. a draw and the
        gather of the data it names::

            with sampler.lock:
                draw = sampler.sample(32)
                batch = storage[draw.indices]

        Copies and unpickled samplers get a fresh lock; to copy or pickle a sampler that other
        threads are writing to, hold its lock around the copy.
        """
        return self._lock

    @property
    def beta(self) -> float:
        """``β`` for the next draw (the schedule's value at the number of batches drawn).

        Set a number in ``[0, 1]`` (or a 0-d tensor or array holding one) or a
        :class:`~prisample.LinearSchedule`.  ``β > 1`` raises ``ValueError`` naming it, and
        ``β`` stays as it was: the paper anneals ``β`` up to 1 (Sec. 3.4) and gives no meaning to
        more, so a schedule should stop at 1 (TorchRL's schedulers: ``max_value=1.0``)."""
        with self._lock:
            return beta_at(self._beta, self._step)

    @beta.setter
    def beta(self, value: float | LinearSchedule) -> None:
        beta = as_beta(value)
        with self._lock:
            self._beta = beta

    @property
    def step(self) -> int:
        """Batches drawn so far: the step at which the β schedule is evaluated."""
        with self._lock:
            return self._step

    @step.setter
    def step(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"step should be an integer, but got step={short_repr(value)}")
        if value < 0:
            raise ValueError(f"step should be >= 0, but got step={value}")
        with self._lock:
            self._step = int(value)

    def _beta_now(self) -> float:
        """``β`` of the next draw; call with :attr:`lock` held."""
        return beta_at(self._beta, self._step)


def sampler_state_dict(
    *,
    capacity: int,
    backend: str,
    alpha: float,
    eps: float,
    beta: float | LinearSchedule,
    weight_norm: WeightNorm,
    batch_size: int,
    num_samples: int | None,
    step: int,
    epoch: int,
    priorities: npt.NDArray[np.float64],
    backend_state: dict[str, Any],
    rng: Mapping[str, Any],
) -> dict[str, Any]:
    """A sampler's ``state_dict`` of the current version: every slot sampler writes its state
    here (plain Python and numpy values; ``priorities`` is taken as given, so pass a copy).
    ``"corrections"`` is None: a :class:`~prisample.CorrectedSampler` writes its factors over it;
    ``rng`` is a numpy ``PCG64`` bit-generator state."""
    return {
        "version": STATE_VERSION,
        "capacity": capacity,
        "backend": backend,
        "alpha": alpha,
        "eps": eps,
        "beta": beta_to_state(beta),
        "weight_norm": weight_norm,
        "batch_size": batch_size,
        "num_samples": num_samples,
        "step": step,
        "epoch": epoch,
        "priorities": priorities,
        "corrections": None,
        "backend_state": backend_state,
        "rng": rng,
    }


@dataclass(frozen=True)
class SamplerState:
    """What a sampler of a given capacity and backend holds beyond those two: its parameters, the
    number of batches drawn (``step``, which the β schedule reads), its epoch, the raw priorities
    with the backend over them, and its generator."""

    alpha: float
    eps: float
    beta: float | LinearSchedule
    weight_norm: WeightNorm
    batch_size: int
    num_samples: int | None
    step: int
    epoch: int
    raw: npt.NDArray[np.float64]
    backend: Backend
    rng: np.random.Generator

    def to_dict(self, capacity: int, backend_name: str) -> dict[str, Any]:
        """The ``state_dict`` of the current version (plain Python and numpy values, copies)."""
        return sampler_state_dict(
            capacity=capacity,
            backend=backend_name,
            alpha=self.alpha,
            eps=self.eps,
            beta=self.beta,
            weight_norm=self.weight_norm,
            batch_size=self.batch_size,
            num_samples=self.num_samples,
            step=self.step,
            epoch=self.epoch,
            priorities=self.raw.copy(),
            backend_state=self.backend.state_dict(),
            rng=self.rng.bit_generator.state,
        )

    @classmethod
    def from_dict(cls, state: Any, capacity: int, backend_name: str) -> SamplerState:
        """Validate ``state`` (any loadable version) for a sampler of ``capacity`` and
        ``backend_name`` and build, aside, what it restores; ``ValueError``/``TypeError`` naming
        the key otherwise.  Reads ``state`` only: the arrays and generator are new."""
        version = check_state_keys(
            state, _LOADABLE_VERSIONS, lambda v: _STATE_KEYS | ({"corrections"} if v >= 2 else set())
        )
        if check_integer(state["capacity"], "capacity") != capacity:
            raise ValueError(
                f"state_dict capacity should be {capacity}, but got capacity={short_repr(state['capacity'])}"
            )
        if not isinstance(state["backend"], str) or state["backend"] != backend_name:
            raise ValueError(
                f"state_dict backend should be {backend_name!r}, "
                f"but got backend={short_repr(state['backend'])}"
            )
        alpha = check_real(state["alpha"], "alpha", minimum=0.0)
        eps = check_real(state["eps"], "eps", minimum=0.0)
        beta = beta_from_state(state["beta"])
        norm = as_weight_norm(state["weight_norm"])
        batch_size = check_positive_int(state["batch_size"], "batch_size")
        num_samples = None if state["num_samples"] is None else check_num_samples(state["num_samples"])
        step = check_positive_int(state["step"], "step", minimum=0)
        epoch = check_integer(state["epoch"], "epoch")
        if version >= 2 and state["corrections"] is not None:
            raise ValueError(
                f"state_dict corrections should be None: a PrioritizedSampler holds no correction "
                f"factors (load this state into a prisample.CorrectedSampler), but got "
                f"corrections={short_repr(state['corrections'])}"
            )
        raw, backend = restore_backend(
            backend_name,
            capacity,
            state["priorities"],
            alpha,
            eps,
            state["backend_state"],
            legacy=version < 3,
        )
        rng = generator_from_state(state["rng"])
        return cls(alpha, eps, beta, norm, batch_size, num_samples, step, epoch, raw, backend, rng)
