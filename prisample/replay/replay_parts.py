"""The parts of a prioritized replay, and the one factory that builds them.

A :class:`~prisample.replay.PrioritizedReplay` is a memory, a sampler over its slots, an eviction
strategy and a write-back guard, with the steps that join the sampler to the memory (host or
device, :mod:`prisample.replay.steps`):

==============  ==================================================================================
``memory``      :class:`~prisample.replay.memory.ReplayMemory`: the transitions, in a ring of slots
``sampler``     a :class:`~prisample.slot_sampler.SlotSampler` over those slots: the priorities
``eviction``    :mod:`~prisample.replay.eviction`: which transition leaves a full memory
``guard``       :mod:`~prisample.replay.write_back`: the draw record, stale updates dropped, counted
``steps``       :mod:`~prisample.replay.steps`: how writes, draws and updates reach the sampler
==============  ==================================================================================

:func:`build_replay_parts` takes :class:`~prisample.replay.PrioritizedReplay`'s constructor
arguments, checks them all, then builds what was not passed in (``memory=``, ``sampler=``); the
host or device steps and guard follow from the sampler, chosen here once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from prisample._validation import check_positive_int, short_repr
from prisample.backends import sampler_choice
from prisample.device_sampler import DevicePrioritizedSampler
from prisample.replay.device import as_device
from prisample.replay.device_steps import DeviceSteps
from prisample.replay.eviction import Eviction, check_eviction, make_eviction
from prisample.replay.frames import reserve_rows
from prisample.replay.memory import ReplayMemory
from prisample.replay.steps import HostSteps, ReplaySteps
from prisample.replay.write_back import DeviceWriteBackGuard, HostWriteBackGuard, WriteBackGuard
from prisample.slot_sampler import SlotSampler, make_sampler
from prisample.weights import LinearSchedule, WeightNorm

__all__ = ["ReplayParts", "build_replay_parts", "steps_for"]


@dataclasses.dataclass(frozen=True)
class ReplayParts:
    """The parts one prioritized replay is made of (see the module's table)."""

    memory: ReplayMemory
    sampler: SlotSampler
    eviction: Eviction
    guard: WriteBackGuard
    steps: ReplaySteps


_MEMORY_DEFAULTS: dict[str, Any] = {
    "obs_shape": None,
    "frame_stack": 1,
    "obs_dtype": None,
    "action_shape": (),
    "action_dtype": np.int64,
    "num_streams": 1,
    "frame_capacity": None,
    "n_step": 1,
    "extras": None,
    "device": None,
}
"""The constructor's memory arguments at their defaults: what they must be beside ``memory=``."""

_SAMPLER_DEFAULTS: dict[str, Any] = {
    "alpha": 0.6,
    "beta": 0.4,
    "eps": 1e-6,
    "backend": "proportional",
    "weight_norm": "memory",
    "seed": None,
    "priorities_on": None,
}
"""The constructor's sampler arguments at their defaults: what they must be beside ``sampler=``."""


def build_replay_parts(
    capacity: int | None,
    obs_shape: tuple[int, ...] | Mapping[str, tuple[int, ...]] | None,
    *,
    frame_stack: int = 1,
    obs_dtype: npt.DTypeLike | Mapping[str, npt.DTypeLike] | None = None,
    action_shape: tuple[int, ...] = (),
    action_dtype: npt.DTypeLike = np.int64,
    num_streams: int = 1,
    frame_capacity: int | None = None,
    n_step: int = 1,
    extras: Mapping[str, tuple[tuple[int, ...], npt.DTypeLike]] | None = None,
    device: Any = None,
    alpha: float = 0.6,
    beta: float | LinearSchedule = 0.4,
    eps: float = 1e-6,
    backend: str = "proportional",
    weight_norm: WeightNorm = "memory",
    seed: int | None = None,
    eviction: str = "fifo",
    priorities_on: Any = None,
    memory: ReplayMemory | None = None,
    sampler: SlotSampler | None = None,
) -> ReplayParts:
    """The parts of ``PrioritizedReplay(capacity, obs_shape, ...)`` (its arguments, the same
    meaning), every argument checked before anything is built.

    ``memory=`` passes a ready, empty :class:`~prisample.replay.memory.ReplayMemory` instead of
    the memory arguments (``obs_shape``, ``frame_stack``, ``obs_dtype``, ``action_shape``,
    ``action_dtype``, ``num_streams``, ``frame_capacity``, ``n_step``, ``extras``, ``device``),
    which then stay unset; ``capacity`` may be left out (``None``) or must be the memory's.
    ``sampler=`` passes a ready, empty :class:`~prisample.slot_sampler.SlotSampler` of the
    memory's capacity instead of the sampler arguments (``alpha``, ``beta``, ``eps``,
    ``backend``, ``weight_norm``, ``seed``, ``priorities_on``); a
    :class:`~prisample.device_sampler.DevicePrioritizedSampler` must be on the memory's device,
    with FIFO eviction.  Either, both or none may be passed; ``ValueError``/``TypeError`` naming
    the arguments that disagree, and nothing built.
    """
    eviction = check_eviction(eviction)
    memory_args: dict[str, Any] = {
        "obs_shape": obs_shape,
        "frame_stack": frame_stack,
        "obs_dtype": obs_dtype,
        "action_shape": action_shape,
        "action_dtype": action_dtype,
        "num_streams": num_streams,
        "frame_capacity": frame_capacity,
        "n_step": n_step,
        "extras": extras,
        "device": device,
    }
    if memory is not None:
        _check_given_memory(memory, capacity, memory_args)
        capacity, n_step, device = memory.capacity, memory.n_step, memory.device
    else:
        if obs_shape is None:
            raise TypeError("obs_shape should be given (or memory=), but got obs_shape=None")
        capacity = check_positive_int(capacity, "capacity")
    if eviction == "priority" and n_step != 1:
        raise ValueError(
            f"eviction='priority' needs n_step=1 (an open n-step window names the slots after it), "
            f"but got eviction={eviction!r} with n_step={n_step!r}"
        )
    sampler_args: dict[str, Any] = {"alpha": alpha, "beta": beta, "eps": eps, "backend": backend}
    sampler_args |= {"weight_norm": weight_norm, "seed": seed, "priorities_on": priorities_on}
    if sampler is not None:
        _check_given_sampler(sampler, capacity, device, eviction, sampler_args)
    else:
        name, sampler_device = _sampler_place(backend, priorities_on, device, eviction)
        sampler = make_sampler(
            capacity,
            backend=name,
            device=sampler_device,
            alpha=alpha,
            beta=beta,
            eps=eps,
            weight_norm=weight_norm,
            size=0,
            seed=seed,
        )
    if memory is None:
        if (
            eviction == "priority"
            and frame_capacity is None
            and frame_stack != 1
            and not isinstance(obs_shape, Mapping)
        ):
            # survivors are scattered, so each may hold frame_stack + 1 frames of its own
            stack = check_positive_int(frame_stack, "frame_stack")
            frame_capacity = (stack + 1) * capacity + reserve_rows(
                stack, check_positive_int(num_streams, "num_streams")
            )
        assert obs_shape is not None
        memory = ReplayMemory(
            capacity,
            obs_shape,
            obs_dtype=obs_dtype,
            frame_stack=frame_stack,
            action_shape=action_shape,
            action_dtype=action_dtype,
            num_streams=num_streams,
            frame_capacity=frame_capacity,
            n_step=n_step,
            extras=extras,
            device=device,
        )
    strategy = make_eviction(eviction, memory.capacity)
    guard, steps = steps_for(memory, sampler, strategy)
    return ReplayParts(memory, sampler, strategy, guard, steps)


def steps_for(
    memory: ReplayMemory, sampler: SlotSampler, eviction: Eviction
) -> tuple[WriteBackGuard, ReplaySteps]:
    """The write-back guard and the steps that join ``sampler`` to ``memory``: on the device for a
    :class:`~prisample.device_sampler.DevicePrioritizedSampler` (the guard's record there too),
    on the host for any other sampler.  The one place the choice is made."""
    if isinstance(sampler, DevicePrioritizedSampler):
        device_guard = DeviceWriteBackGuard(memory.capacity, sampler.device)
        return device_guard, DeviceSteps(memory, sampler, device_guard, eviction)
    guard = HostWriteBackGuard(memory.capacity)
    return guard, HostSteps(memory, sampler, guard, eviction)


def _sampler_place(backend: Any, priorities_on: Any, device: Any, eviction: str) -> tuple[str, Any]:
    """The registered backend and the device of the replay's sampler: ``None`` (the host) unless
    ``priorities_on`` is given or ``backend`` is a ``"device_<name>"`` alias, and then the
    memory's ``device``, which must be set, equal ``priorities_on`` if that is given, and go with
    FIFO eviction; ``ValueError`` naming the arguments otherwise."""
    name, on_device = sampler_choice(backend, priorities_on)
    if not on_device:
        return name, None
    if device is None or eviction != "fifo":
        raise ValueError(
            f"backend={backend!r} with priorities_on={short_repr(priorities_on)} keeps the priorities on "
            f"the memory's device and needs device= set and eviction='fifo', but got device={device!r}, "
            f"eviction={eviction!r}"
        )
    memory_device = as_device(device)
    if priorities_on is not None:
        try:
            place = as_device(priorities_on)
        except (TypeError, ValueError):
            place = None
        if place != memory_device:
            raise ValueError(
                f"priorities_on should be None or the memory's device ({memory_device}), but got "
                f"priorities_on={short_repr(priorities_on)}"
            )
    return name, memory_device


def _check_given_memory(memory: Any, capacity: Any, given: dict[str, Any]) -> None:
    """``memory=`` must be an empty :class:`~prisample.replay.memory.ReplayMemory` (nothing ever
    added), come without the arguments that would build one, and hold ``capacity`` slots if
    that is given."""
    if not isinstance(memory, ReplayMemory):
        raise TypeError(f"memory should be a ReplayMemory, but got memory={short_repr(memory)}")
    set_too = [key for key, value in given.items() if not _is_default(value, _MEMORY_DEFAULTS[key])]
    if set_too:
        raise ValueError(
            f"memory= replaces the arguments that build one: {', '.join(set_too)} should be left "
            f"unset, but got {', '.join(f'{key}={short_repr(given[key])}' for key in set_too)}"
        )
    if capacity is not None and (isinstance(capacity, bool) or capacity != memory.capacity):
        raise ValueError(
            f"capacity should be None or the memory's capacity ({memory.capacity}), but got "
            f"capacity={short_repr(capacity)}"
        )
    if memory.num_added != 0:
        raise ValueError(
            f"memory should be empty (nothing ever added), but got a memory that has had "
            f"{memory.num_added} transitions added"
        )


def _check_given_sampler(
    sampler: Any,
    capacity: int,
    device: Any,
    eviction: str,
    given: dict[str, Any],
    defaults: dict[str, Any] = _SAMPLER_DEFAULTS,
) -> None:
    """``sampler=`` must implement :class:`~prisample.slot_sampler.SlotSampler`, hold
    ``capacity`` empty slots and come without the arguments that would build one (each of
    ``given`` at the caller's constructor default, ``defaults``); a device sampler must be on the
    memory's ``device``, with FIFO eviction."""
    if not isinstance(sampler, SlotSampler):
        raise TypeError(
            f"sampler should implement prisample.slot_sampler.SlotSampler (e.g. a PrioritizedSampler), "
            f"but got sampler={short_repr(sampler)}"
        )
    set_too = [key for key, value in given.items() if not _is_default(value, defaults[key])]
    if set_too:
        raise ValueError(
            f"sampler= replaces the arguments that build one: {', '.join(set_too)} should be left "
            f"unset, but got {', '.join(f'{key}={short_repr(given[key])}' for key in set_too)}"
        )
    if sampler.capacity != capacity or sampler.size != 0:
        raise ValueError(
            f"sampler should be empty and of the memory's capacity ({capacity}), but got a sampler of "
            f"capacity {sampler.capacity} holding {sampler.size} slots"
        )
    if isinstance(sampler, DevicePrioritizedSampler) and (
        as_device(device) != sampler.device or eviction != "fifo"
    ):
        raise ValueError(
            f"a DevicePrioritizedSampler should be on the memory's device with eviction='fifo', but got "
            f"sampler.device={sampler.device}, device={device!r}, eviction={eviction!r}"
        )


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (type(value) is type(default) and value == default)
