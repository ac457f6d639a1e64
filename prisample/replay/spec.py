"""What a replay memory's transitions must look like, and the checks that turn a write's arguments
into its rows.

:class:`TransitionSpec` holds the declared shapes and dtypes (observations as arrays or dicts,
actions, extras) and checks every argument of a write once, naming the argument and value in its
errors.  The result is :class:`Transitions`, a batch of ``n`` rows with a leading axis, which is
all :meth:`~prisample.replay.memory.ReplayMemory.write` stores: ``add`` is a batch of one,
``add_many`` a batch, a vector step the converter's rows (where only what the spec decides is
checked: the converter made the discounts, episode ends and streams).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from prisample._validation import as_indices, to_numpy
from prisample.replay._checks import as_dtype, as_real, as_shape, cast
from prisample.replay.batch import FIELDS
from prisample.replay.writes import AddRequest

__all__ = ["DTypes", "TransitionSpec", "Transitions"]

IntArray = npt.NDArray[np.int64]
DTypes = np.dtype[Any] | dict[str, np.dtype[Any]]
Shape = tuple[int, ...]

# Names an extra cannot take: the batch's fields and the writes' own arguments.
RESERVED = frozenset(
    {
        *FIELDS,
        "extras",
        "episode_end",
        "stream",
        "streams",
        "terminated",
        "truncated",
        "infos",
        "gamma",
        "autoreset_mode",
        "priorities",
    }
)


class Transitions(NamedTuple):
    """A write's checked rows, each field with a leading axis of ``n``."""

    dtype: DTypes
    """The observation dtype the rows were cast to."""
    obs: Any
    """``s_t``: ``(n, *stack_shape)`` C-contiguous, or a dict of ``(n, *shape)`` arrays."""
    next_obs: Any
    """``s_{t+1}``, as ``obs``."""
    action: npt.NDArray[Any]
    reward: npt.NDArray[np.float64]
    """float64, so that a single add's reward reaches the n-step sums unrounded."""
    discount: npt.NDArray[np.float64]
    """``γ_t`` in ``[0, 1]``, float64."""
    episode_end: npt.NDArray[np.bool_]
    streams: IntArray
    extras: dict[str, npt.NDArray[Any]] | None
    """The declared extras (``None`` when none are declared)."""

    @property
    def n(self) -> int:
        """Number of rows."""
        return int(self.action.shape[0])


def extras_spec(extras: Any) -> dict[str, tuple[Shape, np.dtype[Any]]]:
    """``extras={"name": (shape, dtype)}`` checked: identifiers other than :data:`RESERVED`."""
    if extras is None:
        return {}
    if not isinstance(extras, Mapping):
        raise TypeError(f"extras should be a dict name -> (shape, dtype), but got extras={extras!r}")
    spec = {}
    for name, value in extras.items():
        if not isinstance(name, str) or not name.isidentifier() or name in RESERVED:
            raise ValueError(
                f"extras names should be identifiers other than {sorted(RESERVED)}, but got {name!r}"
            )
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise TypeError(f"extras[{name!r}] should be a pair (shape, dtype), but got {value!r}")
        shape = as_shape(value[0], f"extras[{name!r}] shape")
        spec[name] = (shape, as_dtype(value[1], f"extras[{name!r}] dtype"))
    return spec


