"""Coercion and validation of user input at the public boundary (errors name the argument)."""

from __future__ import annotations

import _thread
import math
import numbers
import sys
import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
import torch

_NARROW_FLOATS = (torch.float16, torch.bfloat16)
_OUT_OF_RANGE, _EMPTY_SLOT, _BAD_PRIORITY = 1, 2, 3


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (error messages about large states)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _torch_to_numpy(tensor: Any, name: str) -> npt.NDArray[Any]:
    """A torch tensor's values as numpy: sparse ones densified, float16/bfloat16 widened to
    float32 (numpy has no bfloat16), the ``meta`` device (no values) refused.  Other dtypes numpy
    cannot take as numbers (complex, bool) are left to the callers' dtype checks."""
    if tensor.is_meta:
        raise ValueError(
            f"{name} should hold values, but got a tensor on the meta device ({name}={short_repr(tensor)})"
        )
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.dtype in _NARROW_FLOATS:
        tensor = tensor.float()
    return np.asarray(tensor.detach().cpu().numpy())


def to_numpy(values: Any, name: str) -> npt.NDArray[Any]:
    """numpy view of a numpy array, torch tensor (any device, any layout), list or scalar."""
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, torch.Tensor):
        return _torch_to_numpy(values, name)
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} should be array-like, but got {name}={short_repr(values)}") from error


_INT64 = np.dtype(np.int64)
_FLOAT64 = np.dtype(np.float64)


def as_indices(indices: Any, name: str = "indices") -> npt.NDArray[np.int64]:
    """One-dimensional int64 array of slot numbers (range is checked by :func:`check_slots`)."""
    if type(indices) is np.ndarray and indices.dtype is _INT64 and indices.ndim == 1:
        return indices  # the general path returns this very array; drawn indices come here each batch
    array = to_numpy(indices, name)
    if array.ndim == 0:
        array = array.reshape(1)
    if array.ndim != 1:
        raise ValueError(f"{name} should be one-dimensional, but got shape {array.shape}")
    if array.dtype.kind not in "iu":
        if array.size == 0:
            return np.empty(0, dtype=np.int64)
        raise TypeError(f"{name} should hold integers, but got dtype {array.dtype} ({name}={array[:5]})")
    if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
        j = int(np.argmax(array > np.iinfo(np.int64).max))  # would wrap to a negative int64
        raise ValueError(f"{name} should be slot numbers, but got {name}[{j}]={int(array[j])}")
    return array.astype(np.int64, copy=False)


def as_priorities(priorities: Any, length: int, name: str = "priorities") -> npt.NDArray[np.float64]:
    """One-dimensional float64 array of ``length`` values (finiteness by :func:`check_slots`).

    The one conversion of every ``update_priorities`` (sampler, replay, device sampler, DDP
    sampler, methods, SB3): a scalar, shape ``(k,)`` or ``(k, 1)`` (what ``model(x)`` gives for
    one output per item, taken as its column); any other shape is refused by name."""
    if (
        type(priorities) is np.ndarray
        and priorities.dtype is _FLOAT64
        and priorities.ndim == 1
        and priorities.shape[0] == length
    ):
        return priorities  # the general path returns this very array, after checks it passes
    array = to_numpy(priorities, name)
    if array.dtype.kind not in "fiu":  # bool, complex, strings, objects: refused, not coerced
        raise TypeError(
            f"{name} should hold real numbers, but got dtype {array.dtype} ({name}={short_repr(array)})"
        )
    if array.ndim == 0:
        array = array.reshape(1)
    elif array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ValueError(
            f"{name} should be one-dimensional, of shape (k,) or (k, 1) with one value per index, "
            f"but got shape {array.shape}"
        )
    if array.shape[0] != length:
        raise ValueError(f"{name} should have one value per index ({length}), but got {array.shape[0]}")
    return array.astype(np.float64, copy=False)


@numba.njit(cache=True)
def _first_bad_priority(values: np.ndarray) -> int:
    """Index of the first value that is not finite and ``>= 0`` (NaN included); -1 if none."""
    for j in range(values.shape[0]):
        if not (values[j] >= 0.0 and values[j] < math.inf):
            return j
    return -1


def check_finite_priorities(values: npt.NDArray[np.float64], name: str = "priorities") -> None:
    """``ValueError`` naming the first entry of ``values`` that is not finite and ``>= 0``."""
    j = _first_bad_priority(values)
    if j >= 0:
        raise ValueError(f"{name} should be finite and >= 0, but got {name}[{j}]={float(values[j])!r}")


