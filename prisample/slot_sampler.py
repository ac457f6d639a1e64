"""``SlotSampler``, the one interface of a prioritized sampler over slots, host or device, and
``make_sampler``, the one factory that builds one from a backend name and a device.

Two classes implement it: :class:`~prisample.PrioritizedSampler` (priorities in a numpy array,
every registered backend) and :class:`~prisample.device_sampler.DevicePrioritizedSampler`
(priorities in tensors on a torch device, the backends of
:func:`~prisample.backends.device_backend_names`).  What an owner of the data (a replay memory)
calls of its sampler is here and nothing else, so it can be handed either, or a class of its own.

The choice is :func:`~prisample.backends.sampler_choice`'s rule: ``device=None`` keeps the
priorities on the host, a torch device puts them there, and ``"device_<name>"`` is an alias of
``<name>`` on a device (on ``device``, or the CPU when it is ``None``).

>>> make_sampler(8, backend="proportional").__class__.__name__
'PrioritizedSampler'
>>> make_sampler(8, backend="proportional", device="cpu").__class__.__name__
'DevicePrioritizedSampler'
>>> isinstance(make_sampler(8, backend="device_uniform"), SlotSampler)
True
"""

from __future__ import annotations

import threading
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import torch

from prisample.backends import sampler_choice
from prisample.device_sampler import DevicePrioritizedSampler
from prisample.sampler import PrioritizedSampler
from prisample.weights import LinearSchedule, WeightNorm

__all__ = ["SampledSlots", "SlotSampler", "make_sampler"]

Values = npt.NDArray[Any] | torch.Tensor
"""What a sampler returns per slot: numpy arrays on the host, tensors on its device."""


class SampledSlots(Protocol):
    """One batch a sampler drew (:class:`~prisample.sampler.Draw`, numpy;
    :class:`~prisample.device_sampler.DeviceDraw`, tensors on the device)."""

    @property
    def indices(self) -> Values:
        """The slots drawn (int64)."""
        ...

    @property
    def weights(self) -> Values:
        """Their importance weights ``w_i = (N · P(i))^-β / max_j w_j`` (float32)."""
        ...

    @property
    def probabilities(self) -> Values:
        """Their per-draw probabilities ``P(i)`` (float64)."""
        ...

    def __len__(self) -> int: ...


@runtime_checkable
class SlotSampler(Protocol):
    """A prioritized sampler over ``capacity`` slots (Schaul et al. 2016): raw priorities
    ``p_i`` (NaN: an empty slot), draws with ``P(i)`` of its backend (Eq. 1) and importance
    weights ``w_i = (N · P(i))^-β`` normalised by ``weight_norm`` (Sec. 3.4), ``β`` a constant or
    a schedule evaluated at the number of batches drawn.

    Writes take ``checked``: ``True`` (the default) converts the input (lists, arrays, tensors)
    and checks it, raising ``ValueError``/``TypeError`` naming the argument with nothing
    changed; ``False`` is the owner's trusted path, for input it converted and checked already
    (a host sampler takes int64 and float64 numpy arrays there, a device sampler tensors on its
    device, and neither converts or checks them again).

    Every public call holds :attr:`lock` (reentrant); hold it to make several calls one step.
    """

    capacity: int
    """Number of slots."""
    backend_name: str
    """The registered backend drawn from (:func:`~prisample.backends.backend_names`)."""
    weight_norm: WeightNorm
    """``"memory"``, ``"batch"`` or ``"none"``: the weights' normalisation."""

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def alpha(self) -> float:
        """Prioritization exponent ``α``; setting it rebuilds the distribution."""
        ...

    @alpha.setter
    def alpha(self, value: float) -> None: ...

    @property
    def eps(self) -> float:
        """``ε`` added to each priority before ``^α`` (proportional)."""
        ...

    @property
    def beta(self) -> float:
        """``β`` of the next draw."""
        ...

    @beta.setter
    def beta(self, value: float | LinearSchedule) -> None: ...

    @property
    def step(self) -> int:
        """Batches drawn so far (where the β schedule is evaluated)."""
        ...

    @property
    def size(self) -> int:
        """Number of filled slots ``N``."""
        ...

    @property
    def max_priority(self) -> float | torch.Tensor:
        """Largest raw priority of a filled slot, 1 while none is: new slots enter here."""
        ...

    @property
    def total_mass(self) -> float | torch.Tensor:
        """``Σ_k m_k``, the normaliser of ``P(i)``."""
        ...

    @property
    def min_probability(self) -> float | torch.Tensor:
        """Smallest positive ``P(i)``: ``P_min`` of the memory normalisation."""
        ...

    @property
    def priorities(self) -> npt.NDArray[np.float64]:
        """Host copy of the raw priorities; NaN for empty slots."""
        ...

    @property
    def nbytes(self) -> int: ...

    def add(self, indices: Any, *, checked: bool = True) -> None:
        """Fill slots at :attr:`max_priority` (Algorithm 1, line 6)."""
        ...

    def write(self, indices: Any, priorities: Any, *, checked: bool = True) -> None:
        """Removals (NaN) and additions (a priority) as one ordered write."""
        ...

    def remove(self, indices: Any, *, checked: bool = True) -> None:
        """Empty slots."""
        ...

    def update_priorities(self, indices: Any, priorities: Any, *, checked: bool = True) -> None:
        """Set the raw priorities of filled slots; the last of duplicates wins."""
        ...

    def sample(self, k: int) -> SampledSlots:
        """Draw ``k`` slots (stratified) with their weights; advances the β schedule by one."""
        ...

    def probabilities(self, indices: Any) -> Values:
        """``P(i)`` of filled slots."""
        ...

    def weights(self, indices: Any) -> Values:
        """Importance weights of filled slots under the current distribution and ``β``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state in the one sampler format (``prisample/_sampler_state.py``)."""
        ...

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise unless :meth:`load_state_dict` would accept ``state``; changes nothing."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (all of it, or nothing)."""
        ...


def make_sampler(
    capacity: int, *, backend: str = "proportional", device: Any = None, **options: Any
) -> SlotSampler:
    """The sampler of ``capacity`` slots that ``backend`` names with its priorities on
    ``device`` (:func:`~prisample.backends.sampler_choice`): a
    :class:`~prisample.PrioritizedSampler` for ``device=None``, a
    :class:`~prisample.device_sampler.DevicePrioritizedSampler` on ``device`` otherwise (and on
    the CPU for a ``"device_<name>"`` alias without a device).  ``options`` go to its constructor
    (``alpha``, ``beta``, ``eps``, ``weight_norm``, ``size``, ``seed``; the host's
    ``batch_size``, ``num_samples``, ``lock`` too).  ``ValueError`` naming ``backend`` (and
    ``device``) when the pair names no sampler.
    """
    name, on_device = sampler_choice(backend, device)
    # both returns are checked against the protocol by mypy: the static proof both implement it
    if on_device:
        return DevicePrioritizedSampler(capacity, backend=name, device=device, **options)
    return PrioritizedSampler(capacity, backend=name, **options)
