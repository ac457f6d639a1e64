"""Argument checks shared by the methods: real arrays, element-wise conditions, weights in
``[0, ∞)`` and fractions in ``[0, 1]``, each failure naming the argument and the first bad value."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from prisample._validation import check_real, to_numpy


def reals(values: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    """``values`` as a float64 array; ``TypeError`` unless it holds real numbers."""
    array = to_numpy(values, name)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{name} should hold real numbers, but got dtype {array.dtype}")
    return np.asarray(array, dtype=np.float64)


def check_each(
    condition: npt.NDArray[np.bool_], values: npt.NDArray[np.float64], name: str, what: str
) -> None:
    """``ValueError`` naming the first element of ``values`` where ``condition`` fails."""
    bad = np.flatnonzero(~condition.reshape(-1))
    if bad.shape[0]:
        j = int(bad[0])
        raise ValueError(f"{name} should be {what}, but got {name}[{j}]={values.reshape(-1)[j]!r}")


def nonnegative(value: Any, name: str) -> float:
    """A real ``>= 0`` (a weight or a rate)."""
    return check_real(value, name, minimum=0.0)


def unit(value: Any, name: str) -> float:
    """A real in ``[0, 1]`` (a mixture weight or a decay)."""
    number = check_real(value, name, minimum=0.0)
    if number > 1.0:
        raise ValueError(f"{name} should lie in [0, 1], but got {name}={value!r}")
    return number