class TransitionSpec:
    """The shapes and dtypes of a memory's transitions, and the checks of a write's arguments.

    ``obs_shape`` a shape (array observations, stacked ``frame_stack`` deep when above 1) or a
    dict name -> shape (dict observations); ``obs_dtype`` ``None`` (inferred at the first add),
    a dtype, or for dict observations a dict name -> dtype or ``None``.
    """

    def __init__(
        self,
        obs_shape: Any,
        obs_dtype: Any,
        frame_stack: int,
        action_shape: Shape,
        action_dtype: np.dtype[Any],
        num_streams: int,
        extras: Any,
    ) -> None:
        self.action_shape, self.action_dtype, self.num_streams = action_shape, action_dtype, num_streams
        self.extras = extras_spec(extras)
        self.obs_keys: tuple[str, ...] | None = None
        self.declared: np.dtype[Any] | dict[str, np.dtype[Any] | None] | None
        """The observation dtype as declared (``None`` where it is inferred at the first add)."""
        if isinstance(obs_shape, Mapping):
            keys = tuple(obs_shape)
            if not keys or not all(isinstance(k, str) for k in keys):
                raise ValueError(
                    f"obs_shape should be a shape or a non-empty dict str -> shape, got {obs_shape!r}"
                )
            self.obs_keys = keys
            self.obs_shape: Any = {k: as_shape(obs_shape[k], f"obs_shape[{k!r}]") for k in keys}
            if isinstance(obs_dtype, Mapping) and not isinstance(obs_dtype, np.dtype):
                dtypes: Mapping[str, Any] = obs_dtype
                if set(dtypes) != set(keys):
                    raise ValueError(
                        f"obs_dtype should have the keys of obs_shape {list(keys)}, but got {list(dtypes)}"
                    )
                self.declared = {
                    k: None if dtypes[k] is None else as_dtype(dtypes[k], f"obs_dtype[{k!r}]") for k in keys
                }
            else:
                one = None if obs_dtype is None else as_dtype(obs_dtype, "obs_dtype")
                self.declared = dict.fromkeys(keys, one)
        else:
            self.obs_shape = as_shape(obs_shape, "obs_shape")
            if isinstance(obs_dtype, Mapping):
                raise TypeError("obs_dtype should be a dtype or None for array observations, but got a dict")
            self.declared = None if obs_dtype is None else as_dtype(obs_dtype, "obs_dtype")
        self.stack_shape: Any = (
            (frame_stack, *self.obs_shape) if frame_stack > 1 and self.obs_keys is None else self.obs_shape
        )
        """The shape of one ``obs`` (array observations)."""

    @property
    def declared_dtype(self) -> DTypes | None:
        """The declared dtype when it is complete (every key's for dict observations), else ``None``."""
        declared = self.declared
        if isinstance(declared, dict):
            if any(d is None for d in declared.values()):
                return None
            return dict(declared)  # type: ignore[arg-type]
        return declared

    def dtype_of(self, obs: Any, known: DTypes | None) -> DTypes:
        """The observation dtype: the one ``known``, else the declared one completed by ``obs``'s."""
        if known is not None:
            return known
        if self.obs_keys is None:
            return as_dtype(to_numpy(obs, "obs").dtype, "obs dtype")
        if not isinstance(obs, Mapping):
            raise TypeError(
                f"obs should be a dict with keys {list(self.obs_keys)}, but got {type(obs).__name__}"
            )
        declared = self.declared
        assert isinstance(declared, dict)
        dtypes = {}
        for k in self.obs_keys:
            given = declared[k]
            if given is not None:
                dtypes[k] = given
            elif k not in obs:
                raise ValueError(f"obs should have the keys {list(self.obs_keys)}, but lacks {k!r}")
            else:
                dtypes[k] = as_dtype(to_numpy(obs[k], f"obs[{k!r}]").dtype, f"obs[{k!r}] dtype")
        return dtypes

    # -- the kinds of write ---------------------------------------------------------------------
    def rows(self, known: DTypes | None, request: AddRequest) -> Transitions:
        """An ``add``'s or ``add_many``'s arguments checked into rows (``known``: the memory's
        observation dtype, ``None`` before the first add)."""
        return self._one(known, request) if request.single else self._many(known, request)

    def _one(self, known: DTypes | None, request: AddRequest) -> Transitions:
        """One transition (``add``'s arguments) as a batch of one."""
        obs, action, reward, discount, next_obs, episode_end, stream = request[1:8]
        dtype = self.dtype_of(obs, known)
        obs_a = self.observations(obs, "obs", dtype, None)
        next_a = self.observations(next_obs, "next_obs", dtype, None)
        action_a = cast(
            np.asarray(action) if type(action) is int else to_numpy(action, "action"),
            self.action_dtype,
            "action",
        )
        if action_a.shape != self.action_shape:
            raise ValueError(f"action should have shape {self.action_shape}, but got shape {action_a.shape}")
        reward_f = as_real(reward, "reward")
        discount_f = as_real(discount, "discount", unit=True)
        if type(episode_end) is not bool and not isinstance(episode_end, np.bool_):
            raise TypeError(f"episode_end should be a bool, but got episode_end={episode_end!r}")
        if type(stream) is not int and (isinstance(stream, bool) or not isinstance(stream, numbers.Integral)):
            raise TypeError(f"stream should be an integer, but got stream={stream!r}")
        if not 0 <= int(stream) < self.num_streams:
            raise ValueError(f"stream should lie in [0, {self.num_streams}), but got stream={stream}")
        return Transitions(
            dtype,
            obs_a,
            next_a,
            action_a[None],
            np.array([reward_f], dtype=np.float64),
            np.array([discount_f], dtype=np.float64),
            np.array([bool(episode_end)]),
            np.array([int(stream)], dtype=np.int64),
            self.extra_values(request.extras, None) if (request.extras or self.extras) else None,
        )

    def _many(self, known: DTypes | None, request: AddRequest) -> Transitions:
        """``n`` transitions (``add_many``'s arguments, each with a leading axis)."""
        obs, action, reward, discount, next_obs, episode_end, streams = request[1:8]
        dtype = self.dtype_of(obs, known)
        obs_a = self.observations(obs, "obs", dtype, -1)
        n = next(iter(obs_a.values())).shape[0] if isinstance(obs_a, dict) else obs_a.shape[0]
        next_a = self.observations(next_obs, "next_obs", dtype, n)
        action_a = column(action, "action", self.action_shape, self.action_dtype, n)
        rewards = column(reward, "reward", (), np.dtype(np.float32), n, real=True)
        discounts = column(discount, "discount", (), np.dtype(np.float32), n, real=True)
        outside = ~((discounts >= 0.0) & (discounts <= 1.0))
        if outside.any():
            j = int(np.argmax(outside))
            given = to_numpy(discount, "discount")[j].item()
            raise ValueError(f"discount should lie in [0, 1], but got discount[{j}]={given!r}")
        if episode_end is None:
            ends = np.zeros(n, dtype=np.bool_)
        else:
            ends = to_numpy(episode_end, "episode_end")
            if ends.dtype != np.bool_ or ends.shape != (n,):
                raise TypeError(f"episode_end should be {n} bools, but got {ends.dtype}{list(ends.shape)}")
        ids = np.arange(n, dtype=np.int64) if streams is None else as_indices(streams, "streams")
        if ids.shape != (n,):
            raise ValueError(f"streams should have one value per transition ({n}), but got {ids.shape[0]}")
        bad = (ids < 0) | (ids >= self.num_streams)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"streams should lie in [0, {self.num_streams}), but got streams[{j}]={ids[j]}")
        return Transitions(
            dtype,
            obs_a,
            next_a,
            action_a,
            rewards.astype(np.float64),
            discounts.astype(np.float64),
            ends,
            ids,
            self.extra_values(request.extras, n) if (request.extras or self.extras) else None,
        )

    def converted(self, known: DTypes | None, rows: Any, extras: Mapping[str, Any]) -> Transitions:
        """A vector step's rows from :class:`~prisample.replay.vector_env.VectorStepConverter`:
        what the spec decides is checked (observations, actions, rewards as float32, extras), not
        what the converter made (discounts ``0`` or ``gamma``, episode ends, one stream per env)."""
        dtype = self.dtype_of(rows.obs, known)
        n = rows.streams.shape[0]
        rewards = column(rows.reward, "reward", (), np.dtype(np.float32), n, real=True)
        return Transitions(
            dtype,
            self.observations(rows.obs, "obs", dtype, n),
            self.observations(rows.next_obs, "next_obs", dtype, n),
            column(rows.action, "action", self.action_shape, self.action_dtype, n),
            rewards.astype(np.float64),
            rows.discount.astype(np.float32).astype(np.float64),  # as add_many rounds them
            rows.episode_end,
            rows.streams,
            self.extra_values(extras, n) if (extras or self.extras) else None,
        )

    # -- the checks of one argument -------------------------------------------------------------
    def observations(self, value: Any, name: str, dtype: DTypes, n: int | None) -> Any:
        """``obs`` or ``next_obs`` checked and cast, with a leading axis: ``n`` rows (``-1``: any
        number), or ``None`` for one observation given without it (then errors name its shape
        without the axis).  Dict observations: a dict of arrays, every key with the same rows."""
        if isinstance(dtype, dict):
            assert self.obs_keys is not None
            if not isinstance(value, Mapping) or set(value) != set(self.obs_keys):
                got = sorted(value) if isinstance(value, Mapping) else type(value).__name__
                raise ValueError(f"{name} should be a dict with keys {sorted(self.obs_keys)}, but got {got}")
            out = {}
            for k in self.obs_keys:
                out[k] = column(value[k], f"{name}[{k!r}]", self.obs_shape[k], dtype[k], n)
                if n == -1:
                    n = out[k].shape[0]
            return out
        return column(value, name, self.stack_shape, dtype, n)

    def extra_values(self, values: Mapping[str, Any], n: int | None) -> dict[str, npt.NDArray[Any]]:
        """The declared extras checked and cast: ``n`` rows each, or one value each (``None``)
        given a leading axis of one."""
        unknown = sorted(set(values) - set(self.extras))
        if unknown:
            raise TypeError(
                f"got an unexpected extra {unknown[0]!r}: declared extras are {sorted(self.extras)}"
            )
        out = {}
        for name, (shape, dtype) in self.extras.items():
            if name not in values:
                raise TypeError(f"the extra {name!r} is missing: pass it as a keyword ({name}=...)")
            out[name] = column(values[name], name, shape, dtype, n)
        return out


def column(
    value: Any, name: str, shape: Shape, dtype: np.dtype[Any], n: int | None, *, real: bool = False
) -> npt.NDArray[Any]:
    """``value`` checked as ``n`` items of ``shape`` (``n = -1``: any number) and cast to
    ``dtype``, C-contiguous; ``n = None``: one item without the leading axis, returned with a
    leading axis of one (errors then name ``shape`` itself)."""
    array = value if isinstance(value, np.ndarray) else to_numpy(value, name)
    if n is None:
        if array.shape != shape:
            raise ValueError(f"{name} should have shape {shape}, but got shape {array.shape}")
        array = cast(array, dtype, name)
        return (array if array.flags.c_contiguous else np.ascontiguousarray(array))[None]
    wrong = array.ndim != len(shape) + 1 or array.shape[1:] != shape
    if wrong or (n >= 0 and array.shape[0] != n):
        want = ("n" if n < 0 else str(n), *map(str, shape))
        raise ValueError(f"{name} should have shape ({', '.join(want)}), but got shape {array.shape}")
    if real and array.dtype.kind not in "fiu":
        raise TypeError(f"{name} should hold real numbers, but got dtype {array.dtype}")
    return np.ascontiguousarray(cast(array, dtype, name))
