"""Coercion and validation of user input at the public boundary (errors name the argument)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import numpy.typing as npt


def to_numpy(values: Any, name: str) -> np.ndarray:
    """numpy view of a numpy array, torch tensor (any device), list or scalar."""
    if isinstance(values, np.ndarray):
        return values
    if hasattr(values, "detach") and hasattr(values, "cpu"):  # torch.Tensor, without importing torch
        return values.detach().cpu().numpy()
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} should be array-like, but got {name}={values!r}") from error


def check_indices(indices: Any, capacity: int, name: str = "indices") -> npt.NDArray[np.int64]:
    """One-dimensional int64 slot numbers in ``[0, capacity)``."""
    array = to_numpy(indices, name)
    if array.ndim == 0:
        array = array.reshape(1)
    if array.ndim != 1:
        raise ValueError(f"{name} should be one-dimensional, but got shape {array.shape}")
    if array.dtype.kind not in "iu":
        if array.size == 0:
            return np.empty(0, dtype=np.int64)
        raise TypeError(f"{name} should hold integers, but got dtype {array.dtype} ({name}={array[:5]}...)")
    if array.size and (array.min() < 0 or array.max() >= capacity):
        bad = array[(array < 0) | (array >= capacity)]
        raise ValueError(f"{name} should lie in [0, {capacity}), but got {name} containing {bad[:5].tolist()}")
    return array.astype(np.int64, copy=False)


def check_priorities(priorities: Any, length: int, name: str = "priorities") -> npt.NDArray[np.float64]:
    """One-dimensional finite non-negative float64 values, ``length`` of them."""
    array = to_numpy(priorities, name)
    if array.dtype.kind not in "fiu" or array.dtype == np.bool_:
        raise TypeError(f"{name} should hold real numbers, but got dtype {array.dtype}")
    array = array.astype(np.float64, copy=False).reshape(-1) if array.ndim <= 1 else array
    if array.ndim != 1:
        raise ValueError(f"{name} should be one-dimensional, but got shape {array.shape}")
    if array.shape[0] != length:
        raise ValueError(f"{name} should have one value per index ({length}), but got {array.shape[0]}")
    if length and not (array.min() >= 0.0 and array.max() < math.inf):  # NaN fails both
        bad = array[~((array >= 0.0) & (array < math.inf))]
        raise ValueError(f"{name} should be finite and >= 0, but got {name} containing {bad[:5].tolist()}")
    return array


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} should be an integer, but got {name}={value!r}")
    if value < minimum:
        raise ValueError(f"{name} should be an integer >= {minimum}, but got {name}={value!r}")
    return int(value)


def check_real(value: Any, name: str, *, minimum: float, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} should be a real number, but got {name}={value!r}")
    number = float(value)
    ok = math.isfinite(number) and (number > minimum if strict else number >= minimum)
    if not ok:
        relation = ">" if strict else ">="
        raise ValueError(f"{name} should be finite and {relation} {minimum}, but got {name}={value!r}")
    return number
