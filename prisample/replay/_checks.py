"""Input and checkpoint checks shared by the replay modules (errors name the argument and value)."""

from __future__ import annotations

import contextlib
import numbers
import os
import sys
import types
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt

from prisample._validation import check_positive_int, to_numpy


def cast(array: npt.NDArray[Any], dtype: np.dtype[Any], name: str) -> npt.NDArray[Any]:
    """``array`` as ``dtype``: same-kind casts, and integers that fit an integer dtype.

    A float or complex result must be finite: a value that overflows the storage dtype (1e300 as
    float32) or was not finite to begin with raises ``ValueError`` naming ``name``.
    """
    if array.dtype != dtype:
        if array.size == 0 and array.dtype.kind in "biufc":  # no values: [] is float64
            return array.astype(dtype)
        if array.dtype.kind in "biu" and dtype.kind in "iu":
            info = np.iinfo(dtype)
            if array.size and (array.min() < info.min or array.max() > info.max):
                raise ValueError(
                    f"{name} should fit {dtype}, but got values in [{array.min()}, {array.max()}]"
                )
        elif not np.can_cast(array.dtype, dtype, "same_kind"):
            raise TypeError(
                f"{name} should have dtype {dtype} (or cast to it safely), but got dtype {array.dtype}"
            )
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, by name
            cast = array.astype(dtype)
        check_finite(cast, name, array)
        return cast
    check_finite(array, name, array)
    return array


def check_finite(array: npt.NDArray[Any], name: str, given: npt.NDArray[Any]) -> None:
    """Raise unless a float or complex ``array`` (``given`` cast to storage) is finite."""
    if array.dtype.kind in "fc" and array.size:
        finite = np.isfinite(array)
        if not finite.all():
            where = np.unravel_index(int(np.argmin(finite)), array.shape)
            index = "".join(f"[{i}]" for i in where)
            raise ValueError(
                f"{name} should be finite (as {array.dtype}), but got {name}{index}={given[where].item()!r}"
            )


# |x| at or above this rounds to inf as float32 (float32's largest value plus half an ulp).
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103


def as_real(value: Any, name: str, *, unit: bool = False) -> float:
    """``value`` as a float that float32 holds finite (in ``[0, 1]`` when ``unit``)."""
    if type(value) is float:  # the common case skips the slower ABC checks
        number = value
    else:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            array = to_numpy(value, name)
            if array.size != 1 or array.dtype.kind not in "fiu":
                raise TypeError(f"{name} should be a real number, but got {name}={value!r}")
            value = array.reshape(())
        number = float(value)
    if not abs(number) < _FLOAT32_OVERFLOW:  # NaN too
        raise ValueError(f"{name} should be finite (as float32), but got {name}={number!r}")
    if unit and not 0.0 <= number <= 1.0 and not 0.0 <= np.float32(number) <= 1.0:
        raise ValueError(f"{name} should lie in [0, 1], but got {name}={number!r}")
    return number


def warn_if_too_large(nbytes: int) -> None:
    """Warn before preallocating more than the memory available (the pages are touched later)."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return
    if nbytes > available:
        warnings.warn(
            f"the replay memory needs {nbytes / 2**30:.1f} GiB but only {available / 2**30:.1f} GiB "
            "are available: the process may be killed as it fills up",
            ResourceWarning,
            stacklevel=3,
        )


def as_shape(value: Any, name: str) -> tuple[int, ...]:
    try:
        shape = tuple(value)
    except TypeError:
        raise TypeError(f"{name} should be a tuple of integers, but got {name}={value!r}") from None
    for size in shape:
        check_positive_int(size, f"{name}[...]")
    return tuple(int(size) for size in shape)


def check_keys(state: dict[str, Any], expected: set[str], where: str) -> None:
    missing = sorted(expected - state.keys())
    if missing:
        raise ValueError(f"{where} is missing the key {missing[0]!r}")
    unexpected = sorted(map(repr, state.keys() - expected))
    if unexpected:
        raise ValueError(f"{where} has the unexpected key {unexpected[0]}")


def same_config_value(value: Any, mine: Any) -> bool:
    """Whether a config entry equals this memory's (``True`` is not ``1``; shapes as lists too)."""
    if isinstance(mine, tuple):
        return (
            isinstance(value, (tuple, list)) and all(type(v) is int for v in value) and tuple(value) == mine
        )
    return type(value) is type(mine) and bool(value == mine)


def as_state_array(value: Any, name: str) -> npt.NDArray[Any]:
    try:
        return to_numpy(value, name)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{name} should be a numpy array, but got {type(value).__name__}") from error


def as_dtype(value: npt.DTypeLike, name: str) -> np.dtype[Any]:
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"{name} should be a numpy dtype, but got {name}={value!r}") from None
    if dtype.kind not in "biufc":
        raise TypeError(f"{name} should be a numeric or bool dtype, but got {name}={dtype}")
    return dtype


_OWN_FILES = (os.path.dirname(os.path.abspath(__file__)), os.path.abspath(contextlib.__file__))


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the function calling this one name
    the first line outside :mod:`prisample.replay`: the user's call, however many of the
    package's own calls (a replay's lock, the memory's write) lie between."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_FILES):
        frame, level = frame.f_back, level + 1
    return level