@numba.njit(cache=True)
def _first_problem(
    raw: np.ndarray, slots: np.ndarray, values: np.ndarray, need_filled: bool
) -> tuple[int, int]:
    for j in range(slots.shape[0]):
        slot = slots[j]
        if slot < 0 or slot >= raw.shape[0]:
            return _OUT_OF_RANGE, j
        if need_filled and math.isnan(raw[slot]):
            return _EMPTY_SLOT, j
    for j in range(values.shape[0]):
        if not (values[j] >= 0.0 and values[j] < math.inf):
            return _BAD_PRIORITY, j
    return 0, 0


_NO_VALUES = np.empty(0, dtype=np.float64)


def check_slots(
    raw: npt.NDArray[np.float64],
    slots: npt.NDArray[np.int64],
    priorities: npt.NDArray[np.float64] = _NO_VALUES,
    *,
    need_filled: bool = True,
) -> None:
    """Raise unless every slot is in range (and filled) and every priority finite and ``>= 0``."""
    code, j = _first_problem(raw, slots, priorities, need_filled)
    if code:
        raise_slot_problem(code, j, raw, slots, priorities)


def raise_slot_problem(
    code: int,
    j: int,
    raw: npt.NDArray[np.float64],
    slots: npt.NDArray[np.int64],
    priorities: npt.NDArray[np.float64],
) -> None:
    """Raise :func:`check_slots`'s error for ``(code, j)`` as ``_first_problem`` returns them (a
    compiled write that checks its input first returns the same pair); nothing for code 0."""
    if code == _OUT_OF_RANGE:
        raise ValueError(f"indices should lie in [0, {raw.shape[0]}), but got indices[{j}]={slots[j]}")
    if code == _EMPTY_SLOT:
        raise ValueError(f"indices should be slots that were added, but got indices[{j}]={slots[j]} (empty)")
    if code == _BAD_PRIORITY:
        raise ValueError(f"priorities should be finite and >= 0, but got priorities[{j}]={priorities[j]!r}")


@numba.njit(cache=True)
def _first_write_problem(raw: np.ndarray, slots: np.ndarray, values: np.ndarray) -> tuple[int, int, int]:
    for j in range(slots.shape[0]):
        if slots[j] < 0 or slots[j] >= raw.shape[0]:
            return _OUT_OF_RANGE, j, j
    filled = 0  # the position among the non-NaN values, which the message names
    for j in range(values.shape[0]):
        if not math.isnan(values[j]):
            if not (values[j] >= 0.0 and values[j] < math.inf):
                return _BAD_PRIORITY, filled, j
            filled += 1
    return 0, 0, 0


def check_write(
    raw: npt.NDArray[np.float64], slots: npt.NDArray[np.int64], values: npt.NDArray[np.float64]
) -> None:
    """Raise unless every slot is in range and every value NaN or finite and ``>= 0``: exactly
    ``check_slots(raw, slots, need_filled=False)`` then ``check_slots(raw, slots[filled],
    values[filled], need_filled=False)`` (``filled`` the non-NaN values), in one pass."""
    code, j, at = _first_write_problem(raw, slots, values)
    if code == _OUT_OF_RANGE:
        raise ValueError(f"indices should lie in [0, {raw.shape[0]}), but got indices[{j}]={slots[j]}")
    if code == _BAD_PRIORITY:
        raise ValueError(f"priorities should be finite and >= 0, but got priorities[{j}]={values[at]!r}")


def check_integer(value: Any, name: str) -> int:
    """``value`` as an ``int``; ``TypeError`` naming it unless it is an integer (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} should be an integer, but got {name}={short_repr(value)}")
    return int(value)


def check_positive_int(value: Any, name: str, minimum: int = 1, maximum: int | None = None) -> int:
    if type(value) is int and value >= minimum and (maximum is None or value <= maximum):
        return value  # the common case without the ABC check: sample(k) passes here every batch
    number = check_integer(value, name)
    if number < minimum or (maximum is not None and number > maximum):
        bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} should be an integer {bounds}, but got {name}={short_repr(value)}")
    return number


def check_seed(seed: Any) -> int:
    """A seed for ``np.random.default_rng``: an integer ``>= 0``."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed should be None or an integer >= 0, but got seed={short_repr(seed)}")
    if seed < 0:
        raise ValueError(f"seed should be None or an integer >= 0, but got seed={seed!r}")
    return int(seed)


def generator_from_seed(seed: Any) -> np.random.Generator:
    """``np.random.default_rng(seed)`` for an integer ``seed >= 0``; for ``None``, seeded by a draw
    from torch's global generator, as torch's ``RandomSampler`` is (reproducible under
    ``torch.manual_seed``)."""
    if seed is None:
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
    return np.random.default_rng(check_seed(seed))


def check_size(size: Any, capacity: int) -> int:
    """How many slots a sampler of ``capacity`` fills at construction: all of them for ``None``,
    else ``size``, an integer in ``[0, capacity]``."""
    if size is None:
        return capacity
    number = check_positive_int(size, "size", minimum=0)
    if number > capacity:
        raise ValueError(f"size should be at most capacity={capacity}, but got size={size!r}")
    return number


