"""The checkpoint format of :class:`~prisample.PrioritizedSampler`: its ``state_dict``, and the
validation of one, every version included, into the pieces a sampler then holds.

Versions: 2 added ``"corrections"``; 3 the rank backend's write stamps (equal priorities ranked
newest first).  Older states still load: version 1 without corrections, a rank state of version
<= 2 with ties ranked by slot as they were then.  ``"corrections"`` holds
:class:`~prisample.CorrectedSampler`'s factors; the core sampler writes None there and loads
nothing else, so states of either class keep one format.
"""

from __future__ import annotations

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
from prisample.weights import LinearSchedule, WeightNorm, as_weight_norm, beta_from_state, beta_to_state

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
        return {
            "version": STATE_VERSION,
            "capacity": capacity,
            "backend": backend_name,
            "alpha": self.alpha,
            "eps": self.eps,
            "beta": beta_to_state(self.beta),
            "weight_norm": self.weight_norm,
            "batch_size": self.batch_size,
            "num_samples": self.num_samples,
            "step": self.step,
            "epoch": self.epoch,
            "priorities": self.raw.copy(),
            "corrections": None,
            "backend_state": self.backend.state_dict(),
            "rng": self.rng.bit_generator.state,
        }

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
