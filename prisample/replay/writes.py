"""The add front-end of a replay: three ways transitions enter it, each one batch write via ``write``.

:class:`TransitionWrites`, an abstract base whose one abstract method is
:meth:`~TransitionWrites.write`, gives :class:`~prisample.replay.memory.ReplayMemory` and
:class:`~prisample.replay.PrioritizedReplay` the same ``add`` (one transition), ``add_many`` (a
batch, e.g. a vector env's step with streams) and ``add_vector_step`` (a gymnasium vector env's
step as it comes), declared once here.  Each packs its arguments into a request
(:class:`AddRequest` for ``add`` and ``add_many``, :class:`VectorAdd`) and hands it to the
class's one :meth:`TransitionWrites.write`:
the memory checks the request into rows and stores them; the prioritized replay does the same
under its lock and then tells its sampler what the write evicted and admitted.  ``insert``,
``insert_many`` and ``insert_vector_step`` take the same arguments and return :class:`Inserted`
(what the write changed) instead of the slots.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch

from prisample._validation import to_numpy

__all__ = ["AddRequest", "Inserted", "TransitionWrites", "VectorAdd", "WriteRequest"]

IntArray = npt.NDArray[np.int64]


class Inserted(NamedTuple):
    """What one write did (``insert``, ``insert_many``, ``insert_vector_step``, ``write``)."""

    slots: IntArray
    """The slots written, in order (one per transition)."""
    evicted: IntArray
    """The slots whose transitions left, in eviction order (a slot written by this call too when
    the call wrapped around the ring)."""
    evicted_until: IntArray
    """Per transition ``i``: how many of ``evicted`` left up to and including its write."""
    completed: IntArray
    """The slots that became drawable in this call and still are (n-step: their windows
    completed), in order, each once: a sampler over the memory adds exactly these."""


class AddRequest(NamedTuple):
    """The arguments of one ``add`` (``single``: one transition, given without a leading axis,
    on stream ``streams``) or one ``add_many`` (each argument with a leading axis of ``n``)."""

    single: bool
    obs: Any
    action: Any
    reward: Any
    discount: Any
    next_obs: Any
    episode_end: Any
    streams: Any
    priorities: Any
    extras: dict[str, Any]


class VectorAdd(NamedTuple):
    """The arguments of one ``add_vector_step`` (what a gymnasium vector env's step took and gave)."""

    obs: Any
    action: Any
    reward: Any
    terminated: Any
    truncated: Any
    next_obs: Any
    infos: Any
    gamma: Any
    autoreset_mode: Any
    extras: dict[str, Any]


WriteRequest = AddRequest | VectorAdd


def host(value: Any, name: str) -> Any:
    """A torch tensor as numpy (a CUDA tensor copied to the host), a dict's tensors likewise;
    anything else unchanged.  Done before a replay's lock is taken: the copy waits for the device."""
    if type(value) is np.ndarray:  # the common case skips the slower ABC check
        return value
    if isinstance(value, Mapping):
        return {key: host(item, f"{name}[{key!r}]") for key, item in value.items()}
    if isinstance(value, torch.Tensor):
        return to_numpy(value, name)
    return value


def _hosted(extras: Mapping[str, Any]) -> dict[str, Any]:
    return {name: host(value, name) for name, value in extras.items()}


class TransitionWrites(abc.ABC):
    """``add``, ``add_many`` and ``add_vector_step`` (and their ``insert`` forms), each a request
    to :meth:`write`, the one write path a subclass implements (the only abstract method)."""

    @abc.abstractmethod
    def write(self, request: WriteRequest) -> Inserted:
        """Store the transitions of ``request`` (one ``add``'s, ``add_many``'s or
        ``add_vector_step``'s arguments) in one batch write: checked once, then written; a
        rejected request changes nothing.  Returns what changed (:class:`Inserted`)."""

    def add(
        self,
        obs: Any,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: Any,
        episode_end: bool = False,
        stream: int = 0,
        **extras: npt.ArrayLike,
    ) -> int:
        """Store one transition and return its slot; the oldest transition makes room (in a
        :class:`~prisample.replay.PrioritizedReplay` it enters at the maximum priority, under
        n-step once its window is complete).

        ``discount`` is the per-step ``γ_t`` (0 at termination, ``γ`` otherwise).
        ``episode_end=True`` marks that the episode ended at ``next_obs`` (terminated or
        truncated): the next add on ``stream`` starts a new episode (and the stream's n-step
        windows end here).  Without it, an ``obs`` that does not continue the stream's last
        transition is stored in full with a ``RuntimeWarning`` (usually a missing ``stream=`` for
        interleaved environments, which costs ``frame_stack`` frames per transition).  Declared
        extras are keywords: ``add(..., log_prob=lp)``.  Torch tensors (any device) are taken as
        numpy.

        Raises ``ValueError``/``TypeError`` naming the argument, and stores nothing, for a wrong
        shape, a dtype that does not cast safely, an integer outside its dtype's range, a float or
        complex ``obs``/``next_obs``/``action``/extra that is not finite once cast to its dtype, a
        ``reward`` that is not finite as float32, a ``discount`` outside ``[0, 1]``, an extra
        missing or not declared.
        """
        request = AddRequest(
            True,
            host(obs, "obs"),
            host(action, "action"),
            reward,
            discount,
            host(next_obs, "next_obs"),
            episode_end,
            stream,
            None,
            _hosted(extras),
        )
        return int(self.write(request).slots[0])

    def add_many(
        self,
        obs: Any,
        action: npt.ArrayLike,
        reward: npt.ArrayLike,
        discount: npt.ArrayLike,
        next_obs: Any,
        *,
        episode_end: npt.ArrayLike | None = None,
        streams: npt.ArrayLike | None = None,
        priorities: npt.ArrayLike | None = None,
        **extras: npt.ArrayLike,
    ) -> IntArray:
        """:meth:`add` for ``n`` transitions at once (a vectorised environment's step), in order.

        Arguments (extras too) carry a leading axis of length ``n`` (dict observations: each key's
        array); ``n = 0`` stores nothing.  ``streams`` defaults to ``0 .. n-1`` (one stream per
        environment) and ``episode_end`` to all ``False``.  Everything is checked before anything
        is stored.  Returns the slots.

        ``priorities`` (:class:`~prisample.replay.PrioritizedReplay` only; ``n`` raw values
        ``|δ|``, finite and ``>= 0``) enter the transitions at these priorities instead of the
        maximum: Ape-X's actors compute them with their copy of the network (Horgan et al. 2018,
        Sec. 3).  The write and the priorities are one step under the lock; a transition the same
        call evicts again takes no priority.  ``n_step = 1`` only (an n-step window completes in a
        later call).
        """
        request = AddRequest(
            False,
            host(obs, "obs"),
            host(action, "action"),
            host(reward, "reward"),
            host(discount, "discount"),
            host(next_obs, "next_obs"),
            episode_end,
            streams,
            priorities,
            _hosted(extras),
        )
        return self.write(request).slots

    def add_vector_step(
        self,
        obs: Any,
        action: Any,
        reward: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        next_obs: Any,
        infos: Mapping[str, Any],
        gamma: float = 0.99,
        *,
        autoreset_mode: Any = None,
        **extras: npt.ArrayLike,
    ) -> IntArray:
        """Store one step of a gymnasium vector env (see :mod:`prisample.replay.vector_env`); returns
        the slots (one per env that really stepped, env ``i`` on stream ``i``).

        Arguments are what ``envs.step`` took and returned (``obs`` from the step before);
        ``discount = gamma · (1 − terminated)``, ``episode_end = terminated | truncated``, reset
        steps of next-step autoreset skipped, same-step autoreset's ``infos["final_obs"]`` used as
        ``next_obs``.  The :class:`~prisample.replay.vector_env.VectorStepConverter` is made at the
        first call with ``num_envs`` (at most ``num_streams``) and ``autoreset_mode``; its state is
        part of the memory's ``state_dict``.  Extras carry a leading ``num_envs`` axis.  A rejected
        call changes nothing (the converter included).
        """
        request = VectorAdd(
            host(obs, "obs"),
            action,
            host(reward, "reward"),
            terminated,
            truncated,
            host(next_obs, "next_obs"),
            infos,
            gamma,
            autoreset_mode,
            _hosted(extras),
        )
        return self.write(request).slots

    def insert(self, *args: Any, **kwargs: Any) -> Inserted:
        """:meth:`add` (the same arguments), returning what changed (see :class:`Inserted`)."""
        values = _arguments(TransitionWrites.add, args, kwargs)
        values["streams"] = values.pop("stream")
        return self.write(AddRequest(single=True, priorities=None, **values))

    def insert_many(self, *args: Any, **kwargs: Any) -> Inserted:
        """:meth:`add_many` (the same arguments), returning what changed (see :class:`Inserted`)."""
        return self.write(AddRequest(single=False, **_arguments(TransitionWrites.add_many, args, kwargs)))

    def insert_vector_step(self, *args: Any, **kwargs: Any) -> Inserted:
        """:meth:`add_vector_step` (the same arguments), returning what changed (see :class:`Inserted`)."""
        return self.write(VectorAdd(**_arguments(TransitionWrites.add_vector_step, args, kwargs)))


def _arguments(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``method`` would take from ``args`` and ``kwargs``, by parameter name (its
    defaults filled in, tensors as numpy): a request's fields."""
    bound = inspect.signature(method).bind(None, *args, **kwargs)
    bound.apply_defaults()
    return {name: host(value, name) for name, value in bound.arguments.items() if name != "self"}