def real_scalar(value: Any) -> Any:
    """The Python number a 0-d torch tensor or numpy array of integers or floats holds (what
    TorchRL's parameter schedulers set), ``value`` itself otherwise (left to the caller's check)."""
    if isinstance(value, torch.Tensor):
        if value.ndim == 0 and not value.is_complex() and value.dtype != torch.bool:
            return value.item()
    elif isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "fiu":
        return value.item()
    return value


def check_real(value: Any, name: str, *, minimum: float, strict: bool = False) -> float:
    """``value`` (a real number or a 0-d tensor or array holding one) as a finite float
    ``>= minimum`` (``> minimum`` if ``strict``); ``TypeError``/``ValueError`` naming it."""
    value = real_scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} should be a real number, but got {name}={short_repr(value)}")
    number = float(value)
    ok = math.isfinite(number) and (number > minimum if strict else number >= minimum)
    if not ok:
        relation = ">" if strict else ">="
        raise ValueError(f"{name} should be finite and {relation} {minimum}, but got {name}={value!r}")
    return number


def check_num_samples(value: Any) -> int:
    """``num_samples`` is what ``len()`` returns, so it must fit in an index-sized integer."""
    return check_positive_int(value, "num_samples", maximum=sys.maxsize)


def check_lock(lock: Any) -> threading.RLock:
    """A fresh ``threading.RLock``, or ``lock`` if it is one.  A plain ``Lock`` is refused: the
    owner of a shared lock holds it around sampler calls, which take it again."""
    if lock is None:
        return threading.RLock()
    if not isinstance(lock, _thread.RLock):
        raise TypeError(
            f"lock should be a threading.RLock (reentrant: whoever holds it calls the sampler, "
            f"which takes it again), but got a {type(lock).__module__}.{type(lock).__qualname__}"
        )
    return lock


def state_float_array(value: Any, key: str, shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """A copy, as float64, of the floating-point array ``state_dict[key]`` of shape ``shape``."""
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        raise TypeError(
            f"state_dict {key} should be a floating-point numpy array, but got {key}={short_repr(value)}"
        )
    if value.shape != shape:
        raise ValueError(f"state_dict {key} should have shape {shape}, but got shape {value.shape}")
    return value.astype(np.float64)  # a copy: the caller's state is never shared


_PCG64_STATE_KEYS = {"bit_generator", "state", "has_uint32", "uinteger"}


def generator_from_state(value: Any) -> np.random.Generator:
    """A fresh generator in the saved PCG64 state (the kind ``np.random.default_rng`` makes)."""
    problem = f"state_dict rng should be a PCG64 bit-generator state, but got rng={short_repr(value)}"
    if not isinstance(value, dict) or set(value) != _PCG64_STATE_KEYS:
        raise ValueError(problem)
    inner, has_uint32, uinteger = value["state"], value["has_uint32"], value["uinteger"]
    words: list[Any] = []
    if isinstance(inner, dict) and set(inner) == {"state", "inc"}:
        words = [inner["state"], inner["inc"]]
    if not (
        isinstance(value["bit_generator"], str)
        and value["bit_generator"] == "PCG64"
        and len(words) == 2
        and all(type(w) is int and 0 <= w < 2**128 for w in words)
        and words[1] % 2 == 1  # PCG64's increment is odd
        and type(has_uint32) is int
        and has_uint32 in (0, 1)
        and type(uinteger) is int
        and 0 <= uinteger < 2**32
    ):
        raise ValueError(problem)
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = value
    return rng


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``choices``, else ``ValueError`` naming it."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} should be one of {choices}, but got {name}={short_repr(value)}")
    return value


def check_state_keys(state: Any, versions: tuple[int, ...], keys: Callable[[int], set[str]]) -> int:
    """The version of ``state``, a dict whose integer ``"version"`` is one of ``versions`` and
    whose keys are exactly ``keys(version)``; ``TypeError``/``ValueError`` naming the key."""
    if not isinstance(state, dict):
        raise TypeError(f"state_dict should be a dict, but got state_dict={short_repr(state)}")
    version = state.get("version")
    integral = isinstance(version, numbers.Integral) and not isinstance(version, bool)
    if not integral or version not in versions:
        raise ValueError(
            f"state_dict version should be one of {versions}, but got version={short_repr(version)}"
        )
    expected = keys(int(version))
    missing, extra = sorted(expected - set(state)), sorted(map(str, set(state) - expected))
    if missing:
        raise ValueError(f"state_dict is missing the key {missing[0]!r} (version {version})")
    if extra:
        raise ValueError(f"state_dict has unexpected keys {extra} (version {version})")
    return int(version)
